"""Completion checker: the generator's completions parsed, checked, measured and counted.

```
 completions ──► CompletionChecker ──cpl port──► TagTable (lookup by tag; release / advance)
 (its tags)        │
                   └──► counters, latency of each finished request (`measured`, `latency`),
                        the flushing read's return (`flush_returned`)
```
"""

from functools import reduce
from operator import or_

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream

from litepcie.common import phy_layout

from tlpx_gateware import tlp
from tlpx_gateware.cores.common import pattern_word
from tlpx_gateware.cores.generator.tags import cpl_port_layout

# (name, width) of the counters the checker keeps; the generator shows them as CSRs.
COUNTERS = [
    ("read_bytes",     64),
    ("completions",    64),
    ("lat_count",      64),
    ("lat_min",        32),
    ("lat_max",        32),
    ("lat_sum",        64),
    ("err_ur",         32),
    ("err_ca",         32),
    ("err_other",      32),
    ("err_poisoned",   32),
    ("err_unexpected", 32),
    ("err_mismatches", 32),
]


class CompletionChecker(LiteXModule):
    """Takes every completion for the generator's tags (never back-pressures the link).

    A completion of a tag with a read in flight is checked against that read: its status,
    EP bit, and, when ``check`` is set, every data DW against the pattern at the DW the read
    has reached (``cpl.dw``, so completions of different reads may interleave). The request's
    last completion (its Byte Count fits in it, PCIe Base spec 2.3.1.1) frees the tag and,
    when successful, measures the request's latency from its stamp (``cpl.time``); an earlier
    one advances the tag's DW address. A completion for the flushing read (``flush_tag``) is
    reported as ``flush_returned``; any other completion is counted as unexpected.

    The tag is in header DW2: in the first beat with 4 or more DWs per beat, in the second
    with two; nothing depends on it before then.
    """
    def __init__(self, data_width, tag_base, tags, flush_tag):
        n = data_width // 32
        self.sink = sink = stream.Endpoint(phy_layout(data_width))
        self.cpl  = Record(cpl_port_layout(tags))

        self.check          = Signal()    # check data against the pattern (the run is DW aligned)
        self.data_pattern   = Signal()    # PATTERN_COUNTER / PATTERN_PRBS
        self.seed           = Signal(32)
        self.now            = Signal(64)  # card cycle
        self.clear          = Signal()    # pulse: zero the counters
        self.flush_expected = Signal()    # the flushing read is in flight

        # Of the completion whose last beat is on the sink now.
        self.end            = Signal()    # its last beat
        self.ours           = Signal()    # for a read in flight (not the flushing read)
        self.flush_returned = Signal()    # pulse: the flushing read's completion ended
        self.measured       = Signal()    # pulse: a read completed successfully, its latency:
        self.latency        = Signal(64)  # cycles from its stamp

        for name, width in COUNTERS:
            setattr(self, name, Signal(width, name=name))

        # # #

        cpl = self.cpl
        self.comb += sink.ready.eq(1)  # never backpressures the link
        beat      = Signal(10)
        c_dw0     = Signal(32)
        c_dw1     = Signal(32)
        c_tag_reg = Signal(8)
        c_lower_reg = Signal(7)
        if n >= 4:
            dw0_now = sink.dat[0:32]
            dw1_now = sink.dat[32:64]
            dw2_now = sink.dat[64:96]
            c_dw0_v = Mux(sink.first, dw0_now, c_dw0)
            c_dw1_v = Mux(sink.first, dw1_now, c_dw1)
            c_tag   = Mux(sink.first, dw2_now[8:16], c_tag_reg)
            c_lower = Mux(sink.first, dw2_now[0:7], c_lower_reg)
            tag_known = C(1, 1)
        else:
            c_dw0_v = Mux(sink.first, sink.dat[0:32], c_dw0)
            c_dw1_v = Mux(sink.first, sink.dat[32:64], c_dw1)
            c_tag   = Mux(beat == 1, sink.dat[8:16], c_tag_reg)
            c_lower = Mux(beat == 1, sink.dat[0:7], c_lower_reg)
            tag_known = (beat != 0)
        self.sync += If(sink.valid,
            If(sink.first, c_dw0.eq(sink.dat[0:32]), c_dw1.eq(sink.dat[32:64])),
            c_tag_reg.eq(c_tag), c_lower_reg.eq(c_lower),
            beat.eq(Mux(sink.last, 0, beat + 1)),
        )
        c_length = Signal(11)
        c_status = Signal(3)
        c_ep     = Signal()
        c_bc     = Signal(13)
        self.comb += [
            c_length.eq(Mux(c_dw0_v[:10] == 0, 1024, c_dw0_v[:10])),
            c_ep.eq(c_dw0_v[14]),
            c_status.eq(c_dw1_v[13:16]),
            c_bc.eq(Mux(c_dw1_v[:12] == 0, 4096, c_dw1_v[:12])),
        ]
        t = cpl.tag
        self.comb += t.eq((c_tag - tag_base)[:len(t)])
        c_flush = Signal()
        self.comb += [
            c_flush.eq(tag_known & (c_tag == flush_tag)),
            self.ours.eq(cpl.busy & ~c_flush),
        ]
        c_ours = self.ours
        # Data check: DW p of the completion is expected to be pattern(cpl.dw + p).
        mismatches = Signal(max=n + 1)
        check = Signal()
        self.comb += check.eq(self.check & ~c_ep & (c_status == tlp.CPL_SC))
        # Two stages: each DW's expected word (the pattern's multiplies) is registered with the DW
        # and whether it is to be checked, and compared and counted a cycle later, so that the
        # pattern and the count's compare, sum and add are not one path (docs/resources.md).
        # A DW taken in the cycle of a clear is not counted, as before the stage.
        mismatch_bits = []
        checking = []
        for j in range(n):
            p = Signal(12, name=f"cpl_p{j}")
            self.comb += p.eq(beat * n + j - 3)
            to_check = Signal(name=f"cpl_check{j}")
            received = Signal(32, name=f"cpl_received{j}")
            expected = Signal(32, name=f"cpl_expected{j}")
            self.sync += [
                to_check.eq(sink.valid & tag_known & c_ours & check & (beat * n + j >= 3) & (p < c_length) & ~self.clear),
                received.eq(sink.dat[32*j:32*(j+1)]),
                expected.eq(pattern_word(self.data_pattern, self.seed, (cpl.dw + p)[:32])),
            ]
            bad = Signal(name=f"cpl_bad{j}")
            self.comb += bad.eq(to_check & (received != expected))
            mismatch_bits.append(bad)
            checking.append(to_check)
        self.comb += mismatches.eq(sum(mismatch_bits))
        # DWs taken and not yet compared: the generator is busy (cores/isolate.py).
        self.pending = Signal()
        self.comb += self.pending.eq(reduce(or_, checking))

        # End of a completion: update the tag, and on the request's last completion measure it.
        cpl_end = self.end
        req_end = Signal()
        latency = self.latency
        self.comb += [
            cpl_end.eq(sink.valid & sink.last),
            # Last completion of its request: the remaining Byte Count fits in it (2.3.1.1).
            req_end.eq((c_status != tlp.CPL_SC) | (c_bc + c_lower[:2] <= (c_length << 2))),
            latency.eq(self.now - cpl.time),
            cpl.release.eq(cpl_end & c_ours & req_end),
            cpl.advance.eq(cpl_end & c_ours & ~req_end),
            cpl.advance_dws.eq(c_length),
            self.flush_returned.eq(cpl_end & c_flush),
        ]
        measured = self.measured
        self.comb += measured.eq(cpl_end & c_ours & req_end & (c_status == tlp.CPL_SC))

        # Counters ---------------------------------------------------------------------------------
        stat = {name: getattr(self, name) for name, _ in COUNTERS}
        self.sync += [
            If(self.clear,
                *[s.eq(0) for s in stat.values()],
                stat["lat_min"].eq(0xFFFFFFFF),
            ).Else(
                If(sink.valid & sink.last, stat["completions"].eq(stat["completions"] + 1)),
                If(cpl_end & ~c_ours & ~(c_flush & self.flush_expected), stat["err_unexpected"].eq(stat["err_unexpected"] + 1)),
                If(cpl_end & c_ours & (c_status == tlp.CPL_UR), stat["err_ur"].eq(stat["err_ur"] + 1)),
                If(cpl_end & c_ours & (c_status == tlp.CPL_CA), stat["err_ca"].eq(stat["err_ca"] + 1)),
                If(cpl_end & c_ours & (c_status != tlp.CPL_SC) & (c_status != tlp.CPL_UR) & (c_status != tlp.CPL_CA),
                    stat["err_other"].eq(stat["err_other"] + 1)),
                If(cpl_end & c_ours & c_ep, stat["err_poisoned"].eq(stat["err_poisoned"] + 1)),
                stat["err_mismatches"].eq(stat["err_mismatches"] + mismatches),
                If(measured,
                    stat["read_bytes"].eq(stat["read_bytes"] + cpl.bytes),
                    stat["lat_count"].eq(stat["lat_count"] + 1),
                    stat["lat_sum"].eq(stat["lat_sum"] + latency),
                    If(latency < stat["lat_min"], stat["lat_min"].eq(latency)),
                    If(latency > stat["lat_max"], stat["lat_max"].eq(latency)),
                ),
            ),
        ]

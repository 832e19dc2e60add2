"""The card's PHY on real hardware: a LitePCIe vendor PHY seen the way the card sees SimPHY.

The card's blocks (tlp.py) work on LitePCIe's PHY layout with endianness "little": header DWs
as native 32-bit values, payload bytes little-endian in each DW, `first` marking a TLP's first
beat. LitePCIe's vendor PHYs differ in two ways this module hides:

- S7PCIEPHY (7-series hard IP) is endianness "big": header DWs are the same, but each payload
  DW has its bytes reversed (LitePCIe's own packetizer/depacketizer swap the payload only,
  litepcie/tlp/packetizer.py and depacketizer.py). `PayloadByteSwap` reverses the bytes of
  exactly the payload DWs (from DW 3 or DW 4 of the TLP, after the 3DW or 4DW header) in both
  directions.
- The 7-series PHY's receive stream leaves `first` at 0 (64 bits) or drops it (128-bit
  aligner); the card's request router and spy need it. `PayloadByteSwap` regenerates it from
  `last` (a TLP starts on the beat after a last beat, and the PHY delivers whole TLPs aligned
  to beat 0, as LitePCIe's own depacketizer also assumes).

USPCIEPHY (UltraScale hard IP, `pcie3_ultrascale`) is endianness "little" like the card, but
has four streams, as the hard IP has (CQ: the host's requests, RC: completions for the card's
requests, RQ: the card's requests, CC: the card's completions), behind LitePCIe's Verilog
adapters between TLPs and Xilinx's descriptors (litepcie/phy/xilinx_us). `UltraScaleStreams`
merges the two receive streams into one (whole TLPs, round robin), marks `first` (the 256-bit
adapters leave it 0), routes each transmitted TLP by type (completions to CC, the rest to RQ)
and, where LitePCIe's RQ adapter takes 4DW headers only (256 bits: the adapter places the
4DW header's DW3 at the descriptor's address, so a 3DW request would send its first payload
DW as the address; LitePCIe's own packetizer forces 4DW there for the same reason), widens
3DW memory requests to 4DW (`RequestWidener`). The card's blocks stay PHY-agnostic.

`HardwarePHY` is a plain Migen `Module` (not AutoCSR) on purpose: the vendor PHY's CSRs (link
status, MSI/bus-master enable, MPS/MRRS) are left out of the card's register map, so a board's
card has exactly the simulated card's map and map hash. Its link-up and configuration signals
are still here (`link_up`, `bus_master_enable`, `msi_enable`) for LEDs and later use.
"""

from migen import *
from migen.genlib.cdc import GrayCounter, GrayDecoder, MultiReg

from litex.soc.interconnect import stream
from litex.soc.interconnect.packet import Arbiter, Dispatcher

from litepcie.common import phy_layout

from tlpx_gateware.cores.ordering.core import COUNT_BITS, last_beats
from tlpx_gateware.tlp import NONPOSTED_TAG_LIMIT, TYPE_CPL, TYPE_CPL_LK, TYPE_MEM, TYPE_MEM_LK


def is_completion(dat):
    """First-beat test: the TLP is a completion (Type 01010 Cpl/CplD, 01011 locked)."""
    return (dat[24:29] == TYPE_CPL) | (dat[24:29] == TYPE_CPL_LK)


class RequestsLeaving(Module):
    """Counts the request TLPs (not completions) whose last beat leaves `endpoint` (sys)."""
    def __init__(self, endpoint):
        self.count = Signal(COUNT_BITS)

        # # #

        start = Signal(reset=1)
        request = Signal()                           # the TLP in progress is a request
        now = Signal()
        self.comb += now.eq(Mux(start, ~is_completion(endpoint.dat), request))
        self.sync += If(endpoint.valid & endpoint.ready,
            start.eq(endpoint.last),
            If(start, request.eq(~is_completion(endpoint.dat))),
            If(endpoint.last & now, self.count.eq(self.count + 1)),
        )


class PulseCount(Module):
    """A count, readable in `sys`, of the pulses of `pulse` in clock domain `domain` (a Gray
    counter crossing, so that the count read is never torn)."""
    def __init__(self, pulse, domain):
        self.count = Signal(COUNT_BITS)

        # # #

        self.submodules.counter = counter = ClockDomainsRenamer(domain)(GrayCounter(COUNT_BITS))
        self.comb += counter.ce.eq(pulse)
        synced = Signal(COUNT_BITS)
        self.specials += MultiReg(counter.q, synced, "sys")
        self.submodules.decoder = decoder = GrayDecoder(COUNT_BITS)
        self.comb += [decoder.i.eq(synced), self.count.eq(decoder.o)]


def _reverse_bytes(dw):
    return Cat(*[dw[8 * i:8 * (i + 1)] for i in reversed(range(4))])


def _reverse_bits(nibble):
    return Cat(*[nibble[i] for i in reversed(range(4))])


class PayloadByteSwap(Module):
    """sink -> source, reversing the bytes of payload DWs; `first` regenerated from `last`.

    A beat's DW j of beat k is TLP DW k*n + j (n = data_width/32); it is payload when that
    index is at least the header length, 3 or 4 DWs by Fmt bit 0 (DW0 bit 29) of the first beat.
    """
    def __init__(self, data_width):
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        ndws = data_width // 32
        # Beats that can hold header DWs: 64 bits -> beats 0 and 1; 128 or more -> beat 0.
        header_beats = (4 + ndws - 1) // ndws
        start        = Signal(reset=1)                            # next beat starts a TLP
        beat         = Signal(max=header_beats + 1)               # beat index, saturating
        four_dw      = Signal()                                   # this TLP has a 4DW header
        four_dw_now  = Signal()
        self.comb += four_dw_now.eq(Mux(start, sink.dat[29], four_dw))
        self.sync += If(sink.valid & sink.ready,
            start.eq(sink.last),
            If(start, four_dw.eq(sink.dat[29])),
            If(sink.last,
                beat.eq(0)
            ).Elif(beat != header_beats,
                beat.eq(beat + 1)
            )
        )

        self.comb += [
            sink.connect(source, omit={"first", "dat", "be"}),
            source.first.eq(start),
        ]
        for j in range(ndws):
            dat = sink.dat[32 * j:32 * (j + 1)]
            be  = sink.be[4 * j:4 * (j + 1)]
            payload = Signal(name=f"payload_dw{j}")
            # TLP DW index of this lane in beat `beat` (beats >= header_beats are all payload).
            cases = {}
            for k in range(header_beats):
                index = k * ndws + j
                cases[k] = payload.eq(0 if index < 3 else ~four_dw_now if index == 3 else 1)
            cases["default"] = payload.eq(1)
            self.comb += [
                Case(beat, cases),
                source.dat[32 * j:32 * (j + 1)].eq(Mux(payload, _reverse_bytes(dat), dat)),
                source.be[4 * j:4 * (j + 1)].eq(Mux(payload, _reverse_bits(be), be)),
            ]


class MarkFirst(Module):
    """sink -> source unchanged but for `first`, set on the beat after each `last` (whole TLPs,
    as LitePCIe's depacketizer also assumes)."""
    def __init__(self, data_width):
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        start = Signal(reset=1)
        self.sync += If(sink.valid & sink.ready, start.eq(sink.last))
        self.comb += [
            sink.connect(source, omit={"first"}),
            source.first.eq(start),
        ]


class WholeDwEnables(Module):
    """sink -> source with `be` set to 0xF on every DW of each TLP (its header and, per its
    Length field, its payload) and 0 on the beat's unused DWs: the card's convention (SimPHY
    and the 7-series PHY deliver whole DWs). LitePCIe's UltraScale adapters hand on the hard
    IP's byte enables instead (m_axis_cq/rc tuser byte_en: a 1-DW write with First BE 0010
    has `be` 0010, a zero-length write 0000), which would hide payload DWs from a block that
    counts DWs by `be`. `first` must mark each TLP's first beat."""
    def __init__(self, data_width):
        ndws = data_width // 32
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        fmt, length = sink.dat[29:32], sink.dat[0:10]
        first_total = Signal(11)    # DWs of the TLP starting in this beat
        total       = Signal(11)    # DWs of the TLP in progress
        base        = Signal(11)    # index of this beat's DW0 within the TLP
        self.comb += first_total.eq(3 + fmt[0] + Mux(fmt[1], Mux(length == 0, 1024, length), 0))
        self.sync += If(sink.valid & sink.ready,
            If(sink.first,
                total.eq(first_total),
                base.eq(ndws),
            ).Else(
                base.eq(base + ndws),
            )
        )
        self.comb += sink.connect(source, omit={"be"})
        for j in range(ndws):
            present = Mux(sink.first, j < first_total, base + j < total)
            self.comb += source.be[4 * j:4 * (j + 1)].eq(Mux(present, 0xF, 0))


class RequestWidener(Module):
    """sink -> source, 3DW memory requests (MRd32, MWr32, MRdLk32) rewritten as 4DW ones with
    the upper address DW 0 (PCIe Base spec 2.2.4.1: the 64-bit form of an address below 4 GiB);
    everything else passes unchanged. `first` must mark each TLP's first beat.

    A widened TLP has one DW more: the 0 goes in at DW2, so every later DW moves up one lane
    (the lane that falls off a beat is carried into the next), and a last beat whose top lane
    is used needs one beat more (the sink waits meanwhile).
    """
    def __init__(self, data_width):
        ndws = data_width // 32
        if ndws < 4:
            raise ValueError(f"RequestWidener needs the header's DW0..DW2 in one beat: 128 bits or more, not {data_width}")
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        def dw(d, j):
            return d[32 * j:32 * (j + 1)]

        def be(b, j):
            return b[4 * j:4 * (j + 1)]

        fmt, type_ = sink.dat[29:32], sink.dat[24:29]
        widen_now = Signal()     # this first beat starts a 3DW memory request
        shifting  = Signal()     # inside a widened TLP, after its first beat
        carry     = Signal(32)   # the top DW of the previous beat, and its byte enables
        carry_be  = Signal(4)
        extra     = Signal()     # emitting the beat that holds only the carried DW
        top_used  = Signal()
        self.comb += [
            widen_now.eq(sink.first & ~fmt[0] & ((type_ == TYPE_MEM) | (type_ == TYPE_MEM_LK))),
            top_used.eq(be(sink.be, ndws - 1) != 0),
        ]

        shifted_dat = Cat(carry, *[dw(sink.dat, j) for j in range(ndws - 1)])
        shifted_be  = Cat(carry_be, *[be(sink.be, j) for j in range(ndws - 1)])
        widened_dat = Cat(dw(sink.dat, 0) | (1 << 29), dw(sink.dat, 1), Constant(0, 32),
                          *[dw(sink.dat, j) for j in range(2, ndws - 1)])
        widened_be  = Cat(be(sink.be, 0), be(sink.be, 1), Constant(0xF, 4),
                          *[be(sink.be, j) for j in range(2, ndws - 1)])
        self.comb += [
            If(extra,
                source.valid.eq(1),
                source.first.eq(0),
                source.last.eq(1),
                source.dat.eq(carry),
                source.be.eq(carry_be),
                sink.ready.eq(0),
            ).Else(
                source.valid.eq(sink.valid),
                source.first.eq(sink.first),
                sink.ready.eq(source.ready),
                If(widen_now,
                    source.dat.eq(widened_dat),
                    source.be.eq(widened_be),
                    source.last.eq(sink.last & ~top_used),
                ).Elif(shifting,
                    source.dat.eq(shifted_dat),
                    source.be.eq(shifted_be),
                    source.last.eq(sink.last & ~top_used),
                ).Else(
                    source.dat.eq(sink.dat),
                    source.be.eq(sink.be),
                    source.last.eq(sink.last),
                ),
            ),
        ]
        self.sync += [
            If(extra,
                If(source.ready, extra.eq(0))
            ).Elif(sink.valid & sink.ready,
                carry.eq(dw(sink.dat, ndws - 1)),
                carry_be.eq(be(sink.be, ndws - 1)),
                If(widen_now | shifting,
                    shifting.eq(~sink.last),
                    extra.eq(sink.last & top_used),
                ),
            ),
        ]


class IpTagGuard(Module):
    """The UltraScale hard IP keeps every non-posted request in its Split Completion Table
    until the request's last completion, or its own completion timeout (PG156: it then hands
    the user a completion with error code "timeout"; LitePCIe's RC adapter passes it on as a
    completion without data). A requester of the card that gives up a read sooner (its own
    timeout) and sends the same tag again would send a tag the IP still holds: cocotbext-pcie
    stops at "active tag reused", what the IP would do is undefined.

    So: a non-posted request whose tag the IP still holds waits here (and the requests behind
    it: the stream is in order) until the IP lets the tag go; the completion that lets it go
    belongs to the old request and is dropped (`stale_completions`). A wait longer than
    `max_wait` cycles (an IP whose timeout never comes) lets the request go and is counted
    (`forced`). Completions and requests are seen in the card's convention (`first` marked)."""
    def __init__(self, data_width, max_wait=1 << 24):
        if data_width < 128:
            raise ValueError(f"IpTagGuard reads the header from the first beat: 128 bits or more, not {data_width}")
        layout = phy_layout(data_width)
        self.req_sink,  self.req_source = stream.Endpoint(layout), stream.Endpoint(layout)
        self.cpl_sink,  self.cpl_source = stream.Endpoint(layout), stream.Endpoint(layout)
        self.stale_completions = Signal(32)
        self.forced = Signal(32)

        # # #

        held = Signal(NONPOSTED_TAG_LIMIT)           # tags the IP holds
        req, cpl = self.req_sink, self.cpl_sink

        # Requests: a non-posted one (no data: MRd, MRdLk) whose tag is held waits.
        req_tag = req.dat[40:48]
        nonposted = req.first & ~req.dat[30]
        blocked = Signal()
        waited = Signal(max=max_wait + 1)
        self.comb += [
            blocked.eq(req.valid & nonposted & (held >> req_tag)[0] & (waited != max_wait)),
            req.connect(self.req_source, omit={"valid", "ready"}),
            self.req_source.valid.eq(req.valid & ~blocked),
            req.ready.eq(self.req_source.ready & ~blocked),
        ]
        self.sync += If(blocked, waited.eq(waited + 1)).Else(waited.eq(0))

        # Completions: the last one of a request lets its tag go. A completion is the last when
        # its status is not SC, it carries no data, or its Byte Count is within its payload
        # (PCIe Base spec 2.3.1.1). One for the tag a request waits on belongs to the old
        # request: dropped.
        cpl_tag = cpl.dat[72:80]
        status, byte_count = cpl.dat[45:48], cpl.dat[32:44]
        length, lower = cpl.dat[0:10], cpl.dat[64:66]
        final = Signal()
        stale = Signal()
        self.comb += [
            # Byte Count 0 means 4096, Length 0 means 1024 DWs.
            final.eq((status != 0) | ~cpl.dat[30] |
                     (Mux(byte_count == 0, 4096, byte_count) <= Cat(C(0, 2), Mux(length == 0, 1024, length)) - lower)),
            stale.eq(blocked & (cpl_tag == req_tag)),
        ]
        dropping = Signal()
        drop_now = Signal()
        self.comb += [
            drop_now.eq(Mux(cpl.first, stale, dropping)),
            cpl.connect(self.cpl_source, omit={"valid", "ready"}),
            self.cpl_source.valid.eq(cpl.valid & ~drop_now),
            cpl.ready.eq(self.cpl_source.ready | drop_now),
        ]
        self.sync += If(cpl.valid & cpl.ready & cpl.first,
            dropping.eq(stale & ~cpl.last),
            If(stale, self.stale_completions.eq(self.stale_completions + 1)),
        ).Elif(cpl.valid & cpl.ready & cpl.last,
            dropping.eq(0),
        )

        release = Signal(NONPOSTED_TAG_LIMIT)
        take = Signal(NONPOSTED_TAG_LIMIT)
        self.comb += [
            release.eq(Mux(cpl.valid & cpl.ready & cpl.first & final, 1 << cpl_tag[:6], 0) |
                       Mux(req.valid & nonposted & (waited == max_wait), 1 << req_tag[:6], 0)),
            take.eq(Mux(self.req_source.valid & self.req_source.ready & nonposted, 1 << req_tag[:6], 0)),
        ]
        self.sync += [
            held.eq((held & ~release) | take),
            If(req.valid & nonposted & (waited == max_wait) & (held >> req_tag)[0],
                self.forced.eq(self.forced + 1)),
        ]


class UltraScaleStreams(Module):
    """USPCIEPHY's four streams as the card's two (`sink` card -> host, `source` host -> card).

    Receive: CQ (the host's requests) and RC (completions) merged by whole TLPs, `first`
    marked, `be` set per DW (WholeDwEnables). Transmit: completions (Type 01010 / 01011) to CC,
    everything else to RQ, through a RequestWidener where `widen_requests` (LitePCIe's 256-bit
    RQ adapter). Requests and completions pass an IpTagGuard (no tag the IP still holds is sent
    again); completions wait for the requests before them (pcie_rq_seq_num)."""
    def __init__(self, vendor_phy, widen_requests, order_timeout=1024):
        data_width = vendor_phy.data_width
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        self.submodules.tag_guard = guard = IpTagGuard(data_width)
        self.submodules.cq_first = cq_first = MarkFirst(data_width)
        self.submodules.rc_first = rc_first = MarkFirst(data_width)
        self.comb += [
            vendor_phy.req_source.connect(cq_first.sink),
            vendor_phy.cmp_source.connect(rc_first.sink),
            rc_first.source.connect(guard.cpl_sink),
        ]
        merged = stream.Endpoint(phy_layout(data_width))
        self.submodules.rx_arbiter = Arbiter([cq_first.source, guard.cpl_source], merged)
        self.submodules.rx_enables = rx_enables = WholeDwEnables(data_width)
        # A register stage before the card: the guard's drop decision (a completion's status,
        # byte count and tag against the request it is held for), the merge and the byte
        # enables are otherwise one path with LitePCIe's depacketizer and its completion
        # reordering FIFOs behind them (docs/resources.md). A TLP arrives a cycle later.
        self.submodules.rx_pipe = rx_pipe = stream.PipeValid(phy_layout(data_width))
        self.comb += [merged.connect(rx_enables.sink), rx_enables.source.connect(rx_pipe.sink),
                      rx_pipe.source.connect(source)]

        requests = stream.Endpoint(phy_layout(data_width))
        completions = stream.Endpoint(phy_layout(data_width))
        self.submodules.tx_dispatcher = dispatcher = Dispatcher(sink, [requests, completions])
        self.comb += dispatcher.sel.eq(is_completion(sink.dat))

        # Requests the IP has taken past its ordering point: it pulses pcie_rq_seq_num_vld once
        # per request TLP at the point where nothing from the user can overtake it (PG156,
        # "Maintaining Transaction Order"). LitePCIe leaves the output open; it is counted here.
        seq_num_vld = Signal()
        vendor_phy.pcie_phy_params["o_pcie_rq_seq_num_vld"] = seq_num_vld
        self.submodules.seq_nums = seq_nums = PulseCount(seq_num_vld, "pcie")
        self.requests_done = seq_nums.count

        # A completion waits until the requests dispatched before it have passed that point:
        # CC and RQ are separate interfaces of the IP, merged inside it, so a completion could
        # otherwise pass an earlier posted write (PCIe Base spec 2.4.1). After `order_timeout`
        # cycles it goes anyway (a request lost in the PHY must not hold completions for ever)
        # and the loss is forgotten.
        dispatched = Signal(COUNT_BITS)
        self.sync += If(last_beats(requests), dispatched.eq(dispatched + 1))
        skew = Signal(COUNT_BITS)
        waited = Signal(max=order_timeout + 1)
        self.cc_timeouts = Signal(32)
        behind = Signal()
        self.comb += behind.eq(((self.requests_done + skew) - dispatched)[COUNT_BITS - 1])
        hold = Signal()
        started = Signal()                                   # the completion in progress began
        self.comb += hold.eq(completions.valid & ~started & behind & (waited != order_timeout))
        self.sync += [
            If(completions.valid & completions.ready, started.eq(~completions.last)),
            If(completions.valid & ~started & behind,
                If(waited == order_timeout,
                    skew.eq(dispatched - self.requests_done),
                    self.cc_timeouts.eq(self.cc_timeouts + 1),
                    waited.eq(0),
                ).Else(
                    waited.eq(waited + 1),
                )
            ).Else(
                waited.eq(0),
            ),
        ]
        self.comb += [
            completions.connect(vendor_phy.cmp_sink, omit={"valid", "ready"}),
            vendor_phy.cmp_sink.valid.eq(completions.valid & ~hold),
            completions.ready.eq(vendor_phy.cmp_sink.ready & ~hold),
        ]
        # A register stage before the guard: its tag check (a request's tag against the tags the
        # IP holds) decides both whether the request goes and whether a completion is dropped,
        # so without it the transmit path's FIFOs and arbiter reached the receive path's
        # registers in one cycle (the KCU105's deepest path: docs/resources.md).
        self.submodules.req_pipe = req_pipe = stream.PipeValid(phy_layout(data_width))
        self.comb += [requests.connect(req_pipe.sink), req_pipe.source.connect(guard.req_sink)]
        if widen_requests:
            self.submodules.widener = widener = RequestWidener(data_width)
            self.comb += [guard.req_source.connect(widener.sink), widener.source.connect(vendor_phy.req_sink)]
        else:
            self.comb += guard.req_source.connect(vendor_phy.req_sink)


class HardwarePHY(Module):
    """The interface of sim.simphy.SimPHY, on a LitePCIe vendor PHY (S7PCIEPHY, USPCIEPHY).

    Attributes the card uses: data_width, endianness ("little"), qword_aligned, sink, source,
    msi, id, bar0_size, bar0_mask, max_request_size, max_payload_size, requests_done (the
    request TLPs that have left, cores/ordering); and, as SimPHY, bus_master_enable and
    msi_enable; plus link_up and `vendor` (the LitePCIe PHY itself).
    """
    endianness    = "little"
    qword_aligned = False

    def __init__(self, vendor_phy, widen_requests=False):
        if vendor_phy.qword_aligned:
            raise ValueError("qword-aligned PHYs are not supported by the card")
        self.submodules.vendor = phy = vendor_phy
        self.data_width       = phy.data_width
        self.bar0_size        = phy.bar0_size
        self.bar0_mask        = phy.bar0_mask
        self.id               = phy.id
        self.max_request_size = phy.max_request_size
        self.max_payload_size = phy.max_payload_size
        self.msi              = phy.msi
        self.link_up           = phy._link_status.fields.status
        self.msi_enable        = phy._msi_enable.status

        if hasattr(phy, "req_sink"):
            # UltraScale: split request/completion streams, endianness "little".
            self.submodules.streams = streams = UltraScaleStreams(phy, widen_requests)
            self.source, self.sink = streams.source, streams.sink
            self.requests_done = streams.requests_done
            # cfg_function_status bits of PF0 (PG156): 0 I/O Space, 1 Memory Space, 2 Bus Master
            # Enable, 3 INTx Disable. LitePCIe 2024.12's CSR takes bit 0 (I/O Space Enable, which
            # a host leaves off for a card without I/O BARs); the card reads bit 2.
            self.bus_master_enable = Signal()
            self.specials += MultiReg(phy.pcie_phy_params["o_cfg_function_status"][2], self.bus_master_enable, "sys")
            # Multi-message MSI: PF0's Multiple Message Enable (cfg_interrupt_msi_mmenable[2:0],
            # LitePCIe leaves it open) to the card, which numbers its vectors within the grant;
            # the wrapper sends the card's number (litepcie_us.py's MSI encoder fix).
            mmenable = Signal(12)
            phy.pcie_phy_params["o_cfg_interrupt_msi_mmenable"] = phy.add_resync(mmenable, "sys")
            self.msi_multiple_enable = mmenable[0:3]
            return
        if widen_requests:
            raise ValueError("request widening is for UltraScale PHYs (split request/completion streams)")
        self.bus_master_enable = phy._bus_master_enable.status
        self._offer_interrupt_vectors(phy)
        if phy.endianness != "big":
            raise NotImplementedError(f"a shared-stream PHY must have endianness 'big' (S7PCIEPHY), not {phy.endianness!r}")
        self.submodules.rx_swap = rx = PayloadByteSwap(phy.data_width)
        self.submodules.tx_swap = tx = PayloadByteSwap(phy.data_width)
        self.comb += [
            phy.source.connect(rx.sink),
            tx.source.connect(phy.sink),
        ]
        self.source, self.sink = rx.source, tx.sink
        # pcie_7x has one transmit interface for requests and completions, and no report of a
        # request's progress inside it: requests are counted as LitePCIe's PHY takes them
        # (before its clock-domain crossing; docs/boards.md says what this leaves unordered).
        self.submodules.leaving = leaving = RequestsLeaving(tx.source)
        self.requests_done = leaving.count

    def _offer_interrupt_vectors(self, phy):
        """pcie_7x: 32 MSI vectors and the MSI-X capability (offer_msix), with what the host
        enabled brought to the card as SimPHY gives it. LitePCIe's S7PCIEPHY configures one
        MSI vector and leaves cfg_interrupt_mmenable and cfg_interrupt_msixfm unconnected; the
        card needs them (cores/msi.py folds vectors above the grant; cores/msix.py holds messages
        while the function is masked). The message number of a multi-message MSI is
        cfg_interrupt_di, the card's msi.dat (PG054: the core puts it in the low bits of the
        message data the MME leaves to the function). MSI-X messages are the card's own memory
        writes (its table), as LitePCIe's msi-x mode expects of user logic."""
        self.msi_multiple_enable = Signal(3)    # MSI's Multiple Message Enable: 1 << this granted
        self.msix_function_mask  = Signal()
        self.msix_enable         = phy._msix_enable.status
        phy.pcie_phy_params.update(
            o_cfg_interrupt_mmenable = phy.add_resync(self.msi_multiple_enable, "sys"),
            o_cfg_interrupt_msixfm   = phy.add_resync(self.msix_function_mask, "sys"),
        )
        phy.update_config({"Multiple_Message_Capable": "32_vectors"})

    def offer_msix(self, table_offset, pba_offset, vectors):
        """The MSI-X capability of pcie_7x pointing at the card's table and PBA in BAR0 (the
        card calls this with its window's offsets). Table Size is written as N-1, the value of
        Message Control[10:0] (PG054 says the parameter is transferred there; LitePCIe's own
        msi-x mode writes 0x20 for its 32 entries: docs/hardware.md says how bring-up settles
        it). Only on pcie_7x: LitePCIe's UltraScale wrapper has no MSI-X ports."""
        if not hasattr(self, "msi_multiple_enable"):
            return
        self.vendor.update_config({
            "mode_selection":    "Advanced",
            "MSIx_Enabled":      True,
            "MSIx_Table_Size":   f"{vectors - 1:03X}",
            "MSIx_Table_BIR":    "BAR_0",
            "MSIx_Table_Offset": f"{table_offset:X}",
            "MSIx_PBA_BIR":      "BAR_0",
            "MSIx_PBA_Offset":   f"{pba_offset:X}",
        })

"""Traffic generator: DMA reads and writes of host memory, instrumented in hardware.

The generator builds its TLPs itself at the PHY level rather than through LitePCIe's
requester, because an exerciser needs every header field under control: forced 4DW
headers below 4 GiB, byte enables for any byte offset, the relaxed-ordering and no-snoop
attributes, its own tags and completion matching, per-request latency, and counting of
error completions, poisoned data and completion timeouts.

```
 CSRs ──► WriteEngine ──MWr beats──► TX arbiter ──► PHY
      ──► ReadEngine  ──MRd beats──►
           free tag ▲ │ issue (tag, address, stamp)
                    │ ▼
                  TagTable ◄──── TimeoutScan (one tag per cycle)          tags.py
                    ▲ │ lookup by tag; release / advance
                    │ ▼
 PHY ──► CompletionDispatcher ──(tags TAG_BASE..)──► CompletionChecker ──► counters,  checker.py
                              └─(other tags)──► LitePCIe       latency min/max/sum,
                                                               log2 histogram, sample FIFO
```

Transfers: transfer n starts at base + ((i(n) << stride_log2) & window_mask) + offset, where
i(n) is n (sequential), 0 (fixed) or an LFSR value (random); each transfer is cut into
requests that end on request-size (reads) or payload-size (writes) boundaries, so none
crosses 4 KiB (PCIe Base spec 2.2.7). Data: the DW at byte address a holds
pattern(a / 4) (counter: a/4 + seed; prbs: lowbias32(a/4 ^ seed)); reads are checked
against it, so completions can arrive in any order.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.integration.doc import ModuleDoc

from litepcie.common import phy_layout

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware import tlp
from tlpx_gateware.cores.common import Log2Histogram, pattern_word, PATTERN_COUNTER, PATTERN_PRBS
from tlpx_gateware.cores.lease import Lease
from tlpx_gateware.cores.generator.checker import COUNTERS as CHECKER_COUNTERS, CompletionChecker
from tlpx_gateware.cores.generator.tags import TagTable, TimeoutScan

# The card's non-posted tags all lie below tlp.NONPOSTED_TAG_LIMIT (soc.py checks the plan):
# LitePCIe's requester 0..7, the generator 16..48, the real-time loop 49, the slot 56..63.
TAG_BASE  = 16
TAGS      = 32
FLUSH_TAG = TAG_BASE + TAGS  # the flushing read that ends a run with writes

OP_READ       = 0
OP_WRITE      = 1
OP_READ_WRITE = 2
OP_WRITE_READ = 3

ADDR_SEQUENTIAL = 0
ADDR_FIXED      = 1
ADDR_RANDOM     = 2

ENDED_COUNT    = 1
ENDED_DURATION = 2
ENDED_STOP     = 3

SAMPLE_FIFO_DEPTH = 1024
# The largest transfer_size the host may give (bytes), and the latency histogram's buckets.
MAX_TRANSFER_BYTES = 65536
HISTOGRAM_BUCKETS  = 32

# Request engine (one for writes, one for reads) ---------------------------------------------------

class RequestEngine(LiteXModule):
    """Walks transfers and emits one request TLP after another, back to back.

    The next request's header is computed while the current one is on the wire, so requests
    leave with no idle beat between them unless idle cycles are asked for.
    """
    def __init__(self, data_width, is_write, cfg, requester_id, write_tag=None):
        n, source, write_tag = self._add_ports(data_width, write_tag)
        (addr, beat, cur_tag, idle, index, last_beat, lfsr, lfsr_next, nbytes, next_addr,
         remaining, started, tag, tr_start) = self._add_request(
            is_write, cfg, requester_id, write_tag, n, source)
        accepted, can_issue, count_reached, duration_reached, finished_transfer, fsm = self._add_sequencing(
            is_write, cfg, addr, beat, index, lfsr, lfsr_next, nbytes, next_addr, remaining, source, started, tr_start)
        self._add_emit_states(
            cfg, accepted, addr, beat, can_issue, count_reached, cur_tag, duration_reached, finished_transfer, fsm,
            idle, index, last_beat, lfsr, lfsr_next, nbytes, next_addr, remaining, source, started, tag, tr_start)

    def _add_ports(self, data_width, write_tag):
        """``write_tag``: the tag a write engine stamps into its MWrs (a posted write's tag is
        not used by PCIe: the spy attributes the write to its block by it), default the
        generator's first tag."""
        n = data_width // 32
        write_tag = TAG_BASE if write_tag is None else write_tag
        self.source = source = stream.Endpoint(phy_layout(data_width))

        self.start    = Signal()  # pulse: begin
        self.stop     = Signal()  # pulse: stop issuing
        self.enable   = Signal()  # this engine takes part in the run
        self.busy     = Signal()  # issuing
        self.elapsed  = Signal(64)  # cycles since start (from the core)

        # Reads only: tag gating and issue notification.
        self.tag_free     = Signal()          # a tag is free and outstanding < max
        self.free_tag     = Signal(max=TAGS)  # lowest free tag
        self.issued       = Signal()          # pulse: a request left (last beat accepted)
        self.issued_tag   = Signal(max=TAGS)
        self.issued_addr  = Signal(64)
        self.issued_bytes = Signal(13)

        # Write-then-read: the writer hands each finished transfer to the reader.
        self.follow       = Signal()     # reader: take transfers from hand_* instead of own
        self.hand_valid   = Signal()
        self.hand_ready   = Signal()
        self.hand_addr    = Signal(64)
        self.pause_after_transfer = Signal()  # writer: wait for `resume` after each transfer
        self.resume       = Signal()
        self.transfer_done = Signal()   # pulse: the last request of a transfer left
        self.transfer_started = Signal()  # pulse: the first beat of a transfer left
        self.transfer_addr = Signal(64)  # its start address

        # Counters of this engine.
        self.requests     = Signal(64)
        self.bytes        = Signal(64)
        self.transfers    = Signal(64)
        self.ended_by     = Signal(2)
        return n, source, write_tag

    def _add_request(self, is_write, cfg, requester_id, write_tag, n, source):
        # # #

        index     = Signal(32)
        lfsr      = Signal(32, reset=1)
        addr      = Signal(64)
        tr_start  = Signal(64)
        remaining = Signal(18)
        beat      = Signal(10)
        idle      = Signal(32)
        cur_tag   = Signal(max=TAGS)
        started   = Signal(64)  # transfers started

        size_log2 = cfg.payload_size_log2 if is_write else cfg.request_size_log2

        # Address of transfer `i`.
        def transfer_address(i):
            slot = Signal(64)
            return slot, [slot.eq(cfg.base + ((i << cfg.stride_log2) & cfg.window_mask) + cfg.offset)]

        seq_i = Signal(32)
        self.comb += Case(cfg.address_pattern, {
            ADDR_SEQUENTIAL: seq_i.eq(index),
            ADDR_FIXED:      seq_i.eq(0),
            ADDR_RANDOM:     seq_i.eq(lfsr),
            "default":       seq_i.eq(index),
        })
        next_addr, stmts = transfer_address(seq_i)
        self.comb += stmts
        lfsr_next = Signal(32)  # Galois LFSR, x^32 + x^22 + x^2 + x + 1
        self.comb += lfsr_next.eq(Mux(lfsr[0], (lfsr >> 1) ^ 0x80200003, lfsr >> 1))

        # The current request ---------------------------------------------------------------------
        max_size = Signal(14)
        room     = Signal(14)
        nbytes   = Signal(14)
        dws      = Signal(11)
        first_be = Signal(4)
        last_be  = Signal(4)
        end_addr = Signal(2)
        hdr4     = Signal()
        first_be_full = Signal(4)
        last_be_full  = Signal(4)
        self.comb += [
            Case(addr[:2], {0: first_be_full.eq(0xf), 1: first_be_full.eq(0xe), 2: first_be_full.eq(0xc), 3: first_be_full.eq(0x8)}),
            Case(end_addr, {0: last_be_full.eq(0x1), 1: last_be_full.eq(0x3), 2: last_be_full.eq(0x7), 3: last_be_full.eq(0xf)}),
        ]
        self.comb += [
            max_size.eq(1 << size_log2),
            room.eq(max_size - (addr[:14] & (max_size - 1))),
            nbytes.eq(Mux(remaining < room, remaining, room)),
            dws.eq((addr[:2] + nbytes + 3) >> 2),
            end_addr.eq(addr[:2] + nbytes - 1),
            If(dws == 1,
                first_be.eq(first_be_full & last_be_full),
                last_be.eq(0),
            ).Else(
                first_be.eq(first_be_full),
                last_be.eq(last_be_full),
            ),
            hdr4.eq(cfg.addr64 | (addr[32:] != 0)),
        ]
        tag = Signal(max=TAGS)
        self.comb += tag.eq(Mux(beat == 0, self.free_tag, cur_tag))
        fmt = Signal(3)
        self.comb += fmt.eq(Cat(hdr4, C(int(is_write), 1), C(0, 1)))
        dw0 = Cat(dws[:10], C(0, 2), cfg.no_snoop, cfg.relaxed_ordering, C(0, 10), C(tlp.TYPE_MEM, 5), fmt)
        # The tag through a sized signal: a sum's width follows its operands (with TAG_BASE 16
        # and 32 tags, 6 bits), and inside Cat a narrower field moves the requester ID down.
        wire_tag = Signal(8)
        self.comb += wire_tag.eq(tag + TAG_BASE)
        dw1 = Cat(first_be, last_be, wire_tag if not is_write else C(write_tag, 8), requester_id)
        hdr = Array([
            dw0, dw1,
            Mux(hdr4, addr[32:], Cat(C(0, 2), addr[2:32])),
            Cat(C(0, 2), addr[2:32]),
        ])
        header_dws = Signal(3)
        total_dws  = Signal(12)
        self.comb += [
            header_dws.eq(Mux(hdr4, 4, 3)),
            total_dws.eq(header_dws + (dws if is_write else 0)),
        ]
        last_beat = Signal()
        self.comb += last_beat.eq((beat + 1) * n >= total_dws)

        # Beat contents: header DWs, then payload DWs from the pattern.
        payload_base = Signal(32)
        self.comb += payload_base.eq(addr[2:34] + beat * n - header_dws)
        # Sum of the payload DWs of the current beat (writes): what a consumer of the data
        # would checksum (the real-time loop uses it).
        self.beat_payload_sum = Signal(32)
        payload_words = []
        for j in range(n):
            d = Signal(12, name=f"slot{j}")
            self.comb += d.eq(beat * n + j)
            word = Signal(32, name=f"word{j}")
            if is_write:
                self.comb += word.eq(Mux(d < header_dws, hdr[d[:2]],
                    pattern_word(cfg.data_pattern, cfg.seed, (payload_base + j)[:32])))
                payload_words.append(Mux((d >= header_dws) & (d < total_dws), word, 0))
            else:
                self.comb += word.eq(hdr[d[:2]])
            self.comb += [
                source.dat[32*j:32*(j+1)].eq(word),
                source.be[4*j:4*(j+1)].eq(Mux(d < total_dws, 0xf, 0)),
            ]
        if is_write:
            self.comb += self.beat_payload_sum.eq(sum(payload_words)[:32])
        self.comb += [
            source.first.eq(beat == 0),
            source.last.eq(last_beat),
        ]
        return addr, beat, cur_tag, idle, index, last_beat, lfsr, lfsr_next, nbytes, next_addr, remaining, started, tag, tr_start

    def _add_sequencing(self, is_write, cfg, addr, beat, index, lfsr, lfsr_next, nbytes, next_addr, remaining, source,
                        started, tr_start):
        # Termination ----------------------------------------------------------------------------
        count_reached    = Signal()
        duration_reached = Signal()
        self.comb += [
            count_reached.eq((cfg.count != 0) & (started >= cfg.count)),
            duration_reached.eq((cfg.duration != 0) & (self.elapsed >= cfg.duration)),
        ]

        # Sequencing -------------------------------------------------------------------------------
        accepted = Signal()
        self.comb += accepted.eq(source.valid & source.ready)
        finished_transfer = Signal()
        self.comb += finished_transfer.eq(remaining == nbytes)

        self.fsm = fsm = FSM(reset_state="IDLE")
        fsm.act("IDLE",
            # Every run starts from zero, also for an engine that does not take part in it.
            If(self.start,
                NextValue(index, 0),
                NextValue(lfsr, Mux(cfg.seed == 0, 1, cfg.seed)),
                NextValue(started, 0),
                NextValue(self.requests, 0),
                NextValue(self.bytes, 0),
                NextValue(self.transfers, 0),
                NextValue(self.ended_by, 0),
                If(self.enable,
                    NextState("NEXT-TRANSFER")
                )
            )
        )
        fsm.act("NEXT-TRANSFER",
            self.busy.eq(1),
            If(self.stop,
                NextValue(self.ended_by, ENDED_STOP),
                NextState("IDLE")
            ).Elif(count_reached,
                NextValue(self.ended_by, ENDED_COUNT),
                NextState("IDLE")
            ).Elif(duration_reached,
                NextValue(self.ended_by, ENDED_DURATION),
                NextState("IDLE")
            ).Elif(self.follow,
                self.hand_ready.eq(1),
                If(self.hand_valid,
                    NextValue(addr, self.hand_addr),
                    NextValue(tr_start, self.hand_addr),
                    NextValue(remaining, cfg.transfer_size),
                    NextValue(started, started + 1),
                    NextValue(beat, 0),
                    NextState("EMIT")
                )
            ).Else(
                NextValue(addr, next_addr),
                NextValue(tr_start, next_addr),
                NextValue(remaining, cfg.transfer_size),
                NextValue(index, index + 1),
                NextValue(lfsr, lfsr_next),
                NextValue(started, started + 1),
                NextValue(beat, 0),
                NextState("EMIT")
            )
        )
        can_issue = Signal()
        self.comb += can_issue.eq(1 if is_write else self.tag_free | (beat != 0))
        return accepted, can_issue, count_reached, duration_reached, finished_transfer, fsm

    def _add_emit_states(self, cfg, accepted, addr, beat, can_issue, count_reached, cur_tag, duration_reached,
                         finished_transfer, fsm, idle, index, last_beat, lfsr, lfsr_next, nbytes, next_addr, remaining,
                         source, started, tag, tr_start):
        fsm.act("EMIT",
            self.busy.eq(1),
            source.valid.eq(can_issue),
            If(accepted,
                If(beat == 0,
                    NextValue(cur_tag, tag),
                ),
                NextValue(beat, beat + 1),
                If(last_beat,
                    self.issued.eq(1),
                    NextValue(beat, 0),
                    NextValue(self.requests, self.requests + 1),
                    NextValue(self.bytes, self.bytes + nbytes),
                    If(finished_transfer,
                        self.transfer_done.eq(1),
                        NextValue(self.transfers, self.transfers + 1),
                        If(self.pause_after_transfer,
                            NextState("WAIT-RESUME")
                        ).Elif(cfg.idle_cycles != 0,
                            NextValue(idle, cfg.idle_cycles),
                            NextState("IDLE-CYCLES")
                        ).Elif(self.follow | self.stop | count_reached | duration_reached,
                            NextState("NEXT-TRANSFER")
                        ).Else(
                            # Straight into the next transfer: no idle beat between transfers.
                            NextValue(addr, next_addr),
                            NextValue(tr_start, next_addr),
                            NextValue(remaining, cfg.transfer_size),
                            NextValue(index, index + 1),
                            NextValue(lfsr, lfsr_next),
                            NextValue(started, started + 1),
                        )
                    ).Else(
                        NextValue(addr, addr + nbytes),
                        NextValue(remaining, remaining - nbytes),
                        If(self.stop,
                            NextValue(self.ended_by, ENDED_STOP),
                            NextState("IDLE")
                        ).Elif(cfg.idle_cycles != 0,
                            NextValue(idle, cfg.idle_cycles),
                            NextState("IDLE-CYCLES-MID")
                        )
                    )
                )
            )
        )
        fsm.act("IDLE-CYCLES",
            self.busy.eq(1),
            NextValue(idle, idle - 1),
            If(idle == 1, NextState("NEXT-TRANSFER"))
        )
        fsm.act("IDLE-CYCLES-MID",
            self.busy.eq(1),
            NextValue(idle, idle - 1),
            If(idle == 1, NextState("EMIT"))
        )
        fsm.act("WAIT-RESUME",
            self.busy.eq(1),
            If(self.resume | self.stop,
                NextState("NEXT-TRANSFER")
            )
        )
        self.comb += self.transfer_started.eq(accepted & (beat == 0) & (addr == tr_start))
        self.comb += [
            self.issued_tag.eq(tag),
            self.issued_addr.eq(addr),
            self.issued_bytes.eq(nbytes),
            self.transfer_addr.eq(tr_start),
        ]

# Completion dispatcher ----------------------------------------------------------------------------

class CompletionDispatcher(LiteXModule):
    """Sends each completion, by its tag, to one of the card's own requesters or to LitePCIe.

    ``routes`` maps a name to an inclusive tag range; each name becomes an output endpoint
    (``dispatcher.generator``, ``dispatcher.rt_loop``), and completions with any other tag go
    to ``other`` (LitePCIe). The default routes the generator's tags and its flushing read.

    The tag is in header DW2. With 4 or more DWs per beat it is in the first beat; with two
    (64-bit datapath) it is in the second, so one beat is held back to look ahead: one cycle
    of latency, no loss of throughput.
    """
    def __init__(self, data_width, routes=None):
        if routes is None:
            routes = {"generator": (TAG_BASE, FLUSH_TAG)}
        self.sink  = sink  = stream.Endpoint(phy_layout(data_width))
        self.other = other = stream.Endpoint(phy_layout(data_width))
        outputs = []
        for name, (lo, hi) in routes.items():
            ep = stream.Endpoint(phy_layout(data_width))
            setattr(self, name, ep)
            outputs.append((ep, lo, hi))

        # # #

        # Route index: 0 = other, i + 1 = routes[i].
        width = bits_for(len(outputs))
        def route_of(dw2):
            tag = dw2[8:16]
            r = Signal(width)
            self.comb += [If((tag >= lo) & (tag <= hi), r.eq(i + 1)) for i, (_, lo, hi) in enumerate(outputs)]
            return r

        def connect(src, route):
            cases = {i + 1: src.connect(ep) for i, (ep, _, _) in enumerate(outputs)}
            cases["default"] = src.connect(other)
            return Case(route, cases)

        route     = Signal(width)
        route_reg = Signal(width)
        if data_width >= 128:
            first_route = route_of(sink.dat[64:96])
            self.comb += [
                route.eq(Mux(sink.first, first_route, route_reg)),
                connect(sink, route),
            ]
            self.sync += If(sink.valid & sink.ready & sink.first, route_reg.eq(route))
        else:
            held       = stream.Endpoint(phy_layout(data_width))
            held_valid = Signal()
            out        = stream.Endpoint(phy_layout(data_width))
            first_route = route_of(sink.dat[0:32])
            self.comb += [
                # The first beat waits until the second (with DW2) is visible.
                out.valid.eq(held_valid & (~held.first | held.last | sink.valid)),
                out.dat.eq(held.dat), out.be.eq(held.be),
                out.first.eq(held.first), out.last.eq(held.last),
                route.eq(Mux(held.first, first_route, route_reg)),
                connect(out, route),
                sink.ready.eq(~held_valid | (out.valid & out.ready)),
            ]
            self.sync += [
                If(out.valid & out.ready & held.first, route_reg.eq(route)),
                If(sink.valid & sink.ready,
                    held_valid.eq(1),
                    held.dat.eq(sink.dat), held.be.eq(sink.be),
                    held.first.eq(sink.first), held.last.eq(sink.last),
                ).Elif(out.valid & out.ready,
                    held_valid.eq(0),
                ),
            ]

# Generator ----------------------------------------------------------------------------------------

class Generator(LiteXModule):
    def __init__(self, data_width, requester_id, cycles, clock_hz=125e6):
        n, = self._add_ports(data_width)
        self._add_configuration()
        stat, = self._add_status_registers()
        (cfg, clear, done, elapsed, hand_addr, hand_valid, reader, run_start, running, start,
         writer, wrrd, wrrd_start) = self._add_engines(
            data_width, requester_id, cycles, clock_hz)
        checker, fifo, flush_pending, outstanding, tags, timed_out = self._add_tags(
            data_width, cycles, cfg, clear, reader, start, stat, wrrd, wrrd_start)
        wrrd_first_pending, wrrd_reading = self._add_counters(
            cycles, clear, fifo, hand_addr, hand_valid, outstanding, reader, start, stat, timed_out, writer, wrrd,
            wrrd_start)
        engines_busy, fl, flush_beat, flush_sent, needs_flush = self._add_flushing_read(
            requester_id, cfg, flush_pending, n, reader, writer)
        self._add_run_status(
            cycles, checker, done, elapsed, engines_busy, fl, flush_beat, flush_pending, flush_sent, hand_valid,
            needs_flush, outstanding, reader, run_start, running, start, stat, tags, writer, wrrd, wrrd_first_pending,
            wrrd_reading)

    def _add_ports(self, data_width):
        n = data_width // 32
        self.intro = ModuleDoc(__doc__.split("\n\n")[0] + """

        Program the configuration registers, write ``control.start``, wait for ``status.done``
        (or the ``generator`` MSI), then read the counters. ``control.clear`` zeroes the
        counters, histograms and latency samples; ``control.stop`` ends a run early.

        A run is a lease (``lease_*``, cores/lease.py): when it expires or is released, the
        run is stopped as by ``control.stop`` (outstanding reads complete or time out).
        """)
        self.wr_source = stream.Endpoint(phy_layout(data_width))
        self.rd_source = stream.Endpoint(phy_layout(data_width))
        self.fl_source = stream.Endpoint(phy_layout(data_width))  # the flushing read
        self.cpl_sink  = stream.Endpoint(phy_layout(data_width))
        self.irq       = Signal()
        # In: a read request's last beat / a write TLP's first beat went to the link (the
        # isolated block's TxBoundary, cores/isolate.py): requests are stamped then.
        self.rd_sent   = Signal()
        self.wr_sent   = Signal()
        # In: every TLP the generator sent has left the card (TxBoundary.idle): a run ends, and
        # its interrupt goes, only after its last TLP.
        self.tx_idle   = Signal(reset=1)
        return n,

    def _add_configuration(self):
        # Configuration ----------------------------------------------------------------------------
        self.control = ActionStorage(fields=[
            CSRField("start", size=1, pulse=True, description="Write 1 to start a run."),
            CSRField("stop",  size=1, pulse=True, description="Write 1 to stop issuing requests; the run ends when outstanding reads complete or time out."),
            CSRField("clear", size=1, pulse=True, description="Write 1 to zero counters, histograms and latency samples."),
        ], description="Run control.")
        self.config = CSRStorage(fields=[
            CSRField("operation", size=2, values=[
                (str(OP_READ), "read",  "BW_RD / LAT_RD: the card reads host memory."),
                (str(OP_WRITE), "write", "BW_WR: the card writes host memory."),
                (str(OP_READ_WRITE), "read_write", "BW_RDWR: both at once, independent streams."),
                (str(OP_WRITE_READ), "write_then_read", "LAT_WRRD: write a transfer, read it back, repeat."),
            ], description="What the run does."),
            CSRField("address_pattern", size=2, values=[
                (str(ADDR_SEQUENTIAL), "sequential", "transfer n at window offset (n << stride_log2)."),
                (str(ADDR_FIXED), "fixed", "every transfer at window offset 0."),
                (str(ADDR_RANDOM), "random", "a stride slot chosen by an LFSR."),
            ], description="Transfer addresses."),
            CSRField("data_pattern", size=1, values=[
                (str(PATTERN_COUNTER), "counter", "DW at byte address a = a/4 + seed."),
                (str(PATTERN_PRBS), "prbs", "DW at byte address a = lowbias32(a/4 ^ seed)."),
            ], description="Data written, and expected on reads."),
            CSRField("check_data", size=1, description="Check read data against the pattern (DW-aligned transfers only)."),
            CSRField("addr64", size=1, description="Force 4DW (64-bit) headers even below 4 GiB."),
            CSRField("relaxed_ordering", size=1, description="Set the Relaxed Ordering attribute."),
            CSRField("no_snoop", size=1, description="Set the No Snoop attribute."),
            CSRField("flush", size=1, description="End a run with writes with a 1-DW read of the buffer, so that its cycles cover every write reaching host memory."),
        ], description="Run configuration.")
        self.transfer_size = CSRStorage(18, reset=4096, description=f"Bytes per transfer (1..{MAX_TRANSFER_BYTES}).")
        self.count = CSRStorage(64, description="Transfers per engine; 0: until duration.")
        self.duration = CSRStorage(64, description="Card cycles the engines issue for; 0: until count.")
        self.request_size_log2 = CSRStorage(4, reset=9, description="log2 of the largest read request in bytes (<= MRRS).")
        self.payload_size_log2 = CSRStorage(4, reset=8, description="log2 of the largest write payload in bytes (<= MPS).")
        self.idle_cycles = CSRStorage(32, description="Idle cycles after each request.")
        self.max_outstanding = CSRStorage(8, reset=32, description=f"Reads in flight at most (1..{TAGS}).")
        self.base = CSRStorage(64, description="Bus address of the buffer.")
        self.window_mask = CSRStorage(32, reset=0xFFFFF, description="Window size - 1 (a power of two minus one).")
        self.stride_log2 = CSRStorage(5, reset=12, description="log2 of the distance between transfer slots.")
        self.offset = CSRStorage(6, description="Byte offset of each transfer in its slot.")
        self.seed = CSRStorage(32, reset=1, description="Seed of the data pattern and of the address LFSR.")
        self.timeout = CSRStorage(32, reset=125000, description="Completion timeout in card cycles.")

    def _add_status_registers(self):
        # Status and counters ----------------------------------------------------------------------
        self.status = CSRStatus(fields=[
            CSRField("running", size=1, description="A run is in progress."),
            CSRField("done", size=1, description="The last run has ended (cleared by start)."),
            CSRField("ended_by", size=2, values=[
                (str(ENDED_COUNT), "count", "the transfer count was reached."),
                (str(ENDED_DURATION), "duration", "the duration elapsed."),
                (str(ENDED_STOP), "stop", "control.stop."),
            ], description="Why the last run ended."),
            CSRField("outstanding", size=8, offset=8, description="Reads in flight now."),
        ], description="Run status.")
        counters = [
            ("cycles",          64, "Card cycles of the last run, from start to its last completion (with config.flush: of the flushing read after the writes)."),
            ("transfers",       64, "Transfers completed (reads: all their completions arrived)."),
            ("read_requests",   64, "MRd TLPs sent."),
            ("read_bytes",      64, "Bytes of read requests that completed successfully."),
            ("completions",     64, "Completion TLPs received for the generator's tags."),
            ("write_requests",  64, "MWr TLPs sent."),
            ("write_bytes",     64, "Payload bytes written."),
            ("lat_count",       64, "Read requests whose latency was measured."),
            ("lat_min",         32, "Smallest read latency (cycles, request's last beat to its last completion's last beat)."),
            ("lat_max",         32, "Largest read latency (cycles)."),
            ("lat_sum",         64, "Sum of read latencies (cycles)."),
            ("err_ur",          32, "Completions with status Unsupported Request."),
            ("err_ca",          32, "Completions with status Completer Abort."),
            ("err_other",       32, "Completions with another non-successful status."),
            ("err_poisoned",    32, "Completions with the EP (poisoned) bit."),
            ("err_timeouts",    32, "Reads whose completion did not arrive within the timeout."),
            ("err_unexpected",  32, "Completions for a tag that had no read outstanding."),
            ("err_mismatches",  32, "Read DWs that differed from the data pattern."),
        ]
        stat = {}
        for name, width, description in counters:
            csr = CSRStatus(width, name=name, description=description)
            setattr(self, name, csr)
            stat[name] = csr.status
        self.lat_hist = Log2Histogram("lat_hist", 32, HISTOGRAM_BUCKETS, "read latency (cycles)")
        self.lat_sample = CSRStatus(32, description="Oldest latency sample (cycles); reading it removes it from the FIFO.")
        self.lat_samples = CSRStatus(fields=[
            CSRField("level", size=16, description=f"Samples waiting in the FIFO (up to {SAMPLE_FIFO_DEPTH})."),
        ], description="Latency sample FIFO level.")
        self.lat_samples_dropped = CSRStatus(32, description="Latency samples not kept because the FIFO was full.")
        return stat,

    def _add_engines(self, data_width, requester_id, cycles, clock_hz):
        # # #

        class Cfg:
            pass
        cfg = Cfg()
        cfg.operation = self.config.fields.operation
        cfg.address_pattern = self.config.fields.address_pattern
        cfg.data_pattern = self.config.fields.data_pattern
        cfg.addr64 = self.config.fields.addr64
        cfg.relaxed_ordering = self.config.fields.relaxed_ordering
        cfg.no_snoop = self.config.fields.no_snoop
        for name in ("transfer_size", "count", "duration", "request_size_log2", "payload_size_log2",
                     "idle_cycles", "base", "window_mask", "stride_log2", "offset", "seed"):
            setattr(cfg, name, getattr(self, name).storage)

        self.lease = Lease(cycles, clock_hz)
        start = self.control.fields.start
        clear = self.control.fields.clear | start
        # A stop (control.stop, or the lease ending) is a one-cycle pulse, but the engines look
        # at it only between requests: hold it until the next start, so a stop that comes in
        # the middle of a TLP is not lost.
        running = Signal()
        stop = Signal()
        stop_held = Signal()
        self.sync += If(start, stop_held.eq(0)).Elif((self.control.fields.stop | self.lease.stop) & running, stop_held.eq(1)).Elif(
            ~running, stop_held.eq(0))
        self.comb += stop.eq(self.control.fields.stop | self.lease.stop | stop_held)

        self.writer = writer = RequestEngine(data_width, True, cfg, requester_id)
        self.reader = reader = RequestEngine(data_width, False, cfg, requester_id)
        self.comb += [
            writer.source.connect(self.wr_source),
            reader.source.connect(self.rd_source),
        ]

        op = cfg.operation
        done    = Signal()
        elapsed = Signal(64)
        run_start = Signal(64)
        self.comb += [
            writer.enable.eq((op == OP_WRITE) | (op == OP_READ_WRITE) | (op == OP_WRITE_READ)),
            reader.enable.eq((op == OP_READ) | (op == OP_READ_WRITE) | (op == OP_WRITE_READ)),
            writer.start.eq(start), reader.start.eq(start),
            writer.stop.eq(stop), reader.stop.eq(stop),
            writer.elapsed.eq(elapsed), reader.elapsed.eq(elapsed),
            elapsed.eq(cycles - run_start),
        ]

        # Write-then-read: the writer hands every finished transfer to the reader and waits
        # until the reader has read it back.
        wrrd = Signal()
        hand_valid = Signal()
        hand_addr  = Signal(64)
        wrrd_start = Signal(64)  # card cycle of the first beat of the current write transfer
        self.comb += [
            wrrd.eq(op == OP_WRITE_READ),
            reader.follow.eq(wrrd),
            writer.pause_after_transfer.eq(wrrd),
            reader.hand_valid.eq(hand_valid),
            reader.hand_addr.eq(hand_addr),
        ]
        return cfg, clear, done, elapsed, hand_addr, hand_valid, reader, run_start, running, start, writer, wrrd, wrrd_start

    def _add_tags(self, data_width, cycles, cfg, clear, reader, start, stat, wrrd, wrrd_start):
        # Tags, completions, timeouts -------------------------------------------------------------
        self.tags = tags = TagTable(TAGS)
        self.checker = checker = CompletionChecker(data_width, TAG_BASE, TAGS, FLUSH_TAG)
        self.timeout_scan = scan = TimeoutScan(TAGS)
        flush_pending = Signal()  # the flushing read is outstanding (below)
        outstanding = tags.outstanding
        self.comb += [
            # Byte enables left out: the checker does not look at them (completion data is whole
            # DWs), and an input the block reads costs a register in its isolation (cores/isolate.py).
            self.cpl_sink.connect(checker.sink, omit={"be"}),
            checker.cpl.connect(tags.cpl),
            scan.port.connect(tags.scan),
        ]
        # A read takes the engine's lowest free tag. It is timed from the link (rd_sent), except
        # a write-then-read's read: from its write's first TLP (wrrd_start).
        self.comb += [
            reader.free_tag.eq(tags.free_tag),
            reader.tag_free.eq(tags.can_issue),
            tags.max_outstanding.eq(self.max_outstanding.storage),
            tags.issue.eq(reader.issued),
            tags.issue_tag.eq(reader.issued_tag),
            tags.issue_time.eq(Mux(wrrd, wrrd_start, cycles)),
            tags.issue_dw.eq(reader.issued_addr[2:34]),
            tags.issue_bytes.eq(reader.issued_bytes),
            tags.issue_waits_for_link.eq(~wrrd),
            tags.sent.eq(self.rd_sent),
            tags.restart.eq(start),
            tags.now.eq(cycles),
        ]
        # Data is checked only when every DW of the run is whole (DW-aligned offset and size).
        self.comb += [
            checker.check.eq(self.config.fields.check_data & (cfg.offset[:2] == 0) & (cfg.transfer_size[:2] == 0)),
            checker.data_pattern.eq(cfg.data_pattern),
            checker.seed.eq(cfg.seed),
            checker.now.eq(cycles),
            checker.clear.eq(clear),
            checker.flush_expected.eq(flush_pending),
            *[stat[name].eq(getattr(checker, name)) for name, _ in CHECKER_COUNTERS],
        ]
        # The checker's counters are the CSRs' registers: the widths must agree (no silent truncation).
        for name, width in CHECKER_COUNTERS:
            assert len(stat[name]) == width, f"counter {name}: CSR of {len(stat[name])} bits, checker's of {width}"
        self.comb += [
            scan.active.eq(tags.busy != 0),
            scan.now.eq(cycles),
            scan.timeout.eq(self.timeout.storage),
            scan.completing.eq(checker.end & checker.ours),
            scan.completing_tag.eq(checker.cpl.tag),
        ]
        latency = checker.latency
        measured = checker.measured
        timed_out = scan.timed_out

        # Sample FIFO.
        self.sample_fifo = fifo = stream.SyncFIFO([("data", 32)], SAMPLE_FIFO_DEPTH, buffered=True)
        fifo = ResetInserter()(fifo)
        self.comb += [
            fifo.reset.eq(clear),
            fifo.sink.data.eq(Mux(latency[32:] != 0, 0xFFFFFFFF, latency[:32])),
            self.lat_sample.status.eq(fifo.source.data),
            fifo.source.ready.eq(self.lat_sample.we),
            self.lat_samples.fields.level.eq(fifo.level),
        ]
        self.comb += [
            fifo.sink.valid.eq(measured),
            self.lat_hist.add.eq(measured),
            self.lat_hist.value.eq(Mux(latency[32:] != 0, 0xFFFFFFFF, latency[:32])),
            self.lat_hist.clear.eq(clear),
        ]
        return checker, fifo, flush_pending, outstanding, tags, timed_out

    def _add_counters(self, cycles, clear, fifo, hand_addr, hand_valid, outstanding, reader, start, stat, timed_out,
                      writer, wrrd, wrrd_start):
        # Counters (the checker keeps those of the completions) ------------------------------------
        own = [s for name, s in stat.items() if name not in dict(CHECKER_COUNTERS)]
        self.sync += [
            If(clear,
                *[s.eq(0) for s in own],
            ).Else(
                If(timed_out, stat["err_timeouts"].eq(stat["err_timeouts"] + 1)),
                If(fifo.sink.valid & ~fifo.sink.ready,
                    self.lat_samples_dropped.status.eq(self.lat_samples_dropped.status + 1)),
            ),
            If(clear, self.lat_samples_dropped.status.eq(0)),
            stat["read_requests"].eq(reader.requests),
            stat["write_requests"].eq(writer.requests),
            stat["write_bytes"].eq(writer.bytes),
        ]

        # Write-then-read hand-over.
        reads_pending = Signal()
        self.comb += reads_pending.eq((outstanding != 0) | reader.issued)
        wrrd_reading = Signal()
        wrrd_first_pending = Signal()  # the write transfer started; its first TLP has not gone yet
        self.sync += [
            If(start | (self.wr_sent & wrrd_first_pending), wrrd_first_pending.eq(0)),
            If(writer.transfer_started, wrrd_first_pending.eq(1)),
        ]
        self.sync += [
            If(start,
                hand_valid.eq(0), wrrd_reading.eq(0),
            ),
            # A write-then-read is timed from the write's first TLP going to the link.
            If(wrrd_first_pending & self.wr_sent, wrrd_start.eq(cycles)),
            If(writer.transfer_done & wrrd,
                hand_valid.eq(1), hand_addr.eq(writer.transfer_addr),
            ),
            If(hand_valid & reader.hand_ready,
                hand_valid.eq(0), wrrd_reading.eq(1),
            ),
        ]
        resume = Signal()
        reader_issuing = Signal()
        self.comb += reader_issuing.eq(reader.fsm.ongoing("EMIT") | reader.fsm.ongoing("IDLE-CYCLES-MID") |
                                       reader.fsm.ongoing("IDLE-CYCLES"))
        self.comb += [
            resume.eq(wrrd_reading & ~hand_valid & ~reader_issuing & ~reads_pending),
            writer.resume.eq(resume),
        ]
        self.sync += If(resume, wrrd_reading.eq(0))
        return wrrd_first_pending, wrrd_reading

    def _add_flushing_read(self, requester_id, cfg, flush_pending, n, reader, writer):
        # Flushing read ----------------------------------------------------------------------------
        # A run with writes ends with a 1-DW read of the buffer: its completion cannot pass the
        # posted writes before it (PCIe ordering, 2.4.1), so when it returns every write has
        # reached host memory, wherever the link or the host buffered them. The run's cycles
        # include that round trip.
        flush_sent    = Signal()
        flush_beat    = Signal()
        needs_flush   = Signal()
        engines_busy  = Signal()
        fl = self.fl_source
        self.comb += [
            engines_busy.eq(writer.busy | reader.busy),
            needs_flush.eq(writer.enable & self.config.fields.flush),
        ]
        fl_hdr4 = Signal()
        self.comb += fl_hdr4.eq(cfg.addr64 | (cfg.base[32:] != 0))
        fl_dws = [
            Cat(C(1, 10), C(0, 14), C(tlp.TYPE_MEM, 5), fl_hdr4, C(0, 2)),
            Cat(C(0xF, 4), C(0, 4), C(FLUSH_TAG, 8), requester_id),
            Mux(fl_hdr4, cfg.base[32:], Cat(C(0, 2), cfg.base[2:32])),
            Cat(C(0, 2), cfg.base[2:32]),
        ]
        if n >= 4:
            self.comb += [
                *[fl.dat[32*j:32*(j+1)].eq(fl_dws[j]) for j in range(4)],
                fl.be.eq(Mux(fl_hdr4, 0xFFFF, 0x0FFF)),
                fl.first.eq(1), fl.last.eq(1),
            ]
        else:
            self.comb += [
                fl.dat.eq(Mux(flush_beat, Cat(fl_dws[2], fl_dws[3]), Cat(fl_dws[0], fl_dws[1]))),
                fl.be.eq(Mux(flush_beat, Mux(fl_hdr4, 0xFF, 0x0F), 0xFF)),
                fl.first.eq(~flush_beat), fl.last.eq(flush_beat),
            ]
        self.comb += fl.valid.eq(flush_pending & ~flush_sent)
        self.sync += [
            If(fl.valid & fl.ready,
                flush_beat.eq(~fl.last),
                If(fl.last, flush_sent.eq(1)),
            ),
        ]
        return engines_busy, fl, flush_beat, flush_sent, needs_flush

    def _add_run_status(self, cycles, checker, done, elapsed, engines_busy, fl, flush_beat, flush_pending, flush_sent,
                        hand_valid, needs_flush, outstanding, reader, run_start, running, start, stat, tags, writer,
                        wrrd, wrrd_first_pending, wrrd_reading):
        # Run status -------------------------------------------------------------------------------
        writes_done = Signal()
        self.comb += writes_done.eq(running & ~engines_busy & (outstanding == 0) & ~reader.issued & self.tx_idle)
        self.sync += [
            If(start,
                flush_pending.eq(0), flush_sent.eq(0), flush_beat.eq(0),
            ).Elif(writes_done & needs_flush & ~flush_pending,
                flush_pending.eq(1),
            ).Elif(checker.flush_returned,
                flush_pending.eq(0),
            ),
        ]
        flushed = Signal()
        self.comb += flushed.eq(~needs_flush | (checker.flush_returned & flush_pending))
        self.sync += [
            If(start,
                running.eq(1), done.eq(0), run_start.eq(cycles),
            ).Elif(writes_done & flushed,
                running.eq(0), done.eq(1),
                stat["cycles"].eq(elapsed),
                stat["transfers"].eq(Mux(reader.enable & ~wrrd, reader.transfers, writer.transfers)),
            ),
        ]
        ended_by = Signal(2)
        self.comb += [
            ended_by.eq(Mux(writer.ended_by != 0, writer.ended_by, reader.ended_by)),
            self.status.fields.running.eq(running),
            self.status.fields.done.eq(done),
            self.status.fields.ended_by.eq(ended_by),
            self.status.fields.outstanding.eq(outstanding),
        ]
        done_d = Signal()
        self.sync += done_d.eq(done)
        self.comb += self.irq.eq(done & ~done_d)

        # Busy: every state in which a register of the generator can change without a CSR
        # access or a completion arriving (cores/isolate.py gates the block on it).
        self.busy = Signal()
        self.comb += self.busy.eq(running | engines_busy | (outstanding != 0) | (tags.busy != 0) | flush_pending |
            tags.waiting | wrrd_first_pending |
            self.lease.held | (done != done_d) | hand_valid | wrrd_reading |
            self.wr_source.valid | self.rd_source.valid | fl.valid | self.cpl_sink.valid | self.lat_hist.pending |
            checker.pending)

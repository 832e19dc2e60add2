"""Real-time loop (the DataMover experiment, seed 003): card → host memory → host → card.

Each iteration: the card DMA-writes a buffer into host memory — the data, then the buffer's
first DW, the token (seed + iteration), last: PCIe keeps posted writes in order, so a host that
sees the new token sees the data. Optionally it raises an MSI. The host detects the buffer (by
polling memory or waiting for the interrupt), checks the token, computes the checksum (the
32-bit sum of the data DWs) and returns it, in one of two ways:

- register return: the host writes the checksum to ``result``; the loop ends when that write
  arrives;
- DMA return (``config.dma_return``, the DataMover's "request data back"): the host stores the
  checksum in its memory at ``result_address`` and writes ``doorbell``; the card reads the DW
  (a 1-DW MRd with tag LOOP_TAG) and the loop ends when the completion arrives. An error
  completion, poisoned data or no completion within ``read_timeout`` cycles is counted in
  ``return_errors`` and the card waits for the next doorbell.

Loop time = end - first beat of the buffer, with min / max / sum, a log2 histogram and a
sample FIFO; a wrong checksum is counted.

The loop is a lease (``lease_*``, cores/lease.py): when it expires or is released, the loop
ends at once: a TLP on its way is finished, no further buffer, token, read or MSI leaves.

Data DW at bus address a: lowbias32(a/4 ^ token) (the generator's PRBS pattern, seeded with
the token), so every iteration carries new data.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.integration.doc import ModuleDoc
from litex.soc.interconnect.packet import Arbiter

from litepcie.common import phy_layout

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware import tlp
from tlpx_gateware.cores.common import Log2Histogram, PATTERN_PRBS
from tlpx_gateware.cores.generator.core import ADDR_FIXED, RequestEngine
from tlpx_gateware.cores.lease import Lease
from tlpx_gateware.cores.request_path.core import DWGatherer

MAX_BUFFER_BYTES = 4096
SAMPLE_FIFO_DEPTH = 1024
HISTOGRAM_BUCKETS = 32
# Tag of the DMA-return read (after the generator's tags and its flushing read).
LOOP_TAG = 49


class RealTimeLoop(LiteXModule):
    def __init__(self, data_width, requester_id, cycles, clock_hz=125e6):
        cpl, = self._add_registers(data_width)
        clear, gatherer, hdr4, iteration, killed, start, stop, token, token_dws, writer = self._add_control(
            data_width, requester_id, cycles, clock_hz)
        arrived, checksum, dma_return, dw, loop32, start_pending, stopping, writer_beat = self._add_iterations(
            cycles, writer)
        (completed, cpl_end, cpl_good, done, fifo, read_dws, read_wait, result_value,
         return_error, returned, rhdr4, t_doorbell) = self._add_dma_return(
            data_width, requester_id, clear, cpl, dma_return, loop32)
        fsm, = self._add_loop_states(
            checksum, done, dw, gatherer, hdr4, iteration, killed, start, start_pending, stopping, token, token_dws,
            writer, writer_beat)
        self._add_return_states(
            cycles, arrived, checksum, clear, completed, cpl_end, cpl_good, dma_return, done, dw, fifo, fsm, gatherer,
            iteration, killed, loop32, read_dws, read_wait, result_value, return_error, returned, rhdr4, stop,
            stopping, t_doorbell, token)
        self._add_busy(fsm, start_pending, writer)

    def _add_registers(self, data_width):
        self.intro = ModuleDoc(__doc__.split("\n\n")[0] + """

        Program ``buffer_base``, ``size`` and ``iterations``, write ``control.start``. For each
        iteration wait for the token at the buffer's first DW (or the ``rt_loop`` MSI with
        ``config.irq``), then write the checksum of the data DWs to ``result`` (or, with
        ``config.dma_return``, store it at ``result_address`` and write ``doorbell``).
        """)
        self.source = stream.Endpoint(phy_layout(data_width))
        self.cpl_sink = cpl = stream.Endpoint(phy_layout(data_width))  # completions of LOOP_TAG
        self.irq = Signal()
        self.sent = Signal()  # in: a TLP's first beat went to the link (the isolated block's TxBoundary)
        self.tx_idle = Signal(reset=1)  # in: every TLP the loop sent has left the card (TxBoundary.idle)

        self.control = ActionStorage(fields=[
            CSRField("start", size=1, pulse=True, description="Write 1 to start the iterations."),
            CSRField("stop",  size=1, pulse=True, description="Write 1 to stop after the current iteration's buffer."),
            CSRField("clear", size=1, pulse=True, description="Write 1 to zero the statistics and samples."),
        ], description="Loop control.")
        self.config = CSRStorage(fields=[
            CSRField("irq", size=1, description="Raise the rt_loop MSI once a buffer (with its token) is written."),
            CSRField("dma_return", size=1, description="The host returns the checksum in its memory at ``result_address`` and writes ``doorbell``; the card DMA-reads it."),
        ], description="Loop configuration.")
        self.buffer_base = CSRStorage(64, description="Bus address of the buffer (DW aligned).")
        self.size = CSRStorage(13, reset=256, description=f"Buffer bytes, token included (8..{MAX_BUFFER_BYTES}, a multiple of 4).")
        self.payload_size_log2 = CSRStorage(4, reset=7, description="log2 of the largest write payload (<= MPS).")
        self.iterations = CSRStorage(32, reset=1, description="Iterations to run.")
        self.seed = CSRStorage(32, description="Token of the first iteration (then +1 each).")
        self.result = CSRStorage(32, description="Register return: the host writes the checksum (32-bit sum of the data DWs) here; its arrival ends the iteration.")
        self.result_address = CSRStorage(64, description="DMA return: bus address (DW aligned) of the DW where the host stores the checksum.")
        self.doorbell = CSRStorage(1, description="DMA return: any write asks the card to read the checksum at ``result_address``.")
        self.read_timeout = CSRStorage(32, reset=125000, description="DMA return: cycles to wait for the read's completion before counting an error.")
        self.status = CSRStatus(fields=[
            CSRField("running", size=1, description="Iterations are running."),
            CSRField("waiting", size=1, description="The buffer is written; the card waits for the result."),
            CSRField("done", size=1, description="The last run has ended."),
        ], description="Loop status.")
        self.token = CSRStatus(32, description="Token of the current (or last) iteration.")
        self.expected = CSRStatus(32, description="Checksum the card expects for the current iteration.")
        self.count = CSRStatus(32, description="Iterations completed.")
        self.mismatches = CSRStatus(32, description="Results that differed from the checksum of the data.")
        self.loop_min = CSRStatus(32, description="Shortest loop (cycles from the buffer's first beat to the result's arrival).")
        self.loop_max = CSRStatus(32, description="Longest loop (cycles).")
        self.loop_sum = CSRStatus(64, description="Sum of loop times (cycles).")
        self.loop_hist = Log2Histogram("loop_hist", 32, HISTOGRAM_BUCKETS, "loop time (cycles)")
        self.sample = CSRStatus(32, description="Oldest loop-time sample (cycles); reading it removes it.")
        self.samples = CSRStatus(16, description=f"Samples waiting (up to {SAMPLE_FIFO_DEPTH}).")
        self.samples_dropped = CSRStatus(32, description="Samples not kept because the FIFO was full.")
        self.read_last = CSRStatus(32, description="DMA return: cycles from the last doorbell's arrival to its completion.")
        self.read_sum = CSRStatus(64, description="DMA return: sum of the doorbell-to-completion cycles of the completed iterations.")
        self.return_errors = CSRStatus(32, description="DMA return: reads answered with an error status or poisoned data, or not answered within ``read_timeout``.")
        self.unexpected = CSRStatus(32, description="Completions with the loop's tag when no read was outstanding (dropped).")
        return cpl,

    def _add_control(self, data_width, requester_id, cycles, clock_hz):
        # # #

        self.lease = Lease(cycles, clock_hz)
        start = self.control.fields.start
        stop = self.control.fields.stop
        clear = self.control.fields.clear | start
        # The lease ended: finish the TLP on its way, then stop (no token, read or MSI after).
        killed = Signal()
        token = Signal(32)
        iteration = Signal(32)

        # Data: the generator's write engine, one transfer of size - 4 bytes after the token DW.
        class Cfg:
            pass
        cfg = Cfg()
        zero = Constant(0, 1)
        cfg.payload_size_log2 = self.payload_size_log2.storage
        cfg.request_size_log2 = self.payload_size_log2.storage
        cfg.base = Signal(64)
        cfg.window_mask = C(0xFFFFFFFF, 32)
        cfg.stride_log2 = C(0, 5)
        cfg.offset = C(0, 6)
        cfg.transfer_size = Signal(18)
        cfg.count = C(1, 64)
        cfg.duration = C(0, 64)
        cfg.idle_cycles = C(0, 32)
        cfg.address_pattern = C(ADDR_FIXED, 2)
        cfg.data_pattern = C(PATTERN_PRBS, 1)
        cfg.seed = token
        cfg.addr64 = zero
        cfg.relaxed_ordering = zero
        cfg.no_snoop = zero
        self.comb += [
            cfg.base.eq(self.buffer_base.storage + 4),
            cfg.transfer_size.eq(self.size.storage - 4),
        ]
        self.writer = writer = RequestEngine(data_width, True, cfg, requester_id, write_tag=LOOP_TAG)
        self.comb += [writer.enable.eq(1), writer.elapsed.eq(0), writer.stop.eq(self.lease.stop | killed)]

        # Token: one 1-DW MWr, built a DW at a time.
        self.token_tlp = gatherer = DWGatherer(data_width)
        self.arbiter = Arbiter([writer.source, gatherer.source], self.source)
        base = self.buffer_base.storage
        hdr4 = Signal()
        self.comb += hdr4.eq(base[32:] != 0)
        token_dws = [
            Cat(C(1, 10), C(0, 14), C(tlp.TYPE_MEM, 5), hdr4, C(1, 1), C(0, 1)),
            # The loop's tag in its posted writes too: the spy attributes them to the loop.
            Cat(C(0xF, 4), C(0, 4), C(LOOP_TAG, 8), requester_id),
            Mux(hdr4, base[32:], Cat(C(0, 2), base[2:32])),
            Cat(C(0, 2), base[2:32]),
        ]
        return clear, gatherer, hdr4, iteration, killed, start, stop, token, token_dws, writer

    def _add_iterations(self, cycles, writer):
        # Iterations --------------------------------------------------------------------------------
        t_start = Signal(64)
        # The loop is timed from its buffer's first TLP going to the link (`sent`: the first TLP
        # the loop sends after the iteration's start).
        start_pending = Signal()
        self.sync += If(self.sent & start_pending, t_start.eq(cycles), start_pending.eq(0))
        checksum = Signal(32)
        dw = Signal(3)
        stopping = Signal()
        loop = Signal(64)
        loop32 = Signal(32)
        self.comb += [
            loop.eq(cycles - t_start),
            loop32.eq(Mux(loop[32:] != 0, 0xFFFFFFFF, loop[:32])),
        ]
        writer_beat = Signal()
        self.comb += writer_beat.eq(writer.source.valid & writer.source.ready)
        dma_return = self.config.fields.dma_return
        arrived = Signal()  # register return: the result write arrives
        self.comb += arrived.eq(self.result.re & ~dma_return)
        return arrived, checksum, dma_return, dw, loop32, start_pending, stopping, writer_beat

    def _add_dma_return(self, data_width, requester_id, clear, cpl, dma_return, loop32):
        # DMA return: the 1-DW read and its completion --------------------------------------------
        rbase = self.result_address.storage
        rhdr4 = Signal()
        self.comb += rhdr4.eq(rbase[32:] != 0)
        read_dws = [
            Cat(C(1, 10), C(0, 14), C(tlp.TYPE_MEM, 5), rhdr4, C(0, 1), C(0, 1)),
            Cat(C(0xF, 4), C(0, 4), C(LOOP_TAG, 8), requester_id),
            Mux(rhdr4, rbase[32:], Cat(C(0, 2), rbase[2:32])),
            Cat(C(0, 2), rbase[2:32]),
        ]
        n = data_width // 32
        dw3_beat, dw3_lane = 3 // n, 3 % n
        self.comb += cpl.ready.eq(1)
        cpl_beat = Signal(8)
        cpl_dw0 = Signal(32)
        cpl_dw1 = Signal(32)
        cpl_dw3 = Signal(32)
        self.sync += If(cpl.valid,
            If(cpl.first, cpl_dw0.eq(cpl.dat[0:32]), cpl_dw1.eq(cpl.dat[32:64])),
            If(cpl_beat == dw3_beat, cpl_dw3.eq(cpl.dat[32*dw3_lane:32*(dw3_lane + 1)])),
            cpl_beat.eq(Mux(cpl.last, 0, cpl_beat + 1)),
        )
        dw0_v = Signal(32)
        dw1_v = Signal(32)
        dw3_v = Signal(32)
        self.comb += [
            dw0_v.eq(Mux(cpl.first, cpl.dat[0:32], cpl_dw0)),
            dw1_v.eq(Mux(cpl.first, cpl.dat[32:64], cpl_dw1)),
            dw3_v.eq(Mux(cpl_beat == dw3_beat, cpl.dat[32*dw3_lane:32*(dw3_lane + 1)], cpl_dw3)),
        ]
        cpl_end = Signal()
        cpl_good = Signal()  # successful, not poisoned, carries the one DW
        self.comb += [
            cpl_end.eq(cpl.valid & cpl.last),
            cpl_good.eq((dw1_v[13:16] == tlp.CPL_SC) & ~dw0_v[14] & dw0_v[30] & (dw0_v[:10] == 1)),
        ]
        t_doorbell = Signal(64)
        read_wait = Signal(32)
        returned = Signal()      # DMA return: the checksum came back
        return_error = Signal()  # DMA return: error completion, poisoned data or timeout
        completed = Signal()     # the iteration ends now (either return)
        result_value = Signal(32)
        self.comb += result_value.eq(Mux(dma_return, dw3_v, self.result.storage))

        self.sample_fifo = fifo = stream.SyncFIFO([("data", 32)], SAMPLE_FIFO_DEPTH, buffered=True)
        fifo = ResetInserter()(fifo)
        self.comb += [
            fifo.reset.eq(clear),
            fifo.sink.data.eq(loop32),
            self.sample.status.eq(fifo.source.data),
            fifo.source.ready.eq(self.sample.we),
            self.samples.status.eq(fifo.level),
        ]

        done = Signal()
        return completed, cpl_end, cpl_good, done, fifo, read_dws, read_wait, result_value, return_error, returned, rhdr4, t_doorbell

    def _add_loop_states(self, checksum, done, dw, gatherer, hdr4, iteration, killed, start, start_pending, stopping,
                         token, token_dws, writer, writer_beat):
        self.fsm = fsm = FSM(reset_state="IDLE")
        fsm.act("IDLE",
            NextValue(killed, 0),
            NextValue(start_pending, 0),
            If(start,
                NextValue(iteration, 0),
                NextValue(token, self.seed.storage),
                NextValue(stopping, 0),
                NextValue(done, 0),
                NextState("START")
            )
        )
        fsm.act("START",
            NextValue(checksum, 0),
            NextValue(start_pending, 1),
            NextValue(dw, 0),
            If(killed,
                NextValue(done, 1),
                NextState("IDLE")
            ).Elif(self.size.storage <= 4,
                NextState("TOKEN")  # a token-only buffer
            ).Else(
                writer.start.eq(1),
                NextState("DATA")
            )
        )
        fsm.act("DATA",
            If(writer_beat,
                NextValue(checksum, checksum + writer.beat_payload_sum),
            ),

            If(~writer.busy & ~writer.source.valid,
                NextValue(dw, 0),
                If(killed, NextValue(done, 1), NextState("IDLE")).Else(NextState("TOKEN"))
            )
        )
        dw_cases = {i: gatherer.sink.dat.eq(token_dws[i]) for i in range(4)}
        dw_cases[4] = gatherer.sink.dat.eq(token)
        dw_cases["default"] = gatherer.sink.dat.eq(token)
        last_dw = Signal(3)
        self.comb += last_dw.eq(Mux(hdr4, 4, 3))
        fsm.act("TOKEN",
            gatherer.sink.valid.eq(1),
            gatherer.sink.first.eq(dw == 0),
            gatherer.sink.last.eq(dw == last_dw),
            # 3DW header: DW2 is the address, then the token (skip the 4DW-only DW3).
            If(~hdr4 & (dw == 3), gatherer.sink.dat.eq(token)).Else(Case(dw, dw_cases)),
            If(gatherer.sink.ready,
                NextValue(dw, dw + 1),
                If(dw == last_dw,
                    NextState("SENT")
                )
            )
        )
        fsm.act("SENT",
            # The token's TLP has left the card (the gatherer and the TxBoundary are empty): the
            # host may look.
            If(~gatherer.source.valid & self.tx_idle,
                self.irq.eq(self.config.fields.irq & ~killed),
                If(killed, NextValue(done, 1), NextState("IDLE")).Else(NextState("WAIT"))
            )
        )
        return fsm,

    def _add_return_states(self, cycles, arrived, checksum, clear, completed, cpl_end, cpl_good, dma_return, done, dw,
                           fifo, fsm, gatherer, iteration, killed, loop32, read_dws, read_wait, result_value,
                           return_error, returned, rhdr4, stop, stopping, t_doorbell, token):
        fsm.act("WAIT",
            If(killed, NextValue(done, 1), NextState("IDLE"))
        )
        fsm.act("WAIT",
            completed.eq(arrived),
            If(self.doorbell.re & dma_return,
                NextValue(t_doorbell, cycles),
                NextValue(dw, 0),
                NextState("READ")
            )
        )
        rlast_dw = Signal(3)
        self.comb += rlast_dw.eq(Mux(rhdr4, 3, 2))
        fsm.act("READ",
            gatherer.sink.valid.eq(1),
            gatherer.sink.first.eq(dw == 0),
            gatherer.sink.last.eq(dw == rlast_dw),
            Case(dw, {i: gatherer.sink.dat.eq(read_dws[i]) for i in range(4)}),
            If(gatherer.sink.ready,
                NextValue(dw, dw + 1),
                If(dw == rlast_dw,
                    NextValue(read_wait, 0),
                    If(killed, NextValue(done, 1), NextState("IDLE")).Else(NextState("READ_WAIT"))
                )
            )
        )
        fsm.act("READ_WAIT",
            If(killed, NextValue(done, 1), NextState("IDLE")),
            NextValue(read_wait, read_wait + 1),
            If(cpl_end & cpl_good,
                returned.eq(1),
                completed.eq(1),
            ).Elif(cpl_end | (read_wait >= self.read_timeout.storage),
                return_error.eq(1),
                NextState("WAIT")
            )
        )
        for state in ("WAIT", "READ_WAIT"):
            fsm.act(state,
                If(completed,
                    fifo.sink.valid.eq(1),
                    NextValue(iteration, iteration + 1),
                    NextValue(token, token + 1),
                    If(stopping | stop | (iteration + 1 >= self.iterations.storage),
                        NextValue(done, 1),
                        NextState("IDLE")
                    ).Else(
                        NextState("START")
                    )
                )
            )
        self.sync += If(stop & ~fsm.ongoing("IDLE"), stopping.eq(1))
        self.sync += If(self.lease.stop & ~fsm.ongoing("IDLE"), killed.eq(1))

        waiting = Signal()
        self.comb += waiting.eq(fsm.ongoing("WAIT") | fsm.ongoing("READ") | fsm.ongoing("READ_WAIT"))
        self.sync += [
            If(clear,
                self.count.status.eq(0), self.mismatches.status.eq(0), self.loop_min.status.eq(0xFFFFFFFF),
                self.loop_max.status.eq(0), self.loop_sum.status.eq(0), self.samples_dropped.status.eq(0),
                self.read_last.status.eq(0), self.read_sum.status.eq(0),
                self.return_errors.status.eq(0), self.unexpected.status.eq(0),
            ).Else(
                If(return_error, self.return_errors.status.eq(self.return_errors.status + 1)),
                If(cpl_end & ~fsm.ongoing("READ_WAIT"), self.unexpected.status.eq(self.unexpected.status + 1)),
                If(returned,
                    self.read_last.status.eq(cycles - t_doorbell),
                    self.read_sum.status.eq(self.read_sum.status + (cycles - t_doorbell)[:32]),
                ),
            ),
            If(~clear & completed,
                self.count.status.eq(self.count.status + 1),
                If(result_value != checksum, self.mismatches.status.eq(self.mismatches.status + 1)),
                self.loop_sum.status.eq(self.loop_sum.status + loop32),
                If(loop32 < self.loop_min.status, self.loop_min.status.eq(loop32)),
                If(loop32 > self.loop_max.status, self.loop_max.status.eq(loop32)),
                If(~fifo.sink.ready, self.samples_dropped.status.eq(self.samples_dropped.status + 1)),
            )
        ]
        self.comb += [
            self.loop_hist.add.eq(completed),
            self.loop_hist.value.eq(loop32),
            self.loop_hist.clear.eq(clear),
            self.status.fields.running.eq(~fsm.ongoing("IDLE")),
            self.status.fields.waiting.eq(waiting),
            self.status.fields.done.eq(done),
            self.token.status.eq(token),
            self.expected.status.eq(checksum),
        ]

    def _add_busy(self, fsm, start_pending, writer):
        # Busy: every state in which a register of the loop can change without a CSR access or
        # a completion arriving (cores/isolate.py gates the block on it).
        self.busy = Signal()
        self.comb += self.busy.eq(~fsm.ongoing("IDLE") | self.lease.held | self.source.valid | writer.busy | start_pending |
            self.loop_hist.pending)

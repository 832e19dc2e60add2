"""Interrupt latency timer: fires interrupts at pseudo-random times and timestamps the host's
response, stage by stage (the PCI Pamette's interrupt latency design, seed 001).

```
 LFSR interval ─► fire: T0 = cycles, MSI ─► host ISR writes ack_isr  ─► T_isr  ┐ per stage: min,
                                         └► host thread writes ack_user ─► T_user ┘ max, sum, count,
                                                                          log2 histogram
 every fire ─► 32-byte sample record ─► record FIFO ─► ring in host memory (sequence numbers)
```

Each fire is one sample, numbered: fire n is the n-th since ``control.clear`` (``fires``
after it). The host acknowledges the stages it can reach by writing the fire's number to
``ack_isr`` (optional: the ISR, where the backend has one) and ``ack_user`` (the user thread
that waited for the interrupt; the host knows the number by counting the interrupts it took
since the clear); the card latches when each write arrives, and only a write that names the
waiting fire acknowledges it: a late acknowledgement of an earlier fire can never close a
later fire's sample with a too-short latency. A fire while the previous one still waits for
``ack_user`` is an overrun: the waiting sample is closed as incomplete and counted. An
acknowledgement that names no waiting fire is counted as stray.

The timer's sample ring is a lease (``lease_*``, cores/lease.py): when it expires or is
released, the timer stops firing, drops the waiting sample, empties its record FIFO and
writes nothing more to the ring until the next ``control.clear``.

``ping``: every write latches its arrival time and the cycles since the previous ping, so two
back-to-back writes measure what one posted register write costs the host, as the card sees
it; that cost is part of every stage and can be subtracted.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.integration.doc import ModuleDoc

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware.cores.common import Log2Histogram, ones_to_highest
from tlpx_gateware.cores.isolate import OUTPUT_LAG
from tlpx_gateware.cores.lease import Lease
from tlpx_gateware.cores.ring import RECORD_DWS, RecordRingWriter, record_layout

EVENT_FMT = 7
EVENT_IRQ_SAMPLE = 3

MODE_RANDOM = 0
MODE_PERIODIC = 1

VECTOR_MODE_ROTATE = 0
VECTOR_MODE_ALL = 1

HISTOGRAM_BUCKETS = 32  # of each stage's log2 histogram
# Tag of the sample ring's MWrs (the spy attributes them to the timer by it; soc.py checks the
# card's tags do not overlap).
RING_TAG = 51


class StageStats(LiteXModule):
    """min / max / sum / count and a log2 histogram of one stage's latency (cycles)."""
    def __init__(self, name, clear):
        self.add   = Signal()
        self.value = Signal(32)
        self.count = CSRStatus(32, name="count", description=f"{name} samples measured.")
        self.min   = CSRStatus(32, name="min", description=f"Smallest {name} latency (cycles from the fire).")
        self.max   = CSRStatus(32, name="max", description=f"Largest {name} latency (cycles).")
        self.sum   = CSRStatus(64, name="sum", description=f"Sum of {name} latencies (cycles).")
        self.hist  = Log2Histogram("hist", 32, HISTOGRAM_BUCKETS, f"{name} latency (cycles)")

        # An add taken and not yet counted (the input stage below, and the histogram's).
        self.pending = Signal()

        # # #

        # Input stage: the latency (a 64-bit difference of timestamps) is registered before
        # the 64-bit sum and the comparisons take it, so that the two carry chains are not on
        # one path (docs/resources.md). An add in the cycle of a clear is dropped.
        add = Signal()
        value = Signal(32)
        self.sync += [add.eq(self.add & ~clear), value.eq(self.value)]
        self.comb += [
            self.hist.add.eq(add), self.hist.value.eq(value), self.hist.clear.eq(clear),
            self.pending.eq(add | self.hist.pending),
        ]
        self.sync += If(clear,
            self.count.status.eq(0), self.min.status.eq(0xFFFFFFFF), self.max.status.eq(0), self.sum.status.eq(0),
        ).Elif(add,
            self.count.status.eq(self.count.status + 1),
            self.sum.status.eq(self.sum.status + value),
            If(value < self.min.status, self.min.status.eq(value)),
            If(value > self.max.status, self.max.status.eq(value)),
        )


class IrqTimer(LiteXModule):
    def __init__(self, data_width, requester_id, cycles, record_depth=256, clock_hz=125e6, vectors_reset=1):
        clear, isr, user = self._add_registers(vectors_reset)
        (done, fire, fire_interval, fired, halted, interval, isr_delta, isr_seen, pending,
         running, started, t0) = self._add_interval(
            cycles, clock_hz, clear)
        record_fifo, = self._add_samples(
            cycles, record_depth, clear, done, fire, fire_interval, fired, halted, interval, isr, isr_delta, isr_seen,
            pending, running, started, t0, user)
        ring, = self._add_ping_and_ring(data_width, requester_id, cycles, clear, halted, record_fifo)
        self._add_busy(isr, pending, record_fifo, ring, running, user)

    def _add_registers(self, vectors_reset):
        self.intro = ModuleDoc(__doc__.split("\n\n")[0] + """

        Program the interval (``mode``, ``min_interval``, ``max_interval``, ``seed``), the
        number of fires (``count``) and the ring, write ``control.start``. Acknowledge each
        interrupt by writing its fire number to ``ack_user`` (and ``ack_isr`` from an ISR, if
        any): the n-th interrupt since ``control.clear`` is fire n.
        """)
        self.irq    = Signal()
        # The MSI vectors a fire raises (bit n: vector n of the card's MSI block, cores/msi.py).
        self.irq_vectors = Signal(32)

        self.control = ActionStorage(fields=[
            CSRField("start", size=1, pulse=True, description="Write 1 to start firing."),
            CSRField("stop",  size=1, pulse=True, description="Write 1 to stop firing (a waiting sample can still be acknowledged)."),
            CSRField("clear", size=1, pulse=True, description="Write 1 to zero statistics, counters, sequence and ring indices."),
        ], description="Timer control.")
        self.config = CSRStorage(fields=[
            CSRField("mode", size=1, values=[
                ("0", "random", "the interval is drawn uniformly in [min_interval, max_interval] by an LFSR."),
                ("1", "periodic", "the interval is always min_interval."),
            ], description="Interval between a fire and the next."),
        ], description="Timer configuration.")
        # A register of its own (not a config field): a host that programs the interval with
        # whole config writes leaves the vectors as another part of it set them.
        self.vector_mode = CSRStorage(fields=[
            CSRField("mode", size=1, values=[
                ("0", "rotate", "each fire raises the next vector of ``vectors`` in turn (lowest first, then round again): with one vector steered to each CPU, the fires visit every CPU."),
                ("1", "all", "each fire raises every vector of ``vectors`` at once (the sample closes at the first ``ack_user``)."),
            ], description="Which of ``vectors`` a fire raises."),
        ], description="How the fires use ``vectors``.")
        self.vectors = CSRStorage(32, reset=vectors_reset, description="MSI vectors the fires raise (bit n: vector n; the card's MSI block sends a message per vector when the host granted several, else one message for all). 0 is taken as the reset value. Read at each fire; the rotation starts again from the lowest at ``control.start``.")
        self.min_interval = CSRStorage(32, reset=12500, description="Shortest interval between fires (cycles, >= 1).")
        self.max_interval = CSRStorage(32, reset=125000, description="Longest interval between fires (cycles, >= min_interval).")
        self.count = CSRStorage(32, description="Fires to do; 0: until control.stop.")
        self.seed = CSRStorage(32, reset=1, description="Seed of the interval LFSR.")
        self.ack_isr = CSRStorage(32, description="Write the fire's number (n for the n-th fire since control.clear) from the interrupt handler: latches the ISR stage of that fire if it is the one waiting.")
        self.ack_user = CSRStorage(32, description="Write the fire's number from the user thread the interrupt woke: latches the user stage and closes the sample if that fire is the one waiting; any other number is a stray acknowledgement.")
        self.ping = CSRStorage(32, description="Write (any value): latches the arrival time (ping_last) and the cycles since the previous ping (ping_delta).")
        self.ping_last = CSRStatus(64, description="Card cycle at which the last ping arrived.")
        self.ping_delta = CSRStatus(32, description="Cycles between the last two pings: the card-side cost of one posted register write.")
        self.status = CSRStatus(fields=[
            CSRField("running", size=1, description="The timer fires."),
            CSRField("pending", size=1, description="A fire waits for ack_user."),
            CSRField("done", size=1, description="count fires were made and acknowledged (or the timer was stopped)."),
            CSRField("halted", size=1, description="The lease ended: the timer stopped and writes nothing to its ring until control.clear."),
        ], description="Timer status.")
        self.fires = CSRStatus(32, description="Interrupts fired since control.clear: also the number of the last fire.")
        self.pending_fire = CSRStatus(32, description="Number of the fire waiting for ack_user (0: none).")
        self.overruns = CSRStatus(32, description="Fires while the previous fire still waited for ack_user (that sample is closed incomplete).")
        self.stray_isr_acks = CSRStatus(32, description="ack_isr writes that named no fire waiting for one (none waited, or another fire's number).")
        self.stray_user_acks = CSRStatus(32, description="ack_user writes that named no waiting fire (none waited, or another fire's number: a late acknowledgement).")
        self.lost = CSRStatus(32, description="Sample records that found the record FIFO full (numbered, so the host sees the gap).")
        self.sequence = CSRStatus(32, description="Sample records numbered so far.")
        # Ring.
        self.ring_base = CSRStorage(64, description="Bus address of the sample ring (32-byte records).")
        self.ring_size_log2 = CSRStorage(5, reset=10, description="log2 of the ring size in records.")
        self.payload_size_log2 = CSRStorage(4, reset=7, description="log2 of the largest ring write in bytes (<= MPS).")
        self.flush_cycles = CSRStorage(16, reset=256, description="Write a partial batch once no record came for this many cycles.")
        self.rd_index = CSRStorage(32, description="Records the host has consumed.")
        self.wr_index = CSRStatus(32, description="Records written to the ring.")

        clear = self.control.fields.clear
        self.isr = isr = StageStats("ISR", clear)
        self.user = user = StageStats("user", clear)
        return clear, isr, user

    def _add_interval(self, cycles, clock_hz, clear):
        # # #

        self.lease = Lease(cycles, clock_hz)
        halted = Signal()
        self.sync += If(clear, halted.eq(0)).Elif(self.lease.stop, halted.eq(1))
        start = self.control.fields.start & ~halted
        stop = self.control.fields.stop | self.lease.stop
        running = Signal()
        pending = Signal()
        done = Signal()
        started = Signal()
        t0 = Signal(64)
        isr_seen = Signal()
        isr_delta = Signal(32)
        timer = Signal(32)
        interval = Signal(32)
        fire_interval = Signal(32)  # the interval that led to the sample's fire
        fired = Signal(32)

        # Interval: min + uniform [0, span] by rejection from an LFSR draw masked to span's width.
        # The LFSR steps only while the timer runs: an idle timer runs nothing (cores/isolate.py).
        # Pipelined for the card's clock (the draw was the card's deepest path at 250 MHz:
        # docs/resources.md): span registered from the CSRs (it changes only on a register
        # write, and a start is a later write), the masked draw registered from the LFSR, and
        # only the check and the sum of a registered draw before the interval's registers.
        lfsr = Signal(32, reset=1)
        self.sync += If(start, lfsr.eq(Mux(self.seed.storage == 0, 1, self.seed.storage))).Elif(running,
            lfsr.eq(Mux(lfsr[0], (lfsr >> 1) ^ 0x80200003, lfsr >> 1)))
        span = Signal(32)
        self.sync += span.eq(self.max_interval.storage - self.min_interval.storage)
        # mask: ones from bit 0 up to span's highest set bit, i.e. bit i set when any bit of
        # span from i up is: each bit an OR of span's upper bits, a few LUTs deep, rather than a
        # chain of 32 priority Ifs.
        mask = Signal(32)
        self.comb += ones_to_highest(span, mask)
        # draw: the LFSR masked, as it was a cycle before; draw_valid: draw comes from this
        # run's LFSR (a start reseeds it: the same seed gives the same intervals).
        draw = Signal(32)
        draw_valid = Signal()
        self.sync += [
            If(running, draw.eq(lfsr & mask)),
            draw_valid.eq(running & ~start),
        ]
        draw_ok = Signal()
        self.comb += draw_ok.eq(draw_valid & ((self.config.fields.mode == MODE_PERIODIC) | (draw <= span)))
        next_interval = Signal(32)
        self.comb += next_interval.eq(self.min_interval.storage + Mux(self.config.fields.mode == MODE_PERIODIC, 0, draw))
        need_interval = Signal()

        # timer: cycles left to the fire, loaded with the interval and fired at 1 or 0 (no
        # decrement between the sum and the register; a 0 or 1 interval fires at once).
        fire = Signal()
        self.comb += fire.eq(running & ~need_interval & (timer[1:] == 0))
        count = self.count.storage
        self.sync += [
            If(start,
                running.eq(1), started.eq(1), need_interval.eq(1), fired.eq(0),
            ).Elif(stop,
                running.eq(0),
            ).Elif(running & need_interval,
                If(draw_ok,
                    interval.eq(next_interval),
                    timer.eq(next_interval),
                    need_interval.eq(0),
                )
            ).Elif(fire,
                fired.eq(fired + 1),
                need_interval.eq(1),
                If((count != 0) & (fired + 1 >= count), running.eq(0)),
            ).Elif(running,
                timer.eq(timer - 1),
            ),
        ]
        return done, fire, fire_interval, fired, halted, interval, isr_delta, isr_seen, pending, running, started, t0

    def _add_samples(self, cycles, record_depth, clear, done, fire, fire_interval, fired, halted, interval, isr,
                     isr_delta, isr_seen, pending, running, started, t0, user):
        # Samples ---------------------------------------------------------------------------------
        pending_fire = self.pending_fire.status
        ack_isr = self.ack_isr.re & (self.ack_isr.storage == pending_fire)
        ack_user = self.ack_user.re & (self.ack_user.storage == pending_fire)
        emit = Signal()
        overrun = Signal()
        isr_ack_ok = Signal()
        user_ack_ok = Signal()
        self.comb += [
            # An acknowledgement in the very cycle of the next fire still closes the old sample.
            overrun.eq(fire & pending & ~ack_user),
            isr_ack_ok.eq(ack_isr & pending & ~isr_seen),
            user_ack_ok.eq(ack_user & pending),
            emit.eq(user_ack_ok | overrun),
        ]
        now_delta = Signal(64)
        self.comb += now_delta.eq(cycles - t0)
        delta32 = Signal(32)
        self.comb += delta32.eq(Mux(now_delta[32:] != 0, 0xFFFFFFFF, now_delta[:32]))
        self.comb += [
            isr.add.eq(isr_ack_ok), isr.value.eq(delta32),
            user.add.eq(user_ack_ok), user.value.eq(delta32),
        ]
        # Vectors: `todo` holds the vectors of ``vectors`` not yet raised in this round; a
        # rotating fire takes its lowest (x & -x), an empty round starts again from them all.
        vectors = Signal(32)
        self.comb += vectors.eq(Mux(self.vectors.storage == 0, self.vectors.storage.reset, self.vectors.storage))
        todo = Signal(32)
        round_ = Signal(32)
        self.comb += round_.eq(Mux((todo == 0) | (self.vector_mode.fields.mode == VECTOR_MODE_ALL), vectors, todo))
        next_vector = Signal(32)
        self.comb += next_vector.eq(round_ & (~round_ + 1))
        next_index = Signal(5)
        for i in range(32):
            self.comb += If(next_vector[i], next_index.eq(i))
        fire_vectors = Signal(32)
        self.comb += fire_vectors.eq(Mux(self.vector_mode.fields.mode == VECTOR_MODE_ALL, vectors, next_vector))
        sample_vector = Signal(5)   # the fire's vector (in mode all, the lowest)
        self.sync += [
            If(self.control.fields.start | clear, todo.eq(0)).Elif(fire, todo.eq(round_ & ~next_vector)),
            If(fire, sample_vector.eq(next_index)),
        ]
        self.comb += self.irq_vectors.eq(Mux(fire, fire_vectors, 0))

        seq = Signal(32)
        record = Signal(RECORD_DWS * 32)
        w = [record[32*i:32*(i+1)] for i in range(RECORD_DWS)]
        self.comb += [
            w[0].eq(seq),
            w[1].eq(t0[:32]),
            w[2].eq(t0[32:]),
            # Same kind bits as the spy's event records (traces/FORMAT.md): fmt 7, type 3.
            w[3].eq(Cat(C(0, 1), C(EVENT_FMT, 3), C(EVENT_IRQ_SAMPLE, 5), isr_seen, overrun, C(0, 5), sample_vector)),
            w[4].eq(Mux(isr_seen, isr_delta, 0xFFFFFFFF)),
            w[5].eq(Mux(overrun, 0xFFFFFFFF, delta32)),
            w[6].eq(fire_interval),
            w[7].eq(fired),
        ]
        self.record_fifo = record_fifo = stream.SyncFIFO(record_layout(), record_depth, buffered=True)
        record_fifo = ResetInserter()(record_fifo)
        self.comb += [
            record_fifo.reset.eq(clear | halted),
            record_fifo.sink.valid.eq(emit & ~halted),
            record_fifo.sink.record.eq(record),
        ]
        self.sync += [
            If(fire,
                # The MSI leaves OUTPUT_LAG cycles after this (isolated block): stamp that.
                t0.eq(cycles + OUTPUT_LAG), isr_seen.eq(0), pending.eq(1), fire_interval.eq(interval),
                pending_fire.eq(self.fires.status + 1),
            ).Elif(user_ack_ok | self.lease.stop | clear,
                pending.eq(0), pending_fire.eq(0),
            ),
            If(isr_ack_ok, isr_seen.eq(1), isr_delta.eq(delta32)),
            If(clear,
                seq.eq(0),
                *[c.status.eq(0) for c in (self.fires, self.overruns, self.stray_isr_acks, self.stray_user_acks, self.lost)],
            ).Else(
                If(emit, seq.eq(seq + 1)),
                If(fire, self.fires.status.eq(self.fires.status + 1)),
                If(overrun, self.overruns.status.eq(self.overruns.status + 1)),
                If(self.ack_isr.re & ~isr_ack_ok, self.stray_isr_acks.status.eq(self.stray_isr_acks.status + 1)),
                If(self.ack_user.re & ~user_ack_ok, self.stray_user_acks.status.eq(self.stray_user_acks.status + 1)),
                If(emit & ~record_fifo.sink.ready, self.lost.status.eq(self.lost.status + 1)),
            ),
        ]
        # Done once the timer stopped firing and the last fire is acknowledged (or closed).
        self.sync += If(clear, started.eq(0))
        self.comb += [
            done.eq(started & ~running & ~pending),
            self.status.fields.running.eq(running),
            self.status.fields.pending.eq(pending),
            self.status.fields.done.eq(done),
            self.status.fields.halted.eq(halted),
            self.sequence.status.eq(seq),
            self.irq.eq(fire),
        ]
        return record_fifo,

    def _add_ping_and_ring(self, data_width, requester_id, cycles, clear, halted, record_fifo):
        # Ping ----------------------------------------------------------------------------------
        self.sync += If(self.ping.re,
            self.ping_last.status.eq(cycles),
            self.ping_delta.status.eq(cycles - self.ping_last.status),
        )

        # Ring ----------------------------------------------------------------------------------
        self.ring = ring = RecordRingWriter(data_width, requester_id, record_fifo,
            ring_base=self.ring_base.storage, ring_size_log2=self.ring_size_log2.storage,
            payload_size_log2=self.payload_size_log2.storage, flush_cycles=self.flush_cycles.storage,
            rd_index=self.rd_index.storage, clear=clear, tag=RING_TAG, halt=halted)
        self.source = ring.source
        self.comb += self.wr_index.status.eq(ring.wr_index)
        return ring,

    def _add_busy(self, isr, pending, record_fifo, ring, running, user):
        # Busy: every state in which a register of the timer can change without a CSR access
        # (cores/isolate.py gates the block on it).
        self.busy = Signal()
        self.comb += self.busy.eq(running | pending | (record_fifo.level != 0) | ~ring.fsm.ongoing("IDLE") |
            self.lease.held | self.source.valid | isr.pending | user.pending)

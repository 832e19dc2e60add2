"""Passive transaction spy: every TLP on the card's link summarised in a 32-byte record.

```
 PHY rx (down) ──tap──► TLPObserver ─┐ filter, sequence   ┌► FIFO ─┐
 PHY tx (up)   ──tap──► TLPObserver ─┘ numbers, counters ─┴► FIFO ─┴► RecordBuilder ─► trigger /
                                                                    (read matching,   record FIFO
                                                                     latency, timeouts) ─► RingWriter ─MWr─► host ring
```

The taps only look at valid/ready/first/last/data of the PHY streams: the spy never
back-pressures the link, and it sees requests the card then rejects. Each TLP becomes one
record (layout: traces/FORMAT.md, record format version 1). Records get their sequence number
when they pass the filters; a record that finds its FIFO full is lost *after* it was
numbered, so every loss is both counted (``lost``) and visible to the host as a sequence gap.

Record format 2 adds two kinds (fmt 7): payload records (type 5), the first ``payload.dws``
data DWs of a TLP right after its record (numbered after it, up to 6 DWs each, bytes in
address order: the PHY stream's DW as it comes, byte 0 in bits 7:0), and MSI records (type 4),
one per MSI handed to the hard IP (the valid & ready handshake of the endpoint's ``msi``
stream; the hard IP turns it into an MWr no PHY stream carries). An MSI record's ``sources``
is ``pcie_msi.vector`` in the cycle of the handshake: the enabled sources that fired and that
the host has not cleared (``pcie_msi.clear``) yet, so a source the host leaves pending shows in
later MSIs' records too; ``wait_cycles`` counts the cycles ``valid`` was high before ``ready``.

Buffers and limits (a burst is absorbed by the FIFOs; the ring writer drains them a full
beat per cycle, sharing the card-to-host link round-robin with the card's other TLPs):

=========================  ==========  ==========  ==========  ==============================
buffer                      64-bit      128-bit     256-bit     block RAM (7-series BRAM36)
=========================  ==========  ==========  ==========  ==============================
record FIFO (256 b)         2048        2048        2048        15
summary FIFO per direction  512         1024        1024        4 / 7 each (231 b wide)
payload FIFO per direction  512         512         512         8 each (16 DWs wide)
MSI FIFO                    4           4           4           LUTRAM
=========================  ==========  ==========  ==========  ==============================

The builder takes one summary per cycle (oldest of the two directions first; an MSI record
or a payload record takes a cycle of its own). On 64 bits the smallest TLPs bring at most one
summary per cycle in both directions together, so the summary FIFOs stay short and the record
FIFO absorbs a burst; on 128 and 256 bits both directions can bring one per cycle each and the
summary FIFOs absorb what the builder has not taken. Measured in the Verilated card
(testing/spy_burst.py: 1-DW CplD down back to back, the generator's 1-DW MWr up as fast as the
link lets it beside the ring writes, no payload capture, host ring large enough), the longest
burst with zero loss, per direction: 64-bit 3312, 128-bit 3437, 256-bit 9125 TLPs; with
payload capture on (a payload record per TLP) 1234, 968 and 921. Beyond it records are lost
(counted in ``lost``, a sequence gap each) until the FIFOs drain; the spy then records again
without loss. Payload capture makes 2..4 records of a TLP: the builder takes that many
cycles, and the payload FIFOs (512) fill first.
"""

from functools import reduce
from operator import or_

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage, CSRField
from litex.soc.integration.doc import ModuleDoc

from litepcie.common import phy_layout

from tlpx_gateware.cores.csr import ActionStorage
from tlpx_gateware import tlp
from tlpx_gateware.cores.common import Log2Histogram
from tlpx_gateware.cores.lease import Lease
from tlpx_gateware.cores.ring import RECORD_DWS, RecordRingWriter, record_layout

RECORD_VERSION = 2
# Records the record FIFO holds (the most `pre` records of a start trigger, plus one; the same
# on every width, so that the host's limit is one constant), and the buckets of the latency
# and payload-size histograms.
# Tag of the ring's MWrs (unused by PCIe in a posted write: the spy's own writes are
# attributed to it by this tag; soc.py checks the card's tags do not overlap).
RING_TAG = 50
RECORD_FIFO_DEPTH = 2048
LATENCY_BUCKETS   = 32
PAYLOAD_BUCKETS   = 13
# Payload capture: at most this many data DWs per TLP, carried by payload records of up to
# PAYLOAD_RECORD_DWS DWs each (w1, w2, w4..w7); a direction's captured payloads wait in a
# FIFO of PAYLOAD_FIFO_DEPTH entries (PAYLOAD_DWS_MAX DWs each) beside its summary FIFO.
PAYLOAD_DWS_MAX    = 16
PAYLOAD_RECORD_DWS = 6
PAYLOAD_FIFO_DEPTH = 512  # 512 x 512 bits: 8 BRAM36 (512x72), the same as 256 entries
MSI_FIFO_DEPTH     = 4


def summary_fifo_depth(data_width):
    """Summaries each direction's FIFO holds before the record builder takes them.

    The builder takes one summary per cycle, or two and more for a TLP with payload records.
    On the 64-bit datapath the smallest TLP takes two beats, so the two directions together
    bring at most one per cycle: without payload capture the builder keeps up, with it this
    FIFO absorbs the difference (512 entries of 231 bits: 4 BRAM36, 512x72). On 128 and 256
    bits a 1-beat TLP can come every cycle in each direction: the builder falls behind by one
    summary per cycle (half a summary per direction) and this FIFO (1024 entries: 7 BRAM36,
    1Kx36) is what absorbs a burst; with the record FIFO both fill after a burst of about
    2048 cycles in both directions when the ring writer cannot send.
    """
    return 512 if data_width <= 64 else 1024


# TLP classes for the live counters and the type filter (bit = class); "msi" is a class of the
# filter only (the card's MSIs, which the PHY streams never carry: see the MSI record).
CLASSES = ["mrd", "mwr", "cpl", "cpld", "msg", "cfg", "io", "other", "msi"]
CLASS_MRD, CLASS_MWR, CLASS_CPL, CLASS_CPLD, CLASS_MSG, CLASS_CFG, CLASS_IO, CLASS_OTHER, CLASS_MSI = range(9)
TLP_CLASSES = 8

EVENT_FMT     = 7
EVENT_TIMEOUT = 1
EVENT_MSI     = 4
EVENT_PAYLOAD = 5

TRIGGER_OFF   = 0
TRIGGER_START = 1
TRIGGER_STOP  = 2


def summary_layout():
    return [
        ("hdr0", 32), ("hdr1", 32), ("hdr2", 32), ("hdr3", 32),
        ("start", 64), ("duration", 16), ("wait", 8), ("gaps", 8),
        ("direction", 1), ("own", 1),
        ("pl_n", 5),  # payload DWs captured (0: none); the DWs wait in the payload FIFO
    ]


def payload_layout():
    return [("dws", 32 * PAYLOAD_DWS_MAX)]


def msi_event_layout():
    return [("time", 64), ("vector", 8), ("sources", 32), ("wait", 32)]


def payload_records(pl_n):
    """Payload records for `pl_n` captured DWs (Migen expression or int)."""
    if isinstance(pl_n, int):
        return (pl_n + PAYLOAD_RECORD_DWS - 1) // PAYLOAD_RECORD_DWS
    return Mux(pl_n == 0, 0, Mux(pl_n <= 6, 1, Mux(pl_n <= 12, 2, 3)))


def tlp_class(dw0):
    """Migen statements + Signal: the class of a TLP from its DW0."""
    fmt, type_ = dw0[29:32], dw0[24:29]
    cls = Signal(3)
    stmts = [
        If(type_ == tlp.TYPE_MEM,
            cls.eq(Mux(fmt[1], CLASS_MWR, CLASS_MRD))
        ).Elif(type_ == tlp.TYPE_MEM_LK,
            cls.eq(CLASS_MRD)
        ).Elif(type_ == tlp.TYPE_CPL,
            cls.eq(Mux(fmt[1], CLASS_CPLD, CLASS_CPL))
        ).Elif((type_ == tlp.TYPE_CFG0) | (type_ == tlp.TYPE_CFG1),
            cls.eq(CLASS_CFG)
        ).Elif(type_ == tlp.TYPE_IO,
            cls.eq(CLASS_IO)
        ).Elif((type_ & tlp.MSG_TYPE_MASK) == tlp.MSG_TYPE,
            cls.eq(CLASS_MSG)
        ).Else(
            cls.eq(CLASS_OTHER)
        )
    ]
    return cls, stmts

# Observer -----------------------------------------------------------------------------------------

class TLPObserver(LiteXModule):
    """Watches one PHY stream and summarises every TLP when its last beat is accepted."""
    def __init__(self, data_width, direction, endpoint, cycles, own=C(0, 1)):
        n = data_width // 32
        self.summary = Signal()  # pulse: `fields` hold a finished TLP
        self.fields  = Record(summary_layout())
        self.payload = Signal(32 * PAYLOAD_DWS_MAX)  # the first data DWs, with `summary`
        self.active  = Signal()  # inside a TLP (its wait and gap counters run)

        # # #

        in_packet = Signal()
        beat      = Signal(10)
        hdr       = [Signal(32, name=f"obs_hdr{i}") for i in range(4)]
        start     = Signal(64)
        wait      = Signal(8)
        gaps      = Signal(8)
        own_reg   = Signal()
        begins    = Signal()
        accepted  = Signal()
        self.comb += [
            begins.eq(~in_packet & endpoint.valid & endpoint.first),
            accepted.eq(endpoint.valid & endpoint.ready),
        ]
        # Header DWs from the first beats.
        captures = []
        for b in range(max(1, 4 // n)):
            for j in range(min(n, 4 - b * n)):
                captures.append(If(accepted & (beat == b), hdr[b * n + j].eq(endpoint.dat[32*j:32*(j+1)])))
        self.sync += captures
        busy = Signal()
        self.comb += busy.eq(in_packet | begins)
        self.comb += self.active.eq(in_packet)
        self.sync += [
            If(begins,
                start.eq(cycles),
                own_reg.eq(own),
                wait.eq(0), gaps.eq(0),
            ),
            If(busy & endpoint.valid & ~endpoint.ready & (wait != 255), wait.eq(wait + 1)),
            If(in_packet & ~endpoint.valid & (gaps != 255), gaps.eq(gaps + 1)),
            If(accepted,
                beat.eq(beat + 1),
                in_packet.eq(1),
                If(endpoint.last,
                    beat.eq(0),
                    in_packet.eq(0),
                )
            ),
        ]
        # Summary, valid in the cycle the last beat is accepted.
        start_now = Signal(64)
        duration  = Signal(64)
        self.comb += [
            start_now.eq(Mux(in_packet, start, cycles)),
            duration.eq(cycles - start_now),
            self.summary.eq(accepted & endpoint.last),
            self.fields.start.eq(start_now),
            self.fields.duration.eq(Mux(duration > 0xFFFF, 0xFFFF, duration)),
            self.fields.wait.eq(wait + (endpoint.valid & ~endpoint.ready & (wait != 255))),
            self.fields.gaps.eq(gaps),
            self.fields.direction.eq(direction),
            self.fields.own.eq(Mux(in_packet, own_reg, own)),
        ]
        # The header, with the DWs of this very beat where they arrive now.
        for i in range(4):
            b, j = divmod(i, n)
            self.comb += getattr(self.fields, f"hdr{i}").eq(
                Mux(beat == b, endpoint.dat[32*j:32*(j+1)], hdr[i]))
        # The first data DWs: the PHY stream carries a TLP's DWs contiguously, data right after
        # the 3- or 4-DW header (which one, DW0 says: from this beat while it is beat 0). Each
        # DW is kept as the stream carries it (LitePCIe's PHY stream: byte 0 of a data DW, the
        # one at the lowest address, in bits 7:0).
        hdr4_now = Signal()
        self.comb += hdr4_now.eq(Mux(beat == 0, endpoint.dat[29], hdr[0][29]))
        pl = [Signal(32, name=f"obs_pl{i}") for i in range(PAYLOAD_DWS_MAX)]
        for i in range(PAYLOAD_DWS_MAX):
            b3, j3 = divmod(3 + i, n)
            b4, j4 = divmod(4 + i, n)
            lane3, lane4 = endpoint.dat[32*j3:32*(j3+1)], endpoint.dat[32*j4:32*(j4+1)]
            self.sync += If(accepted,
                If(hdr4_now, If(beat == b4, pl[i].eq(lane4))).Else(If(beat == b3, pl[i].eq(lane3)))
            )
            self.comb += self.payload[32*i:32*(i+1)].eq(
                Mux(hdr4_now, Mux(beat == b4, lane4, pl[i]), Mux(beat == b3, lane3, pl[i])))

# Filter -------------------------------------------------------------------------------------------

class SpyFilter(LiteXModule):
    """Does a summary pass? Direction mask, class mask, address base/mask (requests only),
    requester ID and mask."""
    def __init__(self, fields, cfg):
        self.match = Signal()

        # # #

        cls, stmts = tlp_class(fields.hdr0)
        self.comb += stmts
        is_request = Signal()
        address = Signal(64)
        hdr4 = fields.hdr0[29]
        self.comb += [
            is_request.eq((cls != CLASS_CPL) & (cls != CLASS_CPLD)),
            address.eq(Mux(hdr4, Cat(C(0, 2), fields.hdr3[2:32], fields.hdr2), Cat(C(0, 2), fields.hdr2[2:32]))),
        ]
        requester = fields.hdr1[16:32]
        completion_requester = fields.hdr2[16:32]
        rid = Signal(16)
        self.comb += rid.eq(Mux(is_request, requester, completion_requester))
        self.comb += self.match.eq(
            ((cfg.direction_mask >> fields.direction)[0]) &
            ((cfg.class_mask >> cls)[0]) &
            (~is_request | ((address & cfg.address_mask) == (cfg.address_base & cfg.address_mask))) &
            ((rid & cfg.requester_mask) == (cfg.requester_id & cfg.requester_mask)) &
            (cfg.include_own | ~fields.own)
        )

# Spy ----------------------------------------------------------------------------------------------

class _FifoView(Module):
    """What RecordRingWriter uses of a record FIFO (level, sink, source), with a `ready` of its
    own: the spy decides whether the ring writer or the DMA writer path pops the FIFO."""
    def __init__(self, fifo):
        self.level = fifo.level
        self.sink = fifo.sink
        self.source = stream.Endpoint(record_layout())
        self.comb += [
            self.source.valid.eq(fifo.source.valid),
            self.source.record.eq(fifo.source.record),
        ]


class Spy(LiteXModule):
    def __init__(self, data_width, rx, tx, own_tx, requester_id, cycles, summary_depth=None, record_depth=RECORD_FIFO_DEPTH,
                 payload_depth=PAYLOAD_FIFO_DEPTH, msi=None, clock_hz=125e6):
        # msi: the endpoint's MSI stream to the hard IP (valid, ready, dat = vector), tapped;
        # self.msi_sources: input, the MSI block's vector of sources (pcie_msi.vector).
        if summary_depth is None:
            summary_depth = summary_fifo_depth(data_width)
        self._add_registers(data_width, record_depth)
        clear, counting, down, down_filter, up, up_filter = self._add_observers(data_width, rx, tx, own_tx, cycles)
        halted, = self._add_lease(cycles, clock_hz, clear)
        (down_fifo, down_pfifo, enable, lost, lost_now, numbers_lost, seq, stopped,
         timeout_event, up_fifo, up_pfifo) = self._add_summary_fifos(
            summary_depth, payload_depth, down, down_filter, halted, up, up_filter)
        msi_fifo, = self._add_msi_tap(cycles, msi, clear, enable, lost_now, numbers_lost, stopped, up)
        builder_in, do_msi, n_payload, phase, pl_rec, pl_src_dws, tlp_rec = self._add_record_arbiter(
            down_fifo, down_pfifo, msi_fifo, up_fifo, up_pfifo)
        (cls, f, is_cpl, last_cpl, latency, matched, pending_reads, scan_dir, scan_entry,
         scan_tag, splits) = self._add_read_matching(
            cycles, builder_in, enable, msi_fifo, stopped, timeout_event, tlp_rec)
        rec_valid, record = self._add_record_formats(
            cycles, clear, do_msi, f, is_cpl, last_cpl, latency, matched, msi_fifo, n_payload, phase, pl_rec,
            pl_src_dws, scan_dir, scan_entry, scan_tag, seq, splits, timeout_event, tlp_rec)
        mode, trigger_hit, triggered = self._add_trigger(
            clear, cls, f, is_cpl, pl_rec, rec_valid, seq, stopped, tlp_rec)
        drop_oldest, holding, record_fifo = self._add_record_fifo(
            record_depth, clear, halted, lost, lost_now, mode, pl_rec, rec_valid, record, seq, stopped, tlp_rec,
            trigger_hit, triggered)
        pad_left, ring, rs = self._add_ring_writer(
            data_width, requester_id, clear, drop_oldest, halted, holding, record_fifo)
        self._add_busy(
            builder_in, counting, down, down_fifo, msi_fifo, pad_left, pending_reads, phase, record_fifo, ring, rs, up,
            up_fifo)

    def _add_registers(self, data_width, record_depth):
        self.msi_sources = Signal(32)
        self.intro = ModuleDoc(__doc__.split("\n\n")[0] + """

        Program the ring (``ring_base``, ``ring_size_log2``), filters and trigger, set
        ``control.enable``; read ``wr_index`` to learn how many records reached the ring and
        write ``rd_index`` when the host has consumed them. ``lost`` counts records that were
        numbered but could not be kept.

        A capture is a lease (``lease_*``, cores/lease.py): its owner claims the spy and
        refreshes the lease; when the lease expires (or is released) the spy halts: it records
        nothing more, empties its record FIFO and writes nothing more to the ring, until the
        next ``control.clear``.
        """)
        self.source = stream.Endpoint(phy_layout(data_width))  # the ring writer's MWr TLPs
        # Records for LitePCIe's DMA writer (control.to_dma_writer): the path for a host whose
        # driver owns the DMA buffers and gives user space no bus address (LitePCIe's stock
        # driver): the driver's writer ring takes the records, the host reads its buffers.
        self.record_source = stream.Endpoint(record_layout())
        self.irq    = Signal()

        self.control = ActionStorage(fields=[
            CSRField("enable", size=1, description="Capture records (counters and histograms run regardless)."),
            CSRField("clear", size=1, offset=1, pulse=True, description="Write 1 to zero counters, histograms, sequence and ring indices, and to re-arm the trigger."),
            CSRField("include_own", size=1, offset=2, description="Also record the spy's own ring writes (with ``to_dma_writer``: LitePCIe's DMA TLPs, which carry the records)."),
            CSRField("to_dma_writer", size=1, offset=3, description="Send the records into LitePCIe's DMA writer (pcie_dma0, loopback off) instead of the ring: for a driver that owns the DMA buffers. ``wr_index`` then counts records (and pad records) handed to the writer."),
        ], description="Spy control.")
        self.direction_mask = CSRStorage(2, reset=0b11, description="Directions to record: bit 0 down (host to card), bit 1 up (card to host).")
        self.class_mask = CSRStorage(len(CLASSES), reset=(1 << len(CLASSES)) - 1, description="Classes to record, bit per class: " + ", ".join(f"{i} {c}" for i, c in enumerate(CLASSES)) + " (the card's MSIs: MSI records, direction up).")
        self.address_base = CSRStorage(64, description="Requests are recorded when (address & address_mask) == (address_base & address_mask).")
        self.address_mask = CSRStorage(64, description="Address bits compared (0: every address).")
        self.requester_id = CSRStorage(16, description="Requester ID compared under requester_mask.")
        self.requester_mask = CSRStorage(16, description="Requester ID bits compared (0: every requester).")
        self.trigger = CSRStorage(fields=[
            CSRField("mode", size=2, values=[
                ("0", "off", "record continuously."),
                ("1", "start", "keep the last `pre` records until the trigger matches, then record `post` records (the trigger's included) and stop."),
                ("2", "stop", "record continuously until the trigger matches, then `post` more records and stop."),
            ], description="Trigger mode."),
            CSRField("class_mask", size=8, offset=8, description="Classes that can trigger."),
            CSRField("direction_mask", size=2, offset=16, description="Directions that can trigger."),
        ], description="Trigger.")
        self.trigger_address_base = CSRStorage(64, description="The trigger matches requests whose (address & mask) == (base & mask).")
        self.trigger_address_mask = CSRStorage(64, description="Trigger address bits compared.")
        self.trigger_pre = CSRStorage(16, description=f"Records kept before the trigger (start mode), up to {record_depth - 1}.")
        self.trigger_post = CSRStorage(32, reset=1, description="Records kept from the trigger on (at least 1: the trigger itself).")
        self.timeout = CSRStorage(32, reset=125000, description="Cycles after which a read the spy saw without its last completion is reported as a completion timeout.")
        self.ring_base = CSRStorage(64, description="Bus address of the ring (32-byte aligned).")
        self.ring_size_log2 = CSRStorage(5, reset=12, description="log2 of the ring size in records (capacity 2^n records of 32 bytes).")
        self.payload_size_log2 = CSRStorage(4, reset=7, description="log2 of the largest ring write in bytes (<= MPS, >= 32).")
        self.flush_cycles = CSRStorage(16, reset=1024, description="Write a partial batch of records once no record came for this many cycles.")
        self.rd_index = CSRStorage(32, description="Records the host has consumed (written by the host).")
        self.wr_index = CSRStatus(32, description="Records written to the ring (in host memory when this is read).")
        self.sequence = CSRStatus(32, description="Records numbered so far (the next record's sequence number).")
        self.lost = CSRStatus(32, description="Records numbered but lost: a FIFO was full (ring full or spy too slow).")
        self.status = CSRStatus(fields=[
            CSRField("triggered", size=1, description="The trigger has matched."),
            CSRField("stopped", size=1, description="Capture stopped after the trigger's post count."),
            CSRField("halted", size=1, offset=2, description="The capture's lease ended (expired or released): nothing is recorded or written to the ring until ``control.clear``."),
            CSRField("records", size=16, offset=8, description="Records waiting in the spy's record FIFO."),
        ], description="Capture status.")
        self.counter_select = CSRStorage(4, description="Counter set to read: direction * 8 + class (classes: " + ", ".join(CLASSES) + ").")
        self.count_tlps = CSRStatus(64, description="TLPs of the selected direction and class (all TLPs, filters do not apply).")
        self.count_bytes = CSRStatus(64, description="Bytes of those TLPs on the datapath (header and payload DWs).")
        self.count_payload = CSRStatus(64, description="Payload bytes of those TLPs (Length DWs of TLPs with data).")
        self.count_wait = CSRStatus(64, description="Cycles those TLPs waited with valid high and ready low.")
        self.latency_hist = Log2Histogram("latency_hist", 32, LATENCY_BUCKETS, "matched read latency, request to last completion (cycles)")
        self.payload_hist_down = Log2Histogram("payload_hist_down", 13, PAYLOAD_BUCKETS, "payload bytes per host-to-card TLP with data")
        self.payload_hist_up = Log2Histogram("payload_hist_up", 13, PAYLOAD_BUCKETS, "payload bytes per card-to-host TLP with data")

    def _add_observers(self, data_width, rx, tx, own_tx, cycles):
        # # #

        class Cfg:
            pass
        cfg = Cfg()
        cfg.direction_mask = self.direction_mask.storage
        cfg.class_mask = self.class_mask.storage
        cfg.address_base = self.address_base.storage
        cfg.address_mask = self.address_mask.storage
        cfg.requester_id = self.requester_id.storage
        cfg.requester_mask = self.requester_mask.storage
        cfg.include_own = self.control.fields.include_own
        clear = self.control.fields.clear

        # Observers, filters, live counters ---------------------------------------------------------
        self.down = down = TLPObserver(data_width, 0, rx, cycles)
        self.up   = up   = TLPObserver(data_width, 1, tx, cycles, own=own_tx)
        self.down_filter = down_filter = SpyFilter(down.fields, cfg)
        self.up_filter   = up_filter   = SpyFilter(up.fields, cfg)

        counters = {k: Array(Signal(64, name=f"spy_{k}{i}") for i in range(16)) for k in ("tlps", "bytes", "payload", "wait")}
        counting = []  # a TLP's counts registered and not yet added, or their statuses (in busy)
        for obs in (down, up):
            cls, stmts = tlp_class(obs.fields.hdr0)
            self.comb += stmts
            idx = Signal(4)
            length = Signal(11)
            has_data = obs.fields.hdr0[30]
            hdr_dws = Mux(obs.fields.hdr0[29], 4, 3)
            self.comb += [
                idx.eq(Cat(cls, obs.fields.direction)),
                length.eq(Mux(obs.fields.hdr0[:10] == 0, 1024, obs.fields.hdr0[:10])),
            ]
            # The spy's own ring writes do not count unless included.
            counted = Signal()
            self.comb += counted.eq(obs.summary & (cfg.include_own | ~obs.fields.own))
            # Input stage: the TLP's class, sizes and wait are registered, and its counters add
            # them a cycle later, so that the header's decoding and the 64-bit adds are not on
            # one path (docs/resources.md). The two observers' counters differ by direction
            # (idx), so their adds never meet. An add in the cycle of a clear is dropped.
            add = Signal()
            add_idx = Signal(4)
            add_bytes = Signal(13)
            add_payload = Signal(13)
            add_wait = Signal(len(obs.fields.wait))
            self.sync += [
                add.eq(counted & ~clear),
                add_idx.eq(idx),
                add_bytes.eq((hdr_dws + Mux(has_data, length, 0)) << 2),
                add_payload.eq(Mux(has_data, length << 2, 0)),
                add_wait.eq(obs.fields.wait),
            ]
            counting.append(add)
            self.sync += If(add,
                counters["tlps"][add_idx].eq(counters["tlps"][add_idx] + 1),
                counters["bytes"][add_idx].eq(counters["bytes"][add_idx] + add_bytes),
                counters["payload"][add_idx].eq(counters["payload"][add_idx] + add_payload),
                counters["wait"][add_idx].eq(counters["wait"][add_idx] + add_wait),
            )
        self.sync += If(clear, *[c.eq(0) for arr in counters.values() for c in arr])
        sel = self.counter_select.storage
        # Registered: the 16-way multiplexers and LiteX's CSR read multiplexer are not one path.
        # They follow a select's write within the cycles a register write keeps the spy running
        # (cores/isolate.py), and a count's change or a clear by one cycle (`counters_settling`,
        # in busy).
        counters_settling = Signal()
        self.sync += counters_settling.eq(counting[0] | counting[1] | clear)
        counting.append(counters_settling)
        self.sync += [
            self.count_tlps.status.eq(counters["tlps"][sel]),
            self.count_bytes.status.eq(counters["bytes"][sel]),
            self.count_payload.status.eq(counters["payload"][sel]),
            self.count_wait.status.eq(counters["wait"][sel]),
        ]
        # Payload size histograms (TLPs with data; the spy's own writes only when included).
        for obs, hist in ((down, self.payload_hist_down), (up, self.payload_hist_up)):
            self.comb += [
                hist.add.eq(obs.summary & obs.fields.hdr0[30] & (cfg.include_own | ~obs.fields.own)),
                hist.value.eq(Mux(obs.fields.hdr0[:10] == 0, 4096, obs.fields.hdr0[:10] << 2)),
                hist.clear.eq(clear),
            ]
        return clear, counting, down, down_filter, up, up_filter

    def _add_lease(self, cycles, clock_hz, clear):
        # Lease: a capture whose owner is gone halts ---------------------------------------------
        self.lease = Lease(cycles, clock_hz)
        # After the lease: a register added last moves no existing address.
        self.pad = CSRStorage(16, description="Writing N sends N zero records into the DMA writer after every record it holds (``to_dma_writer``): the host completes the driver's last buffer at the end of a capture, as the writer moves whole requests only.")
        # Record format 2 (after pad: no existing address moves).
        self.payload = CSRStorage(fields=[
            CSRField("dws", size=5, description=f"Data DWs to capture per TLP with data, 0..{PAYLOAD_DWS_MAX} (0: off; more than {PAYLOAD_DWS_MAX} captures {PAYLOAD_DWS_MAX}): min(dws, Length) DWs follow the TLP's record as payload records of up to {PAYLOAD_RECORD_DWS} DWs."),
            CSRField("class_mask", size=TLP_CLASSES, offset=8, reset=(1 << TLP_CLASSES) - 1, description="TLP classes whose payload is captured (bits as class_mask)."),
            CSRField("direction_mask", size=2, offset=16, reset=0b11, description="Directions whose payload is captured: bit 0 down, bit 1 up."),
        ], description="Payload capture.")
        self.trigger_sequence = CSRStatus(32, description="Sequence number of the record that matched the trigger (valid when status.triggered).")
        self.own_tlps = CSRStatus(64, description="The spy's own ring writes (TLPs), counted always (include_own or not).")
        self.own_bytes = CSRStatus(64, description="Bytes of the spy's own ring writes on the datapath (header and payload DWs, like count_bytes).")
        self.msi_count = CSRStatus(64, description="MSIs the hard IP accepted (all of them: the filters do not apply).")
        halted = Signal()
        self.sync += If(clear, halted.eq(0)).Elif(self.lease.stop, halted.eq(1))
        return halted,

    def _add_summary_fifos(self, summary_depth, payload_depth, down, down_filter, halted, up, up_filter):
        # Sequence numbers and summary FIFOs -------------------------------------------------------
        enable = Signal()
        self.comb += enable.eq(self.control.fields.enable & ~halted)
        stopped = Signal()
        seq = Signal(32)
        lost = Signal(32)
        take_down = Signal()
        take_up = Signal()
        self.comb += [
            take_down.eq(down.summary & down_filter.match & enable & ~stopped),
            take_up.eq(up.summary & up_filter.match & enable & ~stopped),
        ]
        # Payload capture: how many DWs of this TLP (0: none), decided as it is taken.
        pl_cfg = self.payload.fields
        pl_dws = Signal(5)
        self.comb += pl_dws.eq(Mux(pl_cfg.dws > PAYLOAD_DWS_MAX, PAYLOAD_DWS_MAX, pl_cfg.dws))
        self.down_fifo = down_fifo = stream.SyncFIFO(summary_layout(), summary_depth, buffered=True)
        self.up_fifo = up_fifo = stream.SyncFIFO(summary_layout(), summary_depth, buffered=True)
        self.down_payload_fifo = down_pfifo = stream.SyncFIFO(payload_layout(), payload_depth, buffered=True)
        self.up_payload_fifo = up_pfifo = stream.SyncFIFO(payload_layout(), payload_depth, buffered=True)
        timeout_event = Signal()  # from the builder; numbered here too
        numbers_lost = []
        for fifo, pfifo, obs, take in ((down_fifo, down_pfifo, down, take_down), (up_fifo, up_pfifo, up, take_up)):
            cls_o, stmts_o = tlp_class(obs.fields.hdr0)
            self.comb += stmts_o
            length = Signal(11)
            pl_n = Signal(5)
            room = Signal()
            numbers = Signal(3)
            self.comb += [
                length.eq(Mux(obs.fields.hdr0[:10] == 0, 1024, obs.fields.hdr0[:10])),
                pl_n.eq(Mux(obs.fields.hdr0[30] & (pl_cfg.class_mask >> cls_o)[0] &
                            (pl_cfg.direction_mask >> obs.fields.direction)[0],
                            Mux(length < pl_dws, length, pl_dws), 0)),
                # Both FIFOs or neither: a summary and its payload stay together.
                room.eq(fifo.sink.ready & ((pl_n == 0) | pfifo.sink.ready)),
                fifo.sink.valid.eq(take & room),
                *[getattr(fifo.sink, f).eq(getattr(obs.fields, f)) for f, _ in summary_layout() if f != "pl_n"],
                fifo.sink.pl_n.eq(pl_n),
                pfifo.sink.valid.eq(take & room & (pl_n != 0)),
                pfifo.sink.dws.eq(obs.payload),
                # The TLP's record and its payload records: all numbered, all lost together.
                numbers.eq(Mux(take & ~room, 1 + payload_records(pl_n), 0)),
            ]
            numbers_lost.append(numbers)
        lost_now = Signal(4)
        return down_fifo, down_pfifo, enable, lost, lost_now, numbers_lost, seq, stopped, timeout_event, up_fifo, up_pfifo

    def _add_msi_tap(self, cycles, msi, clear, enable, lost_now, numbers_lost, stopped, up):
        # MSIs: the handshake of the endpoint's MSI stream with the hard IP ----------------------
        msi_fifo = stream.SyncFIFO(msi_event_layout(), MSI_FIFO_DEPTH)
        self.msi_fifo = msi_fifo
        msi_count = Signal(64)
        msi_lost = Signal()
        if msi is not None:
            msi_wait = Signal(32)
            msi_sent = Signal()
            take_msi = Signal()
            self.comb += [
                msi_sent.eq(msi.valid & msi.ready),
                take_msi.eq(msi_sent & enable & ~stopped & self.class_mask.storage[CLASS_MSI] &
                            self.direction_mask.storage[1]),
                msi_fifo.sink.valid.eq(take_msi),
                msi_fifo.sink.time.eq(cycles),
                msi_fifo.sink.vector.eq(msi.dat),
                msi_fifo.sink.sources.eq(self.msi_sources),
                msi_fifo.sink.wait.eq(msi_wait),
                msi_lost.eq(take_msi & ~msi_fifo.sink.ready),
            ]
            self.sync += [
                If(msi_sent, msi_wait.eq(0)).Elif(msi.valid & (msi_wait != 0xFFFFFFFF), msi_wait.eq(msi_wait + 1)),
                If(clear, msi_count.eq(0)).Elif(msi_sent, msi_count.eq(msi_count + 1)),
            ]
        self.comb += [
            lost_now.eq(numbers_lost[0] + numbers_lost[1] + msi_lost),
            self.msi_count.status.eq(msi_count),
        ]

        # The spy's own ring writes, counted always.
        own_tlps = Signal(64)
        own_bytes = Signal(64)
        own_length = Mux(up.fields.hdr0[:10] == 0, 1024, up.fields.hdr0[:10])
        self.sync += If(clear,
            own_tlps.eq(0), own_bytes.eq(0),
        ).Elif(up.summary & up.fields.own,
            own_tlps.eq(own_tlps + 1),
            own_bytes.eq(own_bytes + ((Mux(up.fields.hdr0[29], 4, 3) + Mux(up.fields.hdr0[30], own_length, 0)) << 2)),
        )
        self.comb += [
            self.own_tlps.status.eq(own_tlps),
            self.own_bytes.status.eq(own_bytes),
        ]
        return msi_fifo,

    def _add_record_arbiter(self, down_fifo, down_pfifo, msi_fifo, up_fifo, up_pfifo):
        # Record builder ---------------------------------------------------------------------------
        # Of the two directions' summaries the older goes first (one per cycle, no cycle lost
        # between directions), so the record stream is in time order as far as the FIFOs allow.
        # A summary with payload stays for its payload records (`phase` 1..3); an MSI goes
        # between two summaries.
        builder_in = stream.Endpoint(summary_layout())
        phase = Signal(2)
        sel_r = Signal()
        sel = Signal()
        pick_up = Signal()
        dsrc, usrc = down_fifo.source, up_fifo.source
        self.comb += [
            pick_up.eq(usrc.valid & (~dsrc.valid | (usrc.start < dsrc.start))),
            sel.eq(Mux(phase != 0, sel_r, pick_up)),
            If(sel,
                usrc.connect(builder_in, omit={"ready"}),
            ).Else(
                dsrc.connect(builder_in, omit={"ready"}),
            ),
            usrc.ready.eq(sel & builder_in.ready),
            dsrc.ready.eq(~sel & builder_in.ready),
        ]
        pl_src_dws = Signal(32 * PAYLOAD_DWS_MAX)
        self.comb += [
            pl_src_dws.eq(Mux(sel, up_pfifo.source.dws, down_pfifo.source.dws)),
            up_pfifo.source.ready.eq(sel & builder_in.valid & builder_in.ready & (builder_in.pl_n != 0)),
            down_pfifo.source.ready.eq(~sel & builder_in.valid & builder_in.ready & (builder_in.pl_n != 0)),
        ]
        n_payload = Signal(2)
        self.comb += n_payload.eq(payload_records(builder_in.pl_n))
        do_msi = Signal()
        tlp_rec = Signal()   # the TLP's own record (read matching, trigger: once per summary)
        pl_rec = Signal()    # one of its payload records
        self.comb += [
            do_msi.eq(msi_fifo.source.valid & (phase == 0)),
            tlp_rec.eq(builder_in.valid & ~do_msi & (phase == 0)),
            pl_rec.eq(builder_in.valid & (phase != 0)),
            builder_in.ready.eq(~do_msi & (phase == n_payload)),
            msi_fifo.source.ready.eq(do_msi),
        ]
        self.sync += [
            If(builder_in.valid & ~do_msi,
                If(phase == n_payload,
                    phase.eq(0),
                ).Else(
                    phase.eq(phase + 1),
                ),
                If(phase == 0, sel_r.eq(pick_up)),
            ),
        ]
        return builder_in, do_msi, n_payload, phase, pl_rec, pl_src_dws, tlp_rec

    def _add_read_matching(self, cycles, builder_in, enable, msi_fifo, stopped, timeout_event, tlp_rec):
        # Read matching: per direction of the read, a tag table (time of request, completions seen).
        tables = []
        for d in range(2):
            # Entry: request time (low 32 bits), completions seen, busy, requester ID.
            mem = Memory(32 + 4 + 1 + 16, 256, name=f"spy_tags{d}")
            self.specials += mem
            rd = mem.get_port(async_read=True)
            wr = mem.get_port(write_capable=True)
            self.specials += rd, wr
            tables.append((rd, wr))

        f = builder_in
        cls, stmts = tlp_class(f.hdr0)
        self.comb += stmts
        is_cpl = Signal()
        non_posted = Signal()
        self.comb += [
            is_cpl.eq((cls == CLASS_CPL) | (cls == CLASS_CPLD)),
            # Reads of any kind, and configuration / I/O writes, expect a completion (2.4.1).
            non_posted.eq((~is_cpl & (cls != CLASS_MSG) & ~f.hdr0[30]) | (cls == CLASS_CFG) | (cls == CLASS_IO)),
        ]
        # A read's completions come the other way: its table is indexed by the read's direction.
        req_dir = Signal()
        tag = Signal(8)
        self.comb += [
            req_dir.eq(Mux(is_cpl, ~f.direction, f.direction)),
            tag.eq(Mux(is_cpl, f.hdr2[8:16], f.hdr1[8:16])),
        ]
        entry = Signal(53)
        for d, (rd, wr) in enumerate(tables):
            self.comb += rd.adr.eq(tag)
        self.comb += entry.eq(Mux(req_dir, tables[1][0].dat_r, tables[0][0].dat_r))
        entry_time = entry[:32]
        entry_splits = entry[32:36]
        entry_busy = entry[36]
        matched = Signal()
        last_cpl = Signal()
        latency = Signal(32)
        byte_count = Signal(13)
        length = Signal(11)
        self.comb += [
            length.eq(Mux(f.hdr0[:10] == 0, 1024, f.hdr0[:10])),
            byte_count.eq(Mux(f.hdr1[:12] == 0, 4096, f.hdr1[:12])),
            matched.eq(is_cpl & entry_busy),
            # Last completion: non-success status, no data, or the remaining byte count fits (2.3.1.1).
            last_cpl.eq(is_cpl & ((f.hdr1[13:16] != tlp.CPL_SC) | ~f.hdr0[30] |
                                  (byte_count + f.hdr2[0:2] <= (length << 2)))),
            latency.eq(f.start[:32] - entry_time),
        ]
        splits = Signal(4)
        self.comb += splits.eq(Mux(entry_splits == 15, 15, entry_splits + 1))

        # Timeout scan of both tables, when the builder does not write them.
        scan = Signal(9)
        scan_dir = scan[8]
        scan_tag = scan[:8]
        scan_ports = [mem_port for mem_port in tables]
        scan_entry = Signal(53)
        # A third port per table would be costly; the scan reads through the async read port
        # when no summary is being processed.
        builder_busy = Signal()
        self.comb += builder_busy.eq(builder_in.valid | msi_fifo.source.valid)
        for d, (rd, wr) in enumerate(tables):
            self.comb += If(~builder_busy, rd.adr.eq(scan_tag))
        self.comb += scan_entry.eq(Mux(scan_dir, tables[1][0].dat_r, tables[0][0].dat_r))
        scan_timeout = Signal()
        self.comb += scan_timeout.eq(~builder_busy & scan_entry[36] & ((cycles[:32] - scan_entry[:32]) > self.timeout.storage))
        self.comb += timeout_event.eq(scan_timeout & enable & ~stopped)

        # Table writes.
        for d, (rd, wr) in enumerate(tables):
            self.comb += [
                If(tlp_rec & (req_dir == d),
                    If(~is_cpl & non_posted,
                        wr.we.eq(1), wr.adr.eq(tag), wr.dat_w.eq(Cat(f.start[:32], C(0, 4), C(1, 1), f.hdr1[16:32])),
                    ).Elif(matched,
                        wr.we.eq(1), wr.adr.eq(tag), wr.dat_w.eq(Cat(entry_time, splits, ~last_cpl, entry[37:53])),
                    )
                ).Elif(scan_timeout & (scan_dir == d),
                    wr.we.eq(1), wr.adr.eq(scan_tag), wr.dat_w.eq(0),
                )
            ]
        # Reads the tables hold (a request written busy counts +1, an entry freed -1): the scan
        # runs only while there is one, so an idle spy runs nothing (cores/isolate.py).
        pending_reads = Signal(10)
        pending_delta = Signal((3, True))
        self.comb += pending_delta.eq(0)
        for d, (rd, wr) in enumerate(tables):
            self.comb += [
                If(tlp_rec & (req_dir == d),
                    If(~is_cpl & non_posted,
                        pending_delta.eq(1 - entry_busy),
                    ).Elif(matched,
                        pending_delta.eq(-last_cpl),
                    )
                ).Elif(scan_timeout & (scan_dir == d),
                    pending_delta.eq(-1),
                )
            ]
        self.sync += [
            If(pending_reads != 0, If(~builder_busy, scan.eq(scan + 1))),
            pending_reads.eq(pending_reads + pending_delta),
        ]
        return cls, f, is_cpl, last_cpl, latency, matched, pending_reads, scan_dir, scan_entry, scan_tag, splits

    def _add_record_formats(self, cycles, clear, do_msi, f, is_cpl, last_cpl, latency, matched, msi_fifo, n_payload,
                            phase, pl_rec, pl_src_dws, scan_dir, scan_entry, scan_tag, seq, splits, timeout_event,
                            tlp_rec):
        # Records: built from the summary (or a timeout event, an MSI) in one cycle each.
        record = Signal(RECORD_DWS * 32)
        w = [record[32*i:32*(i+1)] for i in range(RECORD_DWS)]
        rec_valid = Signal()
        # Payload record `phase` (1..3): DWs from first_dw on, up to PAYLOAD_RECORD_DWS.
        first_dw = Signal(5)
        pl_count = Signal(3)
        pl_final = Signal()
        pl_words = [Signal(32, name=f"spy_pl_word{i}") for i in range(PAYLOAD_RECORD_DWS)]
        # A loop, not a comprehension: an argument captured by a comprehension shifts the names
        # Migen's tracer gives this method's other captured locals (Python 3.11's cell layout).
        pl_all = []
        for i in range(PAYLOAD_DWS_MAX):
            pl_all.append(pl_src_dws[32*i:32*(i+1)])
        pl_all += [C(0, 32)] * PAYLOAD_RECORD_DWS
        self.comb += [
            first_dw.eq((phase - 1) * PAYLOAD_RECORD_DWS),
            pl_count.eq(Mux(f.pl_n - first_dw > PAYLOAD_RECORD_DWS, PAYLOAD_RECORD_DWS, f.pl_n - first_dw)),
            pl_final.eq(phase == n_payload),
        ]
        for i in range(PAYLOAD_RECORD_DWS):
            self.comb += Case(phase, {
                k: pl_words[i].eq(Mux(i < pl_count, pl_all[(k - 1) * PAYLOAD_RECORD_DWS + i], 0))
                for k in range(1, 4)
            })
        msi_ev = msi_fifo.source
        self.comb += [
            rec_valid.eq(tlp_rec | pl_rec | do_msi | timeout_event),
            If(do_msi,
                # MSI record (fmt 7, type 4): up, the cycle the hard IP took it.
                w[0].eq(seq),
                w[1].eq(msi_ev.time[:32]),
                w[2].eq(msi_ev.time[32:]),
                w[3].eq(Cat(C(1, 1), C(EVENT_FMT, 3), C(EVENT_MSI, 5))),
                w[4].eq(msi_ev.vector),
                w[5].eq(msi_ev.sources),
                w[6].eq(msi_ev.wait),
                w[7].eq(0),
            ).Elif(pl_rec,
                # Payload record (fmt 7, type 5): the TLP's direction, its DWs first_dw on.
                w[0].eq(seq),
                w[1].eq(pl_words[0]),
                w[2].eq(pl_words[1]),
                w[3].eq(Cat(f.direction, C(EVENT_FMT, 3), C(EVENT_PAYLOAD, 5), first_dw, pl_count, pl_final)),
                w[4].eq(pl_words[2]),
                w[5].eq(pl_words[3]),
                w[6].eq(pl_words[4]),
                w[7].eq(pl_words[5]),
            ).Elif(tlp_rec,
                w[0].eq(seq),
                w[1].eq(f.start[:32]),
                w[2].eq(f.start[32:]),
                w[3].eq(Cat(f.direction, f.hdr0[29:32], f.hdr0[24:29], f.hdr0[14], f.hdr0[12:14],
                            f.hdr0[20:23], f.hdr0[:10], f.own, matched, last_cpl & matched,
                            Mux(matched, splits, 0))),
                If(is_cpl,
                    w[4].eq(Cat(f.hdr2[16:32], f.hdr2[8:16], f.hdr2[0:7], f.hdr1[12])),
                    w[5].eq(Cat(f.hdr1[16:32], f.hdr1[13:16], f.hdr1[0:12])),
                    w[6].eq(Mux(matched, latency, 0)),
                ).Else(
                    w[4].eq(Cat(f.hdr1[16:32], f.hdr1[8:16], f.hdr1[0:4], f.hdr1[4:8])),
                    If(f.hdr0[29],
                        w[5].eq(Cat(C(0, 2), f.hdr3[2:32])),
                        w[6].eq(f.hdr2),
                    ).Else(
                        w[5].eq(Cat(C(0, 2), f.hdr2[2:32])),
                        w[6].eq(0),
                    ),
                ),
                w[7].eq(Cat(f.duration, f.wait, f.gaps)),
            ).Else(
                # Completion timeout event. The table keeps 32 bits of the request's time; the
                # upper half is today's, or yesterday's if the low half has wrapped since.
                w[0].eq(seq),
                w[1].eq(scan_entry[:32]),
                w[2].eq(cycles[32:] - (scan_entry[:32] > cycles[:32])),
                w[3].eq(Cat(scan_dir, C(EVENT_FMT, 3), C(EVENT_TIMEOUT, 5))),
                w[4].eq(Cat(scan_entry[37:53], scan_tag)),
                w[5].eq(0),
                w[6].eq(cycles[:32] - scan_entry[:32]),
                w[7].eq(0),
            ),
        ]
        self.comb += [
            self.latency_hist.add.eq(tlp_rec & matched & last_cpl),
            self.latency_hist.value.eq(latency),
            self.latency_hist.clear.eq(clear),
        ]
        return rec_valid, record

    def _add_trigger(self, clear, cls, f, is_cpl, pl_rec, rec_valid, seq, stopped, tlp_rec):
        # Trigger ----------------------------------------------------------------------------------
        trig_cls_ok = (self.trigger.fields.class_mask >> cls)[0]
        trig_dir_ok = (self.trigger.fields.direction_mask >> f.direction)[0]
        req_address = Signal(64)
        self.comb += req_address.eq(Mux(f.hdr0[29], Cat(C(0, 2), f.hdr3[2:32], f.hdr2), Cat(C(0, 2), f.hdr2[2:32])))
        trig_addr_ok = is_cpl | ((req_address & self.trigger_address_mask.storage) ==
                                 (self.trigger_address_base.storage & self.trigger_address_mask.storage))
        trigger_hit = Signal()
        self.comb += trigger_hit.eq(tlp_rec & trig_cls_ok & trig_dir_ok & trig_addr_ok)
        mode = self.trigger.fields.mode
        triggered = Signal()
        post_left = Signal(32)
        trigger_seq = Signal(32)
        # `pre` and `post` count records other than payload records: a TLP's payload records
        # go wherever its own record goes.
        counted_rec = Signal()
        self.comb += [
            counted_rec.eq(rec_valid & ~pl_rec),
            self.trigger_sequence.status.eq(trigger_seq),
        ]
        self.sync += [
            If(clear,
                triggered.eq(0), stopped.eq(0), trigger_seq.eq(0),
            ).Elif(counted_rec & (mode != TRIGGER_OFF) & ~triggered & trigger_hit,
                triggered.eq(1),
                trigger_seq.eq(seq),
                post_left.eq(self.trigger_post.storage - 1),
                If(self.trigger_post.storage <= 1, stopped.eq(1)),
            ).Elif(counted_rec & triggered & ~stopped,
                post_left.eq(post_left - 1),
                If(post_left <= 1, stopped.eq(1)),
            ),
        ]
        return mode, trigger_hit, triggered

    def _add_record_fifo(self, record_depth, clear, halted, lost, lost_now, mode, pl_rec, rec_valid, record, seq,
                         stopped, tlp_rec, trigger_hit, triggered):
        # Record FIFO (also the pre-trigger buffer) -------------------------------------------------
        self.record_fifo = record_fifo = stream.SyncFIFO([("record", RECORD_DWS * 32)], record_depth, buffered=True)
        record_fifo = ResetInserter()(record_fifo)
        self.comb += record_fifo.reset.eq(clear | halted)
        accept_record = Signal()
        parent_accepted = Signal()  # the TLP record of the payload records that follow
        self.sync += If(tlp_rec, parent_accepted.eq(accept_record))
        self.comb += [
            accept_record.eq(Mux(pl_rec, parent_accepted,
                                 rec_valid & ~(stopped & ~(tlp_rec & trigger_hit & ~triggered)))),
            record_fifo.sink.valid.eq(accept_record),
            record_fifo.sink.record.eq(record),
        ]
        record_lost = Signal()
        self.comb += record_lost.eq(accept_record & ~record_fifo.sink.ready)
        # In start mode, before the trigger, only the last `pre` records are kept.
        holding = Signal()
        self.comb += holding.eq((mode == TRIGGER_START) & ~triggered)
        drop_oldest = Signal()
        self.comb += drop_oldest.eq(holding & (record_fifo.level > self.trigger_pre.storage))

        self.sync += [
            If(clear,
                seq.eq(0), lost.eq(0),
            ).Else(
                # A summary lost before the builder still consumes a number: the host sees the gap.
                seq.eq(seq + rec_valid + lost_now),
                lost.eq(lost + lost_now + record_lost),
            )
        ]
        self.comb += [
            self.sequence.status.eq(seq),
            self.lost.status.eq(lost),
            self.status.fields.triggered.eq(triggered),
            self.status.fields.stopped.eq(stopped),
            self.status.fields.halted.eq(halted),
            self.status.fields.records.eq(record_fifo.level),
        ]
        return drop_oldest, holding, record_fifo

    def _add_ring_writer(self, data_width, requester_id, clear, drop_oldest, halted, holding, record_fifo):
        # Ring writer, or LitePCIe's DMA writer ------------------------------------------------------
        # The ring writer sees the FIFO through a view whose `ready` only it drives; in
        # to_dma_writer mode it holds every record (it still discards the oldest before a start
        # trigger) and the records leave through record_source instead, then `pad` zero records.
        to_writer = self.control.fields.to_dma_writer
        ring_view = _FifoView(record_fifo)
        self.submodules += ring_view
        self.ring = ring = RecordRingWriter(data_width, requester_id, ring_view,
            ring_base=self.ring_base.storage, ring_size_log2=self.ring_size_log2.storage,
            payload_size_log2=self.payload_size_log2.storage, flush_cycles=self.flush_cycles.storage,
            rd_index=self.rd_index.storage, clear=clear, tag=RING_TAG, hold=holding | to_writer, discard=drop_oldest,
            halt=halted)
        record_ready = Signal()   # a record (not a pad) can go to the DMA writer
        pad_left = Signal(16)
        streamed = Signal(32)
        rs = self.record_source
        self.comb += [
            record_ready.eq(record_fifo.source.valid & ~holding),
            rs.valid.eq(to_writer & ~halted & (record_ready | (pad_left != 0))),
            rs.record.eq(Mux(record_ready, record_fifo.source.record, 0)),
            record_fifo.source.ready.eq(ring_view.source.ready | (to_writer & record_ready & rs.ready & ~halted)),
        ]
        self.sync += [
            If(clear | halted,
                pad_left.eq(0),
            ).Elif(self.pad.re,
                pad_left.eq(self.pad.storage),
            ).Elif(rs.valid & rs.ready & ~record_ready,
                pad_left.eq(pad_left - 1),
            ),
            If(clear,
                streamed.eq(0),
            ).Elif(rs.valid & rs.ready,
                streamed.eq(streamed + 1),
            ),
        ]
        self.comb += [
            ring.source.connect(self.source),
            self.wr_index.status.eq(Mux(to_writer, streamed, ring.wr_index)),
            self.irq.eq(0),
        ]
        return pad_left, ring, rs

    def _add_busy(self, builder_in, counting, down, down_fifo, msi_fifo, pad_left, pending_reads, phase, record_fifo,
                  ring, rs, up, up_fifo):
        # Busy: every state in which a register of the spy can change without a TLP on the
        # link or a CSR access (cores/isolate.py gates the block on it).
        self.busy = Signal()
        self.comb += self.busy.eq(down.active | up.active | down_fifo.source.valid | up_fifo.source.valid |
            builder_in.valid | msi_fifo.source.valid | (phase != 0) | (record_fifo.level != 0) | ~ring.fsm.ongoing("IDLE") | (pending_reads != 0) |
            self.lease.held | self.source.valid | (pad_left != 0) | rs.valid |
            self.latency_hist.pending | self.payload_hist_down.pending | self.payload_hist_up.pending |
            reduce(or_, counting))

"""The accelerator slot's DMA mover: the Verilog interface v1's rd_*/wr_* ports as TLPs.

A user's Verilog (interface v1, /tmp/slot-spec.md -> docs/accelerators.md) asks for a read or a
write of host memory with one request (a DW-aligned bus address and a length in bytes) and
streams the data a DW per cycle; the mover turns that into memory requests and completions:

```
 rd_req (addr, len) ─► MRd splitter ──MRd (tag SLOT_TAG_BASE + k, <= max_read_bytes,
                                          never across 4 KiB, read_slots outstanding)──► tx ─► arbiter
 rd_data/last/error ◄─ slot FIFOs, oldest first ◄─ completion parser (tag -> slot) ◄─ DWSerializer ◄─ cpl
 wr_req (addr, len) ─► MWr splitter: header DWs, then wr_data ──MWr (<= 128 B, never across a
 wr_data ─► FIFO (2 TLPs) ─►                               128-byte boundary)──► tx ─► arbiter
                                                          └─► wr_done (+ wr_error)
```

Reads: the request is cut into MRds of at most ``max_read_bytes`` (a power of two, default 512,
the usual Max_Read_Request_Size) that end on a boundary of that size, so none crosses 4 KiB
(PCIe Base spec, 2.2.7). Up to ``read_slots`` MRds (default 2) are outstanding; each has a slot
with a FIFO for all of its data, so completions are always taken (the card's completion path is
never held back by a slow user) and, in whatever order the completions of different MRds come
(2.4.1 lets them pass each other), the data reaches ``rd_data`` in address order: the oldest
slot's first. Each MRd takes the next of the slot's ``tags`` tags (``tag_base``..``tag_base +
tags - 1``, round robin), and a completion is used only by the outstanding MRd with its tag: a
late answer to a read that timed out is dropped (unless ``tags`` more reads were issued in
between, which takes ``tags`` timeouts or answers). A completion with a status other than SC
(UR, CA, CRS), a poisoned one (EP), one without data, or no complete answer within
``timeout_cycles`` (default 1 ms of card cycles) ends the request: no further MRd is issued,
the data that came before the failure is delivered, then filler DWs (zero), and ``rd_error``
is high with ``rd_last`` on the last DW. A request always delivers exactly ceil(len / 4) DWs
(one for a refused request of length 0); the next is taken once no MRd is in flight.

Writes: MWrs of at most 128 bytes that never cross a 128-byte boundary, as rule 30's batch
engine: 128 bytes is the smallest Max_Payload_Size, so the TLPs are legal whatever the link
negotiated (the card does not look at the Device Control register), and a TLP that starts
DW-aligned and stops at the next 128-byte boundary never crosses 4 KiB. The byte enables come
from the length (the last DW of the request enables only its len % 4 bytes). ``wr_data`` goes
into a FIFO of two TLPs (64 DWs), and an MWr starts only when all of its data is there: an MWr
that waited for data in mid-TLP would hold the card's transmit arbiter, and in a COPY (reads
streamed into writes) the MRd whose data it waits for could never leave. ``wr_done`` pulses once
the request's last TLP has been handed on (``tx``) and ``tx_idle`` says the card's transmit path holds nothing of
the mover's (tie it to the TxBoundary's idle so an interrupt raised after ``wr_done`` follows
the data; 1 when not connected).

Refusals: an address that is not DW aligned or a length of 0 is refused: a read delivers
max(1, ceil(len / 4)) filler DWs with ``rd_error``; a write pulses ``wr_done`` with
``wr_error`` in the cycle after the request and takes no ``wr_data`` (the user sends none).
Both are counted in ``errors``.

The fence: while ``fence`` is high (the slot's lease ended while the DUT was still working:
its owner is gone and the host may have freed the buffers, cores/slot/core.py) nothing more
reaches host memory. A new request is refused as above; a read being served issues no further
MRd (those in flight complete, their data is delivered, then filler with ``rd_error``); a
write being served sends no further MWr (the TLP on its way is finished: a TLP cannot be cut):
the rest of its data is taken from the user and dropped, and ``wr_done`` comes with
``wr_error``. Each request the fence refused or cut is counted in ``dma_fenced`` (and in
``dma_errors``).

Throughput: at most one DW per cycle each way (the interface's 32-bit data), less the TLP
headers (3 or 4 header DWs per MWr of 32 DWs) and, for reads, whatever of the round trip
the other slots' data does not cover (test_dma.py measures both).
"""

from functools import reduce
from operator import or_

from types import SimpleNamespace

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream
from litex.soc.interconnect.packet import Arbiter

from litepcie.common import phy_layout

from tlpx_gateware import tlp
from tlpx_gateware.cores.request_path.core import DWGatherer, DWSerializer

MAX_WRITE_BYTES = 128
DEFAULT_MAX_READ_BYTES = 512
DEFAULT_READ_SLOTS = 2
MAX_LEN_BITS = 24


def _byte_mask(nbytes):
    """Byte enables of the last DW of a transfer whose length is `nbytes` (1..4 in the DW)."""
    return Array([C(0xF, 4), C(0x1, 4), C(0x3, 4), C(0x7, 4)])[nbytes[:2]]


class DmaMover(LiteXModule):
    """The slot's DMA mover; see the module docstring.

    Parameters
    ----------
    data_width : int
        TLP datapath width in bits (64, 128, 256).
    requester_id : Signal(16)
        The card's requester ID, for the MRd/MWr headers.
    tag_base, tags : int
        The slot's tags (SLOT_TAG_BASE, SLOT_TAGS): completions with these come to ``cpl``.
    clock_hz : float
        Card clock, for the default read timeout (1 ms).
    timeout_cycles : int or None
        Cycles to wait for an MRd's completions; default 1 ms of card cycles.
    max_read_bytes : int
        Largest MRd in bytes, a power of two 4..4096 (keep it <= the link's MRRS).
    read_slots : int
        MRds outstanding at most, 1..tags (a FIFO of max_read_bytes each).
    """
    def __init__(self, data_width, requester_id, tag_base, tags, clock_hz=125e6, timeout_cycles=None,
                 max_read_bytes=DEFAULT_MAX_READ_BYTES, read_slots=DEFAULT_READ_SLOTS):
        if data_width not in (64, 128, 256):
            raise ValueError(f"data width must be 64, 128 or 256 bits, not {data_width!r}")
        if max_read_bytes not in [2**i for i in range(2, 13)]:
            raise ValueError(f"max_read_bytes must be a power of two 4..4096, not {max_read_bytes!r}")
        if not (tags >= 1 and 0 <= tag_base and tag_base + tags <= 256):
            raise ValueError(f"tags {tag_base}..{tag_base + tags - 1} must lie in 0..255")
        if not (isinstance(read_slots, int) and 1 <= read_slots <= tags):
            raise ValueError(f"read_slots must be 1..{tags} (one tag each), not {read_slots!r}")
        if timeout_cycles is None:
            timeout_cycles = int(clock_hz / 1000)
        self._interface(data_width)

        # # #

        read_dws = max_read_bytes // 4
        tag_bits = max(1, (tags - 1).bit_length())
        # The mover is built in steps, one per part of the diagram above, that share their
        # signals through one namespace, `b`: each step adds what the later ones use. The steps
        # run in this order because Migen writes signals and statements into the Verilog in the
        # order they are made (and a later statement on a signal overrides an earlier one).
        b = SimpleNamespace()
        self._read_requests(b, max_read_bytes)
        self._read_slots(b, read_slots, read_dws, tag_bits, timeout_cycles)
        self._mrd_issue(b, data_width, requester_id, tag_base)
        self._completion_parser(b, data_width, read_slots)
        self._slot_state(b, read_slots, tags, timeout_cycles)
        self._read_data(b, read_slots)
        self._write_requests(b, data_width)
        self._write_fsm(b, requester_id, tag_base)
        self._counters(b)
        self._busy(b)

    def _interface(self, data_width):
        """The mover's ports: interface v1 towards the user, and the card side."""
        # Interface v1, seen from the mover (the user's outputs are the mover's inputs).
        self.rd_req_valid = Signal()
        self.rd_req_ready = Signal()
        self.rd_req_addr  = Signal(64)
        self.rd_req_len   = Signal(MAX_LEN_BITS)
        self.rd_valid     = Signal()
        self.rd_ready     = Signal()
        self.rd_data      = Signal(32)
        self.rd_last      = Signal()
        self.rd_error     = Signal()
        self.wr_req_valid = Signal()
        self.wr_req_ready = Signal()
        self.wr_req_addr  = Signal(64)
        self.wr_req_len   = Signal(MAX_LEN_BITS)
        self.wr_valid     = Signal()
        self.wr_ready     = Signal()
        self.wr_data      = Signal(32)
        self.wr_done      = Signal()
        self.wr_error     = Signal()
        # Card side.
        self.tx  = stream.Endpoint(phy_layout(data_width))  # MRd and MWr TLPs (source)
        self.cpl = stream.Endpoint(phy_layout(data_width))  # completions with the slot's tags (sink)
        self.tx_idle = Signal(reset=1)  # in: nothing of the mover's waits in the card's transmit path
        self.fence = Signal()  # in: refuse and cut short every request (the slot's lease ended)
        self.busy = Signal()
        self.counters = {name: Signal(32, name=name) for name in
                         ("dma_reads", "dma_writes", "dma_read_bytes", "dma_write_bytes", "dma_errors", "dma_fenced")}

    def _read_requests(self, b, max_read_bytes):
        """Read requests: the request being served and the MRd to issue next."""
        rd_active  = Signal()          # a request is being served (until its last DW is taken)
        rd_addr    = Signal(64)        # next byte to request
        rd_left    = Signal(MAX_LEN_BITS)  # bytes not yet requested
        rd_fail    = Signal()          # the request failed: no more MRds, filler after the data
        out_left   = Signal(MAX_LEN_BITS - 1)  # DWs still to deliver on rd_data
        rd_ok_len  = Signal(MAX_LEN_BITS)  # the request's length, counted when it ends well
        bad_rd     = Signal()
        self.comb += [
            bad_rd.eq((self.rd_req_addr[:2] != 0) | (self.rd_req_len == 0) | self.fence),
        ]
        rd_accept = Signal()
        self.comb += rd_accept.eq(self.rd_req_valid & self.rd_req_ready)
        req_dws = Signal(MAX_LEN_BITS - 1)
        self.comb += req_dws.eq((self.rd_req_len + 3)[2:])

        # The MRd to issue next: up to the next max_read_bytes boundary.
        rd_room  = Signal(14)
        rd_chunk = Signal(14)
        chunk_dws = Signal(12)
        self.comb += [
            rd_room.eq(max_read_bytes - (rd_addr[:12] & (max_read_bytes - 1))),
            rd_chunk.eq(Mux(rd_left < rd_room, rd_left, rd_room)),
            chunk_dws.eq((rd_chunk + 3)[2:]),
        ]
        b.rd_active, b.rd_addr, b.rd_left, b.rd_fail = rd_active, rd_addr, rd_left, rd_fail
        b.out_left, b.rd_ok_len, b.bad_rd, b.rd_accept = out_left, rd_ok_len, bad_rd, rd_accept
        b.req_dws, b.rd_chunk, b.chunk_dws = req_dws, rd_chunk, chunk_dws

    def _read_slots(self, b, read_slots, read_dws, tag_bits, timeout_cycles):
        """Read slots: an MRd in flight and its data, oldest first."""
        # Each slot has a FIFO for one MRd's data, so the completions of different MRds, in
        # whatever order they come, are delivered in address order (the head slot's first).
        # The Verilog names: when the mover was one function, Migen's tracer (Python 3.11)
        # misnamed the variables that a closure captured; `name=` on `head` here and on
        # `deliver`, `taken` and `dlv` in _read_data keeps their names, and list() keeps the
        # correct names `fifos` and `stag` out of the names of those lists' elements (they would
        # clash with `head`'s and `taken`'s), so the split left the Verilog unchanged.
        fifos = list([ResetInserter()(stream.SyncFIFO([("data", 32)], read_dws)) for _ in range(read_slots)])
        for i, fifo in enumerate(fifos):
            setattr(self, f"slot{i}_fifo", fifo)
        alloc   = [Signal(name=f"slot{i}_alloc") for i in range(read_slots)]    # data not yet delivered
        outst   = [Signal(name=f"slot{i}_outstanding") for i in range(read_slots)]  # MRd in flight
        expect  = [Signal(12, name=f"slot{i}_expect") for i in range(read_slots)]  # payload DWs to come
        length  = [Signal(12, name=f"slot{i}_length") for i in range(read_slots)]  # DWs of its MRd
        stag    = list([Signal(8, name=f"slot{i}_tag") for i in range(read_slots)])
        failed  = [Signal(name=f"slot{i}_failed") for i in range(read_slots)]
        timer   = [Signal(max=timeout_cycles + 2, name=f"slot{i}_timer") for i in range(read_slots)]
        slot_bits = max(1, (read_slots - 1).bit_length())
        issue_slot = Signal(slot_bits)  # the slot the next MRd takes
        head       = Signal(slot_bits, name="fifos")  # the oldest slot: its data goes to rd_data
        next_tag   = Signal(tag_bits)
        any_outstanding = Signal()
        idle_reads = Signal()           # no request, no MRd in flight: slots free, FIFOs empty
        self.comb += [
            any_outstanding.eq(reduce(or_, outst)),
            idle_reads.eq(~b.rd_active & ~any_outstanding),
            self.rd_req_ready.eq(idle_reads),
        ]
        can_issue = Signal()
        self.comb += can_issue.eq(b.rd_active & ~b.rd_fail & (b.rd_left != 0) & ~Array(alloc)[issue_slot])
        b.fifos, b.alloc, b.outst, b.expect, b.length = fifos, alloc, outst, expect, length
        b.stag, b.failed, b.timer, b.issue_slot, b.head = stag, failed, timer, issue_slot, head
        b.next_tag, b.any_outstanding, b.idle_reads = next_tag, any_outstanding, idle_reads
        b.can_issue = can_issue

    def _mrd_issue(self, b, data_width, requester_id, tag_base):
        """The MRds, one at a time into the read gatherer."""
        self.rd_gatherer = rd_gatherer = DWGatherer(data_width)
        mrd_len   = Signal(10)
        mrd_addr  = Signal(64)
        mrd_hdr4  = Signal()
        mrd_first = Signal(4)
        mrd_lastb = Signal(4)
        mrd_idx   = Signal(2)
        mrd_tag   = Signal(8)
        # The tag: tag_base + next_tag through a sized signal (a sum inside Cat keeps the width
        # of its widest operand).
        tag_sig = Signal(8)
        self.comb += tag_sig.eq(tag_base + b.next_tag)
        mrd_dw = Array([
            Cat(mrd_len, C(0, 14), C(tlp.TYPE_MEM, 5), mrd_hdr4, C(0, 2)),
            Cat(mrd_first, mrd_lastb, mrd_tag, requester_id),
            Mux(mrd_hdr4, mrd_addr[32:], Cat(C(0, 2), mrd_addr[2:32])),
            Cat(C(0, 2), mrd_addr[2:32]),
        ])
        mrd_last = Signal(2)
        self.comb += mrd_last.eq(Mux(mrd_hdr4, 3, 2))

        issue = Signal()
        self.rd_fsm = rd_fsm = FSM(reset_state="IDLE")
        rd_fsm.act("IDLE",
            If(b.can_issue,
                issue.eq(1),
                NextValue(mrd_len, b.chunk_dws),
                NextValue(mrd_addr, b.rd_addr),
                NextValue(mrd_hdr4, b.rd_addr[32:] != 0),
                NextValue(mrd_first, Mux(b.chunk_dws == 1, _byte_mask(b.rd_chunk), 0xF)),
                NextValue(mrd_lastb, Mux(b.chunk_dws == 1, 0, _byte_mask(b.rd_chunk))),
                NextValue(mrd_tag, tag_sig),
                NextValue(mrd_idx, 0),
                NextState("EMIT")
            )
        )
        rd_fsm.act("EMIT",
            rd_gatherer.sink.valid.eq(1),
            rd_gatherer.sink.first.eq(mrd_idx == 0),
            rd_gatherer.sink.last.eq(mrd_idx == mrd_last),
            rd_gatherer.sink.dat.eq(mrd_dw[mrd_idx]),
            If(rd_gatherer.sink.ready,
                NextValue(mrd_idx, mrd_idx + 1),
                If(mrd_idx == mrd_last, NextState("IDLE"))
            )
        )
        b.tag_sig, b.issue = tag_sig, issue

    def _completion_parser(self, b, data_width, read_slots):
        """Completions: one DW per cycle (header DW0..DW2, then payload); DW2 tells the slot."""
        self.cpl_serializer = ser = DWSerializer(data_width)
        self.comb += self.cpl.connect(ser.sink)
        c = ser.source
        self.comb += c.ready.eq(1)
        c_idx      = Signal(2)     # 1: DW1 next; 2: DW2 next; 3: payload
        c_ep       = Signal()
        c_has_data = Signal()
        c_status   = Signal(3)
        c_slot     = Signal(read_slots)  # decided at DW2: the slot whose MRd has this tag (one-hot)
        c_good     = Signal()
        self.comb += c_good.eq((c_status == tlp.CPL_SC) & ~c_ep & c_has_data)
        at_dw2 = Signal()
        self.comb += at_dw2.eq(c.valid & ~c.first & (c_idx == 2))
        at_payload = Signal()
        self.comb += at_payload.eq(c.valid & ~c.first & (c_idx == 3) & c_good)
        match = Signal(read_slots)
        self.comb += match.eq(Cat(*[b.outst[i] & (c.dat[8:16] == b.stag[i]) for i in range(read_slots)]))
        self.sync += If(c.valid,
            If(c.first,
                c_idx.eq(1),
                c_ep.eq(c.dat[14]),
                c_has_data.eq(c.dat[30]),
            ).Elif(c_idx == 1,
                c_status.eq(c.dat[13:16]),
                c_idx.eq(2),
            ).Elif(c_idx == 2,
                c_slot.eq(match),
                c_idx.eq(3),
            )
        )
        b.c, b.c_good, b.at_dw2, b.at_payload, b.match = c, c_good, at_dw2, at_payload, match
        b.c_slot = c_slot

    def _slot_state(self, b, read_slots, tags, timeout_cycles):
        """Each slot's state: taken by an MRd, filled by its completions, ended by its last DW,
        an error completion or a timeout; released once its data has been delivered."""
        c, fifos, alloc, outst = b.c, b.fifos, b.alloc, b.outst
        expect, length, stag, failed = b.expect, b.length, b.stag, b.failed
        timer = b.timer
        fault = Signal()   # an MRd ended in error (an error completion or a timeout) now
        faults = []
        release = Signal(read_slots)  # the head slot's data has all been delivered now
        for i in range(read_slots):
            payload   = Signal(name=f"slot{i}_payload")
            cpl_fault = Signal(name=f"slot{i}_cpl_fault")
            timed_out = Signal(name=f"slot{i}_timed_out")
            self.comb += [
                payload.eq(b.at_payload & b.c_slot[i] & outst[i]),
                cpl_fault.eq(b.at_dw2 & b.match[i] & ~b.c_good),
                timed_out.eq(outst[i] & (timer[i] >= timeout_cycles)),
                fifos[i].sink.valid.eq(payload),
                fifos[i].sink.data.eq(c.dat),
                # Between requests the FIFOs are emptied: a failed request leaves data behind.
                fifos[i].reset.eq(b.idle_reads),
            ]
            faults += [cpl_fault, timed_out]
            self.sync += [
                If(b.issue & (b.issue_slot == i),
                    alloc[i].eq(1),
                    outst[i].eq(1),
                    expect[i].eq(b.chunk_dws),
                    length[i].eq(b.chunk_dws),
                    stag[i].eq(b.tag_sig),
                    failed[i].eq(0),
                    timer[i].eq(0),
                ).Else(
                    If(outst[i], timer[i].eq(timer[i] + 1)),
                    If(payload,
                        expect[i].eq(expect[i] - 1),
                        If(expect[i] == 1, outst[i].eq(0)),
                    ),
                    If(cpl_fault | timed_out,
                        outst[i].eq(0),
                        failed[i].eq(1),
                    ),
                    If(release[i] | b.idle_reads, alloc[i].eq(0)),
                ),
            ]
        self.comb += fault.eq(reduce(or_, faults))
        self.sync += If(b.issue,
            b.rd_addr.eq(b.rd_addr + b.rd_chunk),
            b.rd_left.eq(b.rd_left - b.rd_chunk),
            b.issue_slot.eq(Mux(b.issue_slot == read_slots - 1, 0, b.issue_slot + 1)),
            b.next_tag.eq(Mux(b.next_tag == tags - 1, 0, b.next_tag + 1)),
        ).Elif(b.rd_accept,
            b.issue_slot.eq(0),
        )
        b.fault, b.release = fault, release

    def _read_data(self, b, read_slots):
        """Data to the user: the head slot's DWs; filler once the head's MRd failed (or the
        request was refused), for the rest of the request."""
        h_valid = Signal()
        h_data  = Signal(32)
        filler  = Signal()
        deliver = Signal(name="c")
        taken   = Signal(name="stag")  # a DW of the head slot's data is taken now
        dlv     = Signal(12, name="deliver")  # DWs of the head slot's MRd delivered
        h_alloc, h_failed, h_outst = Array(b.alloc)[b.head], Array(b.failed)[b.head], Array(b.outst)[b.head]
        self.comb += [
            h_valid.eq(Array([f.source.valid for f in b.fifos])[b.head]),
            h_data.eq(Array([f.source.data for f in b.fifos])[b.head]),
            filler.eq(b.rd_fail & (~h_alloc | (h_failed & ~h_outst)) & ~h_valid),
            self.rd_valid.eq(b.rd_active & (b.out_left != 0) & (h_valid | filler)),
            self.rd_data.eq(Mux(h_valid, h_data, 0)),
            self.rd_last.eq(b.out_left == 1),
            self.rd_error.eq(b.rd_fail & (b.out_left == 1)),
            deliver.eq(self.rd_valid & self.rd_ready),
            taken.eq(deliver & h_valid),
            *[b.fifos[i].source.ready.eq(deliver & (b.head == i)) for i in range(read_slots)],
            b.release.eq(Cat(*[taken & (b.head == i) & (dlv == b.length[i] - 1) for i in range(read_slots)])),
        ]
        rd_end = Signal()
        self.comb += rd_end.eq(deliver & self.rd_last)
        self.sync += [
            If(taken,
                If(dlv == Array(b.length)[b.head] - 1,
                    dlv.eq(0),
                    b.head.eq(Mux(b.head == read_slots - 1, 0, b.head + 1)),
                ).Else(
                    dlv.eq(dlv + 1),
                )
            ),
            If(b.rd_accept,
                b.rd_active.eq(1),
                b.rd_addr.eq(self.rd_req_addr),
                b.rd_left.eq(Mux(b.bad_rd, 0, self.rd_req_len)),
                b.rd_fail.eq(b.bad_rd),
                b.out_left.eq(Mux(b.req_dws == 0, 1, b.req_dws)),
                b.rd_ok_len.eq(self.rd_req_len),
                b.head.eq(0),
                dlv.eq(0),
            ).Else(
                If(b.fault | self.fence, b.rd_fail.eq(1)),
                If(deliver,
                    b.out_left.eq(b.out_left - 1),
                    If(self.rd_last, b.rd_active.eq(0)),
                ),
            ),
        ]
        b.rd_end = rd_end

    def _write_requests(self, b, data_width):
        """Writes: wr_data into the write FIFO, and the MWr to build next."""
        self.wr_gatherer = wr_gatherer = DWGatherer(data_width)
        # wr_data waits here until a whole TLP's worth has come: an MWr whose header went out
        # before its data would hold the transmit arbiter, and a COPY's next MRd (whose data
        # that MWr waits for) could never leave.
        self.wr_fifo = wr_fifo = stream.SyncFIFO([("data", 32)], 2 * MAX_WRITE_BYTES // 4)
        wr_in_left = Signal(MAX_LEN_BITS - 1)  # DWs of the request still to take from the user
        self.comb += [
            wr_fifo.sink.valid.eq(self.wr_valid & (wr_in_left != 0)),
            wr_fifo.sink.data.eq(self.wr_data),
            self.wr_ready.eq(wr_fifo.sink.ready & (wr_in_left != 0)),
        ]
        self.sync += If(wr_fifo.sink.valid & wr_fifo.sink.ready, wr_in_left.eq(wr_in_left - 1))
        wr_addr  = Signal(64)
        wr_left  = Signal(MAX_LEN_BITS)   # bytes not yet in a TLP
        wr_total = Signal(MAX_LEN_BITS)
        wr_room  = Signal(8)
        wr_chunk = Signal(8)              # bytes of the TLP being built, 1..128
        wr_dws   = Signal(6)
        self.comb += [
            wr_room.eq(MAX_WRITE_BYTES - wr_addr[:7]),
            wr_chunk.eq(Mux(wr_left < wr_room, wr_left, wr_room)),
        ]
        b.wr_in_left, b.wr_addr, b.wr_left, b.wr_total = wr_in_left, wr_addr, wr_left, wr_total
        b.wr_chunk, b.wr_dws = wr_chunk, wr_dws

    def _write_fsm(self, b, requester_id, tag_base):
        """The MWrs of a write request, each once all of its data is in the write FIFO."""
        wr_in_left, wr_addr, wr_left, wr_total = b.wr_in_left, b.wr_addr, b.wr_left, b.wr_total
        wr_chunk, wr_dws, wr_fifo = b.wr_chunk, b.wr_dws, self.wr_fifo
        mwr_len   = Signal(6)
        mwr_addr  = Signal(64)
        mwr_hdr4  = Signal()
        mwr_first = Signal(4)
        mwr_lastb = Signal(4)
        mwr_idx   = Signal(6)
        mwr_final = Signal()              # this TLP ends the request
        mwr_dw = Array([
            Cat(mwr_len, C(0, 4), C(0, 14), C(tlp.TYPE_MEM, 5), mwr_hdr4, C(1, 1), C(0, 1)),
            # A posted write's tag is undefined by PCIe (TH clear: any value): the mover puts the
            # slot's first tag there, so the spy attributes the DUT's writes as it does its reads.
            Cat(mwr_first, mwr_lastb, C(tag_base, 8), requester_id),
            Mux(mwr_hdr4, mwr_addr[32:], Cat(C(0, 2), mwr_addr[2:32])),
            Cat(C(0, 2), mwr_addr[2:32]),
        ])
        mwr_hdr_last = Signal(2)
        self.comb += [
            mwr_hdr_last.eq(Mux(mwr_hdr4, 3, 2)),
            wr_dws.eq((wr_chunk + 3)[2:]),
        ]
        bad_wr   = Signal()
        self.comb += bad_wr.eq((self.wr_req_addr[:2] != 0) | (self.wr_req_len == 0) | self.fence)
        wr_refuse = Signal()
        wr_ok     = Signal()
        wr_cut    = Signal()  # a write the fence cut short ends now
        wr_by_fence = Signal()  # the write being refused was refused by the fence
        self.wr_fsm = wr_fsm = FSM(reset_state="IDLE")
        wr_fsm.act("IDLE",
            self.wr_req_ready.eq(1),
            If(self.wr_req_valid,
                NextValue(wr_addr, self.wr_req_addr),
                NextValue(wr_left, self.wr_req_len),
                NextValue(wr_total, self.wr_req_len),
                If(bad_wr,
                    NextValue(wr_by_fence, self.fence),
                    NextState("REFUSE")
                ).Else(
                    NextValue(wr_in_left, (self.wr_req_len + 3)[2:]),
                    NextState("NEXT")
                )
            )
        )
        wr_fsm.act("REFUSE",
            wr_refuse.eq(1),
            self.wr_done.eq(1),
            self.wr_error.eq(1),
            NextState("IDLE")
        )
        wr_fsm.act("NEXT",
            If(self.fence,
                NextState("DROP")
            ).Elif(wr_fifo.level >= wr_dws,
                NextValue(mwr_len, wr_dws),
                NextValue(mwr_addr, wr_addr),
                NextValue(mwr_hdr4, wr_addr[32:] != 0),
                NextValue(mwr_first, Mux(wr_dws == 1, _byte_mask(wr_chunk), 0xF)),
                NextValue(mwr_lastb, Mux(wr_dws == 1, 0, _byte_mask(wr_chunk))),
                NextValue(mwr_final, wr_left == wr_chunk),
                NextValue(mwr_idx, 0),
                NextValue(wr_addr, wr_addr + wr_chunk),
                NextValue(wr_left, wr_left - wr_chunk),
                NextState("HEADER")
            )
        )
        wr_fsm.act("HEADER",
            self.wr_gatherer.sink.valid.eq(1),
            self.wr_gatherer.sink.first.eq(mwr_idx == 0),
            self.wr_gatherer.sink.dat.eq(mwr_dw[mwr_idx[:2]]),
            If(self.wr_gatherer.sink.ready,
                NextValue(mwr_idx, mwr_idx + 1),
                If(mwr_idx == mwr_hdr_last,
                    NextValue(mwr_idx, 0),
                    NextState("DATA")
                )
            )
        )
        wr_fsm.act("DATA",
            self.wr_gatherer.sink.valid.eq(wr_fifo.source.valid),
            self.wr_gatherer.sink.last.eq(mwr_idx == mwr_len - 1),
            self.wr_gatherer.sink.dat.eq(wr_fifo.source.data),
            wr_fifo.source.ready.eq(self.wr_gatherer.sink.ready),
            If(wr_fifo.source.valid & self.wr_gatherer.sink.ready,
                NextValue(mwr_idx, mwr_idx + 1),
                If(mwr_idx == mwr_len - 1,
                    If(mwr_final,
                        NextState("FINISH")
                    ).Else(
                        NextState("NEXT")
                    )
                )
            )
        )
        # The fence cut the write short between two TLPs: the rest of its data is taken from the
        # user and dropped (a user streaming a copy must not stall), then it ends with an error
        # once the TLPs already sent have left.
        wr_fsm.act("DROP",
            wr_fifo.source.ready.eq(1),
            If((wr_in_left == 0) & ~wr_fifo.source.valid & ~self.wr_gatherer.source.valid & self.tx_idle,
                wr_cut.eq(1),
                self.wr_done.eq(1),
                self.wr_error.eq(1),
                NextState("IDLE")
            )
        )
        # The last TLP's final beat is still in the gatherer until the arbiter takes it.
        wr_fsm.act("FINISH",
            If(~self.wr_gatherer.source.valid & self.tx_idle,
                wr_ok.eq(1),
                self.wr_done.eq(1),
                NextState("IDLE")
            )
        )

        self.arbiter = Arbiter([self.rd_gatherer.source, self.wr_gatherer.source], self.tx)
        b.bad_wr, b.wr_refuse, b.wr_ok, b.wr_cut = bad_wr, wr_refuse, wr_ok, wr_cut
        b.wr_by_fence = wr_by_fence

    def _counters(self, b):
        """The counters: requests, bytes, errors and fenced requests."""
        k = self.counters
        rd_failed_end = Signal()
        self.comb += rd_failed_end.eq(b.rd_end & b.rd_fail)
        # A read the fence refused (at its request) or cut short (failed while fenced, counted
        # at its end as every failed read), a write it refused or cut.
        rd_fenced = Signal()
        self.sync += If(b.rd_accept, rd_fenced.eq(self.fence)).Elif(self.fence & b.rd_active & ~b.rd_fail, rd_fenced.eq(1))
        self.sync += [
            k["dma_fenced"].eq(k["dma_fenced"] + (rd_failed_end & rd_fenced) + (b.wr_refuse & b.wr_by_fence) + b.wr_cut),
            If(b.rd_accept & ~b.bad_rd, k["dma_reads"].eq(k["dma_reads"] + 1)),
            If(b.rd_end & ~b.rd_fail, k["dma_read_bytes"].eq(k["dma_read_bytes"] + b.rd_ok_len)),
            If(self.wr_fsm.ongoing("IDLE") & self.wr_req_valid & ~b.bad_wr, k["dma_writes"].eq(k["dma_writes"] + 1)),
            If(b.wr_ok, k["dma_write_bytes"].eq(k["dma_write_bytes"] + b.wr_total)),
            # A failed read is counted once, when its last DW is delivered (a refused one too).
            k["dma_errors"].eq(k["dma_errors"] + rd_failed_end + b.wr_refuse + b.wr_cut),
        ]

    def _busy(self, b):
        """Busy: every state in which a register can change without an input event."""
        self.comb += self.busy.eq(b.rd_active | b.any_outstanding | ~self.rd_fsm.ongoing("IDLE") |
            ~self.wr_fsm.ongoing("IDLE") | self.wr_fifo.source.valid | self.rd_gatherer.source.valid |
            self.wr_gatherer.source.valid | self.tx.valid)

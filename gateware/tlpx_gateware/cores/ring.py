"""Record ring writer: 32-byte records from a FIFO into a ring buffer in host memory.

Shared by the blocks that stream records to the host (the spy, the interrupt timer). The
host gives the ring (bus address, size in records), reads ``wr_index`` (records in host
memory: a TLP's records count once its last beat has left the card, and PCIe ordering keeps
a later read completion behind the write) and writes ``rd_index`` when it has consumed
records. The writer never overwrites unread records: when the ring is full the records wait
in the FIFO, and what the FIFO cannot take is the owner's to count as lost.

Records leave in MWr TLPs of up to ``payload_size`` bytes that never cross a payload-size
boundary of the ring (so never its end); a partial batch leaves once no record has come for
``flush_cycles`` cycles. ``halt`` (the owner's lease ended) starts no further TLP: a TLP
already on its way is finished (a TLP cannot be cut), nothing else leaves; the owner also
empties the FIFO. The TLP is built one DW per cycle: 4 bytes per cycle is the
writer's ceiling (500 MB/s at 125 MHz, 15.6 M records/s).
"""

from types import SimpleNamespace

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream

from litepcie.common import phy_layout


RECORD_DWS = 8


def record_layout():
    return [("record", RECORD_DWS * 32)]


class RecordRingWriter(LiteXModule):
    """`fifo` is a stream.SyncFIFO of record_layout(); `hold` keeps records in it (not
    written), `discard` pops its oldest record without writing it, `halt` starts no TLP."""
    def __init__(self, data_width, requester_id, fifo, ring_base, ring_size_log2, payload_size_log2,
                 flush_cycles, rd_index, clear, tag, hold=C(0, 1), discard=C(0, 1), halt=C(0, 1)):
        """``tag``: stamped into the ring's MWrs (unused by PCIe for a posted write), so the
        spy attributes them to the block that owns the ring."""
        self.source   = stream.Endpoint(phy_layout(data_width))
        self.wr_index = wr_index = Signal(32)

        # # #

        # The writer is built in steps (batching, the TLP's words, the state machine) that share
        # their signals through one namespace, `w`: each step adds what the later ones use. The
        # steps run in this order because Migen writes signals and statements into the Verilog in
        # the order they are made.
        w = SimpleNamespace(data_width=data_width, record_fifo=fifo, holding=hold, drop_oldest=discard,
                            halt=halt, wr_index=wr_index, source=self.source)
        self._batching(w, ring_size_log2, payload_size_log2, flush_cycles, rd_index)
        self._tlp_words(w, requester_id, ring_base, tag)
        self._fsm(w)
        self.sync += If(clear, wr_index.eq(0))

    def _batching(self, w, ring_size_log2, payload_size_log2, flush_cycles, rd_index):
        """How many records the next TLP takes (`batch`) and whether it may leave now (`go`)."""
        record_fifo, holding, wr_index = w.record_fifo, w.holding, w.wr_index
        ring_records = Signal(32)
        self.comb += ring_records.eq(1 << ring_size_log2)
        free = Signal(33)
        self.comb += free.eq(ring_records - (wr_index - rd_index))
        per_tlp = Signal(8)
        payload_bytes_max = Signal(16)
        self.comb += [
            # Separate signals: Verilog would evaluate the shifts in per_tlp's 8 bits.
            payload_bytes_max.eq(1 << payload_size_log2),
            per_tlp.eq(payload_bytes_max[5:13]),
        ]
        slot = Signal(32)
        to_end = Signal(32)
        self.comb += [
            slot.eq(wr_index & (ring_records - 1)),
            # Records up to the next TLP-size boundary of the ring (never past its end).
            to_end.eq(per_tlp - (slot & (per_tlp - 1))),
        ]
        available = Signal(16)
        self.comb += available.eq(Mux(holding, 0, record_fifo.level))
        batch = Signal(8)
        self.comb += batch.eq(Mux(available < to_end, available, to_end))
        idle = Signal(16)
        self.sync += If(record_fifo.sink.valid | (available == 0), idle.eq(0)).Elif(idle != 0xFFFF, idle.eq(idle + 1))
        go = Signal()
        self.comb += go.eq((batch != 0) & (free >= batch) &
                           ((batch == to_end) | (idle >= flush_cycles)))
        w.slot, w.to_end, w.batch, w.go = slot, to_end, batch, go

    def _tlp_words(self, w, requester_id, ring_base, tag):
        """The TLP's registers: its header (latched from `next_hdr`), the beat counters, the
        record beat being sent (`cur`) and the one before it (`prev`)."""
        data_width, record_fifo, slot, batch = w.data_width, w.record_fifo, w.slot, w.batch
        # The TLP leaves a full beat per cycle: header DWs, then the records' DWs packed right
        # behind them (the PHY stream carries a TLP's DWs contiguously). A record is 8 DWs, a
        # whole number of beats (n = 2, 4 or 8 DWs per beat): each "data beat" comes from one
        # record, and the output beat is the last `s` DWs of the previous data beat (or of the
        # header) followed by the first n - s DWs of this one, s = header DWs mod n.
        n = data_width // 32
        assert RECORD_DWS % n == 0, f"data width must be 64, 128 or 256 bits, not {data_width}"
        beats_per_record = RECORD_DWS // n
        address = Signal(64)
        hdr4 = Signal()
        self.comb += [
            address.eq(ring_base + (slot << 5)),
            hdr4.eq(address[32:] != 0),
        ]
        # The Verilog names of these registers are those they had when the writer was one
        # function, where Migen's tracer (Python 3.11) misnamed the variables a closure captured
        # (cur_hdr4 "cur", hdr_beat "hdr", ...): `name=` keeps them, and list() keeps the
        # variable's name out of the header DWs' names, so the split left the Verilog unchanged.
        n_records = Signal(8)
        rec_done = Signal(8)
        cur_hdr4 = Signal(name="cur")
        hdr = list([Signal(32, name=f"ring_hdr{i}") for i in range(4)])
        hdr_beat = Signal(2, name="hdr")  # header-only beats sent
        data_beat = Signal(max=max(beats_per_record, 2))  # data beat of the current record
        prev = Signal(data_width, name="next_hdr")  # the data beat sent last (its tail goes out next)
        rec_dws = record_fifo.source.record
        cur = Signal(data_width, name="data_width")
        self.comb += Case(data_beat, {q: cur.eq(rec_dws[q * data_width:(q + 1) * data_width])
                                      for q in range(beats_per_record)})
        last_data = Signal()
        self.comb += last_data.eq((data_beat == beats_per_record - 1) & (rec_done == n_records - 1))
        # The next TLP's header, from the ring's next slot. MWr (PCIe Base spec, 2.2.7):
        # Length = 8 DWs per record, all bytes enabled.
        next_hdr = list([Signal(32, name=f"ring_next_hdr{i}") for i in range(4)])
        self.comb += [
            next_hdr[0].eq(Cat((batch << 3)[:10], C(0, 19), Cat(hdr4, C(1, 1), C(0, 1)))),
            next_hdr[1].eq(Cat(C(0xF, 4), C(0xF, 4), C(tag, 8), requester_id)),
            next_hdr[2].eq(Mux(hdr4, address[32:], Cat(C(0, 2), address[2:32]))),
            next_hdr[3].eq(Cat(C(0, 2), address[2:32])),
        ]
        w.n, w.beats_per_record, w.hdr4, w.last_data, w.next_hdr = n, beats_per_record, hdr4, last_data, next_hdr
        w.n_records, w.rec_done, w.cur_hdr4, w.hdr = n_records, rec_done, cur_hdr4, hdr
        w.hdr_beat, w.data_beat, w.prev, w.cur = hdr_beat, data_beat, prev, cur

    def _fsm(self, w):
        """The state machine that sends a TLP: IDLE (latch the header), HEADER (header-only
        beats), DATA (the records' beats, header DWs carried in front), TAIL (the carried DWs of
        the last record)."""
        data_width, n, beats_per_record, source = w.data_width, w.n, w.beats_per_record, w.source
        record_fifo, drop_oldest, halt, wr_index = w.record_fifo, w.drop_oldest, w.halt, w.wr_index
        go, batch, hdr4, last_data, next_hdr = w.go, w.batch, w.hdr4, w.last_data, w.next_hdr
        n_records, rec_done, cur_hdr4, hdr = w.n_records, w.rec_done, w.cur_hdr4, w.hdr
        hdr_beat, data_beat, prev, cur = w.hdr_beat, w.data_beat, w.prev, w.cur
        # Per header length (3 or 4 DWs): header-only beats, carried DWs `s`, the header's
        # carried DWs placed where `prev`'s tail is read from.
        layouts = {}
        for h in (3, 4):
            full, s = divmod(h, n)
            layouts[h] = (full, s)
        def by_hdr(f):
            return Mux(cur_hdr4, f(4), f(3))
        def joined(h):
            full, s = layouts[h]
            if s == 0:
                return cur
            return Cat(prev[(n - s) * 32:], cur[:(n - s) * 32])
        def tail(h):
            full, s = layouts[h]
            return prev[(n - s) * 32:] if s else C(0, 1)
        def tail_be(h):
            return (1 << (4 * layouts[h][1])) - 1
        def header_beat(h):
            full, s = layouts[h]
            cases = {b: source.dat.eq(Cat(*hdr[b * n:(b + 1) * n])) for b in range(full)}
            return Case(hdr_beat, cases) if cases else []
        full_beats = by_hdr(lambda h: layouts[h][0])
        has_tail = by_hdr(lambda h: int(layouts[h][1] != 0))
        def header_rest(h):
            # The header DWs that share the first data beat, as the tail of `prev`.
            full, s = layouts[h]
            return Cat(C(0, (n - s) * 32), *next_hdr[full * n:full * n + s]) if s else C(0, data_width)
        done = [
            NextValue(wr_index, wr_index + n_records),
            NextState("IDLE"),
        ]

        self.fsm = fsm = FSM(reset_state="IDLE")
        fsm.act("IDLE",
            record_fifo.source.ready.eq(drop_oldest),
            If(go & ~drop_oldest & ~halt,
                NextValue(n_records, batch),
                NextValue(cur_hdr4, hdr4),
                *[NextValue(hdr[i], next_hdr[i]) for i in range(4)],
                NextValue(prev, Mux(hdr4, header_rest(4), header_rest(3))),
                NextValue(hdr_beat, 0), NextValue(data_beat, 0), NextValue(rec_done, 0),
                If(Mux(hdr4, layouts[4][0], layouts[3][0]) == 0,
                    NextState("DATA")
                ).Else(
                    NextState("HEADER")
                )
            )
        )
        fsm.act("HEADER",
            source.valid.eq(1),
            source.first.eq(hdr_beat == 0),
            source.be.eq(Replicate(1, data_width // 8)),
            If(cur_hdr4, header_beat(4)).Else(header_beat(3)),
            If(source.ready,
                NextValue(hdr_beat, hdr_beat + 1),
                If(hdr_beat == full_beats - 1, NextState("DATA"))
            )
        )
        fsm.act("DATA",
            # The batch's records are in the FIFO (batch <= level): always valid. Should the
            # owner empty the FIFO under a TLP already started (its lease ended), the TLP is
            # finished all the same: a TLP cannot be cut, and a half-sent one would hold the
            # transmit arbiter for ever.
            source.valid.eq(1),
            source.first.eq((full_beats == 0) & (data_beat == 0) & (rec_done == 0)),
            source.be.eq(Replicate(1, data_width // 8)),
            source.dat.eq(by_hdr(joined)),
            source.last.eq(last_data & ~has_tail),
            If(source.valid & source.ready,
                NextValue(prev, cur),
                NextValue(data_beat, data_beat + 1),
                If(data_beat == beats_per_record - 1,
                    record_fifo.source.ready.eq(1),
                    NextValue(data_beat, 0),
                    NextValue(rec_done, rec_done + 1),
                ),
                If(last_data,
                    If(has_tail, NextState("TAIL")).Else(*done)
                )
            )
        )
        fsm.act("TAIL",
            source.valid.eq(1),
            source.last.eq(1),
            source.dat.eq(by_hdr(tail)),
            source.be.eq(by_hdr(tail_be)),
            # The ring index moves once the TLP's last beat has left the writer.
            If(source.ready, *done)
        )

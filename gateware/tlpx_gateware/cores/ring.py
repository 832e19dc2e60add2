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

from migen import *

from litex.gen import *
from litex.soc.interconnect import stream

from litepcie.common import phy_layout

from tlpx_gateware.cores.request_path.core import DWGatherer

RECORD_DWS = 8


def record_layout():
    return [("record", RECORD_DWS * 32)]


class RecordRingWriter(LiteXModule):
    """`fifo` is a stream.SyncFIFO of record_layout(); `hold` keeps records in it (not
    written), `discard` pops its oldest record without writing it, `halt` starts no TLP."""
    def __init__(self, data_width, requester_id, fifo, ring_base, ring_size_log2, payload_size_log2,
                 flush_cycles, rd_index, clear, hold=C(0, 1), discard=C(0, 1), halt=C(0, 1)):
        self.source   = stream.Endpoint(phy_layout(data_width))
        self.wr_index = wr_index = Signal(32)

        # # #

        record_fifo = fifo
        holding = hold
        drop_oldest = discard
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

        self.gatherer = gatherer = DWGatherer(data_width)
        self.comb += gatherer.source.connect(self.source)
        address = Signal(64)
        hdr4 = Signal()
        self.comb += [
            address.eq(ring_base + (slot << 5)),
            hdr4.eq(address[32:] != 0),
        ]
        n_records = Signal(8)
        dw = Signal(4)
        rec_done = Signal(8)
        cur_address = Signal(64)
        cur_hdr4 = Signal()
        rec_dws = Signal(RECORD_DWS * 32)
        self.comb += rec_dws.eq(record_fifo.source.record)
        self.fsm = fsm = FSM(reset_state="IDLE")
        fsm.act("IDLE",
            record_fifo.source.ready.eq(drop_oldest),
            If(go & ~drop_oldest & ~halt,
                NextValue(n_records, batch),
                NextValue(cur_address, address),
                NextValue(cur_hdr4, hdr4),
                NextState("DW0")
            )
        )
        fsm.act("DW0",
            gatherer.sink.valid.eq(1), gatherer.sink.first.eq(1),
            gatherer.sink.dat.eq(Cat((n_records << 3)[:10], C(0, 19), Cat(cur_hdr4, C(1, 1), C(0, 1)))),
            If(gatherer.sink.ready, NextState("DW1"))
        )
        fsm.act("DW1",
            gatherer.sink.valid.eq(1),
            gatherer.sink.dat.eq(Cat(C(0xF, 4), C(0xF, 4), C(0, 8), requester_id)),
            If(gatherer.sink.ready, NextState("DW2"))
        )
        fsm.act("DW2",
            gatherer.sink.valid.eq(1),
            gatherer.sink.dat.eq(Mux(cur_hdr4, cur_address[32:], Cat(C(0, 2), cur_address[2:32]))),
            If(gatherer.sink.ready,
                NextValue(dw, 0), NextValue(rec_done, 0),
                If(cur_hdr4, NextState("DW3")).Else(NextState("DATA"))
            )
        )
        fsm.act("DW3",
            gatherer.sink.valid.eq(1),
            gatherer.sink.dat.eq(Cat(C(0, 2), cur_address[2:32])),
            If(gatherer.sink.ready, NextState("DATA"))
        )
        dw_cases = {i: gatherer.sink.dat.eq(rec_dws[32*i:32*(i+1)]) for i in range(RECORD_DWS)}
        fsm.act("DATA",
            gatherer.sink.valid.eq(1),
            Case(dw, dw_cases),
            gatherer.sink.last.eq((dw == RECORD_DWS - 1) & (rec_done == n_records - 1)),
            If(gatherer.sink.ready,
                NextValue(dw, dw + 1),
                If(dw == RECORD_DWS - 1,
                    record_fifo.source.ready.eq(1),
                    NextValue(dw, 0),
                    NextValue(rec_done, rec_done + 1),
                    If(rec_done == n_records - 1,
                        NextState("SENT")
                    )
                )
            )
        )
        # The ring index moves once the TLP's last beat has left the card.
        fsm.act("SENT",
            If(self.source.valid & self.source.ready & self.source.last,
                NextValue(wr_index, wr_index + n_records),
                NextState("IDLE")
            )
        )
        self.sync += If(clear, wr_index.eq(0))

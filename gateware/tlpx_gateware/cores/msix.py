"""MSI-X: the vector table and pending-bit array in BAR0, each message a posted write.

```
 MSI block (cores/msi.py) ─► MSI fence (requests before it have left) ─► MsiRouter
      vector v                                                            │
      MSI-X off: ─► the PHY's MSI interface (the hard IP sends the MSI) ◄─┤
      MSI-X on:  ─► MsiXTable: entry v (address, data, mask) ─► MWr TLP ──► transmit arbiter
                     masked (entry or function): pending bit v, sent once unmasked
```

The table and the pending-bit array (PBA) are a BAR0 window of their own (MSIX_WINDOW_BASE in
soc.py): the table at its start, 16 bytes per vector in the PCIe layout (message address low,
high, data, vector control with the mask in bit 0), the PBA at MSIX_PBA_OFFSET (one bit per
vector, read-only). The MSI-X capability names the BAR and these offsets; the host (its kernel)
programs the table. A message is a one-DW memory write to the entry's address with the entry's
data, from the card's requester ID with tag MSIX_TAG, so the spy sees it as a write of block
``msix``.

LitePCIe's ``LitePCIeMSIX`` does the same with its table as CSR memory and no pending bits
(a masked message is dropped); here a masked vector's message waits, as the PCIe base spec asks
(6.1.4.5), and the table sits where the capability can name it in BAR0 whatever the CSR layout.
"""

from migen import *

from litex.gen import LiteXModule
from litex.soc.interconnect import stream, wishbone

from litepcie.common import msi_layout, phy_layout

from tlpx_gateware.cores.msi import MSI_VECTORS
from tlpx_gateware.tlp import FMT_3DW_DATA, FMT_4DW_DATA, TYPE_MEM

MSIX_WINDOW_SIZE = 0x1000
MSIX_TABLE_OFFSET = 0x000       # in the window
MSIX_PBA_OFFSET = 0x800         # in the window (QWORD aligned)
MSIX_ENTRY_BYTES = 16
# Tag of the messages' MWrs (soc.py's tag plan; the spy names the block by it).
MSIX_TAG = 52

assert MSIX_TABLE_OFFSET + MSI_VECTORS * MSIX_ENTRY_BYTES <= MSIX_PBA_OFFSET
assert MSIX_PBA_OFFSET % 8 == 0 and MSIX_TABLE_OFFSET % 8 == 0


class MsiXTable(LiteXModule):
    """``bus``: the window (32-bit Wishbone, DW addresses; the low bits select).
    ``sink``: a message per vector (MSI layout, ``dat`` = vector). ``source``: the MWr TLPs
    (phy_layout, header DWs first, as the card's other request sources). ``function_mask``:
    the capability's Function Mask. ``pending``: a message waits (keeps a gated core running).
    """
    def __init__(self, data_width, requester_id, vectors=MSI_VECTORS):
        self.bus = bus = wishbone.Interface(data_width=32)
        self.sink = sink = stream.Endpoint(msi_layout())
        self.source = source = stream.Endpoint(phy_layout(data_width))
        self.function_mask = Signal()
        self.pba = pba = Signal(vectors)
        self.pending = Signal()
        self.sent = Signal(32)          # messages sent (for the tests and counters)

        # # #

        n = data_width // 32
        # Address low, high and data in a memory; each entry's mask bit (vector control bit 0)
        # in a register, so that every vector is masked at reset (the spec's reset value)
        # without a memory initialisation file.
        table = Memory(32, vectors * 4)
        masks = Signal(vectors, reset=(1 << vectors) - 1)
        host_port = table.get_port(write_capable=True, we_granularity=8)
        msg_port = table.get_port(async_read=False)
        self.specials += table, host_port, msg_port

        table_write = self._add_window(bus, host_port, masks, pba, vectors)

        # Messages: the entry is read DW by DW (address low, high, data, control), then sent
        # or, masked, left pending. Pending vectors are retried, in turn, once after something
        # that can unmask them (a table write, the function mask's change), not for ever: a
        # vector the host keeps masked costs nothing (and lets a gated core clock stop).
        rescan = Signal()
        steps = Signal(max=vectors + 1)     # vectors looked at since the rescan began
        function_mask_was = Signal()
        self.sync += function_mask_was.eq(self.function_mask)
        vector = Signal(max=vectors)
        word = Signal(2)
        addr_lo = Signal(32)
        addr_hi = Signal(32)
        data = Signal(32)
        scan = Signal(max=vectors)
        self.comb += msg_port.adr.eq(Cat(word, vector))

        hdr4, beat, dat_cases3, dat_cases4, last_beat = self._message_beats(source, requester_id, n, addr_lo, addr_hi, data)

        vector_bit = Signal(vectors)
        self.comb += vector_bit.eq(1 << vector)
        self.fsm = fsm = FSM(reset_state="IDLE")
        # A message is taken from the sink at once: the MSI fence let it go because the
        # requests before it have left, a condition this message's own write, once issued,
        # would no longer meet (the fence's ready would drop under it).
        fsm.act("IDLE",
            sink.ready.eq(1),
            If(sink.valid,
                NextValue(vector, sink.dat[:len(vector)] if vectors > 1 else 0),
                NextValue(word, 0),
                NextState("READ"),
            ).Elif(rescan & (pba != 0),
                # Retry the pending vectors in turn (the host may have unmasked one).
                If((pba >> scan)[0],
                    NextValue(vector, scan),
                    NextValue(word, 0),
                    NextState("READ"),
                ),
                NextValue(scan, Mux(scan == vectors - 1, 0, scan + 1)),
            )
        )
        self.sync += [
            If(table_write | (function_mask_was & ~self.function_mask),
                rescan.eq(1),
                steps.eq(0),
            ).Elif(fsm.ongoing("IDLE") & ~sink.valid & ((pba == 0) | (steps == vectors)),
                rescan.eq(0),
            ).Elif(fsm.ongoing("IDLE") & ~sink.valid & rescan,
                steps.eq(steps + 1),
            ),
        ]
        # READ: the port's data is the previous cycle's address (synchronous read).
        prev_word = Signal(2)
        reading = Signal()
        self.sync += [prev_word.eq(word), reading.eq(fsm.ongoing("READ"))]
        fsm.act("READ",
            If(reading,
                Case(prev_word, {
                    0: NextValue(addr_lo, msg_port.dat_r),
                    1: NextValue(addr_hi, msg_port.dat_r),
                    2: NextValue(data, msg_port.dat_r),
                }),
            ),
            If(word != 3, NextValue(word, word + 1)),
            If(reading & (prev_word == 3),
                If((masks >> vector)[0] | self.function_mask,
                    # Masked: the message waits in the PBA.
                    NextValue(pba, pba | vector_bit),
                    NextState("IDLE"),
                ).Else(
                    NextValue(beat, 0),
                    NextState("SEND"),
                )
            )
        )
        fsm.act("SEND",
            source.valid.eq(1),
            source.first.eq(beat == 0),
            source.last.eq(beat == last_beat),
            If(hdr4, Case(beat, dat_cases4)).Else(Case(beat, dat_cases3)),
            If(source.ready,
                NextValue(beat, beat + 1),
                If(beat == last_beat,
                    NextValue(pba, pba & ~vector_bit),
                    NextValue(self.sent, self.sent + 1),
                    NextState("IDLE"),
                )
            )
        )
        self.comb += self.pending.eq(sink.valid | (rescan & (pba != 0)) | ~fsm.ongoing("IDLE"))

    def _add_window(self, bus, host_port, masks, pba, vectors):
        """The BAR0 window on `bus`: the table's DWs (the memory through `host_port`, each
        entry's control DW in `masks`), then the PBA (read-only). Returns a signal high for any
        write into the table."""
        # The window: the table's DWs, then the PBA; writes to the PBA or beyond are ignored.
        dw = Signal(10)
        in_table = Signal()
        control_dw = Signal()
        pba_dw = Signal(10)
        self.comb += [
            dw.eq(bus.adr[:10]),
            in_table.eq(dw < vectors * 4),
            control_dw.eq(dw[:2] == 3),
            pba_dw.eq(dw - MSIX_PBA_OFFSET // 4),
            host_port.adr.eq(dw),
            host_port.dat_w.eq(bus.dat_w),
            host_port.we.eq(Mux(bus.cyc & bus.stb & bus.we & ~bus.ack & in_table, bus.sel, 0)),
        ]
        # A read answers a cycle later (the table's synchronous read): the PBA's word is
        # latched in the same cycle, anything else in the window reads 0.
        assert vectors <= 32, "the PBA is one DW"
        reading_table = Signal()
        other_read = Signal(32)
        self.sync += [
            bus.ack.eq(bus.cyc & bus.stb & ~bus.ack),
            reading_table.eq(in_table & ~control_dw),
            other_read.eq(Mux(in_table, (masks >> dw[2:])[0], Mux(pba_dw == 0, pba, 0))),
            If(bus.cyc & bus.stb & bus.we & ~bus.ack & in_table & control_dw & bus.sel[0],
                masks.eq(Mux(bus.dat_w[0], masks | (1 << dw[2:]), masks & ~(1 << dw[2:]))),
            ),
        ]
        self.comb += [
            bus.dat_r.eq(Mux(reading_table, host_port.dat_r, other_read)),
            bus.err.eq(0),
        ]

        table_write = Signal()
        self.comb += table_write.eq(bus.cyc & bus.stb & bus.we & ~bus.ack & in_table)
        return table_write

    def _message_beats(self, source, requester_id, n, addr_lo, addr_hi, data):
        """The MWr of one message as `source` beats: a 3-DW header (a 32-bit address) or a 4-DW
        one, then the data DW, `n` DWs per beat, header DW 0 first (as the card's other request
        sources). Returns (hdr4, beat counter, beat cases for 3- and 4-DW headers, last beat)."""
        hdr4 = Signal()
        self.comb += hdr4.eq(addr_hi != 0)
        dws3 = [
            Cat(C(1, 10), C(0, 14), C(TYPE_MEM, 5), C(FMT_3DW_DATA, 3)),
            Cat(C(0xF, 4), C(0, 4), C(MSIX_TAG, 8), requester_id),
            Cat(C(0, 2), addr_lo[2:]),
            data,
            C(0, 32),
        ]
        dws4 = [
            Cat(C(1, 10), C(0, 14), C(TYPE_MEM, 5), C(FMT_4DW_DATA, 3)),
            Cat(C(0xF, 4), C(0, 4), C(MSIX_TAG, 8), requester_id),
            addr_hi,
            Cat(C(0, 2), addr_lo[2:]),
            data,
        ]
        beats3 = (4 + n - 1) // n
        beats4 = (5 + n - 1) // n
        beat = Signal(max=max(beats3, beats4) + 1)
        def beat_dat(dws, b):
            words = dws[b * n:(b + 1) * n]
            return Cat(*(words + [C(0, 32)] * (n - len(words))))
        def beat_be(total, b):
            valid = min(n, total - b * n)
            return (1 << (4 * valid)) - 1
        dat_cases3 = {b: [source.dat.eq(beat_dat(dws3, b)), source.be.eq(beat_be(4, b))] for b in range(beats3)}
        dat_cases4 = {b: [source.dat.eq(beat_dat(dws4, b)), source.be.eq(beat_be(5, b))] for b in range(beats4)}
        last_beat = Signal(max=max(beats3, beats4, 2))
        self.comb += last_beat.eq(Mux(hdr4, beats4 - 1, beats3 - 1))

        return hdr4, beat, dat_cases3, dat_cases4, last_beat

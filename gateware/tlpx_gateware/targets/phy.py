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

`HardwarePHY` is a plain Migen `Module` (not AutoCSR) on purpose: the vendor PHY's CSRs (link
status, MSI/bus-master enable, MPS/MRRS) are left out of the card's register map, so a board's
card has exactly the simulated card's map and map hash. Its link-up and configuration signals
are still here (`link_up`, `bus_master_enable`, `msi_enable`) for LEDs and later use.
"""

from migen import *

from litex.soc.interconnect import stream

from litepcie.common import phy_layout


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


class HardwarePHY(Module):
    """The interface of sim.simphy.SimPHY, on a LitePCIe vendor PHY (S7PCIEPHY, ...).

    Attributes the card uses: data_width, endianness ("little"), qword_aligned, sink, source,
    msi, id, bar0_size, bar0_mask, max_request_size, max_payload_size; and, as SimPHY,
    bus_master_enable and msi_enable; plus link_up and `vendor` (the LitePCIe PHY itself).
    """
    endianness    = "little"
    qword_aligned = False

    def __init__(self, vendor_phy):
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
        self.bus_master_enable = phy._bus_master_enable.status
        self.msi_enable        = phy._msi_enable.status

        if phy.endianness != "big":
            # USPCIEPHY (little, but split request/completion streams) would need a merger
            # and a splitter in front of the card: not built yet.
            raise NotImplementedError(f"only endianness 'big' PHYs (S7PCIEPHY) are supported, not {phy.endianness!r}")
        self.submodules.rx_swap = rx = PayloadByteSwap(phy.data_width)
        self.submodules.tx_swap = tx = PayloadByteSwap(phy.data_width)
        self.comb += [
            phy.source.connect(rx.sink),
            tx.source.connect(phy.sink),
        ]
        self.source, self.sink = rx.source, tx.sink

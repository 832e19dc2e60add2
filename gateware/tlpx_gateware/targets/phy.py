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
from migen.genlib.cdc import MultiReg

from litex.soc.interconnect import stream
from litex.soc.interconnect.packet import Arbiter, Dispatcher

from litepcie.common import phy_layout

from tlpx_gateware.tlp import TYPE_CPL, TYPE_CPL_LK, TYPE_MEM, TYPE_MEM_LK


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


class UltraScaleStreams(Module):
    """USPCIEPHY's four streams as the card's two (`sink` card -> host, `source` host -> card).

    Receive: CQ (the host's requests) and RC (completions) merged by whole TLPs, `first`
    marked. Transmit: completions (Type 01010 / 01011) to CC, everything else to RQ, through a
    RequestWidener where `widen_requests` (LitePCIe's 256-bit RQ adapter)."""
    def __init__(self, vendor_phy, widen_requests):
        data_width = vendor_phy.data_width
        self.sink   = sink   = stream.Endpoint(phy_layout(data_width))
        self.source = source = stream.Endpoint(phy_layout(data_width))

        # # #

        merged = stream.Endpoint(phy_layout(data_width))
        self.submodules.rx_arbiter = Arbiter([vendor_phy.req_source, vendor_phy.cmp_source], merged)
        self.submodules.rx_first = rx_first = MarkFirst(data_width)
        self.comb += [merged.connect(rx_first.sink), rx_first.source.connect(source)]

        requests = stream.Endpoint(phy_layout(data_width))
        completions = stream.Endpoint(phy_layout(data_width))
        self.submodules.tx_dispatcher = dispatcher = Dispatcher(sink, [requests, completions])
        type_ = sink.dat[24:29]
        self.comb += dispatcher.sel.eq((type_ == TYPE_CPL) | (type_ == TYPE_CPL_LK))
        self.comb += completions.connect(vendor_phy.cmp_sink)
        if widen_requests:
            self.submodules.widener = widener = RequestWidener(data_width)
            self.comb += [requests.connect(widener.sink), widener.source.connect(vendor_phy.req_sink)]
        else:
            self.comb += requests.connect(vendor_phy.req_sink)


class HardwarePHY(Module):
    """The interface of sim.simphy.SimPHY, on a LitePCIe vendor PHY (S7PCIEPHY, USPCIEPHY).

    Attributes the card uses: data_width, endianness ("little"), qword_aligned, sink, source,
    msi, id, bar0_size, bar0_mask, max_request_size, max_payload_size; and, as SimPHY,
    bus_master_enable and msi_enable; plus link_up and `vendor` (the LitePCIe PHY itself).
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
            # cfg_function_status bits of PF0 (PG156): 0 I/O Space, 1 Memory Space, 2 Bus Master
            # Enable, 3 INTx Disable. LitePCIe 2024.12's CSR takes bit 0 (I/O Space Enable, which
            # a host leaves off for a card without I/O BARs); the card reads bit 2.
            self.bus_master_enable = Signal()
            self.specials += MultiReg(phy.pcie_phy_params["o_cfg_function_status"][2], self.bus_master_enable, "sys")
            return
        if widen_requests:
            raise ValueError("request widening is for UltraScale PHYs (split request/completion streams)")
        self.bus_master_enable = phy._bus_master_enable.status
        if phy.endianness != "big":
            raise NotImplementedError(f"a shared-stream PHY must have endianness 'big' (S7PCIEPHY), not {phy.endianness!r}")
        self.submodules.rx_swap = rx = PayloadByteSwap(phy.data_width)
        self.submodules.tx_swap = tx = PayloadByteSwap(phy.data_width)
        self.comb += [
            phy.source.connect(rx.sink),
            tx.source.connect(phy.sink),
        ]
        self.source, self.sink = rx.source, tx.sink

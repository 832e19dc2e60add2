"""SimPHY: the card's PCIe PHY for simulation, its TLP streams as top-level ports.

It plays the part of a PCIe hard IP's user interface: TLP beats in LitePCIe's PHY layout
(endianness "little", see tlpx_card.h), an MSI request stream, and what a hard IP hands the
user logic from its configuration space (requester ID, MPS, MRRS, bus-master and MSI
enables). The link, the root complex and the configuration space itself live in tlpx-sim.
"""

from migen import *

from litex.gen import *
from litex.build.generic_platform import Pins, Subsignal
from litex.soc.interconnect import stream

from litepcie.common import get_bar_mask, msi_layout, phy_layout


def simphy_ios(data_width):
    """Top-level ports of the card: `pcie_rx_*` host->card, `pcie_tx_*` card->host."""
    return [
        ("sys_clk", 0, Pins(1)),
        ("sys_rst", 0, Pins(1)),
        ("pcie", 0,
            Subsignal("rx_valid", Pins(1)),
            Subsignal("rx_ready", Pins(1)),
            Subsignal("rx_first", Pins(1)),
            Subsignal("rx_last",  Pins(1)),
            Subsignal("rx_dat",   Pins(data_width)),
            Subsignal("rx_be",    Pins(data_width // 8)),
            Subsignal("tx_valid", Pins(1)),
            Subsignal("tx_ready", Pins(1)),
            Subsignal("tx_first", Pins(1)),
            Subsignal("tx_last",  Pins(1)),
            Subsignal("tx_dat",   Pins(data_width)),
            Subsignal("tx_be",    Pins(data_width // 8)),
            Subsignal("msi_valid",  Pins(1)),
            Subsignal("msi_ready",  Pins(1)),
            Subsignal("msi_vector", Pins(8)),
            Subsignal("cfg_requester_id",      Pins(16)),
            Subsignal("cfg_max_payload_size",  Pins(16)),
            Subsignal("cfg_max_request_size",  Pins(16)),
            Subsignal("cfg_bus_master_enable", Pins(1)),
            Subsignal("cfg_msi_enable",        Pins(1)),
        ),
    ]


class SimPHY(LiteXModule):
    endianness    = "little"
    qword_aligned = False

    def __init__(self, pads, data_width=64, bar0_size=0x100000):
        if data_width not in (64, 128, 256):
            raise ValueError(f"SimPHY data width must be 64, 128 or 256 bits, not {data_width!r}")
        self.data_width = data_width
        self.pads       = pads
        self.sink   = stream.Endpoint(phy_layout(data_width))  # card -> host
        self.source = stream.Endpoint(phy_layout(data_width))  # host -> card
        self.msi    = stream.Endpoint(msi_layout())

        self.id                = Signal(16)  # requester/completer ID of the card
        self.bar0_size         = bar0_size
        self.bar0_mask         = get_bar_mask(bar0_size)
        self.max_request_size  = Signal(16)  # bytes
        self.max_payload_size  = Signal(16)  # bytes
        self.bus_master_enable = Signal()
        self.msi_enable        = Signal()

        # # #

        self.comb += [
            # Host -> card.
            self.source.valid.eq(pads.rx_valid),
            pads.rx_ready.eq(self.source.ready),
            self.source.first.eq(pads.rx_first),
            self.source.last.eq(pads.rx_last),
            self.source.dat.eq(pads.rx_dat),
            self.source.be.eq(pads.rx_be),
            # Card -> host.
            pads.tx_valid.eq(self.sink.valid),
            self.sink.ready.eq(pads.tx_ready),
            pads.tx_first.eq(self.sink.first),
            pads.tx_last.eq(self.sink.last),
            pads.tx_dat.eq(self.sink.dat),
            pads.tx_be.eq(self.sink.be),
            # MSI.
            pads.msi_valid.eq(self.msi.valid),
            self.msi.ready.eq(pads.msi_ready),
            pads.msi_vector.eq(self.msi.dat),
            # Configuration.
            self.id.eq(pads.cfg_requester_id),
            self.max_payload_size.eq(pads.cfg_max_payload_size),
            self.max_request_size.eq(pads.cfg_max_request_size),
            self.bus_master_enable.eq(pads.cfg_bus_master_enable),
            self.msi_enable.eq(pads.cfg_msi_enable),
        ]

"""SimPHY: the card's PCIe PHY for simulation, its TLP streams as top-level ports.

It plays the part of a PCIe hard IP's user interface: TLP beats in LitePCIe's PHY layout
(endianness "little", see tlpx_card.h), an MSI request stream, and what a hard IP hands the
user logic from its configuration space (requester ID, MPS, MRRS, bus-master and MSI
enables). The link, the root complex and the configuration space itself live in tlpx-sim.

Its inputs and outputs are registered, as a hard IP's user interface is (a pipeline stage on
each side): a TLP beat from the simulator enters a two-beat FIFO (``rx_ready`` is that FIFO's
room, so the card takes a beat per cycle) and reaches the card a cycle later; the card's beats
leave through a two-beat FIFO, a cycle later; the configuration inputs are registered. Besides
modelling the hard IP's pipeline, this keeps the card's logic off the simulator's inputs:
Verilator evaluates logic that depends on a top-level input in every evaluation (twice a
cycle), logic behind registers only when its clock ticks (sim/clocking.py).
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
            Subsignal("cfg_msi_multiple_enable", Pins(3)),
            Subsignal("cfg_msix_enable",        Pins(1)),
            Subsignal("cfg_msix_function_mask", Pins(1)),
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
        self.msi_multiple_enable = Signal(3)   # MSI's MME: 1 << this vectors granted
        self.msix_enable       = Signal()      # MSI-X Enable (messages through the table)
        self.msix_function_mask = Signal()     # MSI-X Function Mask (every vector held)

        # # #

        self.rx_fifo = rx_fifo = stream.SyncFIFO(phy_layout(data_width), 2, buffered=False)
        self.tx_fifo = tx_fifo = stream.SyncFIFO(phy_layout(data_width), 2, buffered=False)
        self.comb += [
            # Host -> card, through rx_fifo.
            rx_fifo.sink.valid.eq(pads.rx_valid),
            pads.rx_ready.eq(rx_fifo.sink.ready),
            rx_fifo.sink.first.eq(pads.rx_first),
            rx_fifo.sink.last.eq(pads.rx_last),
            rx_fifo.sink.dat.eq(pads.rx_dat),
            rx_fifo.sink.be.eq(pads.rx_be),
            rx_fifo.source.connect(self.source),
            # Card -> host, through tx_fifo.
            self.sink.connect(tx_fifo.sink),
            pads.tx_valid.eq(tx_fifo.source.valid),
            tx_fifo.source.ready.eq(pads.tx_ready),
            pads.tx_first.eq(tx_fifo.source.first),
            pads.tx_last.eq(tx_fifo.source.last),
            pads.tx_dat.eq(tx_fifo.source.dat),
            pads.tx_be.eq(tx_fifo.source.be),
            # MSI.
            pads.msi_valid.eq(self.msi.valid),
            self.msi.ready.eq(pads.msi_ready),
            pads.msi_vector.eq(self.msi.dat),
        ]
        self.sync += [
            # Configuration.
            self.id.eq(pads.cfg_requester_id),
            self.max_payload_size.eq(pads.cfg_max_payload_size),
            self.max_request_size.eq(pads.cfg_max_request_size),
            self.bus_master_enable.eq(pads.cfg_bus_master_enable),
            self.msi_enable.eq(pads.cfg_msi_enable),
            self.msi_multiple_enable.eq(Mux(pads.cfg_msi_multiple_enable > 5, 5, pads.cfg_msi_multiple_enable)),
            self.msix_enable.eq(pads.cfg_msix_enable),
            self.msix_function_mask.eq(pads.cfg_msix_function_mask),
        ]
        # Request TLPs handed to the simulator (cores/ordering: an MSI waits for the requests
        # issued before it). Imported here: targets.phy holds the PHYs' shared stream helpers.
        from tlpx_gateware.targets.phy import RequestsLeaving
        self.leaving = leaving = RequestsLeaving(tx_fifo.source)
        self.requests_done = leaving.count
        # The raw inputs, for the core's clock gate (sim/clocking.py): a beat arriving, a
        # configuration input changing.
        self.rx_valid_in = pads.rx_valid
        self.cfg_in = [pads.cfg_requester_id, pads.cfg_max_payload_size, pads.cfg_max_request_size,
                       pads.cfg_bus_master_enable, pads.cfg_msi_enable, pads.cfg_msi_multiple_enable,
                       pads.cfg_msix_enable, pads.cfg_msix_function_mask]

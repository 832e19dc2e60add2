"""What every real-hardware target shares: a litex-boards platform, a PLL/MMCM CRG from the
board's oscillator, LitePCIe's 7-series PHY configured with the card's PCI IDs, LEDs.

A board is a `Board` (a description; see acorn.py, kc705.py, kc705_x8.py). `TlpxCard(board=...)` calls
`board.platform()` and then `board.add_clocking_and_phy(card, ...)`, which adds `card.crg`,
`card.pcie_phy` (targets/phy.py: the vendor PHY seen as SimPHY is, its CSRs left out of the
register map) and `card.leds`.
"""

from dataclasses import dataclass, field

from migen import *

from litex.gen import LiteXModule
from litex.soc.cores.clock import S7MMCM, S7PLL

from litepcie.phy.s7pciephy import S7PCIEPHY

from tlpx_gateware.targets.phy import HardwarePHY

# The card's PCI identity (host/crates/tlpx/src/cmd/list.rs looks for it; docs/architecture.md).
PCI_VENDOR_ID = 0x10EE
PCI_DEVICE_ID = 0x7C01
PCI_CLASS_CODE = 0x118000  # signal processing controller, other

# Vivado version the targets are written for: LiteX/LitePCIe 2024.12 generate their IP Tcl for
# the pcie_7x core of the 2022-2024 Vivado releases.
VIVADO_VERSION = "2024.2"


@dataclass(frozen=True)
class Board:
    name:          str    # BOARD= value
    title:         str    # the board as sold
    platform_module: str  # litex_boards.platforms.<module>
    platform_args: dict   # Platform(**platform_args)
    part:          str    # FPGA part (must match the platform's device)
    gen:           int    # PCIe generation of the link
    lanes:         int
    data_width:    int    # the card's TLP datapath width (bits)
    clock_hz:      float  # the card's clock (sys)
    pcie_pads:     str    # platform resource of the PCIe lanes
    clock_pads:    str    # platform resource of the oscillator the CRG runs from
    clock_in_hz:   float
    pll:           str    # "S7PLL" or "S7MMCM"
    reset_pads:    str = None                   # a reset button, if the board has one
    leds:          tuple = ()                   # user_led numbers: heartbeat, link up, bus master
    extra_outputs: tuple = ()                   # (resource, value) driven constant (e.g. CLKREQ#)
    vivado_edition: str = ""                    # which Vivado edition covers the part
    flash:         str = ""                     # how to load it (docs/boards.md has the details)
    notes:         tuple = field(default=())

    # Hooks called by TlpxCard ---------------------------------------------------------------------

    def platform(self):
        import importlib
        module = importlib.import_module(f"litex_boards.platforms.{self.platform_module}")
        platform = module.Platform(**self.platform_args, toolchain="vivado")
        if platform.device != self.part:
            raise ValueError(f"board {self.name}: platform device {platform.device} is not {self.part}")
        return platform

    def add_clocking_and_phy(self, card, data_width, clock_hz, bar0_size):
        if data_width != self.data_width:
            raise ValueError(f"board {self.name} is built at {self.data_width} bits, not {data_width}")
        platform = card.platform
        card.crg = crg = BoardCRG(platform, self, clock_hz)
        for resource, value in self.extra_outputs:
            card.comb += platform.request(resource).eq(value)

        s7pciephy = S7PCIEPHY(platform, platform.request(self.pcie_pads),
            data_width = data_width,
            bar0_size  = bar0_size,
            cd         = "sys",
        )
        if s7pciephy.nlanes != self.lanes:
            raise ValueError(f"board {self.name}: {self.pcie_pads} has {s7pciephy.nlanes} lanes, not {self.lanes}")
        if clock_hz < pcie_user_clock_hz(self):
            raise ValueError(f"board {self.name}: the card's clock ({clock_hz / 1e6:.0f} MHz) is slower than the "
                             f"PHY's user clock ({pcie_user_clock_hz(self) / 1e6:.0f} MHz) at the same width")
        s7pciephy.update_config(pcie_7x_config(self))
        card.pcie_phy = phy = HardwarePHY(s7pciephy)
        platform.add_false_path_constraints(crg.cd_sys.clk, s7pciephy.cd_pcie.clk)

        if self.leds:
            card.leds = BoardLEDs(platform, self.leds, clock_hz,
                link_up=phy.link_up, bus_master_enable=phy.bus_master_enable)


def pcie_user_clock_hz(board):
    """The pcie_7x user clock LitePCIe's S7PCIEPHY configures (s7pciephy.py: userclk2 and
    User_Clk_Freq): 250 MHz at x8, 125 MHz below; its interface is as wide as the card's."""
    return 250e6 if board.lanes == 8 else 125e6


def pcie_7x_config(board):
    """pcie_7x IP parameters on top of LitePCIe's (s7pciephy.py add_sources): link and IDs."""
    return {
        "Vendor_ID":            f"{PCI_VENDOR_ID:04X}",
        "Device_ID":            f"{PCI_DEVICE_ID:04X}",
        "Subsystem_Vendor_ID":  f"{PCI_VENDOR_ID:04X}",
        "Subsystem_ID":         f"{PCI_DEVICE_ID:04X}",
        "Class_Code_Base":      f"{PCI_CLASS_CODE >> 16 & 0xFF:02X}",
        "Class_Code_Sub":       f"{PCI_CLASS_CODE >> 8 & 0xFF:02X}",
        "Class_Code_Interface": f"{PCI_CLASS_CODE & 0xFF:02X}",
        "Maximum_Link_Width":   f"X{board.lanes}",
        "Link_Speed":           {1: "2.5_GT/s", 2: "5.0_GT/s"}[board.gen],
        "Trgt_Link_Speed":      {1: "4'h1", 2: "4'h2"}[board.gen],
    }


class BoardCRG(LiteXModule):
    """sys (the card's clock) from the board's oscillator through a PLL or MMCM; held in reset
    until it locks (and while the reset button, if any, is pressed)."""
    def __init__(self, platform, board, clock_hz):
        self.rst    = Signal()
        self.cd_sys = ClockDomain()

        # # #

        self.pll = pll = {"S7PLL": S7PLL, "S7MMCM": S7MMCM}[board.pll](speedgrade=-2)
        reset = self.rst
        if board.reset_pads:
            reset = reset | platform.request(board.reset_pads)
        self.comb += pll.reset.eq(reset)
        pll.register_clkin(platform.request(board.clock_pads), board.clock_in_hz)
        # Exactly clock_hz (margin 0): ident reports it and every cycle count is in its unit.
        # LiteX's default 1 % margin takes the first fit, e.g. 125.84 MHz for 125 MHz on the MMCM.
        pll.create_clkout(self.cd_sys, clock_hz, margin=0)
        platform.add_period_constraint(self.cd_sys.clk, 1e9 / clock_hz)
        platform.add_false_path_constraints(self.cd_sys.clk, pll.clkin)


class BoardLEDs(LiteXModule):
    """LED 0: heartbeat (1 Hz, the card's clock runs); LED 1: PCIe link up; LED 2: bus master
    enabled (the host's driver took the card). Only as many as the board lists."""
    def __init__(self, platform, numbers, clock_hz, link_up, bus_master_enable):
        half_period = int(clock_hz // 2)
        counter   = Signal(max=half_period)
        heartbeat = Signal()
        self.sync += If(counter == half_period - 1,
            counter.eq(0),
            heartbeat.eq(~heartbeat)
        ).Else(
            counter.eq(counter + 1)
        )
        for number, value in zip(numbers, [heartbeat, link_up, bus_master_enable]):
            self.comb += platform.request("user_led", number).eq(value)

"""What every real-hardware target shares: a litex-boards platform, a PLL/MMCM CRG from the
board's oscillator, LitePCIe's PHY for the board's FPGA family (7-series: S7PCIEPHY on the
`pcie_7x` hard IP; UltraScale: USPCIEPHY on `pcie3_ultrascale`) configured with the card's PCI
IDs, LEDs.

A board is a `Board` (a description; see acorn.py, kc705.py, kc705_x8.py, kcu105.py). `TlpxCard(board=...)` calls
`board.platform()` and then `board.add_clocking_and_phy(card, ...)`, which adds `card.crg`,
`card.pcie_phy` (targets/phy.py: the vendor PHY seen as SimPHY is, its CSRs left out of the
register map) and `card.leds`.
"""

from dataclasses import dataclass, field

from migen import *

from litex.gen import LiteXModule
from litex.soc.cores.clock import S7MMCM, S7PLL, USMMCM, USPLL

from litepcie.phy.s7pciephy import S7PCIEPHY
from tlpx_gateware.targets.litepcie_us import FixedUSPCIEPHY
from tlpx_gateware.targets.phy import HardwarePHY

# The card's PCI identity (host/crates/tlpx/src/cmd/list.rs looks for it; docs/architecture.md).
PCI_VENDOR_ID = 0x10EE
PCI_DEVICE_ID = 0x7C01
PCI_CLASS_CODE = 0x118000  # signal processing controller, other

# Vivado version the targets are written for: LiteX/LitePCIe 2024.12 generate their IP Tcl for
# the pcie_7x and pcie3_ultrascale cores of the 2022-2024 Vivado releases.
VIVADO_VERSION = "2024.2"

# FPGA families and the LitePCIe PHY (and Xilinx hard IP) each uses.
FAMILIES = {
    "7series":    "S7PCIEPHY on pcie_7x",
    "ultrascale": "USPCIEPHY on pcie3_ultrascale",
}

# The largest payload LitePCIe's PHYs let the card use (s7pciephy.py and uspciephy.py clamp the
# negotiated Max_Payload_Size to 512 bytes; S7PCIEPHY configures pcie_7x for 256 at x8): the
# Device Capabilities' Max_Payload_Size Supported the card's hard IP is configured with.
def max_payload_supported(board):
    return 256 if board.family == "7series" and board.lanes == 8 else 512


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
    pll:           str    # "S7PLL", "S7MMCM" (7-series), "USPLL", "USMMCM" (UltraScale)
    reset_pads:    str = None                   # a reset button, if the board has one
    leds:          tuple = ()                   # user_led numbers: heartbeat, link up, bus master
    extra_outputs: tuple = ()                   # (resource, value) driven constant (e.g. CLKREQ#)
    vivado_edition: str = ""                    # which Vivado edition covers the part
    flash:         str = ""                     # how to load it (docs/boards.md has the details)
    notes:         tuple = field(default=())
    family:        str = "7series"              # FAMILIES: which LitePCIe PHY and hard IP

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
        card.pcie_phy = phy = self.make_phy(platform, platform.request(self.pcie_pads), data_width, clock_hz, bar0_size)
        card.verilog_sources.update(getattr(phy.vendor, "verilog_sources", {}))
        platform.add_false_path_constraints(crg.cd_sys.clk, phy.vendor.cd_pcie.clk)

        if self.leds:
            card.leds = BoardLEDs(platform, self.leds, clock_hz,
                link_up=phy.link_up, bus_master_enable=phy.bus_master_enable)

    def make_phy(self, platform, pads, data_width, clock_hz, bar0_size, phy_class=None):
        """The family's LitePCIe PHY on `pads`, configured for this board, seen as SimPHY is
        (targets/phy.py). The hard-IP testbench (targets/hardip) gives pads and a PHY class
        of its own (the UltraScale PHY with the hard IP left out)."""
        vendor = self.vendor_phy(platform, pads, data_width, clock_hz, bar0_size, phy_class)
        return HardwarePHY(vendor, widen_requests=widens_requests(self))

    def vendor_phy(self, platform, pads, data_width, clock_hz, bar0_size, phy_class=None):
        """The family's LitePCIe PHY itself (S7PCIEPHY, USPCIEPHY) on `pads`, configured for this
        board and crossing to the card's clock (`sys`). make_phy wraps it for the card; the
        timing proxy's LitePCIe reference (targets/timing.py) uses it as LiteX does."""
        if self.family not in FAMILIES:
            raise ValueError(f"board {self.name}: unknown FPGA family {self.family!r} (one of {', '.join(FAMILIES)})")
        if clock_hz < pcie_user_clock_hz(self):
            raise ValueError(f"board {self.name}: the card's clock ({clock_hz / 1e6:.0f} MHz) is slower than the "
                             f"PHY's user clock ({pcie_user_clock_hz(self) / 1e6:.0f} MHz) at the same width")
        if self.family == "7series":
            vendor = (phy_class or S7PCIEPHY)(platform, pads, data_width=data_width, bar0_size=bar0_size, cd="sys")
            vendor.update_config(pcie_7x_config(self))
        else:
            vendor = (phy_class or FixedUSPCIEPHY)(platform, pads, speed=f"gen{self.gen}", data_width=data_width,
                                              bar0_size=bar0_size, cd="sys")
            vendor.update_config(pcie3_ultrascale_config(self, bar0_size))
        if vendor.nlanes != self.lanes:
            raise ValueError(f"board {self.name}: {self.pcie_pads} has {vendor.nlanes} lanes, not {self.lanes}")
        return vendor


def msi_64bit(board):
    """Whether the board's hard IP offers 64-bit MSI addresses: LitePCIe's pcie_7x
    configuration sets MSI_64b False; pcie3_ultrascale's MSI capability is 64-bit (PG156)."""
    return board.family == "ultrascale"


def interrupt_vectors(board):
    """(MSI vectors, MSI-X entries) the board's hard IP offers the card (cores/msi.py has 32)."""
    from tlpx_gateware.cores.msi import MSI_VECTORS
    return (MSI_VECTORS, MSI_VECTORS) if board.family == "7series" else (MSI_VECTORS, 0)


def hard_ip_profile(board):
    """What the board's hard IP presents in configuration space, as tlpx-sim's --board
    presents it (tlpx_gateware.build writes these into the card's boards.json)."""
    return {
        "title": board.title,
        "hard_ip": {"7series": "pcie_7x", "ultrascale": "pcie3_ultrascale"}[board.family],
        "max_link_gen": board.gen,
        "max_link_lanes": board.lanes,
        "mps_supported": max_payload_supported(board),
        "msi_64bit": msi_64bit(board),
        # pcie_7x: 32 MSI vectors and 32 MSI-X entries, its Multiple Message Enable and MSI-X
        # Function Mask wired to the card (targets/phy.py). pcie3_ultrascale: 32 MSI vectors
        # (LitePCIe's wrapper with tlpx's MSI encoder, targets/litepcie_us.py), no MSI-X: the
        # wrapper has no MSI-X ports (docs/interrupts.md).
        "msi_vectors": interrupt_vectors(board)[0],
        "msix_vectors": interrupt_vectors(board)[1],
        "extended_tags": True,
    }


def widens_requests(board):
    """LitePCIe's 256-bit UltraScale RQ adapter (xilinx_us/s_axis_rq_adapt_256b.v) takes 4DW
    request headers only (LitePCIe's own packetizer forces them on xcku/xcvu parts at 256
    bits): the card's 3DW requests are widened in front of it (targets/phy.py)."""
    return board.family == "ultrascale" and board.data_width == 256


def pcie_user_clock_hz(board):
    """The hard IP's user clock LitePCIe configures: pcie_7x (s7pciephy.py: userclk2 and
    User_Clk_Freq) 250 MHz at x8, 125 MHz below; pcie3_ultrascale (uspciephy.py: axisten_freq)
    250 MHz. Its interface is as wide as the card's."""
    if board.family == "ultrascale":
        return 250e6
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


def pcie3_ultrascale_config(board, bar0_size):
    """pcie3_ultrascale IP parameters on top of LitePCIe's (uspciephy.py add_sources): the card's
    IDs and class, the Max_Payload_Size the card takes (max_payload_supported), 64 requester
    tags (Extended Tag Field supported: PG156, the Split Completion Table has 64 entries and
    6-bit tags; the card's non-posted tags are all below 64), 32 MSI vectors.
    BAR0 in whole megabytes: LitePCIe writes `max(bar0_size/MB, 1)`, a float ("1.0")."""
    if bar0_size % (1 << 20):
        raise ValueError(f"BAR0 of the UltraScale card must be whole megabytes, not {bar0_size:#x} bytes")
    return {
        "pf0_bar0_scale":                      "Megabytes",
        "pf0_bar0_size":                       str(bar0_size >> 20),
        "vendor_id":                           f"{PCI_VENDOR_ID:04X}",
        "PF0_DEVICE_ID":                       f"{PCI_DEVICE_ID:04X}",
        "PF0_SUBSYSTEM_VENDOR_ID":             f"{PCI_VENDOR_ID:04X}",
        "PF0_SUBSYSTEM_ID":                    f"{PCI_DEVICE_ID:04X}",
        "PF0_Use_Class_Code_Lookup_Assistant": "false",
        "PF0_CLASS_CODE":                      f"{PCI_CLASS_CODE:06X}",
        "pf0_dev_cap_max_payload":             f"{max_payload_supported(board)}_bytes",
        "extended_tag_field":                  "true",
        "PF0_MSI_CAP_MULTIMSGCAP":             f"{interrupt_vectors(board)[0]}_vectors",
        "PL_LINK_CAP_MAX_LINK_SPEED":          {1: "2.5_GT/s", 2: "5.0_GT/s", 3: "8.0_GT/s"}[board.gen],
    }


class BoardCRG(LiteXModule):
    """sys (the card's clock) from the board's oscillator through a PLL or MMCM; held in reset
    until it locks (and while the reset button, if any, is pressed)."""
    def __init__(self, platform, board, clock_hz):
        self.rst    = Signal()
        self.cd_sys = ClockDomain()

        # # #

        self.pll = pll = {"S7PLL": S7PLL, "S7MMCM": S7MMCM, "USPLL": USPLL, "USMMCM": USMMCM}[board.pll](speedgrade=-2)
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

"""Xilinx KCU105: Kintex UltraScale XCKU040 evaluation board, PCIe Gen3 x8 edge.

LitePCIe's USPCIEPHY on `pcie_x8` with the `pcie3_ultrascale` hard IP at Gen3 x8: a 256-bit
interface at 250 MHz (LitePCIe's axisten_freq 250), so the card is built at 256 bits and
clocked at 250 MHz from the 125 MHz oscillator (`clk125`, G10/F10) through a USMMCM; the PHY
crosses between its user clock and the card's. litex-boards' own KCU105 target builds PCIe x4
at 128 bits: this is LitePCIe's Gen3 x8 / 256-bit path.

The board whose hard IP an independent model checks: cocotbext-pcie models pcie3_ultrascale
(`UltraScalePcieDevice`) at the user interface, and targets/hardip runs this card against it
(docs/verification.md). Generated only: never built with Vivado nor run on a board here.
"""

from tlpx_gateware.targets.board import Board

BOARD = Board(
    name            = "kcu105",
    title           = "Xilinx KCU105 (Kintex UltraScale evaluation kit), Gen3 x8",
    platform_module = "xilinx_kcu105",
    platform_args   = {},
    part            = "xcku040-ffva1156-2-e",
    family          = "ultrascale",
    gen             = 3,
    lanes           = 8,
    data_width      = 256,
    clock_hz        = 250e6,
    pcie_pads       = "pcie_x8",
    clock_pads      = "clk125",
    clock_in_hz     = 125e6,
    pll             = "USMMCM",
    reset_pads      = "cpu_reset",
    leds            = (0, 1, 2),
    vivado_edition  = ("the device-locked licence that comes with the KCU105 kit, or Vivado ML Enterprise "
                       "(check AMD's device list for the free Standard edition: it names the smaller "
                       "Kintex UltraScale parts)"),
    flash           = "Vivado hardware manager (JTAG over the board's USB), or openFPGALoader -b kcu105",
)

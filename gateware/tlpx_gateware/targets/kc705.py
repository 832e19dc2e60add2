"""Xilinx KC705: Kintex-7 XC7K325T evaluation board, PCIe edge connector, Gen2 x4.

As in litex-boards' own target (litex_boards/targets/xilinx_kc705.py): S7PCIEPHY on `pcie_x4`
with a 128-bit interface at 125 MHz. The board's edge is x8: kc705_x8.py is this board at Gen2
x8, with LitePCIe's 250 MHz x8 user clock and the card at 250 MHz. The card's clock comes from
the 200 MHz oscillator through an MMCM; the CPU_RESET button resets it.
"""

from tlpx_gateware.targets.board import Board

BOARD = Board(
    name            = "kc705",
    title           = "Xilinx KC705 (Kintex-7 evaluation kit)",
    platform_module = "xilinx_kc705",
    platform_args   = {},
    part            = "xc7k325t-ffg900-2",
    gen             = 2,
    lanes           = 4,
    data_width      = 128,
    clock_hz        = 125e6,
    pcie_pads       = "pcie_x4",
    clock_pads      = "clk200",
    clock_in_hz     = 200e6,
    pll             = "S7MMCM",
    reset_pads      = "cpu_reset",
    leds            = (0, 1, 2),
    vivado_edition  = ("Vivado ML Enterprise, or the device-locked licence that comes with the "
                       "KC705 kit: the free Standard edition does not cover the XC7K325T"),
    flash           = "Vivado hardware manager (JTAG over the board's USB), or openFPGALoader -b kc705",
)

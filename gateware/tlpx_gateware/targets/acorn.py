"""SQRL Acorn CLE-215+ (LiteFury family): Artix-7 XC7A200T on an M.2 2280 card, PCIe Gen2 x4.

As in litex-boards' own target (litex_boards/targets/sqrl_acorn.py): S7PCIEPHY on `pcie_x4`
with a 128-bit interface, 100 MHz reference clock from the slot, CLKREQ# driven low; the card's
clock from the 200 MHz oscillator through a PLL.
"""

from tlpx_gateware.targets.board import Board

BOARD = Board(
    name            = "acorn",
    title           = "SQRL Acorn CLE-215+ (M.2, LiteFury family)",
    platform_module = "sqrl_acorn",
    platform_args   = {"variant": "cle-215+"},
    part            = "xc7a200t-fbg484-3",
    gen             = 2,
    lanes           = 4,
    data_width      = 128,
    clock_hz        = 125e6,
    pcie_pads       = "pcie_x4",
    clock_pads      = "clk200",
    clock_in_hz     = 200e6,
    pll             = "S7PLL",
    leds            = (0, 1, 2),
    extra_outputs   = (("pcie_clkreq_n", 0),),
    vivado_edition  = "Vivado ML Standard (free): covers every Artix-7, the XC7A200T included",
    flash           = "openFPGALoader -b acornCle215 (JTAG, volatile) or -f (SPI flash)",
)

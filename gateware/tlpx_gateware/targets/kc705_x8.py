"""Xilinx KC705 at its edge's full width: Kintex-7 XC7K325T, PCIe Gen2 x8, the card at 250 MHz.

The kc705 board (kc705.py: platform, part, oscillator, MMCM, reset button, LEDs, Vivado edition)
with the `pcie_x8` lanes of litex-boards' platform. LitePCIe's S7PCIEPHY has no 256-bit
interface (data_width 64 or 128); at x8 it configures the pcie_7x core with the 128-bit
interface and a 250 MHz user clock (s7pciephy.py: userclk2 250 MHz, User_Clk_Freq 250), so the
card is built at 128 bits and clocked at 250 MHz from the 200 MHz oscillator through the MMCM,
to keep up with the link. The PHY still crosses between its user clock and the card's clock.

Generated only: whether a card of this size closes timing at 250 MHz on the -2 XC7K325T is not
known (docs/boards.md).
"""

from dataclasses import replace

from tlpx_gateware.targets import kc705

BOARD = replace(kc705.BOARD,
    name      = "kc705_x8",
    title     = "Xilinx KC705, Gen2 x8 (full edge width, card at 250 MHz)",
    lanes     = 8,
    clock_hz  = 250e6,
    pcie_pads = "pcie_x8",
)

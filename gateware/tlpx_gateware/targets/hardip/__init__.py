"""A board's card with its PCIe hard IP left out, judged by an independent model of that IP.

The card of an UltraScale board (kcu105) is elaborated as on the board, but for the Xilinx
hard IP itself: LitePCIe's `pcie_support` wrapper (its AXI4-Stream adapters, MSI encoding and
FLR logic) is kept, and the ports it would connect to `pcie3_ultrascale` become the top's ports
(socket.py). The card is Verilated, and cocotbext-pcie's model of that hard IP
(`UltraScalePcieDevice`) and its root complex drive those ports under cocotb (tb_card.py).
`python -m tlpx_gateware.targets.hardip` (`make cocotb-pcie`) builds and runs it.
docs/verification.md says what this proves and what only a board can.
"""

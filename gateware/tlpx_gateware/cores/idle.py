"""Idle gating: a block's registers are clocked only in cycles where one of them could change.

The simulated card is evaluated by Verilator one card cycle at a time, and a Migen design's
synchronous logic is one big clocked block: every register of every block is looked at in
every cycle, also when the block has nothing to do. Most of the card's blocks are idle most
of the time (a generator between runs, a timer nobody started), and their idle registers
cost most of the simulator's time.

A block that can say when it is busy gets a clock enable (Migen's CEInserter: every
synchronous statement of the block and its submodules under ``If(enable, ...)``): Verilator
then skips its whole clocked logic in a cycle with the enable low. The enable is

    busy (the block's own, conservative) | any of its CSRs strobed (a write's ``re``, a
    read's ``we``) | the block's inputs that can start something (a completion arriving)

and gating is exact, cycle for cycle, when no register of the block would change in a cycle
where the enable is low. Two rules make that true: nothing in the block runs freely (a scan,
an LFSR, a timer advances only while the block is busy), and ``busy`` covers every state in
which something does run. The differential test (test_idle.py) runs the same stimulus
through the gated and an ungated card and compares every output, every cycle.

On a board the blocks are not gated (``TlpxCard(idle_gating=False)``): an FPGA pays nothing
for idle flops, and the bitstream stays the design the gateware tests check.
"""

from functools import reduce
from operator import or_

from migen import *
from migen.fhdl.decorators import CEInserter

from litex.soc.interconnect.csr import CSRStatus, CSRStorage


def csr_strobes(module):
    """Every strobe of `module`'s CSRs: each CSRStorage's write strobe ``re`` (high the cycle
    after the write, when the stored value changes) and each CSRStatus's read strobe ``we``."""
    strobes = []
    for csr in module.get_csrs():
        if isinstance(csr, CSRStorage):
            strobes.append(csr.re)
        elif isinstance(csr, CSRStatus):
            strobes.append(csr.we)
    return strobes


def gate_when_idle(module, busy, wake=()):
    """Puts `module` (and its submodules) under a clock enable: ``busy | wake... | CSR strobes``.
    Returns the enable signal (also `module.clock_enable`)."""
    module = CEInserter()(module)
    enable = Signal(name="idle_gate_enable")
    module.comb += enable.eq(reduce(or_, [busy, *wake, *csr_strobes(module)]))
    module.comb += module.ce.eq(enable)
    module.clock_enable = enable
    return enable

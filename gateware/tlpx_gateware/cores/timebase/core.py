"""Timebase: the card's one 64-bit free-running cycle counter.

Every block stamps its events with `cycles`; the host reads it to correlate its clock with
the card's. Reading ``cycles_lo`` latches the upper half into ``cycles_hi``, so a 64-bit read
(one 2-DW request, low DW first) or two 32-bit reads low-then-high are never torn.
"""

from migen import *

from litex.gen import *
from litex.soc.interconnect.csr import CSRStatus
from litex.soc.integration.doc import ModuleDoc


class Timebase(LiteXModule):
    def __init__(self):
        self.intro = ModuleDoc("""Free-running 64-bit cycle counter, shared by every block.

        Counts card clock cycles since reset. Read ``cycles_lo`` first: that latches
        ``cycles_hi``.
        """)
        self.cycles = Signal(64)
        self.cycles_lo = CSRStatus(32, description="Cycle counter, bits 31:0. Reading it latches bits 63:32 into cycles_hi.")
        self.cycles_hi = CSRStatus(32, description="Cycle counter, bits 63:32, as latched by the last read of cycles_lo.")

        # # #

        self.sync += self.cycles.eq(self.cycles + 1)
        self.comb += self.cycles_lo.status.eq(self.cycles[:32])
        self.sync += If(self.cycles_lo.we, self.cycles_hi.status.eq(self.cycles[32:]))

"""Control registers whose write-1-to-act bits are actions, not state.

LiteX's ``CSRStorage`` keeps every bit written, pulse fields included: after ``control.start =
1`` the register reads back ``start = 1`` until the next write. A read-modify-write of another
field (``tlpx reg write generator.control.clear 1``: read 0b001, write 0b101) then writes the
start bit again, and a run nobody asked for (and nobody owns) starts on the last run's buffer.
``ActionStorage`` is a ``CSRStorage`` whose pulse fields are not kept: they act in the cycle
after the write, as LiteX's do, and read back 0, so a read-modify-write never replays them.

```
 bus write 0b101 ─► storage = 0b101 ─► re: start, clear pulse ─► storage &= ~pulse bits ─► reads 0b000
```

The level fields (``spy.control.enable``) are kept as in a ``CSRStorage``.
"""

from functools import reduce
from operator import or_

from migen import *

from litex.soc.interconnect.csr import CSRStorage


class ActionStorage(CSRStorage):
    """A ``CSRStorage`` (same arguments) whose pulse fields read back 0 after they acted."""

    def __init__(self, *args, **kwargs):
        CSRStorage.__init__(self, *args, **kwargs)
        fields = getattr(getattr(self, "fields", None), "fields", [])
        self.pulse_mask = sum(((1 << f.size) - 1) << f.offset for f in fields if f.pulse)
        if self.pulse_mask == 0:
            raise ValueError(f"an ActionStorage needs a pulse field (write 1 to act); its fields "
                             f"{[f.name for f in fields]} have none: use CSRStorage")

    def do_finalize(self, busword, ordering):
        CSRStorage.do_finalize(self, busword, ordering)
        # The cycle after a write (``re``) the pulse fields act from ``storage``; then they
        # are cleared, unless a new write lands in that very cycle (the bus's CSR writes are
        # never back to back, but a write must never be lost to the clearing).
        written = Signal()
        self.comb += written.eq(reduce(or_, [sc.re for sc in self.simple_csrs]))
        self.sync += If(self.re & ~written, self.storage.eq(self.storage & ~self.pulse_mask))


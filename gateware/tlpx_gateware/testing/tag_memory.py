"""A behavioural tag table for the testbenches of the blocks that look tags up (the completion
checker, the timeout scan)."""

from migen import Array, Module, Signal


class TagMemory(Module):
    """Behavioural tag table behind a port (``cpl_port_layout`` or ``scan_port_layout``): the
    lookups by the port's tag are combinational; the testbench writes the per-tag state,
    which shows from the next cycle, as the real table's registers do."""
    def __init__(self, port, tags):
        self.busy  = Signal(tags)
        self.time  = Array(Signal(64, name=f"time{i}") for i in range(tags))
        self.dw    = Array(Signal(32, name=f"dw{i}") for i in range(tags))
        self.bytes = Array(Signal(13, name=f"bytes{i}") for i in range(tags))
        self.now   = Signal(64, reset=1 << 32)  # a card that has run for a while
        self.sync += self.now.eq(self.now + 1)
        self.comb += [port.busy.eq((self.busy >> port.tag)[0]), port.time.eq(self.time[port.tag])]
        if hasattr(port, "dw"):
            self.comb += [port.dw.eq(self.dw[port.tag]), port.bytes.eq(self.bytes[port.tag])]


"""The simulated card's clocks: the card clock, and the card's core on it, gated while quiescent.

tlpx-sim clocks the card one cycle at a time, and Verilator evaluates all the logic of a
clock domain in every cycle that domain's clock ticks. The tlpx blocks already sleep while idle
(cores/isolate.py); what is left ticking is the card's core: LitePCIe's endpoint and DMA, the
request path, the bus and CSR banks, the MSI, the PIO and rule-30 windows. On the simulated
card the core runs on the card clock gated by ``core_enable``:

```
 card (the simulator's clock, free-running) ─┬─► timebase, this gating logic, the base of every gated clock
                                             └─► [gate: core_enable] ─► sys (the core: everything else)
 core_enable = activity now | activity in the last QUIET_CYCLES cycles
 activity    = reset | a TLP beat from the host | a configuration input changed | the card has a
               TLP or an MSI to send | an interrupt source fires | a bus access is in flight |
               a block the core serves (a DMA engine enabled, a LitePCIe read outstanding, the
               CPU running or checking its image, a lease in the core held, ...): the card's
               activity terms (TlpxCard._core_activity)
```

Why this is exact: the core is reactive. Each of its registers changes only in answer to an
input (a TLP from the host, a configuration change, a block's output: its TLPs, interrupts,
register-port strobes), within a few tens of cycles, or while one of the long-running states
listed in ``activity`` lasts (those are activity themselves). QUIET_CYCLES is far longer than
any answer (the longest, a read of the rule-30 or PIO window through the request path, is
under 40 cycles; the PIO read delay and the request path's bus timeout run while a bus
access is in flight). So in a cycle where the core's clock is gated, none of its registers
would have changed: the gated card is the ungated card, cycle for cycle. test_isolate.py runs
one mixed session on both (build --ungated) and compares every TLP, MSI and register.

Without `gate` (``idle_gating=False``, and on real boards, which use their own clocking) the
sys clock is the card clock.
"""

from functools import reduce
from operator import or_

from migen import *

from litex.gen import *

from tlpx_gateware.cores.rule30.block import drive_clock

# Cycles the core keeps running after its last activity: far beyond the time the core takes
# to answer any input (see the module docstring), a small cost beside the idle stretches it
# saves (a capture's or an interrupt interval's thousands of cycles).
QUIET_CYCLES = 256


class SimClocking(LiteXModule):
    """Clock domains ``card`` (the simulator's clock, free-running, reset-less) and ``sys`` (the
    card clock gated by ``core_enable`` when `gate`; its reset the simulator's, synchronised).
    ``resetting`` is high while the reset is applied (activity: the core takes it).
    ``verilog_sources``: the clock gate's Verilog when `gate`."""
    def __init__(self, clk, rst, gate):
        self.cd_card = ClockDomain(reset_less=True)
        self.cd_sys = ClockDomain()
        self.core_enable = Signal()
        self.resetting = Signal()

        # # #

        int_rst = Signal(reset=1)
        self.sync.card += int_rst.eq(rst)
        self.comb += [
            self.cd_card.clk.eq(clk),
            self.cd_sys.rst.eq(int_rst),
            self.resetting.eq(rst | int_rst),
        ]
        self.verilog_sources = drive_clock(self, "sys", self.core_enable, gate, base="card")


def core_enable_logic(module, clocking, activity):
    """Drives ``clocking.core_enable`` from the activity terms (signals or expressions), in
    `module` (the card): now, or within the last QUIET_CYCLES cycles. Returns the signal that
    says whether the core is active now (for counters and tests)."""
    active = Signal(name="core_activity")
    quiet_left = Signal(max=QUIET_CYCLES + 1, reset=QUIET_CYCLES, name="core_quiet_left")
    module.comb += [
        active.eq(reduce(or_, activity)),
        clocking.core_enable.eq(active | (quiet_left != 0)),
    ]
    module.sync.card += If(active, quiet_left.eq(QUIET_CYCLES)).Elif(quiet_left != 0, quiet_left.eq(quiet_left - 1))
    return active


def changed(module, signals):
    """An expression: one of `signals` (inputs from the simulator) differs from its value in
    the previous card cycle (registered in domain ``card``)."""
    terms = []
    for s in signals:
        r = Signal.like(s, name=f"{s.backtrace[-1][0] if s.backtrace else 'input'}_was")
        module.sync.card += r.eq(s)
        terms.append(r != s)
    return reduce(or_, terms)

"""Isolated blocks: an idle block costs the simulator nothing.

The card is simulated by Verilator one card cycle at a time, and Verilator evaluates all the
logic of a clock domain every time that domain ticks, changed inputs or not: on the card's one
clock, every block's logic ran in every cycle, also when the block had nothing to do. That was
most of the simulator's time (docs/performance.md).

An isolated block runs in its own clock domain, whose clock is the card clock gated (in
simulation; rule30/block.py's clock-gating cell) by ``enable``, and sees the rest of the card
only through registers of its own domain:

```
 card ──every input x (CSRs, cycles, completions, PHY taps, ...)──► x_r ──► block logic
                                                               (registers of the block's domain)
 block.source ──► TxBoundary FIFO (block's domain) ──► transmit arbiter (card)
                  block.source.ready = space (a register: "the FIFO had room")
 enable = busy | event | event one and two cycles ago | the FIFO holds a beat
          (events: CSR accesses, completions, PHY valids, ...)
```

So the block is the same logic, one cycle late: it sees every input (the timebase included)
as it was one cycle before, and so stamps every event with the cycle it happened on; what it
sends leaves through a 4-entry FIFO, a cycle or more later (as long as the arbiter makes it
wait): a block stamps a TLP when the FIFO hands it to the arbiter (``sent_first``,
``sent_last``) and ends a run or raises an interrupt only once its FIFO is empty
(``tx_idle``). Because every combinational signal of the block depends only on registers of
its domain, Verilator evaluates the block's logic only in cycles where that domain ticks.

This is a change to the card, not only to its simulation: a board's card has the same
registers and FIFOs (there the clock is not gated), so its timing is the simulated one.

Gating is exact when (1) nothing in the block runs freely: an idle block whose inputs are
quiet is a fixed point; (2) ``busy`` covers every state in which a register of the block can
change without an event; (3) ``events`` covers every input that can start something (a CSR
strobe, a valid), for the cycle it is high (so the input register samples it) and the two
cycles after (so the block acts on it, with a fresh timebase). test_isolate.py runs one mixed
session through the gated card and the ungated card (build --ungated) and compares every TLP,
MSI and register.
"""

from functools import reduce
from operator import and_, or_

from migen import *
from migen.fhdl.decorators import ModuleTransformer
from migen.fhdl.specials import SPECIAL_OUTPUT
from migen.fhdl.structure import _Fragment
from migen.fhdl.tools import list_inputs, list_signals, list_targets, rename_clock_domain
from migen.fhdl.visit import NodeTransformer

from litex.soc.interconnect import stream
from litex.soc.interconnect.csr import CSRStatus, CSRStorage

from tlpx_gateware.cores.rule30.block import drive_clock

# An isolated block sees its inputs, the timebase included, LATE_BY cycles late: an event it
# stamps from an input (a completion, a register write) gets the cycle it happened on the card.
LATE_BY = 1
# Cycles from an isolated block's output to the same output without isolation: a signal it
# drives (an interrupt) is OUTPUT_LAG cycles later; a block adds it to the stamp of its own
# output (a fire). A TLP it sends waits in its TxBoundary's FIFO for the transmit arbiter, for
# as long as the link and the card's other sources make it: a block that stamps a TLP (a
# request's issue, a buffer's start) takes the stamp when the TxBoundary says the TLP went
# (``sent_first``/``sent_last``, seen LATE_BY cycles late like every input, so stamped with the
# cycle it happened on).
OUTPUT_LAG = LATE_BY


class _Substitute(NodeTransformer):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Signal(self, node):
        return self.mapping.get(node, node)


def _reads(f):
    """Signals the fragment reads: right-hand sides and conditions of comb and sync, and the
    inputs of its specials (memory ports' addresses and write data, ...)."""
    read = set(list_inputs(f.comb))
    for statements in f.sync.values():
        read |= list_inputs(statements)
    for special in f.specials:
        for obj, attr, direction in special.iter_expressions():
            if direction != SPECIAL_OUTPUT:
                read |= _signals(getattr(obj, attr))
    return read


def _drives(f):
    driven = set(list_targets(f.comb))
    for statements in f.sync.values():
        driven |= list_targets(statements)
    for special in f.specials:
        for obj, attr, direction in special.iter_expressions():
            if direction == SPECIAL_OUTPUT:
                driven |= _signals(getattr(obj, attr))
    return driven


def _signals(expr):
    # A special's clock (ClockSignal) and constants hold no signal to register.
    if expr is None or isinstance(expr, (ClockSignal, ResetSignal, int)):
        return set()
    return set(list_signals(expr))


class OneCycleLate(ModuleTransformer):
    """Registers, in `domain`, every signal the module reads but does not drive, and makes the
    module read the registered copy. `given` maps inputs to copies already registered by the
    caller (not registered again). `path`: the module's place in the design (the backtrace of
    a signal it made, without the signal's own name): a register is named after its input's
    path from there."""
    def __init__(self, domain, given=None, path=()):
        self.domain = domain
        self.given = dict(given or {})
        self.path = list(path)

    def transform_fragment(self, i, f):
        externals = _reads(f) - _drives(f)
        mapping = dict(self.given)
        used = set()
        registers = []
        for s in sorted(externals, key=lambda s: s.duid):
            if s in mapping:
                continue
            # Named explicitly (the domain, the input's path from the module:
            # gen_control_storage_late), a name found nowhere else: a name several signals
            # share makes Migen's namer renumber, and so rename, much of the design.
            late_name = f"{self.domain}_{self._late_name(s, used)}"
            r = Signal((len(s), s.signed), reset=s.reset, name=late_name, name_override=late_name)
            mapping[s] = r
            registers.append(r.eq(s))
        sub = _Substitute(mapping)
        f.comb = sub.visit(f.comb)
        f.sync = {d: sub.visit(stmts) for d, stmts in f.sync.items()}
        for special in f.specials:
            for obj, attr, direction in list(special.iter_expressions()):
                expr = getattr(obj, attr)
                if direction != SPECIAL_OUTPUT and expr is not None and not isinstance(expr, (ClockSignal, ResetSignal)):
                    setattr(obj, attr, sub.visit(expr))
        f.sync.setdefault(self.domain, []).extend(registers)
        i.late_inputs = mapping

    # Names of Migen's classes and containers in a backtrace say nothing about the signal.
    _GENERIC = {"csrstorage", "csrstatus", "csrfield", "endpoint", "record", "payload", "syncfifo", "fifo"}

    def _late_name(self, s, used):
        names = [n for n, _ in s.backtrace]
        common = 0
        for (a, _), b in zip(self.path, names):
            if a != b:
                break
            common += 1
        parts = []
        for n in names[common:]:
            if n not in self._GENERIC and (not parts or parts[-1] != n):
                parts.append(n)
        base = "_".join(parts[-3:] or ["input"]) + "_late"
        name, k = base, 1
        while name in used:
            name, k = f"{base}{k}", k + 1
        used.add(name)
        return name


class TxBoundary(Module):
    """A block's transmit stream into the card's arbiter: a FIFO in the block's domain (so an
    idle boundary costs nothing either), whose 'has room' the block sees through a register
    (``space``): the block's logic, one cycle late, sends a beat when it sees room; the FIFO
    keeps room for the one beat that the one-cycle-old view can let through. The arbiter takes
    beats from the FIFO in the cycle it grants them, so the block's clock must run while the
    FIFO holds any (``pending``, part of the block's enable)."""
    def __init__(self, layout, domain, depth=4):
        self.sink   = sink = stream.Endpoint(layout)    # the block's source
        self.source = stream.Endpoint(layout)           # to the arbiter
        self.space  = space = Signal(reset=1)           # block domain: the FIFO had room a cycle ago
        self.sent_first = Signal()                      # card domain: a TLP's first beat went to the arbiter
        self.sent_last  = Signal()                      # card domain: a TLP's last beat went
        # Block domain: the FIFO is empty now, given that the block did not send in the cycle
        # before (it was empty a cycle ago and nothing went in then). A block that must know its
        # TLPs have left the card (before its interrupt, or to end a timed run) waits for it.
        self.idle = idle = Signal(reset=1)

        # # #

        self.submodules.fifo = fifo = ClockDomainsRenamer(domain)(stream.SyncFIFO(layout, depth, buffered=False))
        self.pending = Signal()  # the FIFO holds a beat
        room = Signal()
        self.comb += [
            room.eq(fifo.level <= depth - 2),
            self.pending.eq(fifo.level != 0),
            fifo.sink.valid.eq(sink.valid & space),
            fifo.sink.payload.eq(sink.payload),
            fifo.sink.first.eq(sink.first),
            fifo.sink.last.eq(sink.last),
            fifo.source.connect(self.source),
            self.sent_first.eq(self.source.valid & self.source.ready & self.source.first),
            self.sent_last.eq(self.source.valid & self.source.ready & self.source.last),
        ]
        sd = getattr(self.sync, domain)
        sd += [
            space.eq(room),
            idle.eq((fifo.level == 0) & ~fifo.sink.valid),
        ]


def isolate(soc, name, block, busy, events, tx=(), direct=(), base="sys", domain=None):
    """Puts `block` (already a submodule of `soc`) in clock domain `domain` (default: `name`;
    blocks that share a domain share its clock: cheaper for the simulator to keep idle, dearer
    while one of them works), one cycle late (OneCycleLate), its enable ``busy | events | the
    events of the two cycles before``; drive_isolated_clocks then gives each domain its clock.
    `tx` lists the block's transmit endpoints: each gets a TxBoundary; returns their card-side
    sources (for the arbiter) in the same order. A block with a ``tx_idle`` input
    gets the TxBoundaries' ``idle`` there (all of them). `direct` lists inputs the block reads
    as they are, not a cycle late: outputs of a register of another block that changes only
    in cycles where this block's clock runs or that this block does not act on while gated (the
    rule-30 core's register port, whose latency the batch engine is written for). An access to the block's CSRs is an
    event too: the card (TlpxCard.do_finalize, once LiteX has built the CSR banks) drives
    ``block.csr_access`` from its bank's bus (see csr_access)."""
    domain = domain or name
    tx_bounds = [TxBoundary(ep.description, domain) for ep in tx]
    given = {s: s for s in direct}
    for ep, b in zip(tx, tx_bounds):
        given[ep.ready] = b.space
    if hasattr(block, "tx_idle"):
        all_idle = Signal(name=f"{name}_tx_idle")
        soc.comb += all_idle.eq(reduce(and_, [b.idle for b in tx_bounds], 1))
        given[block.tx_idle] = all_idle
    for k, b in enumerate(tx_bounds):
        setattr(soc.submodules, f"{name}_tx{k}", b)
        soc.comb += [
            b.sink.valid.eq(tx[k].valid),
            b.sink.payload.eq(tx[k].payload),
            b.sink.first.eq(tx[k].first),
            b.sink.last.eq(tx[k].last),
        ]
    # The block's logic moves to its domain, a cycle late: finalized now (its FSMs lowered),
    # so that every signal it reads is known, and so that the signals finalizing makes are
    # traced back to the card's construction like all the others (made later, during
    # conversion, their backtraces would make Migen's namer prefix every name in the design).
    # Anything the card adds to the block must be added before this.
    block.finalize()
    f = block._fragment
    rename_clock_domain(f, "sys", domain)
    OneCycleLate(domain, given, busy.backtrace[:-1]).transform_fragment(block, f)
    domains = soc.__dict__.setdefault("isolated_domains", {})
    if domain not in domains:
        setattr(soc.clock_domains, f"cd_{domain}", ClockDomain(domain, reset_less=True))
        domains[domain] = []
    # A CSR write at cycle t: the bank stores it at t, its strobe comes at t+1, the block sees
    # the strobe at t+2 (one cycle late): so an event keeps the clock on for two more cycles.
    block.csr_access = Signal(name=f"{name}_csr_access")
    event = Signal(name=f"{name}_event")
    event_d = Signal(name=f"{name}_event_d")
    event_dd = Signal(name=f"{name}_event_dd")
    enable = Signal(name=f"{name}_enable")
    soc.comb += [
        event.eq(reduce(or_, [block.csr_access, *events])),
        enable.eq(reduce(or_, [busy, event, event_d, event_dd, *[b.pending for b in tx_bounds]])),
    ]
    # In the base domain: the card clock, which runs also while the card's sys domain is gated.
    base_sync = getattr(soc.sync, base)
    base_sync += [event_d.eq(event), event_dd.eq(event_d)]
    block.clock_enable = enable
    domains[domain].append(enable)
    block.tx_boundaries = tx_bounds
    return [b.source for b in tx_bounds]


def drive_isolated_clocks(soc, gate_clock, base="sys"):
    """Drives the clock of every isolated domain: the `base` clock gated by the OR of its
    blocks' enables (`gate_clock`), or the `base` clock itself. Returns the Verilog files the
    clock gates need."""
    sources = {}
    for domain, enables in getattr(soc, "isolated_domains", {}).items():
        enable = Signal(name=f"{domain}_domain_enable")
        soc.comb += enable.eq(reduce(or_, enables))
        sources.update(drive_clock(soc, domain, enable, gate_clock, base))
    return sources


def csr_access(soc, bank_name):
    """An access (read or write) to the CSR bank `bank_name` of `soc` in this cycle, from its
    bus (after LiteX built the banks: call from do_finalize)."""
    for name, _, mapaddr, rmap in soc.csr_bankarray.banks:
        if name == bank_name:
            bus = rmap.bus
            page_bits = log2_int(soc.csr.paging // 4)
            return (bus.adr[page_bits:] == mapaddr) & (bus.we | bus.re)
    raise ValueError(f"no CSR bank {bank_name!r}")


def csr_events(block):
    """The strobes of a block's CSRs: a CSRStorage's ``re`` (the cycle after a write) and a
    CSRStatus's ``we`` (a read): the events that wake an isolated block."""
    events = []
    for csr in block.get_csrs():
        if isinstance(csr, CSRStorage):
            events.append(csr.re)
        elif isinstance(csr, CSRStatus):
            events.append(csr.we)
    return events


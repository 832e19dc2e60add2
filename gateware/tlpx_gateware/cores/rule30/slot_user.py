"""Rule 30 in the accelerator slot: the first slot user (cores/slot/core.py's contract).

```
 slot window (BAR0 0x20000, 512 bytes) ──► Rule30Block (the Amaranth core, its own gated clock)
                                                ▲ engine port
 dispatcher route slot ──► DWSerializer ──► Rule30Batch (isolated: domain rule30batch) ──► tx
 irq = core's irq | batch's irq;  busy = core busy | batch busy
```

The parts are those the card had before the slot, under the same names at the card's top
(``rule30``, ``rule30_batch``, ``rule30_cpl_serializer``: ``card_modules``), isolated the same
way (``attach``), so rule 30's register map, window offset and timing are unchanged: the slot
only says who is in it. The batch engine's tag, RULE30_BATCH_TAG, is the slot's first tag.
"""

from migen import *

from tlpx_gateware.cores.request_path.core import DWSerializer
from tlpx_gateware.cores.rule30.batch import BATCH_TAG, Rule30Batch
from tlpx_gateware.cores.rule30.block import Rule30Block, window_region
from tlpx_gateware.cores.rule30.core import VERSION_MAJOR, VERSION_MINOR, WINDOW_BYTES
from tlpx_gateware.cores.slot.core import SLOT_MSI_INDEX, SLOT_TAG_BASE, SLOT_WINDOW_BASE

assert BATCH_TAG == SLOT_TAG_BASE, "the batch engine's tag is the slot's first"

NAME = "rule30"


class Rule30SlotUser:
    """Rule 30 as a slot user (a duck type of cores.slot.core.SlotUser: its parts are the
    card's own submodules, see card_modules)."""
    dut_name     = NAME
    dut_version  = (VERSION_MAJOR, VERSION_MINOR)
    window_bytes = WINDOW_BYTES
    placement    = "window"

    def __init__(self, data_width, requester_id, cycles, clock_hz, base_domain, gate_clock=False):
        # The Amaranth core behind its window and the DMA batch engine that drives it through a
        # second register port. The clock gate is a simulation device (Verilator skips the idle
        # core's 1024-cell logic).
        self.block = Rule30Block(irq_num=SLOT_MSI_INDEX, gate_clock=gate_clock, base=base_domain)
        self.batch = Rule30Batch(data_width, requester_id=requester_id, port=self.block.engine,
            cycles=cycles, clock_hz=clock_hz)
        # The batch engine takes its completions a DW per cycle; the serializer is the card's
        # (it holds the link back while it splits a beat), so the engine can run a cycle late.
        self.cpl_serializer = DWSerializer(data_width)
        self.bus = self.block.bus
        self.cpl = self.cpl_serializer.sink
        self.tx = self.batch.source
        self.irq = Signal()
        self.busy = Signal()
        self.counters = {}
        # Verilog files beside the card's (file name -> text).
        self.verilog_sources = dict(self.block.verilog_sources)

    def card_modules(self):
        return {"rule30": self.block, "rule30_batch": self.batch, "rule30_cpl_serializer": self.cpl_serializer}

    def regions(self):
        return [window_region(SLOT_WINDOW_BASE, irq_num=SLOT_MSI_INDEX, name=NAME)]

    def attach(self, card, isolated):
        block, batch = self.block, self.batch
        card.comb += [
            self.cpl_serializer.source.connect(batch.cpl_dws),
            block.engine_active.eq(batch.active),
            batch.refused_write.eq(block.refused_write),
            self.irq.eq(block.irq | batch.irq),
            self.busy.eq(block.busy | batch.busy),
        ]
        # The batch engine reads the core's register port as it is: the port's latency is part
        # of the engine's design (PORT_LATENCY), and the port changes only with the engine's or
        # the host's accesses (a host access while the engine is idle, it does not act on).
        port = block.engine
        return isolated("rule30batch", batch, [batch.cpl_dws.valid, batch.refused_write], [batch.source],
            direct=[port.rdata, port.busy, port.pending])

    def core_activity(self):
        # The core runs on its own gated clock; what the card's core must see is the batch
        # engine on the window (its TLPs are counted by the isolation's FIFOs).
        return [self.block.engine.we, self.block.engine.re]


def make(data_width, requester_id, cycles, clock_hz, base_domain, gate_clock=False):
    """The slot-user factory of rule 30 (the card's default)."""
    return Rule30SlotUser(data_width, requester_id, cycles, clock_hz, base_domain, gate_clock=gate_clock)

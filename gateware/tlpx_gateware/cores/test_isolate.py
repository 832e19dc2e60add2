"""Idle gating is exact: the gated card and the ungated card do the same thing, every cycle.

The simulated card gates each isolated block's clock while the block is idle (isolate.py):
Verilator then skips the block's logic. The ungated card (build --ungated, build/card/
dw64-ungated) is the same gateware with every block clocked in every cycle, so any state the
gated card missed (a ``busy`` that forgot a state, an event that did not wake the block)
shows as a difference here. One mixed session drives every isolated block with idle gaps
between and during their work:

    spy capturing everything, while one after the other:
    generator: write, read (40-cycle completions), write-then-read, a stopped run
    interrupt timer: random fires, the host acknowledging after a delay, an unacknowledged fire
    real-time loop: interrupt-driven iterations, then DMA return
    rule-30 batch: random packets, then a batch whose descriptor read is answered with UR
    then all at once, on a link that stalls at random; every CSR read back at the end

and the two cards must agree on every TLP they sent (cycle, content), every MSI (cycle,
vector), host memory, and every register.
"""

import random

import pytest

from tlpx_gateware.conftest import BUILD, csr_json, reg
from tlpx_gateware.cores.generator.core import OP_READ, OP_WRITE, OP_WRITE_READ
from tlpx_gateware.cores.rule30.batch import descriptor
from tlpx_gateware.sim.card import Card, HostMemory
from tlpx_gateware.soc import MSI_SOURCES
from tlpx_gateware.testing import irq_timer as irq
from tlpx_gateware.testing import rt_loop as loop
from tlpx_gateware.testing import rule30 as r30
from tlpx_gateware.testing import spy
from tlpx_gateware.testing.generator import GeneratorDriver
from tlpx_gateware.testing.memory import BASE, SIZE, fill

# Registers whose read has a side effect (pops a FIFO, latches a half): read like any other,
# the same number of times on both cards, so they compare too.
WINDOWS = {"rule30", "pio", "cpu_sram"}


class _LoggingCard(Card):
    """Keeps every MSI (the block helpers clear ``msis`` as they go)."""
    def __init__(self, library):
        super().__init__(library)
        self.all_msis = []

    def step(self):
        super().step()
        if self.outputs.msi_valid and self.inputs.msi_ready:
            self.all_msis.append((self.cycles, self.outputs.msi_vector))


def _session(library):
    card = _LoggingCard(library)
    try:
        rng = random.Random(2024)
        gap = lambda: card.run(rng.choice([0, 1, 2, 3, 50, 700]))
        card.memory = HostMemory(BASE, SIZE, latency=40)
        fill(card.memory)

        # The spy captures everything that follows into its ring (in the memory of the moment).
        spy.setup(card)
        spy.enable(card)
        gap()

        gen = GeneratorDriver(card)
        gen.w("lease_claim", 1)
        for op, size in [(OP_WRITE, 1024), (OP_READ, 2048), (OP_WRITE_READ, 512)]:
            gen.run(op, transfer_size=size, count=3)
            gap()
        # A run stopped early, with reads outstanding.
        gen.w("control", 0b001)
        card.run(rng.randint(20, 60))
        gen.w("control", 0b010)
        card.run(2000)
        gen.w("lease_release", 1)
        gap()

        irq.setup(card, count=6, lo=300, hi=700)
        irq.w(card, "control", 0b001)
        irq.serve(card, 4, isr_delay=rng.randint(5, 60), user_delay=200)
        irq.serve(card, 1, ack=False)   # the host does not acknowledge this one
        irq.serve(card, 1)
        card.run(1500)
        gap()

        loop.run_loop(card, 256, 3, use_irq=True, delay=60)
        gap()
        loop.run_loop(card, 128, 2, dma=True, delay=30)
        gap()

        packets = [r30.random_line(rng, n) for n in (1, 33, 100, 1024)]
        r30.run_batch(card, [descriptor(p, generations=rng.randint(1, 4)) for p in packets])
        card.msis.clear()
        r30.run_batch(card, [descriptor(p) for p in packets], faults={0: "ur"})
        gap()

        # Several blocks at once, sharing the link: timer fires nobody acknowledges, a write
        # run, a batch, the loop; the link stalls now and then.
        card.memory = HostMemory(BASE, SIZE, latency=25)
        irq.w(card, "control", 0b100)
        irq.w(card, "count", 4)
        irq.w(card, "control", 0b001)
        gen.w("control", 0b100)
        gen.w("count", 6)
        gen.w("config", OP_WRITE)
        gen.w("control", 0b001)
        r30.put_dws(card.memory, r30.DESCRIPTORS, [d for p in packets for d in descriptor(p)])
        r30.bw(card, "control", 1)
        loop.w(card, "iterations", 1)
        loop.w(card, "config", 0)
        loop.w(card, "control", 0b001)
        for cycle in range(6000):
            card.inputs.tx_ready = int(rng.random() < 0.7)
            card.step()
        card.inputs.tx_ready = 1
        card.run(3000)
        gap()

        spy.enable(card, False)
        card.run(400)

        registers = []
        for region in csr_json(card.data_width)["regions"]:
            if region["name"] in WINDOWS:
                continue
            for register in region["registers"]:
                for i in range(register["words"]):
                    registers.append((f"{region['name']}.{register['name']}[{i}]",
                                      card.read32(register["offset"] + 4 * i)))
        return {
            "link": list(card.link_log),
            "msis": list(card.all_msis),
            "received": [list(t) for t in card.received],
            "memory": bytes(card.memory.data),
            "registers": registers,
            "cycles": card.cycles,
        }
    finally:
        card.close()


def test_the_gated_card_does_exactly_what_the_ungated_card_does():
    gated, ungated = BUILD / "dw64" / "libtlpxcard.so", BUILD / "dw64-ungated" / "libtlpxcard.so"
    for lib in (gated, ungated):
        if not lib.exists():
            pytest.fail(f"{lib} is missing: run `make gateware-all` before the gateware tests")
    a, b = _session(gated), _session(ungated)
    assert Card(gated).build_info["idle_gating"] is True
    assert Card(ungated).build_info["idle_gating"] is False
    # The session did what it says (so agreeing means something).
    assert len(a["link"]) > 300 and len(a["msis"]) >= 4
    for key in ("link", "msis", "received", "registers", "cycles"):
        if a[key] != b[key]:
            first = next((i for i, (x, y) in enumerate(zip(a[key], b[key])) if x != y), min(len(a[key]), len(b[key]))) \
                if isinstance(a[key], list) else None
            detail = f" (first difference at entry {first}: gated {a[key][first] if first is not None and first < len(a[key]) else '-'}," \
                     f" ungated {b[key][first] if first is not None and first < len(b[key]) else '-'})" if first is not None else ""
            pytest.fail(f"the gated and ungated cards differ in {key}{detail}")
    assert a["memory"] == b["memory"]

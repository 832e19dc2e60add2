"""What the card does so that every job it runs has one owner, on the Verilated card.

    host model ──write 1──► control.start ─► the block acts ─► control reads 0 (cores/csr.py)
               ──enable_set / enable_clear──► pcie_msi.enable: one source's bit (cores/msi.py)
               ──slot.lease_claim──► the slot's lease ─ends while busy─► slot.status.fenced
    every TLP the card sends ──► HostMemory log: the tag of the block that sent it (soc.CARD_TAGS)

The first tests pin the register behaviour the host relies on: write-1-to-act bits are not
kept (a read-modify-write of another field, `tlpx reg write generator.control.clear 1` after a
run, started a run nobody owned on a freed buffer: it must start nothing), each MSI source is
turned on and off alone (a driver that wrote the enable whole turned off the slot's source,
which a stock DUT driver needs), and the card's own stamps of a software interrupt. Then the
slot's lease: a lease that ends while the DUT is busy fences the slot until it is quiet, one
that ends while it is idle fences nothing. Last, every block's writes carry its own tag.
Widths 64, 128 and 256 bits.
"""

from tlpx_gateware.conftest import csr_json, csr_map, reg
from tlpx_gateware.cores.generator.core import OP_READ, OP_WRITE
from tlpx_gateware.cores.rule30.core import Register as Rule30
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.soc import CARD_TAGS, MSI_ENABLED_AT_RESET, MSI_SOURCES
from tlpx_gateware.testing.generator import GeneratorDriver
from tlpx_gateware.testing.memory import BASE, SIZE
from tlpx_gateware.testing.rule30 import load, random_line, rd, wr

import random


def r(card, name, words=1):
    off = reg(name)
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def w(card, name, value, words=1):
    off = reg(name)
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def action_registers():
    """(name, action mask) of every writable register with write-1-to-act fields."""
    out = []
    for region in csr_json()["regions"]:
        for g in region["registers"]:
            mask = sum(((1 << f["size"]) - 1) << f["offset"] for f in g["fields"] if f["access"] == "wo")
            if g["access"] != "ro" and mask:
                out.append((f"{region['name']}.{g['name']}", mask, g["fields"]))
    return out


def test_action_bits_read_back_zero_and_a_field_write_replays_no_start(card):
    card.memory = HostMemory(BASE, SIZE, latency=40)
    gen = GeneratorDriver(card)
    done = gen.run(OP_READ, transfer_size=256, count=4)
    assert done["completions"] > 0
    control = r(card, "generator.control")
    assert control == 0, f"generator.control reads {control:#x} after a run: the start bit was kept"
    # What `tlpx reg write generator.control.clear 1` does: read, set the field, write back.
    reads_before = len([e for e in card.memory.log if e["kind"] == "read"])
    clear = csr_map().encode("generator.control", clear=1)
    w(card, "generator.control", control | clear)
    card.run(3000)
    assert not csr_map().get("generator.status.running", r(card, "generator.status"))
    assert len([e for e in card.memory.log if e["kind"] == "read"]) == reads_before, "a field write started a run"
    # Every block's write-1-to-act register: a write of its clear (harmless) reads back 0.
    registers = action_registers()
    names = {name for name, _, _ in registers}
    assert {"generator.control", "rule30_batch.control", "spy.control", "irq_timer.control", "rt_loop.control",
            "pio.control", "dma_guard.control", "ident.software_irq"} <= names, names
    for name, mask, fields in registers:
        clear_field = next((f for f in fields if f["name"] == "clear" and f["access"] == "wo"), None)
        if clear_field is None:
            continue
        w(card, name, 1 << clear_field["offset"])
        card.run(10)
        assert r(card, name) & mask == 0, f"{name} keeps its write-1-to-act bits"


def test_each_msi_source_is_set_and_cleared_alone(card):
    bit = {name: 1 << i for i, name in enumerate(MSI_SOURCES)}
    at_reset = sum(bit[n] for n in MSI_ENABLED_AT_RESET)
    assert r(card, "pcie_msi.enable") == at_reset == bit["slot"]
    w(card, "pcie_msi.enable_set", bit["generator"])
    assert r(card, "pcie_msi.enable") == bit["slot"] | bit["generator"]
    w(card, "pcie_msi.enable_set", bit["irq_timer"])
    w(card, "pcie_msi.enable_clear", bit["generator"])
    assert r(card, "pcie_msi.enable") == bit["slot"] | bit["irq_timer"]
    w(card, "pcie_msi.enable_clear", bit["irq_timer"])
    assert r(card, "pcie_msi.enable") == bit["slot"], "the slot's source survives the others' set and clear"
    # LitePCIe's own register still takes a whole value (its driver reads it first).
    w(card, "pcie_msi.enable", bit["software"])
    assert r(card, "pcie_msi.enable") == bit["software"]
    w(card, "pcie_msi.enable", at_reset)


def test_the_card_stamps_a_software_interrupt_from_its_write_to_its_msi(card):
    w(card, "pcie_msi.enable_set", 1 << MSI_SOURCES.index("software"))
    card.msis.clear()
    w(card, "ident.software_irq", 1)
    card.run_until(lambda: card.msis, timeout=2000)
    arrived = r(card, "request_path.last_write_cycle", 2)
    acted = r(card, "ident.trigger_cycle", 2)
    sent = r(card, "pcie_msi.msi_cycle", 2)
    assert 0 < arrived < acted <= sent, (arrived, acted, sent)
    # The MSI left the card's PHY (the testbench's cycle) after the MSI block handed it on.
    assert sent <= card.msis[0][0], (sent, card.msis)
    w(card, "pcie_msi.clear", 1 << MSI_SOURCES.index("software"))
    w(card, "pcie_msi.enable_clear", 1 << MSI_SOURCES.index("software"))


def slot_status(card):
    value = r(card, "slot.status")
    return csr_map().get("slot.status.busy", value), csr_map().get("slot.status.fenced", value)


def test_slot_lease_ending_while_the_dut_works_fences_it_until_quiet(card):
    """Rule 30 in the slot, kept busy by its latency register: the lease expires while it works
    (fenced, counted as an expiry), the fence lifts when it is done; a lease released while it
    is idle fences nothing."""
    assert slot_status(card) == (0, 0)
    w(card, "slot.lease_length", 2000)
    w(card, "slot.lease_claim", 0x5107)
    assert r(card, "slot.lease_owner") == 0x5107
    load(card, random_line(random.Random(3), 64))
    wr(card, Rule30.LATENCY_CYCLES, 6000)
    wr(card, Rule30.START_COMPUTE, 1)
    card.run(100)
    assert slot_status(card) == (1, 0), "working under its owner: busy, not fenced"
    card.run(2500)   # no refresh: the lease expires while the DUT works
    assert r(card, "slot.lease_owner") == 0 and r(card, "slot.lease_expiries") == 1
    assert slot_status(card) == (1, 1)
    card.run_until(lambda: not slot_status(card)[0], timeout=10000)
    assert slot_status(card) == (0, 0), "quiet: the fence lifted"
    assert rd(card, Rule30.STATUS) != 0
    w(card, "slot.lease_claim", 0x5108)
    w(card, "slot.lease_release", 0x5108)
    assert slot_status(card) == (0, 0), "released while idle: nothing to fence"


def test_every_block_stamps_its_own_tag_into_its_writes(card):
    """The generator's writes, the real-time loop's buffer and token, the interrupt timer's and
    the spy's rings, rule 30's results: each MWr carries a tag of its block's range, so the spy
    attributes it (posted writes had tag 0)."""
    card.memory = HostMemory(BASE, SIZE, latency=40)
    GeneratorDriver(card).run(OP_WRITE, transfer_size=512, count=2)
    writes = [e for e in card.memory.log if e["kind"] == "write"]
    lo, hi = CARD_TAGS["generator"]
    assert writes and all(lo <= e["tag"] <= hi for e in writes), {e["tag"] for e in writes}
    # The spy's ring.
    card.memory.log.clear()
    ring = BASE + 0x8000
    w(card, "spy.control", 0b10)
    w(card, "spy.ring_base", ring, 2)
    w(card, "spy.ring_size_log2", 6)
    w(card, "spy.payload_size_log2", 7)
    w(card, "spy.flush_cycles", 16)
    w(card, "spy.control", 1)
    for i in range(4):
        w(card, "pio.read_delay", i)
    card.run(500)
    w(card, "spy.control", 0)
    ring_writes = [e for e in card.memory.log if e["kind"] == "write"]
    assert ring_writes and {e["tag"] for e in ring_writes} == {CARD_TAGS["spy"][0]}

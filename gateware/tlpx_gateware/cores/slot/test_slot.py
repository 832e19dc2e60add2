"""The accelerator slot with a user other than rule 30: a small Migen DUT, placement bar0.

```
 Python root complex (sim/card.py) ──► Verilated card ──► request path (BAR0 relocation)
     BAR0 0x0000..0x0fff  ──► RegisterSlotUser: magic (ro), scratch (rw), irq (wo: one pulse)
     BAR0 0x80000..       ──► tlpx's map (ident, slot, pcie_msi, ...)
 MSI source slot (enabled at reset) ◄── the user's irq
```

The card built with it must keep tlpx's own map hash (the card-owned regions do not depend on
what sits in the slot), mark the DUT's region ``owner: dut`` with its own hash in
``slot.dut_map_hash``, say who is in the slot, translate BAR0 as the placement says, and raise
the slot's MSI without the host enabling it. A bad user description is refused with a message
naming the value.
"""

import json
from pathlib import Path

import pytest
from migen import *
from litex.soc.interconnect import wishbone

from tlpx_gateware import build
from tlpx_gateware.conftest import BUILD, csr_json
from tlpx_gateware.csr_map import CsrMap
from tlpx_gateware.cores.ident.core import MAGIC as IDENT_MAGIC
from tlpx_gateware.cores.slot.core import (DUT_NAME_BYTES, RELOCATED_TLPX_BASE, SLOT_INTERFACE_VERSION, SLOT_MSI_INDEX,
    SLOT_WINDOW_BASE, SlotUser, SlotUserError, check_user)
from tlpx_gateware.sim.card import Card
from tlpx_gateware.soc import map_hash

USER_MAGIC = 0x51075107
WINDOW = 0x1000


class RegisterSlotUser(SlotUser):
    """Three registers in a 4 KiB window at BAR0 0: magic (0x0, ro), scratch (0x4, rw), irq
    (0x8, wo: a write raises one interrupt). No DMA."""
    dut_name     = "slot_test"
    dut_version  = (2, 3)
    window_bytes = WINDOW
    placement    = "bar0"

    def __init__(self, data_width, requester_id, cycles, clock_hz, base_domain):
        super().__init__()
        self.bus = bus = wishbone.Interface(data_width=32)
        scratch = Signal(32, reset=0x0BADF00D)
        access = Signal()
        word = bus.adr[:10]  # the DW offset in the 4 KiB window
        self.comb += access.eq(bus.cyc & bus.stb & ~bus.ack)
        self.sync += [
            bus.ack.eq(access),
            self.irq.eq(access & bus.we & (word == 2)),
            If(access & bus.we & (word == 1), scratch.eq(bus.dat_w)),
            Case(word, {0: bus.dat_r.eq(USER_MAGIC), 1: bus.dat_r.eq(scratch), "default": bus.dat_r.eq(0)}),
        ]

    def regions(self):
        def register(name, offset, access):
            return {"name": name, "offset": SLOT_WINDOW_BASE + offset, "size_bits": 32, "words": 1, "access": access,
                    "reset": 0, "description": f"The test DUT's {name}.", "fields": []}
        return [{"name": self.dut_name, "offset": SLOT_WINDOW_BASE, "registers": [
            register("magic", 0x0, "ro"), register("scratch", 0x4, "rw"), register("irq", 0x8, "wo")]}]


@pytest.fixture(scope="module")
def built():
    """The card with RegisterSlotUser, Verilated (incremental: once per change); a few hundred
    cycles run on it, so its C++ is built for a short compile: -O1, no PGO."""
    output = BUILD / "dw64-slot_test"
    regmap, _ = build.build(64, output, slot_user=RegisterSlotUser, pgo=False, opt="-O1")
    return output, regmap


def test_map_hash_split_card_hash_independent_of_the_dut(built):
    _, regmap = built
    rule30 = csr_json(64)
    owners = {r["name"]: r["owner"] for r in regmap["regions"]}
    assert owners["slot_test"] == "dut" and owners["ident"] == owners["slot"] == "card"
    assert "rule30" not in owners and "rule30_batch" not in owners
    assert regmap["map_hash"] == rule30["map_hash"], "tlpx's tools drive every card whatever is in its slot"
    assert regmap["dut"]["map_hash"] == f"0x{map_hash(regmap, 'dut'):08x}" != rule30["dut"]["map_hash"]
    assert regmap["dut"] == {"name": "slot_test", "version": "2.3", "map_hash": regmap["dut"]["map_hash"],
                             "placement": "bar0", "window_bytes": WINDOW}
    assert {r["name"]: r["owner"] for r in rule30["regions"] if r["owner"] == "dut"} == {"rule30": "dut", "rule30_batch": "dut"}
    m = CsrMap(regmap)
    assert m.dut()["name"] == "slot_test" and m.owner("slot_test") == "dut" and m.owner("pcie_msi") == "card"


def test_bar0_placement_on_the_verilated_card(built):
    output, regmap = built
    m = CsrMap(regmap)
    tlpx = lambda name: RELOCATED_TLPX_BASE + m.reg(name)
    card = Card(output / "libtlpxcard.so")
    try:
        assert card.read32(RELOCATED_TLPX_BASE) == IDENT_MAGIC, "ident.magic at RELOCATED_TLPX_BASE"
        assert card.read32(0x0) == USER_MAGIC, "the DUT's window at BAR0 0"
        card.write32(0x4, 0x12345678)
        assert card.read32(0x4) == 0x12345678
        assert card.read32(tlpx("ident.map_hash")) == int(regmap["map_hash"], 16)
        errors = card.read32(tlpx("request_path.bus_errors"))
        assert card.read32(0x2000) == 0 and card.read32(SLOT_WINDOW_BASE) == 0, "the gap is unmapped"
        assert card.read32(tlpx("request_path.bus_errors")) == errors + 2

        name = b"".join(card.read32(tlpx("slot.dut_name") + 4 * i).to_bytes(4, "little") for i in range(DUT_NAME_BYTES // 4))
        assert name == b"slot_test".ljust(DUT_NAME_BYTES, b"\0")
        version = card.read32(tlpx("slot.dut_version"))
        assert (m.get("slot.dut_version.major", version), m.get("slot.dut_version.minor", version)) == (2, 3)
        interface = card.read32(tlpx("slot.interface"))
        assert m.get("slot.interface.version", interface) == SLOT_INTERFACE_VERSION
        assert m.get("slot.interface.placement", interface) == m.value("slot.interface.placement", "bar0")
        assert m.get("slot.interface.dma", interface) == 0
        assert card.read32(tlpx("slot.window_bytes")) == WINDOW
        assert card.read32(tlpx("slot.dut_map_hash")) == int(regmap["dut"]["map_hash"], 16)

        # The slot's MSI is enabled at reset: the DUT's interrupt reaches the host untouched.
        assert card.read32(tlpx("pcie_msi.enable")) == 1 << SLOT_MSI_INDEX
        assert card.read32(tlpx("slot.irqs")) == 0
        card.write32(0x8, 1)
        card.run_until(lambda: card.msis, timeout=500)
        assert card.read32(tlpx("slot.irqs")) == 1
        assert card.read32(tlpx("pcie_msi.vector")) & (1 << SLOT_MSI_INDEX)
    finally:
        card.close()


class _User:
    """A user description to break one attribute of at a time."""
    dut_name, dut_version, window_bytes, placement, counters = "ok", (1, 0), 4096, "window", {}

    def regions(self):
        return []


@pytest.mark.parametrize("attribute,value,message", [
    ("dut_name", "much-too-long-name-for-the-slot", "dut_name must be 1..16"),
    ("dut_name", "has space", "dut_name must be"),
    ("dut_version", (1, 70000), "dut_version must be"),
    ("window_bytes", 3000, "window_bytes must be a power of two"),
    ("window_bytes", 0x40000, "window_bytes must be a power of two"),
    ("placement", "bar2", "placement must be one of window, bar0"),
    ("counters", {"dma_bogus": Signal()}, "unknown counter"),
    ("regions", lambda: [{"name": "ok", "offset": SLOT_WINDOW_BASE + 4096}], "outside its window"),
])
def test_bad_user_descriptions_are_refused(attribute, value, message):
    user = _User()
    setattr(user, attribute, value)
    with pytest.raises(SlotUserError, match=message) as e:
        check_user(user)
    assert repr(value)[:10] in str(e.value) or attribute in ("counters", "regions")


# The slot block alone (Migen simulator) -------------------------------------------------------------

class _CountingUser(_User):
    tx = None


def test_slot_block_counts_events_and_shows_counts_and_interrupts():
    """A 1-bit counter signal is an event the block counts; a wider one is the user's count."""
    event, count, irq = Signal(), Signal(32), Signal()
    user = _CountingUser()
    user.counters = {"dma_reads": event, "dma_read_bytes": count}
    from tlpx_gateware.cores.slot.core import SlotBlock
    busy = Signal()
    block = SlotBlock(user, irq=irq, counters=user.counters, busy=busy, cycles=Signal(64), clock_hz=125e6,
        dut_map_hash=0x1234ABCD)
    seen = {}

    def bench():
        for k in range(5):
            yield event.eq(k % 2 == 0)  # 3 events in 5 cycles
            yield irq.eq(k == 3)        # 1 interrupt
            yield count.eq(100 * k)
            yield busy.eq(k == 2)
            yield
            if k == 2:
                seen["busy_shown"] = (yield block.status.fields.busy)
        yield event.eq(0)
        yield irq.eq(0)
        yield
        for name in ("dma_reads", "dma_read_bytes", "dma_writes", "irqs", "dut_map_hash", "window_bytes"):
            seen[name] = (yield getattr(block, name).status)

    run_simulation(block, bench())
    assert seen == {"dma_reads": 3, "dma_read_bytes": 400, "dma_writes": 0, "irqs": 1,
                    "dut_map_hash": 0x1234ABCD, "window_bytes": 4096, "busy_shown": 1}


# The build's command line --------------------------------------------------------------------------

def test_build_dut_arguments_are_checked(capsys):
    with pytest.raises(SystemExit) as e:
        build.main(["--output-root", "/tmp/x"])
    assert e.value.code == 2 and "--dut MANIFEST with --output-root" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        build.main(["--dut", "x.toml", "--litepcie-only", "--output", "/tmp/x"])
    assert e.value.code == 2 and "not with --litepcie-only" in capsys.readouterr().err


def test_build_with_a_missing_manifest_names_it(tmp_path, capsys):
    missing = tmp_path / "no-such-dut.toml"
    assert build.main(["--dut", str(missing), "--output-root", str(tmp_path), "--no-verilate"]) == 1
    err = capsys.readouterr().err
    assert "tlpx_gateware.build: error:" in err and ("no-such-dut.toml" in err or "verilog.py" in err), err


def test_a_module_user_joins_the_card_once(built):
    output, _ = built
    tree = (output / "tlpx_card.v").read_text().split("*/")[0]
    assert tree.count("(RegisterSlotUser)") == 1, "the user is the card's submodule slot_user, once"
    assert "└─── slot_user (RegisterSlotUser)" in tree

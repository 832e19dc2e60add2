"""The soft CPU on the Verilated card: the image check, run/stop, the console, the bus.

The CPU card (`make gateware CPU=1`, build/card/dw64-cpu) is driven with MMIO as the host
does. The programs are a few instructions assembled here with Debian's riscv64-unknown-elf
binutils (installed by `make setup`), so these tests need no firmware build.
"""

import random
import shutil
import subprocess
import zlib

import pytest

from tlpx_gateware.conftest import BUILD
from tlpx_gateware.cores.ident.core import FEATURES
from tlpx_gateware.cores.cpu.core import SRAM_BASE, SRAM_SIZE, crc32_reference, crc32_word_equations
from tlpx_gateware.sim.card import Card

STOPPED, CHECKING, RUNNING, REFUSED = range(4)
REASONS = {"none": 0, "empty": 1, "too_long": 2, "unaligned": 3, "crc": 4}


def regs(region):
    import json
    regmap = json.loads((BUILD / "dw64-cpu" / "csr.json").read_text())
    for r in regmap["regions"]:
        if r["name"] == region:
            return {g["name"]: g["offset"] for g in r["registers"]}
    raise KeyError(region)


@pytest.fixture
def cpu_card():
    library = BUILD / "dw64-cpu" / "libtlpxcard.so"
    if not library.exists():
        pytest.fail(f"{library} is missing: run `make gateware CPU=1` before the CPU tests")
    c = Card(library)
    yield c
    c.close()


def assemble(tmp_path, source):
    """rv32im machine code of `source` linked at SRAM_BASE, as 32-bit words."""
    tools = {t: shutil.which(f"riscv64-unknown-elf-{t}") for t in ("as", "ld", "objcopy")}
    missing = [t for t, p in tools.items() if p is None]
    if missing:
        pytest.fail(f"riscv64-unknown-elf-{missing[0]} not found: `make setup` installs gcc-riscv64-unknown-elf")
    (tmp_path / "p.s").write_text(source)
    subprocess.run([tools["as"], "-march=rv32im", "-mabi=ilp32", "-o", tmp_path / "p.o", tmp_path / "p.s"], check=True)
    subprocess.run([tools["ld"], "-m", "elf32lriscv", f"-Ttext=0x{SRAM_BASE:x}", "-o", tmp_path / "p.elf", tmp_path / "p.o"], check=True)
    subprocess.run([tools["objcopy"], "-O", "binary", tmp_path / "p.elf", tmp_path / "p.bin"], check=True)
    code = (tmp_path / "p.bin").read_bytes()
    code += b"\0" * (-len(code) % 4)
    return code


def load(card, code, crc=None, length=None):
    ctrl = regs("cpu_ctrl")
    card.write32(ctrl["control"], 0)
    for i in range(0, len(code), 4):
        card.write32(SRAM_BASE + i, int.from_bytes(code[i:i + 4], "little"))
    card.write32(ctrl["image_length"], len(code) if length is None else length)
    card.write32(ctrl["image_crc"], zlib.crc32(code) if crc is None else crc)
    card.write32(ctrl["control"], 1)


def status(card):
    s = card.read32(regs("cpu_ctrl")["status"])
    return s & 3, (s >> 2) & 7


def wait_checked(card):
    for _ in range(200):
        state, reason = status(card)
        if state != CHECKING:
            return state, reason
        card.run(100)
    raise AssertionError("the image check did not end")


# Console program: prints "hi\n" on the console, stores 0x600D in ident.scratch, then counts
# in ident.scratch's neighbour... (scratch) forever.
CONSOLE = """
    .text
    .globl _start
_start:
    lui   t0, 0x6          # uart page 0x6000
    li    t1, 'h'
    sw    t1, 0(t0)        # uart.rxtx
    li    t1, 'i'
    sw    t1, 0(t0)
    li    t1, '\\n'
    sw    t1, 0(t0)
    li    t2, 0x600d
    sw    t2, 0x18(zero)   # ident.scratch
1:  lw    t3, 0x18(zero)
    addi  t3, t3, 1
    sw    t3, 0x18(zero)
    j     1b
"""


def console_text(card):
    uart = regs("uart")
    text = b""
    while not card.read32(uart["xover_rxempty"]) & 1:
        text += bytes([card.read32(uart["xover_rxtx"]) & 0xFF])
    return text


def test_crc_equations_match_the_bytewise_crc32():
    rng = random.Random(7)
    equations = crc32_word_equations()
    for _ in range(200):
        state, word = rng.getrandbits(32), rng.getrandbits(32)
        nxt = 0
        for j, terms in enumerate(equations):
            bit = 0
            for kind, i in terms:
                bit ^= (state >> i if kind == "c" else word >> i) & 1
            nxt |= bit << j
        # One step from `state`: the reference starts from ~state (it applies the final XOR).
        assert nxt ^ 0xFFFFFFFF == crc32_reference(word.to_bytes(4, "little"), state ^ 0xFFFFFFFF)
    data = bytes(rng.getrandbits(8) for _ in range(64))
    assert crc32_reference(data) == zlib.crc32(data)


def test_the_card_runs_a_checked_image_and_its_console_reaches_the_host(cpu_card, tmp_path):
    code = assemble(tmp_path, CONSOLE)
    card = cpu_card
    ctrl = regs("cpu_ctrl")
    assert card.read32(0x8) == (1 << len(FEATURES)) - 1, "ident.features: every block, the cpu bit (8) included"
    assert card.read32(ctrl["sram_base"]) == SRAM_BASE
    assert card.read32(ctrl["sram_size"]) == SRAM_SIZE
    assert status(card) == (STOPPED, 0)
    load(card, code)
    assert wait_checked(card) == (RUNNING, REASONS["none"])
    assert card.read32(ctrl["computed_crc"]) == zlib.crc32(code)
    assert card.read32(ctrl["starts"]) == 1
    card.run(2000)
    assert console_text(card) == b"hi\n"
    # The CPU keeps counting in ident.scratch while the host reads the card (shared bus).
    a = card.read32(0x18)
    card.run(500)
    b = card.read32(0x18)
    assert a > 0x600D and b > a
    # The SRAM reads back through BAR0 while the CPU runs.
    assert card.read32(SRAM_BASE) == int.from_bytes(code[:4], "little")
    # Stop: the CPU is held in reset, scratch stays where it was.
    card.write32(ctrl["control"], 0)
    card.run(50)
    assert status(card) == (STOPPED, 0)
    c = card.read32(0x18)
    card.run(500)
    assert card.read32(0x18) == c
    # Start again: the program runs from the start (prints again, rewrites scratch).
    card.write32(ctrl["control"], 1)
    assert wait_checked(card) == (RUNNING, 0)
    card.run(2000)
    assert console_text(card) == b"hi\n"
    assert card.read32(ctrl["starts"]) == 2


@pytest.mark.parametrize("case", ["crc", "empty", "too_long", "unaligned"])
def test_a_bad_image_is_refused_by_the_card_with_its_reason(cpu_card, tmp_path, case):
    code = assemble(tmp_path, CONSOLE)
    card = cpu_card
    ctrl = regs("cpu_ctrl")
    if case == "crc":
        load(card, code, crc=zlib.crc32(code) ^ 1)
    elif case == "empty":
        load(card, code, length=0)
    elif case == "too_long":
        load(card, code, length=SRAM_SIZE + 4)
    else:
        load(card, code, length=len(code) - 2)
    assert wait_checked(card) == (REFUSED, REASONS[case])
    assert card.read32(ctrl["refusals"]) == 1
    assert card.read32(ctrl["starts"]) == 0
    if case == "crc":
        assert card.read32(ctrl["computed_crc"]) == zlib.crc32(code)
    # The CPU never ran: nothing on the console, scratch untouched.
    card.run(2000)
    assert console_text(card) == b""
    assert card.read32(0x18) == 0x12345678
    # A corrected claim then passes.
    card.write32(ctrl["image_length"], len(code))
    card.write32(ctrl["image_crc"], zlib.crc32(code))
    card.write32(ctrl["control"], 1)
    assert wait_checked(card) == (RUNNING, 0)


def test_a_changed_word_after_loading_is_caught(cpu_card, tmp_path):
    """The card's CRC covers the SRAM as it is: one flipped bit refuses the image."""
    code = bytearray(assemble(tmp_path, CONSOLE))
    card = cpu_card
    claimed = zlib.crc32(bytes(code))
    code[5] ^= 0x10
    load(card, bytes(code), crc=claimed)
    assert wait_checked(card) == (REFUSED, REASONS["crc"])


def test_the_card_without_cpu_has_no_sram_window(card):
    """The card built without the CPU: ident.features has no cpu bit, and BAR0 0x40000 is not
    mapped (a read returns 0 and counts a bus error, as for any unmapped offset)."""
    from tlpx_gateware.conftest import reg
    assert not (card.read32(reg("ident.features")) >> 8) & 1
    errors = card.read32(reg("request_path.bus_errors"))
    card.write32(SRAM_BASE, 0xDEADBEEF)
    assert card.read32(SRAM_BASE) == 0
    assert card.read32(reg("request_path.bus_errors")) == errors + 2
    assert card.read32(0x5800) == 0  # no cpu_ctrl page

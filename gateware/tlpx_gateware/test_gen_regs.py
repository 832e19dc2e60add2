"""One source for the card's contract: gateware/tools/gen_regs.py's outputs follow csr.json.

A field value, a block constant or a register's size changed in the gateware reaches every
user through the generated files: the host's Rust (tlpx-regs), the firmware's C header
(tlpx_regs.h) and the gateware tests' Python (tlpx_gateware.csr_map reads csr.json). The
second half lints the sources that once held hand-written copies of these values: a copy
that comes back fails `make test` with where it is and which generated name to use.
"""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tlpx_gateware.conftest import BUILD
from tlpx_gateware.csr_map import CsrMap

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "gateware" / "tools" / "gen_regs.py"


# Generated files follow csr.json ---------------------------------------------------------------

def load_maps():
    maps = []
    for card in ("dw64", "dw64-cpu"):
        path = BUILD / card / "csr.json"
        if not path.exists():
            pytest.fail(f"{path} is missing: run `make gateware-all` (and `make gateware CPU=1`) before the gateware tests")
        maps.append(json.loads(path.read_text()))
    return maps


def generate(tmp_path, base, cpu, tag):
    """Runs gen_regs.py on the two maps; returns (rust, c, csr_map of the CPU card) or the
    tool's failure (returncode, stderr)."""
    d = tmp_path / tag
    d.mkdir()
    (d / "base.json").write_text(json.dumps(base))
    (d / "cpu.json").write_text(json.dumps(cpu))
    done = subprocess.run([sys.executable, str(TOOL), str(d / "base.json"), "--cpu-map", str(d / "cpu.json"),
                           "--rust", str(d / "lib.rs"), "--docs", str(d / "registers.md"),
                           "--c-header", str(d / "tlpx_regs.h")], capture_output=True, text=True)
    if done.returncode != 0:
        return done.returncode, done.stderr
    return (d / "lib.rs").read_text(), (d / "tlpx_regs.h").read_text(), CsrMap.load(d / "cpu.json")


def edit_field_values(regmap, field, values):
    region, register, name = field.split(".")
    for r in regmap["regions"]:
        for g in r["registers"]:
            for f in g["fields"]:
                if (r["name"], g["name"], f["name"]) == (region, register, name):
                    f["values"] = [[str(values.get(v[1], v[0])), *v[1:]] for v in f["values"]]
                    return
    raise KeyError(field)


def test_a_field_value_changed_in_csr_json_reaches_rust_c_and_python(tmp_path):
    base, cpu = load_maps()
    rust0, c0, py0 = generate(tmp_path, base, cpu, "as_built")
    # The gateware swaps two operation codes: every user follows, none keeps the old code.
    base2, cpu2 = copy.deepcopy(base), copy.deepcopy(cpu)
    for m in (base2, cpu2):
        edit_field_values(m, "generator.config.operation", {"write": 2, "read_write": 1})
    rust1, c1, py1 = generate(tmp_path, base2, cpu2, "swapped")

    assert "Write = 1," in rust0 and "Write = 2," in rust1 and "ReadWrite = 1," in rust1
    assert "1 => Ok(Operation::Write)" in rust0 and "2 => Ok(Operation::Write)" in rust1
    assert "#define TLPX_GENERATOR_CONFIG_OPERATION_WRITE 1u" in c0
    assert "#define TLPX_GENERATOR_CONFIG_OPERATION_WRITE 2u" in c1
    assert "#define TLPX_GENERATOR_CONFIG_OPERATION_READ_WRITE 1u" in c1
    assert py0.encode("generator.config", operation="write") == 1
    assert py1.encode("generator.config", operation="write") == 2
    assert py1.value("generator.config.operation", "read_write") == 1
    # Nothing else moved.
    changed = [(a, b) for a, b in zip(c0.splitlines(), c1.splitlines()) if a != b]
    assert changed == [("#define TLPX_GENERATOR_CONFIG_OPERATION_WRITE 1u", "#define TLPX_GENERATOR_CONFIG_OPERATION_WRITE 2u"),
                       ("#define TLPX_GENERATOR_CONFIG_OPERATION_READ_WRITE 2u",
                        "#define TLPX_GENERATOR_CONFIG_OPERATION_READ_WRITE 1u")]


def test_a_register_size_moves_the_script_descriptor_in_rust_and_c(tmp_path):
    base, cpu = load_maps()
    rust0, c0, _ = generate(tmp_path, base, cpu, "as_built")
    base2, cpu2 = copy.deepcopy(base), copy.deepcopy(cpu)
    for m in (base2, cpu2):
        for r in m["regions"]:
            for g in r["registers"]:
                if (r["name"], g["name"]) == ("generator", "count"):
                    g["size_bits"] = 32
    rust1, c1, _ = generate(tmp_path, base2, cpu2, "count32")
    assert "#define TLPX_GENERATOR_DESC_DURATION 16u" in c0 and "#define TLPX_GENERATOR_DESC_LEN 64u" in c0
    assert "#define TLPX_GENERATOR_DESC_DURATION 12u" in c1 and "#define TLPX_GENERATOR_DESC_LEN 60u" in c1
    assert re.search(r"pub const DURATION: usize = 16;", rust0) and re.search(r"pub const DURATION: usize = 12;", rust1)
    assert re.search(r"pub const LEN: usize = 60;", rust1)


def test_block_constants_come_from_csr_json_or_the_gateware_source_alike(tmp_path):
    from tlpx_gateware.soc import BLOCK_CONSTANTS
    base, cpu = load_maps()
    rust0, c0, _ = generate(tmp_path, base, cpu, "as_built")
    for name, value in BLOCK_CONSTANTS.items():
        assert f"pub const {name}: u64 = {value};" in rust0
        assert f"#define TLPX_CONST_{name} {value}u" in c0
    # A card built with every block constant exported gives the same files as one built before.
    base2, cpu2 = copy.deepcopy(base), copy.deepcopy(cpu)
    for m in (base2, cpu2):
        m["constants"].update(BLOCK_CONSTANTS)
    rust1, c1, _ = generate(tmp_path, base2, cpu2, "all_exported")
    assert (rust1, c1) == (rust0, c0)
    # A csr.json that disagrees with the gateware's source is a stale card: refused.
    for m in (base2, cpu2):
        m["constants"]["GENERATOR_MAX_TRANSFER_BYTES"] = 4096
    rc, err = generate(tmp_path, base2, cpu2, "stale")
    assert rc == 1 and "GENERATOR_MAX_TRANSFER_BYTES is 4096 in csr.json but 65536" in err and "rebuild" in err


def test_csr_map_encodes_with_the_card_fields():
    _, cpu = load_maps()
    m = CsrMap(cpu)
    config = m.encode("generator.config", operation="write_then_read", address_pattern="random", data_pattern="prbs",
                      check_data=1, flush=1)
    assert m.get("generator.config.operation", config) == m.value("generator.config.operation", "write_then_read")
    assert m.get("generator.config.address_pattern", config) == m.value("generator.config.address_pattern", "random")
    assert m.get("generator.config.flush", config) == 1 and m.get("generator.config.addr64", config) == 0
    with pytest.raises(KeyError, match="no value 'sideways'"):
        m.encode("generator.config", operation="sideways")
    with pytest.raises(ValueError, match="does not fit"):
        m.encode("generator.config", data_pattern=2)


# No hand-written copies ----------------------------------------------------------------------------

# (path relative to the repository, pattern of a hand-written copy, the generated name to use)
COPIES = [
    # host: the generator's codes, limits and histogram size
    ("host/blocks/generator/driver.rs", r"\bconst (MAX_TRANSFER_BYTES|HISTOGRAM_BUCKETS|TAGS)\s*:\s*\w+\s*=\s*\d",
     "tlpx_regs::constants::GENERATOR_*"),
    ("host/blocks/generator/driver.rs", r"\b(Operation|AddressPattern|DataPattern|EndedBy)::\w+\s*=>\s*\d",
     "the generated enum's .value()"),
    ("host/blocks/generator/driver.rs", r"^\s*\d+\s*=>\s*\"(count|duration|stop|stopped)\"",
     "tlpx_regs::generator::status::EndedBy::try_from"),
    ("host/blocks/generator/driver.rs", r"pub enum (Operation|AddressPattern|DataPattern)\b",
     "tlpx_regs::generator::config::{Operation, AddressPattern, DataPattern}"),
    ("host/blocks/spy/driver.rs", r"\bconst (LATENCY_BUCKETS|PAYLOAD_BUCKETS|RECORD_FIFO_DEPTH)\s*:\s*\w+\s*=\s*\d",
     "tlpx_regs::constants::SPY_*"),
    ("host/blocks/pio/driver.rs", r"\bconst (SIZE_BUCKETS|MAX_READ_DELAY)\s*:\s*\w+\s*=\s*\d",
     "tlpx_regs::constants::PIO_*"),
    ("host/blocks/rt_loop/driver.rs", r"\bconst (MAX_SIZE|CHUNK_ITERATIONS|HISTOGRAM_BUCKETS)\s*:\s*\w+\s*=\s*\d",
     "tlpx_regs::constants::RT_LOOP_*"),
    ("host/blocks/irq_timer/driver.rs", r"\bconst HISTOGRAM_BUCKETS\s*:\s*\w+\s*=\s*\d",
     "tlpx_regs::constants::IRQ_TIMER_HISTOGRAM_BUCKETS"),
    # host: the script compiler and its image
    ("host/blocks/cpu/script/src/compile.rs", r"\bconst (MAX_TRANSFER_BYTES|TAGS)\s*:\s*\w+\s*=\s*\d",
     "tlpx_regs::constants::GENERATOR_*"),
    ("host/blocks/cpu/script/src/compile.rs", r"\"(read|write|readwrite|writeread)\"\s*=>\s*\d",
     "DMA_OP_VALUES (tlpx_regs::generator::config::Operation)"),
    ("host/blocks/cpu/script/src/compile.rs", r"\[\s*\"sequential\"\s*,|\[\s*\"counter\"\s*,",
     "AddressPattern::ALL / DataPattern::ALL and .name()"),
    ("host/blocks/cpu/script/src/compile.rs", r"(OPERATION|ADDRESS_PATTERN|DATA_PATTERN)\.set\(\s*\d",
     "the generated enum's .value()"),
    ("host/blocks/cpu/script/src/compile.rs", r"1\.\.=65536", "MAX_TRANSFER_BYTES"),
    ("host/blocks/cpu/script/src/image.rs", r"\bconst DMA_LEN\s*:\s*\w+\s*=\s*\d|\[u32;\s*16\]",
     "tlpx_regs::generator::run_descriptor"),
    # firmware
    ("firmware/src/script.c", r"w32\(\s*d\s*\+\s*\d+u?\s*\)", "TLPX_GENERATOR_DESC_* (tlpx_regs.h)"),
    ("firmware/src/script.h", r"#define\s+IMG_DMA_LEN\s+\d", "TLPX_GENERATOR_DESC_LEN"),
    ("firmware/src/hw.h", r"#define\s+BAR0_SIZE\s+(0x)?[0-9a-fA-F]+", "TLPX_BAR_SIZE"),
    # gateware tests: register values with the card's fields (tlpx_gateware.csr_map)
    ("gateware/tlpx_gateware/cores/generator/test_generator.py", r"\(\s*\w+\s*<<\s*\d+\s*\)|>>\s*\d+\s*\)\s*&\s*\d",
     "csr_map().encode / .get"),
    ("gateware/tlpx_gateware/cores/generator/test_generator.py", r"\"control\"\s*,\s*0b", "csr_map().encode(\"generator.control\", ...)"),
    ("gateware/tlpx_gateware/cores/generator/test_generator.py", r"&\s*0x[fF]{1,4}\b|&\s*0b[01]+", "csr_map().get"),
    ("gateware/tlpx_gateware/testing/generator.py", r"\(\s*\w+\s*<<\s*\d+\s*\)|>>\s*\d+\s*\)\s*&\s*\d",
     "csr_map().encode / .get"),
    ("gateware/tlpx_gateware/testing/generator.py", r"\"control\"\s*,\s*0b", "csr_map().encode(\"generator.control\", ...)"),
    ("gateware/tlpx_gateware/testing/generator.py", r"&\s*0x[fF]{1,4}\b|&\s*0b[01]+", "csr_map().get"),
]


def hand_written_copies(root=ROOT, rules=COPIES):
    """[(path:line, line, generated name)] of every known copy found."""
    found = []
    for path, pattern, use in rules:
        text = (root / path).read_text()
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("//")[0] if path.endswith(".rs") else line
            if re.search(pattern, code):
                found.append((f"{path}:{n}", line.strip(), use))
    return found


def report(found):
    return "hand-written copies of generated values (use the generated names):\n" + "\n".join(
        f"  {where}: {line}\n      -> {use}" for where, line, use in found)


def test_no_hand_written_copies_of_generated_values():
    found = hand_written_copies()
    assert not found, report(found)


def test_the_lint_finds_a_planted_copy(tmp_path):
    for path, _, _ in COPIES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    before = set(hand_written_copies(tmp_path))
    gen = tmp_path / "host/blocks/generator/driver.rs"
    gen.write_text(gen.read_text() + "\npub const MAX_TRANSFER_BYTES: u32 = 65536;\n")
    c = tmp_path / "firmware/src/script.c"
    c.write_text(c.read_text() + "static u32 seed_of(u32 d) { return w32(d + 52u); }\n")
    # Only what was planted counts here (the tree's own copies fail the test above).
    found = sorted(set(hand_written_copies(tmp_path)) - before)
    assert [(w.split(":")[0], line) for w, line, _ in found] == [
        ("firmware/src/script.c", "static u32 seed_of(u32 d) { return w32(d + 52u); }"),
        ("host/blocks/generator/driver.rs", "pub const MAX_TRANSFER_BYTES: u32 = 65536;")]
    assert "-> tlpx_regs::constants::GENERATOR_*" in report(found)

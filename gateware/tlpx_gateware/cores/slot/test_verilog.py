"""The DUT manifest loader (cores/slot/verilog.py): every bad value gets a clear error, and the
Verilog slot user it builds is wired port for port to the user's module.

Each error test starts from the worked example's manifest (accelerators/pci_epf_test/dut.toml)
with one value changed, so the test shows that exactly that value is what is refused.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
from migen import Signal
from migen.fhdl.verilog import convert

from tlpx_gateware.build import verilator_root
from tlpx_gateware.cores.slot.core import SLOT_WINDOW_BASE, check_user
from tlpx_gateware.cores.slot.verilog import ManifestError, load_manifest

EXAMPLE = Path(__file__).resolve().parents[4] / "accelerators" / "pci_epf_test" / "dut.toml"


def variant(tmp_path, old, new, count=1):
    """The example manifest with `old` replaced by `new`, in tmp_path beside a copy of its Verilog."""
    text = EXAMPLE.read_text()
    assert text.count(old) >= count, f"{old!r} not in the example manifest"
    for src in ("pci_epf_test.v",):
        (tmp_path / src).write_text((EXAMPLE.parent / src).read_text())
    path = tmp_path / "dut.toml"
    path.write_text(text.replace(old, new, count))
    return path


def test_example_loads():
    m = load_manifest(EXAMPLE)
    assert (m.name, m.version, m.top, m.window_bytes, m.placement) == ("pci_epf_test", (1, 0), "tlpx_pci_epf_test", 4096, "bar0")
    assert list(m.sources) == ["pci_epf_test.v"]
    names = [r["name"] for r in m.registers]
    assert names[:3] == ["magic", "command", "status"] and names[-1] == "fault"
    (region,) = m.regions()
    assert region["owner"] == "dut" and region["offset"] == SLOT_WINDOW_BASE
    assert {r["name"]: r["offset"] - SLOT_WINDOW_BASE for r in region["registers"]}["fault"] == 0x40
    status = next(r for r in m.registers if r["name"] == "status")
    assert [f["name"] for f in status["fields"]][6] == "irq_raised" and status["fields"][6]["offset"] == 6


@pytest.mark.parametrize("old, new, message", [
    ('name = "pci_epf_test"', 'name = "PCI-test"', r"dut\.name must be 1\.\.16 characters of \[a-z0-9_\].*'PCI-test'"),
    ('name = "pci_epf_test"', 'name = "a_name_of_17_char"', r"dut\.name must be 1\.\.16"),
    ('name = "pci_epf_test"', 'name = "9lives"', r"dut\.name .*starting with a letter"),
    ('version = "1.0"', 'version = "1"', r"dut\.version must be \"major\.minor\""),
    ('version = "1.0"', 'version = "1.70000"', r"each 0\.\.65535"),
    ('top = "tlpx_pci_epf_test"', 'top = "other_top"', r"no module other_top in pci_epf_test\.v"),
    ('top = "tlpx_pci_epf_test"', 'top = "bad-name"', r"dut\.top must be a Verilog module name"),
    ('sources = ["pci_epf_test.v"]', 'sources = ["missing.v"]', r"cannot read .*missing\.v"),
    ('sources = ["pci_epf_test.v"]', 'sources = []', r"dut\.sources must be a non-empty list"),
    ('sources = ["pci_epf_test.v"]', 'sources = ["dut.toml"]', r"not a Verilog file"),
    ('sources = ["pci_epf_test.v"]', 'sources = ["pci_epf_test.v", "pci_epf_test.v"]', r"used twice"),
    ("window_bytes = 4096", "window_bytes = 6000", r"window_bytes must be a power of two 0x1000\.\.0x20000, not 0x1770"),
    ("window_bytes = 4096", "window_bytes = 0x40000", r"dut\.window_bytes must be an integer 0x1000\.\.0x20000"),
    ("window_bytes = 4096", 'window_bytes = "4K"', r"must be an integer .* not '4K'"),
    ('placement = "bar0"', 'placement = "bar2"', r"dut\.placement must be one of window, bar0, not 'bar2'"),
    ("interface = 1", "interface = 2", r"dut\.interface must be 1"),
    ("interface = 1", "interface = 1\ncolour = 3", r"\[dut\]: unknown key\(s\) colour; accepted: "),
    ('[dut]\nname', '[dut]\nnom', r"\[dut\]: unknown key\(s\) nom"),
    ("[[register]]\nname = \"magic\"", "[[regster]]\nname = \"magic\"", r"the manifest: unknown key\(s\) regster"),
    ("offset = 0x40", "offset = 0x1000", r"register fault offset must be an integer 0x0\.\.0xffc, not 4096"),
    ("offset = 0x40", "offset = 0x42", r"register fault offset must be a multiple of 4, not 0x42"),
    ("offset = 0x40", "offset = 0x2c", r"register fault at 0x2c overlaps register flags at 0x2c"),
    ('name = "fault"', 'name = "flags"', r"register flags: the name is used twice"),
    ('access = "rw"\ndescription = "Plain', 'access = "rx"\ndescription = "Plain', r"register magic access must be one of ro, rw, wo, not 'rx'"),
    ('{ name = "flip", offset = 0, size = 1,', '{ name = "flip", offset = 31, size = 2,', r"register fault field flip size must be an integer 0x1\.\.0x1"),
    ('{ name = "read_fail", offset = 1,', '{ name = "read_fail", offset = 0,', r"register status field read_fail \(bits 0:0\) overlaps another field"),
    ('{ name = "flip", offset = 0, size = 1,', '{ name = "flip", offset = 0, bits = 1,', r"register fault field #1: unknown key\(s\) bits"),
    ("[dut]", "[dut", r"is not valid TOML"),
])
def test_bad_manifest_is_refused_naming_the_value(tmp_path, old, new, message):
    with pytest.raises(ManifestError, match=message):
        load_manifest(variant(tmp_path, old, new))


def test_missing_required_key(tmp_path):
    with pytest.raises(ManifestError, match=r"\[dut\]: missing top"):
        load_manifest(variant(tmp_path, 'top = "tlpx_pci_epf_test"\n', ""))


def test_missing_manifest(tmp_path):
    with pytest.raises(ManifestError, match=r"cannot read the manifest .*nothing\.toml"):
        load_manifest(tmp_path / "nothing.toml")


@pytest.mark.parametrize("width", (64, 128, 256))
def test_slot_user_is_wired_port_for_port(tmp_path, width):
    """The user built from the example: the card's contract holds, and the Verilog Migen writes
    for it lints cleanly with the user's module under Verilator (every port connected with its
    width: a misspelt or missing port of the Instance is an error there)."""
    m = load_manifest(EXAMPLE)
    user = m.make(data_width=width, requester_id=Signal(16), cycles=Signal(64), clock_hz=125e6, base_domain="sys")
    check_user(user)
    assert set(user.counters) == {"dma_reads", "dma_writes", "dma_read_bytes", "dma_write_bytes", "dma_errors", "dma_fenced"}
    assert user.verilog_sources == m.sources and user.regions() == m.regions()
    ios = {user.bus.adr, user.bus.dat_w, user.bus.dat_r, user.bus.sel, user.bus.cyc, user.bus.stb, user.bus.we,
           user.bus.ack, user.irq, user.busy, user.fence, *user.counters.values(),
           *[getattr(user.tx, f) for f in ("valid", "ready", "first", "last", "dat", "be")],
           *[getattr(user.cpl, f) for f in ("valid", "ready", "first", "last", "dat", "be")]}
    wrapper = tmp_path / "wrapper.v"
    convert(user, ios=ios, name="slot_wrapper").write(str(wrapper))
    (tmp_path / "pci_epf_test.v").write_text(m.sources["pci_epf_test.v"])
    root = verilator_root()
    proc = subprocess.run([str(root / "bin" / "verilator"), "--lint-only", "--top-module", "slot_wrapper",
                           "-Wno-fatal", "-Wall", str(wrapper), str(tmp_path / "pci_epf_test.v")],
                          env=dict(os.environ, VERILATOR_ROOT=str(root)), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Port problems are what this checks; Migen's own style warnings are not the user's concern.
    port_warnings = [l for l in proc.stderr.splitlines() if re.search(r"PINMISSING|PINNOTFOUND|PINCONNECTEMPTY", l)
                     or ("WIDTH" in l and "tlpx_pci_epf_test" in l)]
    assert not port_warnings, "\n".join(port_warnings)

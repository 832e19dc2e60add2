"""The timing proxy's runner (targets/timing.py) without a card: its reuse of a netlist whose
inputs have not changed (a tiny design through the real Yosys), and its comparison and report
on hand-written results (the figures `make resources` writes into docs/resources.md)."""

import re

from tlpx_gateware.targets import timing

TINY = ("module tlpx_card(input sys_clk, input [7:0] a, output reg [7:0] q);\n"
        "  reg [7:0] r; always @(posedge sys_clk) begin r <= a; q <= q + r; end\nendmodule\n")
NO_VENDOR = {"files": [], "tops": {}}


def test_a_netlist_of_the_same_inputs_is_reused_and_a_changed_design_is_not(tmp_path):
    first = timing.synthesize({"tlpx_card.v": TINY}, NO_VENDOR, "xc7", tmp_path)
    log = tmp_path / "yosys.log"
    stamp = log.stat().st_mtime_ns
    again = timing.synthesize({"tlpx_card.v": TINY}, NO_VENDOR, "xc7", tmp_path)
    assert log.stat().st_mtime_ns == stamp, "Yosys ran again on the same inputs"
    assert again[1] == first[1] and again[1].get("CARRY4") == 2 and again[4] == first[4]
    # LiteX's header (date, commit) and module tree are comments: another date is the same design.
    dated = "// Date       : 2026-11-28 15:06:34\n/*\n└─── crg (BoardCRG)\n*/\n" + TINY
    timing.synthesize({"tlpx_card.v": dated}, NO_VENDOR, "xc7", tmp_path)
    assert log.stat().st_mtime_ns == stamp, "Yosys ran again on a design that differs in its comments"
    # Another design (a 16-bit accumulator) in the same folder: synthesised again.
    changed = timing.synthesize({"tlpx_card.v": TINY.replace("[7:0]", "[15:0]")}, NO_VENDOR, "xc7", tmp_path)
    assert log.stat().st_mtime_ns != stamp and changed[1].get("CARRY4") == 4
    # The other family is another flow: not the same inputs either.
    assert timing._inputs_digest({"tlpx_card.v": TINY}, "xcu") != timing._inputs_digest({"tlpx_card.v": TINY}, "xc7")


def _path(lut, carry, start, end):
    return {"lut": lut, "muxf": 0, "carry": carry, "start": start, "end": end, "end_pin": "D", "cells": []}


def _result(variant, sys_paths, pcie_path, other=None):
    def domain(name, hz, paths):
        by_lut = [dict(p, register=p["end"]) for p in paths]
        by_levels = sorted(by_lut, key=lambda p: -(p["lut"] + p["carry"]))
        return {"domain": name, "aliases": [], "hz": hz, "elements": 10, "endpoints": len(paths),
                "by_lut": paths[0], "by_levels": by_levels[0],
                "by_lut_registers": by_lut, "by_levels_registers": by_levels}
    domains = [domain("sys", 250e6, sys_paths), domain("pcie", 250e6, [pcie_path])]
    if other:
        domains.append(domain(other, None, [_path(1, 0, "x", "y")]))
    return {"board": "b", "variant": variant, "family": "xc7", "part": "xc7k325t", "data_width": 128,
            "clock_hz": 250e6, "luts": 100, "ffs": 100, "seconds": 60.0, "yosys_seconds": 60.0,
            "blackboxes": [], "multiple_drivers": [], "domains": domains}


def test_registers_deeper_than_litepcie_are_grouped_and_counted():
    tlpx = _result("tlpx", [_path(12, 0, "a", "hist_bucket0"), _path(11, 0, "a", "hist_bucket1"),
                            _path(10, 9, "b", "timer"), _path(9, 0, "c", "fine")],
                   _path(5, 0, "p", "q"), other="crg_clkin")
    ref = _result("litepcie", [_path(9, 0, "w", "bank_dat_r"), _path(7, 5, "l", "payload_we")],
                  _path(5, 0, "p", "q"))
    results = {("b", "tlpx"): tlpx, ("b", "litepcie"): ref}
    deeper = timing.compare(results, ["b"])
    # By LUT levels: the two buckets and the timer (10 > 9); `fine` ties LitePCIe's 9 and pcie ties.
    assert [r["register"] for r, _ in deeper[("b", "sys", "by_lut")]] == ["hist_bucket0", "hist_bucket1", "timer"]
    # By all levels (LitePCIe's 12, 7 of them LUTs): the timer's 19, and bucket0's 12 with more LUT
    # levels (the tie-break); bucket1's 11 is not deeper.
    assert [r["register"] for r, _ in deeper[("b", "sys", "by_levels")]] == ["timer", "hist_bucket0"]
    assert ("b", "pcie", "by_lut") not in deeper
    lines, unexplained = timing.report_section(results, ["b"], {"b": "A board"})
    text = "\n".join(lines)
    assert "| sys | 250 MHz | LUT levels | **12** (12 LUT + 0 carry): `a` → `hist_bucket0` (D) | **9**" in text
    assert "| `hist_bucket#` (D) | 2 | 12 LUT + 0 carry | `a` |" in text
    assert "`crg_clkin`" in text
    assert unexplained == 4   # groups: the buckets and the timer, by each figure
    assert "| **no reason recorded** | 3 | 2 | 12 LUT + 0 carry: `a` → `hist_bucket0` (D) |" in text
    assert "Why the deeper paths stay" not in text
    saved = list(timing.REASONS)
    timing.REASONS[:] = [timing.Reason("slow-timer", "", r"^timer$", "a test's reason"),
                         # Matches the buckets' end but not their start: no reason for them.
                         timing.Reason("other", "^b$", "bucket", "never used"),
                         timing.Reason("dsp-only", "", "bucket", "only through a DSP", dsp=True)]
    try:
        lines, unexplained = timing.report_section(results, ["b"], {"b": "A board"})
    finally:
        timing.REASONS[:] = saved
    text = "\n".join(lines)
    assert unexplained == 2   # the buckets' group, by each figure
    assert "| **slow-timer** | 1 | 1 | 10 LUT + 9 carry: `b` → `timer` (D) |" in text
    assert "- **slow-timer** (`*` → `^timer$`): a test's reason" in text
    assert "never used" not in text and "only through a DSP" not in text
    # A path through a DSP slice takes the DSP-only reason.
    tlpx["domains"][0]["by_lut_registers"][0]["dsp"] = 2
    timing.REASONS[:] = [timing.Reason("dsp-only", "", "bucket", "only through a DSP", dsp=True)]
    try:
        deeper = timing.compare(results, ["b"])
    finally:
        timing.REASONS[:] = saved
    assert [(r["register"], reason and reason.key) for r, reason in deeper[("b", "sys", "by_lut")]] == \
        [("hist_bucket0", "dsp-only"), ("hist_bucket1", None), ("timer", None)]


def test_the_kcu105_black_boxes_are_the_hard_ip_alone(tmp_path):
    """The KCU105's CC adapter and wrapper (pcie_support) are LitePCIe's files corrected by tlpx
    (sources of the card, not of the platform): the pre-pass reads them, with the wrapper as the
    vendor's top, so only the hard IP (pcie_us) is left to stub; a stub of the adapter beside its
    definition stopped Yosys ("Re-definition of module")."""
    from tlpx_gateware.targets import BOARDS
    files, vendor = timing.design_files(BOARDS["kcu105"], "tlpx")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    stubs = timing.derive_stubs(files, vendor, tmp_path)
    assert re.findall(r"^module (\w+)", stubs, re.M) == ["pcie_us"]


def test_the_kcu105_reference_is_litepcies_own_phy():
    """The reference is LitePCIe's design as LiteX builds it: its stock UltraScale PHY, not the
    card's with the corrected CC adapter (whose replacement file the reference does not carry:
    Yosys stopped on its parameters)."""
    from litepcie.phy.uspciephy import USPCIEPHY
    from tlpx_gateware.targets import BOARDS
    soc = timing.litepcie_reference(BOARDS["kcu105"])
    assert type(soc.pcie_phy) is USPCIEPHY


def test_a_carry_only_reason_takes_only_paths_of_few_lut_levels():
    """`max_lut`: a reason for carry chains matches a path of at most that many LUT levels (the
    timer's 10 LUT + 9 carry is not one, a 2 LUT + 20 carry counter is)."""
    tlpx = _result("tlpx", [_path(10, 9, "b", "timer"), _path(2, 20, "c", "counter")], _path(5, 0, "p", "q"))
    ref = _result("litepcie", [_path(9, 0, "w", "x"), _path(7, 5, "l", "y")], _path(5, 0, "p", "q"))
    saved = list(timing.REASONS)
    timing.REASONS[:] = [timing.Reason("carry", "", "", "a carry chain", max_lut=3)]
    try:
        deeper = timing.compare({("b", "tlpx"): tlpx, ("b", "litepcie"): ref}, ["b"])
    finally:
        timing.REASONS[:] = saved
    assert [(r["register"], reason and reason.key) for r, reason in deeper[("b", "sys", "by_levels")]] == \
        [("counter", "carry"), ("timer", None)]


def test_the_report_is_written_again_from_a_kept_run(tmp_path):
    """`resources --report-only --workdir W` writes the report from the results a run kept in W
    (its figures and its command), with the reasons as they are now; without W's files it says
    which is missing and fails."""
    import json
    from tlpx_gateware.targets import resources
    tlpx = _result("tlpx", [_path(12, 0, "a", "hist_bucket0")], _path(5, 0, "p", "q"))
    ref = _result("litepcie", [_path(9, 0, "w", "bank_dat_r")], _path(5, 0, "p", "q"))
    tlpx["board"] = ref["board"] = "kcu105"
    cells = {c: 1 for c in ("LUT", "LUTRAM", "SRL", "FF", "CARRY4", "RAMB18", "RAMB36", "DSP")}
    rows = [{"row": row, "data_width": 64, "cells": cells, "seconds": 1.0} for row in resources.ROWS]
    run = {"version": "Yosys 0.0 (test)", "widths": [64], "boards": ["kcu105"],
           "command": "the kept run's command"}
    out = tmp_path / "resources.md"
    assert resources.main(["--output", str(out), "--report-only", "--workdir", str(tmp_path)]) == 1
    assert not out.exists()
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "results.json").write_text(json.dumps(rows))
    (tmp_path / "timing.json").write_text(json.dumps([tlpx, ref]))
    saved = list(timing.REASONS)
    timing.REASONS[:] = [timing.Reason("buckets", "", "hist_bucket", "why the buckets stay")]
    try:
        assert resources.main(["--output", str(out), "--report-only", "--workdir", str(tmp_path)]) == 0
    finally:
        timing.REASONS[:] = saved
    text = out.read_text()
    assert "Generated by `the kept run's command`" in text and "Yosys 0.0 (test)" in text
    # A later run of some rows replaced results.json: refused, naming what is missing.
    (tmp_path / "results.json").write_text(json.dumps(rows[:1]))
    out.unlink()
    assert resources.main(["--output", str(out), "--report-only", "--workdir", str(tmp_path)]) == 1
    assert not out.exists()
    assert "| **buckets** | 1 | 1 | 12 LUT + 0 carry: `a` → `hist_bucket0` (D) |" in text
    assert "- **buckets** (`*` → `hist_bucket`): why the buckets stay" in text
    assert "Not measured in this run" in text   # the other boards

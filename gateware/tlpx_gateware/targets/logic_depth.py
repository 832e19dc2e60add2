"""The deepest logic path per clock domain of a netlist mapped by Yosys' `synth_xilinx`.

    from tlpx_gateware.targets.logic_depth import Netlist, deepest_paths
    netlist = Netlist.from_json(json.load(open("card.json")), top="tlpx_card")
    for domain in deepest_paths(netlist): print(domain.name, domain.by_lut.levels)

A timing proxy, not timing: no Vivado runs here (docs/resources.md says what it is worth).
Yosys' `ltp` walks every cell, flip-flops included, over the whole design and knows no clock
domains, and `sta` needs timing models the Xilinx cells do not carry; hence this walk.

What is counted (the rules the report quotes):

- A path is launched by a sequential element of one clock domain and captured by one of the
  same domain. Sequential elements: flip-flops (FDRE, FDSE, FDCE, FDPE: D, CE and the
  synchronous R/S are endpoints; the asynchronous CLR/PRE are not timing paths of the clock),
  shift-register LUTs (SRL16E, SRLC32E), distributed RAM (RAM32M, RAM64M, RAM32X1D, ...: the
  write port's pins are endpoints, the contents are launched by the write clock), block RAM
  (RAMB18/36: every input is an endpoint, every output a start), and the registers of a DSP
  slice (DSP48E1/E2, from its *REG parameters: an input behind its own register, behind
  the multiplier's MREG or the output's PREG is an endpoint; the outputs are starts where
  any register drives them).
- A DSP slice with registers bypassed is combinational: its unregistered inputs reach its
  outputs through one DSP level, counted with the LUT levels (a multiply through a DSP
  takes several LUT levels' time; the figure names the DSPs so they are seen). Yosys maps a
  32-bit multiply to several DSPs in cascade (PCOUT -> PCIN): each is a level.
- Between them it crosses LUT1..LUT6 and INV (one LUT level each), MUXF7/8/9 (one level each,
  as Vivado counts them), CARRY4/CARRY8 (one carry cell each, with the carry's per-bit arcs:
  output bit k depends on inputs 0..k only), and the asynchronous read of a distributed RAM or
  an SRL's address (read address to data out: one LUT level, as the RAM is a LUT).
- Paths from the design's ports, from black boxes (the vendor's hard IP: the modules the caller
  names as such; any other cell type the walk does not know is an error), and between two
  clock domains are not counted (ports and the hard IP have no launching flip-flop here; the
  crossings are asynchronous by construction and false paths in the constraints).
- A clock domain is the net on the elements' clock pins, followed back through global clock
  buffers (BUFG, BUFGCE, BUFH, BUFHCE); its name is the netlist's name for it (Migen's
  `<domain>_clk`).

Two figures per domain, because a carry chain is a fast dedicated path (a CARRY4 adds about a
tenth of a LUT level's delay once it is entered) while Vivado's "logic levels" count every
cell alike: `by_lut`, the path with the most LUT levels (LUT, INV, MUXF, distributed-RAM/SRL
read), carry cells breaking ties; and `by_levels`, the path with the most cells of all those
kinds, carry cells included (Vivado's "Logic Levels" figure), LUT levels breaking ties.
"""

import re
from dataclasses import dataclass, field

# Cells of the flow (`synth_xilinx`, 7-series and UltraScale) and what they are to a path.
LUT_CELLS = {f"LUT{i}" for i in range(1, 7)} | {"INV"}
MUXF_CELLS = {"MUXF7", "MUXF8", "MUXF9"}
CARRY_CELLS = {"CARRY4": 4, "CARRY8": 8}
FLIP_FLOPS = {
    # type: (clock pin, endpoint pins)
    "FDRE": ("C", ("D", "CE", "R")),
    "FDSE": ("C", ("D", "CE", "S")),
    "FDCE": ("C", ("D", "CE")),
    "FDPE": ("C", ("D", "CE")),
}
SRLS = {
    # type: (clock pin, endpoint pins, address pins -> outputs)
    "SRL16E":  ("CLK", ("D", "CE"), {("A0", "A1", "A2", "A3"): ("Q",)}),
    "SRLC16E": ("CLK", ("D", "CE"), {("A0", "A1", "A2", "A3"): ("Q",)}),
    "SRLC32E": ("CLK", ("D", "CE"), {("A",): ("Q",)}),
}


def _ram_m(ports, address_width):
    # RAM32M/RAM64M/RAM32M16/RAM64M8: ports A.. read at ADDR<x>; the last port's address is the
    # write address too. Endpoints: data in, WE, the write address.
    last = ports[-1]
    endpoints = tuple(f"DI{p}" for p in ports) + ("WE", f"ADDR{last}")
    return ("WCLK", endpoints, {(f"ADDR{p}",): (f"DO{p}",) for p in ports})


def _ram_x1d(bits):
    # RAM<n>X1D: SPO read (and written) at A, DPO read at DPRA.
    if bits == 128:
        a, dpra = ("A",), ("DPRA",)
    else:
        n = {32: 5, 64: 6}[bits]
        a, dpra = tuple(f"A{i}" for i in range(n)), tuple(f"DPRA{i}" for i in range(n))
    return ("WCLK", ("D", "WE") + a, {a: ("SPO",), dpra: ("DPO",)})


def _ram_x1s(bits):
    a = ("A",) if bits >= 128 else tuple(f"A{i}" for i in range({16: 4, 32: 5, 64: 6}[bits]))
    return ("WCLK", ("D", "WE") + a, {a: ("O",)})


LUTRAMS = {
    "RAM32M":    _ram_m("ABCD", 5),
    "RAM64M":    _ram_m("ABCD", 6),
    "RAM32M16":  _ram_m("ABCDEFGH", 5),
    "RAM64M8":   _ram_m("ABCDEFGH", 6),
    "RAM32X1D":  _ram_x1d(32),
    "RAM64X1D":  _ram_x1d(64),
    "RAM128X1D": _ram_x1d(128),
    "RAM32X1S":  _ram_x1s(32),
    "RAM64X1S":  _ram_x1s(64),
    "RAM128X1S": _ram_x1s(128),
    "RAM256X1S": _ram_x1s(256),
}
# Block RAM: every input an endpoint, every output a start, in the domain of its clock pins (a
# block RAM with two different clocks: each port's pins in its own clock's domain).
BRAMS = {"RAMB18E1", "RAMB36E1", "RAMB18E2", "RAMB36E2", "FIFO18E1", "FIFO36E1", "FIFO18E2", "FIFO36E2", "URAM288"}
DSPS = {"DSP48E1", "DSP48E2"}
# A DSP slice's data and control inputs and the parameter of the register each can pass
# (UG479/UG579); inputs without one (the cascade and PCIN) reach the ALU and then PREG.
DSP_INPUT_REGISTER = {
    "A": "AREG", "ACIN": "AREG", "B": "BREG", "BCIN": "BREG", "C": "CREG", "D": "DREG",
    "OPMODE": "OPMODEREG", "ALUMODE": "ALUMODEREG", "INMODE": "INMODEREG",
    "CARRYIN": "CARRYINREG", "CARRYINSEL": "CARRYINSELREG",
    "PCIN": None, "CARRYCASCIN": None, "MULTSIGNIN": None,
}
# Inputs that pass the multiplier (and so its MREG) on their way to P.
DSP_MULTIPLIER_INPUTS = {"A", "ACIN", "B", "BCIN", "D", "INMODE"}
# The A and B cascade outputs come from the A and B input paths, not from P.
DSP_CASCADE_OUTPUTS = {"ACOUT": ("A", "ACIN"), "BCOUT": ("B", "BCIN")}
# Global clock buffers (and input buffers) followed back to find and name a clock; they carry no
# data path.
CLOCK_BUFFERS = {"BUFG": "I", "BUFGCE": "I", "BUFH": "I", "BUFHCE": "I", "IBUF": "I", "IBUFG": "I"}
# Cells at the design's edge (I/O, clocking, transceivers' references): no path crosses them.
BOUNDARY = {"IBUF", "OBUF", "IOBUF", "OBUFT", "IBUFDS", "OBUFDS", "IBUFG", "IBUFDS_GTE2", "IBUFDS_GTE3",
            "IBUFDS_GTE4", "BUFGCTRL", "BUFGMUX", "BUFG_GT", "BUFGCE_DIV", "MMCME2_ADV", "MMCME2_BASE",
            "PLLE2_ADV", "PLLE2_BASE", "MMCME3_ADV", "MMCME3_BASE", "PLLE3_ADV", "PLLE3_BASE",
            "MMCME4_ADV", "PLLE4_ADV", "STARTUPE2", "STARTUPE3", "GND", "VCC"} | set(CLOCK_BUFFERS)


class NetlistError(Exception):
    pass


@dataclass
class Levels:
    lut:   int = 0   # LUT1..6, INV, distributed-RAM / SRL reads
    muxf:  int = 0   # MUXF7/8/9
    carry: int = 0   # CARRY4 / CARRY8
    dsp:   int = 0   # DSP48E1/E2 crossed with their registers bypassed

    def __add__(self, other):
        return Levels(self.lut + other.lut, self.muxf + other.muxf, self.carry + other.carry,
                      self.dsp + other.dsp)

    @property
    def lut_levels(self):
        """LUT levels: LUTs, the wide-function muxes after them (MUXF7/8/9) and combinational
        DSPs (each slower than a LUT: counting it as one level understates it)."""
        return self.lut + self.muxf + self.dsp

    @property
    def total(self):
        """Vivado's "Logic Levels": every cell on the path."""
        return self.lut + self.muxf + self.carry + self.dsp

    def text(self):
        parts = [f"{self.lut} LUT"]
        if self.muxf:
            parts.append(f"{self.muxf} MUXF")
        if self.dsp:
            parts.append(f"{self.dsp} DSP")
        parts.append(f"{self.carry} carry")
        return " + ".join(parts)


# The two orders of paths (see the module's docstring). Both are linear in the levels, so the
# deepest path is found by dynamic programming over the combinational graph.
METRICS = {
    "by_lut":    lambda v: (v.lut_levels, v.carry),
    "by_levels": lambda v: (v.total, v.lut_levels),
}
WEIGHT = {"lut": Levels(lut=1), "muxf": Levels(muxf=1), "carry": Levels(carry=1), "dsp": Levels(dsp=1)}


@dataclass
class Point:
    cell:  str    # cell name
    type:  str
    pin:   str    # pin and bit, e.g. "D" or "ADDRARDADDR[3]"
    net:   str    # a name of the net on that pin (the register's name, for a flip-flop's D or Q)


@dataclass
class Path:
    levels: Levels
    start:  Point
    end:    Point
    cells:  list = field(default_factory=list)   # (cell name, type, output net name) start to end

    def text(self):
        return f"{self.levels.text()}: {self.start.net} -> {self.end.net} ({self.end.pin})"


@dataclass
class Domain:
    clock:     int            # the clock's net (bit) in the netlist
    name:      str            # the clock's name (Migen's domain, from `<domain>_clk`)
    aliases:   list           # other names of the same clock net (domains on the same clock)
    elements:  int            # sequential cells clocked by it
    endpoints: int            # endpoint pins (bits) with a path from the same domain
    by_lut:    Path = None
    by_levels: Path = None
    paths:     dict = field(default_factory=dict)   # metric -> every endpoint's deepest path, deepest first


class Netlist:
    """The top module of a Yosys JSON netlist (`write_json` after `synth_xilinx -flatten`)."""

    def __init__(self, module, blackboxes=()):
        self.cells = module["cells"]
        # Modules known only by their ports (the vendor's hard IP): no path crosses them.
        self.blackboxes = set(blackboxes)
        self.ports = module.get("ports", {})
        self.names = {}      # bit -> [names], public names first
        for name, net in sorted(module.get("netnames", {}).items(), key=lambda kv: (kv[1].get("hide_name", 0), kv[0])):
            for i, bit in enumerate(net["bits"]):
                if isinstance(bit, int):
                    label = name if len(net["bits"]) == 1 else f"{name}[{i + net.get('offset', 0)}]"
                    self.names.setdefault(bit, []).append(label)
        self.driver = {}     # bit -> (cell, port, index)
        for name, cell in self.cells.items():
            directions = cell.get("port_directions")
            if directions is None:
                raise NetlistError(f"cell {name} ({cell['type']}) has no port directions: "
                                   "write the netlist with the cell library loaded")
            for port, bits in cell["connections"].items():
                if directions.get(port) == "output":
                    for i, bit in enumerate(bits):
                        if isinstance(bit, int):
                            self.driver[bit] = (name, port, i)

    @classmethod
    def from_json(cls, data, top, blackboxes=()):
        modules = data["modules"]
        if top not in modules:
            raise NetlistError(f"no module {top!r} in the netlist (modules: {', '.join(sorted(modules))[:400]})")
        return cls(modules[top], blackboxes)

    def name(self, bit):
        names = self.names.get(bit)
        return names[0] if names else f"<net {bit}>"


def _bits(cell, port):
    return cell["connections"].get(port, [])


def _pins(cell, port):
    """(pin label, bit) of a port."""
    bits = _bits(cell, port)
    if len(bits) == 1:
        return [(port, bits[0])]
    return [(f"{port}[{i}]", b) for i, b in enumerate(bits)]


def _param_int(value):
    """A Yosys JSON parameter as an integer (they are written as binary strings), or None."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value and set(value) <= {"0", "1"}:
        return int(value, 2)
    return None


def _bram_port_clock(cell, pin):
    """The clock pin a block RAM's pin belongs to (UG473/UG573: port A/B; in simple dual-port
    mode the write pins are port B's and the read pins port A's)."""
    t = cell["type"]
    if t == "URAM288":
        return "CLK"
    if t.startswith("FIFO"):
        return "WRCLK" if pin.startswith(("WR", "DI", "WREN")) else "RDCLK"
    params = cell.get("parameters", {})
    sdp = str(params.get("RAM_MODE", "")).strip() == "SDP" or \
        any(_param_int(params.get(p)) in (36, 72) for p in ("READ_WIDTH_A", "WRITE_WIDTH_B"))
    if sdp:
        if pin.startswith(("DI", "WE", "ADDRBWRADDR", "ENBWREN", "ADDRENB")):
            return "CLKBWRCLK"
        return "CLKARDCLK"
    # Port A's pins: the 7-series names (DIADI, DOADO, ...) and UltraScale's (DINADIN,
    # DOUTADOUT, the A cascade pins).
    port_a = re.match(r"(ADDRARDADDR|ADDRENA|CASDIMUXA|CASDOMUXA|CASOREGIMUXA|CASOREGIMUXEN_A|CASDOMUXEN_A|"
                      r"DIADI|DIPADIP|DOADO|DOPADOP|DINADIN|DINPADINP|DOUTADOUT|DOUTPADOUTP|"
                      r"CASDINA|CASDINPA|CASDOUTA|CASDOUTPA|ENARDEN|REGCEAREGCE|RSTRAMARSTRAM|RSTREGARSTREG|WEA|"
                      r"CLKARDCLK|CASINSBITERR|CASINDBITERR)", pin)
    return "CLKARDCLK" if port_a else "CLKBWRCLK"


class Graph:
    """Sequential elements by domain and the combinational arcs of the netlist."""

    def __init__(self, netlist):
        self.n = netlist
        self.starts = {}     # bit -> (domain clock bit, Point) for bits launched by a sequential cell
        self.ends = []       # (domain clock bit, Point, bit)
        self.arcs = {}       # output bit -> (cell name, weight, [input bits])
        self.elements = {}   # clock bit -> count of sequential cells
        self.clock_nets = {} # clock bit -> the bits from it through the clock buffers (for names)
        unknown = set()
        for name, cell in sorted(netlist.cells.items()):
            t = cell["type"]
            if t in LUT_CELLS:
                self._arc(name, cell, "O", [p for p in cell["connections"] if p != "O"], "lut")
            elif t in MUXF_CELLS:
                self._arc(name, cell, "O", ["I0", "I1", "S"], "muxf")
            elif t in CARRY_CELLS:
                self._carry(name, cell, CARRY_CELLS[t])
            elif t in FLIP_FLOPS:
                clock, endpoints = FLIP_FLOPS[t]
                self._sequential(name, cell, lambda pin: clock, endpoints, ["Q"])
            elif t in SRLS or t in LUTRAMS:
                clock, endpoints, reads = (SRLS.get(t) or LUTRAMS[t])
                outputs = [p for p, d in cell["port_directions"].items() if d == "output"]
                self._sequential(name, cell, lambda pin: clock, endpoints, outputs)
                for address, data in reads.items():
                    for out in data:
                        self._arc(name, cell, out, list(address), "lut")
            elif t in DSPS:
                self._dsp(name, cell)
            elif t in BRAMS:
                directions = cell["port_directions"]
                clocks = {p for p in directions if p in ("CLK", "CLKARDCLK", "CLKBWRCLK", "WRCLK", "RDCLK")}
                inputs = [p for p, d in directions.items() if d == "input" and p not in clocks]
                outputs = [p for p, d in directions.items() if d == "output"]
                self._sequential(name, cell, lambda pin, cell=cell: _bram_port_clock(cell, pin), inputs, outputs)
            elif t in BOUNDARY or t == "$scopeinfo":
                pass
            elif t in netlist.blackboxes:
                pass
            else:
                unknown.add(t)
        if unknown:
            raise NetlistError(f"cell types this walk does not know: {', '.join(sorted(unknown))} "
                               "(add them to targets/logic_depth.py with what they are to a path, or name "
                               "them as black boxes)")

    def _arc(self, name, cell, out_port, in_ports, kind):
        inputs = [b for p in in_ports for b in _bits(cell, p) if isinstance(b, int)]
        for bit in _bits(cell, out_port):
            if isinstance(bit, int):
                self.arcs.setdefault(bit, []).append((name, WEIGHT[kind], inputs))

    def _carry(self, name, cell, width):
        # Bit k of O and CO depends on the carry in (CI, CYINIT; CI_TOP for CARRY8's upper half)
        # and on S and DI of bits 0..k (O[k] on DI of bits below k only, a superset is harmless:
        # DI[k] and S[k] come from the same LUT level).
        carry_in = [b for p in ("CI", "CYINIT") for b in _bits(cell, p) if isinstance(b, int)]
        top_in = [b for b in _bits(cell, "CI_TOP") if isinstance(b, int)]
        s, di = _bits(cell, "S"), _bits(cell, "DI")
        for k in range(width):
            inputs = carry_in + (top_in if k >= width // 2 else []) + \
                [b for b in s[:k + 1] + di[:k + 1] if isinstance(b, int)]
            for port in ("O", "CO"):
                bits = _bits(cell, port)
                if k < len(bits) and isinstance(bits[k], int):
                    self.arcs.setdefault(bits[k], []).append((name, WEIGHT["carry"], inputs))

    def _dsp(self, name, cell):
        """A DSP slice: the inputs its registers capture are endpoints, the outputs its
        registers drive are starts, and an input with no register between it and an output
        reaches that output through one DSP level."""
        params = cell.get("parameters", {})
        reg = lambda p: p is not None and (_param_int(params.get(p)) or 0) > 0
        multiply = str(params.get("USE_MULT", "MULTIPLY")).strip() != "NONE"
        preg, mreg = reg("PREG"), reg("MREG") and multiply
        directions = cell["port_directions"]
        cut = {}          # input port -> a register captures it before P
        for port, register in DSP_INPUT_REGISTER.items():
            if port in directions:
                cut[port] = reg(register) or (mreg and port in DSP_MULTIPLIER_INPUTS) or preg
        registered = preg or mreg or any(reg(p) for p in set(DSP_INPUT_REGISTER.values()) - {None})
        endpoints = [p for p, c in cut.items() if c]
        if registered:
            # Clock enables and resets act on the registers only.
            endpoints += [p for p, d in directions.items() if d == "input" and p.startswith(("CE", "RST"))]
        outputs = [p for p, d in directions.items() if d == "output"]
        # The outputs are launched by the slice's registers where it has any (an output also
        # reached combinationally from an unregistered input gets both).
        self._sequential(name, cell, lambda pin: "CLK", endpoints, outputs if registered else [])
        for out in outputs:
            sources = DSP_CASCADE_OUTPUTS.get(out, tuple(cut))
            if out in DSP_CASCADE_OUTPUTS and reg(DSP_INPUT_REGISTER[sources[0]]):
                continue
            free = [p for p in sources if p in cut and not cut[p]]
            if free:
                self._arc(name, cell, out, free, "dsp")

    def _sequential(self, name, cell, clock_of, endpoints, outputs):
        t = cell["type"]
        clock_bit = {}
        for port in set(clock_of(p) for p in list(endpoints) + list(outputs)):
            bits = _bits(cell, port)
            clock_bit[port] = self._clock_root(bits[0]) if bits and isinstance(bits[0], int) else None
        for root in set(clock_bit.values()) - {None}:
            self.elements[root] = self.elements.get(root, 0) + 1
        for port in outputs:
            root = clock_bit.get(clock_of(port))
            for pin, bit in _pins(cell, port):
                if isinstance(bit, int) and root is not None:
                    self.starts[bit] = (root, Point(name, t, pin, self.n.name(bit)))
        for port in endpoints:
            root = clock_bit.get(clock_of(port))
            if root is None:
                continue
            # A flip-flop's endpoint is named by its register (the Q net), a RAM's by its pin's net.
            q = _bits(cell, "Q")
            label = self.n.name(q[0]) if t in FLIP_FLOPS and q and isinstance(q[0], int) else None
            for pin, bit in _pins(cell, port):
                if isinstance(bit, int):
                    self.ends.append((root, Point(name, t, pin, label or self.n.name(bit)), bit))

    def _clock_root(self, bit):
        chain = [bit]
        while True:
            driver = self.n.driver.get(bit)
            if driver is None:
                break
            cell = self.n.cells[driver[0]]
            if cell["type"] not in CLOCK_BUFFERS:
                break
            source = _bits(cell, CLOCK_BUFFERS[cell["type"]])
            if not source or not isinstance(source[0], int) or source[0] in chain:
                break
            bit = source[0]
            chain.append(bit)
        self.clock_nets.setdefault(bit, set()).update(chain)
        return bit


def _longest(graph, domain, key):
    """Deepest arrival at every bit from `domain`'s starts: bit -> (levels, (cell, input bit)) or
    None. Iterative depth-first, memoised; a combinational loop is an error."""
    best = {}
    active = set()
    zero = Levels()

    def finish(bit):
        value = None
        start = graph.starts.get(bit)
        if start is not None and start[0] == domain:
            value = (zero, None)
        for cell, weight, inputs in graph.arcs.get(bit, ()):
            for i in inputs:
                arrival = best.get(i)
                if arrival is None:
                    continue
                candidate = arrival[0] + weight
                if value is None or key(candidate) > key(value[0]):
                    value = (candidate, (cell, i))
        best[bit] = value

    def visit(root):
        if root in best:
            return
        stack = [(root, False)]
        while stack:
            bit, expanded = stack.pop()
            if bit in best:
                continue
            if expanded:
                active.discard(bit)
                finish(bit)
                continue
            if bit in active:
                raise NetlistError(f"combinational loop through {graph.n.name(bit)}")
            active.add(bit)
            stack.append((bit, True))
            for _, _, inputs in graph.arcs.get(bit, ()):
                for i in inputs:
                    if i not in best:
                        if i in active:
                            raise NetlistError(f"combinational loop through {graph.n.name(i)}")
                        stack.append((i, False))

    return best, visit


def _trace(graph, best, bit):
    """The cells of the path ending at `bit`, start first, and the start Point."""
    cells = []
    while True:
        levels, pred = best[bit]
        if pred is None:
            return graph.starts[bit][1], list(reversed(cells))
        cell, i = pred
        cells.append((cell, graph.n.cells[cell]["type"], graph.n.name(bit)))
        bit = i


def clock_name(netlist, bits, preferred=()):
    """(name, aliases) of a clock from the names of its nets (`bits`: the clock and the nets
    through its buffers): Migen's `<domain>_clk` names (the preferred domains first), else its
    first public name."""
    names = [n for b in sorted(bits) for n in netlist.names.get(b, [])]
    domains = sorted({n[:-4] for n in names if n.endswith("_clk") and not n.startswith("$") and "[" not in n})
    if domains:
        domains.sort(key=lambda d: (d not in preferred, preferred.index(d) if d in preferred else 0, d))
        return domains[0], domains[1:]
    public = [n for n in names if not n.startswith("$")]
    return (public or names or [f"<net {min(bits)}>"])[0], []


def endpoint_paths(graph, clock, metric):
    """The deepest path to every endpoint of domain `clock` (a clock net of graph.elements) from
    the same domain, by `metric` (METRICS), deepest first; ties in endpoint name order, so that
    a rerun names the same paths."""
    key = METRICS[metric]
    best, visit = _longest(graph, clock, key)
    found = []
    for root, point, bit in graph.ends:
        if root != clock:
            continue
        visit(bit)
        arrival = best.get(bit)
        if arrival is not None:
            found.append((point, bit, arrival[0]))
    found.sort(key=lambda f: (tuple(-x for x in key(f[2])), f[0].net, f[0].cell, f[0].pin))
    paths = []
    for point, bit, levels in found:
        start, cells = _trace(graph, best, bit)
        paths.append(Path(levels, start, point, cells))
    return paths


def deepest_paths(netlist, preferred=("sys", "pcie"), graph=None):
    """[Domain] with each domain's deepest path by both metrics, domains by name."""
    graph = graph or Graph(netlist)
    domains = []
    for root in sorted(graph.elements, key=lambda b: clock_name(netlist, graph.clock_nets[b], preferred)):
        name, aliases = clock_name(netlist, graph.clock_nets[root], preferred)
        # Results are keyed by the domain's name: two clock nets of one name would merge.
        if any(d.name == name for d in domains):
            raise NetlistError(f"two clock nets are both named {name!r} (nets {graph.clock_nets[root]} and "
                               f"{next(d.clock for d in domains if d.name == name)}): the domains cannot be told apart")
        result = Domain(clock=root, name=name, aliases=aliases, elements=graph.elements[root], endpoints=0)
        for metric in METRICS:
            paths = endpoint_paths(graph, root, metric)
            result.paths[metric] = paths
            result.endpoints = len(paths)
            if paths:
                setattr(result, metric, paths[0])
        domains.append(result)
    return domains

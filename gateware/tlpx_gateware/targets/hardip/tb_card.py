"""The UltraScale card against cocotbext-pcie's model of its hard IP and root complex (cocotb).

    RootComplex (cocotbext-pcie: enumeration, host memory, MSI)
        │  TLPs (its link model)                 ◄── witness: every TLP both ways
    UltraScalePcieDevice (model of pcie3_ultrascale: config space, CQ/CC/RQ/RC, MSI, cfg_*)
        │  hip_* ports (the IP's user interface) ◄── interface rules of PG156 the model does not check
    tlpx_card: LitePCIe's pcie_support (adapters, MSI encoding) ─ USPCIEPHY ─ tlpx's blocks

Each check is a cocotb test that resets the card, lets the model's root complex enumerate
it, and drives it only as a host can: configuration requests, BAR0 reads and writes (by
register name, from the card's csr.json), host memory and MSIs. It writes its verdict and
what it saw into results.json (`python -m tlpx_gateware.targets.hardip` prints them). The
testbench reads nothing of the card but its top-level ports.
"""

import json
import logging
import os
import random
import traceback
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import Event, First, RisingEdge, Timer

from cocotbext.axi import AxiStreamBus
from cocotbext.pcie.core import RootComplex
from cocotbext.pcie.core.caps import PciCapId
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpType
from cocotbext.pcie.core.utils import PcieId
from cocotbext.pcie.xilinx.us import UltraScalePcieDevice
from cocotbext.pcie.xilinx.us.tlp import ErrorCode, Tlp_us

from tlpx_gateware.cores.common import PATTERN_COUNTER, PATTERN_PRBS, pattern_word_py
from tlpx_gateware.cores.generator.core import ADDR_SEQUENTIAL, OP_READ, OP_READ_WRITE, OP_WRITE
from tlpx_gateware.cores.msi import MSI_VECTORS
from tlpx_gateware.csr_map import CsrMap
from tlpx_gateware.targets.board import PCI_CLASS_CODE, PCI_DEVICE_ID, PCI_VENDOR_ID
from tlpx_gateware.targets.hardip.socket import HARD_IP_PORTS, HIP_PREFIX

OUTPUT = Path(os.environ.get("TLPX_HARDIP_DIR", "."))

# The checks in the order they run (docs/verification.md's independent-model column).
CHECKS = []

# The card's clock: on the board its own oscillator through an MMCM, unrelated to the hard
# IP's user clock; here 0.1 % faster than the model's 250 MHz user clock, so that the PHY's
# clock-domain crossings see every phase relation, as on the board.
CARD_CLOCK_PS = 3996
USER_CLOCK_HZ = 250e6

MS = 1_000_000  # ns


def record(name, status, detail):
    path = OUTPUT / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[name] = {"status": status, "detail": detail}
    path.write_text(json.dumps(results, indent=2) + "\n")


# Which card each check runs on: "rule30" (the board's card as built by default) or the name
# of the accelerator in the slot (accelerators/<name>/dut.toml).
CARD_OF = {}


def check(function=None, card="rule30"):
    """A check: a cocotb test that records PASS (with the figures it returns) or FAIL."""
    if function is None:
        return lambda f: check(f, card)
    name = function.__name__
    CARD_OF[name] = card

    async def run(dut):
        try:
            detail = await function(dut)
        except BaseException as e:
            record(name, "FAIL", f"{type(e).__name__}: {e}".strip().splitlines()[0][:400])
            logging.getLogger("cocotb.tb").error("%s failed:\n%s", name, traceback.format_exc())
            raise
        record(name, "PASS", detail or "")

    run.__name__ = run.__qualname__ = name
    CHECKS.append(name)
    return cocotb.test(timeout_time=50, timeout_unit="ms")(run)


# The link, as the root complex's port sees it ------------------------------------------------

def kind(tlp):
    """A TLP's kind as the spy names it: MRd, MWr, Cpl, CplD, CfgRd0, ..."""
    return {
        TlpType.MEM_READ: "MRd", TlpType.MEM_READ_64: "MRd", TlpType.MEM_WRITE: "MWr",
        TlpType.MEM_WRITE_64: "MWr", TlpType.CPL: "Cpl", TlpType.CPL_DATA: "CplD",
        TlpType.CFG_READ_0: "CfgRd0", TlpType.CFG_WRITE_0: "CfgWr0",
    }.get(tlp.fmt_type, tlp.fmt_type.name)


class Witness:
    """Every TLP between the root complex and the hard IP, in link order per direction:
    ("down", tlp) from the root complex, ("up", tlp) from the card's side."""

    def __init__(self, dev):
        self.log = []
        self.on = False
        port = dev.upstream_port
        send, rx = port.send, port.rx_handler

        async def sent(tlp):
            if self.on:
                self.log.append(("up", Tlp(tlp)))
            await send(tlp)

        async def received(tlp):
            if self.on:
                self.log.append(("down", Tlp(tlp)))
            await rx(tlp)

        port.send, port.rx_handler = sent, received


class InterfaceRules:
    """PG156's rules for the user side that the model does not enforce, checked on the ports:
    a request or completion, once started, keeps tvalid high to its last beat (the IP treats
    a gap on RQ/CC as an error and nullifies the TLP), and tkeep is contiguous from DW0."""

    def __init__(self, dut):
        self.violations = []
        for prefix in ("s_axis_rq", "s_axis_cc"):
            cocotb.start_soon(self._watch(dut, prefix))

    async def _watch(self, dut, prefix):
        valid, ready, last, keep = (getattr(dut, f"{HIP_PREFIX}{prefix}_{s}") for s in ("tvalid", "tready", "tlast", "tkeep"))
        inside = False
        while True:
            await RisingEdge(dut.hip_user_clk)
            if not valid.value.is_resolvable:
                continue
            v = int(valid.value)
            if inside and not v:
                self.violations.append(f"{prefix}: tvalid dropped inside a TLP at {cocotb.utils.get_sim_time('ns'):.0f} ns")
            if v and int(ready.value):
                k = int(keep.value)
                if k & (k + 1):
                    self.violations.append(f"{prefix}: tkeep {k:#x} not contiguous from DW0")
                inside = not int(last.value)


def model_link_capabilities(function, board):
    """What the IP presents after training that cocotbext-pcie 0.2.16 leaves out (docs/
    verification.md, "cocotbext-pcie and PG156"): the function's Link Capabilities and Status
    are never set from the device's configuration (both read 0), and Link Capabilities is
    encoded with right shifts where the fields go left (Max Link Width, ASPM, exit latencies
    end up 0). The testbench sets the link and encodes LnkCap itself; nothing in the card."""
    cap = function.pcie_cap
    cap.max_link_speed = cap.current_link_speed = board["gen"]
    cap.max_link_width = cap.negotiated_link_width = board["lanes"]
    read = cap._read_register

    async def read_register(reg):
        if reg == 3:
            val = await read(reg) & ~0x3FFFF  # the model's fields above bit 17 are encoded right
            return val | (cap.max_link_speed & 0xF) | (cap.max_link_width & 0x3F) << 4 | \
                (cap.aspm_support & 3) << 10 | (cap.l0s_exit_latency & 7) << 12 | (cap.l1_exit_latency & 7) << 15
        return await read(reg)

    cap._read_register = read_register


class Bench:
    """The model's root complex and hard IP around the card, and a host's view of the card."""

    def __init__(self, dut, mps=256, mrrs=512, memory=1 << 20):
        self.dut = dut
        self.log = logging.getLogger("cocotb.tb")
        self.regs = CsrMap.load(OUTPUT / "src" / "csr.json")
        self.board = json.loads((OUTPUT / "src" / "board.json").read_text())

        # With the slot's placement "bar0" (pci_epf_test) the DUT's registers are at BAR0 0 and
        # tlpx's map at RELOCATED_TLPX_BASE (cores/slot/core.py).
        in_slot = self.regs.dut() or {}
        self.tlpx_base = self.regs.constant("RELOCATED_TLPX_BASE") if in_slot.get("placement") == "bar0" else 0

        self.rc = RootComplex()
        self.rc.max_payload_size = (mps // 128 - 1).bit_length()
        self.rc.max_read_request_size = (mrrs // 128 - 1).bit_length()
        hip = {port: getattr(dut, HIP_PREFIX + port) for port in HARD_IP_PORTS if not port.startswith("pci_exp_")}
        buses = {prefix: AxiStreamBus.from_prefix(dut, HIP_PREFIX + prefix)
                 for prefix in ("s_axis_rq", "m_axis_rc", "m_axis_cq", "s_axis_cc")}
        for prefix in buses:
            for s in ("tdata", "tkeep", "tlast", "tuser", "tvalid", "tready"):
                hip.pop(f"{prefix}_{s}")
        self.dev = UltraScalePcieDevice(
            pcie_generation=self.board["gen"],
            pcie_link_width=self.board["lanes"],
            user_clk_frequency=USER_CLOCK_HZ,
            alignment="dword",
            rc_straddle=False,                  # LitePCIe: AXISTEN_IF_RC_STRADDLE False
            enable_client_tag=True,             # LitePCIe: axisten_if_enable_client_tag True
            max_payload_size=self.board["max_payload_supported"],   # pf0_dev_cap_max_payload
            enable_extended_tag=True,           # extended_tag_field true: 64 requester tags
            pf0_msi_enable=True,
            pf0_msi_count=MSI_VECTORS,          # PF0_MSI_CAP_MULTIMSGCAP 32_vectors (board.py)
            rq_bus=buses["s_axis_rq"], rc_bus=buses["m_axis_rc"],
            cq_bus=buses["m_axis_cq"], cc_bus=buses["s_axis_cc"],
            **hip,
        )
        level = logging.DEBUG if os.environ.get("TLPX_HARDIP_DEBUG") else logging.WARNING
        self.dev.log.setLevel(level)
        self.rc.log.setLevel(level)
        function = self.dev.functions[0]
        model_link_capabilities(function, self.board)
        function.vendor_id = PCI_VENDOR_ID
        function.device_id = PCI_DEVICE_ID
        function.subsystem_vendor_id = PCI_VENDOR_ID
        function.subsystem_id = PCI_DEVICE_ID
        function.class_code = PCI_CLASS_CODE
        function.configure_bar(0, self.board["bar0_size"])
        self.rc.make_port().connect(self.dev)
        self.witness = Witness(self.dev)
        self.rules = InterfaceRules(dut)

        self.mem = self.rc.mem_pool.alloc_region(memory)
        self.mem_base = self.mem.get_absolute_address(0)
        self.msis = 0
        self.msi_event = Event()
        # MSIs per vector at the root complex (the MSI data's low bits, as the model sends them).
        self.msi_by_vector = [0] * MSI_VECTORS

        dut.sys_rst.setimmediatevalue(1)
        dut.pcie_x8_rst_n.setimmediatevalue(0)
        for name in ("clk_p", "clk_n", "rx_p", "rx_n"):
            getattr(dut, f"pcie_x8_{name}").setimmediatevalue(0)
        for name in ("pci_exp_txn", "pci_exp_txp"):
            getattr(dut, HIP_PREFIX + name).setimmediatevalue(0)
        cocotb.start_soon(Clock(dut.sys_clk, CARD_CLOCK_PS, unit="ps").start())

    async def start(self):
        """PERST# and the card's reset, then the root complex enumerates and enables the card."""
        dut = self.dut
        for _ in range(8):
            await RisingEdge(dut.sys_clk)
        dut.pcie_x8_rst_n.value = 1
        dut.sys_rst.value = 0
        await RisingEdge(dut.hip_user_lnk_up)
        await Timer(200, "ns")
        await self.rc.enumerate()
        self.pdev = self.rc.find_device(self.dev.functions[0].pcie_id)
        await self.pdev.enable_device()
        await self.pdev.set_master()
        # cocotbext-pcie's root complex enables every vector the capability offers (MME = MMC:
        # 32), so each of the card's sources arrives on its own vector: a handler on each.
        await self.pdev.alloc_irq_vectors(1, MSI_VECTORS)
        for v in range(MSI_VECTORS):
            self.pdev.request_irq(v, self._msi_handler(v))
        self.bar0 = self.pdev.bar_window[0]
        devctl = await self.pdev.capability_read_word(PciCapId.EXP, 0x8)
        self.mps = 128 << ((devctl >> 5) & 7)
        self.mrrs = 128 << ((devctl >> 12) & 7)
        self.witness.on = True

    def _msi_handler(self, vector):
        async def handler():
            self.msis += 1
            self.msi_by_vector[vector] += 1
            self.msi_event.set()
        return handler

    def ok(self):
        assert not self.rules.violations, "; ".join(self.rules.violations[:3])

    # BAR0 by register name ----------------------------------------------------------------------

    async def read32(self, name, index=0):
        data = await self.bar0.read(self.tlpx_base + self.regs.reg(name) + 4 * index, 4, timeout=20000)
        return int.from_bytes(data, "little")

    async def read64(self, name):
        return await self.read32(name) | (await self.read32(name, 1) << 32)

    async def write32(self, name, value, index=0):
        await self.bar0.write(self.tlpx_base + self.regs.reg(name) + 4 * index,
                              int(value & 0xFFFFFFFF).to_bytes(4, "little"), timeout=20000)

    async def write64(self, name, value):
        await self.write32(name, value)
        await self.write32(name, value >> 32, 1)

    async def wait_msi(self, timeout_us=500):
        """The next MSI at the root complex's handler (counted in self.msis)."""
        if not self.msi_event.is_set():
            await First(self.msi_event.wait(), Timer(timeout_us, "us"))
        assert self.msi_event.is_set(), f"no MSI within {timeout_us} us"
        self.msi_event.clear()

    def msi_bit(self, source):
        return 1 << self.regs.constant(f"MSI_{source.upper()}")

    def up(self, kinds=("MRd", "MWr", "CplD", "Cpl")):
        return [t for d, t in self.witness.log if d == "up" and kind(t) in kinds]

    def down(self, kinds=("MRd", "MWr", "CplD", "Cpl")):
        return [t for d, t in self.witness.log if d == "down" and kind(t) in kinds]


# Drivers of the card's blocks, by register name --------------------------------------------------

async def generator_run(tb, op, size, count, base, payload, request, data=PATTERN_PRBS, seed=7,
                        outstanding=16, timeout=20000, window=None, stride_log2=12, offset=0):
    """One generator run ended by its MSI; returns its counters."""
    regs = tb.regs
    g = "generator"
    await tb.write32(f"{g}.control", regs.encode(f"{g}.control", clear=1))
    config = regs.encode(f"{g}.config", operation=op, address_pattern=ADDR_SEQUENTIAL, data_pattern=data,
                         check_data=1)
    window = window or (1 << max(12, (count * (1 << stride_log2) - 1).bit_length()))
    for name, value in [("config", config), ("transfer_size", size), ("request_size_log2", request.bit_length() - 1),
                        ("payload_size_log2", payload.bit_length() - 1), ("idle_cycles", 0),
                        ("max_outstanding", outstanding), ("window_mask", window - 1), ("stride_log2", stride_log2),
                        ("offset", offset), ("seed", seed), ("timeout", timeout)]:
        await tb.write32(f"{g}.{name}", value)
    for name, value in [("count", count), ("duration", 0), ("base", base)]:
        await tb.write64(f"{g}.{name}", value)
    bit = tb.msi_bit("generator")
    await tb.write32("pcie_msi.enable", bit)
    await tb.write32(f"{g}.control", regs.encode(f"{g}.control", start=1))
    await tb.wait_msi()
    await tb.write32("pcie_msi.clear", bit)
    names64 = ["transfers", "read_requests", "read_bytes", "completions", "write_requests", "write_bytes"]
    names32 = ["err_ur", "err_ca", "err_other", "err_poisoned", "err_timeouts", "err_unexpected", "err_mismatches"]
    c = {n: await tb.read64(f"{g}.{n}") for n in names64}
    c.update({n: await tb.read32(f"{g}.{n}") for n in names32})
    c["status"] = await tb.read32(f"{g}.status")
    return c


def fill_pattern(tb, offset, length, kind=PATTERN_PRBS, seed=7):
    for off in range(offset & ~3, offset + length, 4):
        tb.mem[off:off + 4] = pattern_word_py(kind, seed, (tb.mem_base + off) >> 2).to_bytes(4, "little")


def pattern_bytes(tb, offset, length, kind=PATTERN_PRBS, seed=7):
    """The generator's address-keyed pattern for host memory bytes [offset, offset+length)."""
    out = bytearray()
    for a in range(tb.mem_base + offset, tb.mem_base + offset + length):
        out.append(pattern_word_py(kind, seed, a >> 2).to_bytes(4, "little")[a & 3])
    return bytes(out)


def crosses_4k(tlp):
    return (tlp.address >> 12) != ((tlp.address + 4 * tlp.length - 1) >> 12) if tlp.length else False


# The checks -------------------------------------------------------------------------------------

@check
async def enumeration(dut):
    tb = Bench(dut)
    await tb.start()
    p = tb.pdev
    assert (p.vendor_id, p.device_id) == (PCI_VENDOR_ID, PCI_DEVICE_ID), f"IDs {p.vendor_id:04x}:{p.device_id:04x}"
    assert p.class_code == PCI_CLASS_CODE, f"class {p.class_code:06x}"
    assert (p.subsystem_vendor_id, p.subsystem_id) == (PCI_VENDOR_ID, PCI_DEVICE_ID)
    assert p.bar_size[0] == tb.board["bar0_size"], f"BAR0 {p.bar_size[0]:#x}"
    bar0 = await p.config_read_dword(0x10)
    assert bar0 & 0xF == 0, f"BAR0 {bar0:#010x}: not a 32-bit non-prefetchable memory BAR"
    assert bar0 & ~0xF == p.bar_addr[0] != 0, "BAR0 not assigned"
    cmd = await p.config_read_word(0x04)
    assert cmd & 0b110 == 0b110, f"command register {cmd:#06x}: memory and bus master not both enabled"
    msi_ctrl = await p.capability_read_word(PciCapId.MSI, 0x2)
    assert msi_ctrl & 1, f"MSI control {msi_ctrl:#06x}: not enabled"
    assert (msi_ctrl >> 1) & 7 == 5, f"MSI control {msi_ctrl:#06x}: the IP offers 32 MSI vectors"
    assert (msi_ctrl >> 4) & 7 == 5, f"MSI control {msi_ctrl:#06x}: the root complex enabled all 32"
    granted = await tb.read32("pcie_msi.granted")
    assert granted == MSI_VECTORS, f"pcie_msi.granted {granted}: the card sees the IP's Multiple Message Enable"
    devcap = await p.capability_read_dword(PciCapId.EXP, 0x4)
    assert 128 << (devcap & 7) == tb.board["max_payload_supported"], f"DevCap {devcap:#x}: MPS supported"
    assert devcap & (1 << 5), "Extended Tag Field supported (the card's tags go up to 63)"
    devctl = await p.capability_read_word(PciCapId.EXP, 0x8)
    assert devctl & (1 << 8), "the root complex enabled Extended Tags"
    lnkcap = await p.capability_read_dword(PciCapId.EXP, 0xC)
    assert (lnkcap & 0xF, (lnkcap >> 4) & 0x3F) == (tb.board["gen"], tb.board["lanes"]), f"LnkCap {lnkcap:#x}"
    # The card sees the IP's view of the negotiated sizes and its bus master enable.
    assert 128 << int(dut.hip_cfg_max_payload.value) == tb.mps and 128 << int(dut.hip_cfg_max_read_req.value) == tb.mrrs
    tb.ok()
    return (f"{p.vendor_id:04x}:{p.device_id:04x} class {p.class_code:06x}, BAR0 {p.bar_size[0] >> 20} MiB "
            f"32-bit at {p.bar_addr[0]:#x}, command {cmd:#06x}, MSI {granted} of 32 vectors enabled, DevCap MPS "
            f"{128 << (devcap & 7)} ExtTag, MPS {tb.mps} MRRS {tb.mrrs}, Gen{lnkcap & 0xF} x{(lnkcap >> 4) & 0x3F}")


@check
async def registers(dut):
    tb = Bench(dut)
    await tb.start()
    regs = tb.regs
    magic = await tb.read32("ident.magic")
    assert magic == regs.constant("IDENT_MAGIC"), f"ident.magic {magic:#010x}"
    map_hash = await tb.read32("ident.map_hash")
    assert f"{map_hash:#010x}" == regs.regmap["map_hash"], f"ident.map_hash {map_hash:#010x}"
    width, clock = await tb.read32("ident.data_width"), await tb.read32("ident.clock_hz")
    assert (width, clock) == (tb.board["data_width"], tb.board["clock_hz"]), f"ident says {width} bits at {clock} Hz"
    # Scratch: every byte enable of a DW, each write checked against a byte model.
    scratch = tb.regs.reg("ident.scratch")
    model = bytearray((0x5A5A5A5A).to_bytes(4, "little"))
    await tb.bar0.write(scratch, bytes(model), timeout=20000)
    writes = 0
    for first in range(4):
        for length in range(1, 5 - first):
            data = bytes(random.randrange(256) for _ in range(length))
            await tb.bar0.write(scratch + first, data, timeout=20000)
            model[first:first + length] = data
            writes += 1
            got = await tb.bar0.read(scratch, 4, timeout=20000)
            assert got == model, f"scratch after writing {length} byte(s) at +{first}: {got.hex()} not {model.hex()}"
            part = await tb.bar0.read(scratch + first, length, timeout=20000)
            assert part == model[first:first + length], f"read of {length} byte(s) at +{first}: {part.hex()}"
    # The timebase: 64 bits, counting the card's clock.
    t0 = await tb.read64("timebase.cycles_lo")
    ns0 = cocotb.utils.get_sim_time("ns")
    await Timer(10, "us")
    t1 = await tb.read64("timebase.cycles_lo")
    ns1 = cocotb.utils.get_sim_time("ns")
    rate = (t1 - t0) / (ns1 - ns0) * 1e3
    assert t1 > t0 and abs(rate - 1e6 / CARD_CLOCK_PS) < 2, f"timebase {t0} -> {t1}: {rate:.1f} MHz"
    tb.ok()
    return (f"magic {magic:#010x}, map hash {map_hash:#010x}, {width} bits at {clock / 1e6:.0f} MHz, scratch through "
            f"{writes} partial writes and reads, timebase {rate:.2f} MHz (card clock {1e6 / CARD_CLOCK_PS:.2f})")


@check
async def dma(dut):
    tb = Bench(dut, mps=256, mrrs=512)
    await tb.start()
    regs = tb.regs
    figures = []
    # LitePCIe's DMA loopback: reader (host -> card) into writer (card -> host), 4 KiB.
    length, src, dst = 4096, 0x1000, 0x4000
    tb.mem[src:src + length] = bytes((i * 7 + 3) & 0xFF for i in range(length))
    d = "pcie_dma0"
    for name in ("reader_enable", "writer_enable"):
        await tb.write32(f"{d}.{name}", 0)
    for name, value in [("reader_table_reset", 1), ("writer_table_reset", 1), ("reader_table_loop_prog_n", 0),
                        ("writer_table_loop_prog_n", 0), ("loopback_enable", 1)]:
        await tb.write32(f"{d}.{name}", value)
    await tb.write64(f"{d}.writer_table_value", (tb.mem_base + dst) | (length << 32))
    await tb.write32(f"{d}.writer_table_we", 0)
    await tb.write64(f"{d}.reader_table_value", (tb.mem_base + src) | (length << 32))
    await tb.write32(f"{d}.reader_table_we", 0)
    bit = tb.msi_bit("pcie_dma0_writer")
    await tb.write32("pcie_msi.clear", bit)
    await tb.write32("pcie_msi.enable", bit)
    await tb.write32(f"{d}.writer_enable", 1)
    await tb.write32(f"{d}.reader_enable", 1)
    await tb.wait_msi()
    await tb.write32("pcie_msi.clear", bit)
    for name in ("reader_enable", "writer_enable", "loopback_enable"):
        await tb.write32(f"{d}.{name}", 0)
    if tb.mem[dst:dst + length] != tb.mem[src:src + length]:
        bad = [i for i in range(length) if tb.mem[dst + i] != tb.mem[src + i]]
        raise AssertionError(f"LitePCIe loopback: {len(bad)} bytes differ at the MSI, first at +{bad[0]} "
                             f"(the MSI came before the data?)")
    figures.append(f"LitePCIe loopback {length} B")

    # The generator: reads, writes and both, 1 DW to many MPS, odd sizes and offsets, and
    # transfers that start 0x100 below a 4 KiB boundary (base + slot offset), so that the
    # card must split at it (the model's root complex drops a read that crosses one).
    cases = [(OP_WRITE, 4, 0), (OP_WRITE, 13, 3), (OP_WRITE, 1000, 0), (OP_WRITE, 4096, 0xF00),
             (OP_READ, 4, 0), (OP_READ, 13, 3), (OP_READ, 2048, 0), (OP_READ, 4096, 0xF00),
             (OP_READ_WRITE, 1536, 0x7C4)]
    region = 0x20000
    for op, size, offset in cases:
        tb.mem[region:region + 0x10000] = bytes(0x10000)
        fill_pattern(tb, region, 0x10000)
        if op == OP_WRITE:
            tb.mem[region:region + 0x10000] = bytes(0x10000)
        count = 3
        start = len(tb.witness.log)
        c = await generator_run(tb, op, size, count, tb.mem_base + region + (offset & ~63), payload=tb.mps,
                                request=tb.mrrs, stride_log2=13, offset=offset & 63)
        assert c["transfers"] == count, f"op {op} size {size}: {c['transfers']} transfers"
        errors = {k: v for k, v in c.items() if k.startswith("err_") and v}
        assert not errors, f"op {op} size {size}: {errors}"
        link = tb.witness.log[start:]
        mwr = [t for dd, t in link if dd == "up" and kind(t) == "MWr" and t.address != tb.pdev.msi_vectors[0].addr]
        mrd = [t for dd, t in link if dd == "up" and kind(t) == "MRd"]
        if op in (OP_WRITE, OP_READ_WRITE):
            assert sum(t.get_be_byte_count() for t in mwr) == count * size == c["write_bytes"], \
                f"op {op} size {size}: written {sum(t.get_be_byte_count() for t in mwr)} bytes"
            for t in range(count):
                at = region + (t << 13) + offset
                if tb.mem[at:at + size] != pattern_bytes(tb, at, size):
                    want = pattern_bytes(tb, at, size)
                    bad = [i for i in range(size) if tb.mem[at + i] != want[i]]
                    raise AssertionError(f"op {op} size {size}: transfer {t} wrong in host memory at {len(bad)} bytes, "
                                         f"first +{bad[0]:#x}..+{bad[-1]:#x}; MWr "
                                         f"{[(hex(x.address - tb.mem_base - region), x.length, x.first_be, x.last_be) for x in mwr]}")
                if op == OP_WRITE:
                    assert not any(tb.mem[at - 64:at]) and not any(tb.mem[at + size:at + size + 64]), \
                        f"op {op} size {size}: bytes written outside transfer {t}"
        if op in (OP_READ, OP_READ_WRITE):
            assert sum(t.length for t in mrd) * 4 >= count * size and c["read_bytes"] == count * size
        assert all(t.length * 4 <= tb.mps for t in mwr), f"a write above MPS {tb.mps}"
        assert all(t.length * 4 <= tb.mrrs for t in mrd), f"a read above MRRS {tb.mrrs}"
        assert not any(crosses_4k(t) for t in mwr + mrd), "a request crosses a 4 KiB boundary"
        # The IP fills in the bus number only (requester ID enable 0): device and function are
        # the card's own header field, which must be the function's.
        me = tb.dev.functions[0].pcie_id
        wrong = {str(t.requester_id) for t in mwr + mrd if t.requester_id != me}
        assert not wrong, f"requests with requester ID {wrong}, not the card's {me}"
        figures.append(f"{['rd', 'wr', 'rd+wr'][op]} {count}x{size} B@+{offset:#x} ({len(mrd)} MRd, {len(mwr)} MWr)")
    tb.ok()
    return f"MPS {tb.mps} MRRS {tb.mrrs}: " + ", ".join(figures)


@check
async def probe(dut):
    tb = Bench(dut)
    await tb.start()
    scratch = tb.regs.reg("ident.scratch")
    out = []
    for first, data in [(0, b"\x11\x22\x33\x44"), (1, b"\x55"), (2, b"\x66"), (3, b"\x77"), (1, b"\x88\x99"), (0, b"\xaa")]:
        before = {n: await tb.read32(f"request_path.{n}") for n in ("mem_writes", "malformed", "bus_errors", "posted_dropped")}
        await tb.bar0.write(scratch + first, data, timeout=20000)
        got = await tb.bar0.read(scratch, 4, timeout=20000)
        after = {n: await tb.read32(f"request_path.{n}") for n in ("mem_writes", "malformed", "bus_errors", "posted_dropped")}
        out.append(f"+{first} {data.hex()} -> {got.hex()} {dict((k, after[k]-before[k]) for k in after)}")
    return " | ".join(out)


def decode_record(raw):
    """A 32-byte spy record (traces/FORMAT.md): the fields this testbench compares."""
    w = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(8)]
    r = {"seq": w[0], "dir": "up" if w[3] & 1 else "down", "fmt": (w[3] >> 1) & 7, "type": (w[3] >> 4) & 0x1F,
         "length": (w[3] >> 15) & 0x3FF, "own": (w[3] >> 25) & 1, "tag": (w[4] >> 16) & 0xFF}
    r["msi"] = r["fmt"] == 7 and r["type"] == 4
    r["cpl"] = r["type"] == 0b01010
    r["kind"] = "MSI" if r["msi"] else ("CplD" if r["fmt"] & 2 else "Cpl") if r["cpl"] else \
        ("MWr" if r["fmt"] & 2 else "MRd") if r["type"] == 0 else f"type{r['type']:05b}"
    r["address"] = None if r["cpl"] or r["msi"] else (w[5] | (w[6] << 32))
    return r


@check
async def spy(dut):
    tb = Bench(dut, mps=256, mrrs=512)
    await tb.start()
    regs = tb.regs
    ring, ring_log2 = 0x80000, 10
    ring_end = tb.mem_base + ring + 32 * (1 << ring_log2)
    await tb.write32("spy.control", regs.encode("spy.control", clear=1))
    await tb.write64("spy.ring_base", tb.mem_base + ring)
    for name, value in [("ring_size_log2", ring_log2), ("payload_size_log2", 8), ("flush_cycles", 64),
                        ("rd_index", 0)]:
        await tb.write32(f"spy.{name}", value)
    fill_pattern(tb, 0x10000, 0x8000)
    enable = tb.regs.reg("spy.control")
    mark = len(tb.witness.log)
    await tb.write32("spy.control", regs.encode("spy.control", enable=1))
    msis_before = tb.msis
    c_wr = await generator_run(tb, OP_WRITE, 512, 4, tb.mem_base + 0x10000, payload=tb.mps, request=tb.mrrs)
    fill_pattern(tb, 0x10000, 0x8000)
    c_rd = await generator_run(tb, OP_READ, 768, 3, tb.mem_base + 0x10000, payload=tb.mps, request=tb.mrrs)
    await tb.write32("spy.control", 0)
    msis = tb.msis - msis_before
    await Timer(3, "us")                                  # the flush timer writes the last records
    written = await tb.read32("spy.wr_index")
    lost = await tb.read32("spy.lost")
    assert lost == 0 and 0 < written <= 1 << ring_log2, f"{written} records, {lost} lost"
    records = [decode_record(tb.mem[ring + 32 * i:ring + 32 * i + 32]) for i in range(written)]
    assert [r["seq"] for r in records] == list(range(written)), "records out of sequence"
    tlps = [r for r in records if not r["msi"] and not r["own"]]

    # The witness over the same span: the TLPs that cross the hard IP's user interface (not the
    # configuration requests it answers itself, nor the MSIs it makes, nor the spy's own ring
    # writes), from just after the write that enabled capture to the one that disabled it.
    link = [(d, t) for d, t in tb.witness.log[mark:]
            if kind(t) in ("MRd", "MWr", "CplD", "Cpl") and t.address != tb.pdev.msi_vectors[0].addr
            and not (d == "up" and kind(t) == "MWr" and tb.mem_base + ring <= t.address < ring_end)]
    enable_value = regs.encode("spy.control", enable=1).to_bytes(4, "little")
    first = next(i for i, (d, t) in enumerate(link) if d == "down" and kind(t) == "MWr" and
                 (t.address & (tb.board["bar0_size"] - 1)) == enable and bytes(t.get_data()) == enable_value)
    # The write that disables capture is the last recorded (posted: it may reach the link
    # after write32 returns, so it is found, not assumed).
    last = next(i for i, (d, t) in enumerate(link) if i > first and d == "down" and kind(t) == "MWr" and
                (t.address & (tb.board["bar0_size"] - 1)) == enable and bytes(t.get_data()) == bytes(4))
    link = link[first + 1:last + 1]

    def key(d, k, length, address, tag):
        if k in ("CplD", "Cpl"):
            return (k, length, tag)
        if d == "down":
            address &= tb.board["bar0_size"] - 1
        return (k, length, address)

    compared = 0
    for direction in ("down", "up"):
        want = [key(d, kind(t), t.length if kind(t) != "Cpl" else 0, t.address, t.tag) for d, t in link if d == direction]
        got = [key(direction, r["kind"], r["length"] if r["kind"] != "Cpl" else 0, r["address"] or 0, r["tag"])
               for r in tlps if r["dir"] == direction]
        assert got == want, (f"{direction}: spy {len(got)} records, witness {len(want)} TLPs; first difference at "
                             f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}: "
                             f"spy {got[:3]} ... witness {want[:3]}")
        compared += len(want)
    msi_records = [r for r in records if r["msi"]]
    assert len(msi_records) == msis == 2, f"{len(msi_records)} MSI records, {msis} MSIs at the root complex"
    assert c_wr["write_requests"] == len([r for r in tlps if r["kind"] == "MWr" and r["dir"] == "up"])
    tb.ok()
    return (f"{written} records, none lost: {compared} TLPs equal to the witness's in type, length, address or "
            f"tag, in order per direction; {len(msi_records)} MSI records = {msis} MSIs; "
            f"{len(records) - len(tlps) - len(msi_records)} own")


@check
async def interrupts(dut):
    tb = Bench(dut)
    await tb.start()
    regs = tb.regs
    # The generator: one MSI per run.
    before = tb.msis
    for _ in range(2):
        await generator_run(tb, OP_WRITE, 64, 2, tb.mem_base + 0x10000, payload=tb.mps, request=tb.mrrs)
    generator = tb.msis - before

    # The interrupt timer: N fires, each acknowledged from the MSI handler as a driver would.
    fires = 4
    t = "irq_timer"
    await tb.write32(f"{t}.control", regs.encode(f"{t}.control", clear=1))
    await tb.write32(f"{t}.config", 0)
    await tb.write32(f"{t}.min_interval", 500)
    await tb.write32(f"{t}.max_interval", 500)
    await tb.write32(f"{t}.count", fires)
    bit = tb.msi_bit("irq_timer")
    await tb.write32("pcie_msi.enable", bit)
    before = tb.msis
    await tb.write32(f"{t}.control", regs.encode(f"{t}.control", start=1))
    for n in range(1, fires + 1):
        await tb.wait_msi()
        await tb.write32("pcie_msi.clear", bit)
        await tb.write32(f"{t}.ack_isr", n)
        await tb.write32(f"{t}.ack_user", n)
    timer = tb.msis - before
    counted = await tb.read32(f"{t}.fires")
    isr = await tb.read32(f"{t}.isr_count")
    assert timer == counted == isr == fires, f"timer: {timer} MSIs, {counted} fires, {isr} ISR samples"

    # The slot: rule 30 with its interrupt enabled.
    from tlpx_gateware.cores.rule30 import reference as ref
    from tlpx_gateware.cores.rule30.core import CONTROL_IRQ_ENABLE, STATUS_COMPLETE, Register
    from tlpx_gateware.soc import RULE30_WINDOW_BASE
    window = RULE30_WINDOW_BASE
    bit = tb.msi_bit("slot")
    await tb.write32("pcie_msi.enable", bit)
    before = tb.msis
    rng = random.Random(30)
    runs = 2
    for _ in range(runs):
        line = "".join(rng.choice("01") for _ in range(96))
        for register, value in [(Register.RULE_SET, 30), (Register.LINE_LENGTH, len(line)), (Register.GENERATIONS, 1),
                                (Register.CONTROL, CONTROL_IRQ_ENABLE)]:
            await tb.bar0.write(window + int(register), value.to_bytes(4, "little"), timeout=20000)
        words = ref.chars_to_words(line)
        await tb.bar0.write(window + int(Register.INPUT), b"".join(w.to_bytes(4, "little") for w in words), timeout=20000)
        await tb.bar0.write(window + int(Register.START_COMPUTE), (1).to_bytes(4, "little"), timeout=20000)
        await tb.wait_msi()
        out = await tb.bar0.read(window + int(Register.OUTPUT), 4 * ref.WORDS, timeout=20000)
        got = ref.words_to_chars([int.from_bytes(out[4 * i:4 * i + 4], "little") for i in range(ref.WORDS)], len(line))
        assert got == ref.step_chars(line), "rule 30's output differs from the reference"
        await tb.write32("pcie_msi.clear", bit)
        await tb.bar0.write(window + int(Register.STATUS), STATUS_COMPLETE.to_bytes(4, "little"), timeout=20000)
    slot = tb.msis - before
    slot_irqs = await tb.read32("slot.irqs")
    assert slot == slot_irqs == runs, f"slot: {slot} MSIs, slot.irqs {slot_irqs}"
    assert generator == 2
    # 32 vectors granted: each source's MSIs arrived on its own vector (the card's number,
    # through LitePCIe's wrapper with tlpx's encoder), none elsewhere.
    by_source = {regs.constant(f"MSI_{s.upper()}"): n for s, n in (("generator", 2), ("irq_timer", fires), ("slot", runs))}
    got = {v: n for v, n in enumerate(tb.msi_by_vector) if n}
    assert got == by_source, f"MSIs per vector {got}, the sources' vectors {by_source}"
    tb.ok()
    return (f"MSIs at the root complex's handler = the card's counts: generator {generator} runs, irq timer "
            f"{timer} fires (fires {counted}, ISR samples {isr}), slot {slot} (slot.irqs {slot_irqs}, rule-30 "
            f"output = reference); each on its source's vector of 32 granted ({got})")


async def timer_fires(tb, vectors, fires):
    """The interrupt timer raising `vectors` in turn (vector_mode rotate), `fires` fires each
    acknowledged from the handler; -> MSIs per vector at the root complex over them."""
    regs, t = tb.regs, "irq_timer"
    mask = sum(1 << v for v in vectors)
    await tb.write32(f"{t}.control", regs.encode(f"{t}.control", clear=1))
    await tb.write32(f"{t}.config", 0)
    await tb.write32(f"{t}.min_interval", 500)
    await tb.write32(f"{t}.max_interval", 500)
    await tb.write32(f"{t}.count", fires)
    await tb.write32(f"{t}.vectors", mask)
    await tb.write32(f"{t}.vector_mode", 0)
    await tb.write32("pcie_msi.enable_set", mask)
    before = list(tb.msi_by_vector)
    await tb.write32(f"{t}.control", regs.encode(f"{t}.control", start=1))
    for n in range(1, fires + 1):
        await tb.wait_msi()
        await tb.write32(f"{t}.ack_isr", n)
        await tb.write32(f"{t}.ack_user", n)
    return {v: b - a for v, (a, b) in enumerate(zip(before, tb.msi_by_vector)) if b != a}


@check
async def vectors(dut):
    """Multi-message MSI through pcie3_ultrascale: the timer's vectors each arrive as their own
    message with all 32 granted; with 4 granted (the root complex writes Multiple Message
    Enable 2) a vector above the grant folds into the last granted one (the model refuses a
    message number outside the grant, so nothing beyond it can pass)."""
    tb = Bench(dut)
    await tb.start()
    spread = [8, 9, 17, 31]
    got32 = await timer_fires(tb, spread, 8)
    assert got32 == {v: 2 for v in spread}, f"32 granted: MSIs per vector {got32}, want 2 on each of {spread}"
    ctrl = await tb.pdev.capability_read_word(PciCapId.MSI, 0x2)
    await tb.pdev.capability_write_word(PciCapId.MSI, 0x2, (ctrl & ~(7 << 4)) | (2 << 4))
    for _ in range(20):
        granted = await tb.read32("pcie_msi.granted")
        if granted == 4:
            break
    assert granted == 4, f"pcie_msi.granted {granted} after the root complex granted 4"
    got4 = await timer_fires(tb, [1, 8], 4)
    assert got4 == {1: 2, 3: 2}, f"4 granted: MSIs per vector {got4}, want vector 1 twice and 8 folded into 3 twice"
    tb.ok()
    return (f"32 granted: the timer's vectors {spread} arrived as {got32}; 4 granted (MME 2): vectors 1 and 8 "
            f"arrived as {got4} (8 folded into 3), pcie_msi.granted {granted}")


# The hard IP's completion timeout for a request nothing answers. PG156: the IP times the
# request out itself (the range is Device Control 2's, 50 us at the least) and gives the user a
# completion with error code "timeout", freeing the tag. cocotbext-pcie 0.2.16 has no such
# timer (the tag stays active for ever): the testbench plays the IP's part, after a shorter
# time than a real IP's (simulation time is dear) but longer than the card's own timeout.
IP_COMPLETION_TIMEOUT_US = 8


class Faults:
    """The root complex's memory reads, answered as a fault list says: the n-th read of the
    card (from 0) gets "ur", "ca" or "drop" (no completion; the IP's timeout follows), the
    others are served."""

    def __init__(self, tb, faults):
        self.tb, self.faults, self.reads = tb, dict(faults), 0
        self.timed_out = 0
        rc = tb.rc
        self.serve = rc.rx_tlp_handler[TlpType.MEM_READ]
        for t in (TlpType.MEM_READ, TlpType.MEM_READ_64):
            rc.register_rx_tlp_handler(t, self.handle)

    async def ip_timeout(self, tlp):
        await Timer(IP_COMPLETION_TIMEOUT_US, "us")
        dev = self.tb.dev
        cpl = Tlp_us(Tlp.create_completion_for_tlp(tlp, PcieId(0, 0, 0)))
        cpl.error_code = ErrorCode.TIMEOUT
        cpl.request_completed = True
        cpl.byte_count = tlp.get_be_byte_count()
        dev.active_request[tlp.tag] = None
        dev.tag_available_count = dev.get_available_tag_count()
        await dev.rc_queue.put(cpl)
        self.timed_out += 1

    async def handle(self, tlp):
        n, self.reads = self.reads, self.reads + 1
        fault = self.faults.get(n)
        if fault == "drop":
            cocotb.start_soon(self.ip_timeout(tlp))
            return
        if fault in ("ur", "ca"):
            make = Tlp.create_ur_completion_for_tlp if fault == "ur" else Tlp.create_ca_completion_for_tlp
            await self.tb.rc.send(make(tlp, PcieId(0, 0, 0)))
            return
        await self.serve(tlp)


@check
async def errors(dut):
    tb = Bench(dut)
    await tb.start()
    regs = tb.regs
    fill_pattern(tb, 0x10000, 0x4000)
    # The generator: its 2nd read answered UR, its 4th CA, its 6th never; each run ends with the
    # error counted and the next run is clean.
    await tb.write32("generator.timeout", 1000)     # 4 us: the card gives up before the IP (8 us)
    results = []
    for fault, counter in [("ur", "err_ur"), ("ca", "err_ca"), ("drop", "err_timeouts")]:
        faults = Faults(tb, {1: fault})
        c = await generator_run(tb, OP_READ, 256, 4, tb.mem_base + 0x10000, payload=tb.mps, request=tb.mrrs,
                                timeout=1000)
        assert c[counter] == 1, f"{fault}: {counter} = {c[counter]}"
        faults.faults = {}
        clean = await generator_run(tb, OP_READ, 256, 4, tb.mem_base + 0x10000, payload=tb.mps, request=tb.mrrs,
                                    timeout=1000)
        errs = {k: v for k, v in clean.items() if k.startswith("err_") and v}
        assert not errs and clean["transfers"] == 4, f"the run after {fault}: {errs}"
        results.append(f"{fault} -> {counter} 1, next run clean")
    # A read longer than the request path serves (32 DWs) gets the card's Completer Abort: it
    # must reach the root complex as CA (LitePCIe's CC adapter builds the IP's descriptor).
    too_long = await tb.read32("request_path.reads_too_long")
    mark = len(tb.witness.log)
    try:
        await tb.bar0.read(tb.regs.reg("ident.magic"), 4 * 64, timeout=20000)
        answered = "data"
    except Exception as e:
        answered = f"{type(e).__name__}"
    cpls = [t for d, t in tb.witness.log[mark:] if d == "up" and kind(t) in ("Cpl", "CplD")]
    assert await tb.read32("request_path.reads_too_long") == too_long + 1
    assert [t.status for t in cpls] == [CplStatus.CA], \
        f"64-DW read: completions {[(kind(t), t.status.name, t.length) for t in cpls]}, read gave {answered}"
    results.append("64-DW BAR0 read -> CA")
    # A read of a BAR0 offset nothing decodes: answered as the request path promises (zero data,
    # counted as a bus error), and the card answers the next request.
    bus_errors = await tb.read32("request_path.bus_errors")
    unmapped = await tb.bar0.read(0xF0000, 4, timeout=20000)
    after = await tb.read32("request_path.bus_errors")
    assert unmapped == bytes(4) and after == bus_errors + 1, f"unmapped read {unmapped.hex()}, bus_errors {bus_errors} -> {after}"
    magic = await tb.read32("ident.magic")
    assert magic == regs.constant("IDENT_MAGIC")
    tb.ok()
    return "generator: " + "; ".join(results) + "; unmapped BAR0 read: zeros, counted, next read answered"


@check(card="pci_epf_test")
async def slot(dut):
    """Linux's pci-epf-test in the slot (accelerators/pci_epf_test): WRITE, READ and COPY by DMA
    through the model's memory with their CRC-32 (crc32_le(~0), as pci_endpoint_test), one MSI
    each; the fault switch turns every transfer into a failure."""
    import zlib
    from tlpx_gateware.cores.slot.verilog import load_manifest
    manifest = load_manifest(Path(__file__).resolve().parents[4] / "accelerators" / "pci_epf_test" / "dut.toml")
    reg = {r["name"]: r for r in manifest.registers}

    def bit(register, field):
        return 1 << next(f["offset"] for f in reg[register]["fields"] if f["name"] == field)

    tb = Bench(dut)
    await tb.start()

    async def w(name, value):
        await tb.bar0.write(reg[name]["offset"], int(value).to_bytes(4, "little"), timeout=20000)

    async def r(name):
        return int.from_bytes(await tb.bar0.read(reg[name]["offset"], 4, timeout=20000), "little")

    async def command(cmd, size, src=0, dst=0, checksum=0):
        for name, value in [("size", size), ("checksum", checksum), ("src_addr_lo", tb.mem_base + src),
                            ("src_addr_hi", 0), ("dst_addr_lo", tb.mem_base + dst), ("dst_addr_hi", 0),
                            ("irq_type", 1), ("irq_number", 1), ("flags", 1)]:
            await w(name, value)
        before = tb.msis
        await w("command", bit("command", cmd))
        await tb.wait_msi(timeout_us=2000)
        st = await r("status")
        assert st & bit("status", "irq_raised") and tb.msis == before + 1, f"{cmd}: status {st:#x}, MSIs"
        await w("status", st & ~bit("status", "irq_raised"))   # as the driver's handler does
        return st, await r("checksum")

    def crc(data):
        return zlib.crc32(bytes(data)) ^ 0xFFFFFFFF

    assert await r("magic") is not None
    await w("magic", 0xA0A0A0A0)
    assert await r("magic") == 0xA0A0A0A0, "BAR test word"
    rng = random.Random(17)
    src, dst = 0x10000, 0x30000
    done = []
    for fault in (0, 1):
        await w("fault", fault)
        for size in (1, 1024, 1025):
            tb.mem[src:src + size] = bytes(rng.randrange(256) for _ in range(size))
            tb.mem[dst:dst + size + 8] = bytes(size + 8)
            st, checksum = await command("write", size, dst=dst)
            ok = st & bit("status", "write_success") and checksum == crc(tb.mem[dst:dst + size])
            assert bool(ok) != bool(fault), f"WRITE {size} fault {fault}: status {st:#x}, CRC match {checksum == crc(tb.mem[dst:dst + size])}"
            st, _ = await command("read", size, src=src, checksum=crc(tb.mem[src:src + size]))
            assert bool(st & bit("status", "read_success")) != bool(fault), f"READ {size} fault {fault}: status {st:#x}"
            tb.mem[dst:dst + size] = bytes(size)
            st, _ = await command("copy", size, src=src, dst=dst)
            same = tb.mem[dst:dst + size] == tb.mem[src:src + size]
            assert bool(st & bit("status", "copy_success") and same) != bool(fault), f"COPY {size} fault {fault}: same {same}"
            assert not any(tb.mem[dst + size:dst + size + 8]), f"COPY {size}: bytes beyond the buffer"
            done.append(size)
    await w("fault", 0)
    tb.ok()
    return (f"WRITE/READ/COPY of {', '.join(map(str, sorted(set(done))))} bytes: CRC-32 and data right, one MSI "
            f"each ({tb.msis} MSIs); with the fault switch all 9 transfers fail")


def config_fields(cfg):
    """What a host reads of a function's configuration space (PCI 3.0 / PCIe Base 7.5):
    identity, BAR0, the capabilities and their capability fields (not the control state a
    driver sets), by name."""
    def u(off, n):
        return int.from_bytes(cfg[off:off + n], "little")
    f = {"vendor:device": f"{u(0, 2):04x}:{u(2, 2):04x}", "class": f"{u(9, 3):06x}", "revision": u(8, 1),
         "subsystem": f"{u(0x2C, 2):04x}:{u(0x2E, 2):04x}", "interrupt pin": u(0x3D, 1),
         "BAR0 type": {0: "32-bit memory", 4: "64-bit memory"}.get(u(0x10, 4) & 0xF, f"{u(0x10, 4) & 0xF:#x}")}
    caps, ptr = [], u(0x34, 1) & 0xFC
    while ptr and len(caps) < 48:
        cid = u(ptr, 1)
        caps.append((cid, ptr))
        if cid == 0x01:
            f["PM version"] = u(ptr + 2, 2) & 7
        elif cid == 0x05:
            ctrl = u(ptr + 2, 2)
            f["MSI 64-bit"] = bool(ctrl & 0x80)
            f["MSI vectors capable"] = 1 << ((ctrl >> 1) & 7)
            f["MSI per-vector mask"] = bool(ctrl & 0x100)
        elif cid == 0x11:
            f["MSI-X table size"] = (u(ptr + 2, 2) & 0x7FF) + 1
        elif cid == 0x10:
            devcap, lnkcap = u(ptr + 4, 4), u(ptr + 0xC, 4)
            f["PCIe device type"] = (u(ptr + 2, 2) >> 4) & 0xF
            f["MPS supported"] = 128 << (devcap & 7)
            f["Extended Tag supported"] = bool(devcap & 0x20)
            f["FLR capable"] = bool(devcap & (1 << 28))
            f["link capability"] = f"Gen{lnkcap & 0xF} x{(lnkcap >> 4) & 0x3F}"
        ptr = u(ptr + 1, 1) & 0xFC
    f["capabilities"] = " ".join({0x01: "PM", 0x05: "MSI", 0x10: "PCIe", 0x11: "MSI-X"}.get(c, f"{c:#x}") for c, _ in caps)
    f["capability offsets"] = " ".join(f"{c:#04x}@{p:#04x}" for c, p in caps)
    ext = u(0x100, 4) if len(cfg) > 0x100 else 0
    f["extended capabilities"] = f"{ext & 0xFFFF:#06x}" if ext not in (0, 0xFFFFFFFF) else "none"
    return f


# Fields where the model and the real IP may lay things out differently without a host reading
# anything else: where each capability sits.
LAYOUT_FIELDS = {"capability offsets"}


@check
async def config_space(dut):
    """The model's configuration space of the hard IP (as configured for the board) beside
    tlpx-sim's for the same board and link (`tlpx-sim --board kcu105 --print-config`)."""
    import subprocess
    tb = Bench(dut, mps=256, mrrs=512)
    await tb.start()
    # The header, then each capability's registers that config_fields reads: cocotbext-pcie
    # 0.2.16 answers some other offsets inside its MSI capability with nothing (its receive
    # task then fails on struct.pack(None)), a gap of the model, not of the IP.
    model = bytearray(0x104)
    model[0:0x40] = await tb.pdev.config_read(0, 0x40)
    ptr = model[0x34] & 0xFC
    while ptr:
        head = await tb.pdev.config_read(ptr, 4)
        length = 0x10 if head[0] == 0x10 else 4
        model[ptr:ptr + length] = head + (await tb.pdev.config_read(ptr + 4, length - 4) if length > 4 else b"")
        ptr = head[1] & 0xFC
    model[0x100:0x104] = await tb.pdev.config_read(0x100, 4)
    model = bytes(model)
    (OUTPUT / "model_config.bin").write_bytes(model)
    root = Path(__file__).resolve().parents[4]
    sim = root / "host" / "target" / "release" / "tlpx-sim"
    card = root / "build" / "card" / f"dw{tb.board['data_width']}" / "libtlpxcard.so"
    assert sim.exists() and card.exists(), f"needs {sim} (make host) and {card} (make gateware-all)"
    # --msi-vectors: the board's IP offers 32 (tlpx-sim's default is one, what stock drivers expect).
    proc = subprocess.run([str(sim), "--card", str(card), "--board", tb.board["board"], "--gen", str(tb.board["gen"]),
                           "--lanes", str(tb.board["lanes"]), "--mps", "256", "--mrrs", "512",
                           "--msi-vectors", str(MSI_VECTORS), "--print-config"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"tlpx-sim --print-config: {proc.stderr.strip()}"
    sim_cfg = bytearray(0x104)
    for line in proc.stdout.splitlines()[1:]:
        off, _, rest = line.partition(":")
        if not off.strip():
            continue
        base = int(off, 16)
        for i, b in enumerate(rest.split()):
            if base + i < len(sim_cfg):
                sim_cfg[base + i] = int(b, 16)
    a, b = config_fields(model), config_fields(bytes(sim_cfg))
    differ = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
    (OUTPUT / "config_compare.json").write_text(json.dumps(
        {"model": a, "tlpx_sim": b, "differences": {k: {"model": m, "tlpx_sim": s} for k, (m, s) in differ.items()}},
        indent=2) + "\n")
    # What a host decides by must agree: identity, BAR, MSI, payload, tags, link.
    must = {k: v for k, v in differ.items() if k not in LAYOUT_FIELDS and k not in ("capabilities", "extended capabilities")}
    assert not must, "tlpx-sim presents what the board's IP does not: " + "; ".join(
        f"{k}: model {m!r}, tlpx-sim {s!r}" for k, (m, s) in must.items())
    listed = "; ".join(f"{k}: model {m}, tlpx-sim {s}" for k, (m, s) in differ.items())
    return f"{len(a)} fields compared, equal but for layout and capabilities a host does not use here: {listed}"

"""A Verilog accelerator in the slot, from its manifest (interface v1).

```
 dut.toml ──load_manifest()──► Manifest (checked once) ──make(...)──► VerilogSlotUser
                                                                      │
 slot window (LiteX Wishbone, adr in DWs) ─► byte addresses ─► wb_*   │  Instance(top)
 cpl (completions, slot tags) ─► DmaMover ─► rd_* / ◄─ wr_* ─────────►│  (the user's Verilog,
 tx ◄─ DmaMover (MRd/MWr)                                             │   verilated with the card)
 irq, busy ◄──────────────────────────────────────────────────────────┘
```

The manifest (TOML; docs/accelerators.md; accelerators/pci_epf_test/dut.toml is the worked
example):

    [dut]
    name = "pci_epf_test"        # 1..16 of [a-z0-9_], starting with a letter or _: the region's
                                 # name in csr.json and tlpx reg, slot.dut_name
    version = "1.0"              # "major.minor", each 0..65535 (default "1.0")
    top = "tlpx_pci_epf_test"    # the top module, with interface v1's ports
    sources = ["pci_epf_test.v"] # Verilog files, relative to the manifest
    window_bytes = 4096          # power of two, 4096..SLOT_WINDOW_MAX (default 4096)
    placement = "bar0"           # "window" (default) or "bar0"
    interface = 1                # SLOT_INTERFACE_VERSION
    interrupt_vectors = true     # optional (default false): the module also has the ports
                                 # input [5:0] msi_vectors (vectors the host granted, 1..32),
                                 # input msix_enabled (MSI-X on, MSI off) and
                                 # output [4:0] irq_vector (the vector of each irq pulse)

    [[register]]                 # any number, for csr.json / tlpx reg
    name = "magic"               # [a-z_][a-z0-9_]*, unique
    offset = 0x00                # bytes in the window, DW aligned
    access = "rw"                # ro | rw | wo
    description = "..."
    size_bits = 32               # optional, 1..64 (default 32)
    reset = 0                    # optional
    fields = [{ name = "...", offset = 0, size = 1, description = "...", access = "rw" }]  # optional

Every value is checked with an error that names it and what is accepted (ManifestError);
nothing is guessed. The module's Verilog is only read here: Verilator checks it when the card
is built.
"""

import re
import tomllib
from pathlib import Path

from migen import *

from litex.gen import *
from litex.soc.interconnect import wishbone

from tlpx_gateware.cores.slot.core import (DUT_NAME_BYTES, PLACEMENTS, SLOT_INTERFACE_VERSION, SLOT_TAG_BASE,
    SLOT_TAGS, SLOT_WINDOW_BASE, SLOT_WINDOW_MAX)
from tlpx_gateware.cores.slot.dma import DmaMover

MIN_WINDOW_BYTES = 4096
ACCESSES = ("ro", "rw", "wo")
NAME_RE = re.compile(r"[a-z_][a-z0-9_]*\Z")
VERILOG_ID_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
DUT_KEYS = {"name", "version", "top", "sources", "window_bytes", "placement", "interface", "interrupt_vectors"}
DUT_REQUIRED = ("name", "top", "sources")
REGISTER_KEYS = {"name", "offset", "access", "description", "size_bits", "reset", "fields"}
FIELD_KEYS = {"name", "offset", "size", "description", "access"}
# File names the card's build writes next to the user's sources.
RESERVED_FILES = {"tlpx_card.v"}


class ManifestError(ValueError):
    pass


def _int(where, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ManifestError(f"{where} must be an integer {lo:#x}..{hi:#x}, not {value!r}")
    return value


def _str(where, value):
    if not isinstance(value, str):
        raise ManifestError(f"{where} must be a string, not {value!r}")
    return value


def _keys(where, table, allowed, required=()):
    if not isinstance(table, dict):
        raise ManifestError(f"{where} must be a table, not {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ManifestError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(allowed))}")
    missing = [k for k in required if k not in table]
    if missing:
        raise ManifestError(f"{where}: missing {', '.join(missing)}")


def _name(where, value, max_len=None):
    _str(where, value)
    if not NAME_RE.match(value) or (max_len and len(value) > max_len):
        limit = f"1..{max_len} " if max_len else ""
        raise ManifestError(f"{where} must be {limit}characters of [a-z0-9_] starting with a letter or _, not {value!r}")
    return value


class Manifest:
    """A checked manifest: ``name``, ``version`` (major, minor), ``top``, ``sources`` {file name:
    text}, ``window_bytes``, ``placement``, ``registers`` (csr.json register dicts, offsets in
    the window); ``make(...)`` builds the slot user."""

    def __init__(self, path):
        self.path = path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ManifestError(f"cannot read the manifest {path}: {e.strerror or e}")
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ManifestError(f"{path} is not valid TOML: {e}")
        _keys("the manifest", doc, {"dut", "register"}, required=("dut",))
        dut = doc["dut"]
        _keys("[dut]", dut, DUT_KEYS, required=DUT_REQUIRED)
        self.name = _name("dut.name", dut["name"], DUT_NAME_BYTES)
        version = _str("dut.version", dut.get("version", "1.0"))
        m = re.fullmatch(r"(\d+)\.(\d+)", version)
        if not m or not all(int(v) < 2**16 for v in m.groups()):
            raise ManifestError(f"dut.version must be \"major.minor\", each 0..65535, not {version!r}")
        self.version = (int(m.group(1)), int(m.group(2)))
        self.top = _str("dut.top", dut["top"])
        if not VERILOG_ID_RE.match(self.top):
            raise ManifestError(f"dut.top must be a Verilog module name, not {self.top!r}")
        interface = dut.get("interface", SLOT_INTERFACE_VERSION)
        if interface != SLOT_INTERFACE_VERSION:
            raise ManifestError(f"dut.interface must be {SLOT_INTERFACE_VERSION} (the slot interface this card "
                                f"implements), not {interface!r}")
        self.window_bytes = _int("dut.window_bytes", dut.get("window_bytes", MIN_WINDOW_BYTES),
                                 MIN_WINDOW_BYTES, SLOT_WINDOW_MAX)
        if self.window_bytes & (self.window_bytes - 1):
            raise ManifestError(f"dut.window_bytes must be a power of two {MIN_WINDOW_BYTES:#x}..{SLOT_WINDOW_MAX:#x}, "
                                f"not {self.window_bytes:#x}")
        self.placement = _str("dut.placement", dut.get("placement", "window"))
        if self.placement not in PLACEMENTS:
            raise ManifestError(f"dut.placement must be one of {', '.join(PLACEMENTS)}, not {self.placement!r}")
        vectors = dut.get("interrupt_vectors", False)
        if not isinstance(vectors, bool):
            raise ManifestError(f"dut.interrupt_vectors must be true or false, not {vectors!r}")
        self.interrupt_vectors = vectors
        self.sources = self._read_sources(dut["sources"])
        if not any(re.search(rf"\bmodule\s+{re.escape(self.top)}\b", text) for text in self.sources.values()):
            raise ManifestError(f"dut.top: no module {self.top} in {', '.join(self.sources)}")
        self.registers = self._registers(doc.get("register", []))

    def _read_sources(self, sources):
        if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
            raise ManifestError(f"dut.sources must be a non-empty list of file names, not {sources!r}")
        files = {}
        for s in sources:
            p = self.path.parent / s
            if Path(s).is_absolute():
                raise ManifestError(f"dut.sources: {s!r} must be relative to the manifest's folder")
            if not s.endswith((".v", ".sv", ".vh")):
                raise ManifestError(f"dut.sources: {s!r} is not a Verilog file (.v, .sv, .vh)")
            if p.name in files or p.name in RESERVED_FILES:
                raise ManifestError(f"dut.sources: file name {p.name!r} is used twice or by the card; rename it")
            try:
                files[p.name] = p.read_text()
            except OSError as e:
                raise ManifestError(f"dut.sources: cannot read {p}: {e.strerror or e}")
        return files

    def _registers(self, registers):
        if not isinstance(registers, list):
            raise ManifestError(f"register must be an array of tables ([[register]]), not {registers!r}")
        out, spans, names = [], [], set()
        for i, r in enumerate(registers):
            _keys(f"register #{i + 1}", r, REGISTER_KEYS, required=("name", "offset", "access"))
            name = _name(f"register #{i + 1} name", r["name"])
            where = f"register {name}"
            if name in names:
                raise ManifestError(f"{where}: the name is used twice")
            names.add(name)
            size_bits = _int(f"{where} size_bits", r.get("size_bits", 32), 1, 64)
            words = (size_bits + 31) // 32
            offset = _int(f"{where} offset", r["offset"], 0, self.window_bytes - 4 * words)
            if offset % 4:
                raise ManifestError(f"{where} offset must be a multiple of 4, not {offset:#x}")
            for other, lo, hi in spans:
                if offset < hi and lo < offset + 4 * words:
                    raise ManifestError(f"{where} at {offset:#x} overlaps register {other} at {lo:#x}")
            spans.append((name, offset, offset + 4 * words))
            access = r["access"]
            if access not in ACCESSES:
                raise ManifestError(f"{where} access must be one of {', '.join(ACCESSES)}, not {access!r}")
            reset = _int(f"{where} reset", r.get("reset", 0), 0, 2**size_bits - 1)
            out.append({
                "name": name, "offset": offset, "size_bits": size_bits, "words": words, "access": access,
                "reset": reset, "description": _str(f"{where} description", r.get("description", "")).strip(),
                "fields": self._fields(where, r.get("fields", []), size_bits, access),
            })
        return sorted(out, key=lambda r: r["offset"])

    def _fields(self, where, fields, size_bits, access):
        if not isinstance(fields, list):
            raise ManifestError(f"{where} fields must be a list of tables, not {fields!r}")
        out, used = [], 0
        for j, f in enumerate(fields):
            _keys(f"{where} field #{j + 1}", f, FIELD_KEYS, required=("name", "offset", "size"))
            name = _name(f"{where} field #{j + 1} name", f["name"])
            fw = f"{where} field {name}"
            offset = _int(f"{fw} offset", f["offset"], 0, size_bits - 1)
            size = _int(f"{fw} size", f["size"], 1, size_bits - offset)
            bits = ((1 << size) - 1) << offset
            if used & bits:
                raise ManifestError(f"{fw} (bits {offset + size - 1}:{offset}) overlaps another field")
            if any(g["name"] == name for g in out):
                raise ManifestError(f"{fw}: the name is used twice")
            used |= bits
            faccess = f.get("access", access)
            if faccess not in ACCESSES:
                raise ManifestError(f"{fw} access must be one of {', '.join(ACCESSES)}, not {faccess!r}")
            out.append({"name": name, "offset": offset, "size": size, "access": faccess,
                        "description": _str(f"{fw} description", f.get("description", "")).strip(), "values": []})
        return out

    def regions(self, base=SLOT_WINDOW_BASE):
        """The DUT's register window as a csr.json region (absolute internal offsets)."""
        return [{"name": self.name, "offset": base, "owner": "dut",
                 "registers": [{**r, "offset": base + r["offset"]} for r in self.registers]}]

    def make(self, data_width, requester_id, cycles, clock_hz, base_domain):
        """The slot user (cores/slot/core.py's SlotUser contract)."""
        return VerilogSlotUser(self, data_width, requester_id, clock_hz)


def load_manifest(path):
    """The checked manifest at `path` (ManifestError naming the bad value otherwise)."""
    return Manifest(path)


class VerilogSlotUser(LiteXModule):
    """The user's top module (an Instance) behind the slot window, with the slot's DMA mover.

    Runs in the card's core clock domain (``sys``); ``busy`` (the module's, or the mover's)
    keeps that clock running on the simulated card."""
    def __init__(self, manifest, data_width, requester_id, clock_hz):
        self.dut_name = manifest.name
        self.dut_version = manifest.version
        self.window_bytes = manifest.window_bytes
        self.placement = manifest.placement
        self.manifest = manifest
        self.bus = wishbone.Interface(data_width=32)
        self.irq = Signal()
        if manifest.interrupt_vectors:
            # The DUT chooses each interrupt's vector among those the host granted (the
            # function's vectors, as its stock driver numbers them: cores/msi.py).
            self.irq_vector = Signal(5)
            # One vector until the card drives it (soc.py): a DUT outside the card (the slot's
            # own test bench) sees the single-vector host every stock driver starts from.
            self.msi_vectors_granted = Signal(6, reset=1)
            self.msix_enabled = Signal()
        self.busy = Signal()
        self.verilog_sources = dict(manifest.sources)
        self.mover = DmaMover(data_width, requester_id, SLOT_TAG_BASE, SLOT_TAGS, clock_hz=clock_hz)
        self.fence = self.mover.fence  # in: the slot is fenced (cores/slot/core.py): the mover refuses
        self.tx = self.mover.tx
        self.cpl = self.mover.cpl
        self.counters = self.mover.counters

        # # #

        m = self.mover
        window_dws_log2 = (manifest.window_bytes // 4).bit_length() - 1
        wb_adr = Signal(32)
        dut_busy = Signal()
        # The card's decoder selects the window; the low bits of the DW address are the offset.
        self.comb += wb_adr.eq(Cat(C(0, 2), self.bus.adr[:window_dws_log2]))
        self.specials += Instance(manifest.top,
            i_clk=ClockSignal(), i_rst=ResetSignal(),
            i_wb_adr=wb_adr, i_wb_dat_w=self.bus.dat_w, o_wb_dat_r=self.bus.dat_r, i_wb_sel=self.bus.sel,
            i_wb_cyc=self.bus.cyc, i_wb_stb=self.bus.stb, i_wb_we=self.bus.we, o_wb_ack=self.bus.ack,
            o_rd_req_valid=m.rd_req_valid, i_rd_req_ready=m.rd_req_ready, o_rd_req_addr=m.rd_req_addr,
            o_rd_req_len=m.rd_req_len, i_rd_valid=m.rd_valid, o_rd_ready=m.rd_ready, i_rd_data=m.rd_data,
            i_rd_last=m.rd_last, i_rd_error=m.rd_error,
            o_wr_req_valid=m.wr_req_valid, i_wr_req_ready=m.wr_req_ready, o_wr_req_addr=m.wr_req_addr,
            o_wr_req_len=m.wr_req_len, o_wr_valid=m.wr_valid, i_wr_ready=m.wr_ready, o_wr_data=m.wr_data,
            i_wr_done=m.wr_done, i_wr_error=m.wr_error,
            o_irq=self.irq, o_busy=dut_busy,
            **({"o_irq_vector": self.irq_vector, "i_msi_vectors": self.msi_vectors_granted,
                "i_msix_enabled": self.msix_enabled}
               if manifest.interrupt_vectors else {}))
        self.comb += [
            self.bus.err.eq(0),
            self.busy.eq(dut_busy | m.busy),
        ]

    def regions(self):
        return self.manifest.regions()

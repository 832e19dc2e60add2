"""accelerators/pci_epf_test's testbench (test/tb.cpp) driven by script, and the register
offsets and status bits of its manifest (dut.toml, read by the slot's own loader)."""

import subprocess
import zlib
from pathlib import Path

from tlpx_gateware.cores.slot.verilog import load_manifest

ACCEL = Path(__file__).resolve().parents[3] / "accelerators" / "pci_epf_test"
MAX_CYCLES = 20_000_000

MANIFEST = load_manifest(ACCEL / "dut.toml")
REG = {r["name"]: r for r in MANIFEST.registers}


def off(name):
    return REG[name]["offset"]


def bit(register, field):
    f = next(f for f in REG[register]["fields"] if f["name"] == field)
    return 1 << f["offset"]


def status(*names):
    return sum(bit("status", n) for n in names)


def crc32_le(data):
    """Linux's crc32_le(~0, data, len): zlib's CRC-32 without its final inversion."""
    return zlib.crc32(data) ^ 0xFFFFFFFF


class Script:
    """A tb script; run() returns the register reads and runs, in order."""
    def __init__(self, tb):
        self.tb, self.lines, self.files = tb, [], {}

    def __call__(self, *words):
        self.lines.append(" ".join(hex(w) if isinstance(w, int) else str(w) for w in words))

    def load(self, addr, data):
        path = self.tb / f"in{len(self.files)}.bin"
        path.write_bytes(data)
        self.files[path] = data
        self("load", addr, path)

    def dump(self, addr, length):
        path = self.tb / f"out{len(self.lines)}.bin"
        self("dump", addr, length, path)
        return path

    def command(self, cmd, size=None, src=None, dst=None, checksum=None, irq_type=1, irq_number=1):
        for name, value in (("size", size), ("checksum", checksum)):
            if value is not None:
                self("w", off(name), value)
        if src is not None:
            self("w", off("src_addr_lo"), src & 0xFFFFFFFF)
            self("w", off("src_addr_hi"), src >> 32)
        if dst is not None:
            self("w", off("dst_addr_lo"), dst & 0xFFFFFFFF)
            self("w", off("dst_addr_hi"), dst >> 32)
        self("w", off("irq_type"), irq_type)
        self("w", off("irq_number"), irq_number)
        self("w", off("flags"), 1)  # USE_DMA, as pcitest -d (accepted, always DMA)
        self("w", off("command"), bit("command", cmd))
        self("run", MAX_CYCLES)
        self("r", off("status"))
        self("r", off("checksum"))
        self("r", off("command"))

    def run(self, with_lines=False):
        proc = subprocess.run([str(self.tb / "tb")], input="\n".join(self.lines) + "\n",
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"tb failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        out = []
        for line in proc.stdout.splitlines():
            w = line.split()
            if w[0] == "r":
                out.append(int(w[2], 16))
            elif w[0] == "run":
                # The module's own bench prints the last interrupt's vector too; the slot's
                # (cores/slot/slot_tb.cpp) does not.
                out.append((int(w[1]), int(w[2]), int(w[3]) if len(w) > 3 else 0))
        return (out, proc.stdout.splitlines()) if with_lines else out


def results(values):
    """(cycles, irqs, status, checksum, command, vector of the last irq) per command of the
    script."""
    return [(values[i][0], values[i][1], values[i + 1], values[i + 2], values[i + 3], values[i][2])
            for i in range(0, len(values), 4)]


"""The pci_epf_test DUT as the card sees it: its Verilog with the slot's DMA mover, at TLP level.

```
 this test ──script──► slot_tb.cpp ── Wishbone (adr in DWs) ──► VerilogSlotUser (Migen -> Verilog)
                        host at TLP level ◄── tx: MRd/MWr ──────  DmaMover ◄─► tlpx_pci_epf_test
                        (memory, CplD split at RCB, UR) ── cpl ─►
```

What the card will run once the slot is built (cores/slot/core.py puts this user in the card):
the module's commands end to end through the mover, on every datapath width, with the
CRC against zlib, the interrupt, the counters the slot block shows, and an error completion
turning a READ into READ_FAIL.
"""

import os
import random
import subprocess
import zlib

import pytest
from migen import Module, Signal
from migen.fhdl.verilog import convert

from tlpx_gateware.build import verilator_root
from tlpx_gateware.cores.slot.core import SLOT_TAG_BASE, SLOT_TAGS
from tlpx_gateware.testing.pci_epf_test import MANIFEST, Script, crc32_le, results, status

SRC = 0x1_0000_1000
DST = 0x0800_0000     # below 4 GiB: 3-DW headers
HERE = os.path.dirname(os.path.abspath(__file__))


class SlotTop(Module):
    """The user with ports of fixed names for the testbench."""
    def __init__(self, user):
        self.submodules.user = user
        self.ios = set()

        def port(name, width, target, out=False):
            s = Signal(width, name=name)
            self.comb += (s.eq(target) if out else target.eq(s))
            self.ios.add(s)

        bus = user.bus
        for name, sig, out in (("wb_adr", bus.adr, False), ("wb_dat_w", bus.dat_w, False), ("wb_sel", bus.sel, False),
                               ("wb_cyc", bus.cyc, False), ("wb_stb", bus.stb, False), ("wb_we", bus.we, False),
                               ("wb_dat_r", bus.dat_r, True), ("wb_ack", bus.ack, True),
                               ("irq", user.irq, True), ("busy", user.busy, True)):
            port(name, len(sig), sig, out)
        for f in ("valid", "first", "last", "dat", "be"):
            port(f"tx_{f}", len(getattr(user.tx, f)), getattr(user.tx, f), out=True)
            port(f"cpl_{f}", len(getattr(user.cpl, f)), getattr(user.cpl, f))
        port("tx_ready", 1, user.tx.ready)
        port("cpl_ready", 1, user.cpl.ready, out=True)
        for name, sig in user.counters.items():
            port(name, len(sig), sig, out=True)


@pytest.fixture(scope="module", params=(64, 128, 256), ids=lambda w: f"dw{w}")
def tb(request, tmp_path_factory):
    width = request.param
    out = tmp_path_factory.mktemp(f"slot_tb_dw{width}")
    user = MANIFEST.make(data_width=width, requester_id=Signal(16, reset=0x0100), cycles=Signal(64),
                         clock_hz=125e6, base_domain="sys")
    top = SlotTop(user)
    convert(top, ios=top.ios, name="slot_top").write(str(out / "slot_top.v"))
    for name, text in user.verilog_sources.items():
        (out / name).write_text(text)
    root = verilator_root()
    cmd = [str(root / "bin" / "verilator"), "--cc", "--exe", "--build", "-j", "2", "-O2", "-Wno-fatal",
           "-Wno-WIDTH", "--top-module", "slot_top", "--prefix", "Vtop", "--Mdir", str(out / "obj"),
           "-o", str(out / "tb"), "-CFLAGS", f"-std=c++17 -DTLPX_DW={width} -DSLOT_TAG_BASE={SLOT_TAG_BASE} "
           f"-DSLOT_TAGS={SLOT_TAGS}", str(out / "slot_top.v"), *[str(out / n) for n in user.verilog_sources],
           os.path.join(HERE, "slot_tb.cpp")]
    proc = subprocess.run(cmd, env=dict(os.environ, VERILATOR_ROOT=str(root)), capture_output=True, text=True)
    assert proc.returncode == 0, f"verilator failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return out


@pytest.mark.parametrize("size", (1, 1025, 4097))
def test_commands_end_to_end(tb, size):
    data = random.Random(size).randbytes(size)
    s = Script(tb)
    s.load(SRC, data)
    s.command("read", size=size, src=SRC, checksum=crc32_le(data))
    s.command("write", size=size, dst=DST)
    written = s.dump(DST, size)
    s.command("copy", size=size, src=SRC, dst=DST + 0x10_0000)
    copied = s.dump(DST + 0x10_0000, size)
    s("cplerr", 1)
    s.command("read", size=size, src=SRC, checksum=crc32_le(data))
    s("cplerr", 0)
    s("counters")
    values, lines = s.run(with_lines=True)
    read, write, copy, failed = results(values)
    assert (read[1], read[2]) == (1, status("read_success", "irq_raised"))
    assert (write[1], write[2]) == (1, status("write_success", "irq_raised"))
    assert write[3] == crc32_le(written.read_bytes())
    assert (copy[1], copy[2]) == (1, status("copy_success", "irq_raised"))
    assert copied.read_bytes() == data and copy[3] == crc32_le(data)
    assert (failed[1], failed[2]) == (1, status("read_fail", "irq_raised"))
    reads, writes, read_bytes, write_bytes, errors = [int(v) for v in lines[-1].split()[1:]]
    assert (reads, writes, read_bytes, write_bytes, errors) == (3, 2, 2 * size, 2 * size, 1)


def test_one_megabyte_read(tb):
    size = 1024001
    data = random.Random(9).randbytes(size)
    s = Script(tb)
    s.load(SRC, data)
    s.command("read", size=size, src=SRC, checksum=crc32_le(data))
    ((cycles, irqs, st, _, _, _),) = results(s.run())
    assert st == status("read_success", "irq_raised") and irqs == 1
    print(f"1024001-byte READ through the mover: {cycles} cycles, {size / cycles:.2f} B/cycle")

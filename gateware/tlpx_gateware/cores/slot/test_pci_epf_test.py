"""accelerators/pci_epf_test alone: its Verilog against a host-memory model of the DMA port.

```
 this test ──script──► tb (accelerators/pci_epf_test/test/tb.cpp, Verilated with the module)
                          Wishbone master ──► tlpx_pci_epf_test ──rd_*/wr_*──► host memory model
 this test ◄──register values, cycles, interrupts, memory dumps──┘
```

The module is judged as Linux's pci_endpoint_test judges pci-epf-test: READ/WRITE/COPY at the
sizes pcitest.sh uses, the CRC against Python's zlib (crc32_le(~0) = ~zlib.crc32), the status
bits, one MSI per command, and the fault switch turning every transfer into a failure. The
register offsets and bits come from the manifest (dut.toml), read by the slot's own loader.
"""

import os
import random
import subprocess
import zlib

import pytest

from tlpx_gateware.build import verilator_root
from tlpx_gateware.testing.pci_epf_test import ACCEL, MANIFEST, Script, crc32_le, off, results, status

SIZES = (1, 1024, 1025, 1024000, 1024001)
SRC = 0x1_0000_1000       # 64-bit bus addresses, as an IOMMU-less host above 4 GiB
DST = 0x1_4000_0000


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    out = tmp_path_factory.mktemp("epf_tb")
    root = verilator_root()
    env = dict(os.environ, VERILATOR_ROOT=str(root))
    cmd = [str(root / "bin" / "verilator"), "--cc", "--exe", "--build", "-j", "2", "-O2",
           "--top-module", MANIFEST.top, "--prefix", "Vtop", "--Mdir", str(out / "obj"), "-o", str(out / "tb"),
           "-Wall", *[str(ACCEL / s) for s in MANIFEST.sources], str(ACCEL / "test" / "tb.cpp")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"verilator failed (warnings are errors here):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return out


@pytest.mark.parametrize("size", SIZES)
def test_read_write_copy_match_zlib(tb, size):
    data = random.Random(size).randbytes(size)
    s = Script(tb)
    s.load(SRC, data)
    s("fill", DST - 8, size + 16, 0xEE)
    s.command("read", size=size, src=SRC, checksum=crc32_le(data))
    s.command("write", size=size, dst=DST)
    written = s.dump(DST - 8, size + 16)
    s("fill", DST, size + 8, 0x55)
    s.command("copy", size=size, src=SRC, dst=DST)
    copied = s.dump(DST, size + 8)
    read, write, copy = results(s.run())

    assert read[2] == status("read_success", "irq_raised") and read[1] == 1, f"READ: status {read[2]:#x}, {read[1]} irqs"
    assert read[4] == 0, "command clears itself"
    assert write[2] == status("write_success", "irq_raised") and write[1] == 1
    w = written.read_bytes()
    assert w[:8] == b"\xee" * 8 and w[8 + size:] == b"\xee" * 8, "WRITE touched bytes outside [dst, dst+size)"
    assert write[3] == crc32_le(w[8:8 + size]), "checksum after WRITE is crc32_le(~0) of the data written"
    assert copy[2] == status("copy_success", "irq_raised") and copy[1] == 1
    c = copied.read_bytes()
    assert c[:size] == data and c[size:] == b"\x55" * 8
    assert copy[3] == crc32_le(data)
    if size >= 1024:
        # DMA at about a DW per cycle: the module adds little beyond the port's own pace (70 %).
        assert read[0] < 2 * (size / 4) / 0.7


def test_write_data_differs_between_commands(tb):
    s = Script(tb)
    s.command("write", size=4096, dst=DST)
    a = s.dump(DST, 4096)
    s.command("write", size=4096, dst=DST)
    b = s.dump(DST, 4096)
    first, second = results(s.run())
    assert a.read_bytes() != b.read_bytes() and first[3] != second[3]
    assert len(set(a.read_bytes())) > 200, "pseudo-random bytes"


def test_bad_checksum_fails_read(tb):
    data = random.Random(5).randbytes(1025)
    s = Script(tb)
    s.load(SRC, data)
    s.command("read", size=1025, src=SRC, checksum=crc32_le(data) ^ 1)
    s.command("read", size=1025, src=SRC, checksum=zlib.crc32(data))  # zlib's, not inverted: wrong
    (a, b) = results(s.run())
    assert a[2] == status("read_fail", "irq_raised") and a[1] == 1
    assert b[2] == status("read_fail", "irq_raised")


@pytest.mark.parametrize("size", (1, 1024, 1025, 1024001))
def test_fault_switch_fails_every_transfer(tb, size):
    data = random.Random(size + 1).randbytes(size)
    s = Script(tb)
    s.load(SRC, data)
    s("w", off("fault"), 1)
    s.command("read", size=size, src=SRC, checksum=crc32_le(data))
    s.command("write", size=size, dst=DST)
    written = s.dump(DST, size)
    s.command("copy", size=size, src=SRC, dst=DST)
    copied = s.dump(DST, size)
    s("w", off("fault"), 0)
    s.command("read", size=size, src=SRC, checksum=crc32_le(data))
    read, write, copy, again = results(s.run())
    assert read[2] == status("read_fail", "irq_raised")
    # The device reports success for WRITE and COPY (as pci-epf-test would): the host's check fails.
    assert crc32_le(written.read_bytes()) != write[3]
    c = copied.read_bytes()
    diff = [i for i in range(size) if c[i] != data[i]]
    assert diff == [size // 2] and c[size // 2] ^ data[size // 2] == 1, "exactly one bit flipped"
    assert again[2] == status("read_success", "irq_raised"), "the switch off: transfers pass again"


def test_interrupts_only_msi_vector_1(tb):
    s = Script(tb)
    s.command("read", size=4, src=SRC, checksum=crc32_le(bytes(4)), irq_type=0)   # INTx: none here
    s.command("read", size=4, src=SRC, checksum=crc32_le(bytes(4)), irq_number=2)  # one vector only
    s.command("read", size=4, src=SRC, checksum=crc32_le(bytes(4)), irq_type=2)   # MSI-X: none here
    s.command("raise_msi_irq", irq_number=1)
    s.command("raise_msi_irq", irq_number=2)
    s.command("raise_legacy_irq")
    s.command("raise_msix_irq")
    s.command("read", size=4, src=SRC, irq_type=3)                                  # invalid type: dropped
    r = results(s.run())
    ok = status("read_success", "irq_raised")
    assert [(x[1], x[2]) for x in r] == [
        (0, ok), (0, ok), (0, ok),
        (1, status("irq_raised")), (0, 0), (0, status("irq_raised")), (0, 0), (0, 0)]
    assert all(x[4] == 0 for x in r), "command clears itself, also when dropped"


def test_msi_and_msix_numbers_the_host_granted_raise_their_vector(tb):
    s = Script(tb)
    s("vectors", 32, 0)                                                            # MSI, 32 vectors
    for n in (1, 2, 17, 32, 33):
        s.command("raise_msi_irq", irq_number=n)
    s.command("raise_msix_irq", irq_number=1)                                      # MSI-X is off
    s.command("read", size=4, src=SRC, checksum=crc32_le(bytes(4)), irq_number=9)
    s("vectors", 32, 1)                                                            # MSI-X on, 32 entries
    s.command("raise_msi_irq", irq_number=1)                                       # MSI is off
    for n in (1, 2, 32, 33):
        s.command("raise_msix_irq", irq_number=n)
    s.command("read", size=4, src=SRC, checksum=crc32_le(bytes(4)), irq_type=2, irq_number=5)
    r = results(s.run())
    raised, ok = status("irq_raised"), status("read_success", "irq_raised")
    assert [(x[1], x[2]) for x in r] == [
        (1, raised), (1, raised), (1, raised), (1, raised), (0, 0), (0, 0), (1, ok),
        (0, 0), (1, raised), (1, raised), (1, raised), (0, 0), (1, ok)]
    vectors = [x[5] for x in r if x[1]]
    assert vectors == [0, 1, 16, 31, 8, 0, 1, 31, 4], "MSI / MSI-X n is vector n - 1"


def test_dma_errors_and_unaligned_addresses_fail(tb):
    s = Script(tb)
    s("rderror", 1)
    s.command("read", size=100, src=SRC, checksum=crc32_le(bytes(100)))
    s.command("copy", size=100, src=SRC, dst=DST)
    s("rderror", 0)
    s.command("read", size=100, src=SRC + 2, checksum=0)
    s.command("write", size=100, dst=DST + 1)
    s.command("copy", size=100, src=SRC + 1, dst=DST + 2)
    r = results(s.run())
    assert [x[2] for x in r] == [
        status("read_fail", "irq_raised"), status("copy_fail", "irq_raised"),
        status("read_fail", "irq_raised", "src_addr_invalid"), status("write_fail", "irq_raised", "dst_addr_invalid"),
        status("copy_fail", "irq_raised", "src_addr_invalid", "dst_addr_invalid")]
    assert all(x[1] == 1 for x in r)


def test_registers_read_back(tb):
    s = Script(tb)
    s("w", off("magic"), 0xA0A0A0A0)
    s("r", off("magic"))
    for name in ("src_addr_lo", "src_addr_hi", "dst_addr_lo", "dst_addr_hi", "size", "checksum", "irq_type",
                 "irq_number", "flags"):
        s("w", off(name), 0x12345600 + off(name))
        s("r", off(name))
    s("w", off("fault"), 0xFFFFFFFF)
    s("r", off("fault"))
    s("r", 0x30)  # no register there
    values = s.run()
    assert values[0] == 0xA0A0A0A0
    assert values[1:-2] == [0x12345600 + off(n) for n in ("src_addr_lo", "src_addr_hi", "dst_addr_lo", "dst_addr_hi",
                                                             "size", "checksum", "irq_type", "irq_number", "flags")]
    assert values[-2] == 1 and values[-1] == 0

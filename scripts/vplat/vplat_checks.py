#!/usr/bin/env python3
"""The host side of the virtual platform (scripts/vplat.sh): reads the guest's checks channel
(its second serial port, build/vplat/run/checks.log), holds every line to the record grammar
below, adds the checks made here (the kernel booted, the device's config space, QEMU's and the
server's exit), prints PASS/FAIL per check and writes results.json.

Strict like scripts/qemu/vfio_checks.py, whose line parser it reuses: a line that is not a
well-formed record (split, merged, a stray "\\r", not UTF-8, an unknown kind or check), a check
twice, or an expected check missing fails the run, with the line quoted.

    vplat_checks.py --self-test        the parser against lines it must refuse (run by vplat.sh)
    vplat_checks.py --checks FILE ...  the verdict (see main)
"""
import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "qemu"))
import vfio_checks  # noqa: E402  (scripts/qemu: parse_channel, decode, quote)
import pcitest_checks  # noqa: E402  (the second boot: Linux's endpoint test against the pci_epf_test card)
import kselftest_checks  # noqa: E402  (the 7.3 guest's second boot: the kselftest pci_endpoint_test)

# Records: `KIND payload`, one a line; each payload regex must match the whole payload.
RECORDS = {
    "TLPX-BOOT": re.compile(r"kernel (\S+) uptime ([0-9]+\.[0-9]+)"),
    "TLPX-CHECK": vfio_checks.RECORDS["TLPX-CHECK"],
    # address, driver (- for none), the device's config space bytes as sysfs reads them
    "TLPX-PCI": vfio_checks.RECORDS["TLPX-PCI"],
    # one line of `lspci -vv` for the device, and of `tlpx list`, verbatim (tabs as spaces)
    "TLPX-LSPCI": re.compile(r"(.*)"),
    "TLPX-LIST": re.compile(r"(.*)"),
    "TLPX-UPTIME": re.compile(r"([0-9]+\.[0-9]+)"),
    # the bus address the guest made the card read, which no DMA mapping covers
    "TLPX-REFUSED": re.compile(r"(0x[0-9a-f]+)"),
    "TLPX-DONE": re.compile(r""),
}
ONCE = ["TLPX-BOOT", "TLPX-UPTIME", "TLPX-DONE"]
AT_MOST_ONCE = ["TLPX-PCI", "TLPX-REFUSED"]

# The checks scripts/vplat/init runs, in its order. They grow with the device server: a check
# the guest adds must be listed here (an unlisted one is refused as unknown).
GUEST_CHECKS = ["lspci_runs", "device_listed", "litepcie_module_loads", "tlpx_version", "tlpx_list_runs",
                "tlpx_list_shows_device", "tlpx_list_marks_card", "vfio_bind", "vfio_info", "vfio_selftest", "vfio_bw",
                # tlpx's host knobs: two NUMA nodes, 2 MiB huge pages (the card boot's memory)
                "numa_two_nodes", "bw_numa_node1", "bw_iommu_2m", "bw_iommu_1g_refused", "bw_cache_modes",
                "vfio_dma_unmapped_refused", "vfio_pio", "vfio_irq", "vfio_irq_percpu", "vfio_rule30_poll_syscall",
                "vfio_rule30_all_modes", "vfio_spy_capture",
                "litepcie_bind", "litepcie_info", "litepcie_selftest", "litepcie_rule30_verify", "litepcie_rule30_batch_refused",
                "litepcie_bw", "litepcie_spy_capture", "litepcie_dma_busy",
                # LitePCIe's own user tools (litepcie_util), built static for the card
                "litepcie_util_info", "litepcie_util_scratch", "litepcie_util_dma_test"]
# Checks made here, on the records and on what the run script saw.
HOST_CHECKS = ["kernel_boots", "device_config_space", "card_lspci", "dma_refused_counted", "guest_finished", "qemu_exit",
               "server_ran"]
# The driver boot (vplat_mode=driver: the 7.3 guest in make test): the card boot cut to LitePCIe's
# stock driver (scripts/vplat/litepcie-checks), so no vfio check and no refused DMA to count.
DRIVER_GUEST_CHECKS = [c for c in GUEST_CHECKS[:GUEST_CHECKS.index("vfio_bind")]] + \
    [c for c in GUEST_CHECKS if c.startswith("litepcie_") and c != "litepcie_module_loads"]
DRIVER_HOST_CHECKS = [c for c in HOST_CHECKS if c != "dma_refused_counted"]


def card_checks(mode):
    """(guest checks, host checks) of the card's boot in `mode` ("card" or "driver")."""
    if mode not in ("card", "driver"):
        raise ValueError(f"the card boot's mode is card or driver, not {mode!r}")
    return (DRIVER_GUEST_CHECKS, DRIVER_HOST_CHECKS) if mode == "driver" else (GUEST_CHECKS, HOST_CHECKS)


def dma_refused(log, addr):
    """The server's log: the card's read at `addr` refused as outside every DMA mapping (the
    engine's fault line) and counted in the stop line. -> (ok, detail)."""
    if not addr:
        return False, "no TLPX-REFUSED record: the guest did not point the card at an unmapped address"
    fault = re.search(rf"IOMMU fault at card cycle \d+: card DMA read of \d+ bytes at bus address {re.escape(addr)}: "
                      r"outside every region[^\n]*answered with UR", log)
    stop = re.search(r"refused DMA: (\d+) reads (\d+) writes", log)
    reads = int(stop.group(1)) if stop else 0
    ok = bool(fault) and reads >= 1
    return ok, (f"server log: {fault.group(0) if fault else f'no refused read at {addr}'}; stop line: "
                f"{stop.group(0) if stop else 'missing'}")


def card_lspci(lines, link, mps_supported=None):
    """The card's `lspci -vv` in the guest against what tlpx-sim presents: BAR0 (1 MiB, 32-bit
    memory), the MSI capability (64-bit, 32 vectors) and the MSI-X capability (32 entries: the
    card boot's server runs tlpx-sim --msi-vectors 32 --msix 32), a PCIe Endpoint whose LnkCap and LnkSta
    both say `link` ("5GT/s x1"), Device Capabilities' max payload `mps_supported` (the board's
    hard IP's, not more: tlpx-sim --board), and MPS/MRRS in Device Control. -> (ok, detail)."""
    text = "\n".join(lines)
    speed, width = link.split() if link else ("?", "?")
    wants = [
        (f"DevCap MaxPayload {mps_supported} bytes", rf"DevCap:\s+MaxPayload {mps_supported} bytes\b"),
    ] if mps_supported else []
    wants += [
        ("BAR0 1M 32-bit memory", r"Region 0: Memory at [0-9a-f]+ \(32-bit, non-prefetchable\) \[size=1M\]"),
        ("MSI capability", r"Capabilities: \[[0-9a-f]+\] MSI: Enable[+-] Count=\d+/32 Maskable- 64bit\+"),
        ("MSI-X capability", r"Capabilities: \[[0-9a-f]+\] MSI-X: Enable[+-] Count=32 Masked[+-]"),
        ("PCIe Endpoint", r"Capabilities: \[[0-9a-f]+\] Express \(v2\) Endpoint"),
        (f"LnkCap {speed} {width}", rf"LnkCap:\s+Port #\d+, Speed {re.escape(speed)}, Width {re.escape(width)}\b"),
        (f"LnkSta {speed} {width}", rf"LnkSta:\s+Speed {re.escape(speed)}(?: \(\w+\))?, Width {re.escape(width)}\b"),
        ("MPS/MRRS", r"MaxPayload \d+ bytes, MaxReadReq \d+ bytes"),
    ]
    missing = [what for what, rx in wants if not re.search(rx, text)]
    if not lines:
        return False, "no `lspci -vv` lines for the device"
    found = [m.group(0) for rx in (r"Region 0: [^\n]*", r"DevCap:\s+MaxPayload \d+ bytes", r"LnkSta:\s+[^\n]*",
                                   r"MaxPayload \d+ bytes, MaxReadReq \d+ bytes")
             for m in [re.search(rx, text)] if m]
    return not missing, ("; ".join(found) + (f"; missing: {', '.join(missing)}" if missing else ""))


def evaluate(data, want):
    """Bytes of the channel and what to expect -> (checks, facts, problems).

    want: release (kernel), addr, id (vendor:device), tlpx_version, qemu_status, timeout,
    server (how the server ended: "running", "exit 0", "exit N", "signal N"), mode ("card",
    the default, or "driver": card_checks)."""
    guest_checks, host_checks = card_checks(want.get("mode", "card"))
    records, problems = vfio_checks.parse_channel(data, RECORDS)
    by_kind = {}
    for n, kind, m in records:
        by_kind.setdefault(kind, []).append((n, m))
    for kind in ONCE + AT_MOST_ONCE:
        got = by_kind.get(kind, [])
        if len(got) > 1 or (kind in ONCE and len(got) != 1 and records):
            where = ", ".join(str(n) for n, _ in got)
            problems.append(f"{kind} must appear {'once' if kind in ONCE else 'at most once'} on the checks channel, "
                            f"found {len(got)}" + (f" (lines {where})" if got else ""))
    if records and records[0][1] != "TLPX-BOOT":
        problems.append(f"the first record (line {records[0][0]}) is {records[0][1]}, not TLPX-BOOT")
    if records and by_kind.get("TLPX-DONE") and records[-1][1] != "TLPX-DONE":
        problems.append(f"records after TLPX-DONE (line {by_kind['TLPX-DONE'][0][0]}): the last is line {records[-1][0]}")

    checks, seen = [], {}
    for n, m in by_kind.get("TLPX-CHECK", []):
        name, verdict, detail = m.group(1), m.group(2), m.group(3)
        if name in seen:
            problems.append(f"check {name} appears twice (lines {seen[name]} and {n})")
            continue
        seen[name] = n
        if name not in guest_checks:
            problems.append(f"unknown check {name!r} on line {n} (not in vplat_checks.py's "
                            f"{'DRIVER_GUEST_CHECKS' if guest_checks is DRIVER_GUEST_CHECKS else 'GUEST_CHECKS'})")
            continue
        checks.append({"name": name, "pass": verdict == "PASS", "detail": detail, "by": "guest"})
    for name in guest_checks:
        if name not in seen:
            checks.append({"name": name, "pass": False, "detail": "did not run (no record on the checks channel)",
                           "by": "guest"})

    # The tlpx in the guest is the one just built.
    for c in checks:
        # The per-CPU check measured every CPU QEMU gave the guest (-smp), not fewer.
        if c["name"] == "vfio_irq_percpu" and c["pass"] and want.get("smp") and not c["detail"].startswith(f"{want['smp']} CPU(s)"):
            c["pass"] = False
            c["detail"] += f" (QEMU gave the guest {want['smp']} CPU(s): not every CPU was measured)"
        if c["name"] == "tlpx_version" and c["pass"] and want.get("tlpx_version") and c["detail"] != want["tlpx_version"]:
            c["pass"] = False
            c["detail"] += f" (the host's build says {want['tlpx_version']!r}: a stale binary in the initramfs?)"

    facts = {
        "kernel": None, "init_uptime_s": None, "done_uptime_s": None,
        "lspci": [m.group(1) for _, m in by_kind.get("TLPX-LSPCI", [])],
        "listing": [m.group(1) for _, m in by_kind.get("TLPX-LIST", [])],
        "config": None,
    }
    if by_kind.get("TLPX-BOOT"):
        m = by_kind["TLPX-BOOT"][0][1]
        facts["kernel"], facts["init_uptime_s"] = m.group(1), float(m.group(2))
    if by_kind.get("TLPX-UPTIME"):
        facts["done_uptime_s"] = float(by_kind["TLPX-UPTIME"][0][1].group(1))

    def host(name, ok, detail):
        checks.append({"name": name, "pass": bool(ok), "detail": detail, "by": "host"})

    kernel = facts["kernel"]
    host("kernel_boots", kernel is not None and kernel == want.get("release"),
         f"kernel {kernel}, /init reached at {facts['init_uptime_s']} s of uptime" if kernel == want.get("release")
         else (f"the guest runs kernel {kernel}, the initramfs was built for {want.get('release')}" if kernel
               else "no TLPX-BOOT record: the guest's /init never wrote the checks channel"))

    pci = by_kind.get("TLPX-PCI", [])
    if not pci:
        host("device_config_space", False, f"no TLPX-PCI record: sysfs has no {want.get('addr')} in the guest")
    else:
        m = pci[0][1]
        addr, cfg = m.group(1), bytes.fromhex(m.group(3))
        # The IDs only: the rest of config space is the server's (an RCiEP's link registers read
        # 0, which vfio_checks.decode refuses), and is shown by lspci -vv above.
        got = f"{vfio_checks.u16(cfg, 0):04x}:{vfio_checks.u16(cfg, 2):04x}" if len(cfg) >= 64 else None
        host("device_config_space", addr == want.get("addr") and got == want.get("id"),
             f"{addr}: config space (sysfs, {len(cfg)} bytes) decoded here: IDs {got}, command {cfg[4] | cfg[5] << 8:#06x}, "
             f"class {cfg[0x0b]:02x}{cfg[0x0a]:02x}{cfg[0x09]:02x}, driver {m.group(2)} (want {want.get('id')} at {want.get('addr')})")

    ok, detail = card_lspci(facts["lspci"], want.get("link"), want.get("mps_supported"))
    host("card_lspci", ok, detail)
    if "dma_refused_counted" in host_checks:
        refused_at = by_kind.get("TLPX-REFUSED", [(0, None)])[0][1]
        ok, detail = dma_refused(want.get("server_log") or "", refused_at.group(1) if refused_at else None)
        host("dma_refused_counted", ok, detail)

    done = by_kind.get("TLPX-DONE")
    host("guest_finished", bool(done),
         f"TLPX-DONE at {facts['done_uptime_s']} s of uptime" if done else "no TLPX-DONE: the guest did not finish its checks")

    status = want.get("qemu_status")
    host("qemu_exit", status == 0,
         "QEMU exited 0 (guest powered off)" if status == 0
         else (f"QEMU did not finish within {want.get('timeout')} s (wall clock)" if status in (124, 137)
               else f"QEMU exited with status {status}"))

    server = want.get("server") or "unknown"
    host("server_ran", server in ("running", "exit 0"),
         {"running": "the device server was still running when QEMU ended (stopped by vplat.sh)",
          "exit 0": "the device server exited 0 after QEMU closed the connection"}.get(server,
          f"the device server ended with {server} (its log says why)"))

    for c in checks:
        if not c["pass"]:
            problems.append(f"check {c['name']} failed: {c['detail']}")
    return checks, facts, problems


CARD_LSPCI = [
    "0000:01:00.0 Signal processing controller [1180]: Xilinx Corporation Device [10ee:7c01] (rev 01)",
    "   Region 0: Memory at fe600000 (32-bit, non-prefetchable) [size=1M]",
    "   Capabilities: [50] MSI: Enable- Count=1/32 Maskable- 64bit+",
    "   Capabilities: [60] MSI-X: Enable+ Count=32 Masked-",
    "   Capabilities: [70] Express (v2) Endpoint, MSI 00",
    "    DevCap: MaxPayload 512 bytes, PhantFunc 0, Latency L0s <64ns, L1 <1us",
    "     MaxPayload 128 bytes, MaxReadReq 512 bytes",
    "    LnkCap: Port #0, Speed 5GT/s, Width x1, ASPM not supported",
    "    LnkSta: Speed 5GT/s, Width x1",
]


GOOD_SERVER_LOG = (
    "tlpx-sim: IOMMU fault at card cycle 123: card DMA read of 512 bytes at bus address 0xdead0000: outside every region the "
    "guest DMA-mapped (vfio-user DMA_MAP), or a write to a read-only one; answered with UR\n"
    "tlpx-sim vfio-user: stopped (the client closed the connection) at card cycle 9: refused DMA: 2 reads 0 writes; x\n")


def good_channel(addr="0000:01:00.0", ids=(0x10ee, 0x7c01), mode="card"):
    """A well-formed channel of the card's boot in `mode`, for the self-test."""
    cfg = bytearray(256)
    cfg[0:4] = ids[0].to_bytes(2, "little") + ids[1].to_bytes(2, "little")
    lines = [b"TLPX-BOOT kernel 6.1.0-56-amd64 uptime 2.41"]
    lines += [f"TLPX-CHECK {c} PASS fine".encode() for c in card_checks(mode)[0] if c != "tlpx_version"]
    lines += [b"TLPX-CHECK tlpx_version PASS tlpx 0.1.0", f"TLPX-PCI {addr} - {cfg.hex()}".encode()]
    lines += [f"TLPX-LSPCI {l}".encode() for l in CARD_LSPCI]
    lines += [b"TLPX-LIST SOURCE   ADDRESS"] + ([b"TLPX-REFUSED 0xdead0000"] if mode == "card" else [])
    lines += [b"TLPX-UPTIME 3.05", b"TLPX-DONE"]
    return b"\n".join(lines) + b"\n"


def self_test():
    """The parser refuses what it must; exits non-zero (naming the case) if it does not."""
    want = {"release": "6.1.0-56-amd64", "addr": "0000:01:00.0", "id": "10ee:7c01", "tlpx_version": "tlpx 0.1.0",
            "qemu_status": 0, "server": "exit 0", "timeout": 300, "link": "5GT/s x1", "mps_supported": 512,
            "server_log": GOOD_SERVER_LOG}
    failures = []
    checks, _, problems = evaluate(good_channel(), want)
    if problems or len(checks) != len(GUEST_CHECKS) + len(HOST_CHECKS):
        failures.append(f"a good channel gave {problems} ({len(checks)} checks)")
    good = good_channel().split(b"\n")
    cases = {
        # a kernel message inside a record (why the channel is not the console)
        "kernel message inside a record": (lambda l: [x.replace(b"CHECK lspci_runs PASS", b"CHECK lspci_ru[    4.2] DMAR: x PASS")
                                                      for x in l], "malformed TLPX-CHECK"),
        "carriage return": (lambda l: [x + b"\r" if x.startswith(b"TLPX-UPTIME") else x for x in l], "control characters"),
        "kernel timestamp first": (lambda l: [b"[    4.2] " + x if x.startswith(b"TLPX-LSPCI") else x for x in l], "unknown kind"),
        "cut off at the end": (lambda l: l[:-2] + [b"TLPX-DO"], "cut off"),
        "check missing": (lambda l: [x for x in l if b"device_listed" not in x], "check device_listed failed: did not run"),
        "check twice": (lambda l: l[:2] + l[1:], "appears twice"),
        "unknown check": (lambda l: l[:1] + [b"TLPX-CHECK lspci_run PASS x"] + l[1:], "unknown check 'lspci_run'"),
        "a FAIL": (lambda l: [x.replace(b"tlpx_list_runs PASS", b"tlpx_list_runs FAIL") for x in l], "check tlpx_list_runs failed"),
        "DONE with a tail": (lambda l: [b"TLPX-DONE x" if x == b"TLPX-DONE" else x for x in l], "malformed TLPX-DONE"),
        "no DONE": (lambda l: [x for x in l if x != b"TLPX-DONE"], "TLPX-DONE must appear once"),
        "BOOT twice": (lambda l: l[:1] + l, "TLPX-BOOT must appear once"),
        "records after DONE": (lambda l: l[:-1] + [b"TLPX-LIST x", b""], "records after TLPX-DONE"),
        "not UTF-8": (lambda l: [x + b"\xff" if x.startswith(b"TLPX-LIST") else x for x in l], "not UTF-8"),
        "wrong IDs in config space": (lambda l: [x.replace(b"ee10017c", b"ee10027c") for x in l], "IDs 10ee:7c02"),
        "card link narrower": (lambda l: [x.replace(b"LnkSta: Speed 5GT/s, Width x1", b"LnkSta: Speed 5GT/s, Width x0") for x in l],
                               "missing: LnkSta 5GT/s x1"),
        "no MSI capability": (lambda l: [x for x in l if b"MSI: Enable" not in x], "missing: MSI capability"),
        "no MSI-X capability": (lambda l: [x for x in l if b"MSI-X: Enable" not in x], "missing: MSI-X capability"),
        "stale tlpx": (lambda l: [x.replace(b"tlpx 0.1.0", b"tlpx 0.0.9") for x in l], "a stale binary"),
    }
    for what, (mutate, must_say) in cases.items():
        _, _, problems = evaluate(b"\n".join(mutate(list(good))), want)
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems} has nothing saying {must_say!r}")
    for what, change, must_say in (("QEMU timed out", {"qemu_status": 124}, "did not finish within 300 s"),
                                   ("server crashed", {"server": "signal 11"}, "ended with signal 11"),
                                   ("other kernel", {"release": "6.12.0-1-amd64"}, "the initramfs was built for 6.12"),
                                   ("other link wanted", {"link": "8GT/s x4"}, "missing: LnkCap 8GT/s x4"),
                                   ("a payload beyond the board's IP", {"mps_supported": 256}, "missing: DevCap MaxPayload 256 bytes"),
                                   ("no refusal in the server log", {"server_log": GOOD_SERVER_LOG.replace("0xdead0000", "0x1000")},
                                    "no refused read at 0xdead0000"),
                                   ("refusal not counted", {"server_log": GOOD_SERVER_LOG.replace("2 reads", "0 reads")},
                                    "dma_refused_counted failed")):
        _, _, problems = evaluate(good_channel(), dict(want, **change))
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems} has nothing saying {must_say!r}")
    _, _, problems = evaluate(b"", want)
    if not any("empty" in p for p in problems):
        failures.append(f"an empty channel gave {problems}")
    # The driver boot: its own list (LitePCIe's checks, no vfio), held as strictly.
    driver = dict(want, mode="driver", server_log="")
    checks, _, problems = evaluate(good_channel(mode="driver"), driver)
    if problems or len(checks) != len(DRIVER_GUEST_CHECKS) + len(DRIVER_HOST_CHECKS) or \
            any(c["name"].startswith("vfio_") for c in checks):
        failures.append(f"a good driver channel gave {problems} ({len(checks)} checks)")
    driver_cases = [
        ("a vfio check in the driver boot", good_channel(mode="driver").replace(b"TLPX-DONE", b"TLPX-CHECK vfio_bind PASS x\nTLPX-DONE"),
         "unknown check 'vfio_bind'"),
        ("a litepcie check missing", b"\n".join(x for x in good_channel(mode="driver").split(b"\n") if b"litepcie_bw " not in x),
         "check litepcie_bw failed: did not run"),
        ("the card boot's channel as a driver boot's", good_channel(), "unknown check 'vfio_bind'"),
    ]
    for what, data, must_say in driver_cases:
        _, _, problems = evaluate(data, driver)
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems} has nothing saying {must_say!r}")
    failures += assert_results_self_test()
    n_pcitest, pcitest_failures = pcitest_checks.self_test(RECORDS)
    failures += [f"pcitest: {f}" for f in pcitest_failures]
    n_kselftest, kselftest_failures = kselftest_checks.self_test(RECORDS)
    failures += [f"kselftest: {f}" for f in kselftest_failures]
    for f in failures:
        print(f"vplat_checks self-test: FAIL: {f}", file=sys.stderr)
    print(f"vplat_checks self-test: {len(cases) + 7 + len(driver_cases)} bad channels, {len(failures)} not refused; "
          f"pcitest table: {n_pcitest} cases (the recorded fixture, {len(pcitest_failures)} wrong); "
          f"kselftest table: {n_kselftest} cases ({len(kselftest_failures)} wrong)")
    return 1 if failures else 0


def assert_results_self_test():
    """--assert-results passes the servers scripts/vplat.sh starts and refuses others: the
    failures (empty when it does)."""
    offer = pcitest_checks.parse_offer(pcitest_checks.CARD_OFFER)
    sim = "/x/host/target/release/tlpx-sim"
    epf = f"{sim} --card /x/build/card/dw64-pci_epf_test/libtlpxcard.so --msi-vectors 32 --msix 32 --vfio-user"
    good = {
        "6.1": {"kernel": "6.1", "pass": True, "pcitest_offer": pcitest_checks.CARD_OFFER,
                "server_command": f"{sim} --msi-vectors 32 --msix 32 --vfio-user", "pcitest_server_command": epf,
                "checks": [{"name": n, "pass": True} for n in GUEST_CHECKS + HOST_CHECKS
                           + pcitest_checks.expected_check_names(offer)]},
        "7.3 driver": {"kernel": "7.3", "card_mode": "driver", "pass": True,
                       "server_command": f"{sim} --msi-vectors 32 --msix 32 --vfio-user", "kselftest_server_command": epf,
                       "checks": [{"name": n, "pass": True} for n in DRIVER_GUEST_CHECKS + DRIVER_HOST_CHECKS
                                  + kselftest_checks.expected_check_names(offer)]},
    }
    bad = [("6.1", {"server_command": f"{sim} --vfio-user"}, "not the card's"),
           ("6.1", {"pcitest_server_command": epf.replace(" --msix 32", "")}, "not tlpx-sim with the pci_epf_test card"),
           ("7.3 driver", {"card_mode": "card"}, "check vfio_bind is missing"),
           ("7.3 driver", {"kselftest_server_command": epf.replace("dw64-pci_epf_test", "dw64")}, "not tlpx-sim with"),
           ("6.1", {"pass": False}, "the run did not pass")]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.json")
        cases = [(name, {}, None) for name in good] + bad
        for name, change, must_say in cases:
            with open(path, "w") as f:
                json.dump(dict(good[name], **change), f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = assert_results(path)
            if must_say is None and rc != 0:
                failures.append(f"--assert-results refused a good {name} run: {out.getvalue()}")
            if must_say is not None and (rc == 0 or must_say not in out.getvalue()):
                failures.append(f"--assert-results of a {name} run with {change} said {out.getvalue()!r}, not {must_say!r}")
    return failures


def assert_results(path):
    """`make vplat-test`: results.json of the run just made must have passed, with every
    check expected here present and passing, from the card's own server."""
    try:
        doc = json.load(open(path))
    except (OSError, ValueError) as err:
        print(f"vplat-test: FAIL: cannot read {path}: {err}")
        return 1
    problems = []
    by_name = {c.get("name"): c for c in doc.get("checks", [])}
    offer = pcitest_checks.parse_offer(pcitest_checks.CARD_OFFER)
    # The 7.3 guest (VPLAT_KERNEL=7.3, make vplat-test-k73): the kselftest boot in place of pcitest.
    k73 = doc.get("kernel") == "7.3"
    endpoint = "kselftest" if k73 else "pcitest"
    # make test's 7.3 run has the driver boot in place of the card boot (`card_mode`).
    guest_checks, host_checks = card_checks(doc.get("card_mode", "card"))
    expected = guest_checks + host_checks + (kselftest_checks.expected_check_names(offer) if k73
                                             else pcitest_checks.expected_check_names(offer))
    for name in expected:
        c = by_name.get(name)
        if c is None:
            problems.append(f"check {name} is missing")
        elif not c.get("pass"):
            problems.append(f"check {name} failed: {c.get('detail')}")
    extra = sorted(set(by_name) - set(expected))
    if extra:
        problems.append(f"checks not expected here: {', '.join(extra)}")
    # The card's servers as scripts/vplat.sh starts them: 32 MSI vectors and a 32-entry MSI-X table.
    vectors = "--msi-vectors 32 --msix 32 --vfio-user"
    if not str(doc.get("server_command", "")).endswith(f"tlpx-sim {vectors}"):
        problems.append(f"the server was {doc.get('server_command')!r}, not the card's (tlpx-sim {vectors})")
    if not re.fullmatch(rf"\S*tlpx-sim --card \S*/build/card/dw64-pci_epf_test/libtlpxcard\.so {vectors}",
                        str(doc.get(f"{endpoint}_server_command", ""))):
        problems.append(f"the {endpoint} boot's server was {doc.get(f'{endpoint}_server_command')!r}, not tlpx-sim with the "
                        f"pci_epf_test card (build/card/dw64-pci_epf_test) and {vectors}")
    if not k73 and doc.get("pcitest_offer") != pcitest_checks.CARD_OFFER:
        problems.append(f"the pcitest table was for {doc.get('pcitest_offer')!r}, not the card's {pcitest_checks.CARD_OFFER!r}")
    if not doc.get("pass"):
        problems.append(f"the run did not pass: {doc.get('problems')}")
    for p in problems:
        print(f"vplat-test: FAIL: {p}")
    n = len(expected)
    print(f"vplat-test: {'FAILED' if problems else 'PASSED'}: {n - sum(1 for p in problems if p.startswith('check '))} of {n} "
          f"checks pass ({path}; QEMU {doc.get('qemu_seconds')} s, the run {doc.get('total_seconds')} s)")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--assert-results", metavar="RESULTS_JSON", help="make vplat-test: every check of that run passed")
    ap.add_argument("--checks", help="the card boot's checks channel (checks.log); without it, no card boot ran")
    ap.add_argument("--console", help="the guest's console (console.log), shown when the guest did not finish")
    ap.add_argument("--out", help="results.json to write")
    ap.add_argument("--release", help="the kernel release the initramfs was built for")
    ap.add_argument("--addr", help="where the device must be (0000:01:00.0)")
    ap.add_argument("--id", help="the device's vendor:device")
    ap.add_argument("--tlpx-version", help="`tlpx --version` of the host's build")
    ap.add_argument("--qemu-status", type=int)
    ap.add_argument("--timeout")
    ap.add_argument("--server", help="how the device server ended: running, exit N, signal N")
    ap.add_argument("--server-command")
    ap.add_argument("--qemu", help="QEMU's version")
    ap.add_argument("--qemu-seconds", type=float)
    ap.add_argument("--total-seconds", type=float)
    ap.add_argument("--link", help="the link the card's lspci must show, e.g. '5GT/s x1'")
    ap.add_argument("--mps-supported", type=int, help="the max payload the card's DevCap must show (its board's hard IP's)")
    ap.add_argument("--server-log", help="the device server's log (server.log): its stop line")
    ap.add_argument("--card-mode", choices=["card", "driver"], default="card",
                    help="the card's boot: whole (card) or cut to LitePCIe's driver (driver: vplat_mode=driver)")
    # The second boot (Linux's endpoint test): the same, for its own channel and server.
    ap.add_argument("--pcitest-checks", help="the pcitest boot's checks channel; without it, no pcitest boot ran")
    ap.add_argument("--pcitest-console")
    ap.add_argument("--pcitest-id")
    ap.add_argument("--pcitest-qemu-status", type=int)
    ap.add_argument("--pcitest-timeout")
    ap.add_argument("--pcitest-server")
    ap.add_argument("--pcitest-server-command")
    ap.add_argument("--pcitest-qemu-seconds", type=float)
    ap.add_argument("--pcitest-server-log", help="the pcitest boot's server log: tlpx-sim's stop line (DMA bytes, MSIs)")
    ap.add_argument("--pcitest-output", help="where to write pcitest's whole output, pass by pass")
    ap.add_argument("--pcitest-offer", default=pcitest_checks.CARD_OFFER,
                    help=f"what the pcitest boot's device offers (default the card's: {pcitest_checks.CARD_OFFER!r})")
    ap.add_argument("--kernel", default="6.1", help="which guest kernel (VPLAT_KERNEL): 6.1 or 7.3")
    ap.add_argument("--smp", type=int, help="the guest's CPUs (VPLAT_SMP)")
    # The 7.3 guest's second boot (the kselftest), the same arguments for its own channel and server.
    ap.add_argument("--kselftest-checks", help="the kselftest boot's checks channel; without it, no kselftest boot ran")
    ap.add_argument("--kselftest-console")
    ap.add_argument("--kselftest-id")
    ap.add_argument("--kselftest-qemu-status", type=int)
    ap.add_argument("--kselftest-timeout")
    ap.add_argument("--kselftest-server")
    ap.add_argument("--kselftest-server-command")
    ap.add_argument("--kselftest-qemu-seconds", type=float)
    ap.add_argument("--kselftest-server-log")
    ap.add_argument("--kselftest-output", help="where to write the kselftest's whole TAP output, pass by pass")
    ap.add_argument("--kselftest-table", action="store_true", help="print the kselftest table (markdown) and exit")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.assert_results:
        return assert_results(a.assert_results)
    if a.kselftest_table:
        print(kselftest_checks.table_markdown(pcitest_checks.parse_offer(pcitest_checks.CARD_OFFER)))
        return 0
    if not a.checks and not a.pcitest_checks and not a.kselftest_checks:
        ap.error("give --checks (the card boot), --pcitest-checks (the pcitest boot), --kselftest-checks (7.3's) or several")
    try:
        offer = pcitest_checks.parse_offer(a.pcitest_offer)
    except ValueError as err:
        ap.error(str(err))

    def read(path):
        try:
            return open(path, "rb").read()
        except OSError as err:
            print(f"vplat: cannot read the checks channel: {err}")
            return b""

    def console_tail(data, console):
        if b"TLPX-DONE\n" not in data and console and os.path.exists(console):
            print(f"the guest did not finish; the end of its console ({console}):")
            for line in open(console, errors="replace").read().splitlines()[-15:]:
                print(f"  | {line}")

    at = lambda s: "never" if s is None else f"at {s} s"
    checks, problems, doc = [], [], {
        "what": "the virtual platform: a vfio-user device in a QEMU guest (scripts/vplat.sh)",
        "qemu": a.qemu, "accel": "tcg", "guest_kernel": a.release, "total_seconds": a.total_seconds,
        "kernel": a.kernel, "smp": a.smp,
    }
    summary = []
    if a.checks:
        data = read(a.checks)
        want = {"release": a.release, "addr": a.addr, "id": a.id, "tlpx_version": a.tlpx_version, "qemu_status": a.qemu_status,
                "timeout": a.timeout, "server": a.server, "link": a.link, "mps_supported": a.mps_supported, "smp": a.smp,
                "mode": a.card_mode,
                "server_log": open(a.server_log, errors="replace").read() if a.server_log and os.path.exists(a.server_log) else ""}
        c, facts, p = evaluate(data, want)
        if facts["lspci"]:
            print("`lspci -vv` in the guest for the device:")
            for line in facts["lspci"]:
                print(f"  {line}")
        if facts["listing"]:
            print("`tlpx list` in the guest:")
            for line in facts["listing"]:
                print(f"  {line}")
        print()
        for x in c:
            print(f"{'PASS' if x['pass'] else 'FAIL'}  {x['name']}: {x['detail']}")
        checks += c
        problems += p
        doc.update({"card_mode": a.card_mode, "device": {"addr": a.addr, "id": a.id}, "server_command": a.server_command,
                    "server_end": a.server,
                    "init_uptime_s": facts["init_uptime_s"], "done_uptime_s": facts["done_uptime_s"], "qemu_seconds": a.qemu_seconds,
                    "lspci": facts["lspci"], "tlpx_list": facts["listing"]})
        n_all = sum(len(x) for x in card_checks(a.card_mode))
        summary.append(f"the card{' (driver boot)' if a.card_mode == 'driver' else ''}: {sum(x['pass'] for x in c)} of {n_all} "
                       f"checks passed; guest /init reached "
                       f"{at(facts['init_uptime_s'])} and done {at(facts['done_uptime_s'])} of guest uptime; QEMU ran "
                       f"{a.qemu_seconds} s wall (TCG)")
        console_tail(data, a.console)
    if a.pcitest_checks:
        data = read(a.pcitest_checks)
        want = {"release": a.release, "addr": a.addr, "id": a.pcitest_id, "qemu_status": a.pcitest_qemu_status,
                "timeout": a.pcitest_timeout, "server": a.pcitest_server,
                "server_log": open(a.pcitest_server_log, errors="replace").read()
                if a.pcitest_server_log and os.path.exists(a.pcitest_server_log) else ""}
        c, facts, p = pcitest_checks.evaluate(data, want, RECORDS, offer)
        print()
        print(f"Linux's endpoint test (pci_endpoint_test + pcitest) against {a.pcitest_server_command} "
              f"({'the table of ' + repr(a.pcitest_offer)}):")
        for x in c:
            print(f"{'PASS' if x['pass'] else 'FAIL'}  {x['name']}: {x['detail']}")
        checks += c
        problems += p
        if a.pcitest_output:
            with open(a.pcitest_output, "w") as f:
                f.write(pcitest_checks.output_text(facts["lines"]))
        n_all = len(pcitest_checks.expected_check_names(offer))
        doc.update({"pcitest_device": {"addr": a.addr, "id": a.pcitest_id}, "pcitest_server_command": a.pcitest_server_command,
                    "pcitest_server_end": a.pcitest_server, "pcitest_offer": a.pcitest_offer,
                    "pcitest_init_uptime_s": facts["init_uptime_s"], "pcitest_done_uptime_s": facts["done_uptime_s"],
                    "pcitest_qemu_seconds": a.pcitest_qemu_seconds, "pcitest_pass_seconds": facts["pass_seconds"],
                    "pcitest_lspci": facts["lspci"], "pcitest_output": a.pcitest_output})
        summary.append(f"pcitest: {sum(x['pass'] for x in c)} of {n_all} checks passed; guest /init reached "
                       f"{at(facts['init_uptime_s'])} and done {at(facts['done_uptime_s'])} of guest uptime (passes, guest "
                       f"seconds: {facts['pass_seconds']}); QEMU ran {a.pcitest_qemu_seconds} s wall (TCG)")
        console_tail(data, a.pcitest_console)
    if a.kselftest_checks:
        data = read(a.kselftest_checks)
        want = {"release": a.release, "addr": a.addr, "id": a.kselftest_id, "qemu_status": a.kselftest_qemu_status,
                "timeout": a.kselftest_timeout, "server": a.kselftest_server,
                "server_log": open(a.kselftest_server_log, errors="replace").read()
                if a.kselftest_server_log and os.path.exists(a.kselftest_server_log) else ""}
        c, facts, p = kselftest_checks.evaluate(data, want, RECORDS, offer)
        print()
        print(f"Linux's kselftest pci_endpoint_test (+ pci_endpoint_test.ko, linux-source-7.3) against {a.kselftest_server_command}:")
        for x in c:
            print(f"{'PASS' if x['pass'] else 'FAIL'}  {x['name']}: {x['detail']}")
        checks += c
        problems += p
        if a.kselftest_output:
            with open(a.kselftest_output, "w") as f:
                f.write(kselftest_checks.output_text(facts["lines"], facts["exits"]))
        n_all = len(kselftest_checks.expected_check_names(offer))
        doc.update({"kselftest_device": {"addr": a.addr, "id": a.kselftest_id},
                    "kselftest_server_command": a.kselftest_server_command, "kselftest_server_end": a.kselftest_server,
                    "kselftest_init_uptime_s": facts["init_uptime_s"], "kselftest_done_uptime_s": facts["done_uptime_s"],
                    "kselftest_qemu_seconds": a.kselftest_qemu_seconds, "kselftest_pass_seconds": facts["pass_seconds"],
                    "kselftest_lspci": facts["lspci"], "kselftest_output": a.kselftest_output})
        summary.append(f"kselftest: {sum(x['pass'] for x in c)} of {n_all} checks passed; guest /init reached "
                       f"{at(facts['init_uptime_s'])} and done {at(facts['done_uptime_s'])} of guest uptime (passes, guest "
                       f"seconds: {facts['pass_seconds']}); QEMU ran {a.kselftest_qemu_seconds} s wall (TCG, -smp {a.smp})")
        console_tail(data, a.kselftest_console)
    doc.update({"pass": not problems, "problems": problems, "checks": checks})
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=2)
    print()
    for line in summary:
        print(f"vplat: {line}")
    print(f"vplat: the whole run {a.total_seconds} s")
    # Problems not already printed as a failed check (the channel's grammar, cardinality).
    for p in problems:
        if not p.startswith("check "):
            print(f"FAIL: {p}")
    if problems:
        print(f"vplat: FAILED ({len(problems)} problem(s)); results: {a.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

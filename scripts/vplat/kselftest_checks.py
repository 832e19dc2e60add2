"""The 7.3 guest's endpoint-test boot (scripts/vplat.sh with VPLAT_KERNEL=7.3, vplat_mode=kselftest):
Linux's kselftest tools/testing/selftests/pci_endpoint/pci_endpoint_test and its
pci_endpoint_test.ko, both from Debian's linux-source-7.3 of the guest kernel's version
(scripts/kernel73.sh), against the card with the pci_epf_test DUT in its slot.

The guest (scripts/vplat/kselftest-checks) sends every line the test prints (kselftest_harness's
TAP output) as `TLPX-KSELFTEST <pass> <line>` and its exit status as `TLPX-KSELFTEST-EXIT <pass>
<status>`. This module holds every test case's TAP result to the table of what the device offers
(`expected_pass`): PASS for what it has, SKIP or FAIL with the reason for what it has not, every
transfer FAIL while the DUT's fault switch is on. A case not in the table, missing, twice, or with
another result (or another SKIP reason) fails the run; so do a plan (`1..N`) that is not the
table's count and an exit status that disagrees with the results. docs/virtual-platform.md lists
the table. `vplat_checks.py` calls `evaluate` and runs `self_test`.
"""
import os
import re

import pcitest_checks  # the card's offer (CARD_OFFER, parse_offer, card_offer): the same card, the same table inputs
import vfio_checks  # scripts/qemu (vplat_checks.py puts it on the path)

# The passes, in the order the guest runs them: every case; the transfer cases (fixture
# pci_ep_data_transfer) with the fault switch on; the same with it off again.
PASSES = ("all", "fault", "after")
RECORDS = {
    "TLPX-KSELFTEST": re.compile(r"(%s) (.*)" % "|".join(PASSES)),
    "TLPX-KSELFTEST-PASS": re.compile(r"(%s) (start|end) ([0-9]+\.[0-9]+)" % "|".join(PASSES)),
    "TLPX-KSELFTEST-EXIT": re.compile(r"(%s) ([0-9]+)" % "|".join(PASSES)),
}
GUEST_CHECKS = ["lspci_runs", "device_listed", "kselftest_module_loads", "kselftest_bind", "kselftest_fault_on",
                "kselftest_fault_off"]
HOST_CHECKS = ["kernel_boots", "device_config_space", "card_offer", "server_msis", "guest_finished", "qemu_exit", "server_ran"]
PREFIX = "kselftest/"

# kselftest_harness's result lines: `ok 3 name`, `ok 3 name # SKIP reason`, `not ok 3 name`.
TAP_RESULT = re.compile(r"(ok|not ok) ([0-9]+) (\S+)(?: # (SKIP|XFAIL|XPASS)(?: (.*))?)?")
TAP_PLAN = re.compile(r"1\.\.([0-9]+)")
TRANSFERS = [f"pci_ep_data_transfer.{v}.{t}" for v in ("memcpy", "dma") for t in ("READ_TEST", "WRITE_TEST", "COPY_TEST")]


def expected_pass(name, offer):
    """[(case, result, skip_reason or None, why)] for a pass, result PASS, SKIP or FAIL. The reasons
    come from the kselftest's and the driver's code (linux-source-7.3): which ioctl answers what."""
    rows = []
    if name == "all":
        # The DUT has no CAPS register (0x30, which 7.x's driver reads at probe; accelerators/pci_epf_test/dut.toml
        # ends at flags 0x2c and fault 0x40), so it reads 0: no CAP_SUBRANGE_MAPPING, no
        # CAP_DYNAMIC_INBOUND_MAPPING, and IRQ type AUTO falls back to MSI (the driver's "no caps defined" case).
        for bar in range(6):
            if bar < offer["bars"]:
                rows.append((f"pci_ep_bar.BAR{bar}.BAR_TEST", "PASS", None,
                             "BAR0: the test register block; the driver writes and reads back its words"))
            else:
                rows.append((f"pci_ep_bar.BAR{bar}.BAR_TEST", "SKIP", "BAR is disabled",
                             f"the card has {offer['bars']} BAR (BAR0 only): the driver answers -ENODATA"))
            rows.append((f"pci_ep_bar.BAR{bar}.BAR_SUBRANGE_TEST", "SKIP", "Subrange map is not supported",
                         "the DUT has no CAPS register (0x30 is not in dut.toml: it reads 0), so no CAP_SUBRANGE_MAPPING: -EOPNOTSUPP before any BAR check"))
        rows.append(("pci_ep_basic.CONSECUTIVE_BAR_TEST", "PASS", None, "every enabled BAR (BAR0) written and read back"))
        if offer["intx"]:
            rows.append(("pci_ep_basic.LEGACY_IRQ_TEST", "PASS", None, "the device has INTx"))
        else:
            rows.append(("pci_ep_basic.LEGACY_IRQ_TEST", "FAIL", None,
                         "the device has no INTx (Interrupt Pin 0): setting IRQ type INTx fails (ASSERT)"))
        msi = offer["msi"]
        if msi == 0:
            rows.append(("pci_ep_basic.MSI_TEST", "FAIL", None, "the device has no MSI: setting IRQ type MSI fails"))
        elif msi >= 32:
            rows.append(("pci_ep_basic.MSI_TEST", "PASS", None, "MSI 1..32 each raised and received"))
        else:
            rows.append(("pci_ep_basic.MSI_TEST", "SKIP", f"MSI{msi + 1} is disabled",
                         f"MSI 1..{msi} raised and received; the device grants {msi} MSI vector{'s' if msi > 1 else ''}, so "
                         f"pci_irq_vector() has no vector {msi + 1} (-EINVAL) and the test stops there as SKIP"))
        msix = offer["msix"]
        if msix == 0:
            rows.append(("pci_ep_basic.MSIX_TEST", "FAIL", None,
                         "the device has no MSI-X capability: setting IRQ type MSI-X fails (ASSERT)"))
        elif msix >= 2048:
            rows.append(("pci_ep_basic.MSIX_TEST", "PASS", None, "MSI-X 1..2048 each raised and received"))
        else:
            rows.append(("pci_ep_basic.MSIX_TEST", "SKIP", f"MSI-X{msix + 1} is disabled",
                         f"MSI-X 1..{msix} raised and received; no vector {msix + 1}"))
    if name in ("all", "fault", "after"):
        fault = name == "fault" and bool(offer["fault"])
        for case in TRANSFERS:
            dma = ".dma." in case
            if fault:
                rows.append((case, "FAIL", None, "the fault switch is on: the DUT flips one data bit per transfer, so the "
                             "CRC-32 compared differs (each of the 5 sizes fails)"))
            else:
                rows.append((case, "PASS", None, "sizes 1, 1024, 1025, 1024000, 1024001 bytes, IRQ type AUTO (MSI), the DUT "
                             "moving the data through the slot's DMA port, CRC-32 compared"
                             + (", with the DMA flag (the DUT accepts it; it always moves data by DMA)" if dma else "")
                             + ("; the switch is off again" if name == "after" else "")))
    if name == "all":
        rows.append(("pcie_ep_doorbell.DOORBELL_TEST", "SKIP", "Doorbell test is not supported",
                     "CAPS reads 0 (no CAP_DYNAMIC_INBOUND_MAPPING: the DUT has no doorbell): -EOPNOTSUPP"))
    if name not in PASSES:
        raise ValueError(f"unknown kselftest pass {name!r}")
    return rows


def expected_check_names(offer):
    names = [PREFIX + c for c in GUEST_CHECKS + HOST_CHECKS]
    for p in PASSES:
        names += [f"{PREFIX}{p}/{row[0]}" for row in expected_pass(p, offer)]
        names += [f"{PREFIX}{p}/plan_and_exit"]
    return names


def judge_pass(name, lines, exit_status, offer):
    """One pass's TAP lines and exit status against its table -> (checks, problems)."""
    checks, problems = [], []
    rows = expected_pass(name, offer)
    got, plan = {}, None
    for i, line in enumerate(lines):
        m = TAP_RESULT.fullmatch(line.strip())
        if m:
            case = m.group(3)
            if case in got:
                problems.append(f"kselftest pass {name}: {case} reported twice (line {i + 1})")
            result = ("SKIP" if m.group(4) == "SKIP" else "FAIL" if m.group(1) == "not ok" or m.group(4) else "PASS")
            got[case] = (result, (m.group(5) or "").strip(), line.strip())
        elif TAP_PLAN.fullmatch(line.strip()):
            plan = int(TAP_PLAN.fullmatch(line.strip()).group(1))
    known = {r[0] for r in rows}
    for case in got:
        if case not in known:
            problems.append(f"kselftest pass {name}: case {case!r} is not in the table ({got[case][2]!r})")
    for case, want, skip, why in rows:
        g = got.get(case)
        if g is None:
            ok, detail = False, f"did not run (no TAP line); want {want}: {why}"
        else:
            ok = g[0] == want and (want != "SKIP" or g[1] == skip)
            detail = f"{g[2]} (want {want}{' ' + repr(skip) if skip else ''}: {why})"
        checks.append({"name": f"{PREFIX}{name}/{case}", "pass": ok, "detail": detail, "by": "host", "boot": "kselftest"})
    fails = sum(1 for g in got.values() if g[0] == "FAIL")
    # kselftest_harness exits 1 (KSFT_FAIL) when a case failed, 0 (KSFT_PASS) when none did.
    want_exit = 1 if fails else 0
    ok = plan == len(rows) and exit_status == want_exit
    checks.append({"name": f"{PREFIX}{name}/plan_and_exit", "pass": ok, "by": "host", "boot": "kselftest",
                   "detail": f"plan 1..{plan} (the table has {len(rows)} cases), exit {exit_status} "
                             f"(want {want_exit}: {fails} case(s) FAIL)"})
    return checks, problems


def server_msis(log, offer):
    """tlpx-sim's stop line: the card signalled MSIs (the transfers' completions, MSI1) and refused no DMA."""
    stop = re.search(r"DMA (\d+) bytes read (\d+) bytes written; refused DMA: (\d+) reads (\d+) writes;.*?MSI (\d+) signalled", log)
    if not stop:
        return False, "no tlpx-sim stop line with DMA and MSI counts in the server's log"
    rd, wr, rr, rw, msis = (int(x) for x in stop.groups())
    # Each transfer case moves every size once or twice (COPY reads and writes): 3 passes' worth of
    # data at least, and one MSI per transfer (6 cases x 5 sizes x 3 passes) plus MSI1.
    want_msis = 6 * 5 * 3 + (1 if offer["msi"] >= 1 else 0)
    ok = rr == 0 and rw == 0 and msis == want_msis and rd > 0 and wr > 0
    return ok, (f"server: DMA {rd} bytes read, {wr} written, refused {rr} reads {rw} writes, {msis} MSIs signalled "
                f"(want none refused and {want_msis} MSIs: one per transfer, 6 cases x 5 sizes x 3 passes, and MSI1)")


def evaluate(data, want, base_records, offer):
    """The kselftest boot's channel -> (checks, facts, problems)."""
    grammar = {k: v for k, v in base_records.items() if k != "TLPX-REFUSED"}
    grammar.update(RECORDS)
    records, problems = vfio_checks.parse_channel(data, grammar)
    by_kind = {}
    for n, kind, m in records:
        by_kind.setdefault(kind, []).append((n, m))
    for kind in ("TLPX-BOOT", "TLPX-UPTIME", "TLPX-DONE"):
        if len(by_kind.get(kind, [])) != 1 and records:
            problems.append(f"kselftest boot: {kind} must appear once on the checks channel, found {len(by_kind.get(kind, []))}")
    checks, seen = [], {}
    for n, m in by_kind.get("TLPX-CHECK", []):
        name = m.group(1)
        if name in seen:
            problems.append(f"kselftest boot: check {name} appears twice (lines {seen[name]} and {n})")
            continue
        seen[name] = n
        if name not in GUEST_CHECKS:
            problems.append(f"kselftest boot: unknown check {name!r} on line {n} (not in kselftest_checks.py's GUEST_CHECKS)")
            continue
        checks.append({"name": PREFIX + name, "pass": m.group(2) == "PASS", "detail": m.group(3), "by": "guest", "boot": "kselftest"})
    for name in GUEST_CHECKS:
        if name not in seen:
            checks.append({"name": PREFIX + name, "pass": False, "detail": "did not run (no record on the checks channel)",
                           "by": "guest", "boot": "kselftest"})
    lines = {p: [] for p in PASSES}
    exits, marks, order = {}, {}, []
    for n, kind, m in records:
        if kind == "TLPX-KSELFTEST-PASS":
            p, edge = m.group(1), m.group(2)
            if (p, edge) in marks:
                problems.append(f"kselftest pass {p} {edge}s twice (line {n})")
            marks[(p, edge)] = float(m.group(3))
            if edge == "start":
                order.append(p)
        elif kind in ("TLPX-KSELFTEST", "TLPX-KSELFTEST-EXIT"):
            p = m.group(1)
            if (p, "start") not in marks or (p, "end") in marks:
                problems.append(f"checks channel line {n}: a kselftest line of pass {p} outside its start and end")
            if kind == "TLPX-KSELFTEST":
                lines[p].append(m.group(2))
            else:
                exits[p] = int(m.group(2))
    if order and order != list(PASSES[:len(order)]):
        problems.append(f"kselftest passes ran in the order {order}, not {list(PASSES)}")
    for p in PASSES:
        c, pr = judge_pass(p, lines[p], exits.get(p), offer)
        checks += c
        problems += pr
    facts = {"kernel": None, "init_uptime_s": None, "done_uptime_s": None, "lines": lines, "exits": exits,
             "lspci": [m.group(1) for _, m in by_kind.get("TLPX-LSPCI", [])],
             "pass_seconds": {p: round(marks[(p, "end")] - marks[(p, "start")], 1)
                              for p in PASSES if (p, "start") in marks and (p, "end") in marks}}
    if by_kind.get("TLPX-BOOT"):
        m = by_kind["TLPX-BOOT"][0][1]
        facts["kernel"], facts["init_uptime_s"] = m.group(1), float(m.group(2))
    if by_kind.get("TLPX-UPTIME"):
        facts["done_uptime_s"] = float(by_kind["TLPX-UPTIME"][0][1].group(1))

    def host(name, ok, detail):
        checks.append({"name": PREFIX + name, "pass": bool(ok), "detail": detail, "by": "host", "boot": "kselftest"})

    kernel = facts["kernel"]
    host("kernel_boots", kernel is not None and kernel == want.get("release"),
         f"kernel {kernel}, /init at {facts['init_uptime_s']} s of uptime" if kernel == want.get("release")
         else f"the guest runs kernel {kernel}, the initramfs was built for {want.get('release')}" if kernel
         else "no TLPX-BOOT record")
    pci = by_kind.get("TLPX-PCI", [])
    if not pci:
        host("device_config_space", False, f"no TLPX-PCI record: sysfs has no {want.get('addr')} in the guest")
    else:
        m = pci[0][1]
        cfg = bytes.fromhex(m.group(3))
        got = f"{vfio_checks.u16(cfg, 0):04x}:{vfio_checks.u16(cfg, 2):04x}" if len(cfg) >= 64 else None
        host("device_config_space", m.group(1) == want.get("addr") and got == want.get("id"),
             f"{m.group(1)}: IDs {got} (want {want.get('id')} at {want.get('addr')})")
    ok, detail = pcitest_checks.card_offer(facts["lspci"], offer)
    host("card_offer", ok, detail)
    ok, detail = server_msis(want.get("server_log") or "", offer)
    host("server_msis", ok, detail)
    done = by_kind.get("TLPX-DONE")
    host("guest_finished", bool(done), f"TLPX-DONE at {facts['done_uptime_s']} s of uptime" if done
         else "no TLPX-DONE: the guest did not finish (see console.log)")
    status = want.get("qemu_status")
    host("qemu_exit", status == 0, "QEMU exited 0 (guest powered off)" if status == 0 else
         f"QEMU did not finish within {want.get('timeout')} s (wall clock)" if status in (124, 137) else f"QEMU exited with status {status}")
    server = want.get("server") or "unknown"
    host("server_ran", server in ("running", "exit 0"), f"the device server: {server}")
    for c in checks:
        if not c["pass"]:
            problems.append(f"check {c['name']} failed: {c['detail']}")
    return checks, facts, problems


def output_text(lines, exits):
    out = []
    for p in PASSES:
        out.append(f"#### pass {p} (exit {exits.get(p)})")
        out += lines.get(p, [])
    return "\n".join(out) + "\n"


def parse_output_text(text):
    """output_text's inverse: ({pass: [lines]}, {pass: exit status}); a '# ' line before the first
    pass is the fixture's header."""
    lines, exits, cur = {p: [] for p in PASSES}, {}, None
    for line in text.split("\n")[:-1]:
        m = re.fullmatch(r"#### pass (\S+) \(exit (\S+)\)", line)
        if m:
            cur = m.group(1)
            if cur not in lines:
                raise ValueError(f"unknown pass {cur!r}")
            exits[cur] = int(m.group(2)) if m.group(2).isdigit() else None
        elif cur is None and line.startswith("# "):
            continue
        elif cur is None:
            raise ValueError(f"a line before the first '#### pass': {line!r}")
        else:
            lines[cur].append(line)
    return lines, exits


FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "kselftest-card.txt")


def table_markdown(offer):
    """The table, for docs/virtual-platform.md (vplat_checks.py --kselftest-table)."""
    out = ["| pass | test case | expected | why |", "|---|---|---|---|"]
    for p in PASSES:
        for case, want, skip, why in expected_pass(p, offer):
            out.append(f"| {p} | `{case}` | {want}{' (' + skip + ')' if skip else ''} | {why} |")
    return "\n".join(out)


def good_channel(offer, release="7.3.4+deb13-amd64", mutate=None, recorded=None):
    """A well-formed channel made from the table (the self-test's start), or from recorded output
    ((lines, exits) of parse_output_text); mutate(pass, lines)."""
    cfg = bytearray(256)
    cfg[0:4] = (0x10ee).to_bytes(2, "little") + (0x7c01).to_bytes(2, "little")
    out = [f"TLPX-BOOT kernel {release} uptime 14.9", f"TLPX-PCI 0000:01:00.0 - {cfg.hex()}"]
    out += [f"TLPX-LSPCI {l}" for l in pcitest_checks.CARD_LSPCI]
    out += [f"TLPX-CHECK {c} PASS fine" for c in GUEST_CHECKS]
    t = 20.0
    for p in PASSES:
        if recorded:
            ls = list(recorded[0][p])
        else:
            rows = expected_pass(p, offer)
            ls = ["TAP version 13", f"1..{len(rows)}"]
            for i, (case, want, skip, _) in enumerate(rows, 1):
                ls.append(f"#  RUN           {case} ...")
                ls.append(f"ok {i} {case} # SKIP {skip}" if want == "SKIP" else f"{'ok' if want == 'PASS' else 'not ok'} {i} {case}")
        if mutate:
            ls = mutate(p, ls)
        fails = sum(1 for l in ls if l.startswith("not ok"))
        out.append(f"TLPX-KSELFTEST-PASS {p} start {t:.2f}")
        out += [f"TLPX-KSELFTEST {p} {l}" for l in ls]
        out.append(f"TLPX-KSELFTEST-EXIT {p} {recorded[1].get(p) if recorded and not mutate else 1 if fails else 0}")
        t += 10
        out.append(f"TLPX-KSELFTEST-PASS {p} end {t:.2f}")
    out += ["TLPX-UPTIME 99.0", "TLPX-DONE"]
    return ("\n".join(out) + "\n").encode()


def self_test(base_records):
    """-> (cases, failures): the table accepts its own output and refuses what it must."""
    offer = pcitest_checks.parse_offer(pcitest_checks.CARD_OFFER)
    log = ("tlpx-sim vfio-user: stopped at card cycle 9: DMA 100 bytes read 100 bytes written; refused DMA: 0 reads 0 writes; "
           f"DMA_MAP 1; MSI {6 * 5 * 3 + 1} signalled, 0 without eventfd\n")
    want = {"release": "7.3.4+deb13-amd64", "addr": "0000:01:00.0", "id": "10ee:7c01", "qemu_status": 0, "server": "exit 0",
            "timeout": 600, "server_log": log}
    failures, cases = [], 0
    recorded = parse_output_text(open(FIXTURE).read()) if os.path.exists(FIXTURE) else None
    if recorded is None:
        failures.append(f"no fixture {FIXTURE}: the recorded TAP output of the kselftest against the card")
    for what, rec in (("the fixture", recorded), ("the table's own output", None)):
        if what == "the fixture" and rec is None:
            continue
        cases += 1
        checks, _, problems = evaluate(good_channel(offer, recorded=rec), want, base_records, offer)
        if problems or len(checks) != len(expected_check_names(offer)):
            failures.append(f"{what}: {problems[:3]} ({len(checks)} checks, {len(expected_check_names(offer))} expected)")

    def flip(case, new):
        return lambda p, ls: [re.sub(rf"^(not )?ok (\d+) {re.escape(case)}.*$", lambda m: f"{new} {m.group(2)} {case}", l) for l in ls]
    bad = {
        "MSI_TEST passing (no second vector)": (flip("pci_ep_basic.MSI_TEST", "ok"), "all/pci_ep_basic.MSI_TEST failed"),
        "a read FAIL": (flip("pci_ep_data_transfer.memcpy.READ_TEST", "not ok"), "all/pci_ep_data_transfer.memcpy.READ_TEST failed"),
        "BAR1 passing": (flip("pci_ep_bar.BAR1.BAR_TEST", "ok"), "all/pci_ep_bar.BAR1.BAR_TEST failed"),
        "a case missing": (lambda p, ls: [l for l in ls if "COPY_TEST" not in l or ".dma." not in l],
                           "all/pci_ep_data_transfer.dma.COPY_TEST failed: did not run"),
        "an unknown case": (lambda p, ls: ls + ["ok 99 pci_ep_basic.NEW_TEST"], "is not in the table"),
        "another SKIP reason": (lambda p, ls: [l.replace("# SKIP BAR is disabled", "# SKIP BAR is reserved") for l in ls],
                                "pci_ep_bar.BAR2.BAR_TEST failed"),
        "the plan short": (lambda p, ls: [("1..5" if TAP_PLAN.fullmatch(l) else l) for l in ls], "plan_and_exit failed"),
    }
    for what, (mut, must_say) in bad.items():
        cases += 1
        _, _, problems = evaluate(good_channel(offer, mutate=lambda p, ls: mut(p, ls) if p == "all" else ls, recorded=recorded),
                                  want, base_records, offer)
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems[:4]} has nothing saying {must_say!r}")
    cases += 1
    # A transfer passing with the fault switch on.
    _, _, problems = evaluate(good_channel(offer, mutate=lambda p, ls: flip("pci_ep_data_transfer.dma.WRITE_TEST", "ok")(p, ls)
                                           if p == "fault" else ls), want, base_records, offer)
    if not any("fault/pci_ep_data_transfer.dma.WRITE_TEST failed" in p for p in problems):
        failures.append(f"a transfer passing with the fault on: {problems[:4]}")
    for what, change, must_say in (("an MSI lost", {"server_log": log.replace("MSI 91", "MSI 90")}, "server_msis failed"),
                                   ("other kernel", {"release": "6.1.0-57-amd64"}, "the initramfs was built for 6.1"),
                                   ("QEMU timed out", {"qemu_status": 124}, "did not finish within 600 s")):
        cases += 1
        _, _, problems = evaluate(good_channel(offer), dict(want, **change), base_records, offer)
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems[:4]} has nothing saying {must_say!r}")
    return cases, failures

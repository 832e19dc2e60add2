"""The virtual platform's second boot (scripts/vplat.sh, vplat_mode=pcitest): Linux's own PCI
endpoint test (pci_endpoint_test.ko, pcitest, pcitest.sh from Debian's linux-source, built by
scripts/pcitest_build.sh) against the card with the pci_epf_test DUT in its slot.

The guest (scripts/vplat/pcitest-checks) sends every line pcitest prints as a record
`TLPX-PCITEST <pass> <line>`; this module holds each line to the table of what the device offers
(`expected_pass`): OKAY for what it has, NOT OKAY for what it has not, every transfer NOT OKAY
while the DUT's fault switch is on. A line that is not in the table (an unknown line, a line out
of order, one missing, `TEST FAILED`) fails the run. docs/virtual-platform.md lists the table
with its reasons. `vplat_checks.py` calls `evaluate` and runs `self_test`.
"""
import os
import re

import vfio_checks  # scripts/qemu (vplat_checks.py puts it on the path)

# What the card offers a PCI driver: tlpx-sim's config space, the same for every card whatever is
# in its slot (host/crates/tlpx-sim: BAR0 1 MiB, no INTx pin, MSI with one vector, no MSI-X
# capability), and the pci_epf_test DUT's fault switch. The pcitest boot's `card_offer` check
# holds the guest's lspci of the card to it, so a change of the config space shows there first.
CARD_OFFER = "bars=1 intx=0 msi=32 msix=32 fault=1"
OFFER_KEYS = ("bars", "intx", "msi", "msix", "fault")

# pcitest.sh's transfer sizes (tools/pci/pcitest.sh), and the interrupt loops' bounds in the copy
# the guest runs (scripts/pcitest_build.sh keeps MSI 1..32 and cuts MSI-X 1..2048 to 1..33: the
# card's 32 entries and one past them).
SIZES = (1, 1024, 1025, 1024000, 1024001)
MSI_LOOP = 32
MSIX_LOOP = 33

# The passes, in the order the guest runs them: pcitest.sh, its transfers again with -d, both again
# with the fault switch on, and three transfers with it off again.
PASSES = ("script", "dma", "fault-script", "fault-dma", "after")
AFTER = (("read", 1024000, False), ("write", 1024000, True), ("copy", 1025, False))

RECORDS = {
    "TLPX-PCITEST": re.compile(r"(%s) (.*)" % "|".join(re.escape(p) for p in PASSES)),
    "TLPX-PCITEST-PASS": re.compile(r"(%s) (start|end) ([0-9]+\.[0-9]+)" % "|".join(re.escape(p) for p in PASSES)),
}
# Checks the guest's pcitest-checks sends (after the init's own lspci_runs and device_listed).
GUEST_CHECKS = ["lspci_runs", "device_listed", "pcitest_module_loads", "pcitest_bind", "pcitest_fault_on", "pcitest_fault_off"]
HOST_CHECKS = ["kernel_boots", "device_config_space", "card_offer", "server_counts", "guest_finished", "qemu_exit", "server_ran"]
PREFIX = "pcitest/"


def parse_offer(text):
    """'bars=1 intx=0 msi=1 msix=0 fault=1' -> dict; ValueError naming what is wrong."""
    offer = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if key not in OFFER_KEYS or not eq or not value.isdigit():
            raise ValueError(f"pcitest offer {text!r}: {word!r} is not KEY=N with KEY one of {', '.join(OFFER_KEYS)}")
        offer[key] = int(value)
    missing = [k for k in OFFER_KEYS if k not in offer]
    if missing:
        raise ValueError(f"pcitest offer {text!r} lacks {', '.join(missing)} (e.g. {CARD_OFFER!r})")
    if not 1 <= offer["bars"] <= 6 or offer["intx"] > 1 or offer["fault"] > 1 or offer["msi"] > 32 or offer["msix"] > 2048:
        raise ValueError(f"pcitest offer {text!r}: bars 1..6, intx 0|1, msi 0..32, msix 0..2048, fault 0|1")
    return offer


def label_of(op, size):
    return f"{op.upper()} ({size:7d} bytes)"


def norm(text):
    return " ".join(text.split())


def expected_pass(name, offer):
    """The lines a pass must print, in order: ("text", line) for pcitest.sh's headings and blank
    lines, ("result", key, label, want_okay, reason) for each test."""
    fault = name.startswith("fault-") and bool(offer["fault"])
    s = "s" if offer["msi"] != 1 else ""
    xfer_reason = ("the fault switch is on: the DUT flips one data bit per transfer, so the CRC-32 compared differs"
                   if fault else "the DUT moves the data through the slot's DMA port, CRC-32 in its data path")
    rows = []

    def text(line):
        rows.append(("text", line))

    def result(key, label, okay, reason):
        rows.append(("result", key, label, bool(okay), reason))

    def transfers(ops, dma):
        for op in ops:
            if name in ("script", "fault-script"):
                text(""), text(f"{op.capitalize()} Tests"), text("")
                if op == "read":
                    result("set_irq_msi_transfers", "SET IRQ TYPE TO MSI", offer["msi"] >= 1,
                           "pcitest.sh sets MSI again before its transfers (the MSI-X attempt left none)")
            for size in SIZES:
                result(f"{op}_{size}{'_dma' if dma else ''}", label_of(op, size), not fault,
                       xfer_reason + (", with the DMA flag (-d)" if dma else ""))

    if name in ("script", "fault-script"):
        text("BAR tests"), text("")
        for bar in range(6):
            result(f"bar{bar}", f"BAR{bar}", bar < offer["bars"],
                   "BAR0: the test register block at offset 0; the driver writes and reads back its first word"
                   if bar == 0 else f"the device has {offer['bars']} BAR{'s' if offer['bars'] > 1 else ''} (BAR0 only)"
                   if bar >= offer["bars"] else f"BAR{bar} exists: every word written and read back")
        text(""), text("Interrupt tests"), text("")
        intx = "the device has INTx (Interrupt Pin)" if offer["intx"] else "the device has no INTx (Interrupt Pin 0)"
        result("set_irq_legacy", "SET IRQ TYPE TO LEGACY", offer["intx"], intx)
        result("legacy_irq", "LEGACY IRQ", offer["intx"], intx)
        result("set_irq_msi", "SET IRQ TYPE TO MSI", offer["msi"] >= 1, f"the device has MSI ({offer['msi']} vector{s})")
        for n in range(1, MSI_LOOP + 1):
            result(f"msi{n}", f"MSI{n}", n <= offer["msi"],
                   f"vector {n} of the device's {offer['msi']}" if n <= offer["msi"]
                   else f"the device has {offer['msi']} MSI vector{s}: no vector {n} (the driver waits 1 s for it)")
        text("")
        msix = f"the device has MSI-X ({offer['msix']} vectors)" if offer["msix"] else "the device has no MSI-X capability"
        result("set_irq_msix", "SET IRQ TYPE TO MSI-X", offer["msix"] >= 1, msix)
        for n in range(1, MSIX_LOOP + 1):
            result(f"msix{n}", f"MSI-X{n}", n <= offer["msix"],
                   f"MSI-X vector {n} of the device's {offer['msix']}" if n <= offer["msix"]
                   else f"the device has {offer['msix']} MSI-X vectors: no vector {n} (the driver waits 1 s for it)"
                   if offer["msix"] else msix + " (the driver waits 1 s for the interrupt)")
        transfers(("read", "write", "copy"), False)
        text("")
    elif name in ("dma", "fault-dma"):
        transfers(("read", "write", "copy"), True)
    elif name == "after":
        for op, size, dma in AFTER:
            result(f"{op}_{size}{'_dma' if dma else ''}", label_of(op, size), True,
                   "the fault switch is off again: the same transfers work (it was the switch)")
    else:
        raise ValueError(f"unknown pcitest pass {name!r}")
    return rows


def check_name(pass_name, key):
    where = {"script": "", "dma": "", "fault-script": "fault/", "fault-dma": "fault/", "after": "after/"}[pass_name]
    return f"{PREFIX}{where}{key}"


def expected_check_names(offer):
    names = [PREFIX + c for c in GUEST_CHECKS + HOST_CHECKS]
    for p in PASSES:
        names += [check_name(p, row[1]) for row in expected_pass(p, offer) if row[0] == "result"]
    return names


def expected_traffic(offer):
    """What the device must have moved and raised for the whole table: (bytes it read from guest
    memory, bytes it wrote, MSIs). pcitest's READ test has the device write host memory, WRITE
    read it, COPY both; every transfer ends with an MSI (fault or not), and so does each MSI test
    of a vector the device has. Nothing else in this boot makes the card move data."""
    read = written = msis = 0
    for p in PASSES:
        for row in expected_pass(p, offer):
            if row[0] != "result":
                continue
            key = row[1]
            m = re.fullmatch(r"(read|write|copy)_(\d+)(_dma)?", key)
            if m:
                size = int(m.group(2))
                read += size if m.group(1) in ("write", "copy") else 0
                written += size if m.group(1) in ("read", "copy") else 0
                msis += 1
            elif re.fullmatch(r"msix?\d+", key) and row[3]:
                msis += 1
    return read, written, msis


def server_counts(log, offer):
    """tlpx-sim's stop line against expected_traffic: the DUT's DMA went through the card into
    guest RAM, byte for byte, none refused, and every interrupt arrived as an MSI."""
    stop = re.search(r"DMA (\d+) bytes read (\d+) bytes written; refused DMA: (\d+) reads (\d+) writes;.*?MSI (\d+) signalled", log)
    if not stop:
        return False, "no tlpx-sim stop line with DMA and MSI counts in the server's log"
    got = tuple(int(x) for x in stop.groups())
    read, written, msis = expected_traffic(offer)
    want = (read, written, 0, 0, msis)
    return got == want, (f"server: DMA {got[0]} bytes read, {got[1]} written, refused {got[2]} reads {got[3]} writes, "
                         f"{got[4]} MSIs signalled (want {read}, {written}, 0, 0, {msis}: every transfer's bytes "
                         "once, one MSI per transfer and per MSI test of a vector the card has)")


RESULT_LINE = re.compile(r"(.+?):\s+(OKAY|NOT OKAY|TEST FAILED|FAILED)")


def judge_pass(name, lines, offer):
    """One pass's lines (as the guest sent them) against its table -> (checks, problems)."""
    checks, problems = [], []
    rows = expected_pass(name, offer)
    for i, row in enumerate(rows):
        got = lines[i] if i < len(lines) else None
        if row[0] == "text":
            if got is None:
                problems.append(f"pcitest pass {name}: ends before line {i + 1} ({row[1]!r} expected)")
            elif norm(got) != norm(row[1]):
                problems.append(f"pcitest pass {name} line {i + 1}: {got!r}, where pcitest prints {row[1]!r}")
            continue
        _, key, label, want, reason = row
        want_text = "OKAY" if want else "NOT OKAY"
        m = RESULT_LINE.fullmatch(got.strip()) if got is not None else None
        if got is None:
            ok, detail = False, f"did not run (pass {name} ended before {label!r}); want {want_text}: {reason}"
        elif m is None or norm(m.group(1)) != norm(label):
            ok, detail = False, f"line {i + 1} of pass {name} is {got!r}, not {label!r}; want {want_text}: {reason}"
        else:
            ok = m.group(2) == want_text
            detail = f"{norm(got)} (want {want_text}: {reason})"
        checks.append({"name": check_name(name, key), "pass": ok, "detail": detail, "by": "host", "boot": "pcitest"})
    for j in range(len(rows), len(lines)):
        problems.append(f"pcitest pass {name} line {j + 1}: {lines[j]!r} is more than pcitest prints here")
    return checks, problems


def card_offer(lines, offer):
    """The card's `lspci -vv` in the pcitest boot against the offer the table assumes."""
    text = "\n".join(lines)
    if not lines:
        return False, "no `lspci -vv` lines for the device"
    bars = len(re.findall(r"^\s*Region \d: Memory at", text, re.M))
    msi = re.search(r"MSI: Enable[+-] Count=\d+/(\d+)", text)
    msix = re.search(r"MSI-X: Enable[+-] Count=(\d+)", text)
    pin = re.search(r"Interrupt: pin [A-D]", text)
    got = {"bars": bars, "intx": int(bool(pin)), "msi": int(msi.group(1)) if msi else 0, "msix": int(msix.group(1)) if msix else 0}
    wrong = [f"{k} {got[k]} (want {offer[k]})" for k in got if got[k] != offer[k]]
    return not wrong, (f"lspci: {bars} memory BAR(s), INTx {'yes' if pin else 'none'}, MSI vectors {got['msi']}, "
                       f"MSI-X vectors {got['msix']}" + (f"; differs from the table's offer: {', '.join(wrong)}" if wrong else
                                                           " (the table's offer)"))


def evaluate(data, want, base_records, offer):
    """The pcitest boot's channel -> (checks, facts, problems). base_records: the card boot's
    grammar (vplat_checks.RECORDS), of which this boot uses all but TLPX-REFUSED."""
    grammar = {k: v for k, v in base_records.items() if k != "TLPX-REFUSED"}
    grammar.update(RECORDS)
    records, problems = vfio_checks.parse_channel(data, grammar)
    by_kind = {}
    for n, kind, m in records:
        by_kind.setdefault(kind, []).append((n, m))
    for kind in ("TLPX-BOOT", "TLPX-UPTIME", "TLPX-DONE"):
        if len(by_kind.get(kind, [])) != 1 and records:
            problems.append(f"pcitest boot: {kind} must appear once on the checks channel, found {len(by_kind.get(kind, []))}")
    if records and records[0][1] != "TLPX-BOOT":
        problems.append(f"pcitest boot: the first record (line {records[0][0]}) is {records[0][1]}, not TLPX-BOOT")
    if records and by_kind.get("TLPX-DONE") and records[-1][1] != "TLPX-DONE":
        problems.append(f"pcitest boot: records after TLPX-DONE (line {by_kind['TLPX-DONE'][0][0]})")

    checks, seen = [], {}
    for n, m in by_kind.get("TLPX-CHECK", []):
        name = m.group(1)
        if name in seen:
            problems.append(f"pcitest boot: check {name} appears twice (lines {seen[name]} and {n})")
            continue
        seen[name] = n
        if name not in GUEST_CHECKS:
            problems.append(f"pcitest boot: unknown check {name!r} on line {n} (not in pcitest_checks.py's GUEST_CHECKS)")
            continue
        checks.append({"name": PREFIX + name, "pass": m.group(2) == "PASS", "detail": m.group(3), "by": "guest", "boot": "pcitest"})
    for name in GUEST_CHECKS:
        if name not in seen:
            checks.append({"name": PREFIX + name, "pass": False, "detail": "did not run (no record on the checks channel)",
                           "by": "guest", "boot": "pcitest"})

    # The passes: lines in channel order, each pass between its start and end marks.
    lines = {p: [] for p in PASSES}
    marks, order = {}, []
    for n, kind, m in records:
        if kind == "TLPX-PCITEST-PASS":
            p, edge, t = m.group(1), m.group(2), float(m.group(3))
            if (p, edge) in marks:
                problems.append(f"pcitest pass {p} {edge}s twice (line {n})")
            marks[(p, edge)] = t
            if edge == "start":
                order.append(p)
        elif kind == "TLPX-PCITEST":
            p = m.group(1)
            if (p, "start") not in marks or (p, "end") in marks:
                problems.append(f"checks channel line {n}: a pcitest line of pass {p} outside its start and end")
            lines[p].append(m.group(2))
    if order and order != list(PASSES[:len(order)]):
        problems.append(f"pcitest passes ran in the order {order}, not {list(PASSES)}")
    for p in PASSES:
        c, pr = judge_pass(p, lines[p], offer)
        checks += c
        problems += pr

    facts = {"kernel": None, "init_uptime_s": None, "done_uptime_s": None,
             "lspci": [m.group(1) for _, m in by_kind.get("TLPX-LSPCI", [])], "lines": lines,
             "pass_seconds": {p: round(marks[(p, "end")] - marks[(p, "start")], 1)
                              for p in PASSES if (p, "start") in marks and (p, "end") in marks}}
    if by_kind.get("TLPX-BOOT"):
        m = by_kind["TLPX-BOOT"][0][1]
        facts["kernel"], facts["init_uptime_s"] = m.group(1), float(m.group(2))
    if by_kind.get("TLPX-UPTIME"):
        facts["done_uptime_s"] = float(by_kind["TLPX-UPTIME"][0][1].group(1))

    def host(name, ok, detail):
        checks.append({"name": PREFIX + name, "pass": bool(ok), "detail": detail, "by": "host", "boot": "pcitest"})

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
    ok, detail = card_offer(facts["lspci"], offer)
    host("card_offer", ok, detail)
    ok, detail = server_counts(want.get("server_log") or "", offer)
    host("server_counts", ok, detail)
    done = by_kind.get("TLPX-DONE")
    host("guest_finished", bool(done), f"TLPX-DONE at {facts['done_uptime_s']} s of uptime" if done
         else "no TLPX-DONE: the guest did not finish (a transfer that never gets its interrupt hangs the driver: see console.log)")
    status = want.get("qemu_status")
    host("qemu_exit", status == 0, "QEMU exited 0 (guest powered off)" if status == 0 else
         f"QEMU did not finish within {want.get('timeout')} s (wall clock)" if status in (124, 137) else f"QEMU exited with status {status}")
    server = want.get("server") or "unknown"
    host("server_ran", server in ("running", "exit 0"), f"the device server: {server}")
    for c in checks:
        if not c["pass"]:
            problems.append(f"check {c['name']} failed: {c['detail']}")
    return checks, facts, problems


def output_text(lines):
    """pcitest's whole output as the guest sent it, pass by pass (pcitest-output.txt, the fixture)."""
    out = []
    for p in PASSES:
        out.append(f"#### pass {p}")
        out += lines.get(p, [])
    return "\n".join(out) + "\n"


def parse_output_text(text):
    """output_text's inverse: {pass: [lines]}."""
    lines, cur = {p: [] for p in PASSES}, None
    for line in text.split("\n")[:-1]:
        if line.startswith("#### pass "):
            cur = line[len("#### pass "):]
            if cur not in lines:
                raise ValueError(f"unknown pass {cur!r}")
        elif cur is None and line.startswith("# "):
            continue  # the fixture's header: where it was recorded
        elif cur is None:
            raise ValueError(f"a line before the first '#### pass': {line!r}")
        else:
            lines[cur].append(line)
    return lines


def good_lines(offer):
    """What pcitest prints against a device of that offer, from the table (the self-test's start)."""
    lines = {}
    for p in PASSES:
        lines[p] = []
        for row in expected_pass(p, offer):
            if row[0] == "text":
                lines[p].append(row[1])
            else:
                lines[p].append(f"{row[2]}:  {'OKAY' if row[3] else 'NOT OKAY'}")
    return lines


def channel(lines, lspci, addr="0000:01:00.0", ids=(0x10ee, 0x7c01), guest_checks=GUEST_CHECKS):
    cfg = bytearray(256)
    cfg[0:4] = ids[0].to_bytes(2, "little") + ids[1].to_bytes(2, "little")
    out = [b"TLPX-BOOT kernel 6.1.0-56-amd64 uptime 2.41", f"TLPX-PCI {addr} - {cfg.hex()}".encode()]
    out += [f"TLPX-LSPCI {l}".encode() for l in lspci]
    out += [f"TLPX-CHECK {c} PASS fine".encode() for c in guest_checks]
    t = 5.0
    for p in PASSES:
        out.append(f"TLPX-PCITEST-PASS {p} start {t:.2f}".encode())
        out += [f"TLPX-PCITEST {p} {l}".encode() for l in lines[p]]
        t += 3.0
        out.append(f"TLPX-PCITEST-PASS {p} end {t:.2f}".encode())
    out += [b"TLPX-UPTIME 40.00", b"TLPX-DONE"]
    return b"\n".join(out) + b"\n"


CARD_LSPCI = [
    "0000:01:00.0 Signal processing controller [1180]: Xilinx Corporation Device [10ee:7c01]",
    "   Region 0: Memory at fe600000 (32-bit, non-prefetchable) [size=1M]",
    "   Capabilities: [50] MSI: Enable+ Count=1/32 Maskable- 64bit+",
    "   Capabilities: [60] MSI-X: Enable- Count=32 Masked-",
    "   Capabilities: [70] Express (v2) Endpoint, MSI 00",
]
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "pcitest-card.txt")


def self_test(base_records):
    """-> (cases, failures): the table accepts what the card prints (the recorded fixture of a
    real run, and the table's own good output) and refuses what it must."""
    offer = parse_offer(CARD_OFFER)
    read, written, msis = expected_traffic(offer)
    log = (f"tlpx-sim vfio-user: stopped (the client closed the connection) at card cycle 9: config 1 reads 1 writes; "
           f"BAR0 1 reads (0 read all ones) 1 writes; DMA {read} bytes read {written} bytes written; refused DMA: 0 reads 0 "
           f"writes; DMA_MAP 1 (0 without fd) DMA_UNMAP 0, 1 live; MSI {msis} signalled, 0 without eventfd, 0 while MSI "
           "disabled; resets 1\n")
    want = {"release": "6.1.0-56-amd64", "addr": "0000:01:00.0", "id": "10ee:7c01", "qemu_status": 0, "server": "exit 0",
            "timeout": 300, "server_log": log}
    failures, cases = [], 0
    fixture = parse_output_text(open(FIXTURE).read()) if os.path.exists(FIXTURE) else None
    if fixture is None:
        failures.append(f"no fixture {FIXTURE}: the recorded output of pcitest against the card")
    for what, lines in (("the fixture", fixture), ("the table's own output", good_lines(offer))):
        if lines is None:
            continue
        cases += 1
        checks, _, problems = evaluate(channel(lines, CARD_LSPCI), want, base_records, offer)
        if problems or len(checks) != len(expected_check_names(offer)):
            failures.append(f"{what}: {problems[:3]} ({len(checks)} checks, {len(expected_check_names(offer))} expected)")
    good = fixture or good_lines(offer)

    def mutate(p, f):
        lines = {k: list(v) for k, v in good.items()}
        lines[p] = f(lines[p])
        return lines

    def verdict(label, new):
        """A mutation: the result line whose label is `label` gets the verdict `new`."""
        def f(ls):
            out = []
            for line in ls:
                m = RESULT_LINE.fullmatch(line.strip())
                out.append(f"{m.group(1)}:  {new}" if m and norm(m.group(1)) == norm(label) else line)
            return out
        return f

    bad = {
        "a read NOT OKAY": (mutate("script", verdict(label_of("read", 1025), "NOT OKAY")), "pcitest/read_1025 failed"),
        "BAR1 OKAY (a BAR the card has not)": (mutate("script", verdict("BAR1", "OKAY")), "pcitest/bar1 failed"),
        "MSI-X33 OKAY (one past the table)": (mutate("script", verdict("MSI-X33", "OKAY")), "pcitest/msix33 failed"),
        "MSI17 NOT OKAY": (mutate("script", verdict("MSI17", "NOT OKAY")), "pcitest/msi17 failed"),
        "a transfer OKAY with the fault on": (mutate("fault-dma", verdict(label_of("copy", 1024001), "OKAY")),
                                              "pcitest/fault/copy_1024001_dma failed"),
        "a BAR test changed by the fault": (mutate("fault-script", verdict("BAR0", "NOT OKAY")), "pcitest/fault/bar0 failed"),
        "TEST FAILED (the ioctl failed)": (mutate("dma", verdict(label_of("write", 1), "TEST FAILED")), "pcitest/write_1_dma failed"),
        "still failing after the switch is off": (mutate("after", verdict(label_of("read", 1024000), "NOT OKAY")),
                                                  "pcitest/after/read_1024000 failed"),
        "a line missing": (mutate("after", lambda ls: ls[:-1]), "pcitest/after/copy_1025 failed: did not run"),
        "a line more": (mutate("dma", lambda ls: ls + ["pcitest: can't open PCI Endpoint Test device"]), "more than pcitest prints"),
        "a heading changed": (mutate("script", lambda ls: [("Read tests" if l == "Read Tests" else l) for l in ls]),
                              "where pcitest prints 'Read Tests'"),
        "lines out of order": (mutate("script", lambda ls: ls[:2] + [ls[3], ls[2]] + ls[4:]), "pcitest/bar0 failed"),
    }
    for what, (lines, must_say) in bad.items():
        cases += 1
        _, _, problems = evaluate(channel(lines, CARD_LSPCI), want, base_records, offer)
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems[:4]} has nothing saying {must_say!r}")
    others = {
        "a pass empty": (channel({**good, "after": []}, CARD_LSPCI), "pcitest/after/read_1024000 failed: did not run", {}),
        "fewer MSI vectors on the card": (channel(good, [l.replace("Count=1/32", "Count=1/16") for l in CARD_LSPCI]),
                                          "differs from the table's offer: msi 16 (want 32)", {}),
        "a smaller MSI-X table": (channel(good, [l.replace("Count=32 Masked", "Count=8 Masked") for l in CARD_LSPCI]),
                                  "msix 8 (want 32)", {}),
        "the fault switch not set": (channel(good, CARD_LSPCI).replace(b"TLPX-CHECK pcitest_fault_on PASS", b"TLPX-CHECK pcitest_fault_on FAIL"),
                                     "pcitest/pcitest_fault_on failed", {}),
        "a pcitest line outside its pass": (channel(good, CARD_LSPCI).replace(b"TLPX-UPTIME", b"TLPX-PCITEST dma BAR0:  OKAY\nTLPX-UPTIME"),
                                            "outside its start and end", {}),
        "a guest check unknown": (channel(good, CARD_LSPCI, guest_checks=GUEST_CHECKS + ["pcitest_extra"]), "unknown check 'pcitest_extra'", {}),
        "the DUT read 4 bytes more": (channel(good, CARD_LSPCI), "pcitest/server_counts failed",
                                      {"server_log": log.replace(f"DMA {read} bytes", f"DMA {read + 4} bytes")}),
        "a DMA refused": (channel(good, CARD_LSPCI), "pcitest/server_counts failed",
                          {"server_log": log.replace("refused DMA: 0 reads", "refused DMA: 1 reads")}),
        "an MSI lost": (channel(good, CARD_LSPCI), "pcitest/server_counts failed",
                        {"server_log": log.replace(f"MSI {msis} signalled", f"MSI {msis - 1} signalled")}),
        "no stop line": (channel(good, CARD_LSPCI), "no tlpx-sim stop line", {"server_log": ""}),
    }
    for what, (data, must_say, change) in others.items():
        cases += 1
        _, _, problems = evaluate(data, dict(want, **change), base_records, offer)
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {problems[:4]} has nothing saying {must_say!r}")
    for text in ("bars=1 intx=0 msi=1 msix=0", "bars=7 intx=0 msi=1 msix=0 fault=1", "bars=1 intx=0 msi=x msix=0 fault=1", "color=red"):
        cases += 1
        try:
            parse_offer(text)
            failures.append(f"the offer {text!r} was accepted")
        except ValueError:
            pass
    return cases, failures

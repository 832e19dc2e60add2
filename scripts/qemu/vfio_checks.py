#!/usr/bin/env python3
"""The host side of the QEMU vfio test (scripts/qemu_vfio_test.sh): reads the guest's checks
channel (its second serial port, build/qemu-vfio/checks.log), holds every line to the record
grammar below, checks `tlpx list` against the config space the guest read from sysfs, and
writes results.json.

The channel is strict on purpose. It used to be the kernel's console, where a DMAR fault
message once landed inside a check line; the check then simply looked missing. Now the kernel
never writes the channel, and anything on it that is not a well-formed record (a split or
merged line, a stray "\\r", bytes that are not UTF-8, an unknown kind or check name, a check
twice) fails the test with the line quoted, rather than being skipped.

    vfio_checks.py --self-test        the parser against lines it must refuse (run by the script)
    vfio_checks.py --checks FILE ...  the verdict (see main)
"""
import argparse
import json
import re
import subprocess
import sys

# Records: `KIND payload`, one a line, UTF-8, no control characters. Each payload regex must
# match the whole payload.
RECORDS = {
    "TLPX-BOOT": re.compile(r"kernel (\S+)"),
    "TLPX-ACCEL": re.compile(r"(kvm|tcg)"),
    "TLPX-CHECK": re.compile(r"([a-z0-9_-]+) (PASS|FAIL) (\S.*)"),
    "TLPX-LATENCY": re.compile(r"samples=(\d+) lost=(\d+) min_ns=(\d+) p50_ns=(\d+) p99_ns=(\d+) max_ns=(\d+)"),
    "TLPX-ISR": re.compile(r"irqs=\[[0-9, ]*\] matched=\d+ of \d+ write_to_entry_p50_ns=\d+ entry_to_wake_p50_ns=\d+"),
    "TLPX-RESULTS": re.compile(r"(\{.*\})"),
    # one line of `tlpx list`, verbatim (check_list_table holds it to the table's format)
    "TLPX-LIST": re.compile(r"(.*)"),
    "TLPX-LIST-JSON": re.compile(r"(\{.*\})"),
    # address, driver (- for none), config space bytes in hex (at least the 64-byte header)
    "TLPX-PCI": re.compile(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (\S+) ((?:[0-9a-f]{2}){64,4096})"),
    "TLPX-DONE": re.compile(r""),
}
ONCE = ["TLPX-BOOT", "TLPX-ACCEL", "TLPX-RESULTS", "TLPX-LIST-JSON", "TLPX-DONE"]

# Checks the guest's init writes, and those of examples/vfio_edu (its stdout is the channel).
INIT_CHECKS = ["modprobe_vfio_iommu_type1", "modprobe_vfio-pci", "find_edu", "find_ivshmem", "bind_edu", "bind_ivshmem",
               "cli_refuses_non_tlpx_info", "cli_refuses_non_tlpx_selftest", "cli_refuses_non_tlpx_irq", "vfio_edu_exit",
               "dmar_fault_logged", "unbind_edu", "unbind_ivshmem", "litepcie_module_loads", "litepcie_absent_node_refused",
               "litepcie_module_unloads", "tlpx_list_runs"]
VFIO_EDU_CHECKS = ["wc_refused_on_non_prefetchable_bar", "open", "bar0_mmap_uncached", "ident", "liveness", "config_space",
                   "bar_block_16_bytes", "bar_path_syscall", "dma_roundtrip", "dma_unmapped_iova_blocked", "msi", "msi_latency",
                   "isr_stage", "reset", "bad_input_refused", "wc_mapping", "wc_writes_land"]
# vfio_edu reports a part it could not finish (an error before its checks ran) as a failed
# check named after the device; accepted only as FAIL, and the checks it skipped are missing.
ABORT_CHECKS = {"edu", "ivshmem"}
# Checks made here, on the channel's records.
HOST_CHECKS = ["tlpx_list_table", "tlpx_list_json"]
EXPECTED = INIT_CHECKS + VFIO_EDU_CHECKS

# What `tlpx list` must show for the functions this test's QEMU command line puts there
# (scripts/qemu_vfio_test.sh): IDs, driver after the unbinds, and the link columns. The root
# port's capability (Gen3 x4) is set on the command line (x-speed=8,x-width=4) so that it
# differs from its link status, which QEMU copies from the Gen1 x1 endpoint behind it: the
# two columns cannot be mixed up unnoticed.
PINNED = {
    "0000:00:05.0": {"id": "1234:11e8", "driver": "-", "link": "PCI (no PCIe capability)"},
    "0000:00:06.0": {"id": "1af4:1110", "driver": "-", "link": "PCI (no PCIe capability)"},
    "0000:00:07.0": {"id": "1b36:000c", "driver": "pcieport", "link_prefix": "Gen1 x1 (cap Gen3 x4) ", "device_type": "Root Port"},
    "0000:01:00.0": {"id": "1af4:1044", "driver": "-", "link_prefix": "Gen1 x1 (cap Gen1 x1) ", "device_type": "Endpoint"},
}
LIST_HEADER = ("SOURCE   ADDRESS        ID        CLASS                        LINK (status, capability, MPS, MRRS)         "
               "DRIVER       DESCRIPTION")
# The table's fixed columns (crates/tlpx/src/cmd/list.rs): name, width; one space between.
LIST_COLUMNS = [("source", 8), ("address", 14), ("id", 9), ("class", 28), ("link", 44), ("driver", 12)]


def quote(raw):
    """A line as it was, escapes visible, shortened to something readable."""
    text = repr(raw)
    return text if len(text) <= 300 else text[:300] + "...(" + str(len(raw)) + " bytes)"


def parse_channel(data, grammar=None):
    """Bytes of the channel -> (records [(line number, kind, match)], problems). `grammar` is
    another {kind: payload regex} than this test's RECORDS (scripts/vplat/vplat_checks.py)."""
    grammar = RECORDS if grammar is None else grammar
    records, problems = [], []
    if not data:
        return records, ["the checks channel is empty: the guest wrote no record"]
    lines = data.split(b"\n")
    if lines[-1] != b"":
        problems.append(f"checks channel line {len(lines)} is cut off (no newline at the end): {quote(lines[-1])}")
    for n, raw in enumerate(lines[:-1], 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            problems.append(f"checks channel line {n} is not UTF-8 ({err}): {quote(raw)}")
            continue
        if any(ord(c) < 0x20 or ord(c) == 0x7f for c in line):
            problems.append(f"checks channel line {n} has control characters: {quote(raw)}")
            continue
        kind, _, payload = line.partition(" ")
        pattern = grammar.get(kind)
        if pattern is None:
            problems.append(f"checks channel line {n} is not a record (unknown kind {kind[:40]!r}): {quote(raw)}")
            continue
        m = pattern.fullmatch(payload)
        if m is None or (kind == "TLPX-DONE" and line != kind):
            problems.append(f"checks channel line {n} is a malformed {kind} record: {quote(raw)}")
            continue
        records.append((n, kind, m))
    return records, problems


def verdict_of_records(records):
    """Records -> (checks, results, facts, problems): the check and cardinality rules."""
    problems = []
    by_kind = {}
    for n, kind, m in records:
        by_kind.setdefault(kind, []).append((n, m))
    for kind in ONCE:
        got = by_kind.get(kind, [])
        if len(got) != 1:
            where = ", ".join(str(n) for n, _ in got)
            problems.append(f"{kind} must appear once on the checks channel, found {len(got)}" + (f" (lines {where})" if got else ""))
    if records and records[0][1] != "TLPX-BOOT":
        problems.append(f"the first record (line {records[0][0]}) is {records[0][1]}, not TLPX-BOOT")
    if records and records[-1][1] != "TLPX-DONE" and by_kind.get("TLPX-DONE"):
        problems.append(f"records after TLPX-DONE (line {by_kind['TLPX-DONE'][0][0]}): the last is line {records[-1][0]}")

    checks, seen = [], {}
    for n, m in by_kind.get("TLPX-CHECK", []):
        name, verdict, detail = m.group(1), m.group(2), m.group(3)
        if name in seen:
            problems.append(f"check {name} appears twice (lines {seen[name]} and {n})")
            continue
        seen[name] = n
        if name not in EXPECTED and not (name in ABORT_CHECKS and verdict == "FAIL"):
            problems.append(f"checks channel line {n}: unknown check {name!r} ({verdict} {detail})")
            continue
        checks.append({"name": name, "pass": verdict == "PASS", "detail": detail, "by": "guest", "line": n})
    for name in EXPECTED:
        if name not in seen:
            problems.append(f"check {name} did not run (no TLPX-CHECK {name} line on the checks channel)")

    results = {}
    for n, m in by_kind.get("TLPX-RESULTS", [])[:1]:
        try:
            results = json.loads(m.group(1))
        except json.JSONDecodeError as err:
            problems.append(f"TLPX-RESULTS on line {n} is not JSON ({err}): {quote(m.group(1))}")
    if results:
        # vfio_edu's own list of its checks must be the lines it printed, each exactly.
        on_channel = {c["name"]: c for c in checks}
        if not isinstance(results.get("checks"), list) or not isinstance(results.get("failed"), int):
            problems.append(f"TLPX-RESULTS has no checks list or failed count: keys {sorted(results)}")
        else:
            for c in results["checks"]:
                line = on_channel.get(c.get("name"))
                if line is None or (line["pass"], line["detail"]) != (c.get("pass"), c.get("detail")):
                    problems.append(f"vfio_edu's results say check {c.get('name')} was {c.get('pass')}: {c.get('detail')!r}, "
                                    f"but its line on the channel says {line and (line['pass'], line['detail'])}")
            if results["failed"] != sum(not c.get("pass") for c in results["checks"]):
                problems.append(f"TLPX-RESULTS failed={results['failed']} but its checks list has "
                                f"{sum(not c.get('pass') for c in results['checks'])} failures")
        lat = results.get("msi_latency")
        lines = by_kind.get("TLPX-LATENCY", [])
        if lat and len(lines) == 1:
            fields = [int(x) for x in lines[0][1].groups()]
            want = [lat.get(k) for k in ("samples", "lost", "min_ns", "p50_ns", "p99_ns", "max_ns")]
            if fields != want:
                problems.append(f"TLPX-LATENCY (line {lines[0][0]}) says {fields}, TLPX-RESULTS' msi_latency {want}")
        elif lat or lines:
            problems.append(f"{len(lines)} TLPX-LATENCY lines, msi_latency in the results: {bool(lat)}")

    facts = {
        "kernel": by_kind["TLPX-BOOT"][0][1].group(1) if by_kind.get("TLPX-BOOT") else None,
        "accel": by_kind["TLPX-ACCEL"][0][1].group(1) if by_kind.get("TLPX-ACCEL") else None,
        "listing": [m.group(1) for _, m in by_kind.get("TLPX-LIST", [])],
        "listing_json": by_kind["TLPX-LIST-JSON"][0][1].group(1) if by_kind.get("TLPX-LIST-JSON") else None,
        "pci": [(n, m.group(1), m.group(2), bytes.fromhex(m.group(3))) for n, m in by_kind.get("TLPX-PCI", [])],
    }
    return checks, results, facts, problems


# Config space, decoded here independently of tlpx (PCIe 5.0 7.5.1, 7.5.3).
def u16(cfg, at):
    return int.from_bytes(cfg[at:at + 2], "little")


def u32(cfg, at):
    return int.from_bytes(cfg[at:at + 4], "little")


def pcie_capability(cfg):
    """Offset of the PCI Express capability (ID 0x10), or None; an error for a broken list."""
    if not u16(cfg, 0x06) & 0x10:  # Status: Capabilities List
        return None
    at, hops = cfg[0x34] & 0xfc, 0
    while at:
        if at < 0x40 or at + 2 > len(cfg) or hops > 48:
            raise ValueError(f"capability list points to {at:#x} after {hops} entries")
        if cfg[at] == 0x10:
            return at
        at, hops = cfg[at + 1] & 0xfc, hops + 1
    return None


DEVICE_TYPES = {0x0: "Endpoint", 0x1: "Legacy Endpoint", 0x4: "Root Port", 0x5: "Upstream Switch Port",
                0x6: "Downstream Switch Port", 0x7: "PCIe to PCI/PCI-X Bridge", 0x8: "PCI/PCI-X to PCIe Bridge",
                0x9: "Root Complex Integrated Endpoint", 0xa: "Root Complex Event Collector"}
# Link speed codes (Current/Max Link Speed) -> GT/s.
GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def decode(cfg):
    """What `tlpx list` should say about one function, from its config bytes."""
    out = {"id": f"{u16(cfg, 0):04x}:{u16(cfg, 2):04x}"}
    cap = pcie_capability(cfg)
    if cap is None:
        out["link"] = "PCI (no PCIe capability)"
        out["json_link"] = {"kind": "conventional_pci"}
        return out
    caps, devcap, devctl = u16(cfg, cap + 2), u32(cfg, cap + 4), u16(cfg, cap + 8)
    lnkcap, lnksta = u32(cfg, cap + 0x0c), u16(cfg, cap + 0x12)
    speed, width, max_speed, max_width = lnksta & 0xf, (lnksta >> 4) & 0x3f, lnkcap & 0xf, (lnkcap >> 4) & 0x3f
    if max_speed not in GT_S:
        raise ValueError(f"link capability speed code {max_speed} (this test knows Gen1..Gen6)")
    mps, mrrs, mps_cap = 128 << ((devctl >> 5) & 7), 128 << ((devctl >> 12) & 7), 128 << (devcap & 7)
    # A link that is down reads width 0 (and its speed code may be anything).
    status = f"Gen{speed} x{width}" if width and speed in GT_S else "no link"
    out["link"] = f"{status} (cap Gen{max_speed} x{max_width}) MPS {mps} MRRS {mrrs}"
    out["json_link"] = {"kind": "pcie", "device_type": DEVICE_TYPES.get((caps >> 4) & 0xf, "Reserved"),
                        "speed_gt_s": GT_S.get(speed, 0.0), "generation": speed if speed in GT_S else 0, "width": width,
                        "max_speed_gt_s": GT_S[max_speed], "max_generation": max_speed, "max_width": max_width,
                        "max_payload_supported": mps_cap, "max_payload_size": mps, "max_read_request_size": mrrs}
    return out


def split_row(row):
    """A table row -> its columns, by the fixed widths; None if a separator is not a space."""
    cols, at = {}, 0
    for name, width in LIST_COLUMNS:
        if row[at + width:at + width + 1] != " ":
            return None
        cols[name] = row[at:at + width].rstrip()
        at += width + 1
    cols["description"] = row[at:]
    return cols


def sysfs_truth(facts):
    """TLPX-PCI records -> {address: decoded}, problems."""
    truth, problems = {}, []
    for n, addr, driver, cfg in facts["pci"]:
        if addr in truth:
            problems.append(f"TLPX-PCI {addr} twice (line {n})")
            continue
        try:
            truth[addr] = dict(decode(cfg), driver=driver)
        except ValueError as err:
            problems.append(f"config space of {addr} (TLPX-PCI line {n}): {err}")
    for addr in PINNED:
        if addr not in truth:
            problems.append(f"sysfs has no {addr}: the guest's PCI functions are {sorted(truth)}")
    return truth, problems


def check_list_table(facts, truth):
    """`tlpx list`'s table: every function once, ID, link and driver as config space and sysfs say."""
    problems, rows = [], {}
    lines = list(facts["listing"])
    if not lines or lines[0] != LIST_HEADER:
        problems.append(f"the table's header is {quote(lines[0]) if lines else 'missing'}, not {LIST_HEADER!r}")
    body = lines[1:]
    summary = f"{len(truth)} PCI function(s), 0 tlpx card(s)"
    if not body or body[-1] != summary:
        problems.append(f"the last line is {quote(body[-1]) if body else 'missing'}, not {summary!r} (sysfs has {len(truth)} functions)")
    notes = [l for l in body[:-1] if l.startswith("note: ")]
    if len(notes) != 1 or not notes[0].startswith("note: no simulated card: "):
        problems.append(f"expected one note, that no simulated card runs in the guest; got {notes}")
    for row in body[:-1]:
        if row.startswith("note: "):
            continue
        cols = split_row(row)
        if cols is None or cols["source"] != "system":
            problems.append(f"not a row of this machine's bus in the fixed columns: {quote(row)}")
            continue
        if cols["address"] in rows:
            problems.append(f"{cols['address']} listed twice")
        rows[cols["address"]] = cols
    for addr, want in sorted(truth.items()):
        cols = rows.get(addr)
        if cols is None:
            problems.append(f"{addr} ({want['id']}) is in sysfs but not in the table")
            continue
        for field in ("id", "link", "driver"):
            if cols[field] != want[field]:
                problems.append(f"{addr}: {field} column {cols[field]!r}, config space/sysfs say {want[field]!r}")
        if not cols["class"] or not cols["description"]:
            problems.append(f"{addr}: empty class or description column: {cols}")
    for addr in sorted(set(rows) - set(truth)):
        problems.append(f"{addr} is in the table but not in sysfs")
    for addr, pin in PINNED.items():
        cols = rows.get(addr)
        if cols is None:
            continue  # reported above
        for field in ("id", "driver", "link"):
            if field in pin and cols[field] != pin[field]:
                problems.append(f"{addr}: {field} column {cols[field]!r}, the QEMU command line makes it {pin[field]!r}")
        if "link_prefix" in pin and not cols["link"].startswith(pin["link_prefix"]):
            problems.append(f"{addr}: link column {cols['link']!r}, the QEMU command line makes it {pin['link_prefix'].strip()!r} ...")
    if problems:
        return False, "; ".join(problems)
    pinned = ", ".join(f"{a} {rows[a]['id']} {rows[a]['link']}" for a in PINNED)
    return True, f"{len(rows)} rows = sysfs's functions, ID/link/driver columns equal to their config space and sysfs; {pinned}"


def check_list_json(facts, truth):
    """`tlpx --json list`: the same, field by field."""
    try:
        doc = json.loads(facts["listing_json"] or "")
    except json.JSONDecodeError as err:
        return False, f"TLPX-LIST-JSON is not JSON ({err}): {quote(facts['listing_json'] or '')}"
    if not isinstance(doc, dict) or not isinstance(doc.get("functions"), list):
        return False, f"TLPX-LIST-JSON has no functions list: {quote(facts['listing_json'])}"
    problems, entries = [], {}
    for e in doc["functions"]:
        if e.get("address") in entries:
            problems.append(f"{e.get('address')} twice")
        entries[e.get("address")] = e
    for addr, want in sorted(truth.items()):
        e = entries.get(addr)
        if e is None:
            problems.append(f"{addr} is in sysfs but not in the JSON")
            continue
        got_id = f"{e.get('vendor_id')}:{e.get('device_id')}"
        if got_id != want["id"]:
            problems.append(f"{addr}: ids {got_id}, config space says {want['id']}")
        if (e.get("driver") or "-") != want["driver"] or e.get("source") != "system" or e.get("tlpx_card") is not False:
            problems.append(f"{addr}: driver {e.get('driver')!r} source {e.get('source')!r} tlpx_card {e.get('tlpx_card')!r}; "
                            f"sysfs says driver {want['driver']!r}")
        link = e.get("link") or {}
        for key, value in want["json_link"].items():
            if link.get(key) != value:
                problems.append(f"{addr}: link.{key} {link.get(key)!r}, config space says {value!r}")
        pin = PINNED.get(addr, {})
        if "device_type" in pin and link.get("device_type") != pin["device_type"]:
            problems.append(f"{addr}: device_type {link.get('device_type')!r}, the QEMU command line makes it {pin['device_type']!r}")
    for addr in sorted(set(entries) - set(truth)):
        problems.append(f"{addr} is in the JSON but not in sysfs")
    if problems:
        return False, "; ".join(problems)
    return True, f"{len(entries)} functions = sysfs's; ids, driver, link kind/type/generation/width/MPS/MRRS equal to their config space"


def evaluate(data):
    """Bytes of the channel -> (checks, results, facts, problems), host checks included."""
    records, problems = parse_channel(data)
    if not records:
        # Nothing to judge: one message, not one per missing check (the console says why).
        problems.append(f"no record on the checks channel: none of the {len(EXPECTED) + len(HOST_CHECKS)} checks ran")
        return [], {}, {"kernel": None, "accel": None, "listing": [], "listing_json": None, "pci": []}, problems
    checks, results, facts, more = verdict_of_records(records)
    problems += more
    truth, more = sysfs_truth(facts)
    problems += more
    for name, fn in (("tlpx_list_table", check_list_table), ("tlpx_list_json", check_list_json)):
        ok, detail = fn(facts, truth) if truth else (False, "no TLPX-PCI records: nothing to hold the listing to")
        checks.append({"name": name, "pass": ok, "detail": detail, "by": "host"})
    for c in checks:
        if not c["pass"]:
            problems.append(f"check {c['name']} failed: {c['detail']}")
    return checks, results, facts, problems


def self_test():
    """The parser refuses what it must; exits non-zero (naming the case) if it does not."""
    good = [b"TLPX-BOOT kernel 6.1.0-56-amd64", b"TLPX-ACCEL tcg",
            b"TLPX-CHECK open PASS 0000:00:05.0 group 1", b'TLPX-RESULTS {"checks": [], "failed": 0}',
            b'TLPX-LIST-JSON {"functions": []}', b"TLPX-DONE"]
    records, problems = parse_channel(b"\n".join(good) + b"\n")
    failures = []
    if problems or len(records) != len(good):
        failures.append(f"well-formed records refused: {problems}")
    bad = {
        # the line from the issue: a kernel message inside a check line
        "kernel message inside a record": (b"TLPX-CHECK dma_unmapped_iova_blo[    4.222271] DMAR: [DMA Write NO_PASID] Request device "
                                           b"[00:05.0] fault addr 0x8000000 [fault reason 0x05] PTE Write access is not set",
                                           "malformed TLPX-CHECK"),
        "the rest of that line": (b"cked PASS edu -> IOVA 0x8000000 (unmapped) left both buffers intact", "unknown kind"),
        "carriage return": (b"TLPX-CHECK open PASS fine\r", "control characters"),
        "kernel timestamp first": (b"[    4.2] TLPX-CHECK open PASS x", "unknown kind"),
        "verdict missing": (b"TLPX-CHECK open", "malformed TLPX-CHECK"),
        "verdict lower case": (b"TLPX-CHECK open pass x", "malformed TLPX-CHECK"),
        "empty detail": (b"TLPX-CHECK open PASS ", "malformed TLPX-CHECK"),
        "DONE with a tail": (b"TLPX-DONE x", "malformed TLPX-DONE"),
        "not UTF-8": (b"TLPX-CHECK open PASS \xff\xfe", "not UTF-8"),
        "bad config hex": (b"TLPX-PCI 0000:00:05.0 - 12zz", "malformed TLPX-PCI"),
        "empty line": (b"", "unknown kind"),
    }
    for what, (line, must_say) in bad.items():
        _, problems = parse_channel(line + b"\n")
        if not any(must_say in p for p in problems):
            failures.append(f"{what}: {line!r} gave {problems}, not one saying {must_say!r}")
    # a record cut off at the end of the channel
    _, problems = parse_channel(b"TLPX-BOOT kernel x\nTLPX-CHE")
    if not any("cut off" in p for p in problems):
        failures.append(f"a cut-off last line gave {problems}")
    # two records merged into one line parse as one check whose detail holds the other: the
    # second check is then missing, which the verdict reports
    records, _ = parse_channel(b"TLPX-CHECK open PASS x TLPX-CHECK ident PASS y\n")
    _, _, _, problems = verdict_of_records(records)
    if not any("check ident did not run" in p for p in problems):
        failures.append(f"merged records: {[p for p in problems if 'ident' in p]}")
    # a check twice, an unknown check, an abort check passing
    records, _ = parse_channel(b"TLPX-CHECK open PASS a\nTLPX-CHECK open PASS b\nTLPX-CHECK opne PASS c\nTLPX-CHECK edu PASS d\n")
    _, _, _, problems = verdict_of_records(records)
    for must_say in ("check open appears twice", "unknown check 'opne'", "unknown check 'edu'", "TLPX-DONE must appear once"):
        if not any(must_say in p for p in problems):
            failures.append(f"{must_say!r} not reported: {problems}")
    # vfio_edu's results disagreeing with its lines
    records, _ = parse_channel(b'TLPX-CHECK open PASS a\nTLPX-RESULTS {"checks": [{"name": "open", "pass": false, "detail": "a"}], '
                               b'"failed": 1}\n')
    _, _, _, problems = verdict_of_records(records)
    if not any("vfio_edu's results say check open" in p for p in problems):
        failures.append(f"results disagreeing with the lines not reported: {problems}")
    # the table checks: a wrong link column and a missing function
    cfg = bytearray(256)
    cfg[0:4] = bytes.fromhex("3412e811")
    truth = {"0000:00:05.0": dict(decode(bytes(cfg)), driver="-")}
    row = f"{'system':<8} {'0000:00:05.0':<14} {'1234:11e8':<9} {'Unclassified':<28} {'Gen1 x1 (cap Gen1 x1) MPS 128 MRRS 128':<44} {'-':<12} edu"
    facts = {"listing": [LIST_HEADER, row, "note: no simulated card: none", "2 PCI function(s), 0 tlpx card(s)"]}
    ok, detail = check_list_table(facts, truth)
    for must_say in ("link column 'Gen1 x1 (cap Gen1 x1) MPS 128 MRRS 128', config space/sysfs say 'PCI (no PCIe capability)'",
                     "not '1 PCI function(s), 0 tlpx card(s)'"):
        if ok or must_say not in detail:
            failures.append(f"tlpx list table: {must_say!r} not in {detail!r}")
    for f in failures:
        print(f"vfio_checks self-test: FAIL: {f}", file=sys.stderr)
    print(f"vfio_checks self-test: {len(bad)} malformed lines and 7 rule cases, {len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--checks", help="the checks channel (checks.log)")
    ap.add_argument("--serial", help="the guest's console (serial.log), for the messages")
    ap.add_argument("--out", help="results.json to write")
    ap.add_argument("--qemu-status", type=int)
    ap.add_argument("--timeout")
    ap.add_argument("--accel")
    ap.add_argument("--release", help="the kernel release the initramfs was built for")
    ap.add_argument("--qemu-seconds", type=float)
    ap.add_argument("--total-seconds", type=float)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--fallback", default="")
    a = ap.parse_args()
    if a.self_test:
        return self_test()

    try:
        data = open(a.checks, "rb").read()
    except OSError as err:
        data = b""
        print(f"qemu_vfio_test: cannot read the checks channel: {err}")
    checks, results, facts, problems = evaluate(data)
    if a.qemu_status in (124, 137):
        problems.insert(0, f"QEMU did not finish within {a.timeout} s (wall clock): see {a.serial}")
    elif a.qemu_status != 0:
        problems.insert(0, f"QEMU exited with status {a.qemu_status}: see {a.serial} and qemu-stderr.log beside it")
    if facts["kernel"] and facts["kernel"] != a.release:
        problems.append(f"the guest runs kernel {facts['kernel']}, the initramfs was built for {a.release}")

    for c in checks:
        print(f"{'PASS' if c['pass'] else 'FAIL'}  {c['name']}: {c['detail']}")
    if facts["listing"]:
        print("\n`tlpx list` in the guest:")
        for line in facts["listing"]:
            print(f"  {line}")

    lat = results.get("msi_latency")
    qemu_version = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    doc = {
        "what": "tlpx vfio backend in a QEMU guest (q35, intel-iommu intremap, edu, ivshmem-plain); scripts/qemu_vfio_test.sh",
        "qemu": qemu_version, "accel_used": a.accel, "kvm_fallback_reason": a.fallback or None, "accel": facts["accel"],
        "guest_kernel": a.release, "qemu_seconds": a.qemu_seconds, "total_seconds": a.total_seconds,
        "latency_samples_requested": a.samples, "pass": not problems, "problems": problems, "checks": checks,
        "msi_latency": lat, "guest": {k: v for k, v in results.items() if k not in ("checks", "msi_latency")},
        "tlpx_list": facts["listing"],
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)
    print()
    n_pass = sum(c["pass"] for c in checks)
    print(f"qemu_vfio_test: {n_pass} of {len(EXPECTED) + len(HOST_CHECKS)} checks passed; guest accel {facts['accel']}, "
          f"QEMU ran {a.qemu_seconds} s, whole test {a.total_seconds} s")
    us = lambda ns: f"{ns / 1000:.1f} us"
    if lat:
        print(f"MSI latency (QEMU guest, {facts['accel']}; edu raise write -> vfio eventfd wake-up, CLOCK_MONOTONIC): "
              f"{lat['samples']} samples, min {us(lat['min_ns'])}, p50 {us(lat['p50_ns'])}, p99 {us(lat['p99_ns'])}, max {us(lat['max_ns'])}")
    isr = results.get("isr_stage")
    if isr and isr.get("matched"):
        w, h = isr["write_to_handler_entry"], isr["handler_entry_to_wake_up"]
        print(f"  split at the kernel's irq_handler_entry (irqs {isr['irqs']}, {isr['matched']} of {isr['raises']} raises): "
              f"write -> handler entry p50 {us(w['p50_ns'])} p99 {us(w['p99_ns'])}; "
              f"handler entry -> thread awake p50 {us(h['p50_ns'])} p99 {us(h['p99_ns'])}")
    print(f"results: {a.out}; checks channel: {a.checks}; console: {a.serial}")
    if b"TLPX-DONE\n" not in data and a.serial:
        tail = open(a.serial, errors="replace").read().splitlines()[-15:]
        print("the guest did not finish; the end of its console:")
        for line in tail:
            print(f"  | {line}")
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

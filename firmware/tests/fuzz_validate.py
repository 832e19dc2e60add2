#!/usr/bin/env python3
"""Differential test of the firmware's image checks against tlpx_script::decode.

fuzz_validate.py HOSTTEST DECODER OUTDIR SEED IMAGE...
Writes mutants of each IMAGE (bytes changed, fields set to edge values, tails cut, with the
header's body length and CRC fixed up or not) into OUTDIR, runs the firmware's checks
(HOSTTEST --validate-only) and the Rust decoder (DECODER: prints "path: OK" or "path: BAD ...")
on all of them and compares accept/refuse. The header's map hash, clock and buffer length are
left alone (the firmware checks them against the card, the decoder does not).
"""
import os
import random
import struct
import subprocess
import sys
import zlib

SKIP = set(range(8, 16)) | set(range(40, 44))


def fix(img, fix_len=True, fix_crc=True):
    img = bytearray(img)
    if len(img) >= 48:
        if fix_len:
            struct.pack_into("<I", img, 32, len(img) - 48)
        if fix_crc:
            struct.pack_into("<I", img, 36, zlib.crc32(bytes(img[48:])) & 0xFFFFFFFF)
    return bytes(img)


def mutants(img, rng, n):
    out = []
    for _ in range(n):
        m = bytearray(img)
        kind = rng.randrange(6)
        if kind == 0:  # one byte of the body
            i = rng.randrange(48, len(m))
            m[i] = rng.randrange(256)
            out.append(fix(m))
        elif kind == 1:  # one byte of the header
            i = rng.choice([i for i in range(0, 48) if i not in SKIP and not 32 <= i < 40])
            m[i] = rng.randrange(256)
            out.append(fix(m))
        elif kind == 2:  # a word set to an edge value
            i = rng.randrange(0, len(m) // 4) * 4
            if i in SKIP or 32 <= i < 40:
                i = 48 + rng.randrange(0, (len(m) - 48) // 4) * 4
            v = struct.unpack_from("<I", m, i)[0]
            new = rng.choice([0, 1, 2, 0xFFFF, 0xFFFFFFFF, v + 1, v - 1, v ^ 0x80, v ^ 0x10000, 24, 0x7F, 0x80])
            struct.pack_into("<I", m, i, new & 0xFFFFFFFF)
            out.append(fix(m))
        elif kind == 3:  # a half-word set to an edge value
            i = rng.randrange(0, len(m) // 2) * 2
            if i in SKIP or 32 <= i < 40:
                i = 48 + rng.randrange(0, (len(m) - 48) // 2) * 2
            struct.pack_into("<H", m, i, rng.choice([0, 1, 0xFFFF, 8, 9, 32, 33, 4096, 4097]))
            out.append(fix(m))
        elif kind == 4:  # a cut tail, or bytes added
            if rng.randrange(2) and len(m) > 52:
                m = m[: len(m) - rng.choice([1, 4, 8, 24])]
            else:
                m += bytes(rng.choice([1, 4, 8, 24]))
            out.append(fix(m, fix_len=rng.randrange(4) != 0))
        else:  # a byte changed, CRC not fixed
            i = rng.randrange(48, len(m))
            m[i] ^= 1 << rng.randrange(8)
            out.append(bytes(m))
    return out


def results(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    res = {}
    for line in r.stdout.splitlines():
        if ": " not in line:
            continue
        path, rest = line.split(": ", 1)
        if os.path.dirname(path) and (rest.startswith("status") or rest.startswith("OK") or rest.startswith("BAD")):
            res[path] = rest
    return res


def main():
    hosttest, decoder, outdir, seed = sys.argv[1:5]
    rng = random.Random(int(seed))
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for src in sys.argv[5:]:
        img = open(src, "rb").read()
        base = os.path.basename(src)
        for k, m in enumerate([img] + mutants(img, rng, 400)):
            p = os.path.join(outdir, f"{base}.{k:04d}")
            with open(p, "wb") as f:
                f.write(m)
            paths.append(p)
    fw = {}
    for i in range(0, len(paths), 200):
        fw.update(results([hosttest, "--validate-only", "--buf", "0xFFFFFFFF"] + paths[i : i + 200]))
    rs = {}
    for i in range(0, len(paths), 200):
        rs.update(results([decoder] + paths[i : i + 200]))
    bad = 0
    accepted = 0
    for p in paths:
        f_ok = fw.get(p, "missing").startswith("status 0 ")
        r_ok = rs.get(p, "missing") == "OK"
        accepted += r_ok
        if f_ok != r_ok or p not in fw or p not in rs:
            bad += 1
            print(f"DIFFER {p}: firmware {fw.get(p)!r}, decoder {rs.get(p)!r}")
    print(f"fuzz_validate: {len(paths)} images ({accepted} valid), {bad} disagreements")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

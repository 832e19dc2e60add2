#!/usr/bin/env python3
"""Wraps the firmware's raw binary into tlpx-fw.img, the file `tlpx fw load` takes.

32-byte header (little-endian), then the payload (the .bin zero-padded to a multiple of 4):
   0 magic "TLFW"            4 u16 format version 1      6 u16 header length 32
   8 u32 load address        12 u32 payload length       16 u32 CRC-32 (zlib) of the payload
  20 u32 map hash of the CPU card (TLPX_MAP_HASH_CPU)    24 u32 version major << 16 | minor
  28 u32 reserved 0
(host/blocks/cpu/script/src/firmware.rs reads it.) Exit 2 with a message on a refusal.
"""
import argparse
import re
import struct
import sys
import zlib

LOAD_ADDRESS = 0x40000
MAILBOX = 0x47F00  # the payload must end below the mailbox
FORMAT_VERSION = 1
HEADER_LEN = 32


def refuse(msg):
    print(f"mkimage: {msg}", file=sys.stderr)
    sys.exit(2)


def number(text, what):
    try:
        return int(text, 0)
    except ValueError:
        refuse(f"{what} {text!r} is not a number")


def map_hash_from(regs):
    try:
        with open(regs, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        refuse(f"cannot read {regs}: {e.strerror} (give --map-hash instead)")
    m = re.search(r"^#define\s+TLPX_MAP_HASH_CPU\s+(0x[0-9a-fA-F]+|\d+)[uUlL]*\b", text, re.M)
    if not m:
        refuse(f"{regs} defines no TLPX_MAP_HASH_CPU (give --map-hash instead)")
    return int(m.group(1), 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", help="the raw binary (objcopy -O binary)")
    ap.add_argument("-o", "--output", required=True, help="the image to write")
    ap.add_argument("--regs", default="include/tlpx_regs.h", help="the generated header (TLPX_MAP_HASH_CPU)")
    ap.add_argument("--map-hash", help="the CPU card's map hash (instead of reading --regs)")
    ap.add_argument("--version", default="1.0", help="firmware version MAJOR.MINOR")
    ap.add_argument("--load-address", default=hex(LOAD_ADDRESS))
    args = ap.parse_args()

    m = re.fullmatch(r"(\d+)\.(\d+)", args.version)
    if not m or int(m.group(1)) > 0xFFFF or int(m.group(2)) > 0xFFFF:
        refuse(f"version {args.version!r}: expected MAJOR.MINOR, each 0..65535")
    version = int(m.group(1)) << 16 | int(m.group(2))
    map_hash = number(args.map_hash, "map hash") if args.map_hash else map_hash_from(args.regs)
    if not 0 <= map_hash <= 0xFFFFFFFF:
        refuse(f"map hash 0x{map_hash:x} does not fit 32 bits")
    load = number(args.load_address, "load address")
    if load != LOAD_ADDRESS:
        refuse(f"load address 0x{load:x}: the CPU starts at 0x{LOAD_ADDRESS:x}")

    try:
        with open(args.bin, "rb") as f:
            payload = f.read()
    except OSError as e:
        refuse(f"cannot read {args.bin}: {e.strerror}")
    if not payload:
        refuse(f"{args.bin} is empty")
    payload += b"\0" * (-len(payload) % 4)
    room = MAILBOX - load
    if len(payload) > room:
        refuse(f"payload is {len(payload)} bytes; it must fit below the mailbox at 0x{MAILBOX:x}: "
               f"at most {room} bytes (0x{load:x}..0x{MAILBOX:x}), {len(payload) - room} too many")

    header = b"TLFW" + struct.pack("<HHIIIIII", FORMAT_VERSION, HEADER_LEN, load, len(payload),
                                   zlib.crc32(payload) & 0xFFFFFFFF, map_hash, version, 0)
    assert len(header) == HEADER_LEN
    with open(args.output, "wb") as f:
        f.write(header + payload)
    print(f"mkimage: {args.output}: {len(payload)} bytes at 0x{load:x}, CRC-32 0x{zlib.crc32(payload):08x}, "
          f"map hash 0x{map_hash:08x}, version {version >> 16}.{version & 0xFFFF}")


if __name__ == "__main__":
    main()

"""The spy driven through its CSRs: ring setup in the tests' host memory, capture on and off,
and the 32-byte record decoded into its fields (docs/spy.md)."""

from tlpx_gateware import tlp
from tlpx_gateware.conftest import reg
from tlpx_gateware.sim.card import HostMemory
from tlpx_gateware.testing.memory import BASE, SIZE

RING = BASE + 0x8000
RING_LOG2 = 10  # 1024 records = 32 KiB (the generator's window is the first 32 KiB)


def write_reg(card, name, value, words=1):
    off = reg(name)
    for i in range(words):
        card.write32(off + 4 * i, (value >> (32 * i)) & 0xFFFFFFFF)


def spy_w(card, name, value, words=1):
    write_reg(card, f"spy.{name}", value, words)


def spy_r(card, name, words=1):
    off = reg(f"spy.{name}")
    return sum(card.read32(off + 4 * i) << (32 * i) for i in range(words))


def decode(raw):
    w = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(8)]
    r = {
        "seq": w[0], "time": w[1] | (w[2] << 32), "dir": w[3] & 1, "fmt": (w[3] >> 1) & 7,
        "type": (w[3] >> 4) & 0x1F, "length": (w[3] >> 15) & 0x3FF, "own": (w[3] >> 25) & 1,
        "matched": (w[3] >> 26) & 1, "last": (w[3] >> 27) & 1, "split": w[3] >> 28,
        "tag": (w[4] >> 16) & 0xFF, "duration": w[7] & 0xFFFF, "latency": w[6], "w": w,
    }
    r["is_cpl"] = r["type"] == tlp.TYPE_CPL
    r["address"] = None if r["is_cpl"] else (w[5] | (w[6] << 32))
    r["dw0"] = (r["fmt"] << 29) | (r["type"] << 24) | r["length"]
    return r


def setup(card, ring_log2=RING_LOG2, **cfg):
    card.memory = card.memory or HostMemory(BASE, SIZE, latency=40)
    spy_w(card, "control", 0b10)  # clear
    spy_w(card, "ring_base", RING, 2)
    spy_w(card, "ring_size_log2", ring_log2)
    spy_w(card, "payload_size_log2", 8)
    spy_w(card, "flush_cycles", 64)
    spy_w(card, "rd_index", 0)
    for name, value in cfg.items():
        spy_w(card, name, value, 2 if name in ("address_base", "address_mask", "trigger_address_base", "trigger_address_mask") else 1)


def enable(card, on=True):
    spy_w(card, "control", 1 if on else 0)


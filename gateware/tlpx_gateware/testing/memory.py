"""The host memory window of the gateware tests (a HostMemory at BASE of SIZE bytes) and its
address-keyed pattern fill."""

from tlpx_gateware.cores.common import pattern_word_py, PATTERN_COUNTER

BASE = 0x4000_0000
SIZE = 1 << 16


def fill(memory, kind=PATTERN_COUNTER, seed=7):
    for off in range(0, len(memory.data), 4):
        memory.data[off:off + 4] = pattern_word_py(kind, seed, (BASE + off) >> 2).to_bytes(4, "little")

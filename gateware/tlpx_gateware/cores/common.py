"""Small building blocks shared by the card's blocks: data pattern, log2 histograms."""

from migen import *

from litex.gen import *
from litex.soc.interconnect.csr import CSRStatus, CSRStorage


def lowbias32(x):
    """Migen expression of lowbias32 (Chris Wellons' 32-bit mixer): the PRBS data pattern.

    The host computes the same function (tlpx_device::generator::lowbias32).
    """
    x1 = x ^ (x >> 16)
    x2 = (x1 * 0x7feb352d)[:32]
    x3 = x2 ^ (x2 >> 15)
    x4 = (x3 * 0x846ca68b)[:32]
    return x4 ^ (x4 >> 16)


def lowbias32_py(x):
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7feb352d) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846ca68b) & 0xFFFFFFFF
    x ^= x >> 16
    return x


PATTERN_COUNTER = 0
PATTERN_PRBS    = 1


def pattern_word(kind, seed, dw_index):
    """Migen expression: the pattern's DW at DW index `dw_index` (byte address / 4)."""
    dw_index = dw_index[:32]
    return Mux(kind == PATTERN_PRBS, lowbias32(dw_index ^ seed), (dw_index + seed)[:32])


def pattern_word_py(kind, seed, dw_index):
    dw_index &= 0xFFFFFFFF
    if kind == PATTERN_PRBS:
        return lowbias32_py(dw_index ^ seed)
    return (dw_index + seed) & 0xFFFFFFFF


def log2_floor(value, width):
    """Migen statements list + Signal: index of the highest set bit of `value` (0 for 0)."""
    result = Signal(max=max(width, 2))
    stmts = [result.eq(0)]
    for i in range(width):
        stmts.append(If(value[i], result.eq(i)))
    return result, stmts


class Log2Histogram(LiteXModule):
    """`buckets` counters of 32 bits; `add` with `value` increments bucket log2(value).

    Read through two CSRs: write the bucket number to ``<name>_select``, read
    ``<name>_count`` (add it to its parent as submodule `<name>`). ``clear`` (a signal)
    zeroes every bucket.
    """
    def __init__(self, name, value_width, buckets, description):
        self.add   = Signal()
        self.value = Signal(value_width)
        self.clear = Signal()
        # The CSRs take the submodule's name as prefix: <name>_select, <name>_count.
        self.select = select = CSRStorage(8, description=f"Bucket of the {description} histogram to read in {name}_count: bucket k counts values in [2^k, 2^(k+1)) (bucket 0 also counts 0).")
        self.count  = count  = CSRStatus(32, description=f"Count of the {description} histogram bucket chosen by {name}_select.")

        # # #

        counters = Array(Signal(32, name=f"{name}_bucket{i}") for i in range(buckets))
        index, stmts = log2_floor(self.value, value_width)
        self.comb += stmts
        clamped = Signal(max=buckets)
        self.comb += If(index >= buckets, clamped.eq(buckets - 1)).Else(clamped.eq(index))
        self.sync += [
            If(self.clear,
                *[c.eq(0) for c in counters]
            ).Elif(self.add,
                counters[clamped].eq(counters[clamped] + 1)
            )
        ]
        self.comb += count.status.eq(counters[select.storage[:len(clamped)]])

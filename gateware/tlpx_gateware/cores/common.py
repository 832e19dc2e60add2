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


def _highest_set(bits):
    """(any bit set, index of the highest set bit or 0) of a power-of-two list of bits, as a
    balanced tree: "any bit set in the upper half?" is the index's top bit and picks the half
    the rest comes from. log2(len) muxes deep, where a chain of priority Ifs is about as deep as
    it is long after synthesis (the card's deepest paths at 250 MHz ran through such chains:
    docs/resources.md). The index is None for a single bit (no index bits)."""
    if len(bits) == 1:
        return bits[0], None
    half = len(bits) // 2
    any_low, index_low = _highest_set(bits[:half])
    any_high, index_high = _highest_set(bits[half:])
    index = any_high if index_low is None else Cat(Mux(any_high, index_high, index_low), any_high)
    return any_low | any_high, index


def _padded(value, width):
    size = 1
    while size < width:
        size *= 2
    return [value[i] for i in range(width)] + [C(0, 1)] * (size - width)


def log2_floor(value, width):
    """Migen statements list + Signal: index of the highest set bit of `value` (0 for 0), a
    balanced tree (_highest_set)."""
    result = Signal(max=max(width, 2))
    _, index = _highest_set(_padded(value, width))
    return result, [result.eq(0 if index is None else index)]


def _lowest_set(bits):
    """As _highest_set, for the lowest set bit: "any bit set in the lower half?" picks it; the
    index is all ones when no bit is set."""
    if len(bits) == 1:
        return bits[0], None
    half = len(bits) // 2
    any_low, index_low = _lowest_set(bits[:half])
    any_high, index_high = _lowest_set(bits[half:])
    index = ~any_low if index_low is None else Cat(Mux(any_low, index_low, index_high), ~any_low)
    return any_low | any_high, index


def lowest_set(value, width):
    """Migen statements list + (index, any): index of the lowest set bit of `value` (0 when no
    bit is set) and whether any is, a balanced tree (_lowest_set)."""
    index, found = Signal(max=max(width, 2)), Signal()
    any_set, tree_index = _lowest_set(_padded(value, width))
    if tree_index is None:
        return (index, found), [index.eq(0), found.eq(any_set)]
    return (index, found), [found.eq(any_set), index.eq(Mux(any_set, tree_index, 0))]


def ones_to_highest(value, result):
    """Migen statements: `result` (as wide as `value`) gets ones from bit 0 up to `value`'s highest
    set bit (0 for 0). Bit i is "any bit of value from i up", a few LUTs deep, where a chain of
    priority Ifs (one per bit) is as deep as it is long."""
    return [result[i].eq(value[i:] != 0) for i in range(len(value))]


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
        # An add taken and not yet counted, or a count whose status is not yet updated (the
        # stages below): a block gated when idle (cores/isolate.py) is busy while it is set.
        self.pending = Signal()
        # The CSRs take the submodule's name as prefix: <name>_select, <name>_count.
        self.select = select = CSRStorage(8, description=f"Bucket of the {description} histogram to read in {name}_count: bucket k counts values in [2^k, 2^(k+1)) (bucket 0 also counts 0).")
        self.count  = count  = CSRStatus(32, description=f"Count of the {description} histogram bucket chosen by {name}_select.")

        # # #

        counters = Array(Signal(32, name=f"{name}_bucket{i}") for i in range(buckets))
        index, stmts = log2_floor(self.value, value_width)
        self.comb += stmts
        clamped = Signal(max=buckets)
        self.comb += If(index >= buckets, clamped.eq(buckets - 1)).Else(clamped.eq(index))
        # Input stage: the bucket is chosen in one cycle and counted in the next, so that the
        # bit scan and the buckets' carry chains are not on one path (at 250 MHz they were
        # among the card's deepest: docs/resources.md). An add in the cycle of a clear is
        # dropped, as it was without the stage.
        bucket = Signal(max=buckets)
        staged = Signal()    # an add registered, counted in this cycle
        settling = Signal()  # a count changed (or a clear) a cycle ago: the status follows now
        self.sync += [
            staged.eq(self.add & ~self.clear),
            bucket.eq(clamped),
            settling.eq(staged | self.clear),
        ]
        self.comb += self.pending.eq(staged | settling)
        # Each bucket increments itself when chosen (the same counts as one shared incrementer
        # behind a `buckets`-wide mux, which would put that mux and the carry chain on the path
        # from `value`; this also takes fewer LUTs than the mux and its write-back).
        self.sync += [
            If(self.clear,
                *[c.eq(0) for c in counters]
            ).Elif(staged,
                *[If(bucket == i, c.eq(c + 1)) for i, c in enumerate(counters)]
            )
        ]
        # Registered: the bucket multiplexer and LiteX's CSR read multiplexer are not one path.
        # It follows a select's write within the cycles a register write keeps an isolated block
        # running, and a count's change by one cycle (`settling`, in `pending`: the block's busy).
        self.sync += count.status.eq(counters[select.storage[:len(clamped)]])

"""The shared bit-scan helpers and log2 histogram (cores/common.py), in Migen simulation: the
highest and lowest set bit against Python's, the trees against the priority chains they
replaced (the card's free-tag search, log2 bucket index and IrqTimer's interval mask), and the
histogram's counts against a model. The trees and the per-bucket increment replaced priority
chains and a shared incrementer (a timing fix, docs/resources.md): these tests hold them to the
same function."""

import random

from migen import *
from migen.sim import run_simulation

from tlpx_gateware.cores.common import Log2Histogram, log2_floor, lowest_set, ones_to_highest


def _expected_index(x):
    return max(x.bit_length() - 1, 0)


# The straightforward forms the trees replaced (priority chains of Ifs, as the card had them):
# the trees must give the same outputs for every input.

def _chain_highest(value, width):
    result = Signal(max=max(width, 2))
    return result, [result.eq(0)] + [If(value[i], result.eq(i)) for i in range(width)]


def _chain_lowest(value, width):
    # TagTable's free-tag search before: the last If that holds wins, so the lowest set bit.
    index, found = Signal(max=max(width, 2)), Signal()
    return (index, found), [index.eq(0), found.eq(0),
                            *[If(value[i], index.eq(i), found.eq(1)) for i in reversed(range(width))]]


def _chain_mask(span):
    # IrqTimer's random-interval mask before: ones up to span's highest set bit.
    mask = Signal(len(span))
    return mask, [mask.eq(0)] + [If(span[i], mask.eq((1 << (i + 1)) - 1)) for i in range(len(span))]


def _tree_mask(span):
    # IrqTimer's mask now (cores/irq_timer/core.py).
    mask = Signal(len(span))
    return mask, ones_to_highest(span, mask)


def _same_outputs(width, build_pairs, values):
    """Simulates both forms on `values` of a `width`-bit input; returns [(x, outputs of the
    first form, outputs of the second)]."""
    value = Signal(width)
    m = Module()
    pairs = []
    for build in build_pairs:
        outputs, statements = build(value, width)
        m.comb += statements
        pairs.append(outputs if isinstance(outputs, tuple) else (outputs,))
    seen = []

    def bench():
        for x in values:
            yield value.eq(x)
            yield
            row = [x]
            for outs in pairs:
                got = []
                for o in outs:
                    got.append((yield o))
                row.append(tuple(got))
            seen.append(tuple(row))
    run_simulation(m, bench())
    return seen


def _values(width, rng, count=400):
    if width <= 10:
        return list(range(1 << width))   # exhaustive
    mask = (1 << width) - 1
    return sorted({0, mask} | {1 << i for i in range(width)} | {mask << i & mask for i in range(width)} |
                  {rng.getrandbits(width) & rng.getrandbits(width) for _ in range(count)} |
                  {rng.getrandbits(width) for _ in range(count)})


def test_trees_give_what_the_priority_chains_gave():
    """Exhaustive up to 10 bits, random (sparse and dense) beyond: the lowest-set-bit tree
    against TagTable's old chain (32 tags on the boards), the highest-set-bit tree against
    log2_floor's old chain, the OR-of-upper-bits mask against IrqTimer's old chain."""
    rng = random.Random(28)
    for width in (1, 2, 3, 5, 8, 10, 16, 32, 33):
        values = _values(width, rng)
        lowest = _same_outputs(width, [lowest_set, _chain_lowest], values)
        assert all(tree == chain for _, tree, chain in lowest), (width, [s for s in lowest if s[1] != s[2]][:3])
        highest = _same_outputs(width, [log2_floor, _chain_highest], values)
        assert all(tree == chain for _, tree, chain in highest), (width, [s for s in highest if s[1] != s[2]][:3])
        masks = _same_outputs(width, [lambda v, w: _tree_mask(v), lambda v, w: _chain_mask(v)], values)
        assert all(tree == chain for _, tree, chain in masks), (width, [s for s in masks if s[1] != s[2]][:3])
        # Every answer occurs (the comparison is not between two constants).
        assert {chain for _, _, chain in lowest} == {(0, 0)} | {(i, 1) for i in range(width)}, width
        assert {chain for _, _, chain in highest} == {(i,) for i in range(width)}, width
        assert {chain for _, _, chain in masks} == {(0,)} | {((1 << (i + 1)) - 1,) for i in range(width)}, width


def test_log2_floor_is_the_highest_set_bit():
    rng = random.Random(25)
    for width in (1, 2, 3, 5, 8, 13, 16, 17, 32, 33, 64):
        seen = _same_outputs(width, [log2_floor], _values(width, rng, count=100))
        assert [(x, (_expected_index(x),)) for x, _ in seen] == seen, width


def test_lowest_set_is_the_lowest_set_bit_and_zero_for_none():
    rng = random.Random(27)
    for width in (1, 2, 3, 7, 8, 13, 32, 64):
        seen = _same_outputs(width, [lowest_set], _values(width, rng, count=100))
        expected = [(x, ((x & -x).bit_length() - 1 if x else 0, int(x != 0))) for x, _ in seen]
        assert seen == expected, width


def test_histogram_counts_each_value_in_its_bucket():
    rng = random.Random(26)
    buckets, width = 12, 32
    hist = Log2Histogram("h", width, buckets, "test")
    # Values in every bucket, beyond the last one (clamped into it), zero, with gaps and a clear.
    samples = [rng.choice([0, 1, 3, 1 << rng.randrange(width), rng.getrandbits(width)]) for _ in range(300)]
    clear_at = 150
    model = [0] * buckets
    read = []

    def bench():
        for i, x in enumerate(samples):
            yield hist.value.eq(x)
            yield hist.add.eq(i % 7 != 3)
            yield hist.clear.eq(i == clear_at)
            yield
            if i == clear_at:
                model[:] = [0] * buckets
            elif i % 7 != 3:
                model[min(_expected_index(x), buckets - 1)] += 1
        yield hist.add.eq(0)
        yield hist.clear.eq(0)
        yield
        for b in range(buckets):
            yield hist.select.storage.eq(b)
            yield
            yield  # the count is registered from the selected bucket
            read.append((yield hist.count.status))
    run_simulation(hist, bench())
    assert read == model and sum(model) > 0

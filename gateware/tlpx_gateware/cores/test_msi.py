"""The MSI block (cores/msi.py) in Migen's simulator: one vector as LitePCIe's, a message per
vector when more are granted, folding above the granted count, enables respected."""

from migen import *
from migen.sim import run_simulation

from tlpx_gateware.cores.msi import MSI_VECTORS, TlpxMSI


def _run(granted, raise_masks, enable, ready_after=0, cycles=80):
    """Raises each mask of `raise_masks` (one per cycle) and collects the vectors sent."""
    dut = TlpxMSI(Signal(64), enabled_at_reset=enable)
    sent = []

    def drive():
        yield dut.vectors_granted.eq(granted)
        yield dut.source.ready.eq(0)
        for mask in raise_masks:
            yield dut.irqs.eq(mask)
            yield
        yield dut.irqs.eq(0)
        for _ in range(ready_after):
            yield
        yield dut.source.ready.eq(1)
        for _ in range(cycles):
            if (yield dut.source.valid) and (yield dut.source.ready):
                sent.append((yield dut.source.dat))
            yield
    run_simulation(dut, drive())
    return sent


def test_one_vector_gathers_every_source_into_vector_0():
    # Three sources raised while the hard IP is not ready: one message, vector 0 (LitePCIe).
    assert _run(1, [1 << 0, 1 << 3, 1 << 6], enable=0xFF, ready_after=3) == [0]


def test_several_vectors_send_one_message_each_lowest_first():
    assert _run(32, [1 << 9, 1 << 3, 1 << 20], enable=0xFFFFFFFF, ready_after=3) == [3, 9, 20]


def test_vectors_above_the_granted_count_fold_into_the_last():
    # 4 granted: vectors 0..3; 6 and 12 arrive as vector 3.
    assert _run(4, [1 << 1, 1 << 6, 1 << 12], enable=0xFFFFFFFF, ready_after=3) == [1, 3, 3]


def test_disabled_vectors_send_nothing():
    assert _run(32, [1 << 2, 1 << 5], enable=1 << 5, ready_after=2) == [5]


def test_a_vector_raised_again_before_it_went_is_one_message():
    assert _run(32, [1 << 8, 1 << 8, 1 << 8], enable=0xFFFFFFFF, ready_after=2) == [8]


def test_width_is_what_multi_message_msi_carries():
    assert MSI_VECTORS == 32


def test_a_remapped_source_sends_the_vector_it_chooses_gated_by_its_own_enable():
    chosen = Signal(5)
    dut = TlpxMSI(Signal(64), enabled_at_reset=1 << 6, vector_of={6: chosen})
    sent = []

    def drive():
        yield dut.vectors_granted.eq(32)
        yield dut.source.ready.eq(1)
        # Vector 13 is not enabled, source 6 is: the DUT's message goes on vector 13.
        for vector in (13, 0, 31):
            yield chosen.eq(vector)
            yield dut.irqs.eq(1 << 6)
            yield
            yield dut.irqs.eq(0)
            for _ in range(4):
                if (yield dut.source.valid) and (yield dut.source.ready):
                    sent.append((yield dut.source.dat))
                yield
        # Source 6 disabled: nothing.
        yield dut.enable.storage.eq(0)
        yield dut.irqs.eq(1 << 6)
        yield
        yield dut.irqs.eq(0)
        for _ in range(4):
            if (yield dut.source.valid):
                sent.append((yield dut.source.dat))
            yield
    run_simulation(dut, drive())
    assert sent == [13, 0, 31]

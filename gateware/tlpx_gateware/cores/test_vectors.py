"""Several interrupt vectors on the Verilated card (issue 29): multi-message MSI and MSI-X.

    irq timer ──fire, vector v (rotating over `vectors`)──► MSI block ──► fence ──┬─► MSI (vector v)
                                                                                └─► MSI-X: entry v's MWr

The host model stands for the hard IP's configuration outputs (Multiple Message Enable, MSI-X
Enable, Function Mask: the card's cfg_* inputs) and for the OS that programs the MSI-X table
through BAR0. Every fire's vector must arrive as its own message, in the timer's order, and be
recorded in the fire's sample.
"""

from tlpx_gateware.conftest import csr_json, reg
from tlpx_gateware.cores.irq_timer.core import MODE_PERIODIC
from tlpx_gateware.cores.msix import MSIX_TAG
from tlpx_gateware.soc import MSI_SOURCES
from tlpx_gateware.testing.irq_timer import RING, r, setup, w
from tlpx_gateware.testing.memory import BASE

TIMER_VECTORS = [8, 9, 11, 30]
MSI_ADDRESS = 0xFEE0_0000


def _constants():
    return csr_json()["constants"]


def _fire_and_ack(card, fires, take):
    """Runs `fires` fires of the timer; `take()` returns the vector of the interrupt that came
    (None: none yet). Acknowledges each fire as a user thread would. Returns the vectors."""
    got = []
    for n in range(1, fires + 1):
        card.run_until(lambda: take(peek=True) is not None, timeout=5000)
        got.append(take(peek=False))
        w(card, "ack_user", n)
    return got


def _records(card, n):
    card.run(200)
    out = []
    for i in range(n):
        off = RING - BASE + 32 * i
        out.append(int.from_bytes(card.memory.data[off + 12:off + 16], "little"))
    return out


def _start_timer(card, count, vector_mode=0):
    setup(card, mode=MODE_PERIODIC, lo=600, hi=600, count=count)
    mask = sum(1 << v for v in TIMER_VECTORS)
    w(card, "vectors", mask)
    w(card, "vector_mode", vector_mode)
    card.write32(reg("pcie_msi.enable_set"), mask)
    w(card, "control", 1)


def test_multi_message_msi_sends_each_vector_and_one_vector_gathers_them(card):
    card.inputs.cfg_msi_multiple_enable = 5       # 32 vectors granted
    card.run(10)
    assert card.read32(reg("pcie_msi.granted")) == 32
    _start_timer(card, 8)

    def take(peek):
        if not card.msis:
            return None
        return card.msis[0][1] if peek else card.msis.pop(0)[1]
    assert _fire_and_ack(card, 8, take) == TIMER_VECTORS * 2
    assert [(x >> 16) & 0x1F for x in _records(card, 8)] == TIMER_VECTORS * 2
    assert r(card, "overruns") == 0

    # 4 granted: vectors above 3 fold into vector 3.
    card.inputs.cfg_msi_multiple_enable = 2
    card.msis.clear()
    _start_timer(card, 4)
    assert _fire_and_ack(card, 4, take) == [3, 3, 3, 3]

    # One vector (MME 0, what stock drivers enable): every message is vector 0.
    card.inputs.cfg_msi_multiple_enable = 0
    card.msis.clear()
    _start_timer(card, 4)
    assert _fire_and_ack(card, 4, take) == [0, 0, 0, 0]


def test_msix_sends_each_vector_as_its_table_entry_and_holds_masked_ones(card):
    table = _constants()["MSIX_TABLE_BAR0_OFFSET"]
    pba = _constants()["MSIX_PBA_BAR0_OFFSET"]
    for v in range(32):
        card.write32(table + 16 * v + 0, MSI_ADDRESS | (v << 12))
        card.write32(table + 16 * v + 4, 0)
        card.write32(table + 16 * v + 8, 0x4000 | v)
        card.write32(table + 16 * v + 12, 0)                 # unmasked
    assert card.read32(table + 16 * 9 + 8) == 0x4009
    card.inputs.cfg_msix_enable = 1
    card.run(10)
    assert card.read32(reg("pcie_msi.granted")) == 32

    def messages():
        return [t for t in card.received if (t[0] >> 24) & 0x1F == 0 and (t[0] >> 30) & 1 and ((t[1] >> 8) & 0xFF) == MSIX_TAG]

    def take(peek):
        m = messages()
        if not m:
            return None
        if not peek:
            card.received.remove(m[0])
        return m[0][3] & 0xFF
    card.received.clear()
    _start_timer(card, 4)
    assert _fire_and_ack(card, 4, take) == TIMER_VECTORS
    assert not card.msis, "MSI-X on: nothing goes out as MSI"

    # Vector 30 masked: its message waits in the PBA and goes once unmasked.
    card.write32(table + 16 * 30 + 12, 1)
    _start_timer(card, 4)
    got = _fire_and_ack(card, 3, take)
    assert got == TIMER_VECTORS[:3]
    card.run_until(lambda: card.read32(pba) != 0, timeout=5000)
    assert card.read32(pba) == 1 << 30
    assert not messages()
    w(card, "ack_user", 4)
    card.write32(table + 16 * 30 + 12, 0)
    card.run_until(lambda: messages(), timeout=2000)
    assert take(peek=False) == 30 and card.read32(pba) == 0
    addr = [t for t in card.link_log if t[1] == 1]
    assert addr, "the messages crossed the link"


def test_the_slot_source_still_raises_vector_0_with_one_vector(card):
    # The default: MME 0, MSI-X off; the timer's own source (vector mask reset value).
    setup(card, mode=MODE_PERIODIC, lo=500, hi=500, count=2)
    w(card, "control", 1)
    card.run_until(lambda: card.msis, timeout=5000)
    assert card.msis[0][1] == 0
    assert card.read32(reg("pcie_msi.vector")) & (1 << MSI_SOURCES.index("irq_timer"))

"""A core's PHY streams in Migen's simulator: TLPs as beats, beats driven onto an endpoint, and
the idle and back-pressure stretches verilog-pcie's testbenches insert.

Beats are LitePCIe's PHY layout (``phy_layout``): DW j of a beat in ``dat[32j:32j+32]``, its
four byte enables in ``be[4j:4j+4]``; a TLP's last beat may be partly filled.
"""


def tlp_beats(dws, n, payload_be=None):
    """A TLP's DWs as (dat, be, first, last) beats of `n` DWs. `be` is 0xF for every DW (the
    card's convention, SimPHY's), or, with `payload_be` (one value per payload DW, after a
    `len(dws) - len(payload_be)`-DW header), the byte enables an UltraScale adapter passes
    on (the hard IP's byte_en: First BE on the first payload DW, Last BE on the last)."""
    enables = [0xF] * len(dws)
    if payload_be is not None:
        enables[len(dws) - len(payload_be):] = payload_be
    out = []
    for i in range(0, len(dws), n):
        chunk = dws[i:i + n]
        dat = sum(d << (32 * j) for j, d in enumerate(chunk))
        be = sum(e << (4 * j) for j, e in enumerate(enables[i:i + n]))
        out.append((dat, be, int(i == 0), int(i + n >= len(dws))))
    return out


def put_beat(ep, beat):
    """Simulator statements: `beat` (from tlp_beats) valid on the endpoint `ep` from the next cycle."""
    dat, be, first, last = beat
    yield ep.valid.eq(1)
    yield ep.dat.eq(dat)
    yield ep.be.eq(be)
    yield ep.first.eq(first)
    yield ep.last.eq(last)


def stretches(rng, p_start, longest):
    """An endless series of booleans with runs of True (idle, or back-pressure) of random length
    1..`longest`, each starting with probability `p_start`, as an inserter makes them."""
    left = 0
    while True:
        if left == 0 and rng.random() < p_start:
            left = rng.randint(1, longest)
        yield left > 0
        left = max(left - 1, 0)

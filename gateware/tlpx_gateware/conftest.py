"""Shared fixtures: the Verilated card of each data width built by `make gateware-all`."""

import os
from pathlib import Path

import pytest

from tlpx_gateware.sim.card import Card

# The Verilated cards of `make gateware-all`; TLPX_CARD_BUILD points elsewhere (e.g. a
# work-in-progress build) without touching the cards other tools are using.
BUILD = Path(os.environ.get("TLPX_CARD_BUILD", Path(__file__).resolve().parents[2] / "build" / "card"))
WIDTHS = (64, 128, 256)


@pytest.fixture(params=WIDTHS, ids=[f"dw{w}" for w in WIDTHS])
def card(request):
    library = BUILD / f"dw{request.param}" / "libtlpxcard.so"
    if not library.exists():
        pytest.fail(f"{library} is missing: run `make gateware-all` before the gateware tests")
    c = Card(library)
    yield c
    c.close()


def csr_json(width=64):
    import json
    return json.loads((BUILD / f"dw{width}" / "csr.json").read_text())


def csr_map(width=64):
    """The card's register map with names (fields, values, constants): tlpx_gateware.csr_map."""
    from tlpx_gateware.csr_map import CsrMap
    return CsrMap(csr_json(width))


def reg(name, width=64):
    """BAR0 offset of register `region.register` from csr.json."""
    region, register = name.split(".", 1)
    for r in csr_json(width)["regions"]:
        if r["name"] == region:
            for g in r["registers"]:
                if g["name"] == register:
                    return g["offset"]
    raise KeyError(name)

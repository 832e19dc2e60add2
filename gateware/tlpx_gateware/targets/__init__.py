"""Real-hardware targets of the tlpx card: one module per board, registered in BOARDS.

    python -m tlpx_gateware.targets.build --board acorn --output build/boards/acorn

See docs/boards.md.
"""

from tlpx_gateware.cores.msi import MSI_VECTORS
from tlpx_gateware.targets import acorn, kc705, kc705_x8, kcu105

BOARDS = {board.name: board for board in (acorn.BOARD, kc705.BOARD, kc705_x8.BOARD, kcu105.BOARD)}


class UnknownBoard(ValueError):
    pass


def board_names():
    return sorted(BOARDS)


def get_board(name):
    """The Board called `name`, or UnknownBoard with a message that lists the boards."""
    if name in BOARDS:
        return BOARDS[name]
    listed = ", ".join(board_names())
    if not name:
        raise UnknownBoard(f"no board given: choose one of {listed} (BOARD=list describes them)")
    raise UnknownBoard(f"unknown board {name!r}: the boards are {listed} (BOARD=list describes them)")


# The simulated card's own profile, for a card no board has (the 64-bit datapath) or on request:
# a hard IP as LitePCIe configures them (payloads up to 512 bytes, 64-bit MSI) with whatever
# link tlpx-sim is asked for, and as many MSI vectors as the card's MSI block sends (the boards'
# IPs as LitePCIe generates them offer one: board.py).
GENERIC_PROFILE = {
    "title": "the simulated card: LitePCIe's payload limit, any link",
    "hard_ip": "generic",
    "max_link_gen": 5,
    "max_link_lanes": 16,
    "mps_supported": 512,
    "msi_64bit": True,
    "msi_vectors": MSI_VECTORS,
    "msix_vectors": MSI_VECTORS,
    "extended_tags": True,
}


def sim_profiles(data_width, clock_hz):
    """{"default": name, "boards": {name: profile}}: the boards a simulated card of this width
    and clock stands for (their hard IP's configuration space) and "generic"; the default is
    the first such board by name, else "generic"."""
    from tlpx_gateware.targets.board import hard_ip_profile
    boards = {name: hard_ip_profile(b) for name, b in sorted(BOARDS.items())
              if b.data_width == data_width and b.clock_hz == clock_hz}
    default = "kc705" if "kc705" in boards else next(iter(boards), "generic")
    return {"default": default, "boards": {**boards, "generic": GENERIC_PROFILE}}

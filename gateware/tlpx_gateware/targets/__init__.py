"""Real-hardware targets of the tlpx card: one module per board, registered in BOARDS.

    python -m tlpx_gateware.targets.build --board acorn --output build/boards/acorn

See docs/boards.md.
"""

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

"""The accelerator slot: the card's side of a device under test (core.py) and its users."""

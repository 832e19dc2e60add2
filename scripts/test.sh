#!/usr/bin/env bash
# make test: every test of the project. Gateware tests (pytest) need the Verilated cards
# of all data widths (make gateware-all); Rust tests include integration tests that start
# tlpx-sim on the real card library.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
# Each step's header says when it started and how long the tests had run by then (host wall
# time), so a slow make test shows where its time went (docs/performance.md).
stage() { echo "== $* [$(date +%T), ${SECONDS} s into the tests]"; }

stage "Rust style and lints (cargo fmt --check, cargo clippy -D warnings)"
(cd host && "$CARGO" fmt --all --check) || { echo "cargo fmt: the workspace is not formatted; run \`cd host && cargo fmt\`"; exit 1; }
(cd host && "$CARGO" clippy --release --workspace --all-targets --quiet -- -D warnings)

stage "code size rules: no source file over 1,000 lines, no function over 150 (scripts/code_metrics.py)"
python3 scripts/code_metrics.py

stage "generated documents name paths relative to the repository (no machine's absolute path)"
if grep -rnF "$PWD/" docs README.md || grep -rnE '(^|[ (`])/(work|home|root|Users)/' docs README.md; then
    echo "docs: the lines above hold an absolute path of a machine (this checkout is $PWD): generated documents must name paths relative to the repository"
    exit 1
fi

stage "gateware tests (pytest)"
# One worker per core, each test file on one worker (--dist loadfile): a file's module fixtures (the
# slot's and the DUTs' cards, the board projects) are built once, by one worker.
.venv/bin/python -m pytest -q -n "$(nproc)" --dist loadfile gateware/tlpx_gateware

stage "dashboards: Grafana's dashboard-linter rules, PromQL through promql-parser and promtool, key panels on synthetic series (pytest)"
.venv/bin/python -m pytest -q dashboards/tests

stage "host tests (cargo test)"
cd host
mkdir -p ../build
status=0
"$CARGO" test --release --workspace >../build/cargo-test.log 2>&1 || status=$?
cd ..
grep -E "^(test result|     Running|error)|FAILED|panicked" build/cargo-test.log || true
if [ "$status" != 0 ]; then
    echo "cargo test failed (exit $status); full log in build/cargo-test.log"
    tail -60 build/cargo-test.log
    exit "$status"
fi
passed=$(grep -Eo "test result: ok\. [0-9]+ passed" build/cargo-test.log | awk '{s+=$4} END {print s+0}')
echo "host: ${passed} passed, 0 failed"

stage "card firmware: two builds byte-identical, the interpreter against a model of the card (firmware/tests)"
make --no-print-directory -C firmware check
make --no-print-directory -C firmware OUT="$PWD/build/firmware" test

stage "make demo (as a user runs it), and the README's block of what it prints"
demo_status=0
scripts/demo.sh > build/demo-run.log 2>&1 || demo_status=$?
if [ "$demo_status" != 0 ]; then
    echo "make demo failed (exit $demo_status); its output is in build/demo-run.log:"
    tail -40 build/demo-run.log
    exit "$demo_status"
fi
echo "demo: $(grep -c . build/demo/demo.log) lines of output, ended with: $(grep '^demo: ' build/demo/demo.log | head -1)"
.venv/bin/python scripts/readme_demo.py --check build/demo/demo.log

stage "the KCU105 card against an independent model of its hard IP and root complex (cocotbext-pcie; make cocotb-pcie)"
.venv/bin/python -m tlpx_gateware.targets.hardip --board kcu105

stage "vfio backend on a real kernel in QEMU (scripts/qemu_vfio_test.sh)"
scripts/qemu_vfio_test.sh

stage "the card on a real Linux PCI bus: the Verilated card served over vfio-user to QEMU guests, Linux 6.1 and 7.3 (scripts/vplat_test.sh)"
scripts/vplat_test.sh
echo "== all tests passed in ${SECONDS} s (host wall time, after the set-up and builds of make test)"

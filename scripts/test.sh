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

stage "every Rust test file is compiled: named by its crate's tests/integration.rs (scripts/check_test_lists.py)"
python3 scripts/check_test_lists.py

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

# The steps that leave a core idle run side by side, two groups of two or three (measured, fresh
# make test: cargo's test binaries ran at 55 % of the two cores, the demo at 50 %, the cocotb
# model and QEMU's short guest below 70 %): each writes its own log, printed whole when the group
# is done; a group fails when any of its steps did, after all of them ended. The gateware tests
# (both cores busy) and the virtual platform's guests (timeouts in guest time) run alone.
host_tests() {
    local status=0
    (cd host && "$CARGO" test --release --workspace >../build/cargo-test.log 2>&1) || status=$?
    grep -E "^(test result|     Running|error)|FAILED|panicked" build/cargo-test.log || true
    if [ "$status" != 0 ]; then
        echo "cargo test failed (exit $status); full log in build/cargo-test.log"
        tail -60 build/cargo-test.log
        return "$status"
    fi
    passed=$(grep -Eo "test result: ok\. [0-9]+ passed" build/cargo-test.log | awk '{s+=$4} END {print s+0}')
    echo "host: ${passed} passed, 0 failed"
}
firmware_tests() {
    make --no-print-directory -C firmware check &&
        make --no-print-directory -C firmware OUT="$PWD/build/firmware" test
}
demo_run() {
    local status=0
    scripts/demo.sh > build/demo-run.log 2>&1 || status=$?
    if [ "$status" != 0 ]; then
        echo "make demo failed (exit $status); its output is in build/demo-run.log:"
        tail -40 build/demo-run.log
        return "$status"
    fi
    echo "demo: $(grep -c . build/demo/demo.log) lines of output, ended with: $(grep '^demo: ' build/demo/demo.log | head -1)"
    .venv/bin/python scripts/readme_demo.py --check build/demo/demo.log
}
cocotb_pcie() { .venv/bin/python -m tlpx_gateware.targets.hardip --board kcu105; }
qemu_vfio() { scripts/qemu_vfio_test.sh; }

# side_by_side "TITLE|FUNCTION" ...: runs the functions (names of this script's functions, which
# name their logs) at once, then prints each one's title, wall time and log in the order given;
# returns non-zero if any failed. Interrupted (Ctrl-C, a kill), it ends the steps' process
# groups too: background jobs of a script ignore SIGINT, and cargo's simulators would outlive it.
side_by_side() {
    local entry name title pids=() names=() titles=() failed=0 i
    mkdir -p build/test-logs
    trap 'kill -- $(printf -- "-%s " "${pids[@]}") 2>/dev/null; exit 130' INT TERM
    for entry in "$@"; do
        title=${entry%|*}; name=${entry##*|}
        [[ "$name" =~ ^[a-z_]+$ ]] || { echo "side_by_side: '$name' is not one of test.sh's step functions" >&2; trap - INT TERM; return 2; }
        set -m  # job control: each step in its own process group, which the trap ends whole
        ( started=$SECONDS; status=0; "$name" || status=$?
          echo "($name: $((SECONDS - started)) s wall, exit $status)"; exit "$status" ) > "build/test-logs/$name.log" 2>&1 &
        set +m
        pids+=("$!"); names+=("$name"); titles+=("$title")
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || failed=1
    done
    trap - INT TERM
    for i in "${!names[@]}"; do
        echo "== ${titles[$i]} (side by side; log build/test-logs/${names[$i]}.log)"
        cat "build/test-logs/${names[$i]}.log"
    done
    return "$failed"
}

stage "host tests (cargo test) beside the card firmware's tests and make demo"
side_by_side "host tests (cargo test)|host_tests" \
    "card firmware: two builds byte-identical, the interpreter against a model of the card (firmware/tests)|firmware_tests" \
    "make demo (as a user runs it), and the README's block of what it prints|demo_run"

stage "the KCU105 card against cocotbext-pcie beside the vfio backend on a real kernel in QEMU"
side_by_side "the KCU105 card against an independent model of its hard IP and root complex (cocotbext-pcie; make cocotb-pcie)|cocotb_pcie" \
    "vfio backend on a real kernel in QEMU (scripts/qemu_vfio_test.sh)|qemu_vfio"

stage "the card on a real Linux PCI bus: the Verilated card served over vfio-user to QEMU guests, Linux 6.1 and 7.3 (scripts/vplat_test.sh)"
scripts/vplat_test.sh
echo "== all tests passed in ${SECONDS} s (host wall time, after the set-up and builds of make test)"

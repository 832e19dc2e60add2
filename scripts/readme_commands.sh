#!/usr/bin/env bash
# scripts/readme_commands.sh [OUT.md]: every command of README.md's "Using it" block, run with
# its default arguments on a simulated card, timed; a markdown table (command, wall s, exit,
# notes) to stdout, or to OUT.md when given. The commands are read from README.md each time, so
# the list cannot drift from what the README shows.
#
# What it does with each line of the block:
#   host/target/release/tlpx ...   run as written (TLPX_DEVICE points at this script's tlpx-sim),
#                                  in a scratch folder holding links to host/, firmware/ and
#                                  build/ (results, traces and report.html land there, not in
#                                  the repository); a comment "(sim: start it with --FLAG VALUE)"
#                                  runs that one command on a tlpx-sim started so
#   make X && ...tlpx-sim ARGS &   the make part is skipped (build products are used as they
#                                  are) and the simulator is restarted with ARGS for the lines
#                                  after it (the card with its soft CPU)
#   make ...                       skipped: a build, a benchmark or a board, not a tlpx command
# A command whose --help says it runs "until q or Ctrl-C" / "until Ctrl-C" (top, serve) runs
# until stopped by design: it gets Ctrl-C after $UNTIL_STOPPED_S seconds and that is said.
# Every command runs on a pseudo-terminal (so a progress bar is drawn when the command has one;
# the notes say when a bar with an ETA was seen) and is bounded: Ctrl-C after $TIMEOUT_S seconds,
# SIGKILL 20 s later, reported as a timeout. Logs: $LOG_DIR (default: a temporary folder, kept).
#
# Environment: TIMEOUT_S (default 300), UNTIL_STOPPED_S (default 5), SLOW_S (default 30: a
# command slower than this without a progress bar is flagged), DATA_WIDTH (default 64).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source scripts/simctl.sh

OUT=${1:-}
TIMEOUT_S=${TIMEOUT_S:-300}
UNTIL_STOPPED_S=${UNTIL_STOPPED_S:-5}
SLOW_S=${SLOW_S:-30}
DATA_WIDTH=${DATA_WIDTH:-64}
TLPX="$TLPX_BIN/tlpx"
[ -x "$TLPX" ] && [ -x "$TLPX_BIN/tlpx-sim" ] || { echo "readme_commands: build the host tools first (cargo build --release in host/)" >&2; exit 2; }

# The block: the first ```sh fence after "## Using it", to its closing fence.
mapfile -t LINES < <(awk '/^## Using it/ {s=1; next} s && /^```sh/ {b=1; next} b && /^```/ {exit} b {print}' README.md)
[ "${#LINES[@]}" -gt 0 ] || { echo "readme_commands: no \"## Using it\" block with a \`\`\`sh fence in README.md" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tlpx-readme.XXXXXX")
LOG_DIR=${LOG_DIR:-$WORK/logs}
mkdir -p "$LOG_DIR" "$WORK/build"
ln -s "$ROOT/host" "$WORK/host"
ln -s "$ROOT/firmware" "$WORK/firmware"
for d in card firmware; do [ -e "$ROOT/build/$d" ] && ln -s "$ROOT/build/$d" "$WORK/build/$d"; done
# build/demo/*.json (tlpx report's example): make demo's results when there are some, else the
# results the commands before it wrote in the scratch folder (copied when it runs).
if compgen -G "$ROOT/build/demo/*.json" >/dev/null; then
    ln -s "$ROOT/build/demo" "$WORK/build/demo"
    DEMO_NOTE="build/demo: make demo's results"
else
    mkdir -p "$WORK/build/demo"
    DEMO_NOTE="build/demo: no make demo results here, so the results this script's commands wrote"
fi

# Runs one command on a pseudo-terminal with a deadline: Ctrl-C at the deadline (tlpx stops
# after the point in progress and keeps its result), SIGKILL 20 s later. Prints
# "<exit> <wall seconds> <timed_out 0|1> <eta_seen 0|1>"; the output goes to the log file.
PTY_RUN=$WORK/pty_run.py
cat >"$PTY_RUN" <<'EOF'
import os, pty, re, select, signal, sys, time
deadline_s, log_path, cmd = float(sys.argv[1]), sys.argv[2], sys.argv[3]
start = time.monotonic()
pid, fd = pty.fork()
if pid == 0:
    os.execvp("bash", ["bash", "-c", cmd])
out = open(log_path, "wb")
seen = b""
eta_seen, timed_out, sent_int, killed_at = False, False, None, None
status = None
while status is None:
    now = time.monotonic() - start
    if not sent_int and now > deadline_s:
        timed_out, sent_int = True, now
        # Ctrl-C typed on the terminal: SIGINT through the line discipline, or the key itself
        # for a full-screen program that reads the keyboard raw (tlpx top).
        try:
            os.write(fd, b"\x03")
        except OSError:
            os.kill(pid, signal.SIGINT)
    if sent_int is not None and killed_at is None and now > sent_int + 20:
        killed_at = now
        os.kill(pid, signal.SIGKILL)
    try:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            data = os.read(fd, 65536)
            out.write(data)
            seen = (seen + data)[-4096:]
            eta_seen = eta_seen or re.search(rb"ETA \d", seen) is not None
    except OSError:
        pass  # the child closed the terminal: reap it below
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(st)
        status = 128 - status if status < 0 else status
wall = time.monotonic() - start
print(status, f"{wall:.1f}", int(timed_out), int(eta_seen))
EOF

SIM_ARGS=(--data-width "$DATA_WIDTH")
start_sim() {
    sim_stop
    sim_start "$@" || { echo "readme_commands: tlpx-sim $* did not start" >&2; exit 3; }
    export TLPX_DEVICE="sim:$SIM_SOCK"
}
trap 'sim_stop; rm -rf "$WORK/build/demo.tmp"' EXIT
start_sim "${SIM_ARGS[@]}"

ROWS=()
row() { ROWS+=("| \`$1\` | $2 | $3 | $4 |"); }
n=0
for line in "${LINES[@]}"; do
    [ -n "${line// }" ] || continue
    cmd=$(sed -E 's/[[:space:]]+#.*$//' <<<"$line")
    comment=$(sed -nE 's/^[^#]*#[[:space:]]*//p' <<<"$line")
    shown=$(sed -E 's#host/target/release/##g' <<<"$cmd")
    if [[ $cmd == make\ * ]]; then
        if [[ $cmd =~ \&\&[[:space:]]*host/target/release/tlpx-sim([^\&]*)\& ]]; then
            read -r -a SIM_ARGS <<<"${BASH_REMATCH[1]}"
            start_sim "${SIM_ARGS[@]}"
            row "$shown" "-" "-" "skipped the make part (uses the built cards and firmware); tlpx-sim restarted with ${SIM_ARGS[*]} for the commands after it"
        elif [[ $cmd == "make sim"* ]]; then
            row "$shown" "-" "-" "skipped: this script runs its own tlpx-sim (--data-width $DATA_WIDTH)"
        else
            row "$shown" "-" "-" "skipped: a make target (a build, benchmark or board), not a tlpx command"
        fi
        continue
    fi
    if [[ $cmd != host/target/release/tlpx\ * ]]; then
        row "$shown" "-" "-" "skipped: not a tlpx command"
        continue
    fi
    n=$((n + 1))
    notes=()
    sub=$(awk '{print $2}' <<<"$cmd")
    deadline=$TIMEOUT_S
    until_stopped=0
    if "$TLPX" "$sub" --help 2>/dev/null | grep -qE "until (q or )?Ctrl-C"; then
        until_stopped=1
        deadline=$UNTIL_STOPPED_S
    fi
    # "(sim: start it with --host-time real)": that command on a simulator started so.
    one_off=()
    if [[ $comment =~ sim:\ start\ it\ with\ (--[a-z0-9-]+( [^-\)][^ \)]*)?) ]]; then
        read -r -a one_off <<<"${BASH_REMATCH[1]}"
        start_sim "${SIM_ARGS[@]}" "${one_off[@]}"
        notes+=("on tlpx-sim ${one_off[*]}, as the README says")
    fi
    if [[ $cmd == *build/demo/* ]]; then
        if [ ! -L "$WORK/build/demo" ]; then
            find "$WORK/results" -name '*.json' -exec cp {} "$WORK/build/demo/" \; 2>/dev/null
        fi
        notes+=("$DEMO_NOTE")
    fi
    log="$LOG_DIR/$(printf '%02d' "$n")-$sub.log"
    read -r status wall timed_out eta < <(cd "$WORK" && python3 "$PTY_RUN" "$deadline" "$log" "$cmd" </dev/null)
    if [ "$until_stopped" = 1 ]; then
        notes+=("runs until stopped by design (its --help): Ctrl-C after ${UNTIL_STOPPED_S} s")
    elif [ "$timed_out" = 1 ]; then
        notes+=("TIMEOUT: stopped with Ctrl-C after ${TIMEOUT_S} s")
    fi
    if [ "$eta" = 1 ]; then
        notes+=("progress bar with ETA shown")
    elif [ "$until_stopped" = 0 ] && awk -v w="$wall" -v s="$SLOW_S" 'BEGIN {exit !(w > s)}'; then
        notes+=("OVER ${SLOW_S} s WITHOUT A PROGRESS BAR")
    fi
    if [ "$status" != 0 ] && [ "$until_stopped" = 0 ]; then
        notes+=("$(grep -aE 'error|FAIL' "$log" | tail -n 1 | tr -d '\r' | cut -c1-160 | sed 's/|/\\|/g')")
    fi
    [ "${#one_off[@]}" -gt 0 ] && start_sim "${SIM_ARGS[@]}"
    row "$shown" "$wall" "$status" "$(IFS=';'; echo "${notes[*]}" | sed 's/;/; /g')"
    echo "readme_commands: $shown: ${wall} s, exit $status" >&2
done

# The report goes into docs/performance.md: a log folder inside the repository is named
# relative to it (no machine's absolute path in a generated document).
case "$LOG_DIR" in
    "$ROOT"/*) LOG_SHOWN=${LOG_DIR#"$ROOT"/} ;;
    *) LOG_SHOWN=$LOG_DIR ;;
esac
{
    echo "| command | wall s | exit | notes |"
    echo "|---|---:|---:|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "(scripts/readme_commands.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, tlpx-sim --data-width $DATA_WIDTH; logs in $LOG_SHOWN)"
} >"${OUT:-/dev/stdout}"

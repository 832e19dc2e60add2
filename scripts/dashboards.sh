#!/usr/bin/env bash
# make dashboards: the simulated card under generator traffic, `tlpx serve` exporting it on
# 127.0.0.1:9464, and Prometheus (dashboards/prometheus.yml, storage in a temporary folder)
# on 127.0.0.1:9465 scraping it every second; prints what to point Grafana at, then runs
# until Ctrl-C. DASHBOARDS_SECONDS=N stops after N seconds instead (for a quick check).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/simctl.sh
TLPX="$TLPX_BIN/tlpx"
EXPORTER=127.0.0.1:9464          # the target of dashboards/prometheus.yml
PROMETHEUS=127.0.0.1:9465        # the url of dashboards/provisioning/datasources/tlpx.yaml

command -v prometheus >/dev/null || { echo "prometheus is not installed: make setup installs it" >&2; exit 1; }
[ -x "$TLPX" ] || { echo "$TLPX is missing: make host builds it" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tlpx-dashboards.XXXXXX")
SERVE_PID= TRAFFIC_PID= PROM_PID=
cleanup() {
    trap - EXIT INT TERM
    for pid in $TRAFFIC_PID $PROM_PID $SERVE_PID; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $TRAFFIC_PID $PROM_PID $SERVE_PID; do
        wait "$pid" 2>/dev/null || true
    done
    sim_stop
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo; echo "dashboards: stopping"; exit 0' INT TERM

# wait_for NAME PID LOG TEST...: until TEST succeeds; fails showing LOG if PID dies or 30 s pass.
wait_for() {
    local name=$1 pid=$2 log=$3; shift 3
    for _ in $(seq 1 300); do
        "$@" >/dev/null 2>&1 && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited during start-up:" >&2; cat "$log" >&2; return 1
        fi
        sleep 0.1
    done
    echo "$name did not start within 30 s:" >&2; cat "$log" >&2; return 1
}

sim_start
DEVICE="sim:$SIM_SOCK"

"$TLPX" --device "$DEVICE" serve --metrics-listen "$EXPORTER" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
wait_for "tlpx serve" "$SERVE_PID" "$WORK/serve.log" grep -q "http://$EXPORTER/metrics" "$WORK/serve.log"

# Generator traffic in a loop, so that every dashboard moves: DMA writes and reads, the
# interrupt timer, the rule-30 core, a short spy capture.
(
    while true; do
        "$TLPX" --device "$DEVICE" bw --op write --sizes 256,1024 --count 200 >/dev/null
        "$TLPX" --device "$DEVICE" bw --op read --sizes 256,1024 --count 200 >/dev/null
        "$TLPX" --device "$DEVICE" irq --samples 50 --min 10us --max 30us >/dev/null
        "$TLPX" --device "$DEVICE" rule30 run --mode hw-poll --packets 3 --generations 3 >/dev/null
        "$TLPX" --device "$DEVICE" spy capture --duration 1ms -q -o "$WORK/capture.tlpx" >/dev/null
        sleep 1
    done
) >"$WORK/traffic.log" 2>&1 &
TRAFFIC_PID=$!

prometheus --config.file="$ROOT/dashboards/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="$PROMETHEUS" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
wait_for prometheus "$PROM_PID" "$WORK/prometheus.log" \
    bash -c "exec 3<>/dev/tcp/${PROMETHEUS%:*}/${PROMETHEUS#*:} && printf 'GET /-/ready HTTP/1.0\r\n\r\n' >&3 && grep -q ' 200 ' <&3"

cat <<MSG
dashboards: running (Ctrl-C stops everything)
  card        $DEVICE (tlpx-sim, generator traffic in a loop)
  exporter    http://$EXPORTER/metrics   (tlpx serve)
  prometheus  http://$PROMETHEUS         (config dashboards/prometheus.yml, data in $WORK/tsdb)

Point Grafana at:
  datasource  Prometheus, URL http://$PROMETHEUS, uid tlpx-prometheus
              (provisioned by $ROOT/dashboards/provisioning/datasources/tlpx.yaml)
  dashboards  $ROOT/dashboards/*.json
              (provisioned by $ROOT/dashboards/provisioning/dashboards/tlpx.yaml)
  e.g.        GF_PATHS_PROVISIONING=$ROOT/dashboards/provisioning \\
              TLPX_DASHBOARDS=$ROOT/dashboards grafana-server
              or import the JSON files by hand after adding the datasource.
MSG

if [ -n "${DASHBOARDS_SECONDS:-}" ]; then
    sleep "$DASHBOARDS_SECONDS"
    curl -fsS "http://$PROMETHEUS/api/v1/query?query=up" 2>/dev/null || true
    echo
else
    while kill -0 "$PROM_PID" 2>/dev/null && kill -0 "$SERVE_PID" 2>/dev/null; do sleep 1; done
    echo "dashboards: prometheus or tlpx serve stopped:" >&2
    tail -5 "$WORK/prometheus.log" "$WORK/serve.log" >&2
    exit 1
fi

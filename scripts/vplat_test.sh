#!/usr/bin/env bash
# make vplat-test (and make test's last step): the virtual platform's runs, each asserted check by
# check from its results.json (scripts/vplat/vplat_checks.py --assert-results):
#   1. Linux 6.1 (bookworm's): the card boot (every check: vfio, host knobs, per-CPU vectors,
#      LitePCIe's driver) and Linux's pcitest against the pci_epf_test card;
#   2. Linux 7.3 (trixie-backports, make kernel73): the driver boot (the card boot cut to
#      LitePCIe's stock driver: does it build, bind and run on the newest kernel) and the
#      kselftest pci_endpoint_test against the pci_epf_test card.
# The 7.3 card boot whole (make vplat-test-k73) is left out: its vfio and tlpx checks are 6.1's
# again, about 3.5 minutes of TCG for nothing a kernel changes (docs/virtual-platform.md).
# The servers are the card's own: every VPLAT_* override is cleared.
set -euo pipefail
cd "$(dirname "$0")/.."
clean=(env -u VPLAT_SERVER -u VPLAT_ID -u VPLAT_LINK -u VPLAT_BOOTS -u VPLAT_PCITEST_SERVER -u VPLAT_PCITEST_ID
       -u VPLAT_PCITEST_OFFER -u VPLAT_PCITEST_FAULT -u VPLAT_KERNEL -u VPLAT_SMP)
"${clean[@]}" scripts/vplat.sh
python3 scripts/vplat/vplat_checks.py --assert-results build/vplat/run/results.json
"${clean[@]}" VPLAT_KERNEL=7.3 VPLAT_BOOTS="driver kselftest" scripts/vplat.sh
python3 scripts/vplat/vplat_checks.py --assert-results build/vplat/run-7.3/results.json

//! What the CLI's end-to-end tests share: the tlpx binary cargo built for them, one run of it
//! against a device, and its output as text.
#![allow(dead_code)] // each test file uses a part

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `tlpx` binary of this build (cargo sets the variable for integration tests).
pub fn tlpx_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))
}

/// Runs `tlpx --device DEVICE ARGS` to its end.
pub fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(tlpx_bin()).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

/// A command's output bytes as text (lossy: a test prints what it got).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The colour of each entry of every legend of an SVG figure (`<g class="legend">`, as
/// crate::plot draws them): the first colour after each entry's start.
pub fn legend_colours(svg: &str) -> Vec<Vec<String>> {
    svg.split("<g class=\"legend\">")
        .skip(1)
        .map(|g| {
            let g = g.split("</g>").next().unwrap_or_default();
            g.split("</text>")
                .filter(|entry| entry.contains("<text"))
                .filter_map(|entry| entry.split("=\"#").nth(1).map(|c| format!("#{}", &c[..6.min(c.len())]).to_uppercase()))
                .collect()
        })
        .collect()
}

/// The colours used more than once in one legend of `svg`.
pub fn repeated_colours(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    for legend in legend_colours(svg) {
        for (i, c) in legend.iter().enumerate() {
            if legend[..i].contains(c) && !out.contains(c) {
                out.push(c.clone());
            }
        }
    }
    out
}

/// The repository's root (tests find the cards, the accelerators' scripts under it).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// The card build with pci_epf_test in its slot (placement bar0); fails (does not skip) when
/// it is not built.
pub fn dut_card() -> PathBuf {
    let dir = repo_root().join("build/card/dw64-pci_epf_test");
    let lib = dir.join("libtlpxcard.so");
    assert!(
        lib.exists() && dir.join("csr.json").exists(),
        "{} is missing: build the card with the pci_epf_test DUT (`make test` does; by hand: \
         PYTHONPATH=gateware .venv/bin/python -m tlpx_gateware.build --data-width 64 \
         --dut accelerators/pci_epf_test/dut.toml --output-root build/card)",
        lib.display()
    );
    lib
}

/// That card build's csr.json (`--regs`).
pub fn epf_regs() -> String {
    repo_root().join("build/card/dw64-pci_epf_test/csr.json").display().to_string()
}

/// A session script of accelerators/pci_epf_test/.
pub fn epf_script(name: &str) -> String {
    repo_root().join("accelerators/pci_epf_test").join(name).display().to_string()
}

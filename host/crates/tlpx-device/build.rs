//! Builds the C shim over pciutils' libpci (csrc/tlpx_pci.c) and links libpci.
//!
//! libpci is found through pkg-config (`libpci.pc` from apt's libpci-dev, dnf's
//! pciutils-devel). The shim is compiled against the headers of the same libpci it links, so
//! the layout of `struct pci_dev` never leaks into Rust.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/tlpx_pci.c");
    println!("cargo:rerun-if-changed=csrc/tlpx_pci.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // Probe without emitting link flags yet: `-lpci` must come after the shim's static
    // archive on the link line, or `--as-needed` drops libpci before the shim needs it.
    let libpci = match pkg_config::Config::new().cargo_metadata(false).probe("libpci") {
        Ok(lib) => lib,
        Err(e) => panic!(
            "tlpx-device needs pciutils' libpci and its headers, found through pkg-config: {e}\n\
             Install them with `sudo apt-get install libpci-dev pkg-config` (Debian/Ubuntu) or \
             `sudo dnf install pciutils-devel pkgconf` (Fedora); set PKG_CONFIG_PATH if \
             libpci.pc lives elsewhere."
        ),
    };

    let mut build = cc::Build::new();
    build.file("csrc/tlpx_pci.c").include("csrc").warnings(true).flag_if_supported("-std=gnu11");
    for dir in &libpci.include_paths {
        build.include(dir);
    }
    for (name, value) in &libpci.defines {
        build.define(name, value.as_deref());
    }
    build.compile("tlpx_pci");

    for dir in &libpci.link_paths {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for lib in &libpci.libs {
        println!("cargo:rustc-link-lib={lib}");
    }
}

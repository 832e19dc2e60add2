//! Where the build puts what the tools load: `build/card/dw<N>[-cpu]/libtlpxcard.so`,
//! `build/firmware/tlpx-fw.img`.
//!
//! Here, in the crate the simulator and every client already share, because both sides look
//! for built files the same way (the sim for its card libraries, the tlpx CLI for the firmware
//! image) and this crate needs nothing else (no libpci): `tlpx_device::paths` re-exports it.

use std::path::{Path, PathBuf};

/// Finds `rel` (a path under the repository, e.g. `build/firmware/tlpx-fw.img`) by walking up
/// from the executable's directory, then from the current directory; the first that exists,
/// else the path where it was expected (below the current directory), for the error message.
pub fn find_built_file(rel: &Path) -> PathBuf {
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            starts.push(dir.to_owned());
        }
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    for start in &starts {
        for dir in start.ancestors() {
            let candidate = dir.join(rel);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    starts.last().map(|d| d.join(rel)).unwrap_or_else(|| rel.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_file_above_the_current_directory_or_names_where_it_was_expected() {
        // Cargo.lock of this crate's workspace is above the test's directory (crates/tlpx-sim-protocol).
        let found = find_built_file(Path::new("Cargo.lock"));
        assert!(found.exists() && found.ends_with("Cargo.lock"), "{}", found.display());
        let missing = find_built_file(Path::new("build/no/such/file.img"));
        assert!(!missing.exists() && missing.ends_with("build/no/such/file.img"), "{}", missing.display());
    }
}

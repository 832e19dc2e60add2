//! The litepcie backend's ioctl numbers and struct layouts against the driver's own header.
//!
//! Compiles a small C program against the installed LitePCIe's litepcie.h (the header the
//! driver built by `make litepcie-driver` is compiled with) and compares every size, field
//! offset and ioctl number it prints with `tlpx_device::backends::litepcie::abi`.
//!
//! The header is found at $TLPX_LITEPCIE_KERNEL_DIR/litepcie.h, else in the workspace's venv
//! (.venv/lib/python3*/site-packages/litepcie/software/kernel, present after `make setup`).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use tlpx_device::backends::litepcie::abi;

fn kernel_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TLPX_LITEPCIE_KERNEL_DIR") {
        let dir = PathBuf::from(dir);
        assert!(dir.join("litepcie.h").is_file(), "TLPX_LITEPCIE_KERNEL_DIR={} has no litepcie.h", dir.display());
        return dir;
    }
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../.venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("site-packages/litepcie/software/kernel"))
            .filter(|d| d.join("litepcie.h").is_file())
            .collect();
        dirs.sort();
        dirs.pop()
    });
    found.unwrap_or_else(|| {
        panic!(
            "no litepcie.h: looked in {}/python3*/site-packages/litepcie/software/kernel (run `make setup`, which \
             installs LitePCIe into .venv) and TLPX_LITEPCIE_KERNEL_DIR is not set",
            lib.display()
        )
    })
}

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include "litepcie.h"

#define SIZE(s) printf("sizeof %s %zu\n", #s, sizeof(struct s))
#define OFF(s, f) printf("offsetof %s.%s %zu\n", #s, #f, offsetof(struct s, f))
#define NUM(n) printf("ioctl %s %lu\n", #n, (unsigned long)(n))

int main(void) {
    SIZE(litepcie_ioctl_reg); OFF(litepcie_ioctl_reg, addr); OFF(litepcie_ioctl_reg, val); OFF(litepcie_ioctl_reg, is_write);
    SIZE(litepcie_ioctl_flash); OFF(litepcie_ioctl_flash, tx_len); OFF(litepcie_ioctl_flash, tx_data); OFF(litepcie_ioctl_flash, rx_data);
    SIZE(litepcie_ioctl_icap); OFF(litepcie_ioctl_icap, addr); OFF(litepcie_ioctl_icap, data);
    SIZE(litepcie_ioctl_dma); OFF(litepcie_ioctl_dma, loopback_enable);
    SIZE(litepcie_ioctl_dma_writer); OFF(litepcie_ioctl_dma_writer, enable); OFF(litepcie_ioctl_dma_writer, hw_count); OFF(litepcie_ioctl_dma_writer, sw_count);
    SIZE(litepcie_ioctl_dma_reader); OFF(litepcie_ioctl_dma_reader, enable); OFF(litepcie_ioctl_dma_reader, hw_count); OFF(litepcie_ioctl_dma_reader, sw_count);
    SIZE(litepcie_ioctl_lock);
    OFF(litepcie_ioctl_lock, dma_reader_request); OFF(litepcie_ioctl_lock, dma_writer_request);
    OFF(litepcie_ioctl_lock, dma_reader_release); OFF(litepcie_ioctl_lock, dma_writer_release);
    OFF(litepcie_ioctl_lock, dma_reader_status); OFF(litepcie_ioctl_lock, dma_writer_status);
    SIZE(litepcie_ioctl_mmap_dma_info);
    OFF(litepcie_ioctl_mmap_dma_info, dma_tx_buf_offset); OFF(litepcie_ioctl_mmap_dma_info, dma_tx_buf_size);
    OFF(litepcie_ioctl_mmap_dma_info, dma_tx_buf_count); OFF(litepcie_ioctl_mmap_dma_info, dma_rx_buf_offset);
    OFF(litepcie_ioctl_mmap_dma_info, dma_rx_buf_size); OFF(litepcie_ioctl_mmap_dma_info, dma_rx_buf_count);
    SIZE(litepcie_ioctl_mmap_dma_update); OFF(litepcie_ioctl_mmap_dma_update, sw_count);
    NUM(LITEPCIE_IOCTL_REG); NUM(LITEPCIE_IOCTL_FLASH); NUM(LITEPCIE_IOCTL_ICAP);
    NUM(LITEPCIE_IOCTL_DMA); NUM(LITEPCIE_IOCTL_DMA_WRITER); NUM(LITEPCIE_IOCTL_DMA_READER);
    NUM(LITEPCIE_IOCTL_MMAP_DMA_INFO); NUM(LITEPCIE_IOCTL_LOCK);
    NUM(LITEPCIE_IOCTL_MMAP_DMA_WRITER_UPDATE); NUM(LITEPCIE_IOCTL_MMAP_DMA_READER_UPDATE);
    return 0;
}
"#;

/// What the C compiler says, as "kind name" -> value.
fn c_facts() -> BTreeMap<String, u64> {
    let kernel = kernel_dir();
    let dir = tempfile::tempdir().expect("temporary directory");
    // litepcie.h includes the SoC's csr.h and (through config.h) soc.h; none of their contents
    // enter the ioctl ABI, so empty ones do.
    std::fs::write(dir.path().join("csr.h"), "/* stub: the ioctl ABI uses no CSR */\n").unwrap();
    std::fs::write(dir.path().join("soc.h"), "/* stub */\n").unwrap();
    let src = dir.path().join("abi.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.path().join("abi");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&kernel)
        .arg("-I")
        .arg(dir.path())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "{cc} could not compile a program against {}/litepcie.h:\n{}",
        kernel.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the ABI program");
    assert!(run.status.success(), "the ABI program failed: {}", String::from_utf8_lossy(&run.stderr));
    let text = String::from_utf8(run.stdout).expect("ASCII output");
    let mut facts = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(kind), Some(name), Some(value)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("unexpected line from the ABI program: {line:?}");
        };
        facts.insert(format!("{kind} {name}"), value.parse().expect("a number"));
    }
    facts
}

macro_rules! off {
    ($t:ty, $f:ident) => {
        offset_of!($t, $f) as u64
    };
}

fn rust_facts() -> BTreeMap<String, u64> {
    let mut r = BTreeMap::new();
    let mut put = |k: &str, v: u64| {
        r.insert(k.to_string(), v);
    };
    put("sizeof litepcie_ioctl_reg", size_of::<abi::Reg>() as u64);
    put("offsetof litepcie_ioctl_reg.addr", off!(abi::Reg, addr));
    put("offsetof litepcie_ioctl_reg.val", off!(abi::Reg, val));
    put("offsetof litepcie_ioctl_reg.is_write", off!(abi::Reg, is_write));
    put("sizeof litepcie_ioctl_flash", size_of::<abi::Flash>() as u64);
    put("offsetof litepcie_ioctl_flash.tx_len", off!(abi::Flash, tx_len));
    put("offsetof litepcie_ioctl_flash.tx_data", off!(abi::Flash, tx_data));
    put("offsetof litepcie_ioctl_flash.rx_data", off!(abi::Flash, rx_data));
    put("sizeof litepcie_ioctl_icap", size_of::<abi::Icap>() as u64);
    put("offsetof litepcie_ioctl_icap.addr", off!(abi::Icap, addr));
    put("offsetof litepcie_ioctl_icap.data", off!(abi::Icap, data));
    put("sizeof litepcie_ioctl_dma", size_of::<abi::Dma>() as u64);
    put("offsetof litepcie_ioctl_dma.loopback_enable", off!(abi::Dma, loopback_enable));
    for s in ["litepcie_ioctl_dma_writer", "litepcie_ioctl_dma_reader"] {
        put(&format!("sizeof {s}"), size_of::<abi::DmaEngine>() as u64);
        put(&format!("offsetof {s}.enable"), off!(abi::DmaEngine, enable));
        put(&format!("offsetof {s}.hw_count"), off!(abi::DmaEngine, hw_count));
        put(&format!("offsetof {s}.sw_count"), off!(abi::DmaEngine, sw_count));
    }
    put("sizeof litepcie_ioctl_lock", size_of::<abi::Lock>() as u64);
    put("offsetof litepcie_ioctl_lock.dma_reader_request", off!(abi::Lock, dma_reader_request));
    put("offsetof litepcie_ioctl_lock.dma_writer_request", off!(abi::Lock, dma_writer_request));
    put("offsetof litepcie_ioctl_lock.dma_reader_release", off!(abi::Lock, dma_reader_release));
    put("offsetof litepcie_ioctl_lock.dma_writer_release", off!(abi::Lock, dma_writer_release));
    put("offsetof litepcie_ioctl_lock.dma_reader_status", off!(abi::Lock, dma_reader_status));
    put("offsetof litepcie_ioctl_lock.dma_writer_status", off!(abi::Lock, dma_writer_status));
    put("sizeof litepcie_ioctl_mmap_dma_info", size_of::<abi::MmapDmaInfo>() as u64);
    put("offsetof litepcie_ioctl_mmap_dma_info.dma_tx_buf_offset", off!(abi::MmapDmaInfo, dma_tx_buf_offset));
    put("offsetof litepcie_ioctl_mmap_dma_info.dma_tx_buf_size", off!(abi::MmapDmaInfo, dma_tx_buf_size));
    put("offsetof litepcie_ioctl_mmap_dma_info.dma_tx_buf_count", off!(abi::MmapDmaInfo, dma_tx_buf_count));
    put("offsetof litepcie_ioctl_mmap_dma_info.dma_rx_buf_offset", off!(abi::MmapDmaInfo, dma_rx_buf_offset));
    put("offsetof litepcie_ioctl_mmap_dma_info.dma_rx_buf_size", off!(abi::MmapDmaInfo, dma_rx_buf_size));
    put("offsetof litepcie_ioctl_mmap_dma_info.dma_rx_buf_count", off!(abi::MmapDmaInfo, dma_rx_buf_count));
    put("sizeof litepcie_ioctl_mmap_dma_update", size_of::<abi::MmapDmaUpdate>() as u64);
    put("offsetof litepcie_ioctl_mmap_dma_update.sw_count", off!(abi::MmapDmaUpdate, sw_count));
    put("ioctl LITEPCIE_IOCTL_REG", abi::LITEPCIE_IOCTL_REG);
    put("ioctl LITEPCIE_IOCTL_FLASH", abi::LITEPCIE_IOCTL_FLASH);
    put("ioctl LITEPCIE_IOCTL_ICAP", abi::LITEPCIE_IOCTL_ICAP);
    put("ioctl LITEPCIE_IOCTL_DMA", abi::LITEPCIE_IOCTL_DMA);
    put("ioctl LITEPCIE_IOCTL_DMA_WRITER", abi::LITEPCIE_IOCTL_DMA_WRITER);
    put("ioctl LITEPCIE_IOCTL_DMA_READER", abi::LITEPCIE_IOCTL_DMA_READER);
    put("ioctl LITEPCIE_IOCTL_MMAP_DMA_INFO", abi::LITEPCIE_IOCTL_MMAP_DMA_INFO);
    put("ioctl LITEPCIE_IOCTL_LOCK", abi::LITEPCIE_IOCTL_LOCK);
    put("ioctl LITEPCIE_IOCTL_MMAP_DMA_WRITER_UPDATE", abi::LITEPCIE_IOCTL_MMAP_DMA_WRITER_UPDATE);
    put("ioctl LITEPCIE_IOCTL_MMAP_DMA_READER_UPDATE", abi::LITEPCIE_IOCTL_MMAP_DMA_READER_UPDATE);
    r
}

#[test]
fn ioctl_abi_matches_litepcie_h() {
    let c = c_facts();
    let rust = rust_facts();
    let mut diffs = Vec::new();
    for (k, v) in &c {
        match rust.get(k) {
            Some(r) if r == v => {}
            Some(r) => diffs.push(format!("{k}: litepcie.h {v} (0x{v:x}), Rust {r} (0x{r:x})")),
            None => diffs.push(format!("{k}: in litepcie.h ({v}), not checked on the Rust side")),
        }
    }
    for k in rust.keys().filter(|k| !c.contains_key(*k)) {
        diffs.push(format!("{k}: on the Rust side, not printed from litepcie.h"));
    }
    assert!(diffs.is_empty(), "the litepcie backend's ABI differs from litepcie.h:\n{}", diffs.join("\n"));
    // Ten ioctls, eight structs (the writer and reader share a layout).
    assert_eq!(c.keys().filter(|k| k.starts_with("ioctl ")).count(), 10);
    assert_eq!(c.keys().filter(|k| k.starts_with("sizeof ")).count(), 9);
}

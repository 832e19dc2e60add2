//! Loads and stores on a mapped BAR: volatile accesses of one width, the 16-byte ones
//! (SSE2) a block access uses where alignment allows, and the fence that flushes
//! write-combining buffers.

use crate::Width;

/// Volatile load of `width` at `p`.
///
/// # Safety
/// `p` must be valid for a naturally aligned access of that width.
pub(super) unsafe fn load(p: *const u8, width: Width) -> u64 {
    // SAFETY: the caller's promise.
    unsafe {
        match width {
            Width::W8 => std::ptr::read_volatile(p) as u64,
            Width::W16 => std::ptr::read_volatile(p as *const u16) as u64,
            Width::W32 => std::ptr::read_volatile(p as *const u32) as u64,
            Width::W64 => std::ptr::read_volatile(p as *const u64),
        }
    }
}

/// Volatile store of the low `width` bits of `v` at `p`.
///
/// # Safety
/// `p` must be valid for a naturally aligned access of that width.
pub(super) unsafe fn store(p: *mut u8, width: Width, v: u64) {
    // SAFETY: the caller's promise.
    unsafe {
        match width {
            Width::W8 => std::ptr::write_volatile(p, v as u8),
            Width::W16 => std::ptr::write_volatile(p as *mut u16, v as u16),
            Width::W32 => std::ptr::write_volatile(p as *mut u32, v as u32),
            Width::W64 => std::ptr::write_volatile(p as *mut u64, v),
        }
    }
}

/// One 16-byte load (SSE2 movdqu: a single 16-byte read on the bus where the CPU and the
/// root complex allow it).
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn load16(p: *const u8) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: the caller's promise for p; out is 16 writable bytes; SSE2 is part of x86_64.
    unsafe {
        std::arch::asm!(
            "movdqu {x}, [{p}]",
            "movdqu [{o}], {x}",
            p = in(reg) p,
            o = in(reg) out.as_mut_ptr(),
            x = out(xmm_reg) _,
            options(nostack, preserves_flags)
        );
    }
    out
}

/// One 16-byte store (SSE2 movdqu).
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn store16(p: *mut u8, data: &[u8; 16]) {
    // SAFETY: the caller's promise for p; data is 16 readable bytes; SSE2 is part of x86_64.
    unsafe {
        std::arch::asm!(
            "movdqu {x}, [{d}]",
            "movdqu [{p}], {x}",
            p = in(reg) p,
            d = in(reg) data.as_ptr(),
            x = out(xmm_reg) _,
            options(nostack, preserves_flags)
        );
    }
}

/// Flushes write-combining buffers so a burst leaves the CPU now.
pub(super) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence only orders stores.
    unsafe {
        std::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Widest naturally aligned piece (1..=16 bytes) at `at` within `left` bytes.
pub(super) fn piece(at: u64, left: usize) -> usize {
    for n in [16usize, 8, 4, 2] {
        if cfg!(not(target_arch = "x86_64")) && n == 16 {
            continue;
        }
        if at.is_multiple_of(n as u64) && left >= n {
            return n;
        }
    }
    1
}

pub(super) fn width_of(n: usize) -> Width {
    match n {
        8 => Width::W64,
        4 => Width::W32,
        2 => Width::W16,
        _ => Width::W8,
    }
}

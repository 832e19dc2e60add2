//! `struct perf_event_attr` and the constants of include/uapi/linux/perf_event.h that tlpx uses,
//! from the `perf-event-open-sys2` crate: bindgen's output for the kernel's uapi header (Linux
//! 6.9 in 5.0.6), with bindgen's own layout tests. This file used to write the struct, its
//! version sizes and the ioctl numbers by hand; it now only narrows the constants to the types
//! of the fields they go in (bindgen makes the C enums `u32`; `config`, `sample_type` and
//! `read_format` are `u64`).
//!
//! The struct is the kernel's whole one. Each caller still says in `size` the version it
//! needs: the kernel reads `size` bytes and takes anything shorter than it knows as an older
//! struct, so a caller that sets only the first fields keeps working on old kernels (the
//! `--pmc` counters send VER1, which every kernel since 2.6.39 takes). The bindings are
//! `#[non_exhaustive]` with unions and a bitfield word: build one with `Default` (all zero),
//! set fields, the flags through their setters (`set_disabled(1)`), the unions by member
//! (`__bindgen_anon_1.sample_period`, `__bindgen_anon_2.wakeup_events`).

use perf_event_open_sys::bindings as sys;

pub use sys::perf_event_attr as PerfEventAttr;
/// Sizes of the published versions of the struct (PERF_ATTR_SIZE_VER*): what `size` may say.
pub use sys::{
    PERF_ATTR_SIZE_VER0, PERF_ATTR_SIZE_VER1, PERF_ATTR_SIZE_VER2, PERF_ATTR_SIZE_VER3, PERF_ATTR_SIZE_VER4, PERF_ATTR_SIZE_VER5,
    PERF_ATTR_SIZE_VER6, PERF_ATTR_SIZE_VER7,
};

// perf_type_id (the `type_` field, u32).
pub const PERF_TYPE_HARDWARE: u32 = sys::PERF_TYPE_HARDWARE;
pub const PERF_TYPE_SOFTWARE: u32 = sys::PERF_TYPE_SOFTWARE;
pub const PERF_TYPE_TRACEPOINT: u32 = sys::PERF_TYPE_TRACEPOINT;

// perf_hw_id (the `config` of a PERF_TYPE_HARDWARE event).
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = sys::PERF_COUNT_HW_CPU_CYCLES as u64;
pub const PERF_COUNT_HW_INSTRUCTIONS: u64 = sys::PERF_COUNT_HW_INSTRUCTIONS as u64;
pub const PERF_COUNT_HW_CACHE_REFERENCES: u64 = sys::PERF_COUNT_HW_CACHE_REFERENCES as u64;
pub const PERF_COUNT_HW_CACHE_MISSES: u64 = sys::PERF_COUNT_HW_CACHE_MISSES as u64;

// perf_event_sample_format.
pub const PERF_SAMPLE_TIME: u64 = sys::PERF_SAMPLE_TIME as u64;
pub const PERF_SAMPLE_CPU: u64 = sys::PERF_SAMPLE_CPU as u64;
pub const PERF_SAMPLE_RAW: u64 = sys::PERF_SAMPLE_RAW as u64;

// perf_event_read_format.
pub const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = sys::PERF_FORMAT_TOTAL_TIME_ENABLED as u64;
pub const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = sys::PERF_FORMAT_TOTAL_TIME_RUNNING as u64;

/// perf_event_open's `flags` argument: the new fd is close-on-exec.
pub const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong;
/// The argument of ENABLE, DISABLE and RESET that applies them to the leader's whole group.
pub const PERF_IOC_FLAG_GROUP: libc::c_ulong = sys::PERF_IOC_FLAG_GROUP as libc::c_ulong;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// The fields tlpx sets lie where the version sizes say (VER1: up to config2; VER3: up to
    /// clockid; VER5, the ISR trace's, up to sample_max_stack), and the bitfield word's bits are
    /// the kernel's: what the crate's bindings give is checked here against the header's facts.
    #[test]
    fn the_bindings_end_each_version_where_the_kernel_header_says() {
        // config1 and config2 are bindgen's anonymous unions 3 and 4
        assert_eq!(offset_of!(PerfEventAttr, __bindgen_anon_3) + 8, PERF_ATTR_SIZE_VER0 as usize);
        assert_eq!(offset_of!(PerfEventAttr, __bindgen_anon_4) + 8, PERF_ATTR_SIZE_VER1 as usize);
        assert_eq!(offset_of!(PerfEventAttr, clockid) + 4, PERF_ATTR_SIZE_VER3 as usize);
        assert_eq!(offset_of!(PerfEventAttr, sample_max_stack) + 2 + 2, PERF_ATTR_SIZE_VER5 as usize);
        assert_eq!(offset_of!(PerfEventAttr, sig_data) + 8, PERF_ATTR_SIZE_VER7 as usize);
        assert_eq!((offset_of!(PerfEventAttr, read_format), offset_of!(PerfEventAttr, __bindgen_anon_2)), (32, 48));
        // The bitfield word (offset 40): disabled is bit 0, exclude_kernel 5, use_clockid 25.
        let mut a = PerfEventAttr::default();
        a.set_disabled(1);
        a.set_exclude_kernel(1);
        a.set_use_clockid(1);
        // SAFETY: PerfEventAttr is plain old data; the word at 40 is the bitfield's 8 bytes.
        let word = unsafe { std::ptr::read_unaligned((&a as *const PerfEventAttr).cast::<u8>().add(40).cast::<u64>()) };
        assert_eq!(word, 1 | 1 << 5 | 1 << 25);
    }

    /// Where this machine has the kernel's uapi header, its PERF_ATTR_SIZE_VER* are these.
    #[test]
    fn the_sizes_match_this_machines_uapi_header() {
        let Ok(header) = std::fs::read_to_string("/usr/include/linux/perf_event.h") else {
            eprintln!("no /usr/include/linux/perf_event.h here: nothing to compare with");
            return;
        };
        let ours = [
            PERF_ATTR_SIZE_VER0,
            PERF_ATTR_SIZE_VER1,
            PERF_ATTR_SIZE_VER2,
            PERF_ATTR_SIZE_VER3,
            PERF_ATTR_SIZE_VER4,
            PERF_ATTR_SIZE_VER5,
            PERF_ATTR_SIZE_VER6,
            PERF_ATTR_SIZE_VER7,
        ];
        for (version, ours) in ours.iter().enumerate() {
            let name = format!("#define PERF_ATTR_SIZE_VER{version}");
            let value = header.lines().find_map(|l| l.strip_prefix(&name)).and_then(|rest| rest.split_whitespace().next());
            assert_eq!(value.and_then(|v| v.parse::<u32>().ok()), Some(*ours), "{name} in the uapi header");
        }
    }
}

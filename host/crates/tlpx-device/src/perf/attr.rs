//! `struct perf_event_attr` and the constants of include/uapi/linux/perf_event.h that tlpx uses.
//!
//! The struct is written once, with the kernel's whole layout as of PERF_ATTR_SIZE_VER7 (the
//! uapi header this was checked against: Linux 6.18). Each caller still says in `size` the
//! version it needs: the kernel reads `size` bytes and takes anything shorter than it knows as
//! an older struct, so a caller that sets only the first fields keeps working on old kernels
//! (the `--pmc` counters send VER1, which every kernel since 2.6.39 takes).

/// Sizes of the published versions of the struct (PERF_ATTR_SIZE_VER*): what `size` may say.
pub const PERF_ATTR_SIZE_VER0: u32 = 64;
/// Adds config2.
pub const PERF_ATTR_SIZE_VER1: u32 = 72;
/// Adds branch_sample_type.
pub const PERF_ATTR_SIZE_VER2: u32 = 80;
/// Adds sample_regs_user, sample_stack_user (and clockid, in what was padding, Linux 4.1).
pub const PERF_ATTR_SIZE_VER3: u32 = 96;
/// Adds sample_regs_intr.
pub const PERF_ATTR_SIZE_VER4: u32 = 104;
/// Adds aux_watermark (and sample_max_stack).
pub const PERF_ATTR_SIZE_VER5: u32 = 112;
/// Adds aux_sample_size.
pub const PERF_ATTR_SIZE_VER6: u32 = 120;
/// Adds sig_data.
pub const PERF_ATTR_SIZE_VER7: u32 = 128;

/// `struct perf_event_attr` (include/uapi/linux/perf_event.h), every field up to `sig_data`.
/// Unions are named by the member tlpx uses; the bitfield word is `flags` (see `ATTR_*`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    /// `type`: PERF_TYPE_*.
    pub type_: u32,
    /// How many bytes of this struct the kernel reads: one of PERF_ATTR_SIZE_VER*.
    pub size: u32,
    pub config: u64,
    /// Union with sample_freq.
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield word: disabled, inherit, ... (`ATTR_*`, least significant bit first).
    pub flags: u64,
    /// Union with wakeup_watermark (bytes, with `ATTR_WATERMARK`).
    pub wakeup_events: u32,
    pub bp_type: u32,
    /// Union with bp_addr, kprobe_func, uprobe_path.
    pub config1: u64,
    /// Union with bp_len, kprobe_addr, probe_offset.
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER7 as usize);

// perf_type_id.
pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_TRACEPOINT: u32 = 2;

// perf_hw_id (the `config` of a PERF_TYPE_HARDWARE event).
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
pub const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
pub const PERF_COUNT_HW_CACHE_REFERENCES: u64 = 2;
pub const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;

// perf_event_sample_format.
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;

// perf_event_read_format.
pub const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;

// Bits of `flags` (the C bitfield, least significant bit first).
pub const ATTR_DISABLED: u64 = 1 << 0;
pub const ATTR_INHERIT: u64 = 1 << 1;
pub const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const ATTR_EXCLUDE_HV: u64 = 1 << 6;
pub const ATTR_WATERMARK: u64 = 1 << 14;
pub const ATTR_USE_CLOCKID: u64 = 1 << 25;

/// perf_event_open's `flags` argument: the new fd is close-on-exec.
pub const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

// ioctls on a perf fd: _IO('$', 0), _IO('$', 1), _IO('$', 3), _IOW('$', 6, char *).
pub const PERF_EVENT_IOC_ENABLE: libc::Ioctl = libc::_IO(b'$' as u32, 0);
pub const PERF_EVENT_IOC_DISABLE: libc::Ioctl = libc::_IO(b'$' as u32, 1);
pub const PERF_EVENT_IOC_RESET: libc::Ioctl = libc::_IO(b'$' as u32, 3);
pub const PERF_EVENT_IOC_SET_FILTER: libc::Ioctl = libc::_IOW::<*const libc::c_char>(b'$' as u32, 6);
/// The argument of ENABLE, DISABLE and RESET that applies them to the leader's whole group.
pub const PERF_IOC_FLAG_GROUP: libc::c_ulong = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Each version's size is where the field it added ends: the Rust layout is the C one.
    #[test]
    fn the_layout_ends_each_version_where_the_kernel_header_says() {
        assert_eq!(offset_of!(PerfEventAttr, config1) + 8, PERF_ATTR_SIZE_VER0 as usize);
        assert_eq!(offset_of!(PerfEventAttr, config2) + 8, PERF_ATTR_SIZE_VER1 as usize);
        assert_eq!(offset_of!(PerfEventAttr, branch_sample_type) + 8, PERF_ATTR_SIZE_VER2 as usize);
        assert_eq!(offset_of!(PerfEventAttr, clockid) + 4, PERF_ATTR_SIZE_VER3 as usize);
        assert_eq!(offset_of!(PerfEventAttr, sample_regs_intr) + 8, PERF_ATTR_SIZE_VER4 as usize);
        assert_eq!(offset_of!(PerfEventAttr, reserved_2) + 2, PERF_ATTR_SIZE_VER5 as usize);
        assert_eq!(offset_of!(PerfEventAttr, reserved_3) + 4, PERF_ATTR_SIZE_VER6 as usize);
        assert_eq!(offset_of!(PerfEventAttr, sig_data) + 8, PERF_ATTR_SIZE_VER7 as usize);
        assert_eq!((offset_of!(PerfEventAttr, flags), offset_of!(PerfEventAttr, wakeup_events)), (40, 48));
        assert_eq!(libc::_IO(b'$' as u32, 3) as u64, 0x2403);
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

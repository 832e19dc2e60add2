//! Bindings to the C shim in csrc/tlpx_pci.c and a safe owner of its handle.
//!
//! Only the shim's own functions and its fixed `tlpx_pci_info` struct cross this boundary;
//! libpci's structures never do. The shim turns libpci's fatal errors into return codes (see
//! csrc/tlpx_pci.h), so every call here returns.

use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;

/// Must equal TLPX_PCI_SHIM_ABI in csrc/tlpx_pci.h.
const SHIM_ABI: c_int = 1;

/// Mirror of `struct tlpx_pci_info` (csrc/tlpx_pci.h).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct RawInfo {
    pub domain: u32,
    pub bus: u8,
    pub dev: u8,
    pub func: u8,
    pub revision: u8,
    pub vendor_id: u16,
    pub device_id: u16,
    pub class_code: u32,
    pub subsys_vendor_id: u16,
    pub subsys_id: u16,
}

#[repr(C)]
struct RawHandle {
    _opaque: [u8; 0],
}

/// Kinds of name (`enum tlpx_pci_name_kind`).
#[derive(Debug, Clone, Copy)]
pub(super) enum NameKind {
    Vendor = 1,
    Device = 2,
    Class = 3,
}

extern "C" {
    fn tlpx_pci_shim_abi() -> c_int;
    fn tlpx_pci_open(dump_path: *const c_char, err: *mut c_char, errlen: usize) -> *mut RawHandle;
    fn tlpx_pci_scan(h: *mut RawHandle) -> c_int;
    fn tlpx_pci_info(h: *mut RawHandle, index: c_int, out: *mut RawInfo) -> c_int;
    fn tlpx_pci_read_config(h: *mut RawHandle, index: c_int, buf: *mut u8, buflen: c_int) -> c_int;
    fn tlpx_pci_lookup(h: *mut RawHandle, kind: c_int, a: c_uint, b: c_uint, buf: *mut c_char, buflen: c_int) -> c_int;
    fn tlpx_pci_error(h: *const RawHandle) -> *const c_char;
    fn tlpx_pci_warnings(h: *const RawHandle) -> *const c_char;
    fn tlpx_pci_close(h: *mut RawHandle);
}

/// An open libpci access handle. Not `Send`: the shim routes libpci's callbacks through a
/// thread-local, so a handle lives and dies on the thread that opened it.
pub(super) struct LibPci {
    handle: NonNull<RawHandle>,
}

impl LibPci {
    /// Opens libpci with its default access method (`None`) or the dump method reading
    /// `dump` (`Some`). The error is libpci's own message.
    pub fn open(dump: Option<&Path>) -> Result<LibPci, String> {
        // SAFETY: no arguments; returns a constant.
        let abi = unsafe { tlpx_pci_shim_abi() };
        if abi != SHIM_ABI {
            return Err(format!("the C shim speaks ABI {abi}, the Rust side {SHIM_ABI}: rebuild tlpx-device (cargo clean -p tlpx-device)"));
        }
        let path = match dump {
            Some(p) => Some(path_to_cstring(p)?),
            None => None,
        };
        let mut err = [0 as c_char; 1024];
        // SAFETY: `path` is NUL-terminated and outlives the call; `err` is writable for its
        // whole length, which is passed.
        let raw = unsafe { tlpx_pci_open(path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()), err.as_mut_ptr(), err.len()) };
        match NonNull::new(raw) {
            Some(handle) => Ok(LibPci { handle }),
            // SAFETY: the shim NUL-terminates `err` whenever errlen > 0.
            None => Err(unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned()),
        }
    }

    fn last_error(&self) -> String {
        // SAFETY: the handle is live; the shim returns a NUL-terminated buffer it owns,
        // copied here before any other call.
        unsafe { CStr::from_ptr(tlpx_pci_error(self.handle.as_ptr())) }.to_string_lossy().into_owned()
    }

    /// Warnings libpci gave so far, one per entry.
    pub fn warnings(&self) -> Vec<String> {
        // SAFETY: as in `last_error`.
        let text = unsafe { CStr::from_ptr(tlpx_pci_warnings(self.handle.as_ptr())) }.to_string_lossy().into_owned();
        text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
    }

    /// Scans the bus; returns the number of functions.
    pub fn scan(&mut self) -> Result<usize, String> {
        // SAFETY: the handle is live and used by this thread only.
        let n = unsafe { tlpx_pci_scan(self.handle.as_ptr()) };
        usize::try_from(n).map_err(|_| self.last_error())
    }

    pub fn info(&mut self, index: usize) -> Result<RawInfo, String> {
        let index = c_int::try_from(index).map_err(|_| format!("function index {index} out of range"))?;
        let mut out = RawInfo::default();
        // SAFETY: `out` is a valid, writable RawInfo, whose layout matches the C struct.
        let rc = unsafe { tlpx_pci_info(self.handle.as_ptr(), index, &mut out) };
        if rc == 0 {
            Ok(out)
        } else {
            Err(self.last_error())
        }
    }

    /// As much config space as libpci can read (4096, 256, 128 or 64 bytes); an empty
    /// vector if not even the 64-byte header is readable.
    pub fn read_config(&mut self, index: usize) -> Result<Vec<u8>, String> {
        let index = c_int::try_from(index).map_err(|_| format!("function index {index} out of range"))?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is writable for the length passed.
        let n = unsafe { tlpx_pci_read_config(self.handle.as_ptr(), index, buf.as_mut_ptr(), buf.len() as c_int) };
        let n = usize::try_from(n).map_err(|_| self.last_error())?;
        buf.truncate(n);
        Ok(buf)
    }

    /// A name from the ID database; `Ok(None)` if the database has no such entry.
    pub fn lookup(&mut self, kind: NameKind, a: u32, b: u32) -> Result<Option<String>, String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` is writable for the length passed; the shim NUL-terminates it.
        let rc = unsafe { tlpx_pci_lookup(self.handle.as_ptr(), kind as c_int, a, b, buf.as_mut_ptr(), buf.len() as c_int) };
        match rc {
            // SAFETY: NUL-terminated by the shim on success.
            1 => Ok(Some(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())),
            0 => Ok(None),
            _ => Err(self.last_error()),
        }
    }
}

impl Drop for LibPci {
    fn drop(&mut self) {
        // SAFETY: the handle came from tlpx_pci_open and is closed exactly once.
        unsafe { tlpx_pci_close(self.handle.as_ptr()) }
    }
}

fn path_to_cstring(path: &Path) -> Result<CString, String> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| "the path contains a NUL byte".to_string())
}

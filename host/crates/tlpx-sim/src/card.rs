//! The Verilated card: a shared library implementing gateware/tlpx_gateware/sim/tlpx_card.h,
//! loaded with dlopen. This module is the only place that touches its C ABI.

use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// TLPX_CARD_ABI_VERSION this sim speaks.
pub const ABI_VERSION: u32 = 1;
/// TLPX_CARD_MAX_DWORDS: DWs per beat at the widest datapath (256 bits).
pub const MAX_DWORDS: usize = 8;

/// `tlpx_card_inputs` of tlpx_card.h, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CardInputs {
    pub rx_dat: [u32; MAX_DWORDS],
    pub rx_be: u32,
    pub rx_valid: u8,
    pub rx_first: u8,
    pub rx_last: u8,
    pub tx_ready: u8,
    pub msi_ready: u8,
    pub cfg_bus_master_enable: u8,
    pub cfg_msi_enable: u8,
    /// MSI Multiple Message Enable: the card may send vectors 0..(1 << this) (0..=5).
    pub cfg_msi_multiple_enable: u8,
    pub cfg_requester_id: u16,
    pub cfg_max_payload_size: u16,
    pub cfg_max_request_size: u16,
    /// MSI-X capability: MSI-X Enable, Function Mask.
    pub cfg_msix_enable: u8,
    pub cfg_msix_function_mask: u8,
}

/// `tlpx_card_outputs` of tlpx_card.h, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CardOutputs {
    pub tx_dat: [u32; MAX_DWORDS],
    pub tx_be: u32,
    pub tx_valid: u8,
    pub tx_first: u8,
    pub tx_last: u8,
    pub rx_ready: u8,
    pub msi_valid: u8,
    pub msi_vector: u8,
    pub reserved0: u16,
}

// The C layout: 8 DWs + be + 8 bytes of flags + 4 halfwords; 8 DWs + be + 6 flags + pad.
const _: () = assert!(std::mem::size_of::<CardInputs>() == 52);
const _: () = assert!(std::mem::size_of::<CardOutputs>() == 44);

type FnU32 = unsafe extern "C" fn() -> u32;
type FnInfo = unsafe extern "C" fn() -> *const c_char;
type FnNew = unsafe extern "C" fn() -> *mut c_void;
type FnFree = unsafe extern "C" fn(*mut c_void);
type FnReset = unsafe extern "C" fn(*mut c_void, u32);
type FnCycle = unsafe extern "C" fn(*mut c_void, *const CardInputs, *mut CardOutputs);
type FnCycles = unsafe extern "C" fn(*mut c_void) -> u64;

#[derive(Debug, thiserror::Error)]
pub enum CardError {
    #[error("card library {path} does not exist: build it with `make gateware`, or point --card / TLPX_CARD_LIB at a libtlpxcard.so")]
    Missing { path: PathBuf },
    #[error("cannot load card library {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("card library {path} lacks the symbol {symbol}: it is not a tlpx card library (tlpx_card.h)")]
    Symbol { path: PathBuf, symbol: String },
    #[error("card library {path} has ABI version {found}, this tlpx-sim speaks {ABI_VERSION}: rebuild the card (`make gateware`) and tlpx-sim from the same tree")]
    Abi { path: PathBuf, found: u32 },
    #[error("card library {path} reports a data width of {found} bits; supported are 64, 128 and 256")]
    DataWidth { path: PathBuf, found: u32 },
    #[error("tlpx_card_new of {path} returned NULL")]
    New { path: PathBuf },
}

/// The loaded library: its entry points, checked once.
pub struct CardLibrary {
    path: PathBuf,
    data_width: u32,
    build_info: String,
    new: FnNew,
    free: FnFree,
    reset: FnReset,
    cycle: FnCycle,
    cycles: FnCycles,
    // Keeps the code behind the fn pointers mapped; dropped last.
    _lib: libloading::Library,
}

impl CardLibrary {
    pub fn load(path: &Path) -> Result<CardLibrary, CardError> {
        if !path.exists() {
            return Err(CardError::Missing { path: path.to_owned() });
        }
        // SAFETY: loading a shared library runs its constructors; the card library is a
        // Verilated model whose constructors only set up static data.
        let lib =
            unsafe { libloading::Library::new(path) }.map_err(|e| CardError::Load { path: path.to_owned(), reason: e.to_string() })?;
        fn sym<T: Copy>(lib: &libloading::Library, path: &Path, name: &str) -> Result<T, CardError> {
            // SAFETY: the types above are the prototypes of tlpx_card.h.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|_| CardError::Symbol { path: path.to_owned(), symbol: name.to_owned() })
        }
        let abi: FnU32 = sym(&lib, path, "tlpx_card_abi_version")?;
        // SAFETY: no arguments, no preconditions.
        let found = unsafe { abi() };
        if found != ABI_VERSION {
            return Err(CardError::Abi { path: path.to_owned(), found });
        }
        let width: FnU32 = sym(&lib, path, "tlpx_card_data_width")?;
        // SAFETY: no arguments, no preconditions.
        let data_width = unsafe { width() };
        if !matches!(data_width, 64 | 128 | 256) {
            return Err(CardError::DataWidth { path: path.to_owned(), found: data_width });
        }
        let info: FnInfo = sym(&lib, path, "tlpx_card_build_info")?;
        // SAFETY: returns a NUL-terminated static string (or NULL, handled).
        let build_info = unsafe {
            let p = info();
            if p.is_null() {
                "{}".to_owned()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Ok(CardLibrary {
            path: path.to_owned(),
            data_width,
            build_info,
            new: sym(&lib, path, "tlpx_card_new")?,
            free: sym(&lib, path, "tlpx_card_free")?,
            reset: sym(&lib, path, "tlpx_card_reset")?,
            cycle: sym(&lib, path, "tlpx_card_cycle")?,
            cycles: sym(&lib, path, "tlpx_card_cycles")?,
            _lib: lib,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Datapath width in bits.
    pub fn data_width(&self) -> u32 {
        self.data_width
    }

    /// tlpx_card_build_info(): a JSON object.
    pub fn build_info(&self) -> &str {
        &self.build_info
    }

    /// A new card instance.
    pub fn instantiate(self: &Arc<Self>) -> Result<Card, CardError> {
        // SAFETY: no preconditions.
        let handle = unsafe { (self.new)() };
        if handle.is_null() {
            return Err(CardError::New { path: self.path.clone() });
        }
        Ok(Card { lib: Arc::clone(self), handle, cycle: self.cycle })
    }
}

/// One card instance. Not Send: the sim thread creates and owns it.
pub struct Card {
    lib: Arc<CardLibrary>,
    handle: *mut c_void,
    cycle: FnCycle,
}

impl Card {
    /// Holds reset for `cycles` cycles, then releases it.
    pub fn reset(&mut self, cycles: u32) {
        // SAFETY: handle is a live card of this library.
        unsafe { (self.lib.reset)(self.handle, cycles) }
    }

    /// One clock cycle: applies `inputs`, samples `outputs`, clock edge.
    #[inline]
    pub fn cycle(&mut self, inputs: &CardInputs, outputs: &mut CardOutputs) {
        // SAFETY: handle is live; both structs have the C layout of tlpx_card.h.
        unsafe { (self.cycle)(self.handle, inputs, outputs) }
    }

    /// Rising edges since the card was created.
    pub fn cycles(&self) -> u64 {
        // SAFETY: handle is live.
        unsafe { (self.lib.cycles)(self.handle) }
    }
}

impl Drop for Card {
    fn drop(&mut self) {
        // SAFETY: handle came from tlpx_card_new of this library and is freed once.
        unsafe { (self.lib.free)(self.handle) }
    }
}

/// The card library named by env TLPX_CARD_LIB, if set and not empty.
pub fn env_library() -> Option<PathBuf> {
    std::env::var_os("TLPX_CARD_LIB").filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// Where `make gateware` puts the card of `data_width`: `build/card/dw<N>/libtlpxcard.so`,
/// found by walking up from the executable's directory and then from the current directory.
/// Returns the first candidate that exists, else the path where it was expected.
pub fn built_library_path(data_width: u32) -> PathBuf {
    tlpx_sim_protocol::paths::find_built_file(Path::new(&format!("build/card/dw{data_width}/libtlpxcard.so")))
}

/// The default card library: env TLPX_CARD_LIB, else [`built_library_path`].
pub fn default_library_path(data_width: u32) -> PathBuf {
    env_library().unwrap_or_else(|| built_library_path(data_width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_says_make_gateware() {
        let e = CardLibrary::load(Path::new("/nonexistent/libtlpxcard.so")).err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("make gateware"), "{e}");
    }

    #[test]
    fn a_library_that_is_not_a_card_is_refused() {
        // libc is a real shared library without the tlpx_card_* symbols.
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists());
        if let Some(p) = libc {
            match CardLibrary::load(p) {
                Err(CardError::Symbol { symbol, .. }) => assert_eq!(symbol, "tlpx_card_abi_version"),
                Err(other) => panic!("unexpected error {other}"),
                Ok(_) => panic!("libc loaded as a card"),
            }
        }
    }
}

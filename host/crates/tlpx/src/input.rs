//! Reading an input file whole, never more than its format allows.
//!
//! Every file tlpx reads into memory (result documents, script sources, firmware images) has
//! a cap: what its format allows, or a stated generous size where the format has no bound.
//! [`read_capped`] reads at most cap + 1 bytes, so an endless input (/dev/zero, a pipe or
//! FIFO whose writer never stops) ends with an error naming the cap instead of taking every
//! byte of memory, and a regular file that is larger is refused by its size without being
//! read. A directory is refused as such. A FIFO is opened without waiting for a writer (a
//! FIFO nobody writes to reads as empty, where `open` used to wait for ever).
//!
//! An input read as a stream rather than whole (a spy trace: records are read one at a time,
//! memory stays bounded whatever its size) must be a regular file: [`regular_file`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Why [`read_capped`] returned no bytes.
#[derive(Debug)]
pub enum CappedReadError {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// A directory, not a file.
    Directory,
    /// A regular file of this many bytes, more than the cap.
    Larger { len: u64, cap: u64 },
    /// Not a regular file (a device, a pipe), and it did not end within the cap.
    Endless { cap: u64 },
}

impl fmt::Display for CappedReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CappedReadError::Io(e) => write!(f, "{e}"),
            CappedReadError::Directory => write!(f, "it is a directory"),
            CappedReadError::Larger { len, cap } => write!(f, "it is {len} bytes, larger than {}", size_text(*cap)),
            CappedReadError::Endless { cap } => write!(f, "it did not end within {} and was read no further", size_text(*cap)),
        }
    }
}

/// A size as "N bytes", with its binary unit when it is a whole number of KiB or MiB:
/// "1048576 bytes (1 MiB)".
pub fn size_text(bytes: u64) -> String {
    match bytes {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{n} bytes ({} MiB)", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{n} bytes ({} KiB)", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// Opens `path` for reading without waiting: `open` of a FIFO without a writer would block
/// until one came. The descriptor is made blocking again for the reads (a writer that is
/// there is waited for, as `cat` waits).
fn open_now(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// What a file that is not a regular one is, for messages: "a FIFO (named pipe)", "a
/// character device", "a symbolic link" (for metadata that does not follow links).
pub fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// `Ok` when `path` is a regular file (after symbolic links); otherwise an error saying what
/// it is, for an input read as a stream that must end (a trace: /dev/zero or a FIFO would be
/// read, or waited for, without end).
pub fn regular_file(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_file() {
        return Ok(());
    }
    Err(format!("it is {}, not a regular file: give a file", kind(&meta)))
}

/// Reads the file at `path` whole when it holds at most `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, CappedReadError> {
    let file = open_now(path).map_err(CappedReadError::Io)?;
    let meta = file.metadata().map_err(CappedReadError::Io)?;
    if meta.is_dir() {
        return Err(CappedReadError::Directory);
    }
    if meta.is_file() && meta.len() > cap {
        return Err(CappedReadError::Larger { len: meta.len(), cap });
    }
    // A regular file says its size (one allocation); a stream grows the buffer as it comes.
    let hint = if meta.is_file() { meta.len() + 1 } else { 1 << 16 };
    let mut bytes = Vec::with_capacity(hint.min(cap.saturating_add(1)) as usize);
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(CappedReadError::Io)?;
    if bytes.len() as u64 > cap {
        // a stream, or a regular file that grew since its size was read
        return Err(if meta.is_file() {
            CappedReadError::Larger { len: bytes.len() as u64, cap }
        } else {
            CappedReadError::Endless { cap }
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_within_the_cap_are_read_whole_and_larger_ones_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").expect("write");
        assert_eq!(read_capped(&path, 10).expect("10 of 10"), b"0123456789");
        assert_eq!(read_capped(&path, 100).expect("10 of 100"), b"0123456789");
        let e = read_capped(&path, 9).expect_err("10 > 9");
        assert!(matches!(e, CappedReadError::Larger { len: 10, cap: 9 }), "{e:?}");
        assert_eq!(e.to_string(), "it is 10 bytes, larger than 9 bytes");
        assert!(matches!(read_capped(dir.path(), 9), Err(CappedReadError::Directory)));
        assert!(matches!(read_capped(&dir.path().join("missing"), 9), Err(CappedReadError::Io(_))));
    }

    #[test]
    fn an_endless_device_stops_at_the_cap() {
        let e = read_capped(Path::new("/dev/zero"), 1 << 20).expect_err("endless");
        assert!(matches!(e, CappedReadError::Endless { cap: 1048576 }), "{e:?}");
        assert!(e.to_string().contains("1048576 bytes (1 MiB)"), "{e}");
        assert_eq!(read_capped(Path::new("/dev/null"), 4).expect("empty"), b"");
    }

    #[test]
    fn a_fifo_without_a_writer_reads_as_empty_at_once_and_is_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        assert_eq!(read_capped(&fifo, 16).expect("no writer: empty"), b"");
        let e = regular_file(&fifo).expect_err("a FIFO");
        assert!(e.contains("a FIFO") && e.contains("not a regular file"), "{e}");
        assert!(regular_file(Path::new("/dev/zero")).expect_err("a device").contains("character device"));
        assert!(regular_file(dir.path()).expect_err("a directory").contains("directory"));
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        assert!(regular_file(&file).is_ok());
    }

    #[test]
    fn sizes_are_written_with_their_unit() {
        assert_eq!(size_text(32544), "32544 bytes");
        assert_eq!(size_text(16384), "16384 bytes (16 KiB)");
        assert_eq!(size_text(64 << 20), "67108864 bytes (64 MiB)");
    }
}

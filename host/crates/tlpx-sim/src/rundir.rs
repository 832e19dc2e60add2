//! The runtime directory, trusted as ssh-agent and systemd trust theirs.
//!
//! A sim may run as root and its directory may be a well-known name in /tmp
//! (`/tmp/tlpx-<uid>`) that another user created first. So the directory is used only if it
//! is owned by the effective user and not writable by group or others: then nobody else can
//! plant or swap anything in it. It is opened once and every file is made through that
//! descriptor with `O_CREAT | O_EXCL | O_NOFOLLOW` (never through a symlink, never into an
//! existing file), and at exit only the files this run made are removed (same inode).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What a directory entry is (`fstatat` without following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Socket,
    Other,
}

impl EntryKind {
    fn of(mode: u32) -> EntryKind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => EntryKind::File,
            libc::S_IFDIR => EntryKind::Directory,
            libc::S_IFLNK => EntryKind::Symlink,
            libc::S_IFSOCK => EntryKind::Socket,
            _ => EntryKind::Other,
        }
    }

    /// "a regular file", "a directory", ... for messages.
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::File => "a regular file",
            EntryKind::Directory => "a directory",
            EntryKind::Symlink => "a symbolic link",
            EntryKind::Socket => "a socket",
            EntryKind::Other => "a device, FIFO or other special file",
        }
    }
}

/// One entry of the directory, not followed if it is a symlink.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub kind: EntryKind,
    pub uid: u32,
    pub dev: u64,
    pub ino: u64,
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn cname(name: &str) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("file name {name:?} holds a NUL byte")))
}

/// An open runtime directory that passed the owner and mode check.
pub struct RuntimeDir {
    path: PathBuf,
    fd: OwnedFd,
    dev: u64,
    ino: u64,
    /// The files this run made, name -> (dev, ino): the only ones it removes.
    ours: Mutex<HashMap<String, (u64, u64)>>,
}

impl std::fmt::Debug for RuntimeDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeDir").field("path", &self.path).finish_non_exhaustive()
    }
}

impl RuntimeDir {
    /// Opens `path`, creating it (and missing parents) with mode 0700 if it does not exist,
    /// and checks it: owned by the effective user, not writable by group or others. The
    /// error says why not, naming the path, its owner and mode, and what is accepted.
    pub fn open(path: &Path) -> Result<RuntimeDir, String> {
        let shown = path.display();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| format!("cannot create the runtime directory's parent {}: {e}", parent.display()))?;
        }
        let created = match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(format!("cannot create the runtime directory {shown}: {e}")),
        };
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("the runtime directory {shown} holds a NUL byte"))?;
        // SAFETY: a valid NUL-terminated path; the descriptor is owned by the OwnedFd below.
        let raw = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if raw < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOTDIR) => {
                    format!("the runtime directory {shown} exists and is not a directory: remove it or give another --socket")
                }
                _ => format!("cannot open the runtime directory {shown}: {e}"),
            });
        }
        // SAFETY: raw is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let dir = File::from(fd);
        if created {
            // DirBuilder's mode went through the umask; a new directory is exactly 0700.
            use std::os::unix::fs::PermissionsExt;
            dir.set_permissions(std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot set mode 0700 on the runtime directory {shown}: {e}"))?;
        }
        let m = dir.metadata().map_err(|e| format!("cannot stat the runtime directory {shown}: {e}"))?;
        let me = euid();
        if m.uid() != me || m.mode() & 0o022 != 0 {
            return Err(format!(
                "the runtime directory {shown} is owned by uid {} with mode {:04o}: tlpx-sim uses only a directory owned by uid {me} (its effective user) and not writable by group or others (e.g. mode 0700), so that nobody else can plant or swap its files; give another --socket, or if this directory is yours to change, remove it (tlpx-sim makes it anew, 0700) or fix it (chown {me}, chmod go-w)",
                m.uid(),
                m.mode() & 0o7777
            ));
        }
        Ok(RuntimeDir { path: path.to_owned(), dev: m.dev(), ino: m.ino(), fd: OwnedFd::from(dir), ours: Mutex::new(HashMap::new()) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages.
    pub fn show(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    /// Holds an exclusive lock on the directory until the guard drops, so two sims starting
    /// at once cannot both find a socket stale and take each other's files.
    pub fn lock(&self) -> std::io::Result<DirLock<'_>> {
        // SAFETY: flock on our own open descriptor.
        if unsafe { libc::flock(self.fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(DirLock(self))
    }

    /// `name` as it is in the directory (a symlink is not followed), or None.
    pub fn entry(&self, name: &str) -> std::io::Result<Option<Entry>> {
        let c = cname(name)?;
        // SAFETY: zeroed stat is a valid out value; c is NUL-terminated; our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
        }
        Ok(Some(Entry { kind: EntryKind::of(st.st_mode), uid: st.st_uid, dev: st.st_dev, ino: st.st_ino }))
    }

    /// Where the symlink `name` points, for messages.
    pub fn link_target(&self, name: &str) -> String {
        let Ok(c) = cname(name) else { return "?".into() };
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf is writable for its length; c is NUL-terminated; our descriptor.
        let n = unsafe { libc::readlinkat(self.fd.as_raw_fd(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(n) => Path::new(OsStr::from_bytes(&buf[..n])).display().to_string(),
            Err(_) => "?".into(),
        }
    }

    /// The first 4 KiB of the regular file `name` as text (not through a symlink), for
    /// messages.
    pub fn read_small(&self, name: &str) -> Option<String> {
        use std::io::Read;
        let c = cname(name).ok()?;
        // SAFETY: c is NUL-terminated; our descriptor; the new descriptor is owned by the File.
        let raw = unsafe {
            libc::openat(self.fd.as_raw_fd(), c.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        };
        if raw < 0 {
            return None;
        }
        // SAFETY: raw is a descriptor we just opened and own.
        let f = unsafe { File::from_raw_fd(raw) };
        let mut s = String::new();
        f.take(4096).read_to_string(&mut s).ok()?;
        Some(s)
    }

    /// Makes the new file `name` with `mode`: fails if anything (a symlink included) is
    /// already there, so it never writes through a link or into someone else's file.
    pub fn create(&self, name: &str, mode: u32) -> std::io::Result<File> {
        let c = cname(name)?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: c is NUL-terminated; our descriptor; the new descriptor is owned by the File.
        let raw = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: raw is a descriptor we just opened and own.
        let file = unsafe { File::from_raw_fd(raw) };
        // The umask may have taken bits away; the mode is what the caller asked for.
        // SAFETY: fchmod on the descriptor we own.
        if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let m = file.metadata()?;
        self.mark_ours(name, m.dev(), m.ino());
        Ok(file)
    }

    /// Replaces `name` atomically with `contents` (written to `name.tmp`, made as by
    /// [`create`](Self::create), then renamed over `name`): a reader never sees half a file.
    pub fn replace(&self, name: &str, contents: &[u8], mode: u32) -> std::io::Result<()> {
        let tmp = format!("{name}.tmp");
        let mut f = self.create(&tmp, mode)?;
        let written = f.write_all(contents);
        let (from, to) = (cname(&tmp)?, cname(name)?);
        // SAFETY: NUL-terminated names in our own directory.
        let r = written.and_then(|()| {
            if unsafe { libc::renameat(self.fd.as_raw_fd(), from.as_ptr(), self.fd.as_raw_fd(), to.as_ptr()) } == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
        let id = self.ours.lock().unwrap_or_else(|p| p.into_inner()).remove(&tmp);
        match r {
            Ok(()) => {
                if let Some((dev, ino)) = id {
                    self.mark_ours(name, dev, ino);
                }
                Ok(())
            }
            Err(e) => {
                let _ = self.unlink(&tmp);
                Err(e)
            }
        }
    }

    /// Records `name` as made by this run (for a socket, which `bind` makes).
    pub fn mark_ours(&self, name: &str, dev: u64, ino: u64) {
        self.ours.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned(), (dev, ino));
    }

    /// Removes the entry `name` itself (a symlink is removed, not its target).
    pub fn unlink(&self, name: &str) -> std::io::Result<()> {
        let c = cname(name)?;
        // SAFETY: NUL-terminated name in our own directory.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// True while `path` still names the directory that was checked (the same inode): no
    /// symlink on the way to it was swapped since.
    pub fn still_at_path(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Removes every file this run made that is still the one it made.
    pub fn remove_ours(&self) {
        let ours: Vec<(String, (u64, u64))> = self.ours.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for (name, (dev, ino)) in ours {
            if matches!(self.entry(&name), Ok(Some(e)) if e.dev == dev && e.ino == ino) {
                let _ = self.unlink(&name);
            }
        }
    }
}

impl Drop for RuntimeDir {
    /// A run that ends early (an error after some files were made) leaves nothing behind.
    fn drop(&mut self) {
        self.remove_ours();
    }
}

/// A file of the runtime directory that is rewritten whole now and then (the config dump).
#[derive(Debug, Clone)]
pub struct RewrittenFile {
    dir: std::sync::Arc<RuntimeDir>,
    name: String,
}

impl RewrittenFile {
    pub fn new(dir: std::sync::Arc<RuntimeDir>, name: &str) -> RewrittenFile {
        RewrittenFile { dir, name: name.to_owned() }
    }

    /// Replaces the file with `contents` (mode 0644), atomically.
    pub fn write(&self, contents: &[u8]) -> std::io::Result<()> {
        self.dir.replace(&self.name, contents, 0o644)
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }
}

/// The directory's lock; released when dropped.
pub struct DirLock<'a>(&'a RuntimeDir);

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        // SAFETY: flock on the descriptor the RuntimeDir keeps open.
        unsafe { libc::flock(self.0.fd.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_never_follows_or_reuses_and_only_our_files_are_removed() {
        let top = tempfile::tempdir().unwrap();
        let d = RuntimeDir::open(top.path()).unwrap();
        std::fs::write(top.path().join("target"), b"keep").unwrap();
        std::os::unix::fs::symlink(top.path().join("target"), top.path().join("link")).unwrap();
        assert!(d.create("link", 0o600).is_err(), "a symlink is not followed");
        assert!(d.create("target", 0o600).is_err(), "an existing file is not reused");
        assert_eq!(d.entry("link").unwrap().unwrap().kind, EntryKind::Symlink);
        assert_eq!(d.link_target("link"), top.path().join("target").display().to_string());
        let mut f = d.create("mine", 0o640).unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(std::fs::metadata(top.path().join("mine")).unwrap().mode() & 0o777, 0o640);
        d.replace("dump", b"one", 0o644).unwrap();
        d.replace("dump", b"two", 0o644).unwrap();
        assert_eq!(std::fs::read(top.path().join("dump")).unwrap(), b"two");
        assert!(!top.path().join("dump.tmp").exists());
        d.remove_ours();
        assert!(!top.path().join("mine").exists() && !top.path().join("dump").exists());
        assert_eq!(std::fs::read(top.path().join("target")).unwrap(), b"keep");
        assert!(top.path().join("link").symlink_metadata().is_ok());
    }

    #[test]
    fn a_file_replaced_by_someone_else_is_not_removed() {
        let top = tempfile::tempdir().unwrap();
        let d = RuntimeDir::open(top.path()).unwrap();
        // Kept open, so the new file cannot get the freed inode number.
        let _kept = d.create("f", 0o600).unwrap();
        std::fs::remove_file(top.path().join("f")).unwrap();
        std::fs::write(top.path().join("f"), b"theirs").unwrap();
        d.remove_ours();
        assert_eq!(std::fs::read(top.path().join("f")).unwrap(), b"theirs");
    }

    #[test]
    fn an_unsafe_directory_is_refused_with_owner_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o757)).unwrap();
        let e = RuntimeDir::open(top.path()).unwrap_err();
        assert!(e.contains("mode 0757") && e.contains(&format!("owned by uid {}", euid())), "{e}");
        let new = top.path().join("x").join("y");
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        RuntimeDir::open(&new).unwrap();
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o7777, 0o700);
    }
}

//! Checks every subcommand applies to its arguments the same way: whole numbers in a range
//! (negative ones included), lists without duplicates, and output paths that can be written
//! before anything is measured.
//!
//! Numeric options use [`whole`] as their clap value parser together with
//! `allow_negative_numbers = true`: without that, clap takes `--count -1` for an unknown flag
//! `-1` and says nothing about `--count`. Options whose text holds numbers (size lists,
//! durations) set `allow_hyphen_values = true` so that `--sizes -64` reaches their own parser,
//! whose message names the option.

use std::fmt::Display;
use std::fs::OpenOptions;
use std::path::Path;

use anyhow::{bail, Context};
use clap::ValueEnum;

/// The integer types of the command line's numeric options.
pub trait Whole: Copy + Display + Send + Sync + 'static {
    fn wide(self) -> i128;
    fn narrow(v: i128) -> Option<Self>;
}

macro_rules! whole {
    ($($t:ty),*) => {$(
        impl Whole for $t {
            fn wide(self) -> i128 {
                self as i128
            }
            fn narrow(v: i128) -> Option<Self> {
                <$t>::try_from(v).ok()
            }
        }
    )*};
}
whole!(u8, u16, u32, u64, usize, i32);

/// What [`whole`] accepts, as its messages say it. The upper bound is given even when it is
/// only the type's (`0..=4294967295`): it is a bound all the same.
pub fn accepted<T: Whole>(lo: T, hi: T) -> String {
    format!("a whole number in {lo}..={hi}")
}

/// Checks one whole number given as text against `lo..=hi`; the error says what is accepted
/// (clap puts the option's name and the value in front of it): `what`, or the range.
pub fn parse_whole<T: Whole>(text: &str, lo: T, hi: T, what: Option<&str>) -> Result<T, String> {
    let t = text.trim();
    let accepted = || what.map_or_else(|| accepted(lo, hi), str::to_string);
    // Wide enough for every option type, so that "-1" and "99999999999" are out of range
    // rather than "not a number".
    let Ok(v) = t.strip_prefix('+').unwrap_or(t).parse::<i128>() else {
        return Err(format!("{t:?} is not a whole number; accepted: {}", accepted()));
    };
    match T::narrow(v) {
        Some(n) if (lo.wide()..=hi.wide()).contains(&v) => Ok(n),
        _ => Err(format!("{v} is out of range; accepted: {}", accepted())),
    }
}

/// A clap value parser for a whole number in `lo..=hi`: see the module documentation.
pub fn whole<T: Whole>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |text| parse_whole(text, lo, hi, None)
}

/// [`whole`] for an option that takes only some numbers of `lo..=hi` (powers of two,
/// multiples of 4: the command checks those): `what` says which, range included.
pub fn whole_as<T: Whole>(lo: T, hi: T, what: &'static str) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |text| parse_whole(text, lo, hi, Some(what))
}

/// The name clap gives a value of a `ValueEnum` (what the user typed).
pub fn enum_name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value().map_or_else(|| "?".to_string(), |p| p.get_name().to_string())
}

/// Refuses a list that names an item twice: every item of a list is a run (or a thread, a
/// filter) of its own, and running one twice is never what was meant. `name` spells an item
/// as the user wrote it.
pub fn refuse_duplicates<T: PartialEq>(flag: &str, items: &[T], name: impl Fn(&T) -> String) -> Result<(), String> {
    for (i, item) in items.iter().enumerate() {
        if items[..i].contains(item) {
            return Err(format!("{flag}: {} is given twice; give each once", name(item)));
        }
    }
    Ok(())
}

/// [`refuse_duplicates`] for a list of `ValueEnum` values.
pub fn refuse_duplicate_values<T: ValueEnum + PartialEq>(flag: &str, items: &[T]) -> Result<(), String> {
    refuse_duplicates(flag, items, enum_name)
}

/// Checks that the file `path` (given with `flag`) can be written, before a measurement whose
/// result goes there: its folder is created (as writing the result would), and the file is
/// opened for writing without truncating it. A file that did not exist before is removed
/// again, so a run that fails later leaves nothing behind. Fails in well under a second,
/// naming the option and the path.
pub fn check_output_file(flag: &str, path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    if path.is_dir() {
        bail!("{flag} {shown}: that is a folder; give a file name");
    }
    refuse_non_regular(flag, path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("{flag} {shown}: cannot create the folder {}", parent.display()))?;
    }
    let existed = path.exists();
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("{flag} {shown}: cannot write this file"))?;
    if !existed {
        std::fs::remove_file(path).with_context(|| format!("{flag} {shown}: cannot remove the empty file made to check it"))?;
    }
    Ok(())
}

/// Refuses a `path` that exists and is not a regular file: a result is written into a file
/// beside it and renamed over it (so that a killed run never leaves half a document), which
/// would replace a symlink, a device node (as root, `/dev/null` or `/dev/full` itself), a FIFO
/// or a socket by a regular file. A new name or a regular file is accepted.
pub fn refuse_non_regular(flag: &str, path: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if meta.is_file() {
        return Ok(());
    }
    let kind = crate::input::kind(&meta);
    bail!(
        "{flag} {}: that is {kind}; tlpx writes a result by replacing the file (atomically), which would replace it: give a regular file or a new name (without {flag}, nothing is written)",
        path.display()
    )
}

/// Checks that files can be written into the folder `dir` (given with `flag`) before a
/// measurement whose results go there: it is created, a file is made in it and removed. A
/// folder that did not exist is removed again (the command creates it when it writes), so a
/// run that fails later leaves no empty `results/<time>` behind.
pub fn check_output_dir(flag: &str, dir: &Path) -> anyhow::Result<()> {
    let shown = dir.display();
    let existed = dir.is_dir();
    std::fs::create_dir_all(dir).with_context(|| format!("{flag} {shown}: cannot create this folder"))?;
    let probe = dir.join(format!(".tlpx-write-check-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| format!("{flag} {shown}: cannot write files into this folder"))?;
    std::fs::remove_file(&probe).with_context(|| format!("{flag} {shown}: cannot remove {}", probe.display()))?;
    if !existed {
        std::fs::remove_dir(dir).with_context(|| format!("{flag} {shown}: cannot remove the folder made to check it"))?;
    }
    Ok(())
}

/// Whether `a` and `b` name the same file however they are spelt (`./x`, a hard or symbolic
/// link): the same inode on the same device when both exist, else the same absolute path.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => match (std::path::absolute(a), std::path::absolute(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        },
    }
}

/// Refuses an output (`out_flag` `out`) that is the file `other` (`other_flag`): an input it
/// would destroy, or another output that would overwrite it.
pub fn refuse_same_file(out_flag: &str, out: &Path, other_flag: &str, other: &Path) -> anyhow::Result<()> {
    if same_file(out, other) {
        bail!(
            "{out_flag} {}: that is the file of {other_flag} ({}); writing one would destroy the other: give {out_flag} another name",
            out.display(),
            other.display()
        );
    }
    Ok(())
}

/// [`check_output_file`] for an optional path.
pub fn check_optional_output(flag: &str, path: Option<&Path>) -> anyhow::Result<()> {
    path.map_or(Ok(()), |p| check_output_file(flag, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_name_the_accepted_range() {
        assert_eq!(parse_whole::<u32>("64", 1, 64, None), Ok(64));
        assert_eq!(parse_whole::<u32>("+7", 1, 64, None), Ok(7));
        assert_eq!(parse_whole::<u64>(" 0 ", 0, u64::MAX, None), Ok(0));
        assert_eq!(parse_whole::<i32>("-1", -5, 5, None), Ok(-1));
        let e = parse_whole::<u32>("-1", 1, 64, None).expect_err("negative");
        assert!(e.contains("-1 is out of range") && e.contains("1..=64"), "{e}");
        let e = parse_whole::<u32>("65", 1, 64, None).expect_err("too large");
        assert!(e.contains("65") && e.contains("1..=64"), "{e}");
        let e = parse_whole::<u32>("-3", 0, u32::MAX, None).expect_err("negative");
        assert!(e.contains("0..=4294967295"), "{e}");
        let e = parse_whole::<u64>("99999999999999999999999", 0, u64::MAX, None).expect_err("above u64");
        assert!(e.contains("out of range"), "{e}");
        let e = parse_whole::<u8>("1.5", 0, 255, None).expect_err("fraction");
        assert!(e.contains("\"1.5\" is not a whole number") && e.contains("0..=255"), "{e}");
        let e = parse_whole::<u32>("-64", 64, 128, Some("64 or 128 bytes")).expect_err("negative");
        assert_eq!(e, "-64 is out of range; accepted: 64 or 128 bytes");
    }

    #[test]
    fn duplicates_are_named() {
        assert_eq!(refuse_duplicates("--x", &[1, 2, 3], |v| v.to_string()), Ok(()));
        let e = refuse_duplicates("--sizes", &[64, 128, 64], |v| v.to_string()).expect_err("duplicate");
        assert_eq!(e, "--sizes: 64 is given twice; give each once");
    }

    #[test]
    fn output_checks_create_folders_and_leave_no_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("a/b/out.json");
        check_output_file("--output", &file).expect("writable");
        assert!(dir.path().join("a/b").is_dir() && !file.exists());
        // An existing file is neither truncated nor removed.
        std::fs::write(&file, "keep").expect("write");
        check_output_file("--output", &file).expect("writable");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep");
        // A folder where a file should be, and a file where a folder should be.
        let e = check_output_file("--output", dir.path()).expect_err("a folder");
        assert!(e.to_string().contains("--output") && e.to_string().contains("folder"), "{e}");
        let e = format!("{:#}", check_output_file("--svg", &file.join("x.svg")).expect_err("parent is a file"));
        assert!(e.starts_with("--svg ") && e.contains("cannot create the folder"), "{e}");
        let e = format!("{:#}", check_output_dir("--out-dir", &file.join("d")).expect_err("parent is a file"));
        assert!(e.starts_with("--out-dir ") && e.contains("cannot create this folder"), "{e}");
        check_output_dir("--out-dir", &dir.path().join("figures")).expect("a new folder");
        assert!(!dir.path().join("figures").exists(), "a folder made for the check is removed");
        std::fs::create_dir(dir.path().join("kept")).expect("mkdir");
        check_output_dir("--out-dir", &dir.path().join("kept")).expect("an existing folder");
        // Not a regular file: refused, and left as it was.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        let e = format!("{:#}", check_output_file("--output", &link).expect_err("a symlink"));
        assert!(e.contains("symbolic link") && e.contains("link.json"), "{e}");
        assert!(std::fs::symlink_metadata(&link).expect("still there").file_type().is_symlink());
        let e = format!("{:#}", check_output_file("--output", Path::new("/dev/null")).expect_err("a device"));
        assert!(e.contains("/dev/null: that is a character device"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path().join("kept")).expect("dir").count(), 0, "the probe is removed, the folder kept");
    }
}

//! Binding a PCI function to vfio-pci and back, and what sysfs says about it.
//!
//! - [`bind`]: remembers the current driver (in a state file under /run/tlpx/vfio), writes
//!   `driver_override` = vfio-pci, unbinds the function from its driver and asks the kernel
//!   to probe it again (`drivers_probe`), which now only vfio-pci may take. Loads the vfio-pci
//!   module with `modprobe` first when /sys/bus/pci/drivers/vfio-pci is missing.
//! - [`unbind`]: clears `driver_override`, unbinds from vfio-pci and gives the function back
//!   to the driver it had before (or lets the kernel probe).
//! - [`status`]: the driver, IOMMU group, the group's other members and their drivers, and
//!   whether the IOMMU is on at all.
//!
//! Every function takes a [`Sysfs`] so that the parsing can be tested on a fake tree; the
//! real one is [`Sysfs::system`].

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::DeviceError;

pub const VFIO_PCI: &str = "vfio-pci";

/// Where sysfs is, and where bind remembers previous drivers.
#[derive(Debug, Clone)]
pub struct Sysfs {
    pub root: PathBuf,
    pub state_dir: PathBuf,
}

impl Sysfs {
    /// This machine: /sys, and /run/tlpx/vfio for the previous drivers.
    pub fn system() -> Sysfs {
        Sysfs { root: PathBuf::from("/sys"), state_dir: PathBuf::from("/run/tlpx/vfio") }
    }

    /// A tree elsewhere (tests).
    pub fn at(root: impl Into<PathBuf>, state_dir: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into(), state_dir: state_dir.into() }
    }

    pub fn device_dir(&self, addr: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr)
    }

    pub fn driver_dir(&self, driver: &str) -> PathBuf {
        self.root.join("bus/pci/drivers").join(driver)
    }

    fn iommu_groups_dir(&self) -> PathBuf {
        self.root.join("kernel/iommu_groups")
    }

    /// True when the kernel has any IOMMU group: an IOMMU is on.
    pub fn iommu_on(&self) -> bool {
        std::fs::read_dir(self.iommu_groups_dir()).is_ok_and(|mut d| d.next().is_some())
    }

    /// The driver bound to `addr`, if any.
    pub fn driver_of(&self, addr: &str) -> Option<String> {
        link_name(&self.device_dir(addr).join("driver"))
    }

    /// The IOMMU group of `addr`, if it has one.
    pub fn iommu_group_of(&self, addr: &str) -> Option<u32> {
        link_name(&self.device_dir(addr).join("iommu_group")).and_then(|n| n.parse().ok())
    }

    /// The members of IOMMU group `group` with their drivers, sorted by address.
    pub fn group_members(&self, group: u32) -> Vec<GroupMember> {
        let dir = self.iommu_groups_dir().join(group.to_string()).join("devices");
        let mut members: Vec<GroupMember> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| {
                        let address = e.file_name().to_string_lossy().into_owned();
                        let driver = self.driver_of(&address);
                        let bridge = self.is_bridge(&address);
                        GroupMember { address, driver, bridge }
                    })
                    .collect()
            })
            .unwrap_or_default();
        members.sort_by(|a, b| a.address.cmp(&b.address));
        members
    }

    fn is_bridge(&self, addr: &str) -> bool {
        // Class 0x06xxxx with a non-zero subclass other than "other": PCI-to-PCI and host
        // bridges; vfio allows bridges in a group whatever their driver (pcieport).
        read_trimmed(&self.device_dir(addr).join("class"))
            .and_then(|c| u32::from_str_radix(c.trim_start_matches("0x"), 16).ok())
            .is_some_and(|c| c >> 8 == 0x0604 || c >> 8 == 0x0609)
    }

    fn state_file(&self, addr: &str) -> PathBuf {
        self.state_dir.join(format!("{addr}.previous-driver"))
    }

    /// The driver `bind` found on `addr` ("" when it had none), if bind recorded one.
    pub fn previous_driver(&self, addr: &str) -> Option<String> {
        read_trimmed(&self.state_file(addr))
    }
}

/// One member of an IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupMember {
    pub address: String,
    pub driver: Option<String>,
    /// A PCI bridge: vfio accepts it in a group whatever its driver.
    pub bridge: bool,
}

impl GroupMember {
    /// True when this member keeps the group from being viable for vfio: it is bound to a
    /// host driver (anything but vfio-pci or pci-stub) and is not a bridge.
    pub fn blocks_vfio(&self) -> bool {
        !self.bridge && self.driver.as_deref().is_some_and(|d| d != VFIO_PCI && d != "pci-stub")
    }
}

/// What sysfs says about one PCI function.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BindStatus {
    pub address: String,
    /// vendor:device, e.g. "1234:11e8".
    pub id: Option<String>,
    pub driver: Option<String>,
    pub driver_override: Option<String>,
    /// Any IOMMU group exists on this machine.
    pub iommu_on: bool,
    pub iommu_group: Option<u32>,
    /// All members of the group, this function included.
    pub group_members: Vec<GroupMember>,
    /// /sys/bus/pci/drivers/vfio-pci exists.
    pub vfio_pci_loaded: bool,
    /// The driver `tlpx vfio bind` found (and `unbind` restores); "" = none.
    pub previous_driver: Option<String>,
}

impl BindStatus {
    /// Members other than this function that keep the group from being viable.
    pub fn blocking_members(&self) -> Vec<&GroupMember> {
        self.group_members.iter().filter(|m| m.address != self.address && m.blocks_vfio()).collect()
    }

    /// Ready for `VfioDevice::open`: bound to vfio-pci in a viable group.
    pub fn ready(&self) -> bool {
        self.driver.as_deref() == Some(VFIO_PCI) && self.iommu_group.is_some() && self.blocking_members().is_empty()
    }
}

/// Turns "03:00.0" into "0000:03:00.0"; refuses anything that is not a PCI address.
pub fn normalize_address(addr: &str) -> Result<String, DeviceError> {
    let (d, b, dev, f) = crate::pci::parse_address(addr)?;
    Ok(format!("{d:04x}:{b:02x}:{dev:02x}.{f:x}"))
}

/// The message for a function without an IOMMU group.
pub fn iommu_off_message(addr: &str, iommu_on: bool) -> String {
    if iommu_on {
        format!(
            "{addr} has no IOMMU group although the IOMMU is on (other devices have groups): the IOMMU does not \
             cover this function, so vfio cannot drive it safely. tlpx does not use vfio's no-IOMMU mode, which \
             would give the device unrestricted DMA to all memory"
        )
    } else {
        format!(
            "{addr} has no IOMMU group: the IOMMU is off on this machine (/sys/kernel/iommu_groups is empty). \
             Enable VT-d / AMD-Vi in the firmware and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD) on \
             the kernel command line. tlpx does not use vfio's no-IOMMU mode (enable_unsafe_noiommu_mode), which \
             would give the device unrestricted DMA to all memory"
        )
    }
}

/// The message for a function that does not exist.
pub fn no_device_message(sysfs: &Sysfs, addr: &str) -> String {
    format!(
        "no PCI function {addr} (nothing at {}); `tlpx list` or `lspci -D` shows the functions of this machine",
        sysfs.device_dir(addr).display()
    )
}

/// Status of `addr` (which must exist).
pub fn status(sysfs: &Sysfs, addr: &str) -> Result<BindStatus, DeviceError> {
    let addr = normalize_address(addr)?;
    let dir = sysfs.device_dir(&addr);
    if !dir.exists() {
        return Err(DeviceError::NoSuchDevice(no_device_message(sysfs, &addr)));
    }
    let id = match (read_trimmed(&dir.join("vendor")), read_trimmed(&dir.join("device"))) {
        (Some(v), Some(d)) => Some(format!("{}:{}", v.trim_start_matches("0x"), d.trim_start_matches("0x"))),
        _ => None,
    };
    let iommu_group = sysfs.iommu_group_of(&addr);
    Ok(BindStatus {
        id,
        driver: sysfs.driver_of(&addr),
        driver_override: read_trimmed(&dir.join("driver_override")).filter(|s| !s.is_empty() && s != "(null)"),
        iommu_on: sysfs.iommu_on(),
        group_members: iommu_group.map(|g| sysfs.group_members(g)).unwrap_or_default(),
        iommu_group,
        vfio_pci_loaded: sysfs.driver_dir(VFIO_PCI).exists(),
        previous_driver: sysfs.previous_driver(&addr),
        address: addr,
    })
}

/// What `bind` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BindOutcome {
    pub address: String,
    /// The driver it had before (None: no driver).
    pub previous_driver: Option<String>,
    /// It was bound to vfio-pci already; nothing was changed.
    pub already_bound: bool,
    /// vfio-pci was loaded with modprobe.
    pub loaded_module: bool,
    pub status: BindStatus,
}

/// Binds `addr` to vfio-pci.
pub fn bind(sysfs: &Sysfs, addr: &str) -> Result<BindOutcome, DeviceError> {
    let before = status(sysfs, addr)?;
    let addr = before.address.clone();
    if before.iommu_group.is_none() {
        return Err(DeviceError::Backend(iommu_off_message(&addr, before.iommu_on)));
    }
    if before.driver.as_deref() == Some(VFIO_PCI) {
        return Ok(BindOutcome {
            previous_driver: before.previous_driver.clone().filter(|d| !d.is_empty()),
            already_bound: true,
            loaded_module: false,
            address: addr,
            status: before,
        });
    }
    let mut loaded_module = false;
    if !before.vfio_pci_loaded {
        modprobe(VFIO_PCI)?;
        loaded_module = true;
        if !sysfs.driver_dir(VFIO_PCI).exists() {
            return Err(DeviceError::Backend(format!(
                "`modprobe vfio-pci` succeeded but {} does not exist: is this kernel built with CONFIG_VFIO_PCI?",
                sysfs.driver_dir(VFIO_PCI).display()
            )));
        }
    }
    let dir = sysfs.device_dir(&addr);
    write_sysfs(&dir.join("driver_override"), VFIO_PCI, &addr, "bind")?;
    // Remember the previous driver only once the first write proved we may change things.
    // A retry after a failed bind finds the function without a driver: the record of the
    // first attempt (its real driver) is kept, not replaced by "none".
    let previous = match (&before.driver, &before.previous_driver) {
        (None, Some(recorded)) if !recorded.is_empty() => Some(recorded.clone()),
        _ => before.driver.clone(),
    };
    let steps = (|| {
        if before.driver.is_some() || before.previous_driver.as_deref().is_none_or(str::is_empty) {
            remember_previous(sysfs, &addr, previous.as_deref().unwrap_or(""))?;
        }
        if let Some(driver) = &before.driver {
            write_sysfs(&sysfs.driver_dir(driver).join("unbind"), &addr, &addr, "bind")?;
        }
        write_sysfs(&sysfs.root.join("bus/pci/drivers_probe"), &addr, &addr, "bind")
    })();
    if let Err(e) = steps {
        // Leave no driver_override behind: a later reprobe would hand the function to vfio-pci.
        let _ = write_sysfs(&dir.join("driver_override"), "\n", &addr, "bind");
        return Err(e);
    }
    let after = status(sysfs, &addr)?;
    if after.driver.as_deref() != Some(VFIO_PCI) {
        return Err(DeviceError::Backend(format!(
            "asked the kernel to bind {addr} to vfio-pci, but it is now bound to {}: see `dmesg` for vfio-pci's \
             reason (`tlpx vfio unbind {addr}` gives it back to {})",
            after.driver.as_deref().unwrap_or("no driver"),
            previous.as_deref().unwrap_or("no driver")
        )));
    }
    Ok(BindOutcome { address: addr, previous_driver: previous, already_bound: false, loaded_module, status: after })
}

/// What `unbind` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnbindOutcome {
    pub address: String,
    /// It was not bound to vfio-pci; nothing was changed but a stale driver_override.
    pub was_not_bound: bool,
    /// The driver bind had recorded (None: none recorded, the kernel probed).
    pub restored_driver: Option<String>,
    pub status: BindStatus,
}

/// Gives `addr` back from vfio-pci to its previous driver (or lets the kernel probe).
pub fn unbind(sysfs: &Sysfs, addr: &str) -> Result<UnbindOutcome, DeviceError> {
    let before = status(sysfs, addr)?;
    let addr = before.address.clone();
    let dir = sysfs.device_dir(&addr);
    if before.driver.as_deref() != Some(VFIO_PCI) {
        if before.driver_override.as_deref() == Some(VFIO_PCI) {
            write_sysfs(&dir.join("driver_override"), "\n", &addr, "unbind")?;
        }
        let status = status(sysfs, &addr)?;
        return Ok(UnbindOutcome { address: addr, was_not_bound: true, restored_driver: None, status });
    }
    write_sysfs(&dir.join("driver_override"), "\n", &addr, "unbind")?;
    write_sysfs(&sysfs.driver_dir(VFIO_PCI).join("unbind"), &addr, &addr, "unbind")?;
    let previous = before.previous_driver.clone();
    match previous.as_deref() {
        // It had no driver before bind: leave it without one.
        Some("") => {}
        Some(driver) if sysfs.driver_dir(driver).exists() => {
            if write_sysfs(&sysfs.driver_dir(driver).join("bind"), &addr, &addr, "unbind").is_err() {
                write_sysfs(&sysfs.root.join("bus/pci/drivers_probe"), &addr, &addr, "unbind")?;
            }
        }
        _ => write_sysfs(&sysfs.root.join("bus/pci/drivers_probe"), &addr, &addr, "unbind")?,
    }
    let _ = std::fs::remove_file(sysfs.state_file(&addr));
    let status = status(sysfs, &addr)?;
    Ok(UnbindOutcome { address: addr, was_not_bound: false, restored_driver: previous.filter(|d| !d.is_empty()), status })
}

fn remember_previous(sysfs: &Sysfs, addr: &str, driver: &str) -> Result<(), DeviceError> {
    let io = |what: &str, e: std::io::Error| DeviceError::Io {
        context: format!("cannot record {addr}'s previous driver in {}: {what}", sysfs.state_dir.display()),
        source: e,
    };
    std::fs::create_dir_all(&sysfs.state_dir).map_err(|e| io("creating the directory", e))?;
    std::fs::write(sysfs.state_file(addr), format!("{driver}\n")).map_err(|e| io("writing", e))
}

/// Writes `value` to a sysfs attribute, with a message that names the file and the fix.
fn write_sysfs(path: &Path, value: &str, addr: &str, verb: &str) -> Result<(), DeviceError> {
    // Without O_CREAT: on sysfs a missing attribute opened with O_CREAT fails with EACCES,
    // which would read as "needs root"; without it, it is ENOENT.
    let written = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, value.as_bytes()));
    written.map_err(|e| match e.kind() {
        ErrorKind::PermissionDenied => DeviceError::Backend(format!(
            "permission denied writing {:?} to {}: binding drivers needs root (run `sudo tlpx vfio {verb} {addr}`)",
            value.trim(),
            path.display()
        )),
        ErrorKind::NotFound => DeviceError::Backend(format!(
            "{} does not exist (writing {:?}): the kernel has no such sysfs attribute here",
            path.display(),
            value.trim()
        )),
        _ => DeviceError::Io { context: format!("writing {:?} to {}", value.trim(), path.display()), source: e },
    })
}

fn modprobe(module: &str) -> Result<(), DeviceError> {
    let out = std::process::Command::new("modprobe")
        .arg(module)
        .output()
        .map_err(|e| DeviceError::Io { context: format!("running `modprobe {module}` (is kmod installed and in PATH?)"), source: e })?;
    if !out.status.success() {
        return Err(DeviceError::Backend(format!(
            "`modprobe {module}` failed ({}): {}; loading modules needs root",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path).ok().and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake sysfs: functions with drivers and IOMMU groups as the kernel lays them out
    /// (device dirs hold `driver` and `iommu_group` symlinks; groups list their devices).
    struct Fake {
        dir: tempfile::TempDir,
    }

    impl Fake {
        fn new(iommu: bool) -> Fake {
            let dir = tempfile::tempdir().unwrap();
            for d in ["sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/kernel/iommu_groups", "run"] {
                std::fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            let f = Fake { dir };
            if iommu {
                std::fs::create_dir_all(f.sys().join("kernel/iommu_groups/0/devices")).unwrap();
            }
            f
        }
        fn sys(&self) -> PathBuf {
            self.dir.path().join("sys")
        }
        fn sysfs(&self) -> Sysfs {
            Sysfs::at(self.sys(), self.dir.path().join("run"))
        }
        fn device(&self, addr: &str, class: &str, driver: Option<&str>, group: Option<u32>) {
            let real = self.sys().join("devices/pci0000:00").join(addr);
            std::fs::create_dir_all(&real).unwrap();
            std::fs::write(real.join("vendor"), "0x1234\n").unwrap();
            std::fs::write(real.join("device"), "0x11e8\n").unwrap();
            std::fs::write(real.join("class"), format!("{class}\n")).unwrap();
            std::fs::write(real.join("driver_override"), "(null)\n").unwrap();
            symlink(&real, self.sys().join("bus/pci/devices").join(addr)).unwrap();
            if let Some(d) = driver {
                let ddir = self.sys().join("bus/pci/drivers").join(d);
                std::fs::create_dir_all(&ddir).unwrap();
                symlink(&ddir, real.join("driver")).unwrap();
            }
            if let Some(g) = group {
                let gdir = self.sys().join("kernel/iommu_groups").join(g.to_string());
                std::fs::create_dir_all(gdir.join("devices")).unwrap();
                symlink(&gdir, real.join("iommu_group")).unwrap();
                symlink(&real, gdir.join("devices").join(addr)).unwrap();
            }
        }
    }

    #[test]
    fn status_reads_driver_group_and_members() {
        let f = Fake::new(true);
        f.device("0000:03:00.0", "0x118000", Some("vfio-pci"), Some(7));
        f.device("0000:03:00.1", "0x020000", Some("e1000e"), Some(7));
        f.device("0000:00:1c.0", "0x060400", Some("pcieport"), Some(7));
        let s = status(&f.sysfs(), "03:00.0").unwrap();
        assert_eq!(s.address, "0000:03:00.0");
        assert_eq!(s.id.as_deref(), Some("1234:11e8"));
        assert_eq!(s.driver.as_deref(), Some("vfio-pci"));
        assert_eq!(s.driver_override, None);
        assert!(s.iommu_on);
        assert_eq!(s.iommu_group, Some(7));
        let addrs: Vec<&str> = s.group_members.iter().map(|m| m.address.as_str()).collect();
        assert_eq!(addrs, ["0000:00:1c.0", "0000:03:00.0", "0000:03:00.1"]);
        assert!(s.group_members[0].bridge);
        // The bridge is allowed; the NIC function bound to e1000e blocks the group.
        let blocking: Vec<&str> = s.blocking_members().iter().map(|m| m.address.as_str()).collect();
        assert_eq!(blocking, ["0000:03:00.1"]);
        assert!(!s.ready());
        assert!(!s.vfio_pci_loaded || f.sysfs().driver_dir("vfio-pci").exists());
    }

    #[test]
    fn ready_when_alone_and_bound() {
        let f = Fake::new(true);
        f.device("0000:00:05.0", "0x00ff00", Some("vfio-pci"), Some(3));
        let s = status(&f.sysfs(), "0000:00:05.0").unwrap();
        assert!(s.ready());
        assert!(s.vfio_pci_loaded);
    }

    #[test]
    fn no_such_device_and_bad_address() {
        let f = Fake::new(true);
        let err = status(&f.sysfs(), "0000:09:00.0").unwrap_err().to_string();
        assert!(err.contains("no PCI function 0000:09:00.0"), "{err}");
        assert!(err.contains("tlpx list"), "{err}");
        let err = bind(&f.sysfs(), "nonsense").unwrap_err().to_string();
        assert!(err.contains("\"nonsense\""), "{err}");
        assert!(err.contains("DOMAIN:BUS:DEVICE.FUNCTION"), "{err}");
    }

    #[test]
    fn bind_refuses_without_iommu() {
        let f = Fake::new(false);
        f.device("0000:00:02.0", "0x010000", Some("virtio-pci"), None);
        let err = bind(&f.sysfs(), "0000:00:02.0").unwrap_err().to_string();
        assert!(err.contains("the IOMMU is off"), "{err}");
        assert!(err.contains("intel_iommu=on"), "{err}");
        assert!(err.contains("amd_iommu=on"), "{err}");
        assert!(err.contains("no-IOMMU mode"), "{err}");
        // Nothing was written.
        assert!(f.sysfs().previous_driver("0000:00:02.0").is_none());
    }

    #[test]
    fn bind_when_already_bound_changes_nothing() {
        let f = Fake::new(true);
        f.device("0000:00:05.0", "0x00ff00", Some("vfio-pci"), Some(3));
        let out = bind(&f.sysfs(), "00:05.0").unwrap();
        assert!(out.already_bound);
        assert!(!out.loaded_module);
    }

    #[test]
    fn unbind_of_an_unbound_device_clears_a_stale_override() {
        let f = Fake::new(true);
        f.device("0000:00:05.0", "0x00ff00", None, Some(3));
        let attr = f.sys().join("bus/pci/devices/0000:00:05.0/driver_override");
        std::fs::write(&attr, "vfio-pci\n").unwrap();
        let out = unbind(&f.sysfs(), "0000:00:05.0").unwrap();
        assert!(out.was_not_bound);
        assert_eq!(std::fs::read_to_string(&attr).unwrap(), "\n");
    }

    /// The real sysfs of this machine: parsing must not fail on it, whatever it holds.
    #[test]
    fn real_sysfs_status_of_a_missing_function() {
        let err = status(&Sysfs::system(), "0000:ff:1f.7").unwrap_err().to_string();
        assert!(err.contains("no PCI function 0000:ff:1f.7"), "{err}");
    }
}

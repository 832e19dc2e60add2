//! The vfio bind helpers on this machine's real sysfs (through the public API): whatever
//! the machine, status must agree with what sysfs holds, and bind must refuse a function
//! without IOMMU group with the IOMMU-off message. (The real bind/unbind and the backend run
//! in a QEMU guest: scripts/qemu_vfio_test.sh.)

#![allow(clippy::unwrap_used)]

use tlpx_device::backends::vfio::bind::{self, Sysfs};

fn functions() -> Vec<String> {
    let mut all: Vec<String> =
        std::fs::read_dir("/sys/bus/pci/devices").unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    all.sort();
    all
}

#[test]
fn status_agrees_with_sysfs_for_every_function() {
    let sysfs = Sysfs::system();
    let all = functions();
    assert!(!all.is_empty());
    for addr in &all {
        let s = bind::status(&sysfs, addr).unwrap();
        assert_eq!(&s.address, addr);
        let dir = sysfs.device_dir(addr);
        let vendor = std::fs::read_to_string(dir.join("vendor")).unwrap();
        assert!(s.id.as_deref().unwrap().starts_with(vendor.trim().trim_start_matches("0x")), "{s:?}");
        let driver = std::fs::read_link(dir.join("driver")).ok().map(|p| p.file_name().unwrap().to_string_lossy().into_owned());
        assert_eq!(s.driver, driver);
        assert_eq!(s.iommu_group.is_some(), dir.join("iommu_group").exists());
        if let Some(g) = s.iommu_group {
            assert!(s.group_members.iter().any(|m| &m.address == addr), "group {g} lists its own member");
        }
    }
}

#[test]
fn bind_without_iommu_group_is_refused_with_the_fix() {
    let sysfs = Sysfs::system();
    let Some(addr) = functions().into_iter().find(|a| sysfs.iommu_group_of(a).is_none()) else {
        // Every function has a group: the IOMMU is on, and the refusal cannot happen here.
        assert!(sysfs.iommu_on());
        return;
    };
    let before = sysfs.driver_of(&addr);
    let err = bind::bind(&sysfs, &addr).unwrap_err().to_string();
    assert!(err.contains(&format!("{addr} has no IOMMU group")), "{err}");
    assert!(err.contains("intel_iommu=on"), "{err}");
    // Nothing changed.
    assert_eq!(sysfs.driver_of(&addr), before);
}

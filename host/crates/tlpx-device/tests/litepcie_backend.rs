//! The litepcie backend without a card: node lookup against fake /dev and /sys trees, the
//! errors a missing driver gives, and what the backend refuses (DMA with bus addresses,
//! interrupts the driver does not report, narrow BAR accesses).

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use tlpx_device::backends::litepcie::{LitePcieDevice, SysfsLayout};
use tlpx_device::{Device, DeviceError, Width};

const ADDR: &str = "0000:03:00.0";

/// /dev and /sys with `bound` functions bound to litepcie and nodes litepcie0..nodes-1.
fn fake_tree(root: &Path, bound: &[&str], nodes: u32) -> SysfsLayout {
    let dev = root.join("dev");
    let sys = root.join("sys");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::create_dir_all(sys.join("bus/pci/drivers/litepcie")).unwrap();
    std::fs::create_dir_all(sys.join("bus/pci/drivers/vfio-pci")).unwrap();
    std::fs::create_dir_all(sys.join("class/litepcie")).unwrap();
    for addr in bound {
        let f = sys.join("bus/pci/devices").join(addr);
        std::fs::create_dir_all(&f).unwrap();
        symlink("../../../../bus/pci/drivers/litepcie", f.join("driver")).unwrap();
        symlink(format!("../../devices/{addr}"), sys.join("bus/pci/drivers/litepcie").join(addr)).unwrap();
        let mut resource = String::from("0x00000000fe000000 0x00000000fe0fffff 0x0000000000040200\n");
        resource += &"0x0000000000000000 0x0000000000000000 0x0000000000000000\n".repeat(6);
        std::fs::write(f.join("resource"), resource).unwrap();
        let config: Vec<u8> = (0..=255u8).collect();
        std::fs::write(f.join("config"), config).unwrap();
    }
    for i in 0..nodes {
        std::fs::write(dev.join(format!("litepcie{i}")), b"").unwrap();
        std::fs::create_dir_all(sys.join("class/litepcie").join(format!("litepcie{i}"))).unwrap();
    }
    SysfsLayout { dev, sys }
}

fn err(r: Result<impl std::fmt::Debug, DeviceError>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn a_missing_node_says_the_driver_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[], 0);
    let node = layout.dev.join("litepcie0");
    // Not loaded: no PCI driver of that name either.
    let _ = std::fs::remove_dir_all(layout.sys.join("bus/pci/drivers/litepcie"));
    let e = err(LitePcieDevice::open_in(layout.clone(), &node, None));
    let expected = format!("no {}/litepcie*: the LitePCIe driver is not loaded; see docs/litepcie-driver.md", layout.dev.display());
    assert!(e.contains(&expected), "{e}");
    assert!(e.contains(&node.display().to_string()), "{e}");
    // Loaded (its PCI driver registered) but bound to nothing: the fix is new_id, not insmod.
    std::fs::create_dir_all(layout.sys.join("bus/pci/drivers/litepcie")).unwrap();
    let e = err(LitePcieDevice::open_in(layout.clone(), &node, None));
    assert!(e.contains("the LitePCIe driver is loaded but drives no card") && e.contains("new_id"), "{e}");
}

#[test]
fn a_missing_node_names_the_nodes_there_are() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[ADDR], 2);
    let e = err(LitePcieDevice::open_in(layout.clone(), &layout.dev.join("litepcie7"), None));
    assert!(e.contains("litepcie7 does not exist"), "{e}");
    assert!(e.contains("litepcie0") && e.contains("litepcie1"), "{e}");
}

#[test]
fn one_bound_card_has_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[ADDR], 1);
    let node = layout.node_for("03:00.0").unwrap();
    assert_eq!(node.path, layout.dev.join("litepcie0"));
    assert_eq!(node.index, 0);
    assert_eq!(layout.function_for(&node.path).unwrap(), ADDR);
    assert_eq!(layout.bar_sizes(ADDR).unwrap()[0], Some(0x100000));
}

#[test]
fn nodes_are_sorted_by_index_not_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[ADDR], 11);
    let nodes = layout.nodes().unwrap();
    let indexes: Vec<u32> = nodes.iter().map(|n| n.index).collect();
    assert_eq!(indexes, (0..11).collect::<Vec<_>>());
}

#[test]
fn several_bound_cards_are_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[ADDR, "0000:04:00.0"], 2);
    let e = err(layout.node_for(ADDR));
    assert!(e.contains("2 PCI functions are bound to litepcie (0000:03:00.0, 0000:04:00.0)"), "{e}");
    assert!(e.contains("open_with"), "{e}");
    let e = err(layout.function_for(&layout.dev.join("litepcie1")));
    assert!(e.contains("does not say which one"), "{e}");
}

#[test]
fn a_card_on_another_driver_or_none_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[], 0);
    let f = layout.sys.join("bus/pci/devices").join(ADDR);
    std::fs::create_dir_all(&f).unwrap();
    let e = err(layout.node_for(ADDR));
    assert!(e.contains("bound to no driver") && e.contains("new_id"), "{e}");
    symlink("../../../../bus/pci/drivers/vfio-pci", f.join("driver")).unwrap();
    let e = err(layout.node_for(ADDR));
    assert!(e.contains("bound to the vfio-pci driver, not litepcie"), "{e}");
    let e = err(layout.node_for("0000:09:00.0"));
    assert!(e.contains("no PCI function 0000:09:00.0"), "{e}");
    let e = err(layout.node_for("nonsense"));
    assert!(e.contains("is not a PCI address"), "{e}");
}

#[test]
fn bound_but_without_nodes_points_at_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let layout = fake_tree(dir.path(), &[ADDR], 0);
    let e = err(layout.node_for(ADDR));
    assert!(e.contains("failed its probe"), "{e}");
}

/// A device over the fake tree: the node is a plain file (ioctls on it fail with ENOTTY).
fn fake_device(root: &Path) -> (LitePcieDevice, SysfsLayout) {
    let layout = fake_tree(root, &[ADDR], 1);
    let node = layout.dev.join("litepcie0");
    (LitePcieDevice::open_in(layout.clone(), &node, None).unwrap(), layout)
}

#[test]
fn describes_itself_from_sysfs() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, layout) = fake_device(dir.path());
    let d = dev.description();
    assert_eq!(d.backend, "litepcie");
    assert_eq!(d.pci_address, ADDR);
    assert_eq!(d.location, layout.dev.join("litepcie0").display().to_string());
    assert_eq!(d.bar_sizes, vec![Some(0x100000), None, None, None, None, None]);
    assert_eq!(dev.clock_source(), tlpx_device::ClockSource::Host);
}

#[test]
fn alloc_dma_is_unsupported_and_says_what_to_use() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dev, _) = fake_device(dir.path());
    let e = dev.alloc_dma(4096).expect_err("the driver gives no bus addresses");
    assert!(matches!(e, DeviceError::Unsupported { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.starts_with("the litepcie backend cannot allocate DMA buffers with bus addresses"), "{m}");
    for needed in ["selftest's dma-loopback", "bw", "spy capture", "irq", "loop", "vfio backend", "try_as_driver_dma"] {
        assert!(m.contains(needed), "{needed:?} missing from: {m}");
    }
}

#[test]
fn config_space_comes_from_sysfs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dev, _) = fake_device(dir.path());
    assert_eq!(dev.config_read(0x10, 4).unwrap(), vec![0x10, 0x11, 0x12, 0x13]);
    dev.config_write(0x04, &[0xAA, 0x55]).unwrap();
    assert_eq!(dev.config_read(0x03, 4).unwrap(), vec![0x03, 0xAA, 0x55, 0x06]);
    // The fake file has 256 bytes, as sysfs gives to root on a function without extended space
    // (64 to anyone else): a short read is an error, never zero-filled bytes.
    let e = err(dev.config_read(0xF0, 0x20));
    assert!(e.contains("gave 16 of the 32 bytes") && e.contains("root"), "{e}");
    let e = err(dev.config_read(0xFF0, 0x20));
    assert!(e.contains("within 0..4096"), "{e}");
}

#[test]
fn bar_accesses_are_checked_before_the_driver_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dev, _) = fake_device(dir.path());
    // The driver does not bound the offset: the backend must.
    let e = err(dev.bar_read(0, 0x100000, Width::W32));
    assert!(e.contains("outside BAR0 of 1048576 bytes"), "{e}");
    let e = err(dev.bar_read(0, 0xFFFFC, Width::W64));
    assert!(e.contains("outside BAR0"), "{e}");
    let e = err(dev.bar_write(0, 0x102, Width::W32, 1));
    assert!(e.contains("not 4-byte aligned"), "{e}");
    let e = err(dev.bar_read(0, 0x100, Width::W8));
    assert!(e.contains("cannot make a 8-bit BAR read") && e.contains("vfio"), "{e}");
    let e = err(dev.bar_write(0, 0x100, Width::W16, 1));
    assert!(e.contains("cannot make a 16-bit BAR write"), "{e}");
    let e = err(dev.bar_read(2, 0, Width::W32));
    assert!(e.contains("access BAR2"), "{e}");
    let e = err(dev.bar_read_block(0, 0x102, 8));
    assert!(e.contains("8-byte block access at BAR0 0x102"), "{e}");
    // In bounds, the access reaches the ioctl, which a plain file refuses.
    let e = err(dev.bar_read(0, 0x800, Width::W32));
    assert!(e.contains("register read at BAR0 0x800"), "{e}");
}

#[test]
fn only_the_driver_dma_vectors_can_be_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dev, _) = fake_device(dir.path());
    let software = tlpx_regs::constants::MSI_SOFTWARE as u32;
    let e = dev.wait_interrupt(1 << software, Duration::from_millis(1)).expect_err("not reported by the driver");
    assert!(matches!(e, DeviceError::Unsupported { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.contains(&format!("wait for MSI vector {software}")) && m.contains("vfio"), "{m}");
    let writer = tlpx_regs::constants::MSI_PCIE_DMA0_WRITER as u32;
    let m = err(dev.wait_interrupt(1 << writer, Duration::from_millis(1)));
    assert!(m.contains("while its DMA is stopped") && m.contains("set_enabled"), "{m}");
    let m = err(dev.wait_interrupt(0, Duration::from_millis(1)));
    assert!(m.contains("at least one vector"), "{m}");
}

#[test]
fn driver_dma_reaches_the_ioctls() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dev, _) = fake_device(dir.path());
    let dma = dev.try_as_driver_dma().expect("the litepcie backend has the driver's DMA");
    // A plain file is not the driver: the ioctl's failure is reported with what was asked.
    let e = dma.layout().expect_err("no driver behind a plain file").to_string();
    assert!(e.contains("DMA buffer information"), "{e}");
}

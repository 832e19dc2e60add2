//! The vectors vfio-pci enabled for the device, and the Linux interrupts it requested for them,
//! as /proc/interrupts lists them (`vfio-msix[v](ADDRESS)`, `vfio-msi[v](ADDRESS)`): what
//! `tlpx irq --cpus` steers.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::ffi::*;
use super::sys::{errno, io_err, ioctl_ptr, set_irqs_eventfd};
use super::{IrqMode, Irqs, VfioOptions, BACKEND};
use crate::{DeviceError, InterruptMode, InterruptVectors};

impl super::VfioDevice {
    /// Enables the function's vectors, MSI-X preferred (`options.irq_mode`), up to
    /// `options.max_vectors`, each with an eventfd of its own.
    pub(super) fn setup_irqs(&mut self, options: &VfioOptions) -> Result<(), DeviceError> {
        let count_of = |index: u32| -> Result<u32, DeviceError> {
            if index >= self.num_irqs()? {
                return Ok(0);
            }
            let mut info = vfio_irq_info { argsz: argsz::<vfio_irq_info>(), index, ..Default::default() };
            // SAFETY: VFIO_DEVICE_GET_IRQ_INFO fills a vfio_irq_info of argsz bytes.
            unsafe { ioctl_ptr(self.device.as_raw_fd(), VFIO_DEVICE_GET_IRQ_INFO, &mut info) }
                .map_err(|e| io_err(format!("VFIO_DEVICE_GET_IRQ_INFO index {index}"), e))?;
            Ok(if info.flags & VFIO_IRQ_INFO_EVENTFD != 0 { info.count } else { 0 })
        };
        let msix = count_of(VFIO_PCI_MSIX_IRQ_INDEX)?;
        let msi = count_of(VFIO_PCI_MSI_IRQ_INDEX)?;
        let (index, kind, count) = match options.irq_mode {
            IrqMode::None => return Ok(()),
            IrqMode::Auto if msix > 0 => (VFIO_PCI_MSIX_IRQ_INDEX, "MSI-X", msix),
            IrqMode::Auto if msi > 0 => (VFIO_PCI_MSI_IRQ_INDEX, "MSI", msi),
            IrqMode::Auto => return Ok(()),
            IrqMode::MsiX if msix > 0 => (VFIO_PCI_MSIX_IRQ_INDEX, "MSI-X", msix),
            IrqMode::Msi if msi > 0 => (VFIO_PCI_MSI_IRQ_INDEX, "MSI", msi),
            mode => {
                return Err(DeviceError::Unsupported {
                    backend: BACKEND.into(),
                    what: format!("enable {mode:?} interrupts on {}", self.address),
                    instead: format!("the function has {msi} MSI and {msix} MSI-X vectors; choose irq mode auto"),
                })
            }
        };
        let mut n = count.min(options.max_vectors.max(1));
        loop {
            let mut fds = Vec::new();
            for _ in 0..n {
                // SAFETY: eventfd creates a new fd; the result is checked.
                let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return Err(io_err("eventfd".into(), errno()));
                }
                // SAFETY: a fresh fd owned by nobody else.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
            let fewer = set_irqs_eventfd(self.device.as_raw_fd(), index, &raw)
                .map_err(|e| io_err(format!("VFIO_DEVICE_SET_IRQS: enabling {n} {kind} vector(s) of {}", self.address), e))?;
            match fewer {
                0 => {
                    self.irqs = Some(Irqs { index, kind, pending: vec![0; fds.len()], fds });
                    return Ok(());
                }
                // The kernel could give fewer and enabled none: ask for that many (n falls at
                // every turn, so the loop ends; an answer not below n is an error).
                m if m < n => n = m,
                m => {
                    return Err(DeviceError::Backend(format!(
                        "VFIO_DEVICE_SET_IRQS: enabling {n} {kind} vector(s) of {} returned {m}: the kernel enabled none",
                        self.address
                    )))
                }
            }
        }
    }
}

/// The vectors enabled when the device was opened (MSI-X preferred, up to the options'
/// `max_vectors`, 32 by default): vfio-pci's kernel side programmed the table or MSI's MME.
pub(super) fn granted(irqs: Option<&Irqs>, address: &str, count: u32) -> Result<InterruptVectors, DeviceError> {
    let Some(irqs) = irqs else {
        return Err(DeviceError::Unsupported {
            backend: BACKEND.into(),
            what: format!("interrupt vectors on {address}"),
            instead: "open the device with interrupts (irq mode auto, msi or msix)".into(),
        });
    };
    let n = irqs.fds.len() as u32;
    let mode = match (irqs.index, n) {
        (VFIO_PCI_MSIX_IRQ_INDEX, _) => InterruptMode::MsiX,
        (_, 1) => InterruptMode::Msi,
        _ => InterruptMode::MsiMulti,
    };
    Ok(InterruptVectors { mode, count: n.min(count.max(1)) })
}

/// The Linux interrupt of vector `vector`: the /proc/interrupts line named
/// `vfio-msix[v](ADDRESS)` (or `vfio-msi[v]`).
pub(super) fn host_irq(irqs: &Irqs, address: &str, vector: u32) -> Option<u32> {
    let kind = if irqs.index == VFIO_PCI_MSIX_IRQ_INDEX { "vfio-msix" } else { "vfio-msi" };
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    host_irq_named(&text, &format!("{kind}[{vector}]({address})"))
}

/// The interrupt number of the /proc/interrupts line whose handler name is `name` (its last
/// field), as vfio-pci names its vectors' handlers.
pub(super) fn host_irq_named(proc_interrupts: &str, name: &str) -> Option<u32> {
    proc_interrupts.lines().find_map(|line| {
        let (number, rest) = line.trim_start().split_once(':')?;
        (rest.split_whitespace().last() == Some(name)).then(|| number.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vectors_host_irq_is_found_by_its_handler_name() {
        let text = "            CPU0       CPU1       \n\
  24:          0         12  IR-PCI-MSIX-0000:01:00.0    0-edge      vfio-msix[0](0000:01:00.0)\n\
  25:          7          0  IR-PCI-MSIX-0000:01:00.0    1-edge      vfio-msix[1](0000:01:00.0)\n\
  26:          3          0  PCI-MSI-0000:02:00.0    0-edge      vfio-msi[0](0000:02:00.0)\n\
 NMI:          0          0   Non-maskable interrupts\n";
        assert_eq!(host_irq_named(text, "vfio-msix[1](0000:01:00.0)"), Some(25));
        assert_eq!(host_irq_named(text, "vfio-msix[0](0000:01:00.0)"), Some(24));
        assert_eq!(host_irq_named(text, "vfio-msi[0](0000:02:00.0)"), Some(26));
        assert_eq!(host_irq_named(text, "vfio-msix[2](0000:01:00.0)"), None);
        assert_eq!(host_irq_named(text, "interrupts"), None, "NMI's line has no number");
    }
}

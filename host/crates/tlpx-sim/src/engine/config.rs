//! The card's configuration space: config reads and writes of the clients, and what a
//! write changes for the card (its cfg_* inputs), the link model and the dump file.

use tlpx_model::link::LinkConfig;
use tlpx_sim_protocol::{ErrorKind, Reply};

use super::Sim;

impl Sim {
    /// A client left: the interrupt mode it set (vectors, MSI-X) goes back to what it found.
    pub(super) fn restore_interrupt_mode(&mut self, id: u64) {
        if let Some((owner, controls)) = self.interrupt_mode_owner {
            if owner == id {
                self.interrupt_mode_owner = None;
                if self.config.interrupt_controls() != controls {
                    self.config.set_interrupt_controls(controls);
                    self.apply_view();
                    self.info(&format!("client {id} left: the interrupt mode it set (MSI/MSI-X control) is restored"));
                }
            }
        }
    }

    /// Hands config space to the card's cfg_* inputs and the link model, rewrites the dump.
    pub(super) fn apply_view(&mut self) {
        let v = self.config.view();
        self.view = v;
        let (domain, bus, dev, func) = self.p.pci_address;
        self.inp.cfg_bus_master_enable = u8::from(v.bus_master_enable);
        self.inp.cfg_msi_enable = u8::from(v.msi_enable);
        self.inp.cfg_msi_multiple_enable = v.msi_vectors.trailing_zeros().min(5) as u8;
        self.inp.cfg_msix_enable = u8::from(v.msix_enable);
        self.inp.cfg_msix_function_mask = u8::from(v.msix_function_mask);
        self.inp.cfg_requester_id = (u16::from(bus) << 8) | (u16::from(dev) << 3) | u16::from(func);
        self.inp.cfg_max_payload_size = v.max_payload_size as u16;
        self.inp.cfg_max_request_size = v.max_read_request_size as u16;
        let l = *self.link.config();
        if let Ok(cfg) = LinkConfig::new(l.generation, l.lanes, v.max_payload_size, v.max_read_request_size, l.rcb, l.addr64) {
            self.link.set_config(cfg);
        }
        let dump = tlpx_pci::render_dump(domain, bus, dev, func, self.config.bytes());
        if let Err(e) = self.p.dump.write(dump.as_bytes()) {
            self.warn(&format!("cannot write {}: {e}", self.p.dump.path().display()));
        }
    }

    pub(super) fn config_read(&mut self, id: u64, offset: u16, len: u16) {
        match self.config.read(offset, len) {
            Ok(data) => self.reply(id, &Reply::ConfigData { data }),
            Err(e) => self.error(id, ErrorKind::InvalidArgument, e),
        }
    }

    /// A config write; one that changes what the card or the link sees is applied at once.
    /// The interrupt mode (MSI's enable and Multiple Message Enable, MSI-X's control) has one
    /// owner at a time, the client that changed it first: another client's change is refused
    /// while that one is connected (undoing it when the owner leaves would pull the mode from
    /// under the other), and allowed again once the owner has left and the mode is restored.
    pub(super) fn config_write(&mut self, id: u64, offset: u16, data: &[u8]) {
        let controls = self.config.interrupt_controls();
        match self.config.write(offset, data) {
            Ok(changed) => {
                let mode_changed = self.config.interrupt_controls() != controls;
                match self.interrupt_mode_owner {
                    Some((owner, _)) if mode_changed && owner != id => {
                        self.config.set_interrupt_controls(controls);
                        self.apply_view();
                        self.error(
                            id,
                            ErrorKind::NotAllowed,
                            format!(
                                "busy: client {owner} changed the card's interrupt mode (MSI/MSI-X control) and is still \
                                 connected; the mode goes back when it leaves (write at config offset {offset:#x} refused)"
                            ),
                        );
                        return;
                    }
                    None if mode_changed => self.interrupt_mode_owner = Some((id, controls)),
                    _ => {}
                }
                if changed {
                    self.apply_view();
                }
                self.reply(id, &Reply::ConfigWritten);
            }
            Err(e) => self.error(id, ErrorKind::InvalidArgument, e),
        }
    }
}

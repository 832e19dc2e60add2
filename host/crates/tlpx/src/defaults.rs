//! Defaults that depend on the backend.
//!
//! A count that suits a real card, where a point takes milliseconds, can keep the simulator
//! busy for minutes or hours: it computes every card cycle, and every register access is a
//! message on its socket. Such an option is an `Option` for clap, its help gives both values
//! ("[default: 1000 on hardware, 100 on the simulator]", checked against the constants here
//! by the tests), and the command picks one from `--device`: `sim`, `sim:SOCKET` are the
//! simulator, everything else hardware. The result records what was used in its
//! `parameters`, and `parameters.defaults_for` says which defaults applied.

use tlpx_device::selector::Selector;

/// Which backend's defaults a run used (a result type: tlpx-results').
pub use tlpx_results::DefaultsFor;

/// Whose defaults apply to `--device` (an unknown selector is refused, as opening it would be).
pub fn defaults_for(device: &str) -> anyhow::Result<DefaultsFor> {
    Ok(match Selector::parse(device)? {
        Selector::Sim(_) => DefaultsFor::Simulator,
        _ => DefaultsFor::Hardware,
    })
}

/// A default with a value for real cards and one for the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendDefault<T> {
    pub hardware: T,
    pub simulator: T,
}

impl<T: Copy> BackendDefault<T> {
    /// `given` when the option was given, else the backend's default.
    pub fn pick(&self, given: Option<T>, backend: DefaultsFor) -> T {
        given.unwrap_or(match backend {
            DefaultsFor::Hardware => self.hardware,
            DefaultsFor::Simulator => self.simulator,
        })
    }
}

impl<T: std::fmt::Display> BackendDefault<T> {
    /// How the options' help gives it: "[default: 1000 on hardware, 100 on the simulator]"
    /// (the help is a doc comment; the tests check that it says this).
    #[cfg(test)]
    pub fn help(&self) -> String {
        format!("[default: {} on hardware, {} on the simulator]", self.hardware, self.simulator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_picks_the_default() {
        let d = BackendDefault { hardware: 1000u32, simulator: 100 };
        assert_eq!(d.pick(None, defaults_for("sim").expect("sim")), 100);
        assert_eq!(d.pick(None, defaults_for("sim:/tmp/x.sock").expect("sim socket")), 100);
        assert_eq!(d.pick(None, defaults_for("0000:03:00.0").expect("pci")), 1000);
        assert_eq!(d.pick(None, defaults_for("vfio:0000:03:00.0").expect("vfio")), 1000);
        assert_eq!(d.pick(None, defaults_for("litepcie:/dev/litepcie0").expect("litepcie")), 1000);
        assert_eq!(d.pick(Some(7), DefaultsFor::Simulator), 7, "a given value is kept");
        assert!(defaults_for("nonsense").is_err());
        assert_eq!(d.help(), "[default: 1000 on hardware, 100 on the simulator]");
    }
}

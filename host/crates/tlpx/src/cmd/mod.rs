//! One module per subcommand: each has `struct Cmd` (its arguments) and `fn run`.

pub mod bench;
pub mod bw;
pub mod bw_driver;
pub mod characterize;
pub mod diff;
pub mod fw;
pub mod info;
pub mod irq;
pub mod lat;
pub mod list;
pub mod litex_server;
pub mod model;
pub mod pio;
pub mod reg;
pub mod report;
pub mod rt_loop;
pub mod rule30;
pub mod script;
pub mod selftest;
pub mod serve;
pub mod slot;
pub mod spy;
pub mod stop;
pub mod top;
pub mod vfio;

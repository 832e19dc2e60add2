//! One module per subcommand: each has `struct Cmd` (its arguments) and `fn run`.

pub mod bench;
pub mod info;
pub mod list;
pub mod selftest;

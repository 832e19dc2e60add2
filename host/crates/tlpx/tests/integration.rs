//! The integration tests of tlpx (the command line), one module per test file, built as one test binary
//! (`autotests = false` in Cargo.toml). Apart, each file was a binary of its own that compiled
//! the same dependencies' generic code again and was linked alone: about 5 CPU-seconds each of a
//! fresh `make test` (docs/performance.md, "make test's time"). The tests run as before, on
//! `cargo test`'s threads; a file that changes process-wide state stays a binary of its own.
#![allow(clippy::unwrap_used)]

mod common;

#[path = "args_cli.rs"]
mod args_cli;
#[path = "attribution_cli.rs"]
mod attribution_cli;
#[path = "cli.rs"]
mod cli;
#[path = "dashboards_prom.rs"]
mod dashboards_prom;
#[path = "diff_cli.rs"]
mod diff_cli;
#[path = "../../../blocks/slot/tests/dut_card.rs"]
mod dut_card;
#[path = "../../../blocks/cpu/tests/fw_cli.rs"]
mod fw_cli;
#[path = "../../../blocks/generator/tests/host_knobs_cli.rs"]
mod host_knobs_cli;
#[path = "inputs_cli.rs"]
mod inputs_cli;
#[path = "../../../blocks/irq_timer/tests/irq_cli.rs"]
mod irq_cli;
#[path = "list_real_bus.rs"]
mod list_real_bus;
#[path = "litex_cli.rs"]
mod litex_cli;
#[path = "live_time.rs"]
mod live_time;
#[path = "../../../blocks/rt_loop/tests/loop_cli.rs"]
mod loop_cli;
#[path = "measure.rs"]
mod measure;
#[path = "metrics_cli.rs"]
mod metrics_cli;
#[path = "model.rs"]
mod model;
#[path = "ownership_cli.rs"]
mod ownership_cli;
#[path = "partial_cli.rs"]
mod partial_cli;
#[path = "../../../blocks/spy/tests/pcapng_tshark.rs"]
mod pcapng_tshark;
#[path = "reg_cli.rs"]
mod reg_cli;
#[path = "report_browser.rs"]
mod report_browser;
#[path = "report_cli.rs"]
mod report_cli;
#[path = "../../../blocks/rule30/tests/rule30_cli.rs"]
mod rule30_cli;
#[path = "../../../blocks/cpu/tests/script_cli.rs"]
mod script_cli;
#[path = "../../../blocks/slot/tests/slot_ownership.rs"]
mod slot_ownership;
#[path = "../../../blocks/spy/tests/spy_cli.rs"]
mod spy_cli;
#[path = "../../../blocks/spy/tests/spy_convert_cli.rs"]
mod spy_convert_cli;
#[path = "../../../blocks/spy/tests/spy_log_cli.rs"]
mod spy_log_cli;
#[path = "../../../blocks/spy/tests/spy_payload_cli.rs"]
mod spy_payload_cli;
#[path = "../../../blocks/spy/tests/top.rs"]
mod top;

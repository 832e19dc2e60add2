//! A process-wide request to stop, set by the tool's signal handling (Ctrl-C, SIGTERM, SIGHUP,
//! a closed output) and honoured by [`crate::card::Card`]'s waits within a slice of card time,
//! so that a measurement stops within about a second however long its present step is.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Asks every wait of every card in this process to end early (async-signal-safe).
pub fn request() {
    STOP.store(true, Ordering::SeqCst);
}

/// True once a stop was requested.
pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

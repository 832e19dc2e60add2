//! One module per backend.

pub mod sim;

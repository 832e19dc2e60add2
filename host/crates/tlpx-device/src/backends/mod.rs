//! One module per backend.

pub mod litepcie;
pub mod sim;
pub mod vfio;

//! The vfio backend (placeholder: being written).

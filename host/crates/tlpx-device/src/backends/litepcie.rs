//! The LitePCIe-driver backend (placeholder: being written).

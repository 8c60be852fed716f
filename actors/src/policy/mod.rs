//! Pure decision functions: plain functions over plain state, unit-tested without a runtime.

pub mod attribution;

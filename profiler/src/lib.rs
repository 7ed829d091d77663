//! The `tprof` binary's library half: capture (kernel programs, /proc, the
//! live job; the only part needing root) and the safe creation of output
//! files. Everything after capture (the recording format, model, analysis
//! and renderers) is the `tprof-core` crate, which builds without the eBPF
//! toolchain; its modules are re-exported here so the binary has one path
//! to each stage.
//!
//! See docs/architecture.md for the map and its invariants.

pub mod capture;
pub mod output;

pub use tprof_core::{analysis, model, outputs, recording, render};

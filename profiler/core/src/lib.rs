//! tprof's pure pipeline, one module per stage after capture:
//!
//!   recording (the file) → model (thread states, process tree)
//!   → analysis (statistics, roles, steps, the verdict)
//!   → render (terminal report, JSON, flamegraphs, timelines).
//!
//! `outputs` strings them together: what each command makes of a
//! recording file.
//!
//! Nothing here touches the kernel or the live system, and nothing needs
//! root or the eBPF toolchain: this crate builds and tests on stable, so a
//! recording can be studied on any machine. Capture, which writes the
//! recordings, lives in the `profiler` crate beside the `tprof` binary.
//! See docs/architecture.md for the map and its invariants.

pub mod analysis;
pub mod model;
pub mod outputs;
pub mod recording;
pub mod render;

//! tprof's pipeline, one module per stage:
//!
//! capture (kernel programs, /proc, the live job; the only part needing root)
//!   → recording (the file) → model (thread states, process tree)
//!   → analysis (statistics) → render (terminal report, JSON).
//!
//! `outputs` strings the pure stages together: what each command makes of
//! a recording file.
//!
//! See docs/architecture.md for the map and its invariants.

pub mod analysis;
pub mod capture;
pub mod model;
pub mod outputs;
pub mod recording;
pub mod render;

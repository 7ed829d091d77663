//! Outputs for people and scripts. Each renderer takes what analysis
//! computed (the [`Summary`](crate::analysis::Summary), folded stacks) and
//! formats it; none computes.

pub mod flamegraph;
pub mod json;
pub mod report;
pub mod timeline;

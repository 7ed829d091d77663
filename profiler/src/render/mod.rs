//! Outputs for people and scripts. Each renderer takes the analysis
//! [`Summary`](crate::analysis::Summary) and formats it; none computes.

pub mod json;
pub mod report;

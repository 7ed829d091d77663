//! The fake libnvidia-ml.so in tests/fake_nvml, and what a test needs to
//! line its script up with a recording.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::workload::{build_shared_lib, workspace_root};

/// Which library to build: the whole fake, or one lacking a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeNvml {
    Full,
    /// No nvmlDeviceGetSamples: tprof must poll utilization rates.
    NoSamples,
    /// No nvmlDeviceGetProcessUtilization.
    NoProcessUtil,
}

impl FakeNvml {
    /// Builds this variant (once) and returns the library's path.
    pub fn build(self) -> PathBuf {
        let source = workspace_root().join("tests/fake_nvml/fake_nvml.c");
        let (name, defines): (&str, &[&str]) = match self {
            FakeNvml::Full => ("libnvidia-ml-fake", &[]),
            FakeNvml::NoSamples => ("libnvidia-ml-fake-no-samples", &["-DNO_SAMPLES"]),
            FakeNvml::NoProcessUtil => {
                ("libnvidia-ml-fake-no-process-util", &["-DNO_PROCESS_UTIL"])
            }
        };
        build_shared_lib(&source, "fake_nvml", name, defines)
    }
}

/// The wall-clock time (ns) at which a recording's window opened, from its
/// header record (the first record after the 16-byte preamble; see
/// docs/recording-format.md).
pub fn recording_start_realtime_ns(path: &Path) -> u64 {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(bytes.len() > 24, "recording {} too short", path.display());
    let len = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes")) as usize;
    let header: Value = serde_json::from_slice(&bytes[24..24 + len]).expect("header is JSON");
    header["start"]["realtime_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("header has no start.realtime_ns: {header}"))
}

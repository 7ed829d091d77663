//! What a capture is asked to do and what it ends with: the validated
//! options of `tprof record` ([`RecordOptions`]), why it stopped
//! ([`StopReason`]) and what the finished recording holds
//! ([`RecordOutcome`]).
//!
//! In a module of their own so that every stage of capture can name them
//! without importing from `capture/mod.rs`: the import graph runs one way,
//! from `mod.rs` down to its children.

use std::{path::PathBuf, time::Duration};

use tprof_core::recording::{CommandExit, LostCounts};

use super::gpu::GpuOptions;
use super::programs::MapLimits;

/// What `tprof record` was asked to do, validated.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Running processes to attach to (with their descendants).
    pub pids: Vec<u32>,
    /// A command to launch and trace from its exec (empty: none).
    pub command: Vec<String>,
    pub duration: Option<Duration>,
    pub output: PathBuf,
    pub force: bool,
    pub gpu: GpuOptions,
    /// On-CPU sampling frequency; None: no stacks at all (--no-stacks).
    pub sample_hz: Option<u64>,
    /// Bytes of user stack copied at each sample and new switch-out site
    /// (`--stack-size`).
    pub stack_copy_bytes: u32,
    /// Walk CPython's frames into the stacks (off with --no-python-frames).
    pub python_frames: bool,
    /// Trace CUDA runtime calls (off with --no-cuda).
    pub cuda: bool,
    /// Kernel map sizes (defaults unless a test shrinks them).
    pub limits: MapLimits,
    /// How long the launched command's process group gets to exit once the
    /// recording stops it, before SIGKILL (`--kill-after`).
    pub kill_after: Duration,
}

/// Why recording stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Interrupted,
    Terminated,
    HungUp,
    TargetsExited,
}

impl StopReason {
    pub(super) fn is_signal(self) -> bool {
        matches!(
            self,
            StopReason::Interrupted | StopReason::Terminated | StopReason::HungUp
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Interrupted => "interrupted",
            StopReason::Terminated => "terminated",
            StopReason::HungUp => "hung up",
            StopReason::TargetsExited => "targets exited",
        }
    }
}

/// What a finished recording holds.
#[derive(Debug, Clone)]
pub struct RecordOutcome {
    pub path: PathBuf,
    pub stop_reason: StopReason,
    pub events: u64,
    pub lost: LostCounts,
    /// How the launched command ended (`record -- CMD` only).
    pub command_exit: Option<CommandExit>,
}

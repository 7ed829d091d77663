//! What a capture is asked to do and what it ends with: the validated
//! options every capture takes ([`CaptureOptions`]), those of `tprof
//! record` around them ([`RecordOptions`]), where the records go as the
//! messages name it ([`Destination`]), why it stopped ([`StopReason`]) and
//! what it ends with ([`CaptureOutcome`], [`RecordOutcome`]).
//!
//! In a module of their own so that every stage of capture can name them
//! without importing from `capture/mod.rs`: the import graph runs one way,
//! from `mod.rs` down to its children.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tprof_core::recording::{CommandExit, LostCounts};

use super::gpu::GpuOptions;
use super::programs::MapLimits;

/// What a capture is asked to do, validated: what `tprof record` and
/// `tprof top` share.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// Running processes to attach to (with their descendants).
    pub pids: Vec<u32>,
    /// A command to launch and trace from its exec (empty: none).
    pub command: Vec<String>,
    pub duration: Option<Duration>,
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
    /// capture stops it, before SIGKILL (`--kill-after`).
    pub kill_after: Duration,
}

/// What `tprof record` was asked to do, validated: a capture into a file.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub capture: CaptureOptions,
    pub output: PathBuf,
    pub force: bool,
}

/// Where a capture's records go, as its messages name it: the recording
/// file of `tprof record`, or the live view of `tprof top`, which draws
/// its own progress and keeps no file of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    File(PathBuf),
    Live,
}

impl Destination {
    /// The recording file, when there is one.
    pub(super) fn file(&self) -> Option<&Path> {
        match self {
            Destination::File(path) => Some(path),
            Destination::Live => None,
        }
    }
}

/// Why a capture stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Interrupted,
    Terminated,
    HungUp,
    TargetsExited,
    /// The live view asked (`q` in `tprof top`, or its frames counted out).
    Quit,
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
            StopReason::Quit => "quit",
        }
    }
}

/// What a finished capture saw.
#[derive(Debug, Clone)]
pub struct CaptureOutcome {
    pub stop_reason: StopReason,
    pub events: u64,
    pub lost: LostCounts,
    /// How the launched command ended (`-- CMD` only).
    pub command_exit: Option<CommandExit>,
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

impl RecordOutcome {
    pub(super) fn new(path: PathBuf, capture: CaptureOutcome) -> RecordOutcome {
        RecordOutcome {
            path,
            stop_reason: capture.stop_reason,
            events: capture.events,
            lost: capture.lost,
            command_exit: capture.command_exit,
        }
    }
}

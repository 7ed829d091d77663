//! Who is who across a recording: a thread or process is its id *and* when
//! it began, as Perfetto's trace processor keys every table by `utid` and
//! `upid` (a row per lifetime), never by a bare tid or pid. The kernel
//! reuses ids: an epoch-restarting DataLoader forks a new set of workers
//! every epoch, a long recording cycles through pids, and a thread's tid
//! may be another's a second later. A map keyed by a bare id merges them.
//!
//! Within one recording the machine is implied; across recordings (`tprof
//! merge`) each model is analysed on its own, so a key needs no node.

use std::fmt;

use serde::Serialize;

/// A thread: its tid and the start of its life in the window (its birth,
/// or the window's start for a thread already running).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ThreadKey {
    pub tid: u32,
    pub start_ns: u64,
}

/// A process: its pid and the start of its life in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ProcessKey {
    pub pid: u32,
    pub start_ns: u64,
}

impl fmt::Display for ThreadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.tid, self.start_ns)
    }
}

impl fmt::Display for ProcessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pid, self.start_ns)
    }
}

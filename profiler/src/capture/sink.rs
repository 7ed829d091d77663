//! Where a capture's output goes: the [`Sink`] trait, which the last
//! stage of the pipeline writes to without knowing what it is. The
//! recording file ([`RecordingFile`](super::file::RecordingFile)) is the
//! one sink today; a live view (`tprof top`) would be another, fed the same
//! records and resolved events, with no file.
//!
//! A sink takes what the recording holds, in the recording's terms:
//! metadata records already encoded as the file keeps them, and each
//! drain's events with the frames and stacks they use named before them
//! ([`Resolved`]). It is called from one thread at a time, in the order the
//! session sent things, and owned by that thread while the capture runs.

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::resolve::Resolved;

/// What takes a capture's records and events.
pub(super) trait Sink: Send {
    /// A metadata record (`tprof_core::recording::record` kinds), its
    /// payload encoded as the recording keeps it.
    fn record(&mut self, kind: u32, payload: &[u8]) -> Result<()>;
    /// One drain's events, after the frames and stacks first used in it.
    fn events(&mut self, batch: &Resolved) -> Result<()>;
    /// The end of a drain tick: everything taken so far must survive a
    /// kill from now on (the file is flushed).
    fn flush(&mut self) -> Result<()>;
    /// Nothing follows: the capture is complete (the file is synced).
    fn finish(self: Box<Self>) -> Result<()>;
}

/// A metadata record's payload, as the recording keeps it (JSON).
pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).context("cannot encode a recording record")
}

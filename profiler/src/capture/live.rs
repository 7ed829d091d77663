//! The sink of `tprof top`: what the write stage hands it goes on, in the
//! recording's own terms, to the live view over a bounded channel
//! ([`Feed`]). The view keeps its rolling window of it and, on request,
//! writes what follows to a recording file, so this stage knows nothing of
//! either.
//!
//! The channel is bounded: a view that falls behind makes this stage wait,
//! the pipeline fill and the drain leave events in the ring buffer, where
//! any loss is counted per event kind, as for a recording file on a slow
//! disk.

use std::sync::mpsc::SyncSender;

use anyhow::{Result, anyhow};
use tprof_core::recording::record;

use super::resolve::Resolved;
use super::sink::{Sink, encode};

/// Items the view may be behind by before the write stage waits: each
/// drain tick sends a few (its events, a flush, some records), so about
/// two seconds.
pub const FEED_BOUND: usize = 256;

/// What the live view receives, in the order a recording file would hold
/// it.
#[derive(Debug)]
pub enum Feed {
    /// A metadata record (`tprof_core::recording::record` kinds: FRAMES
    /// and STACK_DEFS included), its payload encoded as the recording
    /// keeps it.
    Record { kind: u32, payload: Vec<u8> },
    /// One drain's events, back to back as an EVENTS record holds them,
    /// their stack fields ids of the STACK_DEFS sent so far. Every event
    /// stamped before `drained_ns` (CLOCK_MONOTONIC) is in this batch or
    /// an earlier one: the view's watermark.
    Events { bytes: Vec<u8>, drained_ns: u64 },
    /// The end of a drain tick: a recording file being written is flushed.
    Flush,
    /// The capture is complete: nothing follows.
    End,
}

/// Sends everything to the live view.
pub(super) struct LiveSink {
    tx: SyncSender<Feed>,
}

impl LiveSink {
    pub(super) fn new(tx: SyncSender<Feed>) -> LiveSink {
        LiveSink { tx }
    }

    fn send(&self, feed: Feed) -> Result<()> {
        self.tx
            .send(feed)
            .map_err(|_| anyhow!("the live view stopped"))
    }
}

impl Sink for LiveSink {
    fn record(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
        let payload = payload.to_vec();
        self.send(Feed::Record { kind, payload })
    }

    /// The new frames and stacks, then the events, as the file has them.
    fn events(&mut self, batch: &Resolved) -> Result<()> {
        if let Some(frames) = &batch.frames {
            self.record(record::FRAMES, &encode(frames)?)?;
        }
        if let Some(stacks) = &batch.stacks {
            self.record(record::STACK_DEFS, &encode(stacks)?)?;
        }
        let mut bytes = Vec::new();
        for event in batch.events.in_order() {
            bytes.extend_from_slice(event);
        }
        let drained_ns = batch.events.drained_ns();
        self.send(Feed::Events { bytes, drained_ns })
    }

    fn flush(&mut self) -> Result<()> {
        self.send(Feed::Flush)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.send(Feed::End)
    }
}

//! Capture in two stages: the drain (the session's thread) empties the
//! ring buffers every tick and hands each batch on; a writer thread turns
//! the batch's stacks into the recording's ([`StackResolver`]: unwinding
//! the user stack copies, reading the stack map, naming new frames) and
//! writes everything to the file. Naming frames can take seconds the first
//! time a large library (libtorch) is seen; on the drain's thread that
//! stalled the drains until the ring buffer overflowed.
//!
//! The queue between the stages is bounded by batches in flight: when the
//! writer is [`MAX_IN_FLIGHT`] batches behind, the drain leaves the events
//! in the ring buffer for a tick, so any loss happens there, where the
//! kernel counts it per event kind. Records the session writes (process
//! snapshots, samples, GPU series) go through the same queue, so the file
//! keeps their order with the events.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    thread::JoinHandle,
};

use anyhow::{Context as _, Result, anyhow};
use serde::Serialize;

use super::drain::DrainBatch;
use super::file::RecordingFile;
use super::procfs::{self, Mapping};
use super::programs::StackSource;
use super::python::Interpreter;
use super::stacks::{Keep, StackCounts, StackResolver};

/// Batches the writer may be behind before the drain waits (each is one
/// 50 ms tick, so about two seconds of events held in memory).
pub(super) const MAX_IN_FLIGHT: usize = 40;

enum Msg {
    Events(DrainBatch),
    /// A metadata record, already serialized.
    Record(u32, Vec<u8>),
    /// A process's executable mappings, for naming its frames.
    Maps(u32, Vec<Mapping>),
    /// A child's parent, whose mappings name its frames until it has its own.
    Parent(u32, u32),
    /// A process's CPython, whose frames the writer names.
    Python(Arc<Interpreter>),
    Flush,
}

/// The drain's end of the pipeline: what the session writes goes here.
pub(super) struct Pipeline {
    tx: Option<mpsc::Sender<Msg>>,
    /// Batches the writer is done with, for the drain to fill again.
    recycled: mpsc::Receiver<DrainBatch>,
    in_flight: Arc<AtomicUsize>,
    stack_counts: Arc<Mutex<StackCounts>>,
    writer: Option<JoinHandle<Result<RecordingFile>>>,
    path: PathBuf,
}

impl Pipeline {
    /// Starts the writer thread, which owns `out` (and the stack map, when
    /// stacks are sampled, with the kernel's [`stack_mode`]) until
    /// [`Pipeline::finish`].
    ///
    /// [`stack_mode`]: profiler_ebpf::stack_mode
    pub(super) fn start(
        out: RecordingFile,
        stacks: Option<(StackSource, u32)>,
    ) -> Result<Pipeline> {
        let (tx, rx) = mpsc::channel();
        let (recycle, recycled) = mpsc::channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let stack_counts = Arc::new(Mutex::new(StackCounts::default()));
        let path = out.path().to_path_buf();
        let (in_flight_stage, counts_stage) = (Arc::clone(&in_flight), Arc::clone(&stack_counts));
        let writer = std::thread::Builder::new()
            .name("tprof-writer".into())
            // The resolver is made on the thread: blazesym's caches are
            // not Send.
            .spawn(move || {
                let stage = Stage {
                    out,
                    stacks: stacks
                        .map(|(source, mode)| StackResolver::new(source, mode, counts_stage)),
                    in_flight: in_flight_stage,
                    recycle,
                };
                stage.run(rx)
            })
            .context("cannot start the recording's writer thread")?;
        Ok(Pipeline {
            tx: Some(tx),
            recycled,
            in_flight,
            stack_counts,
            writer: Some(writer),
            path,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The writer is too far behind for another batch.
    pub(super) fn is_full(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT
    }

    /// What the writer counted of the stacks it resolved so far.
    pub(super) fn stack_counts(&self) -> StackCounts {
        self.stack_counts.lock().map(|c| *c).unwrap_or_default()
    }

    /// An empty batch to drain into (one the writer is done with, if any).
    pub(super) fn empty_batch(&self) -> DrainBatch {
        self.recycled.try_recv().unwrap_or_default()
    }

    pub(super) fn send_events(&mut self, batch: DrainBatch) -> Result<()> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.send(Msg::Events(batch))
    }

    pub(super) fn write_json<T: Serialize>(&mut self, kind: u32, value: &T) -> Result<()> {
        let payload = serde_json::to_vec(value).context("cannot encode a recording record")?;
        self.send(Msg::Record(kind, payload))
    }

    /// Reads `pid`'s executable mappings now, for naming its frames later.
    pub(super) fn snapshot_maps(&mut self, pid: u32) -> Result<()> {
        match procfs::exec_maps(pid) {
            Some(maps) => self.send(Msg::Maps(pid, maps)),
            None => Ok(()), // gone; keep what we had
        }
    }

    pub(super) fn set_parent(&mut self, child: u32, parent: u32) -> Result<()> {
        self.send(Msg::Parent(child, parent))
    }

    pub(super) fn add_interpreter(&mut self, interp: Arc<Interpreter>) -> Result<()> {
        self.send(Msg::Python(interp))
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        self.send(Msg::Flush)
    }

    /// Waits for the writer to write everything sent, and takes the file
    /// back for the last records, with the final stack counts.
    pub(super) fn finish(mut self) -> Result<(RecordingFile, StackCounts)> {
        self.tx = None; // the writer stops when the queue is empty
        let file = self.join()?;
        Ok((file, self.stack_counts()))
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(msg).is_ok());
        if sent {
            return Ok(());
        }
        // The writer stopped: it failed, and says why.
        self.tx = None;
        match self.join() {
            Ok(_) => Err(anyhow!("the recording's writer stopped")),
            Err(err) => Err(err),
        }
    }

    fn join(&mut self) -> Result<RecordingFile> {
        let writer = self
            .writer
            .take()
            .ok_or_else(|| anyhow!("the recording's writer already stopped"))?;
        writer
            .join()
            .map_err(|_| anyhow!("the recording's writer thread panicked"))?
    }
}

/// The writer thread.
struct Stage {
    out: RecordingFile,
    stacks: Option<StackResolver>,
    in_flight: Arc<AtomicUsize>,
    recycle: mpsc::Sender<DrainBatch>,
}

impl Stage {
    fn run(mut self, rx: mpsc::Receiver<Msg>) -> Result<RecordingFile> {
        for msg in rx {
            match msg {
                Msg::Events(mut batch) => {
                    let written = self.events(&mut batch);
                    self.in_flight.fetch_sub(1, Ordering::AcqRel);
                    let _ = self.recycle.send(batch);
                    written?;
                }
                Msg::Record(kind, payload) => self.out.write_record(kind, &payload)?,
                Msg::Maps(pid, maps) => {
                    if let Some(stacks) = &mut self.stacks {
                        stacks.add_maps(pid, maps);
                    }
                }
                Msg::Parent(child, parent) => {
                    if let Some(stacks) = &mut self.stacks {
                        stacks.set_parent(child, parent);
                    }
                }
                Msg::Python(interp) => {
                    if let Some(stacks) = &mut self.stacks {
                        stacks.add_interpreter(interp);
                    }
                }
                Msg::Flush => self.out.flush()?,
            }
        }
        Ok(self.out)
    }

    /// One drain's events: their stacks interned and written first, then
    /// the events with the recording's stack ids (stack copies are used up
    /// here, not written).
    fn events(&mut self, batch: &mut DrainBatch) -> Result<()> {
        if let Some(stacks) = &mut self.stacks {
            batch.rewrite(|event| stacks.rewrite(event) == Keep::Yes);
            stacks.write_new(&mut self.out)?;
        }
        for event in batch.in_order() {
            self.out.push_event(event)?;
        }
        Ok(())
    }
}

//! The stages after the drain, and the queue that feeds them. The drain
//! (the session's thread) empties the ring buffers every tick and sends
//! each batch here; the resolve stage ([`Resolve`]: unwinding the user
//! stack copies, reading the stack map, naming new frames) turns its
//! stacks into the recording's; the write stage hands the result to the
//! [`Sink`]. Naming frames can take seconds the first time a large library
//! (libtorch) is seen; on the drain's thread that stalled the drains until
//! the ring buffer overflowed.
//!
//! Where the resolve stage runs is a [`Threads`] choice: on the writer's
//! thread, each batch resolved then written, or on a thread of its own
//! (`tprof-unwind`) that hands resolved batches to the writer's
//! (`tprof-writer`), so a large batch's unwinding overlaps the writing of
//! the one before.
//!
//! What the session sends during a tick waits in the pipeline until the
//! tick's flush and crosses to the stages as one message: sent one by one
//! (the batch, the maps of new processes, the samples, the flush), each
//! woke the stage's thread again, a futex wake and a switch each, four a
//! tick on the real job.
//!
//! The queue is bounded by batches in flight, from the drain until the
//! sink has them: when the stages are [`MAX_IN_FLIGHT`] batches behind, the
//! drain leaves the events in the ring buffer for a tick, so any loss
//! happens there, where the kernel counts it per event kind. Records the
//! session writes (process snapshots, samples, GPU series) go through the
//! same queue and stages, so the sink gets them in order with the events;
//! what the resolve stage must know of the processes ([`Fact`]s) too, so
//! each batch is resolved against what was known when it was drained.

use std::{
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
use super::procfs::{self, Mapping};
use super::python::Interpreter;
use super::resolve::{Fact, Resolve, Resolved, StackSetup};
use super::sink::{Sink, encode};
use super::stacks::StackCounts;

/// Batches the stages may be behind before the drain waits (each is one
/// 50 ms tick, so about two seconds of events held in memory).
pub(super) const MAX_IN_FLIGHT: usize = 40;

/// Where the resolve stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Threads {
    /// On the writer's thread: each batch resolved, then written.
    Shared,
    /// On a thread of its own, ahead of the writer's.
    Split,
}

/// Set to 1 to run the resolve stage on a thread of its own
/// ([`Threads::Split`]) rather than on the writer's: for comparing the two
/// (docs/benchmarks.md), and for the tests of the split.
pub(super) const UNWIND_THREAD_ENV: &str = "TPROF_UNWIND_THREAD";

impl Threads {
    /// What [`UNWIND_THREAD_ENV`] asks for; [`Threads::Shared`] by default.
    pub(super) fn from_env() -> Threads {
        match std::env::var_os(UNWIND_THREAD_ENV) {
            Some(v) if v == "1" => Threads::Split,
            _ => Threads::Shared,
        }
    }
}

/// What the session sends down the pipeline.
enum Msg {
    Events(DrainBatch),
    Fact(Fact),
    /// A metadata record, already encoded.
    Record(u32, Vec<u8>),
    Flush,
}

/// What the resolve stage hands the write stage.
enum Out {
    Events(Resolved),
    Record(u32, Vec<u8>),
    Flush,
}

/// A running stage thread, which hands the sink back when it ends.
type Stage = JoinHandle<Result<Box<dyn Sink>>>;

/// The drain's end of the pipeline: what the session writes goes here.
pub(super) struct Pipeline {
    tx: Option<mpsc::Sender<Vec<Msg>>>,
    /// Sent since the last flush, handed over at the next.
    pending: Vec<Msg>,
    /// Batches the sink is done with, for the drain to fill again.
    recycled: mpsc::Receiver<DrainBatch>,
    in_flight: Arc<AtomicUsize>,
    stack_counts: Arc<Mutex<StackCounts>>,
    /// The resolve stage's thread (which owns the writer's, if apart).
    stages: Option<Stage>,
}

impl Pipeline {
    /// Starts the stage threads, which own `sink` (and the stack map, when
    /// stacks are sampled, with the kernel's [`stack_mode`]) until
    /// [`Pipeline::finish`].
    ///
    /// [`stack_mode`]: profiler_ebpf::stack_mode
    pub(super) fn start(
        sink: Box<dyn Sink>,
        stacks: Option<StackSetup>,
        threads: Threads,
    ) -> Result<Pipeline> {
        let (tx, rx) = mpsc::channel();
        let (recycle, recycled) = mpsc::channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let stack_counts = Arc::new(Mutex::new(StackCounts::default()));
        let write = WriteStage {
            sink,
            in_flight: Arc::clone(&in_flight),
            recycle,
        };
        let counts = Arc::clone(&stack_counts);
        // The resolver is made on its thread: blazesym's caches are not
        // Send.
        let stages = match threads {
            Threads::Shared => spawn("tprof-writer", move || {
                run_stages(rx, Resolve::new(stacks, counts), Downstream::Here(write))
            })?,
            Threads::Split => {
                let (out_tx, out_rx) = mpsc::channel();
                let writer = spawn("tprof-writer", move || write.run(out_rx))?;
                let downstream = Downstream::Thread { tx: out_tx, writer };
                spawn("tprof-unwind", move || {
                    run_stages(rx, Resolve::new(stacks, counts), downstream)
                })?
            }
        };
        Ok(Pipeline {
            tx: Some(tx),
            pending: Vec::new(),
            recycled,
            in_flight,
            stack_counts,
            stages: Some(stages),
        })
    }

    /// The stages are too far behind for another batch.
    pub(super) fn is_full(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT
    }

    /// What the resolve stage counted of the stacks it resolved so far.
    pub(super) fn stack_counts(&self) -> StackCounts {
        self.stack_counts.lock().map(|c| *c).unwrap_or_default()
    }

    /// An empty batch to drain into (one the sink is done with, if any).
    pub(super) fn empty_batch(&self) -> DrainBatch {
        self.recycled.try_recv().unwrap_or_default()
    }

    pub(super) fn send_events(&mut self, batch: DrainBatch) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.pending.push(Msg::Events(batch));
    }

    pub(super) fn write_json<T: Serialize>(&mut self, kind: u32, value: &T) -> Result<()> {
        let payload = encode(value)?;
        self.pending.push(Msg::Record(kind, payload));
        Ok(())
    }

    /// Reads `pid`'s executable mappings now, for naming its frames later.
    pub(super) fn snapshot_maps(&mut self, pid: u32) {
        // None: gone; keep what we had.
        if let Some(maps) = procfs::exec_maps(pid) {
            self.send_maps(pid, maps);
        }
    }

    /// `pid`'s executable mappings as just read, for naming its frames.
    pub(super) fn send_maps(&mut self, pid: u32, maps: Vec<Mapping>) {
        self.pending.push(Msg::Fact(Fact::Maps(pid, maps)));
    }

    pub(super) fn set_parent(&mut self, child: u32, parent: u32) {
        self.pending.push(Msg::Fact(Fact::Parent { child, parent }));
    }

    pub(super) fn add_interpreter(&mut self, interp: Arc<Interpreter>) {
        self.pending.push(Msg::Fact(Fact::Python(interp)));
    }

    /// Hands everything sent since the last flush to the stages, with a
    /// flush of the sink after it; says why when the stages stopped.
    pub(super) fn flush(&mut self) -> Result<()> {
        self.pending.push(Msg::Flush);
        self.hand_over()
    }

    /// Waits for the stages to hand everything sent to the sink, and takes
    /// the sink back for the last records, with the final stack counts.
    pub(super) fn finish(mut self) -> Result<(Box<dyn Sink>, StackCounts)> {
        self.hand_over()?;
        self.tx = None; // the stages stop when the queue is empty
        let sink = self.join()?;
        Ok((sink, self.stack_counts()))
    }

    fn hand_over(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let msgs = std::mem::take(&mut self.pending);
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(msgs).is_ok());
        if sent {
            return Ok(());
        }
        // The stages stopped: one failed, and says why.
        self.tx = None;
        match self.join() {
            Ok(_) => Err(anyhow!("the recording's writer stopped")),
            Err(err) => Err(err),
        }
    }

    fn join(&mut self) -> Result<Box<dyn Sink>> {
        let stages = self
            .stages
            .take()
            .ok_or_else(|| anyhow!("the recording's writer already stopped"))?;
        join(stages)
    }
}

/// Dropped on an error's way out: what the session sent since the last
/// flush still goes to the stages, as it did when each message was sent
/// at once.
impl Drop for Pipeline {
    fn drop(&mut self) {
        if let Some(tx) = &self.tx
            && !self.pending.is_empty()
        {
            let _ = tx.send(std::mem::take(&mut self.pending));
        }
    }
}

fn spawn(
    name: &str,
    stage: impl FnOnce() -> Result<Box<dyn Sink>> + Send + 'static,
) -> Result<Stage> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(stage)
        .with_context(|| format!("cannot start the recording's {name} thread"))
}

fn join(stage: Stage) -> Result<Box<dyn Sink>> {
    stage
        .join()
        .map_err(|_| anyhow!("the recording's writer thread panicked"))?
}

/// The resolve stage's loop: resolves each batch and hands everything on,
/// in order. Ends when the session's end of the queue is dropped, or when
/// the write stage fails, with the write stage's own error.
fn run_stages(
    rx: mpsc::Receiver<Vec<Msg>>,
    mut resolve: Resolve,
    mut downstream: Downstream,
) -> Result<Box<dyn Sink>> {
    let handed = hand_on(rx, &mut resolve, &mut downstream);
    // On the writer's failure, joining it says why better than "stopped".
    let sink = downstream.finish();
    match (handed, sink) {
        (Ok(()), sink) => sink,
        (Err(_), Err(cause)) => Err(cause),
        (Err(err), Ok(_)) => Err(err),
    }
}

fn hand_on(
    rx: mpsc::Receiver<Vec<Msg>>,
    resolve: &mut Resolve,
    downstream: &mut Downstream,
) -> Result<()> {
    for msg in rx.into_iter().flatten() {
        match msg {
            Msg::Events(batch) => downstream.take(Out::Events(resolve.resolve(batch)))?,
            Msg::Fact(fact) => resolve.learn(fact),
            Msg::Record(kind, payload) => downstream.take(Out::Record(kind, payload))?,
            Msg::Flush => downstream.take(Out::Flush)?,
        }
    }
    Ok(())
}

/// Where the resolve stage hands its output: the write stage itself, on
/// the same thread, or the write stage's thread.
enum Downstream {
    Here(WriteStage),
    Thread {
        tx: mpsc::Sender<Out>,
        writer: Stage,
    },
}

impl Downstream {
    fn take(&mut self, out: Out) -> Result<()> {
        match self {
            Downstream::Here(write) => write.take(out),
            Downstream::Thread { tx, .. } => tx
                .send(out)
                .map_err(|_| anyhow!("the recording's writer stopped")),
        }
    }

    /// Everything handed on is in the sink: the sink, back.
    fn finish(self) -> Result<Box<dyn Sink>> {
        match self {
            Downstream::Here(write) => Ok(write.sink),
            Downstream::Thread { tx, writer } => {
                drop(tx); // the writer stops when its queue is empty
                join(writer)
            }
        }
    }
}

/// The write stage: hands each item to the sink, and a written batch back
/// to the drain.
struct WriteStage {
    sink: Box<dyn Sink>,
    in_flight: Arc<AtomicUsize>,
    recycle: mpsc::Sender<DrainBatch>,
}

impl WriteStage {
    fn run(mut self, rx: mpsc::Receiver<Out>) -> Result<Box<dyn Sink>> {
        for out in rx {
            self.take(out)?;
        }
        Ok(self.sink)
    }

    fn take(&mut self, out: Out) -> Result<()> {
        match out {
            Out::Events(batch) => {
                let written = self.sink.events(&batch);
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                let _ = self.recycle.send(batch.events);
                written
            }
            Out::Record(kind, payload) => self.sink.record(kind, &payload),
            Out::Flush => self.sink.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a sink was handed, in order.
    #[derive(Default)]
    struct Log {
        items: Vec<String>,
        /// Fail at a record handed after this many items.
        fail_at: Option<usize>,
    }

    struct TestSink(Arc<Mutex<Log>>);

    impl Sink for TestSink {
        fn record(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
            let mut log = self.0.lock().unwrap();
            if log.fail_at == Some(log.items.len()) {
                anyhow::bail!("disk full");
            }
            let item = format!("record {kind} {}", String::from_utf8_lossy(payload));
            log.items.push(item);
            Ok(())
        }

        fn events(&mut self, batch: &Resolved) -> Result<()> {
            let tags: Vec<u8> = batch.events.in_order().map(|e| e[8]).collect();
            let item = format!("events {}", String::from_utf8_lossy(&tags));
            self.0.lock().unwrap().items.push(item);
            Ok(())
        }

        fn flush(&mut self) -> Result<()> {
            self.0.lock().unwrap().items.push("flush".into());
            Ok(())
        }

        fn finish(self: Box<Self>) -> Result<()> {
            self.0.lock().unwrap().items.push("finish".into());
            Ok(())
        }
    }

    /// A batch of one event per tag, in timestamp order.
    fn batch(pipeline: &Pipeline, tags: &[u8]) -> DrainBatch {
        let mut batch = pipeline.empty_batch();
        batch.gather(|push| {
            for (ts, &tag) in tags.iter().enumerate() {
                let mut event = (ts as u64 + 1).to_le_bytes().to_vec();
                event.push(tag);
                push(&event);
            }
        });
        batch
    }

    /// Records, batches and flushes reach the sink in the order they were
    /// sent, whichever thread resolves; the sink comes back at the end.
    #[test]
    fn the_sink_gets_everything_in_order_on_either_threading() {
        for threads in [Threads::Shared, Threads::Split] {
            let log = Arc::new(Mutex::new(Log::default()));
            let sink = Box::new(TestSink(Arc::clone(&log)));
            let mut pipeline = Pipeline::start(sink, None, threads).unwrap();
            pipeline.write_json(1, &"header").unwrap();
            let events = batch(&pipeline, b"ab");
            pipeline.send_events(events);
            pipeline.set_parent(2, 1);
            pipeline.write_json(2, &7).unwrap();
            pipeline.flush().unwrap();
            let events = batch(&pipeline, b"c");
            pipeline.send_events(events);
            let (sink, _) = pipeline.finish().unwrap();
            sink.finish().unwrap();
            assert_eq!(
                log.lock().unwrap().items,
                [
                    "record 1 \"header\"",
                    "events ab",
                    "record 2 7",
                    "flush",
                    "events c",
                    "finish"
                ],
                "{threads:?}"
            );
        }
    }

    /// A sink that fails stops the pipeline with its own error, which the
    /// session sees at its next flush or at the end, on either threading.
    #[test]
    fn a_failing_sink_stops_the_pipeline_with_its_error() {
        for threads in [Threads::Shared, Threads::Split] {
            let log = Arc::new(Mutex::new(Log {
                fail_at: Some(2), // a record, a flush, then this record
                ..Log::default()
            }));
            let sink = Box::new(TestSink(Arc::clone(&log)));
            let mut pipeline = Pipeline::start(sink, None, threads).unwrap();
            let mut sent = Ok(());
            for i in 0..1000 {
                sent = pipeline.write_json(1, &i).and_then(|()| pipeline.flush());
                if sent.is_err() {
                    break;
                }
            }
            let err = match sent {
                Err(err) => err,
                Ok(()) => pipeline.finish().err().expect("the sink failed"),
            };
            assert_eq!(format!("{err:#}"), "disk full", "{threads:?}");
        }
    }

    /// A pipeline dropped on an error's way out still hands the stages
    /// what was sent since the last flush.
    #[test]
    fn what_was_sent_since_the_flush_is_handed_over_when_dropped() {
        let log = Arc::new(Mutex::new(Log::default()));
        let sink = Box::new(TestSink(Arc::clone(&log)));
        let mut pipeline = Pipeline::start(sink, None, Threads::Shared).unwrap();
        pipeline.write_json(1, &"before the error").unwrap();
        drop(pipeline);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.lock().unwrap().items.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(log.lock().unwrap().items, ["record 1 \"before the error\""]);
    }

    /// A batch the sink took counts no more against the bound, and is
    /// handed back for the next drain.
    #[test]
    fn written_batches_come_back_to_the_drain() {
        let log = Arc::new(Mutex::new(Log::default()));
        let sink = Box::new(TestSink(Arc::clone(&log)));
        let mut pipeline = Pipeline::start(sink, None, Threads::Split).unwrap();
        for _ in 0..MAX_IN_FLIGHT * 2 {
            let events = batch(&pipeline, b"x");
            pipeline.send_events(events);
        }
        // Sent to the end of the queue; then drained.
        pipeline.flush().unwrap();
        while pipeline.in_flight.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
        assert!(!pipeline.is_full());
        assert!(pipeline.recycled.try_recv().is_ok());
        pipeline.finish().unwrap();
    }
}

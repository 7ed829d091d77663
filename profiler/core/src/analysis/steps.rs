//! Steps: the job's training iterations, each from when the trainer asked
//! for its batch to when it asked for the next, with what its time went to;
//! and stall attribution: for the batches the trainer waited for, what the
//! worker that delivered each was doing meanwhile.
//!
//! Three detectors; the first that sees iterations wins (`StepSource`):
//!
//! - `torch_marks`: PyTorch's own markers, from a uprobe on libtorch.
//!   Every `DataLoader` iterator's `__next__` opens a `record_function`
//!   region ("enumerate(DataLoader)#…"), whether or not a profiler runs,
//!   and every optimizer step another ("Optimizer.step#…"); the autograd
//!   engine is entered at every backward pass. An iteration begins at the
//!   first `__next__` after a backward pass or optimizer step (an epoch's
//!   end calls `__next__` twice: the exhausted iterator's, then the new
//!   one's), whether its batch was ready or waited for. The first
//!   iterator's worker start comes before its first `__next__`: startup.
//! - `pipe_reads`: for jobs without libtorch, the trainer thread's reads
//!   of pipes that data-worker processes feed (a framework of processes
//!   and pipes, as PyTorch's DataLoader is underneath): each message is a
//!   batch, and a step begins when the trainer asked for it (the start of
//!   its wait for the read, or the read itself).
//! - `waited_batches`: recordings made before the two above (or without
//!   pipe tracing): the batches the trainer waited for, as the wakeups by
//!   their producers show. A ready batch is not seen, so these steps are
//!   not iterations; the confidence says so.
//!
//! A batch delivery is when the trainer, blocked, is woken by a data worker
//! (or by the pin-memory thread, which was itself woken by a worker).
//! Wakeups by the same thread a few hundred microseconds of trainer CPU
//! apart belong to one delivery (a message read in two parts). A step's
//! data wait is the waiting for the deliveries inside it; a batch that was
//! ready is a step with none.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::roles::{Role, Roles};
use crate::model::{Breakdown, Mark, Model, ProcessKey, Thread, ThreadState, WakeEdge};
use crate::recording::{Frame, FrameKind, StackSample};

const NS: f64 = 1e9;
/// Trainer CPU time between two wakeups by the same producer below which
/// they are one delivery.
const MERGE_CPU_NS: u64 = 500_000;
/// How far back the pin thread's own wakeup by a worker may lie.
const PIN_CHAIN_NS: u64 = 1_000_000_000;
/// Slowest steps listed.
const SLOWEST: usize = 5;

/// A batch delivery: the trainer woken by a producer after waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Delivery {
    pub ts_ns: u64,
    /// The thread that woke the trainer.
    pub from_tid: u32,
    /// The worker process blamed for the wait (the waker's, or for the pin
    /// thread the worker that last woke it).
    pub worker_pid: u32,
    /// When the trainer's wait for it began.
    pub wait_start_ns: u64,
    /// Trainer time blocked waiting for it.
    pub data_wait_ns: u64,
}

/// One step: one training iteration (or, from `waited_batches`, one batch
/// waited for to the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Step {
    pub start_ns: u64,
    pub end_ns: u64,
    /// The trainer's time waiting for its batch: the deliveries in the
    /// step; 0 for a batch that was ready.
    pub data_wait_ns: u64,
    /// The last waited-for delivery in the step: when the wait began and
    /// when the batch arrived (both 0 for a ready batch).
    pub wait_start_ns: u64,
    pub delivered_ns: u64,
    /// The trainer's time in CUDA syncs (stream, device, event) and
    /// synchronous copies during the step; 0 when CUDA calls were not seen.
    pub cuda_sync_ns: u64,
    /// The trainer's time in the step, by state.
    #[serde(skip)]
    pub trainer: Breakdown,
    /// What the delivering workers did during the data wait.
    #[serde(skip)]
    pub blame: Breakdown,
    /// The worker process that delivered its batch: the one it waited
    /// for, or the writer of the pipe message it read; 0 when unknown (a
    /// ready batch the pin-memory thread fetched, or no workers).
    pub worker_pid: u32,
    /// The step's end is an estimate (the last step: its start plus the
    /// median of the others, at least to its last training mark).
    pub end_estimated: bool,
}

impl Step {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// What most of the step's time went to, and how much: `data_wait`,
    /// `cuda_sync`, `on_cpu`, `runnable`, or the largest other wait
    /// (`io`, `futex`, `sleep`).
    pub fn cause(&self) -> (&'static str, u64) {
        let t = &self.trainer;
        let blocked_other = t
            .blocked()
            .saturating_sub(self.data_wait_ns)
            .saturating_sub(self.cuda_sync_ns);
        let other = if t.io >= t.futex && t.io >= t.sleep {
            "io"
        } else if t.futex >= t.sleep {
            "futex"
        } else {
            "sleep"
        };
        [
            ("data_wait", self.data_wait_ns),
            ("cuda_sync", self.cuda_sync_ns),
            ("on_cpu", t.on_cpu),
            ("runnable", t.runnable),
            (other, blocked_other),
        ]
        .into_iter()
        .max_by_key(|&(_, ns)| ns)
        .expect("five causes")
    }
}

/// Which detector defined the steps, and how far they are iterations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StepSource {
    /// `torch_marks`, `pipe_reads`, `waited_batches`, or `none`.
    pub detector: &'static str,
    /// `high` (one training iteration each, framed by the framework's own
    /// markers), `medium` (one batch each, every batch seen, not framed by
    /// a training step), `low` (only the batches waited for); None
    /// without steps.
    pub confidence: Option<&'static str>,
    /// Why these steps, or why none, in a sentence.
    pub why: String,
}

/// A stretch of the window outside the steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Phase {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Phase {
    pub fn duration_s(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / NS
    }
}

/// Shares of the delivering workers' time during data waits, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Blame {
    pub on_cpu: f64,
    pub runnable: f64,
    pub io: f64,
    pub futex: f64,
    pub sleep: f64,
}

impl Blame {
    fn from_breakdown(b: &Breakdown) -> Blame {
        let total = b.total() as f64;
        let share = |x: u64| if total > 0.0 { x as f64 / total } else { 0.0 };
        Blame {
            on_cpu: share(b.on_cpu),
            runnable: share(b.runnable),
            io: share(b.io),
            futex: share(b.futex),
            sleep: share(b.sleep),
        }
    }

    /// The leading cause and its share.
    pub fn leading(&self) -> (&'static str, f64) {
        [
            ("on_cpu", self.on_cpu),
            ("runnable", self.runnable),
            ("io", self.io),
            ("futex", self.futex),
            ("sleep", self.sleep),
        ]
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("five causes")
    }
}

/// The trainer's state while the GPUs idled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GpuIdleAlignment {
    pub gpu_idle_s: f64,
    /// Of which the trainer was waiting for data.
    pub trainer_data_wait_s: f64,
    pub trainer_on_cpu_s: f64,
    pub trainer_runnable_s: f64,
    /// Blocked for anything but data (IO, locks, GPU syncs, …).
    pub trainer_other_blocked_s: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepStats {
    pub trainer_tid: Option<u32>,
    pub source: StepSource,
    pub count: usize,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    /// Before the first step (imports, setup), and after the last.
    pub startup: Option<Phase>,
    pub teardown: Option<Phase>,
    /// Share of the steady state (first step's start to last step's end;
    /// the trainer's life without steps) spent waiting for data.
    pub data_wait_frac: f64,
    pub data_wait_s: f64,
    pub blame: Blame,
    /// Leaf functions of the delivering workers' on-CPU samples, by share.
    pub worker_top_functions: Vec<(String, f64)>,
    pub gpu_idle: Option<GpuIdleAlignment>,
    pub deliveries: Vec<Delivery>,
    pub steps: Vec<Step>,
    /// Indices into `steps` of the slowest, slowest first.
    pub slowest: Vec<usize>,
}

impl StepStats {
    /// The steady state: the steps' span, when there are steps.
    pub fn steady(&self) -> Option<(u64, u64)> {
        Some((self.steps.first()?.start_ns, self.steps.last()?.end_ns))
    }
}

pub fn steps(model: &Model, roles: &Roles, gpu_idle: &[(u64, u64)]) -> StepStats {
    let trainer_tid = mark_trainer(model).or(roles.trainer_tid());
    let Some(trainer) = trainer_tid.and_then(|tid| longest_thread(model, tid)) else {
        return StepStats {
            source: StepSource {
                detector: "none",
                confidence: None,
                why: "no trainer thread was found".into(),
            },
            ..StepStats::default()
        };
    };
    let deliveries = deliveries(model, roles, trainer);
    let messages = worker_messages(model, roles, trainer.tid);
    let (bounds, source) = detect(model, trainer, &deliveries, &messages);
    let steps: Vec<Step> = bounds
        .iter()
        .map(|&b| step(model, trainer, &deliveries, &messages, b))
        .collect();
    // Percentiles of the steps whose end was seen: the last one's is an
    // estimate (nothing marks it), which on a job whose iterations
    // alternate between two lengths would move the median by itself.
    let mut durations: Vec<u64> = steps
        .iter()
        .filter(|s| !s.end_estimated)
        .map(Step::duration_ns)
        .collect();
    if durations.is_empty() {
        durations = steps.iter().map(Step::duration_ns).collect();
    }
    durations.sort_unstable();
    let (steady_start, steady_end) = match (steps.first(), steps.last()) {
        (Some(f), Some(l)) => (f.start_ns, l.end_ns),
        _ => (trainer.start_ns, trainer.end_ns),
    };
    let in_steady: Vec<&Delivery> = deliveries
        .iter()
        .filter(|d| d.ts_ns > steady_start && d.ts_ns <= steady_end)
        .collect();
    let data_wait_ns: u64 = in_steady.iter().map(|d| d.data_wait_ns).sum();
    let mut blame = Breakdown::default();
    for d in &in_steady {
        blame.add(&worker_breakdown(model, d));
    }
    let steady = steady_end.saturating_sub(steady_start).max(1) as f64;
    // The delivering processes by key: a pid a worker held may be another
    // process's before or after.
    let workers: HashSet<ProcessKey> = in_steady
        .iter()
        .filter_map(|d| {
            model
                .process_of(d.worker_pid, d.ts_ns)
                .map(crate::model::Process::key)
        })
        .collect();
    let mut slowest: Vec<usize> = (0..steps.len()).collect();
    slowest.sort_by_key(|&i| (std::cmp::Reverse(steps[i].duration_ns()), i));
    slowest.truncate(SLOWEST);
    StepStats {
        trainer_tid: Some(trainer.tid),
        source,
        count: steps.len(),
        p50_s: percentile(&durations, 0.50),
        p90_s: percentile(&durations, 0.90),
        p99_s: percentile(&durations, 0.99),
        startup: steps.first().map(|f| Phase {
            start_ns: model.window_start_ns,
            end_ns: f.start_ns,
        }),
        teardown: steps.last().map(|l| Phase {
            start_ns: l.end_ns,
            end_ns: model.window_end_ns.max(l.end_ns),
        }),
        data_wait_frac: (data_wait_ns as f64 / steady).min(1.0),
        data_wait_s: data_wait_ns as f64 / NS,
        blame: Blame::from_breakdown(&blame),
        worker_top_functions: top_functions(model, &workers, 3),
        gpu_idle: align_gpu_idle(trainer, &deliveries, gpu_idle),
        deliveries,
        steps,
        slowest,
    }
}

/// The thread with the most DataLoader marks, if any.
fn mark_trainer(model: &Model) -> Option<u32> {
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for m in model.marks.iter().filter(|m| is_loader_mark(m)) {
        *counts.entry(m.tid).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(tid, n)| (n, std::cmp::Reverse(tid)))
        .map(|(tid, _)| tid)
}

fn is_loader_mark(m: &Mark) -> bool {
    m.what == profiler_ebpf::mark::RECORD_FUNCTION
        && m.name
            .as_bytes()
            .starts_with(profiler_ebpf::mark::LOADER_PREFIX)
}

/// A backward pass or an optimizer step: the work of an iteration.
fn is_training_mark(m: &Mark) -> bool {
    m.what == profiler_ebpf::mark::BACKWARD
        || (m.what == profiler_ebpf::mark::RECORD_FUNCTION && m.name.starts_with("Optimizer.step"))
}

/// A step's start, end, and whether its end is an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bound {
    start: u64,
    end: u64,
    estimated: bool,
}

fn detect(
    model: &Model,
    trainer: &Thread,
    deliveries: &[Delivery],
    messages: &[Message],
) -> (Vec<Bound>, StepSource) {
    if let Some(found) = from_marks(model, trainer) {
        return found;
    }
    let probes = model.step_probes.as_ref();
    // Another tracked process's DataLoader made the kernel stop tracing
    // pipe reads (`StepProbes::pipes_until_ns`): this trainer's are there
    // only until then.
    let pipes_until = probes.and_then(|p| p.pipes_until_ns);
    let until_marks = " (pipe reads were traced until a tracked process's DataLoader \
                       gave its first batch, when libtorch's marks took over)";
    if let Some((bounds, mut source)) = from_pipes(trainer, messages) {
        if pipes_until.is_some() {
            source.why.push_str(until_marks);
        }
        return (bounds, source);
    }
    let pipes_traced = probes.is_some_and(|p| p.pipes);
    if !pipes_traced && deliveries.len() >= 2 {
        let bounds = deliveries
            .windows(2)
            .map(|p| Bound {
                start: p[0].ts_ns,
                end: p[1].ts_ns,
                estimated: false,
            })
            .collect();
        let why = match probes {
            None => "this recording predates iteration detection (no libtorch marks, no pipe \
                     reads): steps run from one batch the trainer waited for to the next, and \
                     batches that were ready are not seen"
                .to_string(),
            Some(p) => format!(
                "no libtorch marks, and pipe reads were not traced ({}): steps run from one \
                 batch the trainer waited for to the next, and batches that were ready are not \
                 seen",
                p.pipes_status.as_deref().unwrap_or("off")
            ),
        };
        let source = StepSource {
            detector: "waited_batches",
            confidence: Some("low"),
            why,
        };
        return (bounds, source);
    }
    let torch = if probes.is_some_and(|p| !p.libraries.is_empty()) {
        "its trainer made no training iterations through a PyTorch DataLoader"
    } else {
        "the job did not load libtorch"
    };
    let pipes = if pipes_traced {
        "its trainer read no pipe that data-worker processes feed"
    } else {
        "pipe reads were not traced"
    };
    let until = if pipes_until.is_some() {
        until_marks
    } else {
        ""
    };
    let source = StepSource {
        detector: "none",
        confidence: None,
        why: format!("not a training loop tprof can see: {torch}, and {pipes}{until}"),
    };
    (Vec::new(), source)
}

/// Iterations from the trainer's DataLoader marks (see the module).
fn from_marks(model: &Model, trainer: &Thread) -> Option<(Vec<Bound>, StepSource)> {
    let marks: Vec<&Mark> = model
        .marks
        .iter()
        .filter(|m| m.tid == trainer.tid)
        .collect();
    let trains = marks.iter().any(|m| is_training_mark(m));
    // Each iteration's start and its last training mark.
    let mut iterations: Vec<(u64, Option<u64>)> = Vec::new();
    let mut trained = true;
    for m in &marks {
        if is_training_mark(m) {
            trained = true;
            if let Some(last) = iterations.last_mut() {
                last.1 = Some(m.ts);
            }
        } else if is_loader_mark(m) && (trained || !trains) {
            trained = false;
            iterations.push((m.ts, None));
        }
    }
    // A last `__next__` with no training after it (the StopIteration
    // that ends a `for` loop) is no iteration.
    if trains && iterations.last().is_some_and(|i| i.1.is_none()) {
        iterations.pop();
    }
    if iterations.len() < 2 {
        return None;
    }
    let mut bounds: Vec<Bound> = iterations
        .windows(2)
        .map(|w| Bound {
            start: w[0].0,
            end: w[1].0,
            estimated: false,
        })
        .collect();
    if trains {
        // The last iteration ends unmarked: as long as a typical one, and
        // at least past its last backward pass or optimizer step.
        let (start, trained_at) = *iterations.last().expect("two or more");
        let end = start
            .saturating_add(median_len(&bounds))
            .max(trained_at.unwrap_or(start))
            .min(trainer.end_ns.max(start));
        bounds.push(Bound {
            start,
            end,
            estimated: true,
        });
    }
    let (confidence, why) = if trains {
        (
            "high",
            "PyTorch's own markers (uprobes on libtorch): each iteration begins at the \
             DataLoader's __next__ that follows a backward pass or optimizer step",
        )
    } else {
        (
            "medium",
            "PyTorch's DataLoader __next__ marks, one step per batch: no backward pass or \
             optimizer step was seen, so these are batches, not training iterations",
        )
    };
    let source = StepSource {
        detector: "torch_marks",
        confidence: Some(confidence),
        why: why.into(),
    };
    Some((bounds, source))
}

fn median_len(bounds: &[Bound]) -> u64 {
    let mut lens: Vec<u64> = bounds
        .iter()
        .map(|b| b.end.saturating_sub(b.start))
        .collect();
    lens.sort_unstable();
    lens.get(lens.len() / 2).copied().unwrap_or(0)
}

/// A message read from a data worker's pipe: when the reader took it and
/// who wrote it (0 when unknown).
#[derive(Debug, Clone, Copy)]
struct Message {
    ts: u64,
    /// When the reader asked for it: where its wait began, for a message
    /// it waited for; the read, for one that was there.
    asked_ns: u64,
    writer_pid: u32,
}

/// The messages `reader` read from pipes data workers feed. Writes are not
/// traced (see `profiler-ebpf/src/programs/steps.rs`): a pipe is fed by
/// data workers when a read of it ended a wait of the reader that a data
/// worker's wakeup ended, as the first batch's always does. Such a read's
/// writer is that worker; a ready message's is unknown. (The kernel keeps
/// one read per thread per millisecond, so a message read in two parts,
/// a length and its payload, is one event.)
fn worker_messages(model: &Model, roles: &Roles, reader: u32) -> Vec<Message> {
    let Some(thread) = longest_thread(model, reader) else {
        return Vec::new();
    };
    let wakeups: Vec<&WakeEdge> = model.wakeups.iter().filter(|w| w.tid == reader).collect();
    // A pipe is named by its kernel address, which a later pipe may reuse:
    // reads before the process's program began (`tprof record --` holds
    // the command on a pipe until its exec) are of another pipe.
    let exec_ns = model
        .processes
        .get(&thread.pid)
        .and_then(|p| p.exec_ns)
        .unwrap_or(0);
    let reads: Vec<&crate::model::PipeOp> = model
        .pipes
        .iter()
        .filter(|p| !p.write && p.tid == reader && p.ts >= exec_ns)
        .collect();
    // The worker whose wakeup ended the wait that read `n` returned from:
    // the reader's last wakeup before the read, by a data worker, ending
    // a block, with no block and no other read between it and the read.
    let delivered_by = |n: usize| -> Option<(u32, u64)> {
        let ts = reads[n].ts;
        let i = wakeups.partition_point(|w| w.ts <= ts);
        let w = wakeups.get(i.checked_sub(1)?)?;
        let first_read = n == 0 || reads[n - 1].ts < w.ts;
        let from_worker = roles.of_at(w.waker_tid, w.ts) == Role::DataWorker;
        (first_read
            && from_worker
            && was_blocked(thread, w.ts)
            && thread.breakdown(w.ts, ts).blocked() == 0)
            .then(|| (w.waker_tgid, blocked_since(thread, w.ts)))
    };
    let writers: Vec<Option<(u32, u64)>> = (0..reads.len()).map(delivered_by).collect();
    let fed: HashSet<u64> = reads
        .iter()
        .zip(&writers)
        .filter(|(_, w)| w.is_some())
        .map(|(r, _)| r.pipe)
        .collect();
    reads
        .iter()
        .zip(&writers)
        .filter(|(r, _)| fed.contains(&r.pipe))
        .map(|(r, w)| Message {
            ts: r.ts,
            asked_ns: w.map_or(r.ts, |(_, since)| since.min(r.ts)),
            writer_pid: w.map_or(0, |(pid, _)| pid),
        })
        .collect()
}

/// Batches from the trainer's reads of data workers' pipes.
fn from_pipes(trainer: &Thread, messages: &[Message]) -> Option<(Vec<Bound>, StepSource)> {
    if messages.len() < 2 {
        return None;
    }
    // A step begins when the trainer asked for its batch.
    let mut starts: Vec<u64> = Vec::with_capacity(messages.len());
    for m in messages {
        starts.push(m.asked_ns.max(starts.last().copied().unwrap_or(0)));
    }
    let mut bounds: Vec<Bound> = starts
        .windows(2)
        .map(|w| Bound {
            start: w[0],
            end: w[1],
            estimated: false,
        })
        .collect();
    let last = *starts.last().expect("two or more");
    bounds.push(Bound {
        start: last,
        end: last
            .saturating_add(median_len(&bounds))
            .min(trainer.end_ns.max(last)),
        estimated: true,
    });
    let source = StepSource {
        detector: "pipe_reads",
        confidence: Some("medium"),
        why: "no libtorch marks: one step per message the trainer read from a pipe that \
              data-worker processes feed, ready or waited for, from when it asked for it"
            .into(),
    };
    Some((bounds, source))
}

/// A reused tid's longest-lived thread.
fn longest_thread(model: &Model, tid: u32) -> Option<&Thread> {
    model
        .threads
        .iter()
        .filter(|t| t.tid == tid)
        .max_by_key(|t| t.lifetime_ns())
}

/// The trainer's wakeups by producers after waiting, merged per delivery.
fn deliveries(model: &Model, roles: &Roles, trainer: &Thread) -> Vec<Delivery> {
    let exited_at: HashMap<u32, u64> = model
        .threads
        .iter()
        .filter(|t| t.exited)
        .map(|t| (t.tid, t.end_ns))
        .collect();
    let mut out: Vec<Delivery> = Vec::new();
    // The trainer's CPU time since the last delivery began, summed one
    // wakeup at a time (re-measuring from the delivery's start at every
    // wakeup merged into it is quadratic in the wakeups merged).
    let (mut cpu_since, mut summed_to) = (0, 0);
    for w in model.wakeups.iter().filter(|w| w.tid == trainer.tid) {
        let producer = matches!(
            roles.of_at(w.waker_tid, w.ts),
            Role::DataWorker | Role::PinMemory
        );
        // A worker's exit wakes the parent's wait(): not a batch.
        let waker_gone = exited_at.get(&w.waker_tid).is_some_and(|&end| end <= w.ts);
        if !producer || waker_gone || !was_blocked(trainer, w.ts) {
            continue;
        }
        let wait_start = blocked_since(trainer, w.ts);
        if let Some(last) = out.last_mut()
            && last.from_tid == w.waker_tid
        {
            cpu_since += trainer.breakdown(summed_to, w.ts).on_cpu;
            summed_to = w.ts;
            if cpu_since < MERGE_CPU_NS {
                last.data_wait_ns += trainer.breakdown(wait_start, w.ts).blocked();
                continue;
            }
        }
        (cpu_since, summed_to) = (0, w.ts);
        out.push(Delivery {
            ts_ns: w.ts,
            from_tid: w.waker_tid,
            worker_pid: blamed_worker(model, roles, w),
            wait_start_ns: wait_start,
            data_wait_ns: trainer.breakdown(wait_start, w.ts).blocked(),
        });
    }
    out
}

fn was_blocked(t: &Thread, ts: u64) -> bool {
    t.interval_at(ts.saturating_sub(1))
        .is_some_and(|iv| matches!(iv.state, ThreadState::Sleeping | ThreadState::DiskSleep))
}

/// Start of the blocked stretch that ends at `ts`.
fn blocked_since(t: &Thread, ts: u64) -> u64 {
    // Intervals up to and including the one that ends at `ts`.
    let mut i = (t.intervals.partition_by_end(|end| end < ts) + 1).min(t.intervals.len());
    let mut since = ts;
    while i > 0 {
        i -= 1;
        let iv = t.intervals.get(i).expect("in range");
        if !matches!(iv.state, ThreadState::Sleeping | ThreadState::DiskSleep) {
            break;
        }
        since = iv.start_ns;
    }
    since
}

/// The worker process behind a delivery: the waker's, or through the pin
/// thread, the process of whoever last woke the pin thread.
fn blamed_worker(model: &Model, roles: &Roles, w: &WakeEdge) -> u32 {
    if roles.of_at(w.waker_tid, w.ts) != Role::PinMemory {
        return w.waker_tgid;
    }
    model
        .wakeups
        .iter()
        .rfind(|p| {
            p.tid == w.waker_tid
                && p.ts <= w.ts
                && w.ts - p.ts <= PIN_CHAIN_NS
                && roles.of_at(p.waker_tid, p.ts) == Role::DataWorker
        })
        .map_or(w.waker_tgid, |p| p.waker_tgid)
}

/// What the blamed worker process's main thread did during the wait (the
/// thread that decodes; its pool threads show up as its futex waits).
fn worker_breakdown(model: &Model, d: &Delivery) -> Breakdown {
    let thread = model
        .threads
        .iter()
        .filter(|t| t.tid == d.worker_pid || t.tid == d.from_tid)
        .filter(|t| t.start_ns <= d.ts_ns && t.end_ns >= d.wait_start_ns)
        .min_by_key(|t| (t.tid != d.worker_pid, t.tid));
    thread.map_or_else(Breakdown::default, |t| {
        t.breakdown(d.wait_start_ns, d.ts_ns)
    })
}

fn step(
    model: &Model,
    trainer: &Thread,
    deliveries: &[Delivery],
    messages: &[Message],
    b: Bound,
) -> Step {
    let inside: Vec<&Delivery> = deliveries
        .iter()
        .filter(|d| d.ts_ns > b.start && d.ts_ns <= b.end)
        .collect();
    let mut blame = Breakdown::default();
    for d in &inside {
        blame.add(&worker_breakdown(model, d));
    }
    let last = inside.last();
    let worker_pid = last.map(|d| d.worker_pid).filter(|&p| p != 0).or_else(|| {
        messages
            .iter()
            .find(|m| m.ts >= b.start && m.ts < b.end && m.writer_pid != 0)
            .map(|m| m.writer_pid)
    });
    Step {
        start_ns: b.start,
        end_ns: b.end,
        data_wait_ns: inside.iter().map(|d| d.data_wait_ns).sum(),
        wait_start_ns: last.map_or(0, |d| d.wait_start_ns),
        delivered_ns: last.map_or(0, |d| d.ts_ns),
        cuda_sync_ns: cuda_sync_ns(model, trainer.tid, b.start, b.end),
        trainer: trainer.breakdown(b.start, b.end),
        blame,
        worker_pid: worker_pid.unwrap_or(0),
        end_estimated: b.estimated,
    }
}

/// The thread's time inside blocking CUDA calls (syncs, cudaMemcpy) that
/// overlaps [start, end).
fn cuda_sync_ns(model: &Model, tid: u32, start: u64, end: u64) -> u64 {
    model
        .cuda
        .calls
        .iter()
        .filter(|c| c.tid == tid && (c.is_sync() || c.func == profiler_ebpf::cuda_fn::MEMCPY))
        .map(|c| overlap((c.start_ns, c.end_ns), (start, end)))
        .sum()
}

/// Nearest-rank percentile of sorted nanoseconds, in seconds.
fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / NS
}

/// The most common functions of these processes' on-CPU samples: the
/// innermost Python function where the stack has one (what the job's
/// author wrote, with the native code it called beneath), else the leaf.
fn top_functions(model: &Model, workers: &HashSet<ProcessKey>, n: usize) -> Vec<(String, f64)> {
    let Some(table) = &model.stacks else {
        return Vec::new();
    };
    let of_worker = |s: &StackSample| {
        // Formats 2 and 3 kept no thread start: the pid decides.
        let process = if s.thread_ns == 0 {
            model.processes.get(&s.pid)
        } else {
            model.process_of(s.pid, s.thread_ns)
        };
        process.is_some_and(|p| workers.contains(&p.key()))
    };
    let mut by_leaf: HashMap<String, u64> = HashMap::new();
    let mut total: u64 = 0;
    for s in table
        .samples
        .iter()
        .filter(|s| s.kind.is_on_cpu() && of_worker(s))
    {
        let frames: Vec<&Frame> = table
            .stacks
            .get(s.stack as usize)
            .map(|ids| {
                ids.iter()
                    .filter_map(|&f| table.frames.get(f as usize))
                    .collect()
            })
            .unwrap_or_default();
        let python = frames.iter().rev().find(|f| f.kind == FrameKind::Python);
        let leaf = python
            .or_else(|| frames.last().filter(|f| !f.is_kernel()))
            .map_or_else(|| "[kernel]".to_string(), |f| super::flame::frame_label(f));
        let w = by_leaf.entry(leaf).or_default();
        *w = w.saturating_add(s.weight);
        total = total.saturating_add(s.weight);
    }
    let mut ranked: Vec<(String, f64)> = by_leaf
        .into_iter()
        .map(|(leaf, w)| (leaf, w as f64 / total.max(1) as f64))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(n);
    ranked
}

/// Lines the GPUs' idle intervals up with the trainer's state.
fn align_gpu_idle(
    trainer: &Thread,
    deliveries: &[Delivery],
    idle: &[(u64, u64)],
) -> Option<GpuIdleAlignment> {
    if idle.is_empty() {
        return None;
    }
    let mut out = GpuIdleAlignment::default();
    for &(start, end) in idle {
        let b = trainer.breakdown(start, end);
        let waiting: u64 = deliveries
            .iter()
            .map(|d| overlap((d.wait_start_ns, d.ts_ns), (start, end)))
            .sum();
        out.gpu_idle_s += (end - start) as f64 / NS;
        out.trainer_on_cpu_s += b.on_cpu as f64 / NS;
        out.trainer_runnable_s += b.runnable as f64 / NS;
        out.trainer_data_wait_s += waiting.min(b.blocked()) as f64 / NS;
        out.trainer_other_blocked_s += b.blocked().saturating_sub(waiting) as f64 / NS;
    }
    Some(out)
}

fn overlap((a0, a1): (u64, u64), (b0, b1): (u64, u64)) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Interval;

    fn thread(tid: u32, pid: u32, spans: &[(u64, u64, ThreadState)]) -> Thread {
        Thread {
            tid,
            pid,
            comm: String::new(),
            renamed_from: vec![],
            start_ns: spans[0].0,
            end_ns: spans.last().unwrap().1,
            exited: false,
            intervals: spans
                .iter()
                .map(|&(s, e, st)| Interval::new(s, e, st))
                .collect(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        }
    }

    fn wake(ts: u64, tid: u32, waker: u32, tgid: u32) -> WakeEdge {
        WakeEdge {
            ts,
            tid,
            waker_tid: waker,
            waker_tgid: tgid,
            flags: 0,
        }
    }

    use ThreadState::{Runnable as Q, Running as R, Sleeping as S};
    const MS: u64 = 1_000_000;

    /// A trainer that trains 2 ms and waits 8 ms per batch; the worker waits
    /// for a CPU 5 ms and runs 3 ms of each wait.
    #[test]
    fn steps_waits_and_blame() {
        let mut trainer_spans = vec![];
        let mut worker_spans = vec![];
        let mut wakeups = vec![];
        for i in 0..5 {
            let t = i * 10 * MS;
            trainer_spans.push((t, t + 2 * MS, R));
            trainer_spans.push((t + 2 * MS, t + 10 * MS, S));
            worker_spans.push((t, t + 2 * MS, R));
            worker_spans.push((t + 2 * MS, t + 7 * MS, Q));
            worker_spans.push((t + 7 * MS, t + 10 * MS, R));
            wakeups.push(wake(t + 10 * MS, 1, 2, 2));
        }
        trainer_spans.push((50 * MS, 52 * MS, R));
        worker_spans.push((50 * MS, 52 * MS, S));
        let model = Model {
            threads: vec![thread(1, 1, &trainer_spans), thread(2, 2, &worker_spans)],
            wakeups,
            ..Default::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer), (2, Role::DataWorker)], Some(1));
        let s = steps(&model, &roles, &[]);
        // A recording without step probes: the batches waited for.
        assert_eq!(s.source.detector, "waited_batches");
        assert_eq!(s.source.confidence, Some("low"));
        assert_eq!(s.deliveries.len(), 5);
        assert_eq!(s.count, 4);
        assert_eq!(s.steps.len(), 4);
        assert!((s.p50_s - 0.010).abs() < 1e-9);
        // Over the steady state, 10 to 50 ms: four waits of 8 ms.
        assert!((s.data_wait_frac - 32.0 / 40.0).abs() < 1e-9);
        assert_eq!(s.startup.unwrap().end_ns, 10 * MS);
        assert!((s.blame.runnable - 0.625).abs() < 1e-9, "{:?}", s.blame);
        assert!((s.blame.on_cpu - 0.375).abs() < 1e-9);
        assert_eq!(s.blame.leading().0, "runnable");
    }

    #[test]
    fn wakeups_close_together_are_one_delivery() {
        let trainer = thread(
            1,
            1,
            &[
                (0, 10 * MS, S),
                (10 * MS, 10 * MS + 100_000, R),
                (10 * MS + 100_000, 12 * MS, S),
                (12 * MS, 20 * MS, R),
            ],
        );
        let model = Model {
            threads: vec![trainer],
            wakeups: vec![wake(10 * MS, 1, 2, 2), wake(12 * MS, 1, 2, 2)],
            ..Default::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer), (2, Role::DataWorker)], Some(1));
        let s = steps(&model, &roles, &[]);
        assert_eq!(s.deliveries.len(), 1);
        assert_eq!(s.count, 0);
        assert_eq!(s.deliveries[0].data_wait_ns, 10 * MS + 1_900_000);
    }

    fn mark(ts: u64, what: u32, name: &str) -> Mark {
        Mark {
            ts,
            tid: 1,
            tgid: 1,
            what,
            name: name.into(),
        }
    }

    /// Iterations from PyTorch's marks: each begins at the DataLoader's
    /// `__next__` after a backward pass or optimizer step, ready or
    /// waited for; the epoch's end (two `__next__` in a row) is one
    /// iteration; the last one ends as long as a typical one.
    #[test]
    fn iterations_from_torch_marks() {
        use profiler_ebpf::mark::{BACKWARD, RECORD_FUNCTION};
        const NEXT: &str = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";
        let mut marks = Vec::new();
        for i in 0..4u64 {
            let t = 100 * MS + i * 10 * MS;
            marks.push(mark(t, RECORD_FUNCTION, NEXT));
            if i == 2 {
                // The exhausted iterator's StopIteration, then the new one.
                marks.push(mark(t + MS, RECORD_FUNCTION, NEXT));
            }
            marks.push(mark(t + 5 * MS, BACKWARD, ""));
            marks.push(mark(t + 8 * MS, RECORD_FUNCTION, "Optimizer.step#SGD.step"));
        }
        let model = Model {
            threads: vec![thread(1, 1, &[(0, 200 * MS, R)])],
            marks,
            window_end_ns: 200 * MS,
            ..Default::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer), (2, Role::DataWorker)], Some(1));
        let s = steps(&model, &roles, &[]);
        assert_eq!(s.source.detector, "torch_marks");
        assert_eq!(s.source.confidence, Some("high"));
        let bounds: Vec<(u64, u64)> = s.steps.iter().map(|st| (st.start_ns, st.end_ns)).collect();
        assert_eq!(
            bounds,
            vec![
                (100 * MS, 110 * MS),
                (110 * MS, 120 * MS),
                (120 * MS, 130 * MS),
                (130 * MS, 140 * MS)
            ]
        );
        assert!(s.steps[3].end_estimated);
        assert_eq!(s.startup.unwrap().end_ns, 100 * MS);
        assert_eq!(s.teardown.unwrap().start_ns, 140 * MS);
        assert!((s.p50_s - 0.010).abs() < 1e-9);
    }

    /// Batches from the trainer's reads of a pipe the workers feed: the
    /// pipe is known by the waits a worker's wakeup ended; a ready batch
    /// read from it is a step too, with no data wait.
    #[test]
    fn batches_from_pipe_reads() {
        let read = |ts, pipe| crate::model::PipeOp {
            ts,
            tid: 1,
            tgid: 1,
            pipe,
            bytes: 64,
            write: false,
        };
        // Batch 0 waited for (woken by worker 2 at 10 ms), 1 to 4 ready;
        // reads of another pipe nobody fed are not batches.
        let mut spans = vec![(0, 10 * MS, S)];
        let mut pipes = vec![read(10 * MS + 10_000, 0xabc)];
        spans.push((10 * MS, 100 * MS, R));
        for i in 1..5u64 {
            pipes.push(read(10 * MS * (i + 1), 0xabc));
            pipes.push(read(10 * MS * (i + 1) + 5 * MS, 0xdef));
        }
        let mut model = Model {
            threads: vec![thread(1, 1, &spans), thread(2, 2, &[(0, 100 * MS, R)])],
            wakeups: vec![wake(10 * MS, 1, 2, 2)],
            pipes,
            step_probes: Some(crate::recording::StepProbes {
                pipes: true,
                ..Default::default()
            }),
            window_end_ns: 100 * MS,
            ..Default::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer), (2, Role::DataWorker)], Some(1));
        let s = steps(&model, &roles, &[]);
        assert_eq!(s.source.detector, "pipe_reads");
        assert_eq!(s.count, 5);
        // The first began where the trainer blocked for it.
        assert_eq!(s.steps[0].start_ns, 0);
        assert_eq!(s.steps[1].start_ns, 20 * MS);
        assert_eq!(s.steps[0].worker_pid, 2);
        assert!(
            s.steps[1..]
                .iter()
                .all(|st| st.data_wait_ns == 0 && st.worker_pid == 0)
        );
        assert!(!s.source.why.contains("took over"), "{}", s.source.why);
        // The pipe program stood down after these reads (another tracked
        // process's DataLoader gave a batch): the same steps, and the
        // source says the reads stop there.
        if let Some(probes) = model.step_probes.as_mut() {
            probes.pipes_until_ns = Some(90 * MS);
        }
        let t = steps(&model, &roles, &[]);
        assert_eq!(t.count, 5);
        assert!(t.source.why.contains("marks took over"), "{}", t.source.why);
    }

    /// Neither marks nor worker pipes, with pipes traced: no steps, and why.
    #[test]
    fn no_training_loop_no_steps() {
        let model = Model {
            threads: vec![thread(1, 1, &[(0, 100 * MS, R)])],
            step_probes: Some(crate::recording::StepProbes {
                pipes: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer)], Some(1));
        let s = steps(&model, &roles, &[]);
        assert_eq!(s.count, 0);
        assert_eq!(s.source.detector, "none");
        assert!(
            s.source.why.contains("did not load libtorch"),
            "{:?}",
            s.source
        );
        assert!(s.startup.is_none());
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let d: Vec<u64> = (1..=100).map(|i| i * MS).collect();
        assert!((percentile(&d, 0.5) - 0.050).abs() < 1e-9);
        assert!((percentile(&d, 0.99) - 0.099).abs() < 1e-9);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}

//! The anatomy of a step: every steady-state step's wall time on the
//! trainer thread, split into phases on its critical path, from the
//! recording alone.
//!
//! The trainer's own time is read from its stacks (`classify`): on a CPU,
//! model compute, loading on the training thread (`num_workers=0`),
//! receiving a batch, starting or stopping workers, or other work; waiting
//! for a CPU; blocked in a CUDA copy or sync, for the GIL, or for a batch.
//! A wait for a batch is followed to whoever woke the trainer, and from
//! there, wait by wait, back through the threads that woke each other (the
//! pin-memory thread, a worker's queue feeder, the worker, its pools),
//! each piece of their time named by what that thread was doing then:
//! making the batch, waiting for a CPU, for block IO, sleeping, idle for
//! want of an index, sending, or starting (from its fork to its first
//! batch). This is Perfetto's critical path (`sched.thread_executing_span`)
//! started at each of the trainer's waits (`path`).
//!
//! Every nanosecond of a step lands in exactly one phase, so the phases of
//! a step add up to it. Each piece also carries a label (the job's own
//! Python function, with the native library under it), so each phase has
//! its top functions; where GPU samples exist, each phase also gets the
//! GPU's idle time during it.

mod classify;
mod context;
mod path;

use std::collections::HashMap;

use serde::Serialize;

use super::roles::{Role, Roles};
use super::steps::StepStats;
use crate::model::{Model, Thread, ThreadState, WakeEdge};
use crate::recording::StackTable;

pub(crate) use classify::is_interpreter_module;
use classify::{TrainerWork, WorkerWork};

const NS: f64 = 1e9;
/// Labels kept per phase in the summary.
const TOP_LABELS: usize = 3;

/// Where a piece of a step's time went. The names are a contract
/// (docs/json.md, "anatomy").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The model: forward, backward, loss and optimizer, with the
    /// trainer's waits for its own pool threads.
    Compute,
    /// `__getitem__`, collate and transforms on the training thread.
    Loading,
    /// Starting workers (fork or spawn, imports, `worker_init_fn`, the
    /// dataset's pickling) up to each one's first batch, and stopping them:
    /// in the trainer, and in its waits for a worker not ready yet.
    WorkerStart,
    /// Waiting for a batch while its worker made it.
    WorkerBusy,
    /// ... while the worker (or its pool) waited for a CPU.
    WorkerCpuWait,
    /// ... while the worker waited for block IO.
    WorkerIo,
    /// ... while the worker slept or waited on a lock.
    WorkerSleep,
    /// ... while the worker had no index to work on.
    WorkerIdle,
    /// ... while the worker pickled and sent it.
    Sending,
    /// ... with no worker on the path (a timeout, an untraced waker).
    WaitOther,
    /// The trainer unpickling a batch and rebuilding its tensors.
    Receiving,
    /// The pin-memory thread on the batch's path.
    PinMemory,
    /// Host-to-device copies and CUDA syncs.
    Copies,
    /// Waiting for the GIL another thread of the trainer's process held.
    Gil,
    /// The trainer waiting for a CPU.
    CpuWait,
    /// Everything else the trainer did.
    Other,
}

impl Phase {
    pub const ALL: [Phase; 16] = [
        Phase::Compute,
        Phase::Loading,
        Phase::WorkerStart,
        Phase::WorkerBusy,
        Phase::WorkerCpuWait,
        Phase::WorkerIo,
        Phase::WorkerSleep,
        Phase::WorkerIdle,
        Phase::Sending,
        Phase::WaitOther,
        Phase::Receiving,
        Phase::PinMemory,
        Phase::Copies,
        Phase::Gil,
        Phase::CpuWait,
        Phase::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Compute => "compute",
            Phase::Loading => "loading",
            Phase::WorkerStart => "worker_start",
            Phase::WorkerBusy => "worker_busy",
            Phase::WorkerCpuWait => "worker_cpu_wait",
            Phase::WorkerIo => "worker_io",
            Phase::WorkerSleep => "worker_sleep",
            Phase::WorkerIdle => "worker_idle",
            Phase::Sending => "sending",
            Phase::WaitOther => "wait_other",
            Phase::Receiving => "receiving",
            Phase::PinMemory => "pin_memory",
            Phase::Copies => "copies",
            Phase::Gil => "gil",
            Phase::CpuWait => "cpu_wait",
            Phase::Other => "other",
        }
    }

    /// How the report names it.
    pub fn title(self) -> &'static str {
        match self {
            Phase::Compute => "model compute",
            Phase::Loading => "loading in the trainer",
            Phase::WorkerStart => "worker start",
            Phase::WorkerBusy => "wait: worker making it",
            Phase::WorkerCpuWait => "wait: worker waiting for a CPU",
            Phase::WorkerIo => "wait: worker in block IO",
            Phase::WorkerSleep => "wait: worker sleeping",
            Phase::WorkerIdle => "wait: worker had no index",
            Phase::Sending => "wait: worker sending",
            Phase::WaitOther => "wait: no worker on the path",
            Phase::Receiving => "receiving the batch",
            Phase::PinMemory => "pin-memory thread",
            Phase::Copies => "host-to-device copies, syncs",
            Phase::Gil => "waiting for the GIL",
            Phase::CpuWait => "trainer waiting for a CPU",
            Phase::Other => "other",
        }
    }

    /// A wait for a batch, by what its worker did meanwhile.
    pub fn is_batch_wait(self) -> bool {
        matches!(
            self,
            Phase::WorkerBusy
                | Phase::WorkerCpuWait
                | Phase::WorkerIo
                | Phase::WorkerSleep
                | Phase::WorkerIdle
                | Phase::Sending
                | Phase::WaitOther
                | Phase::PinMemory
        )
    }

    fn index(self) -> usize {
        Phase::ALL
            .iter()
            .position(|&p| p == self)
            .expect("every phase is in ALL")
    }
}

/// Nanoseconds per phase, indexed like [`Phase::ALL`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes(pub [u64; Phase::ALL.len()]);

impl PhaseTimes {
    pub fn get(&self, phase: Phase) -> u64 {
        self.0[phase.index()]
    }

    fn add(&mut self, phase: Phase, ns: u64) {
        self.0[phase.index()] += ns;
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The phases with time, in [`Phase::ALL`] order.
    pub fn nonzero(&self) -> impl Iterator<Item = (Phase, u64)> + '_ {
        Phase::ALL
            .iter()
            .map(|&p| (p, self.get(p)))
            .filter(|&(_, ns)| ns > 0)
    }
}

/// One piece of the trainer's time in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start_ns: u64,
    pub end_ns: u64,
    pub phase: Phase,
    /// Index into [`Anatomy::labels`].
    pub label: u32,
}

impl Segment {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// A phase over the steady state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseStats {
    pub phase: Phase,
    pub total_s: f64,
    /// Of the steps' summed time.
    pub share: f64,
    /// Per step, over every step (0 in the steps without it).
    pub mean_ms: f64,
    pub p50_ms: f64,
    /// Steps with any of it.
    pub steps: usize,
    /// The labels most of its time went to, with their share of it.
    pub top: Vec<(String, f64)>,
    /// The GPUs' idle time during it; None without GPU samples.
    pub gpu_idle_s: Option<f64>,
}

/// How the anatomy was read, for the reader to weigh it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Basis {
    /// The recording has stacks with times (format 4 with stacks).
    pub stacks: bool,
    /// Share of the trainer's on-CPU samples in the steps that carry
    /// Python frames.
    pub python_share: f64,
    /// Share of the steps' time that waited for a batch and was followed
    /// to a worker.
    pub waits_followed: f64,
}

/// A data-worker process's start: from its fork to its first batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerStartup {
    pub pid: u32,
    pub start_ns: u64,
    /// When it first woke the trainer or the pin-memory thread with a
    /// batch; None if it never did.
    pub ready_ns: Option<u64>,
}

/// The data workers' main threads over the steady state, after each one's
/// start: the time they spent making batches, by state, and idle (waiting
/// for an index, or for the trainer to take what they made).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WorkerLoad {
    pub on_cpu_ns: u64,
    pub runnable_ns: u64,
    pub io_ns: u64,
    /// Blocked otherwise while making a batch (a sleep, a lock, its pool
    /// threads' work).
    pub sleep_ns: u64,
    pub idle_ns: u64,
    /// Stacks told idle from sleep; without them every non-IO block counts
    /// as idle.
    pub idle_known: bool,
    /// CPU the worker processes' threads used starting (fork to first
    /// batch) in the steady state: what persistent workers would not spend.
    pub start_cpu_ns: u64,
    /// CPU the worker processes' threads used sending batches (pickling,
    /// writing them out), from their on-CPU samples in the steady state.
    pub sending_cpu_ns: u64,
    /// The most one worker process spent making batches (`making_ns` of
    /// its main thread alone): the DataLoader hands batches out round-robin
    /// and takes them back in order, so the slowest worker sets the pace.
    pub slowest_making_ns: u64,
}

impl WorkerLoad {
    /// Time making batches, not counting waits for a CPU (which a
    /// configuration with fewer threads would not have).
    pub fn making_ns(&self) -> u64 {
        self.on_cpu_ns + self.io_ns + self.sleep_ns
    }
}

/// Every step's phases, and each phase over the steady state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Anatomy {
    /// Per step, aligned with `StepStats::steps`.
    pub steps: Vec<PhaseTimes>,
    /// Per step, when the trainer had its batch: the end of the
    /// DataLoader's `__next__` (libtorch's mark), else the end of the
    /// step's last stretch of getting it (loading, waiting, receiving).
    pub batch_ns: Vec<u64>,
    /// The batch times came from libtorch's marks.
    pub batch_marked: bool,
    /// The phases with time, largest first.
    pub phases: Vec<PhaseStats>,
    /// The trainer's steady state, piece by piece, in time order.
    pub segments: Vec<Segment>,
    pub labels: Vec<String>,
    pub basis: Basis,
    /// Worker processes forked in the recording, in start order.
    pub worker_starts: Vec<WorkerStartup>,
    /// The GPUs' idle time over the steps; None without GPU samples.
    pub gpu_idle_s: Option<f64>,
    pub workers: WorkerLoad,
}

impl Anatomy {
    /// The stats of a phase, when it had time.
    pub fn phase(&self, phase: Phase) -> Option<&PhaseStats> {
        self.phases.iter().find(|p| p.phase == phase)
    }

    /// Share of the steps' time in this phase (0 when it had none).
    pub fn share(&self, phase: Phase) -> f64 {
        self.phase(phase).map_or(0.0, |p| p.share)
    }

    /// Share of the steps' time waiting for batches (every wait phase).
    pub fn batch_wait_share(&self) -> f64 {
        self.phases
            .iter()
            .filter(|p| p.phase.is_batch_wait())
            .map(|p| p.share)
            .sum()
    }

    /// Each segment's time by label, within one phase, largest first.
    pub fn labels_of(&self, phase: Phase) -> Vec<(&str, u64)> {
        let mut by: HashMap<u32, u64> = HashMap::new();
        for s in self.segments.iter().filter(|s| s.phase == phase) {
            *by.entry(s.label).or_default() += s.duration_ns();
        }
        let mut out: Vec<(&str, u64)> = by
            .into_iter()
            .map(|(l, ns)| (self.labels[l as usize].as_str(), ns))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        out
    }
}

pub fn anatomy(
    model: &Model,
    roles: &Roles,
    steps: &StepStats,
    gpu_idle: &[(u64, u64)],
) -> Anatomy {
    let Some(trainer) = steps.trainer_tid.and_then(|tid| longest_thread(model, tid)) else {
        return Anatomy::default();
    };
    if steps.steps.is_empty() {
        return Anatomy::default();
    }
    let mut ctx = Ctx::new(model, roles, trainer);
    let mut segments = Vec::new();
    let mut per_step = Vec::with_capacity(steps.steps.len());
    let mut batch_ns = Vec::with_capacity(steps.steps.len());
    let regions = loader_regions(model, trainer.tid);
    // What the trainer did after its batch in the last step the samples
    // named it (see `at_batch`).
    let mut trains = None;
    for step in &steps.steps {
        let mut pieces = ctx.step(step.start_ns, step.end_ns);
        // The last region of the step: at an epoch's end, the exhausted
        // iterator's `__next__` comes first, then the new one's.
        let marked = regions
            .iter()
            .rfind(|&&(enter, exit)| {
                enter >= step.start_ns && enter < step.end_ns && exit <= step.end_ns
            })
            .map(|&(_, exit)| exit);
        match marked {
            Some(exit) => {
                pieces = at_batch(pieces, exit, ctx.single_process, &mut trains);
                batch_ns.push(exit);
            }
            None => batch_ns.push(got_batch(&pieces, step.start_ns)),
        }
        let mut times = PhaseTimes::default();
        for s in &pieces {
            times.add(s.phase, s.duration_ns());
        }
        per_step.push(times);
        segments.extend(pieces);
    }
    let phases = phase_stats(&per_step, &segments, &ctx.labels, gpu_idle);
    let gpu_idle_s = (!gpu_idle.is_empty()).then(|| {
        let total: u64 = steps
            .steps
            .iter()
            .map(|s| overlap_all(gpu_idle, s.start_ns, s.end_ns))
            .sum();
        total as f64 / NS
    });
    let basis = ctx.basis(&segments);
    let steady = (
        steps.steps.first().map_or(0, |s| s.start_ns),
        steps.steps.last().map_or(0, |s| s.end_ns),
    );
    let workers = ctx.worker_load(steady);
    Anatomy {
        workers,
        batch_marked: !regions.is_empty(),
        batch_ns,
        steps: per_step,
        phases,
        segments,
        labels: ctx.labels.names,
        basis,
        worker_starts: ctx.worker_starts,
        gpu_idle_s,
    }
}

/// The trainer's DataLoader `__next__` regions, (enter, exit), from
/// libtorch's marks: regions nest, so an exit closes the innermost region
/// open on the thread.
fn loader_regions(model: &Model, trainer: u32) -> Vec<(u64, u64)> {
    use profiler_ebpf::mark;
    let mut open: Vec<(u64, bool)> = Vec::new();
    let mut out = Vec::new();
    for m in model.marks.iter().filter(|m| m.tid == trainer) {
        match m.what {
            mark::RECORD_FUNCTION => {
                open.push((m.ts, m.name.as_bytes().starts_with(mark::LOADER_PREFIX)));
            }
            mark::RECORD_FUNCTION_EXIT => {
                if let Some((enter, true)) = open.pop() {
                    out.push((enter, m.ts));
                }
            }
            _ => {}
        }
    }
    out
}

/// What gets a batch (the step's first part) and what trains with it.
fn gets_batch(phase: Phase) -> bool {
    phase.is_batch_wait()
        || matches!(
            phase,
            Phase::Loading | Phase::Receiving | Phase::WorkerStart
        )
}

/// The pieces of a step, put on the right side of the moment `batch` the
/// DataLoader's `__next__` returned: before it, time on a CPU the stacks
/// placed in training is getting the batch; after it, getting the batch is
/// the training that follows (a boundary between two samples was placed
/// at their middle; the mark is exact). A step whose training no sample
/// caught (a few ms of it at 99 Hz) trains as the last step that had one
/// did, `trains`.
fn at_batch(
    pieces: Vec<Segment>,
    batch: u64,
    single_process: bool,
    trains: &mut Option<(Phase, u32)>,
) -> Vec<Segment> {
    let mut split = Vec::with_capacity(pieces.len() + 1);
    for s in pieces {
        if s.start_ns < batch && batch < s.end_ns {
            split.push(Segment { end_ns: batch, ..s });
            split.push(Segment {
                start_ns: batch,
                ..s
            });
        } else {
            split.push(s);
        }
    }
    let getting = if single_process {
        Phase::Loading
    } else {
        Phase::Receiving
    };
    let before_label = split
        .iter()
        .rev()
        .find(|s| s.end_ns <= batch && gets_batch(s.phase))
        .map(|s| s.label);
    let after = split
        .iter()
        .find(|s| s.start_ns >= batch && !gets_batch(s.phase))
        .map(|s| (s.phase, s.label));
    if after.is_some() {
        *trains = after;
    }
    let after = after.or(*trains);
    for s in &mut split {
        let before = s.end_ns <= batch;
        match s.phase {
            Phase::Compute | Phase::Other if before => {
                s.phase = getting;
                s.label = before_label.unwrap_or(s.label);
            }
            Phase::Loading | Phase::Receiving if !before => {
                if let Some((phase, label)) = after {
                    s.phase = phase;
                    s.label = label;
                }
            }
            _ => {}
        }
    }
    merge_adjacent(split)
}

/// Without marks: when the step's getting of its batch ended, the end of
/// its last piece of getting it before training began.
fn got_batch(pieces: &[Segment], start: u64) -> u64 {
    let Some(first) = pieces.iter().position(|s| gets_batch(s.phase)) else {
        return start;
    };
    let training = pieces[first..]
        .iter()
        .position(|s| s.phase == Phase::Compute)
        .map_or(pieces.len(), |i| first + i);
    pieces[..training]
        .iter()
        .rev()
        .find(|s| gets_batch(s.phase))
        .map_or(start, |s| s.end_ns)
}

/// Interned labels.
#[derive(Debug, Default)]
struct Labels {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Labels {
    fn id(&mut self, name: String) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        id
    }
}

/// What the walk needs, computed once per recording.
struct Ctx<'a> {
    model: &'a Model,
    roles: &'a Roles,
    table: Option<&'a StackTable>,
    trainer: &'a Thread,
    /// Indices into `model.wakeups` per woken tid, in time order.
    wakeups: HashMap<u32, Vec<usize>>,
    labels: Labels,
    /// Per stack: its label id, and its framework label's.
    stack_labels: HashMap<u32, u32>,
    framework_labels: HashMap<u32, u32>,
    /// Per stack: its work on either side.
    classes: classify::Classes<'a>,
    /// The trainer's blocking CUDA calls (copies, syncs), in time order.
    cuda: Vec<(u64, u64, &'static str)>,
    /// Each worker process's fork and first batch, by pid.
    worker_ready: HashMap<u32, WorkerStartup>,
    worker_starts: Vec<WorkerStartup>,
    /// Threads by tid (a reused tid: every holder, in order).
    threads: HashMap<u32, Vec<&'a Thread>>,
    /// No data-worker process: the DataLoader's `__next__` loads on the
    /// training thread (the single-process iterator).
    single_process: bool,
}

impl<'a> Ctx<'a> {
    fn new(model: &'a Model, roles: &'a Roles, trainer: &'a Thread) -> Ctx<'a> {
        let mut wakeups: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, w) in model.wakeups.iter().enumerate() {
            wakeups.entry(w.tid).or_default().push(i);
        }
        let mut threads: HashMap<u32, Vec<&Thread>> = HashMap::new();
        for t in &model.threads {
            threads.entry(t.tid).or_default().push(t);
        }
        let mut cuda: Vec<(u64, u64, &'static str)> = model
            .cuda
            .calls
            .iter()
            .filter(|c| c.tid == trainer.tid && (c.is_sync() || c.copy().is_some()))
            .map(|c| (c.start_ns, c.end_ns, c.name()))
            .collect();
        cuda.sort_unstable();
        let worker_starts = worker_starts(model, roles, trainer);
        Ctx {
            model,
            roles,
            table: model.stacks.as_ref(),
            trainer,
            wakeups,
            labels: Labels::default(),
            stack_labels: HashMap::new(),
            framework_labels: HashMap::new(),
            classes: classify::Classes::new(model.stacks.as_ref()),
            cuda,
            worker_ready: worker_starts.iter().map(|w| (w.pid, w.clone())).collect(),
            worker_starts,
            threads,
            single_process: !model
                .threads
                .iter()
                .any(|t| roles.of_thread(t) == Role::DataWorker),
        }
    }

    /// The trainer's work by its stack (no stack: other).
    fn trainer_work(&self, stack: Option<u32>) -> TrainerWork {
        match self.classes.trainer(stack) {
            TrainerWork::NextBatch if self.single_process => TrainerWork::Loading,
            w => w,
        }
    }

    fn label(&mut self, stack: Option<u32>) -> u32 {
        let Some(table) = self.table else {
            return self.labels.id("[no stacks]".into());
        };
        let Some(stack) = stack else {
            return self.labels.id("[no stack]".into());
        };
        if let Some(&id) = self.stack_labels.get(&stack) {
            return id;
        }
        let id = self.labels.id(classify::label(table, stack));
        self.stack_labels.insert(stack, id);
        id
    }

    /// A label for the framework's own work (receiving, sending).
    fn framework_label(&mut self, stack: Option<u32>) -> u32 {
        match (self.table, stack) {
            (Some(table), Some(stack)) => {
                if let Some(&id) = self.framework_labels.get(&stack) {
                    return id;
                }
                let id = self.labels.id(classify::framework_label(table, stack));
                self.framework_labels.insert(stack, id);
                id
            }
            _ => self.label(stack),
        }
    }

    /// A worker-side thread's work by its stack.
    fn worker_work(&self, stack: Option<u32>) -> WorkerWork {
        self.classes.worker(stack)
    }

    fn named(&mut self, text: String) -> u32 {
        self.labels.id(text)
    }

    fn timed(&self, tid: u32) -> &'a [crate::recording::TimedStack] {
        context::timed_of(self.table, tid)
    }

    /// The trainer's time in `[start, end)`, piece by piece.
    fn step(&mut self, start: u64, end: u64) -> Vec<Segment> {
        let trainer = self.trainer;
        let mut out = Vec::new();
        let first = trainer.intervals.partition_by_end(|e| e <= start);
        for iv in trainer.intervals.iter_from(first) {
            if iv.start_ns >= end {
                break;
            }
            let (a, b) = (iv.start_ns.max(start), iv.end_ns.min(end));
            if b <= a {
                continue;
            }
            match iv.state {
                ThreadState::Running => self.trainer_running(a, b, &mut out),
                ThreadState::Runnable => {
                    let stack = context::off_cpu_at(self.timed(trainer.tid), a);
                    let label = self.label(stack);
                    push(&mut out, a, b, Phase::CpuWait, label);
                }
                ThreadState::Sleeping | ThreadState::DiskSleep => {
                    self.trainer_blocked(a, b, iv.end_ns, &mut out);
                }
            }
        }
        // Before the trainer's first interval or after its last: nothing
        // seen of it; name the gap rather than lose it.
        let unseen = self.named("[trainer not seen]".into());
        fill_gaps(&mut out, start, end, |a, b| Segment {
            start_ns: a,
            end_ns: b,
            phase: Phase::Other,
            label: unseen,
        });
        let out = self.carve_cuda(out);
        merge_adjacent(out)
    }

    fn trainer_running(&mut self, a: u64, b: u64, out: &mut Vec<Segment>) {
        let classes = |stack: u32| self.trainer_work(Some(stack));
        let pieces = context::split_running(self.timed(self.trainer.tid), a, b, classes);
        if pieces.is_empty() {
            let label = self.label(None);
            push(out, a, b, Phase::Other, label);
            return;
        }
        for (s, e, stack) in pieces {
            let phase = self.trainer_work(Some(stack)).on_cpu();
            let label = if phase == Phase::Receiving {
                self.framework_label(Some(stack))
            } else {
                self.label(Some(stack))
            };
            push(out, s, e, phase, label);
        }
    }

    /// A blocked stretch `[a, b)` of the trainer whose block ends at
    /// `woken` (b, unless the step ends first).
    fn trainer_blocked(&mut self, a: u64, b: u64, woken: u64, out: &mut Vec<Segment>) {
        let trainer = self.trainer.tid;
        let stack = context::off_cpu_at(self.timed(trainer), a);
        let work = self.trainer_work(stack);
        let waker = self.waker(trainer, woken);
        let from_producer = waker.is_some_and(|w| {
            matches!(
                self.roles.of_at(w.waker_tid, w.ts),
                Role::DataWorker | Role::PinMemory
            )
        });
        let python = self.has_python(stack);
        let label = self.label(stack);
        match work {
            TrainerWork::Gil => {
                let holder = self.holder(waker, a, b);
                push(out, a, b, Phase::Gil, holder);
            }
            TrainerWork::NextBatch => self.batch_wait(waker, a, b, out),
            TrainerWork::Other if !python && from_producer => self.batch_wait(waker, a, b, out),
            TrainerWork::WorkerStart => push(out, a, b, Phase::WorkerStart, label),
            TrainerWork::Loading => push(out, a, b, Phase::Loading, label),
            TrainerWork::Compute => push(out, a, b, Phase::Compute, label),
            TrainerWork::Other => push(out, a, b, Phase::Other, label),
        }
    }

    fn has_python(&self, stack: Option<u32>) -> bool {
        match (self.table, stack) {
            (Some(t), Some(s)) => {
                classify::frames(t, s).any(|f| f.kind == crate::recording::FrameKind::Python)
            }
            _ => false,
        }
    }

    /// A wait for a batch: the critical path from whoever woke the trainer.
    fn batch_wait(&mut self, waker: Option<&'a WakeEdge>, a: u64, b: u64, out: &mut Vec<Segment>) {
        let pieces = match waker {
            Some(w) if w.waker_tid != self.trainer.tid => path::walk(self, w.waker_tid, a, b, 0),
            _ => Vec::new(),
        };
        let before = out.len();
        out.extend(pieces);
        let mut mine: Vec<Segment> = out.split_off(before);
        let label = self.named("[not followed]".into());
        fill_gaps(&mut mine, a, b, |s, e| Segment {
            start_ns: s,
            end_ns: e,
            phase: Phase::WaitOther,
            label,
        });
        out.extend(mine);
    }

    /// "held by NAME (tid N)": the thread that woke a GIL wait in
    /// `[a, b)`.
    fn holder(&mut self, waker: Option<&WakeEdge>, a: u64, b: u64) -> u32 {
        let text = match waker {
            // A timer ended the wait (CPython's switch interval ran out and
            // the waiter asks the holder to drop the GIL; tid 0 is the
            // interrupt's): the holder is the sibling that ran meanwhile.
            Some(w) if w.waker_tid == 0 => match self.busiest_sibling(a, b) {
                Some(t) => self.held_by(t.tid, b),
                None => "held by an untraced thread".into(),
            },
            Some(w) => self.held_by(w.waker_tid, w.ts),
            None => "held by an untraced thread".into(),
        };
        self.named(text)
    }

    fn held_by(&mut self, tid: u32, ts: u64) -> String {
        // A thread the recording never saw start (its fork lost) is still
        // named by its tid.
        let who = match self.thread_at(tid, ts) {
            Some(t) => format!("{} (tid {tid})", t.comm),
            None => format!("tid {tid}, a thread the recording missed"),
        };
        match self.running_label_at(tid, ts) {
            Some(l) => format!("held by {who}: {l}"),
            None => format!("held by {who}"),
        }
    }

    /// The trainer's fellow thread that ran longest in `[a, b)`.
    fn busiest_sibling(&self, a: u64, b: u64) -> Option<&'a Thread> {
        let trainer = self.trainer;
        self.threads
            .values()
            .flatten()
            .copied()
            .filter(|t| t.pid == trainer.pid && t.tid != trainer.tid)
            .filter(|t| t.start_ns < b && t.end_ns > a)
            .map(|t| (t, t.breakdown(a, b).on_cpu))
            .filter(|&(_, ns)| ns > 0)
            .max_by_key(|&(t, ns)| (ns, std::cmp::Reverse(t.tid)))
            .map(|(t, _)| t)
    }

    /// The label of what `tid` was running at `ts`.
    fn running_label_at(&mut self, tid: u32, ts: u64) -> Option<String> {
        let table = self.table?;
        let timed = self.timed(tid);
        let i = timed.partition_point(|t| t.start_ns <= ts);
        // The nearest sample before, else the switch-out after.
        let stack = timed[..i]
            .iter()
            .rev()
            .find(|t| t.kind.is_on_cpu() && ts - t.start_ns < 20_000_000)
            .or_else(|| timed[i..].iter().find(|t| !t.kind.is_on_cpu()))
            .map(|t| t.stack)?;
        Some(classify::label(table, stack))
    }

    /// The wakeup that ended `tid`'s block at `ts` (the last one at or
    /// before it).
    fn waker(&self, tid: u32, ts: u64) -> Option<&'a WakeEdge> {
        let all = &self.model.wakeups;
        let mine = self.wakeups.get(&tid)?;
        let i = mine.partition_point(|&i| all[i].ts <= ts);
        let w = &all[mine[i.checked_sub(1)?]];
        // A block ends at its wakeup; an older one woke an earlier block.
        (ts - w.ts <= 1_000).then_some(w)
    }

    fn thread_at(&self, tid: u32, ts: u64) -> Option<&'a Thread> {
        self.threads
            .get(&tid)?
            .iter()
            .copied()
            .find(|t| t.start_ns <= ts && ts <= t.end_ns)
    }

    /// The trainer's blocking CUDA calls take their time from whatever the
    /// walk said, as copies and syncs.
    fn carve_cuda(&mut self, segments: Vec<Segment>) -> Vec<Segment> {
        if self.cuda.is_empty() {
            return segments;
        }
        let mut out = Vec::with_capacity(segments.len());
        for s in segments {
            let mut from = s.start_ns;
            let i = self.cuda.partition_point(|c| c.1 <= s.start_ns);
            let calls: Vec<(u64, u64, &'static str)> = self.cuda[i..]
                .iter()
                .take_while(|c| c.0 < s.end_ns)
                .copied()
                .collect();
            for (cs, ce, name) in calls {
                let (cs, ce) = (cs.max(from), ce.min(s.end_ns));
                if ce <= cs {
                    continue;
                }
                push(&mut out, from, cs, s.phase, s.label);
                let label = self.named(name.to_string());
                push(&mut out, cs, ce, Phase::Copies, label);
                from = ce;
            }
            push(&mut out, from, s.end_ns, s.phase, s.label);
        }
        out
    }

    fn basis(&self, segments: &[Segment]) -> Basis {
        let total: u64 = segments.iter().map(Segment::duration_ns).sum();
        let followed: u64 = segments
            .iter()
            .filter(|s| s.phase.is_batch_wait() && s.phase != Phase::WaitOther)
            .map(Segment::duration_ns)
            .sum();
        let (mut samples, mut python) = (0u64, 0u64);
        if let Some(table) = self.table {
            let (start, end) = (
                segments.first().map_or(0, |s| s.start_ns),
                segments.last().map_or(0, |s| s.end_ns),
            );
            for t in table.timed_of(self.trainer.tid) {
                if t.kind.is_on_cpu() && t.start_ns >= start && t.start_ns < end {
                    samples += 1;
                    python += u64::from(self.has_python(Some(t.stack)));
                }
            }
        }
        Basis {
            stacks: self.table.is_some_and(|t| !t.timed.is_empty()),
            python_share: if samples > 0 {
                python as f64 / samples as f64
            } else {
                0.0
            },
            waits_followed: if total > 0 {
                followed as f64 / total as f64
            } else {
                0.0
            },
        }
    }

    /// The worker processes' main threads over `[start, end)`, each from
    /// its first batch on.
    fn worker_load(&self, (start, end): (u64, u64)) -> WorkerLoad {
        let mut load = WorkerLoad {
            idle_known: self.table.is_some_and(|t| !t.timed.is_empty()),
            start_cpu_ns: self.start_cpu(start, end),
            sending_cpu_ns: self.sending_cpu(start, end),
            ..WorkerLoad::default()
        };
        let mains = self
            .model
            .threads
            .iter()
            .filter(|t| t.tid == t.pid && self.roles.of_thread(t) == Role::DataWorker);
        for t in mains {
            let before = load.making_ns();
            let from = match self.worker_ready.get(&t.pid) {
                Some(w) => w.ready_ns.unwrap_or(u64::MAX).max(start),
                None => start,
            };
            let first = t.intervals.partition_by_end(|e| e <= from);
            for iv in t.intervals.iter_from(first) {
                if iv.start_ns >= end {
                    break;
                }
                let ns = iv.end_ns.min(end).saturating_sub(iv.start_ns.max(from));
                let slot = match (iv.state, iv.reason) {
                    (ThreadState::Running, _) => &mut load.on_cpu_ns,
                    (ThreadState::Runnable, _) => &mut load.runnable_ns,
                    (_, Some(crate::model::BlockReason::Io)) => &mut load.io_ns,
                    _ if !load.idle_known => &mut load.idle_ns,
                    _ => {
                        let stack = context::off_cpu_at(self.timed(t.tid), iv.start_ns);
                        match self.worker_work(stack) {
                            WorkerWork::Idle => &mut load.idle_ns,
                            _ => &mut load.sleep_ns,
                        }
                    }
                };
                *slot += ns;
            }
            load.slowest_making_ns = load.slowest_making_ns.max(load.making_ns() - before);
        }
        load
    }

    /// The worker processes' on-CPU samples in `[start, end)` that were
    /// sending a batch, as time (a sample stands for a sampling period).
    fn sending_cpu(&self, start: u64, end: u64) -> u64 {
        let Some(table) = self.table.filter(|t| t.sample_hz > 0) else {
            return 0;
        };
        let workers: std::collections::HashSet<u32> = self
            .model
            .threads
            .iter()
            .filter(|t| self.roles.of_thread(t) == Role::DataWorker && t.tid == t.pid)
            .map(|t| t.pid)
            .collect();
        let samples = table
            .timed
            .iter()
            .filter(|t| t.kind.is_on_cpu() && t.start_ns >= start && t.start_ns < end)
            .filter(|t| workers.contains(&t.pid))
            .filter(|t| self.worker_work(Some(t.stack)) == WorkerWork::Sending)
            .count() as u64;
        samples * 1_000_000_000 / table.sample_hz
    }

    /// On-CPU time of the worker processes' threads between each one's
    /// fork and first batch, within `[start, end)`.
    fn start_cpu(&self, start: u64, end: u64) -> u64 {
        self.worker_starts
            .iter()
            .map(|w| {
                let (a, b) = (w.start_ns.max(start), w.ready_ns.unwrap_or(end).min(end));
                if b <= a {
                    return 0;
                }
                self.model
                    .threads
                    .iter()
                    .filter(|t| t.pid == w.pid && t.start_ns < b && t.end_ns > a)
                    .map(|t| t.breakdown(a, b).on_cpu)
                    .sum::<u64>()
            })
            .sum()
    }

    /// When worker process `pid` became ready, if it was forked in the
    /// recording and is not ready at `at`.
    fn starting_until(&self, pid: u32, at: u64) -> Option<u64> {
        let w = self.worker_ready.get(&pid)?;
        match w.ready_ns {
            Some(r) if at < r => Some(r),
            None => Some(u64::MAX),
            _ => None,
        }
    }
}

/// Appends a piece, merging it into the last when they are alike.
fn push(out: &mut Vec<Segment>, start: u64, end: u64, phase: Phase, label: u32) {
    if end <= start {
        return;
    }
    if let Some(last) = out.last_mut()
        && last.end_ns == start
        && last.phase == phase
        && last.label == label
    {
        last.end_ns = end;
        return;
    }
    out.push(Segment {
        start_ns: start,
        end_ns: end,
        phase,
        label,
    });
}

/// Sorts `pieces` and fills what they leave of `[start, end)`.
fn fill_gaps(pieces: &mut Vec<Segment>, start: u64, end: u64, gap: impl Fn(u64, u64) -> Segment) {
    pieces.sort_by_key(|s| s.start_ns);
    let mut out = Vec::with_capacity(pieces.len() + 2);
    let mut at = start;
    for s in pieces.drain(..) {
        let (s0, s1) = (s.start_ns.max(at), s.end_ns.min(end));
        if s0 > at {
            out.push(gap(at, s0));
        }
        if s1 > s0 {
            out.push(Segment {
                start_ns: s0,
                end_ns: s1,
                ..s
            });
            at = s1;
        }
    }
    if end > at {
        out.push(gap(at, end));
    }
    *pieces = out;
}

fn merge_adjacent(segments: Vec<Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::with_capacity(segments.len());
    for s in segments {
        push(&mut out, s.start_ns, s.end_ns, s.phase, s.label);
    }
    out
}

/// Data-worker processes forked in the recording: when each began, and
/// when it first woke the trainer or a pin-memory thread.
fn worker_starts(model: &Model, roles: &Roles, trainer: &Thread) -> Vec<WorkerStartup> {
    let mut out: Vec<WorkerStartup> = model
        .all_processes()
        .filter(|p| p.origin == crate::recording::Origin::Forked && p.exec_ns.is_none())
        .filter(|p| {
            model.threads.iter().any(|t| {
                t.pid == p.pid && t.start_ns >= p.start_ns && roles.of_thread(t) == Role::DataWorker
            })
        })
        .map(|p| WorkerStartup {
            pid: p.pid,
            start_ns: p.start_ns,
            ready_ns: None,
        })
        .collect();
    out.sort_by_key(|w| (w.start_ns, w.pid));
    for w in &mut out {
        w.ready_ns = model
            .wakeups
            .iter()
            .find(|e| {
                e.waker_tgid == w.pid
                    && e.ts >= w.start_ns
                    && (e.tid == trainer.tid || roles.of_at(e.tid, e.ts) == Role::PinMemory)
            })
            .map(|e| e.ts);
    }
    out
}

fn longest_thread(model: &Model, tid: u32) -> Option<&Thread> {
    model
        .threads
        .iter()
        .filter(|t| t.tid == tid)
        .max_by_key(|t| t.lifetime_ns())
}

fn overlap_all(intervals: &[(u64, u64)], start: u64, end: u64) -> u64 {
    intervals
        .iter()
        .map(|&(a, b)| b.min(end).saturating_sub(a.max(start)))
        .sum()
}

fn phase_stats(
    per_step: &[PhaseTimes],
    segments: &[Segment],
    labels: &Labels,
    gpu_idle: &[(u64, u64)],
) -> Vec<PhaseStats> {
    let total: u64 = per_step.iter().map(PhaseTimes::total).sum();
    let mut out = Vec::new();
    for phase in Phase::ALL {
        let mut per: Vec<u64> = per_step.iter().map(|s| s.get(phase)).collect();
        let sum: u64 = per.iter().sum();
        if sum == 0 {
            continue;
        }
        per.sort_unstable();
        let mut by_label: HashMap<u32, u64> = HashMap::new();
        let mut idle = 0;
        for s in segments.iter().filter(|s| s.phase == phase) {
            *by_label.entry(s.label).or_default() += s.duration_ns();
            idle += overlap_all(gpu_idle, s.start_ns, s.end_ns);
        }
        let top = top_functions(&by_label, labels, sum);
        out.push(PhaseStats {
            phase,
            total_s: sum as f64 / NS,
            share: sum as f64 / total.max(1) as f64,
            mean_ms: sum as f64 / per.len() as f64 / 1e6,
            p50_ms: per[(per.len() - 1) / 2] as f64 / 1e6,
            steps: per.iter().filter(|&&ns| ns > 0).count(),
            top,
            gpu_idle_s: (!gpu_idle.is_empty()).then_some(idle as f64 / NS),
        });
    }
    out.sort_by(|a, b| b.total_s.total_cmp(&a.total_s).then(a.phase.cmp(&b.phase)));
    out
}

/// A phase's top labels, by function: `f` and `f in lib` count as `f`, and
/// take the library's name when it ran under more than half of `f`'s time.
fn top_functions(by_label: &HashMap<u32, u64>, labels: &Labels, sum: u64) -> Vec<(String, f64)> {
    let mut by_function: HashMap<&str, (u64, HashMap<&str, u64>)> = HashMap::new();
    for (&l, &ns) in by_label {
        let name = labels.names[l as usize].as_str();
        let (function, library) = name.rsplit_once(" in ").unwrap_or((name, ""));
        let entry = by_function.entry(function).or_default();
        entry.0 += ns;
        *entry.1.entry(library).or_default() += ns;
    }
    let mut top: Vec<(String, f64)> = by_function
        .into_iter()
        .map(|(function, (ns, libraries))| {
            let main = libraries
                .into_iter()
                .filter(|(lib, _)| !lib.is_empty())
                .max_by_key(|&(lib, n)| (n, std::cmp::Reverse(lib)))
                .filter(|&(_, n)| 2 * n > ns);
            let name = match main {
                Some((lib, _)) => format!("{function} in {lib}"),
                None => function.to_string(),
            };
            (name, ns as f64 / sum.max(1) as f64)
        })
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(TOP_LABELS);
    top
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::steps::{Step, StepStats};
    use crate::model::{Interval, ThreadState::*};
    use crate::recording::{Frame, FrameKind, StackKind, TimedStack};

    const MS: u64 = 1_000_000;
    const TORCH: &str = "/venv/lib/python3.11/site-packages/torch/";

    fn py(file: &str, function: &str) -> Frame {
        Frame {
            module: file.into(),
            symbol: Some(function.into()),
            kind: FrameKind::Python,
            offset: 1,
        }
    }

    fn thread(tid: u32, pid: u32, spans: &[(u64, u64, crate::model::ThreadState)]) -> Thread {
        Thread {
            tid,
            pid,
            comm: format!("t{tid}"),
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

    fn timed(tid: u32, pid: u32, start: u64, end: u64, stack: u32, kind: StackKind) -> TimedStack {
        TimedStack {
            start_ns: start,
            end_ns: end,
            pid,
            tid,
            thread_ns: 0,
            stack,
            kind,
        }
    }

    /// One 100 ms step of a trainer (tid 1) fed by a worker (pid 2):
    /// 0-10 ms the trainer trains on (compute), 10-70 it waits in the
    /// DataLoader's `__next__` until the worker wakes it; the worker waited
    /// for a CPU 10-30 and made the batch 30-70; 70-75 the trainer receives
    /// it, 75-100 computes. The worker's part of the wait is followed.
    #[test]
    fn a_wait_is_split_by_what_the_delivering_worker_did() {
        let dl = format!("{TORCH}utils/data/dataloader.py");
        let module = format!("{TORCH}nn/modules/module.py");
        let worker = format!("{TORCH}utils/data/_utils/worker.py");
        let fetch = format!("{TORCH}utils/data/_utils/fetch.py");
        let mut table = StackTable {
            sample_hz: 100,
            frames: vec![
                py("train.py", "main"),
                py(&dl, "_BaseDataLoaderIter.__next__"),
                py(&dl, "_MultiProcessingDataLoaderIter._next_data"),
                py(&module, "Module._call_impl"),
                py(&worker, "_worker_loop"),
                py(&fetch, "_MapDatasetFetcher.fetch"),
                py("train.py", "Ds.__getitem__"),
            ],
            stacks: vec![
                vec![0, 1, 2], // 0: the trainer in __next__
                vec![0, 3],    // 1: the trainer computing
                vec![4, 5, 6], // 2: the worker making a batch
            ],
            ..StackTable::default()
        };
        table.timed = vec![
            timed(1, 1, 5 * MS, 5 * MS, 1, StackKind::OnCpu),
            timed(1, 1, 10 * MS, 70 * MS, 0, StackKind::Sleep),
            timed(1, 1, 90 * MS, 90 * MS, 1, StackKind::OnCpu),
            timed(2, 2, 10 * MS, 30 * MS, 2, StackKind::Runnable),
            timed(2, 2, 50 * MS, 50 * MS, 2, StackKind::OnCpu),
            timed(2, 2, 70 * MS, 100 * MS, 2, StackKind::Sleep),
        ];
        // Sampled computing at 5 and leaving in __next__ at 10, the trainer
        // entered it halfway, at 7.5; it resumes in __next__ at 70 and is
        // sampled computing at 90: the boundary falls halfway, at 80.
        let model = Model {
            threads: vec![
                thread(
                    1,
                    1,
                    &[
                        (0, 10 * MS, Running),
                        (10 * MS, 70 * MS, Sleeping),
                        (70 * MS, 100 * MS, Running),
                    ],
                ),
                thread(
                    2,
                    2,
                    &[
                        (0, 10 * MS, Sleeping),
                        (10 * MS, 30 * MS, Runnable),
                        (30 * MS, 70 * MS, Running),
                        (70 * MS, 100 * MS, Sleeping),
                    ],
                ),
            ],
            wakeups: vec![
                WakeEdge {
                    ts: 10 * MS,
                    tid: 2,
                    waker_tid: 1,
                    waker_tgid: 1,
                    flags: 0,
                },
                WakeEdge {
                    ts: 70 * MS,
                    tid: 1,
                    waker_tid: 2,
                    waker_tgid: 2,
                    flags: 0,
                },
            ],
            stacks: Some(table),
            window_end_ns: 100 * MS,
            ..Model::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer), (2, Role::DataWorker)], Some(1));
        let steps = StepStats {
            trainer_tid: Some(1),
            steps: vec![Step {
                start_ns: 0,
                end_ns: 100 * MS,
                data_wait_ns: 60 * MS,
                wait_start_ns: 10 * MS,
                delivered_ns: 70 * MS,
                cuda_sync_ns: 0,
                trainer: Default::default(),
                blame: Default::default(),
                worker_pid: 2,
                end_estimated: false,
            }],
            ..StepStats::default()
        };
        let a = anatomy(&model, &roles, &steps, &[]);
        let times = a.steps[0];
        assert_eq!(times.total(), 100 * MS);
        assert_eq!(times.get(Phase::Compute), 7_500_000 + 20 * MS);
        assert_eq!(times.get(Phase::WorkerCpuWait), 20 * MS);
        assert_eq!(times.get(Phase::WorkerBusy), 40 * MS);
        assert_eq!(times.get(Phase::Receiving), 2_500_000 + 10 * MS);
        let busy = a.phase(Phase::WorkerBusy).unwrap();
        assert_eq!(busy.top[0].0, "Ds.__getitem__ (train.py)");
        assert!((a.batch_wait_share() - 0.6).abs() < 1e-9);
        // Without marks, the batch was in hand when receiving ended.
        assert_eq!(a.batch_ns, [80 * MS]);
        assert!(!a.batch_marked);
    }

    /// A GIL wait that CPython's switch interval ended: a timer woke the
    /// trainer (waker tid 0), and the holder is the fellow thread that ran
    /// most of the wait, not "tid 0".
    #[test]
    fn a_timed_out_gil_wait_names_the_running_sibling() {
        let native = |symbol: &str| Frame {
            module: "libpython3.11.so".into(),
            symbol: Some(symbol.into()),
            kind: FrameKind::Native,
            offset: 1,
        };
        let mut table = StackTable {
            sample_hz: 100,
            frames: vec![
                py("train.py", "main"),
                native("take_gil"),
                py("train.py", "metrics_loop"),
                py("train.py", "log_line"),
            ],
            stacks: vec![vec![0, 1], vec![2], vec![3], vec![0]],
            ..StackTable::default()
        };
        table.timed = vec![
            timed(1, 1, 5 * MS, 5 * MS, 3, StackKind::OnCpu),
            timed(1, 1, 10 * MS, 20 * MS, 0, StackKind::Sleep),
            timed(1, 1, 25 * MS, 25 * MS, 3, StackKind::OnCpu),
            timed(3, 1, 15 * MS, 15 * MS, 1, StackKind::OnCpu),
            timed(4, 1, 11 * MS, 11 * MS, 2, StackKind::OnCpu),
        ];
        let model = Model {
            threads: vec![
                thread(
                    1,
                    1,
                    &[
                        (0, 10 * MS, Running),
                        (10 * MS, 20 * MS, Sleeping),
                        (20 * MS, 30 * MS, Running),
                    ],
                ),
                thread(
                    3,
                    1,
                    &[
                        (0, 5 * MS, Sleeping),
                        (5 * MS, 25 * MS, Running),
                        (25 * MS, 30 * MS, Sleeping),
                    ],
                ),
                thread(
                    4,
                    1,
                    &[
                        (0, 10 * MS, Sleeping),
                        (10 * MS, 12 * MS, Running),
                        (12 * MS, 30 * MS, Sleeping),
                    ],
                ),
            ],
            wakeups: vec![WakeEdge {
                ts: 20 * MS,
                tid: 1,
                waker_tid: 0,
                waker_tgid: 0,
                flags: 0,
            }],
            stacks: Some(table),
            window_end_ns: 30 * MS,
            ..Model::default()
        };
        let roles = Roles::from_tids([(1, Role::Trainer)], Some(1));
        let steps = StepStats {
            trainer_tid: Some(1),
            steps: vec![Step {
                start_ns: 0,
                end_ns: 30 * MS,
                data_wait_ns: 0,
                wait_start_ns: 0,
                delivered_ns: 0,
                cuda_sync_ns: 0,
                trainer: Default::default(),
                blame: Default::default(),
                worker_pid: 0,
                end_estimated: false,
            }],
            ..StepStats::default()
        };
        let a = anatomy(&model, &roles, &steps, &[]);
        // The wait's 10 ms, and the running on either side up to halfway
        // to the samples that show other work.
        assert_eq!(a.steps[0].get(Phase::Gil), 15 * MS);
        let gil = a.phase(Phase::Gil).unwrap();
        assert_eq!(gil.top[0].0, "held by t3 (tid 3): metrics_loop (train.py)");
    }

    /// With libtorch's end-of-`__next__` mark, the boundary between
    /// receiving and training is the mark, not the middle of two samples.
    #[test]
    fn the_exit_mark_places_the_batch() {
        let s = |a, b, phase| Segment {
            start_ns: a,
            end_ns: b,
            phase,
            label: 0,
        };
        let pieces = vec![
            s(0, 10, Phase::WorkerBusy),
            s(10, 30, Phase::Receiving),
            s(30, 50, Phase::Compute),
        ];
        let mut trains = None;
        let fixed = at_batch(pieces, 12, false, &mut trains);
        assert_eq!(
            fixed,
            vec![
                s(0, 10, Phase::WorkerBusy),
                s(10, 12, Phase::Receiving),
                s(12, 50, Phase::Compute)
            ]
        );
        let pieces = vec![s(0, 10, Phase::Loading), s(10, 50, Phase::Compute)];
        assert_eq!(
            at_batch(pieces, 20, true, &mut trains),
            vec![s(0, 20, Phase::Loading), s(20, 50, Phase::Compute)]
        );
        // A step whose training no sample caught trains as the last one
        // did: its time after the batch is not loading.
        let pieces = vec![s(0, 50, Phase::Loading)];
        assert_eq!(
            at_batch(pieces, 30, true, &mut trains),
            vec![s(0, 30, Phase::Loading), s(30, 50, Phase::Compute)]
        );
    }
}

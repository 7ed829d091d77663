//! Steps and stall attribution: when batches reached the trainer, how long
//! it waited for each, and what the worker that delivered it was doing
//! meanwhile.
//!
//! A batch arrives when the trainer, blocked, is woken by a data worker (or
//! by the pin-memory thread, which was itself woken by a worker). Wakeups by
//! the same thread a few hundred microseconds of trainer CPU apart belong to
//! one delivery (a message read in two parts). A batch that was already waiting when the
//! trainer asked for it wakes nobody, so it is invisible here; such batches
//! were no stall, and the step count is the count of batches waited for.

use std::collections::HashMap;

use serde::Serialize;

use super::roles::{Role, Roles};
use crate::model::{Breakdown, Model, Thread, ThreadState, WakeEdge};
use crate::recording::{Frame, FrameKind};

const NS: f64 = 1e9;
/// Trainer CPU time between two wakeups by the same producer below which
/// they are one delivery.
const MERGE_CPU_NS: u64 = 500_000;
/// How far back the pin thread's own wakeup by a worker may lie.
const PIN_CHAIN_NS: u64 = 1_000_000_000;

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

/// One step: from one delivery to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Step {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Waiting for the batch that ends the step.
    pub data_wait_ns: u64,
    /// The trainer's time in CUDA syncs (stream, device, event) and
    /// synchronous copies during the step; 0 when CUDA calls were not seen.
    pub cuda_sync_ns: u64,
    /// The trainer's time in the step, by state.
    #[serde(skip)]
    pub trainer: Breakdown,
    /// What the delivering worker did during the data wait.
    #[serde(skip)]
    pub blame: Breakdown,
    pub worker_pid: u32,
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
    pub count: usize,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    /// Share of the trainer's time in the window spent waiting for data.
    pub data_wait_frac: f64,
    pub data_wait_s: f64,
    pub blame: Blame,
    /// Leaf functions of the delivering workers' on-CPU samples, by share.
    pub worker_top_functions: Vec<(String, f64)>,
    pub gpu_idle: Option<GpuIdleAlignment>,
    pub deliveries: Vec<Delivery>,
    pub steps: Vec<Step>,
}

pub fn steps(model: &Model, roles: &Roles, gpu_idle: &[(u64, u64)]) -> StepStats {
    let Some(trainer) = roles.trainer.and_then(|tid| longest_thread(model, tid)) else {
        return StepStats::default();
    };
    let deliveries = deliveries(model, roles, trainer);
    let steps: Vec<Step> = deliveries
        .windows(2)
        .map(|pair| step(model, trainer, &pair[0], &pair[1]))
        .collect();
    let mut durations: Vec<u64> = steps.iter().map(|s| s.end_ns - s.start_ns).collect();
    durations.sort_unstable();
    let data_wait_ns: u64 = deliveries.iter().map(|d| d.data_wait_ns).sum();
    let mut blame = Breakdown::default();
    for d in &deliveries {
        blame.add(&worker_breakdown(model, d));
    }
    let life = trainer.lifetime_ns().max(1) as f64;
    let worker_pids: Vec<u32> = deliveries.iter().map(|d| d.worker_pid).collect();
    StepStats {
        trainer_tid: Some(trainer.tid),
        count: deliveries.len(),
        p50_s: percentile(&durations, 0.50),
        p90_s: percentile(&durations, 0.90),
        p99_s: percentile(&durations, 0.99),
        data_wait_frac: data_wait_ns as f64 / life,
        data_wait_s: data_wait_ns as f64 / NS,
        blame: Blame::from_breakdown(&blame),
        worker_top_functions: top_functions(model, &worker_pids, 3),
        gpu_idle: align_gpu_idle(trainer, &deliveries, gpu_idle),
        deliveries,
        steps,
    }
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
        let producer = matches!(roles.of(w.waker_tid), Role::DataWorker | Role::PinMemory);
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
    if roles.of(w.waker_tid) != Role::PinMemory {
        return w.waker_tgid;
    }
    model
        .wakeups
        .iter()
        .rfind(|p| {
            p.tid == w.waker_tid
                && p.ts <= w.ts
                && w.ts - p.ts <= PIN_CHAIN_NS
                && roles.of(p.waker_tid) == Role::DataWorker
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

fn step(model: &Model, trainer: &Thread, from: &Delivery, to: &Delivery) -> Step {
    Step {
        start_ns: from.ts_ns,
        end_ns: to.ts_ns,
        data_wait_ns: to.data_wait_ns,
        cuda_sync_ns: cuda_sync_ns(model, trainer.tid, from.ts_ns, to.ts_ns),
        trainer: trainer.breakdown(from.ts_ns, to.ts_ns),
        blame: worker_breakdown(model, to),
        worker_pid: to.worker_pid,
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
fn top_functions(model: &Model, pids: &[u32], n: usize) -> Vec<(String, f64)> {
    let Some(table) = &model.stacks else {
        return Vec::new();
    };
    let mut by_leaf: HashMap<String, u64> = HashMap::new();
    let mut total: u64 = 0;
    for s in table
        .samples
        .iter()
        .filter(|s| s.kind.is_on_cpu() && pids.contains(&s.pid))
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
        let roles = Roles {
            by_tid: [(1, Role::Trainer), (2, Role::DataWorker)].into(),
            trainer: Some(1),
            ..Default::default()
        };
        let s = steps(&model, &roles, &[]);
        assert_eq!(s.count, 5);
        assert_eq!(s.steps.len(), 4);
        assert!((s.p50_s - 0.010).abs() < 1e-9);
        assert!((s.data_wait_frac - 40.0 / 52.0).abs() < 1e-9);
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
        let roles = Roles {
            by_tid: [(1, Role::Trainer), (2, Role::DataWorker)].into(),
            trainer: Some(1),
            ..Default::default()
        };
        let s = steps(&model, &roles, &[]);
        assert_eq!(s.count, 1);
        assert_eq!(s.deliveries[0].data_wait_ns, 10 * MS + 1_900_000);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let d: Vec<u64> = (1..=100).map(|i| i * MS).collect();
        assert!((percentile(&d, 0.5) - 0.050).abs() < 1e-9);
        assert!((percentile(&d, 0.99) - 0.099).abs() < 1e-9);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}

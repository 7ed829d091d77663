//! What a timeline shows besides thread states: each thread's role, the
//! trainer's steps, the data deliveries from workers to the trainer, and
//! the worst stalls with their blame.
//!
//! Stand-in rules until step detection and stall attribution land: roles
//! from names and the process tree, a delivery is a wakeup of the trainer
//! by a thread of another tracked process that ends a wait, a step runs
//! from one such wait to the next, and a stall is a long wait, blamed on
//! what the producer did meanwhile. The types stay; the rules get replaced.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use crate::model::{BlockReason, Interval, Model, ThreadState};

/// What a thread is to the job, for laying it out: the trainer on top,
/// each data worker with its pool folded under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackRole {
    /// The thread that runs the training loop and consumes batches.
    Trainer,
    /// A DataLoader worker's main thread (`pt_data_worker`).
    DataWorker,
    /// The pin-memory thread (`pt_data_pin`).
    PinMemory,
    /// A compute pool thread (OpenMP, MKL, OpenCV) inside a process.
    Pool,
    Other,
}

impl TrackRole {
    pub fn name(self) -> &'static str {
        match self {
            TrackRole::Trainer => "trainer",
            TrackRole::DataWorker => "data worker",
            TrackRole::PinMemory => "pin memory",
            TrackRole::Pool => "pool",
            TrackRole::Other => "other",
        }
    }

    /// Threads the HTML timeline folds into their process' busy/runnable
    /// counts instead of a lane each.
    pub fn folded(self) -> bool {
        matches!(self, TrackRole::Pool | TrackRole::Other)
    }
}

/// One step (batch) of a training loop.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineStep {
    /// The thread that ran it (the trainer).
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub label: String,
    /// Its breakdown (data wait, on-CPU, …), shown as the slice's args.
    pub args: Map<String, Value>,
}

/// A batch handed from a producer thread to a consumer (a worker's wakeup
/// of the trainer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub ts: u64,
    pub from_tid: u32,
    pub to_tid: u32,
}

/// A stretch where `tid` waited, with who is to blame.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub annotation: String,
}

/// Everything [`derive`] finds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimelineFacts {
    pub roles: HashMap<u32, TrackRole>,
    pub steps: Vec<TimelineStep>,
    pub deliveries: Vec<Delivery>,
    /// Worst (longest) first.
    pub stalls: Vec<Stall>,
}

/// Stalls kept, longest first.
const MAX_STALLS: usize = 20;

pub fn derive(model: &Model) -> TimelineFacts {
    let roles = roles(model);
    let deliveries = deliveries(model, &roles);
    let (steps, stalls) = steps_and_stalls(model, &roles, &deliveries);
    TimelineFacts {
        roles,
        steps,
        deliveries,
        stalls,
    }
}

/// DataLoader's thread names where the job has them; otherwise the main
/// thread of a target process is a trainer, that of a forked child a data
/// worker, and the other threads of a child its pool.
pub fn roles(model: &Model) -> HashMap<u32, TrackRole> {
    model
        .threads
        .iter()
        .map(|t| {
            let child = model.depth(t.pid) > 0;
            let role = if t.comm.starts_with("pt_data_pin") {
                TrackRole::PinMemory
            } else if t.comm.starts_with("pt_data_worker") {
                TrackRole::DataWorker
            } else if t.tid == t.pid {
                if child {
                    TrackRole::DataWorker
                } else {
                    TrackRole::Trainer
                }
            } else if child {
                TrackRole::Pool
            } else {
                TrackRole::Other
            };
            (t.tid, role)
        })
        .collect()
}

fn is_blocked(iv: &Interval) -> bool {
    matches!(iv.state, ThreadState::Sleeping | ThreadState::DiskSleep)
}

/// Wakeups of a trainer by a thread of another tracked process that end
/// one of its waits.
fn deliveries(model: &Model, roles: &HashMap<u32, TrackRole>) -> Vec<Delivery> {
    let mut wait_ends: HashSet<(u32, u64)> = HashSet::new();
    let mut pid_of = HashMap::new();
    for t in model.threads.iter() {
        pid_of.insert(t.tid, t.pid);
        if roles.get(&t.tid) == Some(&TrackRole::Trainer) {
            wait_ends.extend(
                t.intervals
                    .iter()
                    .filter(|iv| is_blocked(iv))
                    .map(|iv| (t.tid, iv.end_ns)),
            );
        }
    }
    model
        .wakeups
        .iter()
        .filter(|w| {
            w.waker_tid != 0
                && wait_ends.contains(&(w.tid, w.ts))
                && pid_of.get(&w.tid) != Some(&w.waker_tgid)
                && model.processes.contains_key(&w.waker_tgid)
        })
        .map(|w| Delivery {
            ts: w.ts,
            from_tid: w.waker_tid,
            to_tid: w.tid,
        })
        .collect()
}

/// A trainer's waits that a delivery ended, as (start, end, producer).
fn data_waits(intervals: &[Interval], delivered: &HashMap<u64, u32>) -> Vec<(u64, u64, u32)> {
    let mut waits = Vec::new();
    let mut start = None;
    for iv in intervals {
        if !is_blocked(iv) {
            start = None;
            continue;
        }
        let since = *start.get_or_insert(iv.start_ns);
        if let Some(&producer) = delivered.get(&iv.end_ns) {
            waits.push((since, iv.end_ns, producer));
            start = None;
        }
    }
    waits
}

fn steps_and_stalls(
    model: &Model,
    roles: &HashMap<u32, TrackRole>,
    deliveries: &[Delivery],
) -> (Vec<TimelineStep>, Vec<Stall>) {
    let (mut steps, mut stalls) = (Vec::new(), Vec::new());
    let trainers = model
        .threads
        .iter()
        .filter(|t| roles.get(&t.tid) == Some(&TrackRole::Trainer));
    for trainer in trainers {
        let delivered: HashMap<u64, u32> = deliveries
            .iter()
            .filter(|d| d.to_tid == trainer.tid)
            .map(|d| (d.ts, d.from_tid))
            .collect();
        let waits = data_waits(&trainer.intervals, &delivered);
        for (n, pair) in waits.windows(2).enumerate() {
            let ((start, wait_end, producer), (end, _, _)) = (pair[0], pair[1]);
            let mut args = breakdown(&trainer.intervals, start, end);
            args.insert("data_wait_ms".into(), json!(ms(wait_end - start)));
            args.insert("producer_tid".into(), json!(producer));
            steps.push(TimelineStep {
                tid: trainer.tid,
                start_ns: start,
                end_ns: end,
                label: format!("step {}", n + 1),
                args,
            });
        }
        for &(start, end, producer) in &waits {
            stalls.push(Stall {
                tid: trainer.tid,
                start_ns: start,
                end_ns: end,
                annotation: blame(model, producer, start, end),
            });
        }
    }
    stalls.sort_by_key(|s| std::cmp::Reverse(s.end_ns - s.start_ns));
    stalls.truncate(MAX_STALLS);
    (steps, stalls)
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

/// Keys of [`time_in`]'s slots, as step args.
const BREAKDOWN: [&str; 5] = ["on_cpu_ms", "runnable_ms", "io_ms", "futex_ms", "sleep_ms"];

/// ns on a CPU, runnable, in IO, in futex waits and in other sleep within
/// [start, end).
fn time_in(intervals: &[Interval], start: u64, end: u64) -> [u64; 5] {
    let mut by = [0u64; 5];
    for iv in intervals {
        let overlap = iv.end_ns.min(end).saturating_sub(iv.start_ns.max(start));
        let slot = match (iv.state, iv.reason) {
            (ThreadState::Running, _) => 0,
            (ThreadState::Runnable, _) => 1,
            (_, Some(BlockReason::Io)) => 2,
            (_, Some(BlockReason::Futex)) => 3,
            _ => 4,
        };
        by[slot] += overlap;
    }
    by
}

fn breakdown(intervals: &[Interval], start: u64, end: u64) -> Map<String, Value> {
    BREAKDOWN
        .into_iter()
        .zip(time_in(intervals, start, end))
        .map(|(key, ns)| (key.to_string(), json!(ms(ns))))
        .collect()
}

/// "waiting for pt_data_worker 12 (pid 10): it ran 40%, was runnable 55%,
/// blocked 5%" (of the wait).
fn blame(model: &Model, producer: u32, start: u64, end: u64) -> String {
    let Some(thread) = model
        .threads
        .iter()
        .find(|t| t.tid == producer && t.start_ns <= end && start < t.end_ns)
    else {
        return format!("waiting for tid {producer}");
    };
    let by = time_in(&thread.intervals, start, end);
    let pct = |ns: u64| (100.0 * ns as f64 / (end - start).max(1) as f64).round();
    format!(
        "waiting for {} {} (pid {}): it ran {}%, was runnable {}%, blocked {}%",
        thread.comm,
        thread.tid,
        thread.pid,
        pct(by[0]),
        pct(by[1]),
        pct(by[2] + by[3] + by[4]),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{Process, Thread, WakeEdge};
    use crate::recording::Origin;

    fn thread(tid: u32, pid: u32, comm: &str, ivs: &[(u64, u64, ThreadState)]) -> Thread {
        Thread {
            tid,
            pid,
            comm: comm.into(),
            renamed_from: vec![],
            start_ns: ivs[0].0,
            end_ns: ivs[ivs.len() - 1].1,
            exited: false,
            intervals: ivs
                .iter()
                .map(|&(s, e, st)| Interval::new(s, e, st))
                .collect(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        }
    }

    fn process(pid: u32, ppid: u32) -> (u32, Process) {
        let p = Process {
            pid,
            ppid,
            comm: "job".into(),
            cmdline: vec![],
            origin: Origin::Launched,
            start_ns: 0,
            exit_ns: None,
        };
        (pid, p)
    }

    fn wake(ts: u64, tid: u32, waker_tid: u32, waker_tgid: u32) -> WakeEdge {
        WakeEdge {
            ts,
            tid,
            waker_tid,
            waker_tgid,
            flags: 0,
        }
    }

    /// Trainer 1 waits 0-10 and 20-50 for worker 2 (pid 2), which runs
    /// 0-30 then is runnable; its pool thread 3 and trainer thread 4.
    fn model() -> Model {
        use ThreadState::*;
        Model {
            targets: vec![1],
            processes: BTreeMap::from([process(1, 0), process(2, 1)]),
            threads: vec![
                thread(
                    1,
                    1,
                    "python",
                    &[
                        (0, 10, Sleeping),
                        (10, 20, Running),
                        (20, 50, Sleeping),
                        (50, 60, Running),
                    ],
                ),
                thread(2, 2, "python", &[(0, 30, Running), (30, 60, Runnable)]),
                thread(3, 2, "omp", &[(0, 60, Running)]),
                thread(4, 1, "pt_data_pin", &[(0, 60, Sleeping)]),
                thread(5, 1, "cuda", &[(0, 60, Sleeping)]),
            ],
            wakeups: vec![
                wake(10, 1, 2, 2),
                wake(50, 1, 2, 2),
                // Its own thread, and a wakeup that ended no wait: not deliveries.
                wake(50, 1, 4, 1),
                wake(15, 1, 2, 2),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn roles_from_names_and_the_process_tree() {
        let roles = roles(&model());
        assert_eq!(roles[&1], TrackRole::Trainer);
        assert_eq!(roles[&2], TrackRole::DataWorker);
        assert_eq!(roles[&3], TrackRole::Pool);
        assert_eq!(roles[&4], TrackRole::PinMemory);
        assert_eq!(roles[&5], TrackRole::Other);
    }

    #[test]
    fn deliveries_end_the_trainers_waits() {
        let facts = derive(&model());
        let got: Vec<(u64, u32, u32)> = facts
            .deliveries
            .iter()
            .map(|d| (d.ts, d.from_tid, d.to_tid))
            .collect();
        assert_eq!(got, vec![(10, 2, 1), (50, 2, 1)]);
    }

    #[test]
    fn steps_run_from_wait_to_wait_and_long_waits_are_stalls() {
        let facts = derive(&model());
        assert_eq!(facts.steps.len(), 1);
        let step = &facts.steps[0];
        assert_eq!((step.start_ns, step.end_ns), (0, 20));
        assert_eq!(step.args["data_wait_ms"], json!(0.0));
        assert_eq!(step.args["producer_tid"], json!(2));
        let stalls: Vec<(u64, u64)> = facts
            .stalls
            .iter()
            .map(|s| (s.start_ns, s.end_ns))
            .collect();
        assert_eq!(stalls, vec![(20, 50), (0, 10)], "longest first");
        // The worker ran 20-30 and was runnable 30-50 of the 30 ns wait.
        assert_eq!(
            facts.stalls[0].annotation,
            "waiting for python 2 (pid 2): it ran 33%, was runnable 67%, blocked 0%"
        );
    }
}

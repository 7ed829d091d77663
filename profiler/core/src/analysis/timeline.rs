//! What a timeline shows besides thread states: the trainer's steps, the
//! batch deliveries from workers to the trainer, and the worst stalls with
//! their blame, taken from [`steps`](super::steps) (roles come from
//! [`roles`](super::roles) as they are).

use serde_json::{Map, Value, json};

use super::Summary;
use super::steps::Step;
use crate::model::{Breakdown, Model};

/// One step (batch) of a training loop.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineStep {
    /// The thread that ran it (the trainer).
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub label: String,
    /// Its breakdown (data wait, the trainer's time by state, the worker
    /// blamed), shown as the slice's args.
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

/// A stretch of one phase of the trainer's steps (analysis::anatomy), for
/// the timelines' "phases" lane.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSlice {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub phase: crate::analysis::anatomy::Phase,
    /// What most of it went to.
    pub label: String,
}

/// Everything [`derive()`] finds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimelineFacts {
    pub steps: Vec<TimelineStep>,
    pub deliveries: Vec<Delivery>,
    /// Worst (longest) first.
    pub stalls: Vec<Stall>,
    /// In time order.
    pub phases: Vec<PhaseSlice>,
}

impl TimelineFacts {
    /// Only what lies in `[start, end)` and, when `tids` is given, belongs
    /// to those threads.
    pub fn keep(
        &mut self,
        start: u64,
        end: u64,
        threads: Option<&std::collections::BTreeSet<crate::model::ThreadKey>>,
    ) {
        let tids: Option<std::collections::BTreeSet<u32>> =
            threads.map(|k| k.iter().map(|k| k.tid).collect());
        let kept = |tid: u32| tids.as_ref().is_none_or(|t| t.contains(&tid));
        let overlaps = |a: u64, b: u64| a < end && b > start;
        self.steps
            .retain(|s| kept(s.tid) && overlaps(s.start_ns, s.end_ns));
        self.deliveries
            .retain(|d| d.ts >= start && d.ts < end && kept(d.from_tid) && kept(d.to_tid));
        self.stalls
            .retain(|s| kept(s.tid) && overlaps(s.start_ns, s.end_ns));
        self.phases
            .retain(|p| kept(p.tid) && overlaps(p.start_ns, p.end_ns));
    }
}

/// Stalls kept, longest first.
const MAX_STALLS: usize = 20;

pub fn derive(model: &Model, summary: &Summary) -> TimelineFacts {
    let stats = &summary.steps;
    let Some(trainer) = stats.trainer_tid else {
        return TimelineFacts::default();
    };
    let deliveries = stats
        .deliveries
        .iter()
        .map(|d| Delivery {
            ts: d.ts_ns,
            from_tid: d.from_tid,
            to_tid: trainer,
        })
        .collect();
    let steps = stats
        .steps
        .iter()
        .enumerate()
        .map(|(n, step)| TimelineStep {
            tid: trainer,
            start_ns: step.start_ns,
            end_ns: step.end_ns,
            label: format!("step {}", n + 1),
            args: step_args(step),
        })
        .collect();
    // A step's last waited-for delivery, with the step's blame.
    let mut stalls: Vec<Stall> = stats
        .steps
        .iter()
        .filter(|step| step.data_wait_ns > 0 && step.delivered_ns > step.wait_start_ns)
        .map(|step| Stall {
            tid: trainer,
            start_ns: step.wait_start_ns,
            end_ns: step.delivered_ns,
            annotation: blame(model, step),
        })
        .collect();
    stalls.sort_by_key(|s| (std::cmp::Reverse(s.end_ns - s.start_ns), s.start_ns));
    stalls.truncate(MAX_STALLS);
    TimelineFacts {
        steps,
        deliveries,
        stalls,
        phases: phase_slices(summary, trainer),
    }
}

/// The anatomy's segments, a run of one phase merged into one slice named
/// by its longest label.
fn phase_slices(summary: &Summary, trainer: u32) -> Vec<PhaseSlice> {
    let a = &summary.anatomy;
    let mut out: Vec<PhaseSlice> = Vec::new();
    let mut longest = 0;
    for s in &a.segments {
        let label = || a.labels[s.label as usize].clone();
        match out.last_mut() {
            Some(last) if last.phase == s.phase && last.end_ns == s.start_ns => {
                last.end_ns = s.end_ns;
                if s.duration_ns() > longest {
                    longest = s.duration_ns();
                    last.label = label();
                }
            }
            _ => {
                longest = s.duration_ns();
                out.push(PhaseSlice {
                    tid: trainer,
                    start_ns: s.start_ns,
                    end_ns: s.end_ns,
                    phase: s.phase,
                    label: label(),
                });
            }
        }
    }
    out
}

/// A process' name: its main thread's latest, else the one it was seen
/// with.
pub fn process_name(model: &Model, pid: u32) -> &str {
    let main = model
        .threads
        .iter()
        .rev()
        .find(|t| t.tid == pid && t.pid == pid && !t.comm.is_empty());
    main.map(|t| t.comm.as_str())
        .or_else(|| model.processes.get(&pid).map(|p| p.comm.as_str()))
        .unwrap_or("?")
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

fn step_args(step: &Step) -> Map<String, Value> {
    let t = &step.trainer;
    [
        ("data_wait_ms", json!(ms(step.data_wait_ns))),
        ("trainer_on_cpu_ms", json!(ms(t.on_cpu))),
        ("trainer_runnable_ms", json!(ms(t.runnable))),
        ("trainer_io_ms", json!(ms(t.io))),
        ("trainer_futex_ms", json!(ms(t.futex))),
        ("trainer_sleep_ms", json!(ms(t.sleep))),
        ("cuda_sync_ms", json!(ms(step.cuda_sync_ns))),
        ("worker_pid", json!(step.worker_pid)),
        ("cause", json!(step.cause().0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// "waiting for worker 12 (pt_data_worker): runnable 55%, on CPU 40%,
/// futex 5%": what the blamed worker did meanwhile, largest share first.
fn blame(model: &Model, step: &Step) -> String {
    let comm = process_name(model, step.worker_pid);
    format!(
        "waiting for worker {} ({comm}): {}",
        step.worker_pid,
        shares(&step.blame)
    )
}

/// Causes of at least 1% of `b`, largest first.
fn shares(b: &Breakdown) -> String {
    let total = b.total();
    if total == 0 {
        return "its state is unknown".to_string();
    }
    let mut parts = [
        ("on CPU", b.on_cpu),
        ("runnable", b.runnable),
        ("IO", b.io),
        ("futex", b.futex),
        ("sleep", b.sleep),
    ];
    parts.sort_by_key(|&(_, ns)| std::cmp::Reverse(ns));
    parts
        .iter()
        .map(|&(what, ns)| (what, (100.0 * ns as f64 / total as f64).round()))
        .filter(|&(_, pct)| pct >= 1.0)
        .map(|(what, pct)| format!("{what} {pct}%"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::steps::{self, StepStats};

    fn step(start: u64, end: u64, wait: u64, blame: Breakdown) -> Step {
        Step {
            start_ns: start,
            end_ns: end,
            data_wait_ns: wait,
            wait_start_ns: end - wait,
            delivered_ns: end,
            cuda_sync_ns: 0,
            trainer: Breakdown {
                on_cpu: end - start - wait,
                sleep: wait,
                ..Default::default()
            },
            blame,
            worker_pid: 7,
            end_estimated: false,
        }
    }

    fn delivery(ts: u64, wait_start: u64) -> steps::Delivery {
        steps::Delivery {
            ts_ns: ts,
            from_tid: 7,
            worker_pid: 7,
            wait_start_ns: wait_start,
            data_wait_ns: ts - wait_start,
        }
    }

    #[test]
    fn steps_deliveries_and_the_longest_waits() {
        let runnable = Breakdown {
            runnable: 3_000_000,
            on_cpu: 1_000_000,
            ..Default::default()
        };
        let mut summary = crate::analysis::summarize(&Model::default());
        summary.steps = StepStats {
            trainer_tid: Some(1),
            deliveries: vec![
                delivery(10_000_000, 0),
                delivery(20_000_000, 18_000_000),
                delivery(40_000_000, 30_000_000),
            ],
            steps: vec![
                step(10_000_000, 20_000_000, 2_000_000, Breakdown::default()),
                step(20_000_000, 40_000_000, 10_000_000, runnable),
            ],
            ..Default::default()
        };
        let facts = derive(&Model::default(), &summary);
        assert_eq!(facts.deliveries.len(), 3);
        assert!(
            facts
                .deliveries
                .iter()
                .all(|d| d.to_tid == 1 && d.from_tid == 7)
        );
        assert_eq!(facts.steps.len(), 2);
        assert_eq!(facts.steps[1].label, "step 2");
        assert_eq!(facts.steps[1].args["data_wait_ms"], json!(10.0));
        assert_eq!(facts.steps[1].args["trainer_on_cpu_ms"], json!(10.0));
        let stalls: Vec<(u64, u64)> = facts
            .stalls
            .iter()
            .map(|s| (s.start_ns, s.end_ns))
            .collect();
        assert_eq!(
            stalls,
            vec![(30_000_000, 40_000_000), (18_000_000, 20_000_000)]
        );
        assert_eq!(
            facts.stalls[0].annotation,
            "waiting for worker 7 (?): runnable 75%, on CPU 25%"
        );
        assert_eq!(
            facts.stalls[1].annotation,
            "waiting for worker 7 (?): its state is unknown"
        );
    }

    #[test]
    fn no_trainer_no_steps() {
        let summary = crate::analysis::summarize(&Model::default());
        assert_eq!(
            derive(&Model::default(), &summary),
            TimelineFacts::default()
        );
    }
}

//! The recordings of one multi-node job side by side (`tprof merge`):
//! each rank's steps and data wait, which rank's steps are slowest and
//! why, how long the other ranks' trainers sat blocked meanwhile, and the
//! clocks: where two anchors disagree by more than their uncertainty, the
//! report says so; the merged trace aligns on each recording's own
//! anchor and never applies a correction.
//!
//! Pure: [`RankFacts`] (kept from each recording's model and summary, so a
//! merge holds one model at a time) in, [`CrossNode`] out.
//!
//! The straggler is the rank whose median step is at least
//! [`STRAGGLER_RATIO`] (10%) over the other ranks' median, or, without
//! steps, whose data-wait share leads every other's by [`DATA_WAIT_LEAD`].
//! Clocks are compared only where two recordings share a boot (same machine)
//! or one recording's start and end anchors disagree (the wall clock was
//! stepped).

use super::Summary;
use super::steps::Step;
use crate::model::{Breakdown, Model, Thread};
use crate::recording::{ClockAnchor, ClockSync, RankInfo};

const NS: f64 = 1e9;

/// A straggler's median step is at least this much longer than the median
/// of the other ranks' medians: below it, ranks differ by less than steps of
/// one rank vary, and no rank is named.
pub const STRAGGLER_RATIO: f64 = 1.10;
/// Without steps to compare, a trainer that spent this much more of its
/// time (as a share, in points) waiting for data than any other rank's is
/// the straggler.
pub const DATA_WAIT_LEAD: f64 = 0.10;

/// What the cross-node report needs of one recording.
#[derive(Debug, Clone)]
pub struct RankFacts {
    /// The recording's path, as given.
    pub file: String,
    pub host: String,
    /// `host:rank` (or `host` and the file, when the job named no rank).
    pub name: String,
    pub rank: Option<RankInfo>,
    pub boot_id: Option<String>,
    pub clock_sync: Option<ClockSync>,
    pub start: ClockAnchor,
    pub end: Option<ClockAnchor>,
    pub window_ns: (u64, u64),
    pub step_count: usize,
    pub step_p50_s: f64,
    pub data_wait_frac: f64,
    /// The leading cause of the workers' time during data waits.
    pub data_wait_blame: (&'static str, f64),
    pub steps: Vec<Step>,
    /// (id, title) of the verdict's first finding.
    pub top_finding: Option<(&'static str, String)>,
    /// The trainer thread, for its time blocked while another rank lagged.
    pub trainer: Option<Thread>,
}

impl RankFacts {
    pub fn of(file: &str, name: String, model: &Model, summary: &Summary) -> RankFacts {
        let steps = &summary.steps;
        let trainer = steps.trainer_tid.and_then(|tid| {
            model
                .threads
                .iter()
                .filter(|t| t.tid == tid)
                .max_by_key(|t| t.lifetime_ns())
                .cloned()
        });
        RankFacts {
            file: file.to_string(),
            host: model.hostname.clone(),
            name,
            rank: model.node.as_ref().and_then(|n| n.rank.clone()),
            boot_id: model.node.as_ref().and_then(|n| n.boot_id.clone()),
            clock_sync: model.node.as_ref().and_then(|n| n.clock_sync),
            start: model.start_anchor,
            end: model.end_anchor,
            window_ns: (model.window_start_ns, model.window_end_ns),
            step_count: steps.count,
            step_p50_s: steps.p50_s,
            data_wait_frac: steps.data_wait_frac,
            data_wait_blame: steps.blame.leading(),
            steps: steps.steps.clone(),
            top_finding: summary
                .findings
                .first()
                .map(|f| (f.id.name(), f.title.clone())),
            trainer,
        }
    }

    fn rank_number(&self) -> Option<u32> {
        self.rank.as_ref().and_then(|r| r.rank)
    }
}

/// One rank in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRow {
    pub file: String,
    pub host: String,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// The name of its machine in the merged trace.
    pub node: String,
    pub start_realtime_ns: u64,
    pub duration_s: f64,
    /// Batches the trainer waited for (0 without a trainer).
    pub steps: usize,
    pub step_p50_s: f64,
    /// Share of the trainer's time spent waiting for data.
    pub data_wait_frac: f64,
    pub top_finding: Option<TopFinding>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopFinding {
    pub id: &'static str,
    pub title: String,
}

/// The rank whose steps are slowest, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub file: String,
    pub rank: Option<u32>,
    pub node: String,
    /// How it was found: `step_time` (the slowest median step) or
    /// `data_wait` (too few recordings had steps; the largest share of
    /// the trainer's time waiting for data).
    pub basis: &'static str,
    pub step_p50_s: f64,
    /// Its median step over the median of the other ranks' medians (with
    /// basis `step_time`).
    pub ratio_to_others: Option<f64>,
    /// Share of its trainer's time waiting for data.
    pub data_wait_frac: f64,
    /// What its trainer's step time went to: `data_wait` (its own input
    /// pipeline), `cpu` (on a CPU or waiting for one), `io` (its own block
    /// IO), `other` (other waits: locks, GPU syncs, …).
    pub cause: &'static str,
    /// Shares of its steps' time, by those causes.
    pub shares: StepShares,
    /// With `data_wait`: what its workers were mostly doing meanwhile, and
    /// the share of their time.
    pub workers_mostly: Option<(&'static str, f64)>,
    /// The other ranks' trainers over the straggler's steps.
    pub others: Vec<Meanwhile>,
    /// Their time blocked, summed.
    pub others_blocked_s: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShares {
    pub data_wait: f64,
    pub cpu: f64,
    pub io: f64,
    pub other: f64,
}

/// Another rank's trainer while the straggler ran its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Meanwhile {
    pub file: String,
    pub rank: Option<u32>,
    pub node: String,
    /// How much of the straggler's steps its recording covers.
    pub overlap_s: f64,
    /// Its trainer's time blocked (off CPU, not runnable) in that overlap.
    pub blocked_s: f64,
}

/// Two clock anchors that disagree by more than they can be off.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockOffset {
    pub file: String,
    /// The recording it is measured against (the same file for a step
    /// within one recording).
    pub against: String,
    /// Wall clock minus monotonic clock, this one's less the other's: how
    /// far this recording's timeline sits to the right in the merged trace.
    pub offset_ns: i64,
    /// The anchors' uncertainty, summed.
    pub uncertainty_ns: u64,
    pub why: String,
}

/// The clocks the merge aligned on.
#[derive(Debug, Clone, PartialEq)]
pub struct Clocks {
    /// Always "realtime": each recording's wall clock at its start anchor.
    pub aligned_on: &'static str,
    /// Offsets larger than the anchors' uncertainty: reported, not applied.
    pub offsets: Vec<ClockOffset>,
    /// Recordings whose machine said its wall clock was unsynchronized.
    pub unsynchronized: Vec<String>,
    /// Recordings whose anchors carry no uncertainty (made by a tprof that
    /// did not measure it): not compared.
    pub unmeasured: Vec<String>,
    /// The largest NTP error estimate of the machines (ns): how far the
    /// alignment between machines can be off.
    pub max_est_error_ns: Option<u64>,
}

/// The cross-node report.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossNode {
    pub ranks: Vec<RankRow>,
    pub straggler: Option<Straggler>,
    /// Why there is no straggler, when there is none.
    pub no_straggler: Option<String>,
    pub clocks: Clocks,
}

pub fn report(facts: &[RankFacts]) -> CrossNode {
    let ranks = facts.iter().map(row).collect();
    let (straggler, no_straggler) = match straggler(facts) {
        Ok(s) => (Some(s), None),
        Err(why) => (None, Some(why)),
    };
    CrossNode {
        ranks,
        straggler,
        no_straggler,
        clocks: clocks(facts),
    }
}

fn row(f: &RankFacts) -> RankRow {
    RankRow {
        file: f.file.clone(),
        host: f.host.clone(),
        rank: f.rank_number(),
        local_rank: f.rank.as_ref().and_then(|r| r.local_rank),
        world_size: f.rank.as_ref().and_then(|r| r.world_size),
        node: f.name.clone(),
        start_realtime_ns: f.start.realtime_ns,
        duration_s: f.window_ns.1.saturating_sub(f.window_ns.0) as f64 / NS,
        steps: f.step_count,
        step_p50_s: f.step_p50_s,
        data_wait_frac: f.data_wait_frac,
        top_finding: f.top_finding.as_ref().map(|(id, title)| TopFinding {
            id,
            title: title.clone(),
        }),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        values[n / 2 - 1].midpoint(values[n / 2])
    }
}

/// The rank that holds the others back: the one with the slowest median
/// step, when at least two recordings have steps and it is clearly slower;
/// else, when fewer have steps (a trainer that never waits for data has no
/// step tprof can see), the one whose trainer spent clearly the most of its
/// time waiting for data.
fn straggler(facts: &[RankFacts]) -> Result<Straggler, String> {
    let timed: Vec<&RankFacts> = facts.iter().filter(|f| !f.steps.is_empty()).collect();
    if timed.len() >= 2 {
        return by_step_time(&timed, facts);
    }
    by_data_wait(facts).map_err(|why| {
        format!(
            "{} of {} recordings have steps (a trainer waiting for batches), so steps cannot \
             be compared; {why}",
            timed.len(),
            facts.len()
        )
    })
}

fn by_step_time(timed: &[&RankFacts], facts: &[RankFacts]) -> Result<Straggler, String> {
    let slowest = timed
        .iter()
        .copied()
        .max_by(|a, b| a.step_p50_s.total_cmp(&b.step_p50_s))
        .expect("two or more");
    let mut others: Vec<f64> = timed
        .iter()
        .filter(|f| !std::ptr::eq(**f, slowest))
        .map(|f| f.step_p50_s)
        .collect();
    let others_median = median(&mut others);
    let ratio = if others_median > 0.0 {
        slowest.step_p50_s / others_median
    } else {
        f64::INFINITY
    };
    if ratio < STRAGGLER_RATIO {
        return Err(format!(
            "the slowest median step ({}, {:.1} ms) is within {:.0}% of the others' ({:.1} ms)",
            slowest.name,
            slowest.step_p50_s * 1e3,
            (STRAGGLER_RATIO - 1.0) * 100.0,
            others_median * 1e3
        ));
    }
    Ok(explain(slowest, "step_time", Some(ratio), facts))
}

fn by_data_wait(facts: &[RankFacts]) -> Result<Straggler, String> {
    let waiting = facts
        .iter()
        .max_by(|a, b| a.data_wait_frac.total_cmp(&b.data_wait_frac))
        .ok_or("there are no recordings")?;
    let next = facts
        .iter()
        .filter(|f| !std::ptr::eq(*f, waiting))
        .map(|f| f.data_wait_frac)
        .fold(0.0, f64::max);
    if facts.len() < 2 || waiting.data_wait_frac - next < DATA_WAIT_LEAD {
        return Err(format!(
            "no trainer waited for data clearly more than the others (largest share {:.0}%, \
             next {:.0}%; a lead of {:.0} points names one)",
            waiting.data_wait_frac * 100.0,
            next * 100.0,
            DATA_WAIT_LEAD * 100.0
        ));
    }
    Ok(explain(waiting, "data_wait", None, facts))
}

/// The straggler `slow`, with what its steps went to and the others'
/// trainers meanwhile.
fn explain(
    slow: &RankFacts,
    basis: &'static str,
    ratio: Option<f64>,
    facts: &[RankFacts],
) -> Straggler {
    let shares = if slow.steps.is_empty() {
        StepShares {
            data_wait: slow.data_wait_frac,
            ..StepShares::default()
        }
    } else {
        step_shares(&slow.steps)
    };
    let cause = [
        ("data_wait", shares.data_wait),
        ("cpu", shares.cpu),
        ("io", shares.io),
        ("other", shares.other),
    ]
    .into_iter()
    .max_by(|a, b| a.1.total_cmp(&b.1))
    .expect("four causes")
    .0;
    let others = meanwhile(slow, facts);
    Straggler {
        file: slow.file.clone(),
        rank: slow.rank_number(),
        node: slow.name.clone(),
        basis,
        step_p50_s: slow.step_p50_s,
        ratio_to_others: ratio,
        data_wait_frac: slow.data_wait_frac,
        cause,
        shares,
        workers_mostly: (cause == "data_wait").then_some(slow.data_wait_blame),
        others_blocked_s: others.iter().map(|m| m.blocked_s).sum(),
        others,
    }
}

/// What a rank's steps went to. Data waits are blocked time; the rest of
/// the blocked time is IO or other waits.
fn step_shares(steps: &[Step]) -> StepShares {
    let mut total = Breakdown::default();
    let mut data_wait = 0u64;
    for s in steps {
        total.add(&s.trainer);
        data_wait += s.data_wait_ns;
    }
    let all = total.total().max(1) as f64;
    let data_wait = data_wait.min(total.blocked());
    let io = total.io.min(total.blocked() - data_wait);
    StepShares {
        data_wait: data_wait as f64 / all,
        cpu: (total.on_cpu + total.runnable) as f64 / all,
        io: io as f64 / all,
        other: (total.blocked() - data_wait - io) as f64 / all,
    }
}

/// Each other rank's trainer over the straggler's steps (its whole window
/// when it has none), on the wall clock.
fn meanwhile(slowest: &RankFacts, facts: &[RankFacts]) -> Vec<Meanwhile> {
    let (first, last) = match (slowest.steps.first(), slowest.steps.last()) {
        (Some(a), Some(b)) => (a.start_ns, b.end_ns),
        _ => slowest.window_ns,
    };
    let (wall_start, wall_end) = (
        slowest.start.monotonic_to_realtime(first),
        slowest.start.monotonic_to_realtime(last),
    );
    facts
        .iter()
        .filter(|f| !std::ptr::eq(*f, slowest))
        .map(|f| {
            let from = f.start.realtime_to_monotonic(wall_start).max(f.window_ns.0);
            let to = f.start.realtime_to_monotonic(wall_end).min(f.window_ns.1);
            let blocked = match (&f.trainer, to > from) {
                (Some(t), true) => t.breakdown(from, to).blocked(),
                _ => 0,
            };
            Meanwhile {
                file: f.file.clone(),
                rank: f.rank_number(),
                node: f.name.clone(),
                overlap_s: to.saturating_sub(from) as f64 / NS,
                blocked_s: blocked as f64 / NS,
            }
        })
        .collect()
}

/// Offsets the anchors show: between recordings of one boot (one
/// CLOCK_MONOTONIC, so wall minus monotonic must agree) and within a
/// recording (start against end: the wall clock was stepped).
fn clocks(facts: &[RankFacts]) -> Clocks {
    let mut offsets = Vec::new();
    // An anchor without its uncertainty cannot say an offset is real.
    let measured = |f: &RankFacts| {
        f.start.uncertainty_ns.is_some() && f.end.is_none_or(|e| e.uncertainty_ns.is_some())
    };
    let uncertainty = |a: &ClockAnchor| a.uncertainty_ns.unwrap_or(0);
    for (i, f) in facts.iter().enumerate().filter(|(_, f)| measured(f)) {
        let same_boot = facts[..i]
            .iter()
            .find(|g| measured(g) && f.boot_id.is_some() && g.boot_id == f.boot_id);
        if let Some(g) = same_boot {
            let offset = f.start.offset_ns() - g.start.offset_ns();
            let bound = uncertainty(&f.start) + uncertainty(&g.start);
            if offset.unsigned_abs() > u128::from(bound) {
                offsets.push(ClockOffset {
                    file: f.file.clone(),
                    against: g.file.clone(),
                    offset_ns: offset.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
                    uncertainty_ns: bound,
                    why: "same boot (one monotonic clock), different wall-clock anchors: \
                          the wall clock was set between the two, or one anchor is wrong"
                        .to_string(),
                });
            }
        }
        if let Some(end) = f.end {
            let step = end.offset_ns() - f.start.offset_ns();
            let bound = uncertainty(&f.start) + uncertainty(&end);
            if step.unsigned_abs() > u128::from(bound) {
                offsets.push(ClockOffset {
                    file: f.file.clone(),
                    against: f.file.clone(),
                    offset_ns: step.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
                    uncertainty_ns: bound,
                    why: "the wall clock was stepped during the recording: its end sits \
                          this far from where its start anchor puts it"
                        .to_string(),
                });
            }
        }
    }
    Clocks {
        aligned_on: "realtime",
        offsets,
        unsynchronized: facts
            .iter()
            .filter(|f| f.clock_sync.is_some_and(|s| !s.synchronized))
            .map(|f| f.file.clone())
            .collect(),
        unmeasured: facts
            .iter()
            .filter(|f| !measured(f))
            .map(|f| f.file.clone())
            .collect(),
        max_est_error_ns: facts
            .iter()
            .filter_map(|f| f.clock_sync.filter(|s| s.synchronized))
            .map(|s| s.est_error_ns)
            .max(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Interval;
    use crate::model::ThreadState::*;

    fn step(start: u64, len: u64, data_wait: u64) -> Step {
        Step {
            start_ns: start,
            end_ns: start + len,
            data_wait_ns: data_wait,
            wait_start_ns: 0,
            delivered_ns: 0,
            cuda_sync_ns: 0,
            end_estimated: false,
            trainer: Breakdown {
                on_cpu: len - data_wait,
                sleep: data_wait,
                ..Default::default()
            },
            blame: Breakdown::default(),
            worker_pid: 0,
        }
    }

    fn facts(file: &str, rank: u32, step_ms: u64, wait_ms: u64, offset: u64) -> RankFacts {
        let ms = 1_000_000;
        let steps: Vec<Step> = (0..10)
            .map(|i| step(i * step_ms * ms, step_ms * ms, wait_ms * ms))
            .collect();
        let end = steps.last().unwrap().end_ns;
        // A trainer blocked half of every 10 ms.
        let intervals: Vec<Interval> = (0..end / (10 * ms))
            .flat_map(|i| {
                let t = i * 10 * ms;
                [
                    Interval::new(t, t + 5 * ms, Running),
                    Interval::new(t + 5 * ms, t + 10 * ms, Sleeping),
                ]
            })
            .collect();
        RankFacts {
            file: file.into(),
            host: "h".into(),
            name: format!("h:{rank}"),
            rank: Some(RankInfo {
                rank: Some(rank),
                ..Default::default()
            }),
            boot_id: Some("b".into()),
            clock_sync: None,
            start: ClockAnchor {
                monotonic_ns: 0,
                realtime_ns: 1_000_000_000_000 + offset,
                uncertainty_ns: Some(1_000),
            },
            end: None,
            window_ns: (0, end),
            step_count: steps.len() + 1,
            step_p50_s: (step_ms * ms) as f64 / NS,
            data_wait_frac: wait_ms as f64 / step_ms as f64,
            data_wait_blame: ("on_cpu", 0.9),
            steps,
            top_finding: None,
            trainer: Some(Thread {
                tid: 1,
                pid: 1,
                comm: "python".into(),
                renamed_from: vec![],
                start_ns: 0,
                end_ns: end,
                exited: false,
                intervals: intervals.into(),
                voluntary_switches: 0,
                involuntary_switches: 0,
            }),
        }
    }

    #[test]
    fn names_the_rank_with_slow_steps_and_why() {
        let r = report(&[
            facts("a", 0, 20, 1, 0),
            facts("b", 1, 50, 35, 0),
            facts("c", 2, 21, 1, 0),
        ]);
        let s = r.straggler.expect("a straggler");
        assert_eq!((s.file.as_str(), s.rank), ("b", Some(1)));
        assert_eq!(s.cause, "data_wait");
        assert!((s.shares.data_wait - 0.7).abs() < 1e-9, "{:?}", s.shares);
        assert_eq!(s.workers_mostly, Some(("on_cpu", 0.9)));
        assert_eq!(s.basis, "step_time");
        assert!((s.ratio_to_others.unwrap() - 50.0 / 20.5).abs() < 1e-9);
        // The others' recordings cover 200 and 210 ms of b's 500 ms of
        // steps; their trainers were blocked half of it.
        let overlap: Vec<f64> = s.others.iter().map(|m| m.overlap_s).collect();
        assert_eq!(overlap, vec![0.2, 0.21]);
        assert!((s.others_blocked_s - 0.205).abs() < 1e-9);
        assert_eq!(r.ranks.len(), 3);
    }

    #[test]
    fn close_ranks_have_no_straggler() {
        let r = report(&[facts("a", 0, 20, 1, 0), facts("b", 1, 21, 1, 0)]);
        assert!(r.straggler.is_none());
        assert!(r.no_straggler.unwrap().contains("within 10%"));
        let one = report(&[facts("a", 0, 20, 1, 0)]);
        assert!(one.no_straggler.unwrap().contains("1 of 1"));
    }

    /// A healthy rank's trainer never waits, so it has no steps: the rank
    /// that waited for data far more is the straggler.
    #[test]
    fn without_steps_to_compare_the_rank_waiting_for_data_is_named() {
        let mut healthy = facts("a", 0, 20, 0, 0);
        healthy.steps.clear();
        healthy.data_wait_frac = 0.02;
        let starved = facts("b", 1, 50, 35, 0);
        let r = report(&[healthy.clone(), starved]);
        let s = r.straggler.expect("a straggler");
        assert_eq!(
            (s.rank, s.basis, s.ratio_to_others),
            (Some(1), "data_wait", None)
        );
        assert_eq!(s.cause, "data_wait");
        // Close data waits name no one.
        let mut close = facts("b", 1, 50, 35, 0);
        close.steps.clear();
        close.data_wait_frac = 0.1;
        let r = report(&[healthy, close]);
        assert!(r.no_straggler.unwrap().contains("lead of 10 points"));
    }

    #[test]
    fn reports_an_offset_between_anchors_of_one_boot() {
        let r = report(&[facts("a", 0, 20, 1, 0), facts("b", 1, 20, 1, 5_000_000_000)]);
        assert_eq!(r.clocks.offsets.len(), 1, "{:?}", r.clocks);
        let o = &r.clocks.offsets[0];
        assert_eq!((o.file.as_str(), o.against.as_str()), ("b", "a"));
        assert_eq!(o.offset_ns, 5_000_000_000);
        assert_eq!(o.uncertainty_ns, 2_000);
        // Within the anchors' uncertainty: nothing to report.
        let r = report(&[facts("a", 0, 20, 1, 0), facts("b", 1, 20, 1, 1_500)]);
        assert!(r.clocks.offsets.is_empty());
        // Other boots cannot be compared this way.
        let mut other = facts("b", 1, 20, 1, 5_000_000_000);
        other.boot_id = Some("c".into());
        assert!(
            report(&[facts("a", 0, 20, 1, 0), other])
                .clocks
                .offsets
                .is_empty()
        );
    }
}

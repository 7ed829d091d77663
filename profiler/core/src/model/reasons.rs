//! Why blocked threads wait: splits each blocked interval by the thread's
//! own futex waits and the block requests it submitted. Time inside a futex
//! wait is futex time; time while its own request is in flight is IO time
//! (IO wins where both hold); the rest is other sleep.
//!
//! An IO wait lasts until the wakeup that delivers the completion, a few
//! microseconds after the request completes: the window of a request runs
//! to its owner's first wakeup after completion (within [`DELIVERY_SLACK_NS`]).
//!
//! The S/D split of the kernel's `prev_state` is kept beside it
//! (`blocked_interruptible_s`, `blocked_uninterruptible_s` in the JSON).
//! Why overlap rather than S/D state: a thread blocked on a block request
//! may sleep in either state, and a futex wait is S like any other sleep.

use foldhash::{HashMap, HashMapExt as _};

use super::{
    Thread, WakeEdge,
    io::{FutexWait, IoRequest},
    threads::{BlockReason, Interval, Intervals},
};

/// Longest gap between a request's completion and its owner's wakeup that
/// still counts as delivering that completion.
const DELIVERY_SLACK_NS: u64 = 1_000_000;

/// (start, end, reason), sorted by start.
type Windows = Vec<(u64, u64, BlockReason)>;

pub(super) fn assign(
    threads: &mut [Thread],
    ios: &[IoRequest],
    futexes: &[FutexWait],
    wakeups: &[WakeEdge],
) {
    // Only the submitters' wakeups: there may be millions of others.
    let mut wakeups_of: HashMap<u32, Vec<u64>> = ios
        .iter()
        .filter(|io| io.tid != 0)
        .map(|io| (io.tid, Vec::new()))
        .collect();
    for w in wakeups {
        if let Some(times) = wakeups_of.get_mut(&w.tid) {
            times.push(w.ts);
        }
    }
    let mut windows: HashMap<u32, Windows> = HashMap::new();
    for io in ios.iter().filter(|io| io.tid != 0) {
        let owner_wakeups = wakeups_of.get(&io.tid).map_or(&[][..], Vec::as_slice);
        let end = delivered(io.end_ns, owner_wakeups);
        windows
            .entry(io.tid)
            .or_default()
            .push((io.start_ns, end, BlockReason::Io));
    }
    for f in futexes {
        windows
            .entry(f.tid)
            .or_default()
            .push((f.start_ns, f.end_ns, BlockReason::Futex));
    }
    for thread in threads {
        if let Some(w) = windows.get_mut(&thread.tid) {
            w.sort_unstable_by_key(|&(start, _, _)| start);
            let within: Windows = w
                .iter()
                .copied()
                .filter(|&(s, e, _)| e > thread.start_ns && s < thread.end_ns)
                .collect();
            thread.intervals = split_all(&thread.intervals, &within);
        }
    }
}

/// When a completion at `end` reached its owner: the owner's first wakeup
/// after it, if soon enough (`wakeups` sorted).
fn delivered(end: u64, wakeups: &[u64]) -> u64 {
    let next = wakeups.partition_point(|&ts| ts < end);
    match wakeups.get(next) {
        Some(&ts) if ts - end <= DELIVERY_SLACK_NS => ts,
        _ => end,
    }
}

/// Splits every blocked interval at the window edges inside it.
fn split_all(intervals: &Intervals, windows: &Windows) -> Intervals {
    let mut out = Intervals::default();
    for iv in intervals {
        if iv.reason.is_none() {
            out.push(iv);
            continue;
        }
        // Windows are few per thread compared with intervals; the linear
        // scan per blocked interval is bounded by a binary search start.
        let first = windows.partition_point(|&(_, end, _)| end <= iv.start_ns);
        let mut cuts = vec![iv.start_ns, iv.end_ns];
        for &(s, e, _) in windows[first..]
            .iter()
            .take_while(|&&(s, _, _)| s < iv.end_ns)
        {
            cuts.extend(
                [s, e]
                    .into_iter()
                    .filter(|&t| t > iv.start_ns && t < iv.end_ns),
            );
        }
        cuts.sort_unstable();
        cuts.dedup();
        for pair in cuts.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let reason = reason_at(&windows[first..], a, b);
            push_merged(
                &mut out,
                Interval {
                    start_ns: a,
                    end_ns: b,
                    state: iv.state,
                    reason: Some(reason),
                },
            );
        }
    }
    out
}

/// The reason for [a, b), which lies entirely inside or outside each window.
fn reason_at(windows: &[(u64, u64, BlockReason)], a: u64, b: u64) -> BlockReason {
    let mut reason = BlockReason::Sleep;
    for &(s, e, r) in windows.iter().take_while(|&&(s, _, _)| s < b) {
        if s <= a && e >= b {
            if r == BlockReason::Io {
                return r;
            }
            reason = r;
        }
    }
    reason
}

fn push_merged(out: &mut Intervals, iv: Interval) {
    if let Some(last) = out.last()
        && last.state == iv.state
        && last.reason == iv.reason
        && last.end_ns == iv.start_ns
    {
        out.extend_last(iv.end_ns);
        return;
    }
    out.push(iv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ThreadState;

    #[test]
    fn splits_blocked_time_by_window() {
        let intervals = vec![
            Interval::new(0, 10, ThreadState::Running),
            Interval::new(10, 100, ThreadState::Sleeping),
        ];
        let windows = vec![(5, 40, BlockReason::Futex), (60, 70, BlockReason::Io)];
        let out = split_all(&intervals.into(), &windows);
        let reasons: Vec<(u64, u64, Option<BlockReason>)> = out
            .iter()
            .map(|i| (i.start_ns, i.end_ns, i.reason))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (0, 10, None),
                (10, 40, Some(BlockReason::Futex)),
                (40, 60, Some(BlockReason::Sleep)),
                (60, 70, Some(BlockReason::Io)),
                (70, 100, Some(BlockReason::Sleep)),
            ]
        );
        let total: u64 = out.iter().map(|i| i.duration_ns()).sum();
        assert_eq!(total, 100);
    }
}

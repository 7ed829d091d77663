//! Where a thread was in its code during a stretch on a CPU, from the stacks
//! that bound and sample it: the stack it resumed from (its last
//! switch-out's), its on-CPU samples, and the stack it left the CPU with
//! (its next switch-out's). Time between two such points of the same
//! class is that class's; between two classes it is split at the middle,
//! so a boundary is off by at most half a sampling period (5 ms at the
//! default 99 Hz) and by nothing when the thread blocked or was preempted
//! at it, as a thread that waits for a batch does.

use crate::recording::{StackTable, TimedStack};

/// One point: a stack at a moment.
#[derive(Debug, Clone, Copy)]
struct Point {
    ts: u64,
    stack: u32,
}

/// Splits the running stretch `[start, end)` of the thread whose timed
/// stacks are `timed` (`StackTable::timed_of`) into pieces, each with the
/// stack that stands for it; `class` says which stacks are alike.
/// Returns (start, end, stack) in time order covering the stretch, or
/// nothing when no stack tells (a recording without stacks).
pub(super) fn split_running<C: PartialEq>(
    timed: &[TimedStack],
    start: u64,
    end: u64,
    class: impl Fn(u32) -> C,
) -> Vec<(u64, u64, u32)> {
    let points = points(timed, start, end);
    if points.is_empty() || end <= start {
        return Vec::new();
    }
    let classes: Vec<C> = points.iter().map(|p| class(p.stack)).collect();
    let mut out: Vec<(u64, u64, u32)> = Vec::new();
    let mut from = start;
    let mut current = 0;
    for i in 1..points.len() {
        if classes[i] == classes[current] {
            continue;
        }
        let cut = points[i - 1].ts.midpoint(points[i].ts).clamp(from, end);
        push(&mut out, from, cut, points[current].stack);
        from = cut;
        current = i;
    }
    push(&mut out, from, end, points[current].stack);
    out
}

fn push(out: &mut Vec<(u64, u64, u32)>, start: u64, end: u64, stack: u32) {
    if end > start {
        out.push((start, end, stack));
    }
}

/// The stacks that tell where the thread was in `[start, end]`, in time
/// order: the off-CPU interval that ended at `start`, the samples inside,
/// the off-CPU interval that began at `end`.
fn points(timed: &[TimedStack], start: u64, end: u64) -> Vec<Point> {
    let mut out = Vec::new();
    // Entries are sorted by start; the one that ended at `start` began
    // before it.
    let first = timed.partition_point(|t| t.start_ns < start);
    if let Some(resumed) = timed[..first]
        .iter()
        .rev()
        .take(4)
        .find(|t| !t.kind.is_on_cpu() && t.end_ns == start)
    {
        out.push(Point {
            ts: start,
            stack: resumed.stack,
        });
    }
    for t in &timed[first..] {
        if t.start_ns > end {
            break;
        }
        if t.kind.is_on_cpu() {
            if t.start_ns < end || out.is_empty() {
                out.push(Point {
                    ts: t.start_ns,
                    stack: t.stack,
                });
            }
        } else if t.start_ns == end {
            out.push(Point {
                ts: end,
                stack: t.stack,
            });
        }
    }
    out
}

/// The stack the thread left the CPU with at `ts` (its off-CPU interval
/// covering `ts`), if it was recorded.
pub(super) fn off_cpu_at(timed: &[TimedStack], ts: u64) -> Option<u32> {
    let i = timed.partition_point(|t| t.start_ns <= ts);
    timed[..i]
        .iter()
        .rev()
        .take(8)
        .find(|t| !t.kind.is_on_cpu() && t.end_ns > ts)
        .map(|t| t.stack)
}

/// The table's timed entries of `tid` (empty without stacks).
pub(super) fn timed_of(table: Option<&StackTable>, tid: u32) -> &[TimedStack] {
    table.map_or(&[], |t| t.timed_of(tid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::StackKind;

    fn off(start: u64, end: u64, stack: u32) -> TimedStack {
        TimedStack {
            start_ns: start,
            end_ns: end,
            pid: 1,
            tid: 1,
            thread_ns: 0,
            stack,
            kind: StackKind::Sleep,
        }
    }

    fn sample(ts: u64, stack: u32) -> TimedStack {
        TimedStack {
            start_ns: ts,
            end_ns: ts,
            pid: 1,
            tid: 1,
            thread_ns: 0,
            stack,
            kind: StackKind::OnCpu,
        }
    }

    /// Resumed in class 0 at 100, sampled in 0 at 110 and 1 at 130, left
    /// in 1 at 200: the boundary is halfway between 110 and 130.
    #[test]
    fn splits_between_unlike_points() {
        let timed = [
            off(50, 100, 0),
            sample(110, 0),
            sample(130, 1),
            off(200, 300, 1),
        ];
        let pieces = split_running(&timed, 100, 200, |s| s);
        assert_eq!(pieces, [(100, 120, 0), (120, 200, 1)]);
    }

    #[test]
    fn one_class_is_one_piece_and_no_stacks_none() {
        let timed = [off(50, 100, 3), off(200, 300, 3)];
        assert_eq!(split_running(&timed, 100, 200, |s| s), [(100, 200, 3)]);
        assert!(split_running(&[], 100, 200, |s| s).is_empty());
        assert_eq!(off_cpu_at(&timed, 250), Some(3));
        assert_eq!(off_cpu_at(&timed, 150), None);
    }
}

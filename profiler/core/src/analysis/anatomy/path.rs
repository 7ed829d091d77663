//! The critical path of one wait for a batch: the trainer was woken by a
//! thread; what that thread did before it woke the trainer is the wait's
//! cause, and where it was itself blocked, what the thread that woke it did,
//! and so on back to the wait's start (Perfetto's
//! `sched.thread_executing_span`, for one wait at a time).
//!
//! Each piece is named by the thread and its state: the pin-memory thread
//! on a CPU or waiting for one is [`Phase::PinMemory`]; a worker's thread
//! (its main thread, its queue feeder, its pools) on a CPU is making the
//! batch or sending it, by its stack; waiting for a CPU,
//! [`Phase::WorkerCpuWait`]; blocked with no one in the job to follow (a
//! disk, a timer, a lock held outside the job), block IO or sleep; blocked
//! on the index queue, or on the trainer itself, idle. A worker process
//! from its fork to its first batch is starting, whatever it did.

use super::classify::WorkerWork;
use super::{Ctx, Phase, Segment, context, push};
use crate::analysis::roles::Role;
use crate::model::{BlockReason, ThreadState};

/// Hops followed from the trainer: the pin-memory thread, a feeder, a
/// worker, a pool thread, and some slack. A longer chain is cut there and
/// its rest named by the last thread's state.
const MAX_DEPTH: usize = 6;

/// What `tid` did in `[start, end)`, following whoever ended its blocks.
/// Pieces cover at most `[start, end)`; the caller fills what they leave.
pub(super) fn walk(ctx: &mut Ctx, tid: u32, start: u64, end: u64, depth: usize) -> Vec<Segment> {
    let mut out = Vec::new();
    let Some(thread) = ctx.thread_at(tid, end.saturating_sub(1)) else {
        return out;
    };
    let (pid, role) = (thread.pid, ctx.roles.of_thread(thread));
    let side = Side::of(ctx, pid, role);
    if thread.start_ns > start {
        let born = thread.start_ns.min(end);
        let main = (tid != pid)
            .then(|| ctx.thread_at(pid, born.saturating_sub(1)))
            .flatten();
        match main {
            // A thread its process started meanwhile (a queue's feeder
            // starts with the first batch): before it, its process's main
            // thread was on the path.
            Some(_) if depth < MAX_DEPTH => out.extend(walk(ctx, pid, start, born, depth + 1)),
            _ => {
                if ctx.starting_until(pid, start).is_some() {
                    // Not born yet: its process was being started.
                    let label = ctx.named("[fork]".into());
                    push(&mut out, start, born, Phase::WorkerStart, label);
                }
            }
        }
    }
    let first = thread.intervals.partition_by_end(|e| e <= start);
    for iv in thread.intervals.iter_from(first) {
        if iv.start_ns >= end {
            break;
        }
        let (a, b) = (iv.start_ns.max(start), iv.end_ns.min(end));
        if b <= a {
            continue;
        }
        match iv.state {
            ThreadState::Running => running(ctx, tid, pid, side, a, b, &mut out),
            ThreadState::Runnable => {
                let stack = context::off_cpu_at(ctx.timed(tid), a);
                let label = ctx.label(stack);
                let phase = match side {
                    Side::Pin => Phase::PinMemory,
                    Side::Worker => Phase::WorkerCpuWait,
                    Side::Trainer => Phase::CpuWait,
                };
                starting_split(ctx, pid, side, a, b, phase, label, &mut out);
            }
            ThreadState::Sleeping | ThreadState::DiskSleep => {
                blocked(
                    ctx,
                    tid,
                    pid,
                    side,
                    (a, b),
                    iv.end_ns,
                    iv.reason,
                    depth,
                    &mut out,
                );
            }
        }
    }
    out
}

/// Which side of the pipeline a thread on the path is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The pin-memory thread.
    Pin,
    /// A data worker's thread (main, feeder, pool).
    Worker,
    /// Another thread of the trainer's process.
    Trainer,
}

impl Side {
    fn of(ctx: &Ctx, pid: u32, role: Role) -> Side {
        if role == Role::PinMemory {
            Side::Pin
        } else if pid == ctx.trainer.pid {
            Side::Trainer
        } else {
            Side::Worker
        }
    }
}

fn running(ctx: &mut Ctx, tid: u32, pid: u32, side: Side, a: u64, b: u64, out: &mut Vec<Segment>) {
    let pieces = context::split_running(ctx.timed(tid), a, b, |s| ctx.worker_work(Some(s)));
    let pieces = if pieces.is_empty() {
        vec![(a, b, None)]
    } else {
        pieces
            .into_iter()
            .map(|(s, e, st)| (s, e, Some(st)))
            .collect()
    };
    for (s, e, stack) in pieces {
        let phase = match side {
            Side::Pin => Phase::PinMemory,
            Side::Trainer => Phase::Other,
            Side::Worker => match ctx.worker_work(stack) {
                WorkerWork::Sending => Phase::Sending,
                WorkerWork::Idle => Phase::WorkerIdle,
                WorkerWork::Making => Phase::WorkerBusy,
            },
        };
        let label = if phase == Phase::Sending {
            ctx.framework_label(stack)
        } else {
            ctx.label(stack)
        };
        starting_split(ctx, pid, side, s, e, phase, label, out);
    }
}

/// A blocked stretch `[a, b)` of `tid` on the path, its block ending at
/// `woken`: followed to its waker when that is a thread of the job.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site; a struct would only rename them"
)]
fn blocked(
    ctx: &mut Ctx,
    tid: u32,
    pid: u32,
    side: Side,
    (a, b): (u64, u64),
    woken: u64,
    reason: Option<BlockReason>,
    depth: usize,
    out: &mut Vec<Segment>,
) {
    let waker = ctx.waker(tid, woken);
    let trainer = ctx.trainer.tid;
    let follow = waker.filter(|w| {
        depth < MAX_DEPTH
            && w.waker_tid != tid
            && w.waker_tid != trainer
            && w.waker_tid != 0
            && ctx.thread_at(w.waker_tid, b.saturating_sub(1)).is_some()
    });
    let mut pieces = match follow {
        Some(w) => walk(ctx, w.waker_tid, a, b, depth + 1),
        None => Vec::new(),
    };
    let stack = context::off_cpu_at(ctx.timed(tid), a);
    let label = ctx.label(stack);
    let by_trainer = waker.is_some_and(|w| w.waker_tid == trainer);
    let phase = match side {
        Side::Pin => Phase::WaitOther,
        Side::Trainer => Phase::Other,
        Side::Worker if reason == Some(BlockReason::Io) => Phase::WorkerIo,
        Side::Worker if by_trainer => Phase::WorkerIdle,
        Side::Worker => match ctx.worker_work(stack) {
            WorkerWork::Idle => Phase::WorkerIdle,
            _ => Phase::WorkerSleep,
        },
    };
    pieces.sort_by_key(|s| s.start_ns);
    let mut at = a;
    for piece in pieces {
        let (s, e) = (piece.start_ns.max(at), piece.end_ns.min(b));
        if s > at {
            starting_split(ctx, pid, side, at, s, phase, label, out);
        }
        if e > s {
            push(out, s, e, piece.phase, piece.label);
            at = e;
        }
    }
    if b > at {
        starting_split(ctx, pid, side, at, b, phase, label, out);
    }
}

/// Pushes a worker-side piece, the part before its process's first batch
/// as worker start.
#[allow(
    clippy::too_many_arguments,
    reason = "the piece, its phase and where it goes"
)]
fn starting_split(
    ctx: &Ctx,
    pid: u32,
    side: Side,
    a: u64,
    b: u64,
    phase: Phase,
    label: u32,
    out: &mut Vec<Segment>,
) {
    if side == Side::Worker
        && let Some(ready) = ctx.starting_until(pid, a)
    {
        let cut = ready.min(b);
        push(out, a, cut, Phase::WorkerStart, label);
        push(out, cut, b, phase, label);
        return;
    }
    push(out, a, b, phase, label);
}

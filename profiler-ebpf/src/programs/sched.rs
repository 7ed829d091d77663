//! Scheduler tracepoints: context switches and wakeups of tracked threads.
//! These are the hottest programs (every context switch on the machine runs
//! `tprof_switch`), so they do two map lookups and nothing else when neither
//! task is tracked. Those two lookups also return the tracked tasks' state
//! (`ThreadState`), so a tracked switch adds no further per-thread lookup:
//! off-CPU stack sampling (see `stacks`) updates that state in place, with
//! at most one stack walk pair at switch-out and one aggregate update at
//! switch-in.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use profiler_ebpf::{SwitchEvent, WAKE_NEW_TASK, WakeupEvent, kind};

use super::{emit, header, header_at, offsets, stacks, stacks_enabled, thread_state, tracked_tgid};

#[tracepoint]
pub fn tprof_switch(ctx: TracePointContext) -> u32 {
    let _ = try_switch(&ctx);
    0
}

fn try_switch(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let prev_tid = unsafe { ctx.read_at::<i32>(off.switch_prev_pid as usize)? } as u32;
    let next_tid = unsafe { ctx.read_at::<i32>(off.switch_next_pid as usize)? } as u32;
    let prev = thread_state(prev_tid);
    let next = thread_state(next_tid);
    // Tested through the tgids (never 0 for a tracked thread), not the
    // pointers: LLVM merges two null tests into `prev | next`, and the
    // verifier refuses arithmetic on map-value pointers.
    let prev_tgid = prev.map_or(0, |state| unsafe { (*state).tgid });
    let next_tgid = next.map_or(0, |state| unsafe { (*state).tgid });
    if prev_tgid == 0 && next_tgid == 0 {
        return Ok(());
    }
    let prev_state = unsafe { ctx.read_at::<i64>(off.switch_prev_state as usize)? } as u64;
    // One clock read for the event and both off-CPU halves.
    let now = unsafe { bpf_ktime_get_ns() };
    if stacks_enabled() {
        if let Some(state) = prev {
            stacks::switch_out(ctx, state, prev_state, now);
        }
        if let Some(state) = next {
            stacks::switch_in(next_tid, state, now);
        }
    }
    emit(
        kind::SWITCH,
        SwitchEvent {
            hdr: header_at(kind::SWITCH, now),
            prev_state,
            prev_tid,
            prev_tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
            next_tid,
            next_tgid,
        },
    );
    Ok(())
}

/// sched_waking runs in the waker's context (or in the interrupt that does
/// the waking), so `current` is the waker. It is also the moment the task
/// becomes runnable, to within the few microseconds a remote CPU takes to
/// enqueue it; taking both from here spares a second program on every
/// wakeup (sched_wakeup) and a map to carry the waker between the two.
#[tracepoint]
pub fn tprof_waking(ctx: TracePointContext) -> u32 {
    let _ = try_wakeup(&ctx, false);
    0
}

/// The first wakeup of a new task, by its parent (current here).
#[tracepoint]
pub fn tprof_wakeup_new(ctx: TracePointContext) -> u32 {
    let _ = try_wakeup(&ctx, true);
    0
}

fn try_wakeup(ctx: &TracePointContext, new_task: bool) -> Result<(), i32> {
    let off = offsets();
    let tid = unsafe { ctx.read_at::<i32>(off.wakeup_pid as usize)? } as u32;
    let Some(tgid) = tracked_tgid(tid) else {
        return Ok(());
    };
    let target_cpu = unsafe { ctx.read_at::<i32>(off.wakeup_target_cpu as usize)? } as u32;
    let waker = bpf_get_current_pid_tgid();
    let flags = if new_task { WAKE_NEW_TASK } else { 0 };
    emit(
        kind::WAKEUP,
        WakeupEvent {
            hdr: header(kind::WAKEUP),
            tid,
            tgid,
            waker_tid: waker as u32,
            waker_tgid: (waker >> 32) as u32,
            target_cpu,
            flags,
        },
    );
    Ok(())
}

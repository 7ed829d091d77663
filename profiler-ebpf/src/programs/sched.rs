//! Scheduler tracepoints: context switches and wakeups of tracked threads.
//! These are the hottest programs (every context switch on the machine runs
//! `tprof_switch`), so they do two map lookups and nothing else when neither
//! task is tracked. Those two lookups also return the tracked tasks' state
//! (`ThreadState`), so a tracked switch adds no further per-thread lookup:
//! off-CPU stack sampling (see `stacks`) updates that state in place, with
//! at most one kernel stack walk and one user stack copy at switch-out; the
//! switch-in only marks the thread on a CPU (`ThreadState::on_cpu`) and
//! emits the event (userspace weighs the off-CPU interval). A switch-out
//! that finds the mark cleared follows an arrival no program saw (this
//! kernel does not trace a switch away from some tasks): it first emits an
//! `ArrivalEvent` with the CPU time the scheduler charged the thread since
//! it picked it, so userspace knows when it arrived.
//!
//! Programs: `tprof_switch_r` (raw, where the kernel has BTF) or
//! `tprof_switch` (classic) on `sched_switch`, for a tracked prev or next:
//! a `SwitchEvent`, which for a tracked prev carries why it left
//! (`prev_kind`) and, with stacks on, the stacks it left from.
//! `tprof_waking_r` and `tprof_wakenew_r` (raw) or `tprof_waking` and
//! `tprof_wakeup_new` (classic) on `sched_waking` and `sched_wakeup_new`,
//! for a tracked wakee: a `WakeupEvent` with the waker (`current`; for a new
//! task its parent, flagged `WAKE_NEW_TASK`). The raw programs read
//! `next->pid` and friends at BTF offsets and compute `prev_state` as the
//! kernel's `__trace_sched_switch_state` does, so both sets emit the same
//! bytes; capture picks one set at load (capture/btf.rs).

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        generated::bpf_get_current_task,
    },
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext, tracing::StackIdContext},
};
use profiler_ebpf::{
    ArrivalEvent, NO_STACK_KIND, SwitchEvent, TASK_DEAD, WAKE_NEW_TASK, WakeupEvent,
    report_prev_state, switch_part,
};

use super::{
    emit, header, header_at, offsets, profile_begin, profile_end, stacks, stacks_enabled,
    thread_state, tracked_tgid,
};

/// Classic `sched/sched_switch`: used where the raw program below cannot be
/// (no kernel BTF for its task_struct offsets, or a kernel before 5.18).
#[tracepoint]
pub(crate) fn tprof_switch(ctx: TracePointContext) -> u32 {
    let _ = try_switch(&ctx);
    0
}

fn try_switch(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let prev_tid = unsafe { ctx.read_at::<i32>(off.switch_prev_pid as usize)? } as u32;
    let next_tid = unsafe { ctx.read_at::<i32>(off.switch_next_pid as usize)? } as u32;
    switch(ctx, prev_tid, next_tid, || unsafe {
        ctx.read_at::<i64>(off.switch_prev_state as usize)
            .map(|state| state as u64)
    })
}

/// Raw `sched_switch(bool preempt, struct task_struct *prev, struct
/// task_struct *next, unsigned int prev_state)`. The classic tracepoint
/// makes the kernel fill a perf record (both comms, pids, prios, the
/// state) for every context switch on the machine before our program
/// runs; the raw one hands us the arguments and we read the one field we
/// need, next->pid (prev is `current`). Same event, same `prev_state`
/// encoding as the classic tracepoint's.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub(crate) fn tprof_switch_r(ctx: RawTracePointContext) -> u32 {
    let _ = try_switch_raw(&ctx);
    0
}

fn try_switch_raw(ctx: &RawTracePointContext) -> Result<(), i32> {
    let off = offsets();
    let prev_tid = bpf_get_current_pid_tgid() as u32;
    let next: u64 = ctx.arg(2);
    let next_tid =
        unsafe { bpf_probe_read_kernel((next + u64::from(off.task_pid)) as *const i32)? } as u32;
    switch(ctx, prev_tid, next_tid, || {
        let preempt: u64 = ctx.arg(0);
        let state: u64 = ctx.arg(3);
        let state = state as u32;
        let exit_state = if state & TASK_DEAD != 0 {
            let prev: u64 = ctx.arg(1);
            let exit_state = (prev + u64::from(off.task_exit_state)) as *const i32;
            (unsafe { bpf_probe_read_kernel(exit_state)? }) as u32
        } else {
            0
        };
        Ok(report_prev_state(preempt & 0xff != 0, state, exit_state))
    })
}

/// Both sched_switch programs, once they have the two tids: filter, then
/// the off-CPU halves and the event. `prev_state` is only computed for a
/// switch involving a tracked task.
#[inline(always)]
fn switch<C: StackIdContext>(
    ctx: &C,
    prev_tid: u32,
    next_tid: u32,
    prev_state: impl FnOnce() -> Result<u64, i32>,
) -> Result<(), i32> {
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
    profile_begin(switch_part::TRACKED);
    let prev_state = prev_state()?;
    // One clock read for the events and the switch-out's stack walk.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(state) = next {
        // SAFETY: a live TRACKED_TIDS entry; `on_cpu` is written only at
        // the thread's switches, which one CPU at a time makes.
        unsafe { (*state).on_cpu = 1 };
    }
    let (prev_kind, prev_user_stack, prev_kernel_stack) = match prev {
        Some(state) => {
            // SAFETY: as for next.
            if unsafe { core::mem::replace(&mut (*state).on_cpu, 0) } == 0 {
                unseen_arrival(prev_tid, prev_tgid, now);
            }
            stacks::switch_out(ctx, prev_tid, state, prev_state, now, stacks_enabled())
        }
        None => (NO_STACK_KIND, -1, -1),
    };
    profile_begin(switch_part::EVENT_WRITE);
    emit(SwitchEvent {
        hdr: header_at::<SwitchEvent>(now),
        prev_state: prev_state as u32,
        prev_kind,
        prev_tid,
        prev_tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        next_tid,
        next_tgid,
        prev_user_stack,
        prev_kernel_stack,
    });
    profile_end(switch_part::EVENT_WRITE);
    profile_end(switch_part::TRACKED);
    Ok(())
}

/// A tracked prev leaves the CPU with no traced switch-in since its last
/// switch-out: an [`ArrivalEvent`] before its switch event says how long
/// it ran, as the scheduler charged it (`current` is prev here). Nothing
/// where the offsets are unknown (no BTF) or the sum makes no sense.
#[inline(always)]
fn unseen_arrival(tid: u32, tgid: u32, now: u64) {
    let off = offsets();
    if off.task_runtime == 0 || off.task_prev_runtime == 0 {
        return;
    }
    let task = unsafe { bpf_get_current_task() };
    let read = |at: u16| unsafe { bpf_probe_read_kernel((task + u64::from(at)) as *const u64) };
    let (Ok(runtime), Ok(picked)) = (read(off.task_runtime), read(off.task_prev_runtime)) else {
        return;
    };
    if runtime <= picked {
        return;
    }
    emit(ArrivalEvent {
        hdr: header_at::<ArrivalEvent>(now),
        run_ns: runtime - picked,
        tid,
        tgid,
    });
}

/// sched_waking runs in the waker's context (or in the interrupt that does
/// the waking), so `current` is the waker. It is also the moment the task
/// becomes runnable, to within the few microseconds a remote CPU takes to
/// enqueue it; taking both from here spares a second program on every
/// wakeup (sched_wakeup) and a map to carry the waker between the two.
#[tracepoint]
pub(crate) fn tprof_waking(ctx: TracePointContext) -> u32 {
    let _ = try_wakeup(&ctx, false);
    0
}

/// The first wakeup of a new task, by its parent (current here).
#[tracepoint]
pub(crate) fn tprof_wakeup_new(ctx: TracePointContext) -> u32 {
    let _ = try_wakeup(&ctx, true);
    0
}

fn try_wakeup(ctx: &TracePointContext, new_task: bool) -> Result<(), i32> {
    let off = offsets();
    let tid = unsafe { ctx.read_at::<i32>(off.wakeup_pid as usize)? } as u32;
    wakeup(tid, new_task, || unsafe {
        ctx.read_at::<i32>(off.wakeup_target_cpu as usize)
            .map(|cpu| cpu as u32)
    })
}

/// Raw `sched_waking(struct task_struct *p)`: as `tprof_waking`, without
/// the perf record (comm, pid, prio, target_cpu) the classic tracepoint
/// fills for every wakeup on the machine.
#[raw_tracepoint(tracepoint = "sched_waking")]
pub(crate) fn tprof_waking_r(ctx: RawTracePointContext) -> u32 {
    let _ = try_wakeup_raw(&ctx, false);
    0
}

/// Raw `sched_wakeup_new(struct task_struct *p)`.
#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
pub(crate) fn tprof_wakenew_r(ctx: RawTracePointContext) -> u32 {
    let _ = try_wakeup_raw(&ctx, true);
    0
}

fn try_wakeup_raw(ctx: &RawTracePointContext, new_task: bool) -> Result<(), i32> {
    let off = offsets();
    let task: u64 = ctx.arg(0);
    let tid =
        unsafe { bpf_probe_read_kernel((task + u64::from(off.task_pid)) as *const i32)? } as u32;
    // The classic tracepoint's target_cpu is task_cpu(p).
    wakeup(tid, new_task, || unsafe {
        bpf_probe_read_kernel((task + u64::from(off.task_cpu)) as *const u32)
    })
}

/// Both wakeup programs, once they have the wakee's tid.
#[inline(always)]
fn wakeup(
    tid: u32,
    new_task: bool,
    target_cpu: impl FnOnce() -> Result<u32, i32>,
) -> Result<(), i32> {
    let Some(tgid) = tracked_tgid(tid) else {
        return Ok(());
    };
    let target_cpu = target_cpu()?;
    let waker = bpf_get_current_pid_tgid();
    let flags = if new_task { WAKE_NEW_TASK } else { 0 };
    emit(WakeupEvent {
        hdr: header::<WakeupEvent>(),
        tid,
        tgid,
        waker_tid: waker as u32,
        waker_tgid: (waker >> 32) as u32,
        target_cpu,
        flags,
    });
    Ok(())
}

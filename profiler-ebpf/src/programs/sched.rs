//! Scheduler tracepoints: context switches and wakeups of tracked threads.
//! These are the hottest programs (every context switch on the machine runs
//! `tprof_switch`), so they do two map lookups and nothing else when neither
//! task is tracked. For tracked tasks the switch also feeds off-CPU stack
//! sampling (see `stacks`): two stack walks at switch-out, one map update at
//! switch-in.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};
use profiler_ebpf::{SwitchEvent, WAKE_NEW_TASK, WakerInfo, WakeupEvent, kind};

use super::{WAKERS, emit, header, offsets, stacks, stacks_enabled, tracked_tgid};

#[tracepoint]
pub fn tprof_switch(ctx: TracePointContext) -> u32 {
    let _ = try_switch(&ctx);
    0
}

fn try_switch(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let prev_tid = unsafe { ctx.read_at::<i32>(off.switch_prev_pid as usize)? } as u32;
    let next_tid = unsafe { ctx.read_at::<i32>(off.switch_next_pid as usize)? } as u32;
    let prev_tracked = tracked_tgid(prev_tid).is_some();
    let next_tgid = tracked_tgid(next_tid).unwrap_or(0);
    if !prev_tracked && next_tgid == 0 {
        return Ok(());
    }
    let prev_state = unsafe { ctx.read_at::<i64>(off.switch_prev_state as usize)? } as u64;
    if stacks_enabled() {
        if prev_tracked {
            stacks::switch_out(ctx, prev_tid, prev_state);
        }
        if next_tgid != 0 {
            stacks::switch_in(next_tid);
        }
    }
    emit(
        kind::SWITCH,
        SwitchEvent {
            hdr: header(kind::SWITCH),
            prev_state,
            prev_tid,
            prev_tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
            next_tid,
            next_tgid,
        },
    );
    Ok(())
}

/// sched_waking runs in the waker's context: remember who it is until the
/// wakee is enqueued (sched_wakeup may run later, on the wakee's CPU).
#[tracepoint]
pub fn tprof_waking(ctx: TracePointContext) -> u32 {
    let _ = try_waking(&ctx);
    0
}

fn try_waking(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let tid = unsafe { ctx.read_at::<i32>(off.wakeup_pid as usize)? } as u32;
    if tracked_tgid(tid).is_none() {
        return Ok(());
    }
    let info = WakerInfo {
        pid_tgid: bpf_get_current_pid_tgid(),
    };
    WAKERS.insert(&tid, &info, 0)
}

#[tracepoint]
pub fn tprof_wakeup(ctx: TracePointContext) -> u32 {
    let _ = try_wakeup(&ctx, false);
    0
}

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
    // A new task is woken by its parent, which is current here; a woken task
    // by whoever sched_waking saw.
    let (waker, flags) = if new_task {
        (bpf_get_current_pid_tgid(), WAKE_NEW_TASK)
    } else {
        let info = unsafe { WAKERS.get(&tid) }.copied().unwrap_or_default();
        let _ = WAKERS.remove(&tid);
        (info.pid_tgid, 0)
    };
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

//! Stack sampling: on-CPU samples from the cpu-clock perf event, and the
//! off-CPU half, which `sched::try_switch` drives. Both aggregate in the
//! kernel into `STACK_COUNTS`, so a stack costs one map update rather than
//! a ring-buffer record; userspace reads the totals when recording ends.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::perf_event,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use profiler_ebpf::{
    BPF_F_USER_STACK, LastStacks, OffCpuStart, STACK_KINDS, STACK_REUSE_NS, StackKey, ThreadState,
    lost_stack, offcpu_reason, stack_kind,
};

use super::{EEXIST, EFAULT, STACK_COUNTS, STACKS, add_per_cpu, count_lost, tracked_tgid};

/// One cpu-clock tick on some CPU: count the stacks of the thread it
/// interrupted, if that thread is tracked.
#[perf_event]
pub fn tprof_sample(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // tid 0 is the idle task; tracked_tgid filters everything else untracked.
    if tid != 0 && tracked_tgid(tid).is_some() {
        let (user_stack_id, kernel_stack_id) = stack_ids(&ctx);
        let key = StackKey {
            tgid: (pid_tgid >> 32) as u32,
            tid,
            user_stack_id,
            kernel_stack_id,
            kind: stack_kind::ON_CPU,
            _pad: 0,
        };
        add_weight(&key, 1);
    }
    0
}

/// (user, kernel) stack ids of the current task; -1 for a missing one.
#[inline(always)]
pub fn stack_ids<C: StackIdContext>(ctx: &C) -> (i32, i32) {
    (stack_id(ctx, BPF_F_USER_STACK), stack_id(ctx, 0))
}

#[inline(always)]
fn stack_id<C: StackIdContext>(ctx: &C, flags: u64) -> i32 {
    match ctx.get_stackid(&STACKS, flags) {
        Ok(id) => id as i32,
        // No kernel frames: the sample interrupted user code. Not a loss.
        Err(e) if e == -EFAULT => -1,
        Err(e) => {
            count_lost(if e == -EEXIST {
                lost_stack::COLLISION
            } else {
                lost_stack::FAILED
            });
            -1
        }
    }
}

/// Adds `weight` to `key`'s total, counting a full aggregate.
#[inline(always)]
fn add_weight(key: &StackKey, weight: u64) {
    if add_per_cpu(&STACK_COUNTS, key, weight).is_err() {
        count_lost(lost_stack::AGGREGATE_FULL);
    }
}

/// sched_switch, prev side: a tracked thread leaves the CPU. Runs in prev's
/// context, so the stacks taken here are where it stopped. `state` is the
/// thread's `TRACKED_TIDS` entry.
#[inline(always)]
pub fn switch_out<C: StackIdContext>(ctx: &C, state: *mut ThreadState, prev_state: u64, now: u64) {
    let Some(reason) = offcpu_reason(prev_state) else {
        return; // exiting: it will not come back
    };
    // SAFETY: state points into a live TRACKED_TIDS entry; only this
    // thread's own switches and syscalls write it, and they cannot overlap.
    let state = unsafe { &mut *state };
    let reason = if reason == stack_kind::SLEEP && state.futex.ts_ns != 0 {
        stack_kind::FUTEX
    } else {
        reason
    };
    let (user_stack_id, kernel_stack_id) = offcpu_stack_ids(ctx, state, reason, now);
    state.offcpu = OffCpuStart {
        ts_ns: now,
        user_stack_id,
        kernel_stack_id,
        reason,
        tgid: state.tgid,
    };
}

/// The stacks a switch-out leaves from: walked, or the thread's last walk
/// for the same reason when that is under STACK_REUSE_NS old (one slot per
/// reason, so a page-fault wait (D) never lends its stack to the long sleep
/// (S) that follows it). Walking is the costliest thing tprof does per
/// event.
#[inline(always)]
fn offcpu_stack_ids<C: StackIdContext>(
    ctx: &C,
    state: &mut ThreadState,
    reason: u32,
    now: u64,
) -> (i32, i32) {
    let last = &mut state.last_stacks[reason as usize % STACK_KINDS];
    if now.saturating_sub(last.walked_ns) < STACK_REUSE_NS {
        return (last.user_stack_id, last.kernel_stack_id);
    }
    let (user_stack_id, kernel_stack_id) = stack_ids(ctx);
    *last = LastStacks {
        walked_ns: now,
        user_stack_id,
        kernel_stack_id,
    };
    (user_stack_id, kernel_stack_id)
}

/// sched_switch, next side: a tracked thread runs again; the time since its
/// switch-out goes to the stack it left from. `state` is the thread's
/// `TRACKED_TIDS` entry.
#[inline(always)]
pub fn switch_in(tid: u32, state: *mut ThreadState, now: u64) {
    // SAFETY: as in switch_out; the switch-out that wrote `offcpu` happened
    // before this switch-in (the scheduler orders them).
    let state = unsafe { &mut *state };
    let start = state.offcpu;
    if start.ts_ns == 0 {
        return; // on a CPU since before the recording, or its switch-out was not seen
    }
    state.offcpu.ts_ns = 0;
    let key = StackKey {
        tgid: start.tgid,
        tid,
        user_stack_id: start.user_stack_id,
        kernel_stack_id: start.kernel_stack_id,
        kind: start.reason,
        _pad: 0,
    };
    add_weight(&key, now.saturating_sub(start.ts_ns));
}

//! Stack sampling: on-CPU samples from the cpu-clock perf event, and the
//! off-CPU half, which `sched::try_switch` drives. Both aggregate in the
//! kernel into `STACK_COUNTS`, so a stack costs one map update rather than
//! a ring-buffer record; userspace reads the totals when recording ends.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{map, perf_event},
    maps::HashMap,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use profiler_ebpf::{
    BPF_F_USER_STACK, LastStacks, MAX_TRACKED_TIDS, OffCpuStart, STACK_REUSE_NS, StackKey,
    lost_stack, offcpu_reason, stack_kind,
};

use super::{OFFCPU_START, STACK_COUNTS, STACKS, count_lost, tracked_tgid};

/// Each thread's last walked off-CPU stacks per off-CPU reason, keyed by
/// [`reuse_key`];
/// updated in place, removed at exit (see `OFFCPU_START`).
#[map]
static LAST_STACKS: HashMap<u64, LastStacks> = HashMap::with_max_entries(2 * MAX_TRACKED_TIDS, 0);

/// bpf_map_update_elem flag: only create, never overwrite.
const BPF_NOEXIST: u64 = 1;
const EEXIST: i32 = 17;
const EFAULT: i32 = 14;

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

/// Adds `weight` to `key`'s total on this CPU (userspace sums the CPUs, so
/// no atomics are needed).
#[inline(always)]
fn add_weight(key: &StackKey, weight: u64) {
    if let Some(total) = STACK_COUNTS.get_ptr_mut(key) {
        unsafe { *total += weight };
        return;
    }
    match STACK_COUNTS.insert(key, weight, BPF_NOEXIST) {
        Ok(()) => {}
        // Another CPU created the key in between; this CPU's slot is ours.
        Err(e) if e == -EEXIST => {
            if let Some(total) = STACK_COUNTS.get_ptr_mut(key) {
                unsafe { *total += weight };
            }
        }
        Err(_) => count_lost(lost_stack::AGGREGATE_FULL),
    }
}

/// sched_switch, prev side: a tracked thread leaves the CPU. Runs in prev's
/// context, so the stacks taken here are where it stopped.
#[inline(always)]
pub fn switch_out<C: StackIdContext>(ctx: &C, tid: u32, prev_state: u64, now: u64) {
    let Some(reason) = offcpu_reason(prev_state) else {
        return; // exiting: it will not come back
    };
    let reason = if reason == stack_kind::SLEEP && super::futex::in_futex_wait(tid) {
        stack_kind::FUTEX
    } else {
        reason
    };
    let (user_stack_id, kernel_stack_id) = offcpu_stack_ids(ctx, tid, reason, now);
    let start = OffCpuStart {
        ts_ns: now,
        user_stack_id,
        kernel_stack_id,
        reason,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
    };
    match OFFCPU_START.get_ptr_mut(&tid) {
        Some(slot) => unsafe { *slot = start },
        None => {
            if OFFCPU_START.insert(&tid, &start, 0).is_err() {
                count_lost(lost_stack::OFFCPU_FULL);
            }
        }
    }
}

/// Off-CPU reasons a thread's stack walks are cached under (the
/// `stack_kind` values are all below this).
const REASONS: u64 = 8;

/// LAST_STACKS key: one slot per thread and off-CPU reason, so a page-fault
/// wait (D) never lends its stack to the long sleep (S) that follows it.
#[inline(always)]
fn reuse_key(tid: u32, reason: u32) -> u64 {
    u64::from(tid) * REASONS + u64::from(reason) % REASONS
}

/// The stacks a switch-out leaves from: walked, or the thread's last walk
/// for the same reason when that is under STACK_REUSE_NS old. Walking is
/// the costliest thing tprof does per event.
#[inline(always)]
fn offcpu_stack_ids<C: StackIdContext>(ctx: &C, tid: u32, reason: u32, now: u64) -> (i32, i32) {
    let key = reuse_key(tid, reason);
    let slot = LAST_STACKS.get_ptr_mut(&key);
    if let Some(last) = slot.map(|p| unsafe { *p })
        && now.saturating_sub(last.walked_ns) < STACK_REUSE_NS
    {
        return (last.user_stack_id, last.kernel_stack_id);
    }
    let (user_stack_id, kernel_stack_id) = stack_ids(ctx);
    let last = LastStacks {
        walked_ns: now,
        user_stack_id,
        kernel_stack_id,
    };
    match slot {
        Some(p) => unsafe { *p = last },
        None => {
            let _ = LAST_STACKS.insert(&key, &last, 0);
        }
    }
    (user_stack_id, kernel_stack_id)
}

/// A thread exits: drop its per-thread stack state.
#[inline(always)]
pub fn forget(tid: u32) {
    let _ = OFFCPU_START.remove(&tid);
    for reason in [
        stack_kind::RUNNABLE,
        stack_kind::DISK_WAIT,
        stack_kind::SLEEP,
        stack_kind::OTHER,
        stack_kind::FUTEX,
    ] {
        let _ = LAST_STACKS.remove(&reuse_key(tid, reason));
    }
}

/// sched_switch, next side: a tracked thread runs again; the time since its
/// switch-out goes to the stack it left from.
#[inline(always)]
pub fn switch_in(tid: u32, now: u64) {
    let Some(slot) = OFFCPU_START.get_ptr_mut(&tid) else {
        return; // off CPU since before the recording
    };
    let start = unsafe { *slot };
    if start.ts_ns == 0 {
        return; // already on a CPU (its switch-out was not seen)
    }
    unsafe { (*slot).ts_ns = 0 };
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

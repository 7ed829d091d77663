//! Stack sampling: on-CPU samples from the cpu-clock perf event, and the
//! off-CPU half, which `sched::try_switch` drives. Both only take stack ids
//! (bpf_get_stackid) and put them in an event: a [`SampleEvent`] per
//! on-CPU sample, the switch-out's stacks in its [`SwitchEvent`].
//! Userspace turns the ids into the recording's stacks and weighs each
//! off-CPU interval from the switch-out to the thread's next switch-in, so
//! the kernel keeps no aggregate and a switch-in does no stack work. Where
//! the thread runs CPython, its Python frames go out just before the event
//! (`python::record`), walked whenever the native stacks are.
//!
//! [`SwitchEvent`]: profiler_ebpf::SwitchEvent

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::perf_event,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use profiler_ebpf::{
    BPF_F_USER_STACK, LastStacks, NO_STACK_KIND, STACK_KINDS, STACK_REUSE_NS, SampleEvent,
    ThreadState, errno, lost_stack, offcpu_reason, stack_kind,
};

use super::{STACKS, count_lost, emit, header_at, python, thread_state};

/// One cpu-clock tick on some CPU: a sample of the stacks of the thread it
/// interrupted, if that thread is tracked.
#[perf_event]
pub fn tprof_sample(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let tgid = (pid_tgid >> 32) as u32;
    // tid 0 is the idle task; thread_state filters everything else untracked.
    if tid == 0 {
        return 0;
    }
    let Some(state) = thread_state(tid) else {
        return 0;
    };
    // One clock read: the Python frames carry the sample's time.
    let now = unsafe { bpf_ktime_get_ns() };
    let (mut user_stack, kernel_stack) = stack_ids(&ctx);
    // SAFETY: state points into a live TRACKED_TIDS entry that only this
    // thread's own programs write, and they cannot overlap.
    if !python::record(unsafe { &mut (*state).py }, tid, tgid, now) {
        user_stack = -1;
    }
    emit(SampleEvent {
        hdr: header_at::<SampleEvent>(now),
        tid,
        tgid,
        user_stack,
        kernel_stack,
    });
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
        Err(e) if e == -errno::EFAULT => -1,
        Err(e) => {
            count_lost(if e == -errno::EEXIST {
                lost_stack::COLLISION
            } else {
                lost_stack::FAILED
            });
            -1
        }
    }
}

/// What a switch-out records about where a tracked thread left the CPU:
/// (kind, user stack id, kernel stack id).
pub type SwitchOutStacks = (u32, i32, i32);

/// sched_switch, prev side: a tracked thread leaves the CPU. Runs in prev's
/// context, so the stacks taken here are where it stopped. `state` is the
/// thread's `TRACKED_TIDS` entry; `walk` false (no stack sampling) still
/// gives the kind.
#[inline(always)]
pub fn switch_out<C: StackIdContext>(
    ctx: &C,
    state: *mut ThreadState,
    prev_state: u64,
    now: u64,
    walk: bool,
) -> SwitchOutStacks {
    let Some(reason) = offcpu_reason(prev_state) else {
        return (NO_STACK_KIND, -1, -1); // exiting: it will not come back
    };
    // SAFETY: state points into a live TRACKED_TIDS entry; only this
    // thread's own switches and syscalls write it, and they cannot overlap.
    let state = unsafe { &mut *state };
    let reason = if reason == stack_kind::SLEEP && state.futex.ts_ns != 0 {
        stack_kind::FUTEX
    } else {
        reason
    };
    if !walk {
        return (reason, -1, -1);
    }
    let (user, kernel) = offcpu_stack_ids(ctx, state, reason, now);
    (reason, user, kernel)
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
    let slot = reason as usize % STACK_KINDS;
    let last = state.last_stacks[slot];
    let pid_tgid = bpf_get_current_pid_tgid();
    // A Python thread that waits again within the window, but from another
    // line, is walked again: its native stacks (the interpreter's lock or
    // sleep code) may well be the same.
    if now.saturating_sub(last.walked_ns) < STACK_REUSE_NS
        && !python::moved(&state.py, (pid_tgid >> 32) as u32)
    {
        return (last.user_stack_id, last.kernel_stack_id);
    }
    let (mut user_stack_id, kernel_stack_id) = stack_ids(ctx);
    let mut walked_ns = now;
    if !python::record(&mut state.py, pid_tgid as u32, (pid_tgid >> 32) as u32, now) {
        // Its Python frames were lost: lose the user stack with them, and
        // walk again next time rather than lend this one out.
        user_stack_id = -1;
        walked_ns = 0;
    }
    state.last_stacks[slot] = LastStacks {
        walked_ns,
        user_stack_id,
        kernel_stack_id,
    };
    (user_stack_id, kernel_stack_id)
}

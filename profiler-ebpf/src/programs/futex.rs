//! Futex waits of tracked threads: entry and exit of futex(), futex_wait()
//! and futex_waitv(). Only waiting operations are kept (wakes return at
//! once; who woke a waiter comes from the wakeup events). The wait in
//! progress lives in the thread's `TRACKED_TIDS` entry (`ThreadState::futex`),
//! written in place, so entry and exit each cost one hash lookup, tracked or
//! not, and `tprof_switch` sees a futex wait without a lookup of its own.
//!
//! Programs: `tprof_futex_enter` on `syscalls/sys_enter_futex`;
//! `tprof_futex_wait_enter` and `tprof_futex_waitv_enter` on
//! `sys_enter_futex_wait` (Linux 6.7+) and `sys_enter_futex_waitv` (5.16+),
//! attached only where tracefs has them; `tprof_futex_exit` on
//! `sys_exit_futex` (and `sys_exit_futex_wait`, `sys_exit_futex_waitv` where
//! present), which emits a `FutexEvent` for a thread with a wait in
//! progress.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use profiler_ebpf::{
    FUTEX_CMD_MASK, FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_SYSCALL_FUTEX, FUTEX_SYSCALL_WAIT,
    FUTEX_SYSCALL_WAITV, FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FutexEnter,
    FutexEvent,
};

use super::{emit, header, offsets, thread_state};

fn is_wait(op: u32) -> bool {
    matches!(
        op & FUTEX_CMD_MASK,
        FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_LOCK_PI | FUTEX_LOCK_PI2 | FUTEX_WAIT_REQUEUE_PI
    )
}

/// Remembers a tracked thread's wait until the syscall returns. Runs in
/// the waiting thread's context, which alone writes its `futex` slot.
fn enter(uaddr: u64, op: u32, syscall: u32) -> Result<(), i32> {
    let Some(state) = thread_state(bpf_get_current_pid_tgid() as u32) else {
        return Ok(());
    };
    let entry = FutexEnter {
        ts_ns: unsafe { bpf_ktime_get_ns() },
        uaddr,
        op,
        syscall,
    };
    unsafe { (*state).futex = entry };
    Ok(())
}

#[tracepoint]
pub(crate) fn tprof_futex_enter(ctx: TracePointContext) -> u32 {
    let _ = try_futex_enter(&ctx);
    0
}

fn try_futex_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let op = unsafe { ctx.read_at::<u64>(off.futex_op as usize)? } as u32;
    if !is_wait(op) {
        return Ok(());
    }
    let uaddr = unsafe { ctx.read_at::<u64>(off.futex_uaddr as usize)? };
    enter(uaddr, op, FUTEX_SYSCALL_FUTEX)
}

#[tracepoint]
pub(crate) fn tprof_futex_wait_enter(ctx: TracePointContext) -> u32 {
    let _ = try_futex_wait_enter(&ctx);
    0
}

fn try_futex_wait_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let uaddr = unsafe { ctx.read_at::<u64>(offsets().futex_wait_uaddr as usize)? };
    enter(uaddr, 0, FUTEX_SYSCALL_WAIT)
}

#[tracepoint]
pub(crate) fn tprof_futex_waitv_enter(ctx: TracePointContext) -> u32 {
    let _ = try_futex_waitv_enter(&ctx);
    0
}

fn try_futex_waitv_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let waiters = unsafe { ctx.read_at::<u64>(offsets().futex_waitv_waiters as usize)? };
    enter(waiters, 0, FUTEX_SYSCALL_WAITV)
}

/// Attached to the exit of all three syscalls (their layout is the same).
#[tracepoint]
pub(crate) fn tprof_futex_exit(ctx: TracePointContext) -> u32 {
    let _ = try_futex_exit(&ctx);
    0
}

fn try_futex_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(state) = thread_state(tid) else {
        return Ok(());
    };
    let entry = unsafe { (*state).futex };
    if entry.ts_ns == 0 {
        return Ok(()); // not a wait, or one that began before tracking
    }
    unsafe { (*state).futex.ts_ns = 0 };
    emit(FutexEvent {
        hdr: header::<FutexEvent>(),
        enter_ns: entry.ts_ns,
        uaddr: entry.uaddr,
        ret: unsafe { ctx.read_at::<i64>(offsets().futex_ret as usize)? },
        tid,
        tgid: (pid_tgid >> 32) as u32,
        op: entry.op,
        syscall: entry.syscall,
    });
    Ok(())
}

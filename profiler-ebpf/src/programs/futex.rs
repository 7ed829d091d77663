//! Futex waits of tracked threads: entry and exit of futex(), futex_wait()
//! and futex_waitv(). Only waiting operations are kept (wakes return at
//! once; who woke a waiter comes from the wakeup events). Untracked threads
//! cost one hash lookup on futex entry and one on exit.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, tracepoint},
    maps::LruHashMap,
    programs::TracePointContext,
};
use profiler_ebpf::{
    FUTEX_CMD_MASK, FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_SYSCALL_FUTEX, FUTEX_SYSCALL_WAIT,
    FUTEX_SYSCALL_WAITV, FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FutexEnter,
    FutexEvent, kind,
};

use super::{emit, header, is_tracked_process, offsets};

/// Waits in progress: tid → entry.
#[map]
static FUTEX_WAITS: LruHashMap<u32, FutexEnter> = LruHashMap::with_max_entries(16384, 0);

/// True while `tid` is inside a futex wait: its off-CPU stacks are futex
/// waits, not plain sleep.
#[inline(always)]
pub(super) fn in_futex_wait(tid: u32) -> bool {
    unsafe { FUTEX_WAITS.get(&tid) }.is_some()
}

fn is_wait(op: u32) -> bool {
    matches!(
        op & FUTEX_CMD_MASK,
        FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_LOCK_PI | FUTEX_LOCK_PI2 | FUTEX_WAIT_REQUEUE_PI
    )
}

/// Remembers a tracked thread's wait until the syscall returns.
fn enter(uaddr: u64, op: u32, syscall: u32) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_tracked_process((pid_tgid >> 32) as u32) {
        return Ok(());
    }
    let entry = FutexEnter {
        ts_ns: unsafe { bpf_ktime_get_ns() },
        uaddr,
        op,
        syscall,
    };
    FUTEX_WAITS.insert(&(pid_tgid as u32), &entry, 0)
}

#[tracepoint]
pub fn tprof_futex_enter(ctx: TracePointContext) -> u32 {
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
pub fn tprof_futex_wait_enter(ctx: TracePointContext) -> u32 {
    let _ = try_futex_wait_enter(&ctx);
    0
}

fn try_futex_wait_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let uaddr = unsafe { ctx.read_at::<u64>(offsets().futex_wait_uaddr as usize)? };
    enter(uaddr, 0, FUTEX_SYSCALL_WAIT)
}

#[tracepoint]
pub fn tprof_futex_waitv_enter(ctx: TracePointContext) -> u32 {
    let _ = try_futex_waitv_enter(&ctx);
    0
}

fn try_futex_waitv_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let waiters = unsafe { ctx.read_at::<u64>(offsets().futex_waitv_waiters as usize)? };
    enter(waiters, 0, FUTEX_SYSCALL_WAITV)
}

/// Attached to the exit of all three syscalls (their layout is the same).
#[tracepoint]
pub fn tprof_futex_exit(ctx: TracePointContext) -> u32 {
    let _ = try_futex_exit(&ctx);
    0
}

fn try_futex_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(entry) = (unsafe { FUTEX_WAITS.get(&tid) }).copied() else {
        return Ok(());
    };
    let _ = FUTEX_WAITS.remove(&tid);
    emit(
        kind::FUTEX,
        FutexEvent {
            hdr: header(kind::FUTEX),
            enter_ns: entry.ts_ns,
            uaddr: entry.uaddr,
            ret: unsafe { ctx.read_at::<i64>(offsets().futex_ret as usize)? },
            tid,
            tgid: (pid_tgid >> 32) as u32,
            op: entry.op,
            syscall: entry.syscall,
        },
    );
    Ok(())
}

//! Task lifecycle tracepoints: new threads and processes, exec, exit, and
//! renames. These keep the tracked maps in step with the job in the kernel
//! itself, so a DataLoader worker is traced from its first instruction.
//!
//! Programs: `tprof_newtask` (`task/task_newtask`, parent's process tracked)
//! adds the child to `TRACKED_TIDS`, and a new process to `TRACKED_TGIDS`
//! with its parent's `PY_PROCS` entry, and emits a `ForkEvent`; a full map
//! counts in `LOST[LOST_TRACK_FULL]`. `tprof_exec` (`sched/sched_process_exec`)
//! emits an `ExecEvent`, drops the old tid of a non-leader that exec'd and
//! the process's `PY_PROCS` entry. `tprof_exit` (`sched/sched_process_exit`)
//! removes the tid with its `ThreadState` (and the tgid and its `PY_PROCS`
//! entry when the group is dead) and emits an `ExitEvent`. `tprof_rename`
//! (`task/task_rename`) emits a `CommEvent`. `task_newtask` rather than
//! `sched_process_fork`: its `clone_flags` tell a thread from a process
//! without reading `task_struct`, and it fires before the child can run.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::tracepoint,
    programs::TracePointContext,
};
use profiler_ebpf::{
    CLONE_THREAD, COMM_LEN, CommEvent, ExecEvent, ExitEvent, ForkEvent, LOST_TRACK_FULL,
    ThreadState,
};

use super::{
    TRACKED_TGIDS, TRACKED_TIDS, count_lost, emit, header, is_tracked_process, offsets, python,
    tracked_tgid,
};

/// task_newtask rather than sched_process_fork: it carries `clone_flags`,
/// which tell a new thread from a new process without reading task_struct.
/// It fires in the parent, after the child has its pid and before it can run.
#[tracepoint]
pub(crate) fn tprof_newtask(ctx: TracePointContext) -> u32 {
    let _ = try_newtask(&ctx);
    0
}

fn try_newtask(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let parent_tgid = (pid_tgid >> 32) as u32;
    if !is_tracked_process(parent_tgid) {
        return Ok(());
    }
    let off = offsets();
    let child_tid = unsafe { ctx.read_at::<i32>(off.newtask_pid as usize)? } as u32;
    let clone_flags = unsafe { ctx.read_at::<u64>(off.newtask_clone_flags as usize)? };
    let child_tgid = if clone_flags & CLONE_THREAD != 0 {
        parent_tgid
    } else {
        child_tid
    };
    // One count per task left untracked, whichever map was full.
    let process_full =
        child_tgid != parent_tgid && TRACKED_TGIDS.insert(&child_tgid, &1, 0).is_err();
    let thread_full = TRACKED_TIDS
        .insert(&child_tid, &ThreadState::new(child_tgid), 0)
        .is_err();
    if process_full || thread_full {
        count_lost(LOST_TRACK_FULL);
    }
    if child_tgid != parent_tgid {
        python::inherit(parent_tgid, child_tgid);
    }
    emit(ForkEvent {
        hdr: header::<ForkEvent>(),
        clone_flags,
        parent_tid: pid_tgid as u32,
        parent_tgid,
        child_tid,
        child_tgid,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    });
    Ok(())
}

#[tracepoint]
pub(crate) fn tprof_exec(ctx: TracePointContext) -> u32 {
    let _ = try_exec(&ctx);
    0
}

fn try_exec(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !is_tracked_process(tgid) {
        return Ok(());
    }
    let tid = pid_tgid as u32;
    let old_tid = unsafe { ctx.read_at::<i32>(offsets().exec_old_pid as usize)? } as u32;
    if old_tid != tid {
        // A non-leader thread exec'd and took over the leader's tid.
        let _ = TRACKED_TIDS.remove(&old_tid);
    }
    python::forget(tgid);
    emit(ExecEvent {
        hdr: header::<ExecEvent>(),
        tid,
        tgid,
        old_tid,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    });
    Ok(())
}

#[tracepoint]
pub(crate) fn tprof_exit(ctx: TracePointContext) -> u32 {
    let _ = try_exit(&ctx);
    0
}

fn try_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(tgid) = tracked_tgid(tid) else {
        return Ok(());
    };
    let group_dead = unsafe { ctx.read_at::<u8>(offsets().exit_group_dead as usize)? } as u32;
    // Forget the ids now, so a reused pid is not mistaken for this task.
    // The thread's state (off-CPU start, stack cache, futex wait) goes with
    // its TRACKED_TIDS entry.
    let _ = TRACKED_TIDS.remove(&tid);
    if group_dead != 0 {
        let _ = TRACKED_TGIDS.remove(&tgid);
        python::forget(tgid);
    }
    emit(ExitEvent {
        hdr: header::<ExitEvent>(),
        tid,
        tgid,
        group_dead,
        _pad: 0,
    });
    Ok(())
}

#[tracepoint]
pub(crate) fn tprof_rename(ctx: TracePointContext) -> u32 {
    let _ = try_rename(&ctx);
    0
}

fn try_rename(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let tid = unsafe { ctx.read_at::<i32>(off.rename_pid as usize)? } as u32;
    let Some(tgid) = tracked_tgid(tid) else {
        return Ok(());
    };
    let comm = unsafe { ctx.read_at::<[u8; COMM_LEN]>(off.rename_newcomm as usize)? };
    emit(CommEvent {
        hdr: header::<CommEvent>(),
        tid,
        tgid,
        comm,
    });
    Ok(())
}

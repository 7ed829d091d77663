//! What tells training iterations apart: framework marks and pipe traffic.
//!
//! [`tprof_torch_mark`] is a uprobe on the libtorch functions in
//! `profiler_ebpf::mark` (the attach cookie says which): PyTorch enters a
//! `record_function` region at every `DataLoader` `__next__` and every
//! `Optimizer.step`, profiler or not, and the autograd engine at every
//! backward pass. Like the CUDA probes, it is attached to the library file
//! for every process mapping it and keeps tracked processes only.
//!
//! [`tprof_rw_enter`], [`tprof_pipe_read`] and [`tprof_pipe_write`] are
//! on the `read` and `write` syscalls' tracepoints: every tracked thread's
//! transfer through a pipe that moved bytes, with the pipe's identity, so
//! analysis can tell the pipes data workers write from the rest; at most
//! one per thread per `PIPE_GAP_NS`, so a thread ping-ponging bytes over a
//! pipe costs two lookups per syscall, not an event each. (fentry
//! on the kernel's pipe functions would spare the fd walk, but kernels
//! with lockdown, like the one tprof is developed on, refuse it.)

use aya_ebpf::{
    EbpfContext as _,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_probe_read_user, bpf_probe_read_user_str_bytes, generated::bpf_get_attach_cookie,
    },
    macros::{tracepoint, uprobe},
    programs::{ProbeContext, TracePointContext},
};
use profiler_ebpf::{FileOffsets, MARK_NAME_LEN, MarkEvent, PIPE_GAP_NS, PipeEvent, mark, pipe_op};

use super::{emit, header, header_at, is_tracked_process, thread_state};

/// Where to find an fd's file and tell a pipe; all zero (the pipe
/// programs do nothing) until userspace sets it from the kernel's BTF.
#[unsafe(no_mangle)]
static FILE_OFFSETS: FileOffsets = FileOffsets {
    task_files: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    fdt_fd: 0,
    file_inode: 0,
    file_private_data: 0,
    inode_mode: 0,
    enter_fd: 0,
    exit_ret: 0,
    _pad: [0; 3],
};

/// Entry of a probed libtorch function.
#[uprobe]
pub fn tprof_torch_mark(ctx: ProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !is_tracked_process(tgid) {
        return 0;
    }
    let what = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let mut event = MarkEvent {
        hdr: header::<MarkEvent>(),
        tid: pid_tgid as u32,
        tgid,
        what,
        _pad: 0,
        name: [0; MARK_NAME_LEN],
    };
    if what == mark::RECORD_FUNCTION {
        // `record_function_enter_new(const std::string& name, …)` returns
        // an `intrusive_ptr` (not trivially copyable) through a hidden
        // pointer in the first argument register, so `name` is the
        // second. libstdc++'s string starts with the pointer to its
        // NUL-terminated characters.
        let string: u64 = ctx.arg(1).unwrap_or(0);
        if let Ok(chars) = unsafe { bpf_probe_read_user(string as *const u64) } {
            let _ = unsafe { bpf_probe_read_user_str_bytes(chars as *const u8, &mut event.name) };
        }
    }
    emit(event);
    0
}

/// Entry of `read` and `write` by a tracked thread: keeps the fd for
/// the exit. One program for both (their `fd` is at the same offset).
#[tracepoint]
pub fn tprof_rw_enter(ctx: TracePointContext) -> u32 {
    let off = file_offsets();
    if off.file_inode == 0 {
        return 0;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(state) = thread_state(tid) else {
        return 0;
    };
    let fd = unsafe { ctx.read_at::<u32>(off.enter_fd as usize) }.unwrap_or(u32::MAX);
    unsafe { (*state).rw_fd = fd.wrapping_add(1) };
    0
}

#[tracepoint]
pub fn tprof_pipe_read(ctx: TracePointContext) -> u32 {
    pipe_transfer(&ctx, pipe_op::READ);
    0
}

#[tracepoint]
pub fn tprof_pipe_write(ctx: TracePointContext) -> u32 {
    pipe_transfer(&ctx, pipe_op::WRITE);
    0
}

/// At a tracked thread's `read`/`write` exit: when it moved bytes through
/// a pipe, one event naming the pipe.
#[inline(always)]
fn pipe_transfer(ctx: &TracePointContext, op: u32) {
    let off = file_offsets();
    if off.file_inode == 0 {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(state) = thread_state(tid) else {
        return;
    };
    let fd = unsafe { (*state).rw_fd };
    unsafe { (*state).rw_fd = 0 };
    if fd == 0 {
        return; // began before tracking
    }
    let ret = unsafe { ctx.read_at::<i64>(off.exit_ret as usize) }.unwrap_or(0);
    if ret <= 0 {
        return;
    }
    // Judged at the exit: a read that blocked for a batch ends long after
    // the thread's last event, however soon after it it began.
    let now = unsafe { bpf_ktime_get_ns() };
    if now.saturating_sub(unsafe { (*state).pipe_ns }) < PIPE_GAP_NS {
        return;
    }
    let Some(pipe) = pipe_of(fd - 1, &off) else {
        return;
    };
    unsafe { (*state).pipe_ns = now };
    emit(PipeEvent {
        hdr: header_at::<PipeEvent>(now),
        pipe,
        bytes: ret as u64,
        tid,
        tgid: (pid_tgid >> 32) as u32,
        op,
        _pad: 0,
    });
}

/// S_IFMT and S_IFIFO of an inode's `i_mode`.
const S_IFMT: u16 = 0o170000;
const S_IFIFO: u16 = 0o010000;

/// The pipe behind the current task's `fd`: its `pipe_inode_info`, or
/// None when the fd is not a pipe (or the walk fails).
#[inline(always)]
fn pipe_of(fd: u32, off: &FileOffsets) -> Option<u64> {
    let read = |addr: u64| unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok();
    let task = unsafe { bpf_get_current_task() };
    let files = read(task + u64::from(off.task_files))?;
    let fdt = read(files + u64::from(off.files_fdt))?;
    let max_fds =
        unsafe { bpf_probe_read_kernel((fdt + u64::from(off.fdt_max_fds)) as *const u32) }.ok()?;
    if fd >= max_fds {
        return None;
    }
    let fds = read(fdt + u64::from(off.fdt_fd))?;
    let file = read(fds + u64::from(fd) * 8)?;
    let inode = read(file + u64::from(off.file_inode))?;
    let mode =
        unsafe { bpf_probe_read_kernel((inode + u64::from(off.inode_mode)) as *const u16) }.ok()?;
    if mode & S_IFMT != S_IFIFO {
        return None;
    }
    read(file + u64::from(off.file_private_data))
}

#[inline(always)]
fn file_offsets() -> FileOffsets {
    unsafe { core::ptr::read_volatile(&FILE_OFFSETS) }
}

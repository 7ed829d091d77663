//! What tells training iterations apart: framework marks and pipe traffic.
//!
//! [`tprof_torch_mark`] is a uprobe on the libtorch functions in
//! `profiler_ebpf::mark` (the attach cookie says which): PyTorch enters a
//! `record_function` region at every `DataLoader` `__next__` and every
//! `Optimizer.step`, profiler or not, and the autograd engine at every
//! backward pass. Like the CUDA probes, it is attached to the library file
//! for every process mapping it and keeps tracked processes only.
//!
//! [`tprof_pipe_read`] is on the `read` syscall's exit tracepoint: a
//! tracked thread's read from a pipe that moved bytes, with the pipe's
//! identity (analysis tells the pipes data workers feed by the wakeups
//! that end the trainer's waits on them); at most one per thread per
//! `PIPE_GAP_NS`, so a thread ping-ponging bytes over a pipe costs a
//! lookup per read, not an event each. Writes are not traced: on a job
//! that moves 100,000 messages a second through pipes they doubled what
//! the pipe programs cost. (fentry
//! on the kernel's pipe functions would spare the fd walk, but kernels
//! with lockdown, like the one tprof is developed on, refuse it.)

use aya_ebpf::{
    EbpfContext as _,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_current_task_btf, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
        bpf_task_pt_regs, generated::bpf_get_attach_cookie,
    },
    macros::{map, tracepoint, uprobe},
    maps::Array,
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
    exit_ret: 0,
    _pad: [0; 4],
};

/// When a tracked process first entered a DataLoader's `__next__`
/// (`mark::LOADER_PREFIX`; one entry, 0 until then). From then on libtorch's
/// marks frame the steps, and the pipe reads that would have framed them
/// (step detection without libtorch) are not traced: on the real job the
/// pipe program ran at every `read` of the workers' image files, 13,000 a
/// second at 527 ns each, a quarter of the kernel programs' time there.
#[map]
static STEPS_FROM_MARKS: Array<u64> = Array::with_max_entries(1, 0);

/// Entry of a probed libtorch function.
#[uprobe]
pub(crate) fn tprof_torch_mark(ctx: ProbeContext) -> u32 {
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
        if is_loader(&event.name) {
            steps_from_marks_since(event.hdr.ts_ns);
        }
    }
    emit(event);
    0
}

/// A region named as a DataLoader's `__next__` names it
/// (`mark::LOADER_PREFIX`). A loop, not `starts_with`: a slice comparison
/// becomes a `memcmp` call, which BPF does not have.
#[inline(always)]
fn is_loader(name: &[u8; MARK_NAME_LEN]) -> bool {
    let prefix = mark::LOADER_PREFIX;
    let mut i = 0;
    while i < prefix.len() && i < MARK_NAME_LEN {
        if name[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Notes that libtorch's marks frame the steps from `ts_ns` on, unless
/// they did already. Not atomic: two tracked processes' first batches on
/// two CPUs at the same instant may leave the later one's time, and the
/// pipe reads of those microseconds traced, which is harmless.
#[inline(always)]
fn steps_from_marks_since(ts_ns: u64) {
    if let Some(since) = STEPS_FROM_MARKS.get_ptr_mut(0)
        && unsafe { *since } == 0
    {
        unsafe { *since = ts_ns };
    }
}

/// Whether libtorch's marks frame the steps already (see
/// [`STEPS_FROM_MARKS`]).
#[inline(always)]
fn steps_from_marks() -> bool {
    STEPS_FROM_MARKS.get(0).is_some_and(|&since| since != 0)
}

#[tracepoint]
pub(crate) fn tprof_pipe_read(ctx: TracePointContext) -> u32 {
    pipe_read(&ctx);
    0
}

/// x86-64 `struct pt_regs` as 8-byte words: `di`, the first syscall
/// argument, which the kernel leaves as the caller passed it.
const PT_REGS_DI: usize = 14;

/// At a tracked thread's `read` exit: when it moved bytes from a pipe, and
/// the thread's last pipe event is `PIPE_GAP_NS` old, one event naming
/// the pipe.
#[inline(always)]
fn pipe_read(ctx: &TracePointContext) {
    let off = file_offsets();
    if off.file_inode == 0 || steps_from_marks() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(state) = thread_state(tid) else {
        return;
    };
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
    // SAFETY: BTF helpers on the current task (the programs are loaded
    // with these only where the kernel's BTF gave `FILE_OFFSETS`); the
    // verifier checks the load from the pt_regs pointer.
    let fd = unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const u64;
        if regs.is_null() {
            return;
        }
        core::ptr::read_volatile(regs.add(PT_REGS_DI))
    };
    let Some(pipe) = pipe_of(fd as u32, &off) else {
        return;
    };
    unsafe { (*state).pipe_ns = now };
    emit(PipeEvent {
        hdr: header_at::<PipeEvent>(now),
        pipe,
        bytes: ret as u64,
        tid,
        tgid: (pid_tgid >> 32) as u32,
        op: pipe_op::READ,
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

//! The ring buffer's records: [`EventHeader`], which starts every one and
//! says its `kind` and length, and one struct per [`kind`], each tied to
//! its kind by [`AbiEvent`]: what the scheduler, task, block, futex, CUDA,
//! libtorch-mark and pipe programs emit, stored in a recording as these
//! bytes; with the constants their fields take (`errno`, the futex
//! syscalls and ops, `cuda_fn`, `mark`, `pipe_op`) and [`event_size`] for
//! reading recordings without `len`. The ring-buffer-only records that
//! carry stacks ([`StackCopyEvent`](crate::StackCopyEvent),
//! [`PyStackEvent`]) are in `stacks` and `python`.

use crate::python::PyStackEvent;

/// Length of a task's `comm` (TASK_COMM_LEN).
pub const COMM_LEN: usize = 16;

/// `kind` values of [`EventHeader`].
pub mod kind {
    pub const SWITCH: u16 = 1;
    pub const WAKEUP: u16 = 2;
    pub const FORK: u16 = 3;
    pub const EXEC: u16 = 4;
    pub const EXIT: u16 = 5;
    pub const COMM: u16 = 6;
    pub const BLOCK_IO: u16 = 7;
    pub const FUTEX: u16 = 8;
    pub const CUDA: u16 = 9;
    /// An on-CPU stack sample ([`SampleEvent`](crate::SampleEvent)).
    pub const SAMPLE: u16 = 10;
    /// A copy of a thread's user registers and stack
    /// ([`StackCopyEvent`](crate::StackCopyEvent), variable length). Only in
    /// the ring buffer: capture unwinds it and never writes it to a recording.
    pub const STACK_COPY: u16 = 11;
    /// The Python frames of the sample or switch-out that follows
    /// ([`PyStackEvent`](crate::PyStackEvent)); capture folds them into that
    /// event's stack and never writes them to a recording.
    pub const PY_STACK: u16 = 12;
    /// A tracked thread entered a probed framework function: a PyTorch
    /// `record_function` region (the DataLoader's `__next__`, the optimizer's
    /// step) or the autograd engine ([`MarkEvent`](crate::MarkEvent)).
    pub const MARK: u16 = 13;
    /// A tracked thread read from or wrote to a pipe
    /// ([`PipeEvent`](crate::PipeEvent)).
    pub const PIPE: u16 = 14;
    /// A tracked thread left a CPU that no traced switch had put it on
    /// ([`ArrivalEvent`](crate::ArrivalEvent)): how long it had run there.
    pub const ARRIVAL: u16 = 15;
    /// A tracked process mapped executable memory
    /// ([`ExecMapEvent`](crate::ExecMapEvent)). Only in the ring buffer:
    /// capture reads the process's mappings again and never writes it to a
    /// recording.
    pub const EXEC_MAP: u16 = 16;
    /// One past the largest kind: the size of the per-kind drop counters
    /// (it must stay below the `lost_stack` slots, 24).
    pub const COUNT: u32 = 17;
}

/// Starts every ring-buffer record. 16 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns).
    pub ts_ns: u64,
    /// One of [`kind`].
    pub kind: u16,
    /// CPU the program ran on.
    pub cpu: u16,
    /// The whole record's length in bytes, this header included (since
    /// recording format 4; recordings before it hold 0 here and each
    /// kind's size is fixed). A reader skips a kind it does not know by it.
    pub len: u32,
}
const _: () = assert!(size_of::<EventHeader>() == 16);

/// A ring-buffer record type: its [`kind`] value, tied to the type so a
/// program cannot emit one struct under another's kind.
pub trait AbiEvent: Sized {
    const KIND: u16;
    /// A header for this record at `ts_ns` on `cpu`, with its length.
    fn header(ts_ns: u64, cpu: u16) -> EventHeader {
        EventHeader {
            ts_ns,
            kind: Self::KIND,
            cpu,
            len: size_of::<Self>() as u32,
        }
    }
}

/// sched_switch where the previous or next task is tracked. 48 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchEvent {
    pub hdr: EventHeader,
    /// `prev_state` as the classic tracepoint reports it: 0 or
    /// [`PREV_STATE_PREEMPTED`](crate::PREV_STATE_PREEMPTED) means the task
    /// stays runnable (involuntary switch). Its values fit 32 bits (the
    /// tracepoint's field is a long).
    pub prev_state: u32,
    /// Why a tracked prev left the CPU, one of
    /// [`stack_kind`](crate::stack_kind) (never `ON_CPU`): the kind its off-CPU
    /// time is weighed under until it runs again. [`NO_STACK_KIND`] when prev
    /// is untracked or exiting.
    pub prev_kind: u32,
    pub prev_tid: u32,
    /// From bpf_get_current_pid_tgid (prev is current here).
    pub prev_tgid: u32,
    pub next_tid: u32,
    /// From `TRACKED_TIDS`; 0 when next is not tracked.
    pub next_tgid: u32,
    /// Where a tracked prev left the CPU from: its user and kernel stacks. In
    /// the ring buffer, the kernel stack is an id in the `STACKS` stack map,
    /// and so is the user stack in
    /// [`stack_mode::FRAME_POINTERS`](crate::stack_mode::FRAME_POINTERS); in
    /// [`stack_mode::COPY`](crate::stack_mode::COPY) the user stack is a
    /// [`copy_ref`](crate::copy_ref) to a
    /// [`StackCopyEvent`](crate::StackCopyEvent) of the thread before it. In a
    /// recording, capture has replaced both by the recording's own stack ids
    /// (its STACK_DEFS records). -1: no such stack (not sampled, failed, or
    /// none).
    pub prev_user_stack: i32,
    pub prev_kernel_stack: i32,
}
const _: () = assert!(size_of::<SwitchEvent>() == 48);
impl AbiEvent for SwitchEvent {
    const KIND: u16 = kind::SWITCH;
}

/// Goes just before the [`SwitchEvent`] of a tracked prev (same `ts_ns`,
/// same shard) whose arrival on this CPU no sched_switch program saw: the
/// kernel does not trace a switch away from some tasks (see "Accuracy of
/// the measurements" in docs/diagnosis.md), or the switch-in's event was
/// lost. `run_ns` is the CPU time the scheduler charged the thread since
/// it last picked it (`se.sum_exec_runtime - se.prev_sum_exec_runtime`),
/// so it arrived about `run_ns` before `ts_ns`, whatever ran on the CPU
/// unseen before it. Only where the kernel's BTF gives those offsets. 32
/// bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrivalEvent {
    /// `ts_ns` is the switch-out's.
    pub hdr: EventHeader,
    pub run_ns: u64,
    pub tid: u32,
    pub tgid: u32,
}
const _: () = assert!(size_of::<ArrivalEvent>() == 32);
impl AbiEvent for ArrivalEvent {
    const KIND: u16 = kind::ARRIVAL;
}

/// [`SwitchEvent::prev_kind`] when there is no off-CPU interval to weigh.
pub const NO_STACK_KIND: u32 = u32::MAX;

/// A cpu-clock tick that interrupted a tracked thread: one on-CPU sample of
/// its stacks. 32 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// As in [`SwitchEvent::prev_user_stack`]: stack-map ids (or a
    /// [`copy_ref`](crate::copy_ref) for the user stack) in the ring buffer,
    /// the recording's stack ids in a recording, -1 for none.
    pub user_stack: i32,
    pub kernel_stack: i32,
}
const _: () = assert!(size_of::<SampleEvent>() == 32);
impl AbiEvent for SampleEvent {
    const KIND: u16 = kind::SAMPLE;
}

/// sched_waking / sched_wakeup_new of a tracked task: the moment it becomes
/// runnable, and who woke it. 40 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeupEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// `current` when try_to_wake_up ran: the waking thread, or, for a
    /// wakeup from an interrupt (a timer, a device), the thread it
    /// interrupted (0 when the CPU was idle). A classic tracepoint cannot
    /// see interrupt context: perf overwrites the record's common fields
    /// (common_flags included) before the program runs.
    pub waker_tid: u32,
    pub waker_tgid: u32,
    /// The tracepoint's `target_cpu`: at sched_waking the CPU the task last
    /// ran on (the scheduler has not chosen where to queue it yet).
    pub target_cpu: u32,
    /// [`WAKE_NEW_TASK`].
    pub flags: u32,
}
const _: () = assert!(size_of::<WakeupEvent>() == 40);
impl AbiEvent for WakeupEvent {
    const KIND: u16 = kind::WAKEUP;
}

/// [`WakeupEvent::flags`]: sched_wakeup_new, the first wakeup of a new task
/// (the waker is the parent).
pub const WAKE_NEW_TASK: u32 = 1;

/// task_newtask of a tracked process: a new thread or child process. 56 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForkEvent {
    pub hdr: EventHeader,
    pub clone_flags: u64,
    pub parent_tid: u32,
    pub parent_tgid: u32,
    pub child_tid: u32,
    /// The parent's tgid for a thread ([`CLONE_THREAD`](crate::CLONE_THREAD)),
    /// else `child_tid`.
    pub child_tgid: u32,
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(size_of::<ForkEvent>() == 56);
impl AbiEvent for ForkEvent {
    const KIND: u16 = kind::FORK;
}

/// sched_process_exec of a tracked process. 48 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// The exec'ing thread's tid before exec (a non-leader thread that execs
    /// takes over the leader's tid).
    pub old_tid: u32,
    pub _pad: u32,
    /// The new comm (exec sets it before this tracepoint fires).
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(size_of::<ExecEvent>() == 48);
impl AbiEvent for ExecEvent {
    const KIND: u16 = kind::EXEC;
}

/// sched_process_exit of a tracked thread. 32 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// 1 when this was the last thread of its process.
    pub group_dead: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<ExitEvent>() == 32);
impl AbiEvent for ExitEvent {
    const KIND: u16 = kind::EXIT;
}

/// task_rename of a tracked thread (prctl(PR_SET_NAME), a write to
/// /proc/…/comm, exec). 40 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(size_of::<CommEvent>() == 40);
impl AbiEvent for CommEvent {
    const KIND: u16 = kind::COMM;
}

/// The size of the record of an event kind, or `None` for an unknown kind.
/// (Recordings before format 4 have no `len`: their event sizes were these,
/// but for [`SwitchEvent`], 40 bytes then, and no [`SampleEvent`].)
pub const fn event_size(kind: u16) -> Option<usize> {
    match kind {
        kind::SAMPLE => Some(size_of::<SampleEvent>()),
        kind::SWITCH => Some(size_of::<SwitchEvent>()),
        kind::WAKEUP => Some(size_of::<WakeupEvent>()),
        kind::FORK => Some(size_of::<ForkEvent>()),
        kind::EXEC => Some(size_of::<ExecEvent>()),
        kind::EXIT => Some(size_of::<ExitEvent>()),
        kind::COMM => Some(size_of::<CommEvent>()),
        kind::BLOCK_IO => Some(size_of::<BlockIoEvent>()),
        kind::FUTEX => Some(size_of::<FutexEvent>()),
        kind::CUDA => Some(size_of::<CudaCallEvent>()),
        kind::MARK => Some(size_of::<MarkEvent>()),
        kind::PIPE => Some(size_of::<PipeEvent>()),
        kind::ARRIVAL => Some(size_of::<ArrivalEvent>()),
        // Its fixed part; the frames follow. Never in a recording.
        kind::PY_STACK => Some(size_of::<PyStackEvent>()),
        // Never in a recording.
        kind::EXEC_MAP => Some(size_of::<ExecMapEvent>()),
        _ => None,
    }
}

/// Bytes of the `rwbs` string kept from block tracepoints ("R", "WS", "FWFS", …).
pub const RWBS_LEN: usize = 8;

/// A block request completed, on any device (device statistics are
/// machine-wide), with the tracked thread that submitted it if any. 72 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockIoEvent {
    /// `ts_ns` is the completion time.
    pub hdr: EventHeader,
    /// When the request entered the queue (insert, or issue when it went
    /// straight to the driver); 0 if it started before tracing did.
    pub start_ns: u64,
    /// When the driver got it; 0 if unknown.
    pub issue_ns: u64,
    pub sector: u64,
    /// Kernel dev_t: major << 20 | minor.
    pub dev: u32,
    pub nr_sector: u32,
    /// Submitting tracked thread (from block_bio_queue), 0 if none.
    pub tid: u32,
    pub tgid: u32,
    /// 0 or a negative errno.
    pub error: i32,
    pub _pad: u32,
    /// Operation and flags as the kernel spells them: R, W, D(iscard),
    /// F(lush), N(one), then S(ync), M(eta), A(head), …
    pub rwbs: [u8; RWBS_LEN],
}
const _: () = assert!(size_of::<BlockIoEvent>() == 72);
impl AbiEvent for BlockIoEvent {
    const KIND: u16 = kind::BLOCK_IO;
}

/// Linux errno values the kernel records (a futex wait's return, a block
/// request's error). Linux's own numbers, defined here rather than taken
/// from the host's libc: a recording is read on any machine.
pub mod errno {
    pub const EINTR: i32 = 4;
    pub const EIO: i32 = 5;
    pub const EAGAIN: i32 = 11;
    pub const EFAULT: i32 = 14;
    pub const EEXIST: i32 = 17;
    pub const ETIMEDOUT: i32 = 110;
}

/// Which futex system call a [`FutexEvent`] came from.
pub const FUTEX_SYSCALL_FUTEX: u32 = 0;
pub const FUTEX_SYSCALL_WAIT: u32 = 1;
pub const FUTEX_SYSCALL_WAITV: u32 = 2;

/// `op & FUTEX_CMD_MASK` values that wait (the others wake or requeue and
/// return at once).
pub const FUTEX_WAIT: u32 = 0;
pub const FUTEX_LOCK_PI: u32 = 6;
pub const FUTEX_WAIT_BITSET: u32 = 9;
pub const FUTEX_WAIT_REQUEUE_PI: u32 = 11;
pub const FUTEX_LOCK_PI2: u32 = 13;
/// Strips FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME from `op`.
pub const FUTEX_CMD_MASK: u32 = 0x7f;

/// A tracked thread's futex wait, from syscall entry to exit. 56 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutexEvent {
    /// `ts_ns` is the syscall's exit.
    pub hdr: EventHeader,
    pub enter_ns: u64,
    /// The futex word (for futex_waitv: the address of the waiter array).
    pub uaddr: u64,
    /// The syscall's return value (0, or -ETIMEDOUT, -EAGAIN, -EINTR, …).
    pub ret: i64,
    pub tid: u32,
    pub tgid: u32,
    /// The futex op (FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG, …) for futex();
    /// the flags for futex_wait / futex_waitv.
    pub op: u32,
    /// [`FUTEX_SYSCALL_FUTEX`], [`FUTEX_SYSCALL_WAIT`] or [`FUTEX_SYSCALL_WAITV`].
    pub syscall: u32,
}
const _: () = assert!(size_of::<FutexEvent>() == 56);
impl AbiEvent for FutexEvent {
    const KIND: u16 = kind::FUTEX;
}

/// The CUDA runtime functions tprof probes, as [`CudaCallEvent::func`] and as
/// the uprobes' attach cookie. Plain constants, like
/// [`stack_kind`](crate::stack_kind).
pub mod cuda_fn {
    /// `cudaMemcpy(dst, src, count, kind)`: synchronous copy.
    pub const MEMCPY: u32 = 1;
    /// `cudaMemcpyAsync(dst, src, count, kind, stream)`.
    pub const MEMCPY_ASYNC: u32 = 2;
    /// `cudaStreamSynchronize(stream)`.
    pub const STREAM_SYNCHRONIZE: u32 = 3;
    /// `cudaDeviceSynchronize()`.
    pub const DEVICE_SYNCHRONIZE: u32 = 4;
    /// `cudaEventSynchronize(event)`.
    pub const EVENT_SYNCHRONIZE: u32 = 5;
    /// `cudaHostAlloc(void **ptr, size, flags)`: pinned host memory.
    pub const HOST_ALLOC: u32 = 6;
    /// `cudaMallocHost(void **ptr, size)`: pinned host memory.
    pub const MALLOC_HOST: u32 = 7;
    /// `cudaHostRegister(ptr, size, flags)`: pins existing memory.
    pub const HOST_REGISTER: u32 = 8;
    /// `cudaFreeHost(ptr)`.
    pub const FREE_HOST: u32 = 9;
    /// `cudaHostUnregister(ptr)`.
    pub const HOST_UNREGISTER: u32 = 10;
    /// `cudaLaunchKernel(...)`: counted in the kernel, never streamed.
    pub const LAUNCH_KERNEL: u32 = 11;

    /// Every probed function with its exported symbol, in id order.
    pub const ALL: [(u32, &str); 11] = [
        (MEMCPY, "cudaMemcpy"),
        (MEMCPY_ASYNC, "cudaMemcpyAsync"),
        (STREAM_SYNCHRONIZE, "cudaStreamSynchronize"),
        (DEVICE_SYNCHRONIZE, "cudaDeviceSynchronize"),
        (EVENT_SYNCHRONIZE, "cudaEventSynchronize"),
        (HOST_ALLOC, "cudaHostAlloc"),
        (MALLOC_HOST, "cudaMallocHost"),
        (HOST_REGISTER, "cudaHostRegister"),
        (FREE_HOST, "cudaFreeHost"),
        (HOST_UNREGISTER, "cudaHostUnregister"),
        (LAUNCH_KERNEL, "cudaLaunchKernel"),
    ];

    /// The symbol of a function id, or "unknown".
    pub const fn name(func: u32) -> &'static str {
        if func >= 1 && func as usize <= ALL.len() {
            ALL[func as usize - 1].1
        } else {
            "unknown"
        }
    }
}

/// Arguments a [`CudaCallEvent`] keeps: the first five integer arguments,
/// enough for cudaMemcpyAsync's (dst, src, count, kind, stream).
pub const CUDA_ARGS: usize = 5;

/// One completed call of a CUDA runtime function by a tracked thread, from
/// its uprobe to its uretprobe. The arguments are raw registers: which one
/// means what depends on `func` (see [`cuda_fn`]). 96 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaCallEvent {
    /// `ts_ns` is the return.
    pub hdr: EventHeader,
    pub enter_ns: u64,
    pub args: [u64; CUDA_ARGS],
    /// The returned cudaError_t (an int; 0 is cudaSuccess), sign-extended.
    pub ret: i64,
    /// For cudaHostAlloc and cudaMallocHost: the pointer the call stored
    /// through its first argument, read at return (0 when unreadable).
    pub out_ptr: u64,
    pub tid: u32,
    pub tgid: u32,
    /// One of [`cuda_fn`].
    pub func: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<CudaCallEvent>() == 96);
impl AbiEvent for CudaCallEvent {
    const KIND: u16 = kind::CUDA;
}

/// What a [`MarkEvent`] marks: the uprobe's attach cookie.
pub mod mark {
    /// `torch::autograd::profiler::record_function_enter_new(name, args)`:
    /// the start of a `torch.autograd.profiler.record_function` region,
    /// which PyTorch enters whether or not a profiler runs: every
    /// `DataLoader` iterator's `__next__` ("enumerate(DataLoader)#…") and
    /// every `Optimizer.step` ("Optimizer.step#SGD.step") opens one.
    /// `name` holds the region's name.
    pub const RECORD_FUNCTION: u32 = 1;
    /// `torch::autograd::Engine::execute`: a backward pass begins.
    pub const BACKWARD: u32 = 2;
    /// `torch::autograd::profiler::record_function_exit_new(handle)`: a
    /// `record_function` region of the thread ends (the DataLoader's
    /// `__next__` has its batch). A function of internal linkage: found in
    /// the library's full symbol table, not among the dynamic symbols
    /// [`ALL`] lists, and probed by its offset once found.
    pub const RECORD_FUNCTION_EXIT: u32 = 3;
    /// [`RECORD_FUNCTION_EXIT`]'s symbol (the start of it).
    pub const RECORD_FUNCTION_EXIT_SYMBOL: &str =
        "_ZN5torch8autograd8profilerL24record_function_exit_newE";
    /// Every probed function with the start of its mangled symbol (the
    /// name without its parameter types, which differ between releases),
    /// matched against libtorch's dynamic symbols, in id order.
    pub const ALL: [(u32, &str); 2] = [
        (
            RECORD_FUNCTION,
            "_ZN5torch8autograd8profiler25record_function_enter_newE",
        ),
        (BACKWARD, "_ZN5torch8autograd6Engine7executeE"),
    ];
    /// How a [`RECORD_FUNCTION`] region's name begins at a `DataLoader`
    /// iterator's `__next__`: a batch asked for. From a tracked process's
    /// first one, its marks frame the steps and the pipe program stands
    /// down (`map::STEPS_FROM_MARKS`).
    pub const LOADER_PREFIX: &[u8] = b"enumerate(DataLoader)";
}

/// A thread's pipe reads that end within this long of its last pipe
/// event are not traced: a batch is read at most every millisecond or so,
/// while a thread ping-ponging bytes over a pipe (100,000 transfers a
/// second) is no training loop and would cost an event each.
pub const PIPE_GAP_NS: u64 = 1_000_000;

/// Bytes of a mark's name kept ([`MarkEvent::name`]).
pub const MARK_NAME_LEN: usize = 64;

/// A tracked thread entered a probed framework function ([`mark`]). 96
/// bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// One of [`mark`].
    pub what: u32,
    pub _pad: u32,
    /// For [`mark::RECORD_FUNCTION`], the region's name, NUL-terminated
    /// and cut at `MARK_NAME_LEN - 1` bytes; empty otherwise or when
    /// unreadable.
    pub name: [u8; MARK_NAME_LEN],
}
const _: () = assert!(size_of::<MarkEvent>() == 96);
impl AbiEvent for MarkEvent {
    const KIND: u16 = kind::MARK;
}

/// [`PipeEvent::op`] values. Only reads are traced today; `WRITE` is
/// kept for a reader of a future recording that traces writes.
pub mod pipe_op {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
}

/// A tracked thread's `read` of a pipe that moved bytes, from the
/// syscall's exit tracepoint. 48 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipeEvent {
    /// `ts_ns` is the syscall's return.
    pub hdr: EventHeader,
    /// The pipe's identity: its `pipe_inode_info` address (the file's
    /// `private_data`), the same for both ends while the pipe lives.
    pub pipe: u64,
    /// Bytes read or written.
    pub bytes: u64,
    pub tid: u32,
    pub tgid: u32,
    /// One of [`pipe_op`].
    pub op: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<PipeEvent>() == 48);
impl AbiEvent for PipeEvent {
    const KIND: u16 = kind::PIPE;
}

/// A tracked process's `mmap` or `mprotect` that made memory executable
/// (`PROT_EXEC`) returned: a library loaded, JIT code, a new image's
/// segments. It tells capture when a process's mappings changed, so they
/// are read again then rather than polled. Only in the ring buffer: capture
/// uses it up and never writes it to a recording. 40 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecMapEvent {
    /// `ts_ns` is the syscall's return: the mapping is in place.
    pub hdr: EventHeader,
    /// The mapping's start and length as the call gave them.
    pub addr: u64,
    pub len: u64,
    pub tid: u32,
    pub tgid: u32,
}
const _: () = assert!(size_of::<ExecMapEvent>() == 40);
impl AbiEvent for ExecMapEvent {
    const KIND: u16 = kind::EXEC_MAP;
}

/// `PROT_EXEC` of `mmap` and `mprotect`.
pub const PROT_EXEC: u64 = 4;

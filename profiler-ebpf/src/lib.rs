//! The kernel/user ABI of tprof: every type that crosses the ring buffer, a
//! map or a program global, defined once and built by both sides.
//!
//! Layout rules, so the kernel (bpfel) and userspace (x86_64) agree byte for
//! byte: every type is `#[repr(C)]`, fields are ordered largest alignment
//! first, padding is an explicit `_pad` field, and each type's size is pinned
//! by a `const` assertion below it. Every ring-buffer record starts with an
//! [`EventHeader`] whose `kind` says which record follows and whose `len` how
//! long it is, so a reader can skip a kind it does not know. With the `pod`
//! feature each type derives bytemuck's `Pod`, which checks there is no
//! hidden padding.
//!
//! Changing any of these types changes the recording format too (events are
//! stored as these bytes): bump `recording::FORMAT_VERSION` in `tprof-core`.
//!
//! What is here: `EventHeader` and one event struct per `kind` (each tied to
//! its kind by `AbiEvent`); the ring-buffer-only `StackCopyEvent` (kind 11,
//! with its `CopySection`s and `UserRegs`) and, in `python`, `PyStackEvent`
//! (kind 12), which capture folds into stacks and never records;
//! `stack_mode`, `copy_ref` and `fingerprint`; `TracepointOffsets` (the
//! `OFFSETS` global); `ThreadState`, `TRACKED_TIDS`' per-thread value, which
//! the hot programs update in place; the values of kernel-only maps
//! (`LastStacks`, `RequestTimes`, `BioOwner`, `FutexEnter`, `CudaEnter`);
//! the `LOST` slot numbers; the CUDA function ids (`cuda_fn`, also the
//! uprobes' attach cookies); the constants both sides share (`prev_state`
//! bits, futex ops, `CLONE_THREAD`, `BPF_NOEXIST`, map sizes,
//! `STACK_REUSE_NS`); and `names`, every program, map and global by the name
//! userspace looks it up by (capture's `abi_names_match_the_object` test
//! checks them against the built object both ways). The `user` feature adds
//! `aya::Pod` for the types capture reads from maps or sets as globals.
#![no_std]

pub mod python;

pub use python::{PyProcInfo, PyStackEvent, PyThreadCache};

/// Length of a task's `comm` (TASK_COMM_LEN).
pub const COMM_LEN: usize = 16;

/// Most tracked threads at once (the `TRACKED_TIDS` map's size). A fork bomb
/// past it is counted in [`LOST_TRACK_FULL`], not silently ignored.
pub const MAX_TRACKED_TIDS: u32 = 65_536;
/// Most tracked processes at once (the `TRACKED_TGIDS` map's size).
pub const MAX_TRACKED_TGIDS: u32 = 16_384;
/// Ring buffer size in bytes (a power of two multiple of the page size),
/// all shards together.
pub const RING_BUFFER_BYTES: u32 = 16 << 20;
/// The event stream is this many ring buffers (`EVENTS0`…), CPU `c` writing
/// to shard `c % EVENT_SHARDS`. One ring buffer shared by every CPU costs a
/// contended spinlock and a bouncing cache line per event: on two CPUs at
/// 700,000 events/s each, that was half of `tprof_switch`'s time.
pub const EVENT_SHARDS: u32 = 8;
/// Stack copies have ring buffers of their own (`COPIES0`…, sharded as the
/// events are), this many bytes in all: a burst of copies, up to 64 KiB
/// each, must never crowd scheduler events out of theirs.
pub const COPY_RING_BUFFER_BYTES: u32 = 32 << 20;
/// Most block requests in flight at once, on every device of the machine
/// (the `REQUESTS` map's size).
pub const MAX_REQUESTS: u32 = 16_384;
/// Most tracked bios between their submission and their request (the
/// `BIO_OWNERS` map's size).
pub const MAX_BIO_OWNERS: u32 = 16_384;
/// Most CUDA runtime calls in progress at once, over all tracked threads
/// (the `CUDA_CALLS` map's size).
pub const MAX_CUDA_CALLS: u32 = 16_384;

/// bpf_map_update_elem flag: create only, never overwrite.
pub const BPF_NOEXIST: u64 = 1;

/// The names userspace looks the kernel programs, maps and globals up by.
/// The kernel side defines each as a Rust item of that name (a program is
/// its function, a map or global its static), which the macros cannot
/// take from a constant; `capture::programs`' tests check these lists
/// against the built object, both ways.
pub mod names {
    /// Programs: the scheduler ones in two builds, classic tracepoint and
    /// raw tracepoint (`_r`), of which one set is loaded.
    pub mod program {
        pub const SWITCH: &str = "tprof_switch";
        pub const SWITCH_RAW: &str = "tprof_switch_r";
        pub const WAKING: &str = "tprof_waking";
        pub const WAKING_RAW: &str = "tprof_waking_r";
        pub const WAKEUP_NEW: &str = "tprof_wakeup_new";
        pub const WAKEUP_NEW_RAW: &str = "tprof_wakenew_r";
        pub const NEWTASK: &str = "tprof_newtask";
        pub const EXEC: &str = "tprof_exec";
        pub const EXIT: &str = "tprof_exit";
        pub const RENAME: &str = "tprof_rename";
        pub const BIO_QUEUE: &str = "tprof_bio_queue";
        pub const BIO_SPLIT: &str = "tprof_bio_split";
        pub const BIO_BACKMERGE: &str = "tprof_bio_backmerge";
        pub const BIO_FRONTMERGE: &str = "tprof_bio_frontmerge";
        pub const RQ_INSERT: &str = "tprof_rq_insert";
        pub const RQ_ISSUE: &str = "tprof_rq_issue";
        pub const RQ_COMPLETE: &str = "tprof_rq_complete";
        pub const FUTEX_ENTER: &str = "tprof_futex_enter";
        pub const FUTEX_WAIT_ENTER: &str = "tprof_futex_wait_enter";
        pub const FUTEX_WAITV_ENTER: &str = "tprof_futex_waitv_enter";
        pub const FUTEX_EXIT: &str = "tprof_futex_exit";
        pub const SAMPLE: &str = "tprof_sample";
        pub const CUDA_ENTER: &str = "tprof_cuda_enter";
        pub const CUDA_RETURN: &str = "tprof_cuda_return";
        pub const CUDA_LAUNCH: &str = "tprof_cuda_launch";
        pub const TORCH_MARK: &str = "tprof_torch_mark";
        pub const PIPE_READ: &str = "tprof_pipe_read";
        /// Every program in the object.
        pub const ALL: &[&str] = &[
            SWITCH,
            SWITCH_RAW,
            WAKING,
            WAKING_RAW,
            WAKEUP_NEW,
            WAKEUP_NEW_RAW,
            NEWTASK,
            EXEC,
            EXIT,
            RENAME,
            BIO_QUEUE,
            BIO_SPLIT,
            BIO_BACKMERGE,
            BIO_FRONTMERGE,
            RQ_INSERT,
            RQ_ISSUE,
            RQ_COMPLETE,
            FUTEX_ENTER,
            FUTEX_WAIT_ENTER,
            FUTEX_WAITV_ENTER,
            FUTEX_EXIT,
            SAMPLE,
            CUDA_ENTER,
            CUDA_RETURN,
            CUDA_LAUNCH,
            TORCH_MARK,
            PIPE_READ,
        ];
    }

    /// Maps.
    pub mod map {
        /// The event shards, `EVENTS0`… (`super::super::EVENT_SHARDS`).
        pub const EVENTS: [&str; 8] = [
            "EVENTS0", "EVENTS1", "EVENTS2", "EVENTS3", "EVENTS4", "EVENTS5", "EVENTS6", "EVENTS7",
        ];
        /// The stack copy shards, `COPIES0`…, sharded as the events are.
        pub const COPIES: [&str; 8] = [
            "COPIES0", "COPIES1", "COPIES2", "COPIES3", "COPIES4", "COPIES5", "COPIES6", "COPIES7",
        ];
        pub const TRACKED_TGIDS: &str = "TRACKED_TGIDS";
        pub const TRACKED_TIDS: &str = "TRACKED_TIDS";
        pub const LOST: &str = "LOST";
        pub const STACKS: &str = "STACKS";
        pub const REQUESTS: &str = "REQUESTS";
        pub const BIO_OWNERS: &str = "BIO_OWNERS";
        pub const CUDA_CALLS: &str = "CUDA_CALLS";
        pub const CUDA_LAUNCHES: &str = "CUDA_LAUNCHES";
        pub const STACK_SCRATCH: &str = "STACK_SCRATCH";
        /// Python processes' interpreter layouts (tgid → `PyProcInfo`).
        pub const PY_PROCS: &str = "PY_PROCS";
        /// The per-CPU scratch record of the Python walk.
        pub const PY_SCRATCH: &str = "PY_SCRATCH";
        /// Every map in the object but the event and copy shards (and the sections
        /// of program globals).
        pub const ALL_BUT_EVENTS: &[&str] = &[
            TRACKED_TGIDS,
            TRACKED_TIDS,
            LOST,
            STACKS,
            REQUESTS,
            BIO_OWNERS,
            CUDA_CALLS,
            CUDA_LAUNCHES,
            STACK_SCRATCH,
            PY_PROCS,
            PY_SCRATCH,
        ];
    }

    /// Program globals userspace sets at load time.
    pub mod global {
        pub const OFFSETS: &str = "OFFSETS";
        pub const SAMPLE_STACKS: &str = "SAMPLE_STACKS";
        pub const STACK_MODE: &str = "STACK_MODE";
        pub const STACK_COPY_BYTES: &str = "STACK_COPY_BYTES";
        pub const PYTHON_FRAMES: &str = "PYTHON_FRAMES";
        pub const FILE_OFFSETS: &str = "FILE_OFFSETS";
    }
}
const _: () = assert!(names::map::EVENTS.len() == EVENT_SHARDS as usize);
const _: () = assert!(names::map::COPIES.len() == EVENT_SHARDS as usize);

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
    /// An on-CPU stack sample ([`super::SampleEvent`]).
    pub const SAMPLE: u16 = 10;
    /// A copy of a thread's user registers and stack
    /// ([`super::StackCopyEvent`], variable length). Only in the ring
    /// buffer: capture unwinds it and never writes it to a recording.
    pub const STACK_COPY: u16 = 11;
    /// The Python frames of the sample or switch-out that follows
    /// ([`super::PyStackEvent`]); capture folds them into that event's
    /// stack and never writes them to a recording.
    pub const PY_STACK: u16 = 12;
    /// A tracked thread entered a probed framework function: a PyTorch
    /// `record_function` region (the DataLoader's `__next__`, the
    /// optimizer's step) or the autograd engine ([`super::MarkEvent`]).
    pub const MARK: u16 = 13;
    /// A tracked thread read from or wrote to a pipe ([`super::PipeEvent`]).
    pub const PIPE: u16 = 14;
    /// One past the largest kind: the size of the per-kind drop counters
    /// (it must stay below the `lost_stack` slots, 24).
    pub const COUNT: u32 = 15;
}

/// Index into the `LOST` per-CPU array for "a fork could not be tracked
/// because `TRACKED_TIDS` or `TRACKED_TGIDS` was full". Slots 1..COUNT are
/// "ring buffer full" drops of that event kind.
pub const LOST_TRACK_FULL: u32 = 0;
/// `LOST` slots for stack sampling. They sit well above the per-kind slots
/// so new event kinds can grow [`kind::COUNT`] without moving them.
pub mod lost_stack {
    /// bpf_get_stackid found its hash bucket taken by another stack (-EEXIST).
    pub const COLLISION: u32 = 24;
    /// bpf_get_stackid failed otherwise (-ENOMEM, -EFAULT): no stack.
    pub const FAILED: u32 = 25;
    // 26 and 27 counted the in-kernel stack aggregate's overflows until
    // recording format 4, which streams samples instead; left unused.
    /// [`super::stack_mode::COPY`]: the task had no user registers to copy
    /// from (`bpf_task_pt_regs` gave none, or they could not be read).
    pub const NO_REGS: u32 = 32;
    /// [`super::stack_mode::COPY`]: no scratch buffer for this CPU (more
    /// CPUs than userspace sized `STACK_SCRATCH` for).
    pub const NO_SCRATCH: u32 = 33;
}
/// `LOST` slots for maps of things in flight that refused an entry because
/// they were full: the thing (a request's timing, a bio's owner, a CUDA
/// call, a process's cudaLaunchKernel count) is lost.
pub mod lost_map {
    /// `REQUESTS` full: a block request's start and issue times.
    pub const REQUESTS_FULL: u32 = 28;
    /// `BIO_OWNERS` full: which tracked thread submitted a bio.
    pub const BIO_OWNERS_FULL: u32 = 29;
    /// `CUDA_CALLS` full: a CUDA runtime call (no event).
    pub const CUDA_CALLS_FULL: u32 = 30;
    /// `CUDA_LAUNCHES` full: a process's cudaLaunchKernel calls, uncounted.
    pub const CUDA_LAUNCHES_FULL: u32 = 31;
}
/// Size of the `LOST` array.
pub const LOST_SLOTS: u32 = 40;
const _: () = assert!(
    kind::COUNT <= lost_stack::COLLISION
        && lost_stack::FAILED < lost_map::REQUESTS_FULL
        && lost_map::CUDA_LAUNCHES_FULL < lost_stack::NO_REGS
        && lost_stack::NO_SCRATCH < LOST_SLOTS
);

/// Distinct stacks the `STACKS` map holds: kernel stacks, and user stacks
/// in [`stack_mode::FRAME_POINTERS`].
pub const MAX_STACKS: u32 = 16_384;
/// bpf_get_stackid flag: the user-space stack instead of the kernel's.
pub const BPF_F_USER_STACK: u64 = 1 << 8;

/// What a stack sample's weight measures: `ON_CPU` counts
/// cpu-clock samples; the others are off-CPU nanoseconds, by why the thread
/// left the CPU. Plain u32 constants rather than a Rust enum, because a
/// kernel value outside a Rust enum's variants would be undefined behaviour.
pub mod stack_kind {
    pub const ON_CPU: u32 = 0;
    /// Preempted or yielded: still runnable, waiting for a CPU.
    pub const RUNNABLE: u32 = 1;
    /// Uninterruptible sleep (D), usually disk IO.
    pub const DISK_WAIT: u32 = 2;
    /// Interruptible sleep (S): futex, poll, pipe, nanosleep, …
    pub const SLEEP: u32 = 3;
    /// Stopped, traced, idle or parked.
    pub const OTHER: u32 = 4;
    /// Reserved for the block IO tracker: blocked on a block request.
    pub const BLOCK_IO: u32 = 5;
    /// Interruptible sleep inside a futex wait (lock, condition, barrier).
    pub const FUTEX: u32 = 6;
}

/// The off-CPU reason of a sched_switch `prev_state`, or `None` for a task
/// that is exiting (it never comes back, so it has no off-CPU time).
pub const fn offcpu_reason(prev_state: u64) -> Option<u32> {
    if prev_state == 0 || prev_state & PREV_STATE_PREEMPTED != 0 {
        Some(stack_kind::RUNNABLE)
    } else if prev_state & PREV_STATE_DEAD != 0 {
        None
    } else if prev_state & PREV_STATE_UNINTERRUPTIBLE != 0 {
        Some(stack_kind::DISK_WAIT)
    } else if prev_state & PREV_STATE_INTERRUPTIBLE != 0 {
        Some(stack_kind::SLEEP)
    } else {
        Some(stack_kind::OTHER)
    }
}

/// Kernel-only: a thread's last walked off-CPU stacks, reused by switch-outs
/// that follow within [`STACK_REUSE_NS`]. 16 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastStacks {
    pub walked_ns: u64,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
}
const _: () = assert!(size_of::<LastStacks>() == 16);

/// Slots of [`ThreadState::last_stacks`]: one per [`stack_kind`] value,
/// indexed by it (a power of two, so a masked index is always in bounds).
pub const STACK_KINDS: usize = 8;
const _: () = assert!((stack_kind::FUTEX as usize) < STACK_KINDS);

/// Kernel-side value of `TRACKED_TIDS`: a tracked thread's tgid and every
/// piece of per-thread state the hot programs keep, in one preallocated
/// hash entry updated in place. A context switch then does one lookup per
/// task: the lookup that tells whether the task is tracked also finds its
/// cached stack walks and whether it is in a futex wait (more lookups when
/// these lived in maps of their own). Userspace seeds it with
/// [`ThreadState::new`]. 248 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState {
    /// The futex wait in progress; `ts_ns` 0 when none.
    pub futex: FutexEnter,
    /// When the thread's last pipe event was emitted: the pipe programs
    /// emit at most one per thread per [`PIPE_GAP_NS`].
    pub pipe_ns: u64,
    /// The last walked off-CPU stacks, by off-CPU reason ([`stack_kind`]):
    /// kernel stacks, and user stacks in [`stack_mode::FRAME_POINTERS`].
    pub last_stacks: [LastStacks; STACK_KINDS],
    /// [`stack_mode::COPY`]: the user stacks this thread's last switch-outs
    /// copied, one per slot: each one's [`fingerprint`] (0: empty)…
    pub fingerprints: [u64; STACK_SLOTS],
    /// …and the copy's sequence number, which the events refer to.
    pub slot_seqs: [u32; STACK_SLOTS],
    /// Copies made of this thread's stack so far (the last one's sequence
    /// number).
    pub copies: u32,
    /// The slot the next switch-out copy takes (round robin).
    pub next_slot: u32,
    /// Its Python thread state, when its process runs CPython.
    pub py: PyThreadCache,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<ThreadState>() == 256);
// SAFETY: a repr(C) struct of integers with no hidden padding (the
// derived bytemuck::Pod checks it): every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for ThreadState {}

impl ThreadState {
    /// A thread of process `tgid` with nothing in progress.
    pub const fn new(tgid: u32) -> ThreadState {
        ThreadState {
            futex: FutexEnter {
                ts_ns: 0,
                uaddr: 0,
                op: 0,
                syscall: 0,
            },
            pipe_ns: 0,
            last_stacks: [LastStacks {
                walked_ns: 0,
                user_stack_id: 0,
                kernel_stack_id: 0,
            }; STACK_KINDS],
            fingerprints: [0; STACK_SLOTS],
            slot_seqs: [0; STACK_SLOTS],
            copies: 0,
            next_slot: 0,
            py: PyThreadCache {
                tstate: 0,
                missed_ns: 0,
                missed_mark: 0,
                position: 0,
            },
            tgid,
            _pad: 0,
        }
    }
}

/// A thread's off-CPU stacks are walked at most once per this long (per
/// thread and off-CPU reason): walking two stacks costs a few
/// microseconds, and a thread switching out 100,000 times a second nearly
/// always leaves from the same place.
pub const STACK_REUSE_NS: u64 = 1_000_000;

/// Default on-CPU sampling frequency: 99 Hz, not 100, so sampling does not
/// run in lockstep with timer-driven work.
pub const DEFAULT_SAMPLE_HZ: u64 = 99;

/// `clone_flags` bit that makes the new task a thread of its parent's process.
pub const CLONE_THREAD: u64 = 0x0001_0000;

/// `prev_state` of sched_switch for a preempted task (TASK_REPORT_MAX on
/// 5.14+ kernels, where `__trace_sched_switch_state` reports preemption).
pub const PREV_STATE_PREEMPTED: u64 = 0x100;
/// Raw `task_struct::__state` bits the raw sched_switch program turns into
/// the classic tracepoint's `prev_state` (`__trace_sched_switch_state`):
/// the reportable states are the low seven bits; TASK_DEAD, a task at its
/// last switch, reports its `exit_state` (EXIT_ZOMBIE or EXIT_DEAD); an
/// idle kthread (TASK_IDLE) reports TASK_REPORT_IDLE; a task blocked on an
/// rtlock or frozen reports uninterruptible.
pub const TASK_REPORT: u32 = 0x7f;
pub const TASK_DEAD: u32 = 0x80;
pub const TASK_IDLE: u32 = 0x402;
pub const TASK_REPORT_IDLE: u32 = 0x80;
pub const TASK_RTLOCK_WAIT: u32 = 0x1000;
pub const TASK_FROZEN: u32 = 0x8000;

/// The classic sched_switch tracepoint's `prev_state` for a switch with
/// `preempt` and the raw `state` (and, for a dead task, `exit_state`),
/// as Linux 5.18+ computes it. Shared by the raw program and its test.
pub const fn report_prev_state(preempt: bool, state: u32, exit_state: u32) -> u64 {
    if preempt {
        return PREV_STATE_PREEMPTED;
    }
    let mut report = (state | exit_state) & TASK_REPORT;
    if state & TASK_IDLE == TASK_IDLE {
        report = TASK_REPORT_IDLE;
    }
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        report = PREV_STATE_UNINTERRUPTIBLE as u32;
    }
    // 1 << (fls(report) - 1): the highest reported bit.
    if report == 0 {
        0
    } else {
        1 << (31 - report.leading_zeros())
    }
}

/// `prev_state` bits of sched_switch, as the tracepoint reports them.
pub const PREV_STATE_INTERRUPTIBLE: u64 = 0x1;
pub const PREV_STATE_UNINTERRUPTIBLE: u64 = 0x2;
pub const PREV_STATE_DEAD: u64 = 0x10 | 0x20;

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
    /// [`PREV_STATE_PREEMPTED`] means the task stays runnable (involuntary
    /// switch). Its values fit 32 bits (the tracepoint's field is a long).
    pub prev_state: u32,
    /// Why a tracked prev left the CPU, one of [`stack_kind`] (never
    /// `ON_CPU`): the kind its off-CPU time is weighed under until it runs
    /// again. [`NO_STACK_KIND`] when prev is untracked or exiting.
    pub prev_kind: u32,
    pub prev_tid: u32,
    /// From bpf_get_current_pid_tgid (prev is current here).
    pub prev_tgid: u32,
    pub next_tid: u32,
    /// From `TRACKED_TIDS`; 0 when next is not tracked.
    pub next_tgid: u32,
    /// Where a tracked prev left the CPU from: its user and kernel stacks.
    /// In the ring buffer, the kernel stack is an id in the `STACKS` stack
    /// map, and so is the user stack in [`stack_mode::FRAME_POINTERS`]; in
    /// [`stack_mode::COPY`] the user stack is a [`copy_ref`] to a
    /// [`StackCopyEvent`] of the thread before it. In a recording, capture
    /// has replaced both by the recording's own stack ids (its STACK_DEFS
    /// records). -1: no such stack (not sampled, failed, or none).
    pub prev_user_stack: i32,
    pub prev_kernel_stack: i32,
}
const _: () = assert!(size_of::<SwitchEvent>() == 48);
impl AbiEvent for SwitchEvent {
    const KIND: u16 = kind::SWITCH;
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
    /// [`copy_ref`] for the user stack) in the ring buffer, the recording's
    /// stack ids in a recording, -1 for none.
    pub user_stack: i32,
    pub kernel_stack: i32,
}
const _: () = assert!(size_of::<SampleEvent>() == 32);
impl AbiEvent for SampleEvent {
    const KIND: u16 = kind::SAMPLE;
}

/// How user stacks are taken: the `STACK_MODE` global, which userspace
/// sets at load time (a constant to the verifier, which then checks only
/// the mode's own branch: a kernel without BTF never sees the copy mode's
/// BTF helpers).
pub mod stack_mode {
    /// The kernel walks frame pointers (`bpf_get_stackid` into `STACKS`):
    /// kernels without BTF or `bpf_task_pt_regs` (before 5.15). Wrong
    /// wherever code keeps no frame pointer.
    pub const FRAME_POINTERS: u32 = 0;
    /// The user registers and the top of the user stack are copied into a
    /// [`super::StackCopyEvent`] and unwound by capture with each file's
    /// CFI.
    pub const COPY: u32 = 1;
}

/// Size of the pages the stack is copied in: a copy reads the rest of sp's
/// page, then whole pages, so a page it cannot read ends it exactly there.
pub const STACK_PAGE: u32 = 4096;
/// Default bytes of user stack copied from sp (`--stack-size`): on the real
/// PyTorch job, 16 KiB rooted 64% of the on-CPU samples' stacks, 32 KiB 93%,
/// 64 KiB 99% (`import torch` recurses hundreds of frames deep). A copy
/// stops where the stack does, so a shallow stack costs no more.
pub const DEFAULT_STACK_COPY_BYTES: u32 = 64 << 10;
/// Most bytes of user stack a copy can hold (`--stack-size`'s limit, and
/// perf's; the scratch buffer is this big per CPU, twice).
pub const MAX_STACK_COPY_BYTES: u32 = 64 << 10;

/// Switch-out copies a thread keeps a fingerprint of ([`ThreadState`]).
pub const STACK_SLOTS: usize = 4;
/// The slot of an on-CPU sample's copy: never reused by a fingerprint.
pub const SAMPLE_SLOT: u32 = STACK_SLOTS as u32;
/// Copy sequence numbers are kept modulo this (they share an i32 with the
/// slot in [`copy_ref`]).
pub const COPY_SEQ_MASK: u32 = (1 << 28) - 1;

/// What a [`SampleEvent::user_stack`] or [`SwitchEvent::prev_user_stack`]
/// holds in [`stack_mode::COPY`], in the ring buffer: the copy of the
/// thread's stack it was taken from, by its sequence number (modulo
/// [`COPY_SEQ_MASK`] + 1) and slot; never negative (-1 stays "none").
/// Capture replaces it by a recording stack id before writing the event.
pub const fn copy_ref(seq: u32, slot: u32) -> i32 {
    (((seq & COPY_SEQ_MASK) << 3) | (slot & 7)) as i32
}

/// The (sequence number, slot) of a [`copy_ref`].
pub const fn copy_ref_parts(reference: i32) -> (u32, u32) {
    let r = reference as u32;
    ((r >> 3) & COPY_SEQ_MASK, r & 7)
}

/// A thread's user stack site, for deciding whether a switch-out needs a
/// new copy: threads that block again and again leave from the same few
/// places, with the same registers. Never 0 (an empty slot).
pub const fn fingerprint(ip: u64, sp: u64, bp: u64) -> u64 {
    // Multiply-xorshift mixing: cheap in BPF, and the three values differ
    // mostly in their low bits.
    let mut h = ip.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= sp.rotate_left(21).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= bp.rotate_left(42).wrapping_mul(0x1656_67b1_9e37_79f9);
    h ^= h >> 29;
    h | 1
}

/// Starts a [`kind::STACK_COPY`] record: whose stack was copied, and which
/// copy it is (the events that use it name it by [`copy_ref`]). Sections
/// follow ([`CopySection`]), up to `hdr.len`. 32 bytes.
///
/// The record is a list of sections so that other per-event snapshots of a
/// thread (the Python frames of issue 20) can ride in the same record: a
/// reader walks them by length and skips kinds it does not know. The user
/// stack section comes last (its length varies); a fixed-size section
/// goes before it.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCopyEvent {
    /// `len` is the whole record's, sections included.
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// The copy's sequence number (modulo [`COPY_SEQ_MASK`] + 1).
    pub seq: u32,
    /// [`SAMPLE_SLOT`] for an on-CPU sample, else the switch-out slot
    /// (0..[`STACK_SLOTS`]) whose fingerprint it fills.
    pub slot: u32,
}
const _: () = assert!(size_of::<StackCopyEvent>() == 32);
impl AbiEvent for StackCopyEvent {
    const KIND: u16 = kind::STACK_COPY;
}

/// Heads each section of a [`StackCopyEvent`]. `len` bytes of payload
/// follow; the next section starts at the next multiple of 8. 8 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopySection {
    /// One of [`section`].
    pub kind: u16,
    /// Bits of the section's kind ([`user_stack_flags`] for the user stack).
    pub flags: u16,
    pub len: u32,
}
const _: () = assert!(size_of::<CopySection>() == 8);

/// [`CopySection::kind`] values.
pub mod section {
    /// [`super::UserRegs`], then the bytes of the user stack from `sp` up.
    pub const USER_STACK: u16 = 1;
    // 2 was reserved for Python frames, which went into records of their
    // own ([`super::PyStackEvent`]): most copies have none. Left unused.
}

/// [`CopySection::flags`] of a [`section::USER_STACK`].
pub mod user_stack_flags {
    /// A page of the stack could not be read before the cap was reached
    /// (not resident, or the end of the stack's mapping): the copy is
    /// shorter than `--stack-size`.
    pub const SHORT: u16 = 1;
    /// Not even the bytes at sp could be read: registers only.
    pub const FAILED: u16 = 2;
}

/// A thread's user registers where it left user mode (at a sample that
/// interrupted user code, where it was interrupted), from the `pt_regs`
/// the kernel saved on entry. 24 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}
const _: () = assert!(size_of::<UserRegs>() == 24);

/// Where the user stack bytes start in a copy record the kernel builds:
/// the record head, the section head, the registers.
pub const STACK_COPY_HEAD: usize =
    size_of::<StackCopyEvent>() + size_of::<CopySection>() + size_of::<UserRegs>();
/// The kernel's scratch buffer for one copy record: the head, the largest
/// copy, and a page of slack the verifier needs to see every page read in
/// bounds.
pub const STACK_SCRATCH_BYTES: usize =
    STACK_COPY_HEAD + MAX_STACK_COPY_BYTES as usize + STACK_PAGE as usize;

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
    /// The parent's tgid for a thread ([`CLONE_THREAD`]), else `child_tid`.
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
        // Its fixed part; the frames follow. Never in a recording.
        kind::PY_STACK => Some(size_of::<PyStackEvent>()),
        _ => None,
    }
}

/// Byte offsets of the tracepoint fields the programs read, taken at load
/// time from tracefs `format` files so no kernel's layout is baked in.
/// Userspace sets it as the programs' `OFFSETS` global. An offset of an
/// optional tracepoint the kernel lacks stays 0 and its program is not
/// attached. 72 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracepointOffsets {
    /// sched_switch
    pub switch_prev_pid: u16,
    pub switch_prev_state: u16,
    pub switch_next_pid: u16,
    /// sched_waking / sched_wakeup / sched_wakeup_new (same layout)
    pub wakeup_pid: u16,
    pub wakeup_target_cpu: u16,
    /// task_newtask
    pub newtask_pid: u16,
    pub newtask_clone_flags: u16,
    /// sched_process_exec
    pub exec_old_pid: u16,
    /// sched_process_exit
    pub exit_group_dead: u16,
    /// task_rename
    pub rename_pid: u16,
    pub rename_newcomm: u16,
    /// block_bio_queue (and block_bio_backmerge and block_bio_frontmerge,
    /// of the same event class)
    pub bio_dev: u16,
    pub bio_sector: u16,
    pub bio_nr_sector: u16,
    /// block_split
    pub split_dev: u16,
    pub split_sector: u16,
    pub split_new_sector: u16,
    /// block_rq_insert / block_rq_issue (same layout)
    pub rq_dev: u16,
    pub rq_sector: u16,
    /// block_rq_complete
    pub complete_dev: u16,
    pub complete_sector: u16,
    pub complete_nr_sector: u16,
    pub complete_error: u16,
    pub complete_rwbs: u16,
    /// syscalls/sys_enter_futex
    pub futex_uaddr: u16,
    pub futex_op: u16,
    /// syscalls/sys_enter_futex_wait (Linux 6.7+)
    pub futex_wait_uaddr: u16,
    /// syscalls/sys_enter_futex_waitv (Linux 5.16+)
    pub futex_waitv_waiters: u16,
    /// syscalls/sys_exit_futex* (same layout for all three)
    pub futex_ret: u16,
    /// `task_struct` fields for the raw sched_switch / sched_waking programs,
    /// from the kernel's BTF (0 when they are not used: classic tracepoints).
    pub task_pid: u16,
    pub task_exit_state: u16,
    /// `thread_info.cpu` (or `cpu`) within task_struct.
    pub task_cpu: u16,
    /// `thread.fsbase` within task_struct: a thread's `pthread_self()`,
    /// which is how CPython 3.10 names its threads (0 when unknown).
    pub task_fsbase: u16,
    pub _pad: [u16; 3],
}
const _: () = assert!(size_of::<TracepointOffsets>() == 72);
// SAFETY: a repr(C) struct of integers with no hidden padding (the
// derived bytemuck::Pod checks it): every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for TracepointOffsets {}

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

/// Kernel-only key of a block request in flight (`REQUESTS`) and of a
/// tracked bio waiting for its request (`BIO_OWNERS`): the whole disk's
/// device number and the first sector.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestKey {
    pub sector: u64,
    pub dev: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<RequestKey>() == 16);
// SAFETY: a repr(C) struct of integers with explicit padding (the derived
// bytemuck::Pod checks it): every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RequestKey {}

/// Kernel-only: a block request in flight, from insert (or issue) to
/// completion. Userspace reads `start_ns` to expire entries whose
/// completion never came. 24 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestTimes {
    pub start_ns: u64,
    pub issue_ns: u64,
    /// `bpf_get_current_pid_tgid()` of the tracked thread that submitted
    /// it, taken from `BIO_OWNERS` when the request was created; 0: none.
    pub owner: u64,
}
const _: () = assert!(size_of::<RequestTimes>() == 24);
// SAFETY: a repr(C) struct of integers with no hidden padding (the
// derived bytemuck::Pod checks it): every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RequestTimes {}

/// Kernel-only: the tracked thread that submitted a bio, from
/// block_bio_queue until a request claims it. 16 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BioOwner {
    /// `bpf_get_current_pid_tgid()` of the submitter.
    pub pid_tgid: u64,
    /// When it was submitted (userspace expires old entries).
    pub ts_ns: u64,
}
const _: () = assert!(size_of::<BioOwner>() == 16);
// SAFETY: as for RequestTimes.
#[cfg(feature = "user")]
unsafe impl aya::Pod for BioOwner {}

/// Linux errno values the kernel records (a futex wait's return, a block
/// request's error). Linux's own numbers, defined here rather than taken
/// from the host's libc: a recording is read on any machine.
pub mod errno {
    pub const EINTR: i32 = 4;
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

/// Kernel-only: a futex wait in progress, from entry to exit.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutexEnter {
    pub ts_ns: u64,
    pub uaddr: u64,
    pub op: u32,
    pub syscall: u32,
}
const _: () = assert!(size_of::<FutexEnter>() == 24);

/// The CUDA runtime functions tprof probes, as [`CudaCallEvent::func`] and
/// as the uprobes' attach cookie. Plain constants, like [`stack_kind`].
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

/// Where the pipe programs find a file descriptor's file and tell a pipe:
/// `current->files->fdt->fd[fd]`, the file's inode mode (a FIFO) and its
/// `private_data` (the pipe), from the kernel's BTF, and `sys_exit_read`'s
/// `ret` field, from tracefs. Userspace sets it as the `FILE_OFFSETS`
/// global; all zero turns the pipe program off. 24 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileOffsets {
    pub task_files: u16,
    pub files_fdt: u16,
    pub fdt_max_fds: u16,
    pub fdt_fd: u16,
    pub file_inode: u16,
    pub file_private_data: u16,
    pub inode_mode: u16,
    /// `sys_exit_read`'s `ret`.
    pub exit_ret: u16,
    pub _pad: [u16; 4],
}
const _: () = assert!(size_of::<FileOffsets>() == 24);
// SAFETY: as for TracepointOffsets.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FileOffsets {}

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

/// Kernel-only: a CUDA call in progress, from entry to return. 48 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaEnter {
    pub ts_ns: u64,
    pub args: [u64; CUDA_ARGS],
}
const _: () = assert!(size_of::<CudaEnter>() == 48);
// SAFETY: as for RequestTimes.
#[cfg(feature = "user")]
unsafe impl aya::Pod for CudaEnter {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The raw sched_switch program's `prev_state` matches what the classic
    /// tracepoint reports for the same switch.
    #[test]
    fn raw_prev_state_matches_the_tracepoint() {
        assert_eq!(report_prev_state(true, 1, 0), PREV_STATE_PREEMPTED);
        assert_eq!(report_prev_state(false, 0, 0), 0);
        assert_eq!(report_prev_state(false, 0x1, 0), PREV_STATE_INTERRUPTIBLE);
        assert_eq!(report_prev_state(false, 0x2, 0), PREV_STATE_UNINTERRUPTIBLE);
        // TASK_DEAD reports exit_state: EXIT_ZOMBIE, EXIT_DEAD.
        assert_eq!(report_prev_state(false, TASK_DEAD, 0x20), 0x20);
        assert_eq!(report_prev_state(false, TASK_DEAD, 0x10), 0x10);
        // TASK_IDLE (D | NOLOAD) reports TASK_REPORT_IDLE, not D.
        assert_eq!(report_prev_state(false, TASK_IDLE, 0), 0x80);
        // TASK_KILLABLE (D | WAKEKILL) reports D; a frozen task reports D.
        assert_eq!(
            report_prev_state(false, 0x102, 0),
            PREV_STATE_UNINTERRUPTIBLE
        );
        assert_eq!(
            report_prev_state(false, TASK_FROZEN | 1, 0),
            PREV_STATE_UNINTERRUPTIBLE
        );
        // Stopped (__TASK_STOPPED) and parked (TASK_PARKED).
        assert_eq!(report_prev_state(false, 0x4, 0), 0x4);
        assert_eq!(report_prev_state(false, 0x40, 0), 0x40);
        for state in [0x1, 0x2, 0x4, 0x8, 0x40, TASK_IDLE] {
            assert!(offcpu_reason(report_prev_state(false, state, 0)).is_some());
        }
        assert_eq!(
            offcpu_reason(report_prev_state(false, TASK_DEAD, 0x20)),
            None
        );
    }
}

//! The kernel's maps, as both sides size and read them: their sizes (the
//! tracked sets, the sharded ring buffers, the maps of things in flight,
//! the stack map), `TRACKED_TIDS`' per-thread value [`ThreadState`],
//! which the hot programs update in place, the values of the kernel-only
//! maps of things in flight ([`RequestKey`], [`RequestTimes`],
//! [`BioOwner`], [`FutexEnter`], [`CudaEnter`]; userspace reads them to
//! expire what never ends), and the `LOST` array's slots.

use crate::python::PyThreadCache;
use crate::{CUDA_ARGS, LastStacks, STACK_KINDS, STACK_SLOTS, kind};

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
    /// [`stack_mode::COPY`](crate::stack_mode::COPY): the task had no user
    /// registers to copy from (`bpf_task_pt_regs` gave none, or they could not
    /// be read).
    pub const NO_REGS: u32 = 32;
    /// [`stack_mode::COPY`](crate::stack_mode::COPY): no scratch buffer for
    /// this CPU (more CPUs than userspace sized `STACK_SCRATCH` for).
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

/// Where the switch program's time goes, when userspace asks
/// (`TPROF_SWITCH_PROFILE=1` sets the `PROFILE_SWITCH` global): slot `3p`
/// of the per-CPU `SWITCH_PROFILE` array sums the nanoseconds part `p`
/// took, slot `3p + 1` counts its runs, slot `3p + 2` is when it began. The clock reads the measurement
/// adds (about 20 ns each) fall in the parts measured. Off by default: the
/// verifier then drops the measuring code.
pub mod switch_part {
    /// A switch with a tracked task, from after the filtering lookups to
    /// after its event is written. What the parts below leave of it is the
    /// rest: `prev_state`, whether the last walk may be reused (its age
    /// and, for a Python thread, whether its Python code moved; measuring
    /// that part alone made LLVM emit code the verifier refused).
    pub const TRACKED: u32 = 0;
    /// Walking the kernel stack into the stack map.
    pub const KERNEL_WALK: u32 = 1;
    /// The user stack: a copy's fingerprint matched, or a new copy.
    pub const USER_STACK: u32 = 2;
    /// New copies alone (a subset of [`USER_STACK`]).
    pub const NEW_COPY: u32 = 3;
    /// Walking the Python frames and sending them.
    pub const PYTHON_WALK: u32 = 4;
    /// Writing the switch event into the ring buffer.
    pub const EVENT_WRITE: u32 = 5;
    /// Checking a copy's call site against the stack before reusing it (a
    /// subset of [`USER_STACK`]).
    pub const SITE_CHECK: u32 = 6;
    /// Site checks that found another call site (their runs count them).
    pub const SITE_DIFFERS: u32 = 7;
    /// Parts measured.
    pub const COUNT: u32 = 8;
    /// Their names, as userspace prints them.
    pub const NAMES: [&str; COUNT as usize] = [
        "tracked switch",
        "kernel walk",
        "user stack",
        "new copy",
        "python walk",
        "event write",
        "site check",
        "site differs",
    ];
}

/// Distinct stacks the `STACKS` map holds: kernel stacks, and user stacks
/// in [`stack_mode::FRAME_POINTERS`](crate::stack_mode::FRAME_POINTERS).
pub const MAX_STACKS: u32 = 16_384;

/// Kernel-side value of `TRACKED_TIDS`: a tracked thread's tgid and every
/// piece of per-thread state the hot programs keep, in one preallocated
/// hash entry updated in place. A context switch then does one lookup per
/// task: the lookup that tells whether the task is tracked also finds its
/// cached stack walks and whether it is in a futex wait (more lookups when
/// these lived in maps of their own). Userspace seeds it with
/// [`ThreadState::new`]. 360 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState {
    /// The futex wait in progress; `ts_ns` 0 when none.
    pub futex: FutexEnter,
    /// When the thread's last pipe event was emitted: the pipe programs
    /// emit at most one per thread per [`PIPE_GAP_NS`](crate::PIPE_GAP_NS).
    pub pipe_ns: u64,
    /// The last walked off-CPU stacks, by off-CPU reason
    /// ([`stack_kind`](crate::stack_kind)): kernel stacks, and user stacks in
    /// [`stack_mode::FRAME_POINTERS`](crate::stack_mode::FRAME_POINTERS).
    pub last_stacks: [LastStacks; STACK_KINDS],
    /// [`stack_mode::COPY`](crate::stack_mode::COPY): the user stacks this
    /// thread's last switch-outs copied, one per slot: each one's
    /// [`fingerprint`](crate::fingerprint) (0: empty)…
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
    /// 1 from a traced switch-in to the next switch-out: a switch-out
    /// that finds 0 comes after an arrival no program saw, and says how
    /// long the thread ran ([`ArrivalEvent`](crate::ArrivalEvent)).
    pub on_cpu: u32,
    /// Until when the stacks of this thread's last preemption serve its
    /// next preemptions (0: none; cleared when it leaves the CPU for another
    /// reason): a sampling period after it on average
    /// (`PREEMPT_STACK_GAP_NS`), drawn at random so that a periodic
    /// workload is not sampled in step with its period.
    pub preempt_reuse_until_ns: u64,
    /// Until when each slot's copy serves a switch-out at its registers
    /// without its [`SiteCheck`](crate::SiteCheck) read from the stack (0:
    /// check at the next): a sampling period after its last check passed,
    /// drawn as `preempt_reuse_until_ns` is.
    pub site_trusted_until_ns: [u64; STACK_SLOTS],
    /// Slots (a bit each) whose registers another call site has stood at
    /// too: their copies are checked at every reuse.
    pub site_doubts: u32,
    pub _reserved: u32,
}
const _: () = assert!(size_of::<ThreadState>() == 360);
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
                py_position: 0,
            }; STACK_KINDS],
            fingerprints: [0; STACK_SLOTS],
            slot_seqs: [0; STACK_SLOTS],
            copies: 0,
            next_slot: 0,
            py: PyThreadCache {
                tstate: 0,
                missed_ns: 0,
                missed_mark: 0,
            },
            tgid,
            on_cpu: 0,
            preempt_reuse_until_ns: 0,
            site_trusted_until_ns: [0; STACK_SLOTS],
            site_doubts: 0,
            _reserved: 0,
        }
    }
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

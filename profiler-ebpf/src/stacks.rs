//! How stacks are taken: the [`stack_mode`] (frame-pointer walks into the
//! stack map, or copies of the user stack unwound by capture), what a
//! sample's weight measures ([`stack_kind`], from a switch's
//! `prev_state` by [`offcpu_reason`]), the reuse of a thread's recent
//! walks ([`LastStacks`]) and copies ([`fingerprint`], [`copy_ref`]), and
//! the ring-buffer-only [`StackCopyEvent`] with its sections and
//! registers, which capture unwinds and never records.

use crate::{
    AbiEvent, EventHeader, PREV_STATE_DEAD, PREV_STATE_INTERRUPTIBLE, PREV_STATE_PREEMPTED,
    PREV_STATE_UNINTERRUPTIBLE, kind,
};

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
/// that follow within [`STACK_REUSE_NS`]. 24 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastStacks {
    pub walked_ns: u64,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    /// The thread's Python [`position`](crate::python::position) at this
    /// walk: its Python frames are reused only while the thread is still
    /// there. Kept with the walk, not once per thread: a later walk for
    /// another reason, or an on-CPU sample, is taken elsewhere, and a
    /// thread preempted in `queue.get()`, then blocking there, matched the
    /// position of that preemption and lent the block the frames of an
    /// earlier wait in `Thread.start()` for its whole 600 ms.
    pub py_position: u64,
}
const _: () = assert!(size_of::<LastStacks>() == 24);

/// Slots of [`ThreadState::last_stacks`](crate::ThreadState::last_stacks): one
/// per [`stack_kind`] value, indexed by it (a power of two, so a masked index
/// is always in bounds).
pub const STACK_KINDS: usize = 8;
const _: () = assert!((stack_kind::FUTEX as usize) < STACK_KINDS);

/// A thread's off-CPU stacks are walked at most once per this long (per
/// thread and off-CPU reason): walking two stacks costs a few
/// microseconds, and a thread switching out 100,000 times a second nearly
/// always leaves from the same place.
pub const STACK_REUSE_NS: u64 = 1_000_000;

/// Default on-CPU sampling frequency: 99 Hz, not 100, so sampling does not
/// run in lockstep with timer-driven work.
pub const DEFAULT_SAMPLE_HZ: u64 = 99;

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
    /// [`StackCopyEvent`](crate::StackCopyEvent) and unwound by capture with
    /// each file's CFI.
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

/// Switch-out copies a thread keeps a fingerprint of
/// ([`ThreadState`](crate::ThreadState)).
pub const STACK_SLOTS: usize = 4;
/// The slot of an on-CPU sample's copy: never reused by a fingerprint.
pub const SAMPLE_SLOT: u32 = STACK_SLOTS as u32;
/// The slot of a preempted thread's copy: never matched by a fingerprint
/// either (a preemption stops a thread anywhere), and kept out of the
/// switch-out slots so that it does not push a blocking site's copy out
/// of them. Only the thread's last preemption's copy is reused
/// (`recent_preemption`), so one slot holds what is needed.
pub const PREEMPT_SLOT: u32 = STACK_SLOTS as u32 + 1;
/// Copy sequence numbers are kept modulo this (they share an i32 with the
/// slot in [`copy_ref`]).
pub const COPY_SEQ_MASK: u32 = (1 << 28) - 1;

/// What a [`SampleEvent::user_stack`](crate::SampleEvent::user_stack) or
/// [`SwitchEvent::prev_user_stack`](crate::SwitchEvent::prev_user_stack) holds
/// in [`stack_mode::COPY`], in the ring buffer: the copy of the thread's stack
/// it was taken from, by its sequence number (modulo [`COPY_SEQ_MASK`] + 1) and
/// slot; never negative (-1 stays "none"). Capture replaces it by a recording
/// stack id before writing the event.
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

/// Return addresses a [`SiteCheck`] holds: the first callers above the
/// leaf, where two callers of one function at the same depth differ.
pub const SITE_CHECK_FRAMES: usize = 8;
/// Bytes above the stack pointer a [`SiteCheck`]'s return addresses lie
/// within: the kernel reads them in one read of the stack up to the last
/// (one read of a few hundred bytes costs less than a read per word).
pub const SITE_CHECK_SPAN: usize = 2048;
/// Most switch-out copies with a [`SiteCheck`] at once (`SITE_CHECKS`, an
/// LRU map: a copy whose check was evicted is reused unchecked, as before
/// checks).
pub const MAX_SITE_CHECKS: u32 = 16_384;

/// `SITE_CHECKS` key: a thread's switch-out slot.
pub const fn site_check_key(tid: u32, slot: u32) -> u64 {
    ((tid as u64) << 32) | slot as u64
}

/// What tells a switch-out copy's call site from another at the same
/// registers, written by userspace once it has unwound the copy
/// (`SITE_CHECKS`, keyed by [`site_check_key`]): where on the stack the
/// walk found its first return addresses, and what they were. The
/// registers of a thread that blocks name the instruction, the stack
/// pointer and the frame pointer, not the callers above them, so two
/// functions calling one sleep or lock function from the same depth stand
/// at the same ones; the kernel reads these words from the stack before it
/// lets a switch-out reuse the copy (the words of another caller differ).
/// 88 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteCheck {
    /// The copy's sequence number: an older copy's check in the slot does
    /// not apply.
    pub seq: u32,
    /// Return addresses held (≤ [`SITE_CHECK_FRAMES`]; 0 when the walk
    /// found none: the copy's reuse is then never checked).
    pub count: u32,
    /// Where each is, in bytes above the copy's stack pointer, in
    /// increasing order, each a multiple of 8 under [`SITE_CHECK_SPAN`] -
    /// 8.
    pub offsets: [u16; SITE_CHECK_FRAMES],
    pub return_addresses: [u64; SITE_CHECK_FRAMES],
}
const _: () = assert!(size_of::<SiteCheck>() == 88);
// SAFETY: a repr(C) struct of integers with no hidden padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SiteCheck {}

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
    /// [`SAMPLE_SLOT`] for an on-CPU sample, [`PREEMPT_SLOT`] for a
    /// preemption, else the switch-out slot (0..[`STACK_SLOTS`]) whose
    /// fingerprint it fills.
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
    /// [`UserRegs`](crate::UserRegs), then the bytes of the user stack from
    /// `sp` up.
    pub const USER_STACK: u16 = 1;
    // 2 was reserved for Python frames, which went into records of their
    // own (`PyStackEvent`): most copies have none. Left unused.
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

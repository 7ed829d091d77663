//! Stack sampling: on-CPU samples from the cpu-clock perf event, and the
//! off-CPU half, which `sched::switch` drives. A [`SampleEvent`] per
//! on-CPU sample; the switch-out's stacks in its [`SwitchEvent`].
//! Userspace turns what they carry into the recording's stacks and weighs
//! each off-CPU interval from the switch-out to the thread's next switch-in,
//! so the kernel keeps no aggregate and a switch-in does no stack work.
//!
//! Kernel stacks are walked (bpf_get_stackid). User stacks, in
//! `stack_mode::COPY`, are copied: the thread's user registers and the top
//! of its stack go into a [`StackCopyEvent`] just before the event, which
//! refers to it by [`copy_ref`], and userspace unwinds the copy with each
//! file's CFI. A switch-out copies only when the thread's registers are not
//! those of one of its last [`STACK_SLOTS`] copies (a thread that blocks
//! again and again leaves from the same few places): it then refers to that
//! copy, once the return addresses userspace found in it are where they
//! were on the stack (`site_holds`). In `stack_mode::FRAME_POINTERS` (kernels without BTF) the kernel
//! walks user frame pointers too.
//!
//! Where the thread runs CPython, its Python frames go out just before the
//! event (`python::record`), with every new walk or copy; userspace splices
//! them into the native user stack.
//!
//! [`SwitchEvent`]: profiler_ebpf::SwitchEvent
//!
//! `tprof_sample` runs on the software cpu-clock perf event of every online
//! CPU at `--hz` (99 by default, so it does not run in lockstep with
//! timer-driven work), skips the idle task and untracked threads, and emits
//! the copy, the Python frames, then a `SampleEvent` naming the copy and the
//! kernel stack id. At a switch-out the stacks are walked at most once per
//! `STACK_REUSE_NS` per thread and off-CPU reason (`ThreadState::last_stacks`;
//! see `reusable`), and a preempted thread's about once per sampling
//! period in each stretch it runs (`recent_preemption`).

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid,
        generated::{
            bpf_get_current_task_btf, bpf_get_prandom_u32, bpf_get_smp_processor_id,
            bpf_ktime_get_ns, bpf_probe_read_user, bpf_task_pt_regs,
        },
    },
    macros::perf_event,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use profiler_ebpf::{
    AbiEvent, BPF_F_USER_STACK, COPY_SEQ_MASK, CopySection, LastStacks, MAX_STACK_COPY_BYTES,
    NO_STACK_KIND, PREEMPT_SLOT, SAMPLE_SLOT, SITE_CHECK_FRAMES, SITE_CHECK_SPAN, STACK_COPY_HEAD,
    STACK_KINDS, STACK_PAGE, STACK_REUSE_NS, STACK_SCRATCH_BYTES, STACK_SLOTS, SampleEvent,
    StackCopyEvent, ThreadState, UserRegs, copy_ref, errno, fingerprint, kind, lost_stack,
    offcpu_reason, section, site_check_key, stack_kind, switch_part, user_stack_flags,
};

use super::{
    SITE_CHECKS, STACK_SCRATCH, STACKS, copies_stacks, count_lost, emit, emit_copy_record,
    header_at, preempt_stack_gap_ns, profile_begin, profile_end, python, stack_copy_bytes,
    thread_state,
};

/// One cpu-clock tick on some CPU: a sample of the stacks of the thread it
/// interrupted, if that thread is tracked.
#[perf_event]
pub(crate) fn tprof_sample(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // tid 0 is the idle task; thread_state filters everything else untracked.
    if tid == 0 {
        return 0;
    }
    let Some(state) = thread_state(tid) else {
        return 0;
    };
    let tgid = (pid_tgid >> 32) as u32;
    // One clock read: the copy and the Python frames carry the sample's
    // time, which pairs them with it.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: state points into a live TRACKED_TIDS entry; a sample
    // interrupts user code or a system call, never this thread's switch-out
    // (interrupts are off there), the other writer of `copies` and `py`.
    let state = unsafe { &mut *state };
    let (mut user_stack, kernel_stack) = if copies_stacks() {
        (sample_copy(state, tid, tgid, now), stack_id(&ctx, 0))
    } else {
        stack_ids(&ctx)
    };
    // Python frames lost: the native stack goes with them, so no stack
    // goes out with its Python part missing.
    let position = python::record(&mut state.py, tid, tgid, now);
    if position.is_none() {
        user_stack = -1;
    }
    lend_to_preemption(state, user_stack, kernel_stack, position, now);
    emit(SampleEvent {
        hdr: header_at::<SampleEvent>(now),
        tid,
        tgid,
        user_stack,
        kernel_stack,
    });
    0
}

/// An on-CPU sample's stacks stand for where the thread is preempted in
/// the next sampling period or so (drawn as [`recent_preemption`]'s reuse
/// is), as a preemption's own stacks do: either is where the thread was
/// running in this stretch on the CPU, at most about a period ago, and the
/// thread's blocking ends the loan as it ends a preemption's. On the real
/// job (8 workers on 2 cores) preemptions made half of all stack copies
/// (4,534 of 9,455 in a 200-iteration run), each a copy in the kernel and
/// an unwind in userspace; a busy thread sampled at 99 Hz needs few of its
/// own. A sample whose stacks were lost lends nothing and ends the loan
/// (its copy replaced the one lent in the sample slot).
#[inline(always)]
fn lend_to_preemption(
    state: &mut ThreadState,
    user_stack: i32,
    kernel_stack: i32,
    position: Option<u64>,
    now: u64,
) {
    match position.filter(|_| user_stack >= 0) {
        Some(py_position) => {
            state.last_stacks[stack_kind::RUNNABLE as usize % STACK_KINDS] = LastStacks {
                walked_ns: now,
                user_stack_id: user_stack,
                kernel_stack_id: kernel_stack,
                py_position,
            };
            state.preempt_reuse_until_ns = about_a_period_after(now);
        }
        None => state.preempt_reuse_until_ns = 0,
    }
}

/// An on-CPU sample's copy of the user stack: always a new one (the
/// registers of a running thread are never the same twice).
#[inline(always)]
fn sample_copy(state: &mut ThreadState, tid: u32, tgid: u32, now: u64) -> i32 {
    let Some((regs, _)) = user_regs() else {
        count_lost(lost_stack::NO_REGS);
        return -1;
    };
    let seq = next_copy(state);
    if emit_copy(tid, tgid, seq, SAMPLE_SLOT, &regs, now, Scratch::Sampler) {
        copy_ref(seq, SAMPLE_SLOT)
    } else {
        -1
    }
}

/// (user, kernel) stack ids of the current task, frame-pointer walks; -1
/// for a missing one.
#[inline(always)]
pub(crate) fn stack_ids<C: StackIdContext>(ctx: &C) -> (i32, i32) {
    (stack_id(ctx, BPF_F_USER_STACK), stack_id(ctx, 0))
}

#[inline(always)]
fn stack_id<C: StackIdContext>(ctx: &C, flags: u64) -> i32 {
    match ctx.get_stackid(&STACKS, flags) {
        Ok(id) => id as i32,
        // No kernel frames: the sample interrupted user code. Not a loss.
        // (For a user stack, -EFAULT is a failure, counted as one.)
        Err(e) if e == -errno::EFAULT && flags & BPF_F_USER_STACK == 0 => -1,
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
/// (kind, user stack, kernel stack id).
pub(crate) type SwitchOutStacks = (u32, i32, i32);

/// sched_switch, prev side: a tracked thread leaves the CPU. Runs in prev's
/// context, so the stacks taken here are where it stopped. `state` is the
/// thread's `TRACKED_TIDS` entry; `walk` false (no stack sampling) still
/// gives the kind.
#[inline(always)]
pub(crate) fn switch_out<C: StackIdContext>(
    ctx: &C,
    tid: u32,
    state: *mut ThreadState,
    prev_state: u64,
    now: u64,
    walk: bool,
) -> SwitchOutStacks {
    let Some(reason) = offcpu_reason(prev_state) else {
        return (NO_STACK_KIND, -1, -1); // exiting: it will not come back
    };
    // SAFETY: state points into a live TRACKED_TIDS entry; only this
    // thread's own switches, samples and syscalls write it, and they cannot
    // overlap (interrupts are off at a switch).
    let state = unsafe { &mut *state };
    let reason = if reason == stack_kind::SLEEP && state.futex.ts_ns != 0 {
        stack_kind::FUTEX
    } else {
        reason
    };
    if !walk {
        return (reason, -1, -1);
    }
    if reason != stack_kind::RUNNABLE {
        state.preempt_reuse_until_ns = 0;
    } else if let Some((user, kernel)) = recent_preemption(state, now) {
        return (reason, user, kernel);
    }
    let (user, kernel) = if copies_stacks() {
        offcpu_copied(ctx, state, tid, reason, now)
    } else {
        offcpu_walked(ctx, state, tid, reason, now)
    };
    if reason == stack_kind::RUNNABLE && user >= 0 {
        state.preempt_reuse_until_ns = about_a_period_after(now);
    }
    (reason, user, kernel)
}

/// A time about one sampling period (`PREEMPT_STACK_GAP_NS`) after `now`,
/// drawn between a half and one and a half periods, so that what is
/// reused until then is not sampled in step with a periodic workload.
#[inline(always)]
fn about_a_period_after(now: u64) -> u64 {
    let gap = preempt_stack_gap_ns();
    let jitter = u64::from(unsafe { bpf_get_prandom_u32() }) * gap >> 32;
    now + gap / 2 + jitter
}

/// The stacks a preemption takes from the last preemption whose stacks were
/// taken, or the last on-CPU sample ([`lend_to_preemption`]), when that was
/// in the same stretch on the CPU (the thread has not
/// blocked since) and under about `PREEMPT_STACK_GAP_NS` (one sampling
/// period, drawn between a half and one and a half) ago. A preempted
/// thread stands wherever it was running, so its every preemption is a
/// new place, and a copy, a kernel walk and a Python walk each (on the
/// real job, with more threads than cores, 69% of the switch-out copies,
/// 5 µs in the kernel and 25 in userspace each). Taken about once a
/// period, where it waits for a CPU is sampled as where it runs is, and
/// its runnable time goes to the stacks of the last preemption or sample,
/// with their own Python frames.
#[inline(always)]
fn recent_preemption(state: &ThreadState, now: u64) -> Option<(i32, i32)> {
    let last = &state.last_stacks[stack_kind::RUNNABLE as usize % STACK_KINDS];
    let recent = now < state.preempt_reuse_until_ns && last.user_stack_id >= 0;
    recent.then_some((last.user_stack_id, last.kernel_stack_id))
}

/// Whether a switch-out may reuse the thread's last walk for the same
/// reason: it is under STACK_REUSE_NS old (one slot per reason, so a
/// page-fault wait (D) never lends its stack to the long sleep (S) that
/// follows it), and the thread's Python code, if any, has not moved since
/// (its native stacks, the interpreter's lock or sleep code, may well be
/// the same from another line). Walking is the costliest thing tprof does
/// per event.
#[inline(always)]
fn reusable(state: &ThreadState, slot: usize, now: u64) -> bool {
    let last = &state.last_stacks[slot];
    now.saturating_sub(last.walked_ns) < STACK_REUSE_NS
        && !python::moved(&state.py, state.tgid, last.py_position)
}

/// Frame-pointer mode: the stacks a switch-out leaves from, walked (with
/// the Python frames), or the last walk's when [`reusable`].
#[inline(always)]
fn offcpu_walked<C: StackIdContext>(
    ctx: &C,
    state: &mut ThreadState,
    tid: u32,
    reason: u32,
    now: u64,
) -> (i32, i32) {
    let slot = reason as usize % STACK_KINDS;
    if reusable(state, slot, now) {
        let last = &state.last_stacks[slot];
        return (last.user_stack_id, last.kernel_stack_id);
    }
    let (user_stack_id, kernel_stack_id) = stack_ids(ctx);
    remember_walk(state, slot, tid, now, now, user_stack_id, kernel_stack_id)
}

/// Copy mode: the user stack a copy ([`offcpu_copy`]); the kernel stack
/// the last walk's for the same reason when the thread left from the same
/// call site (the same copy: its registers were those of that walk), or,
/// as in frame-pointer mode, when that walk is under `STACK_REUSE_NS` old
/// and the thread's Python code has not moved; else walked. A blocked
/// thread's kernel stack follows from the call it blocked in, however
/// long ago it last did; a preempted one's does not (it was stopped
/// wherever the kernel was), so a runnable switch-out reuses by age alone.
/// The Python frames go out with every walk and whenever the copy is not
/// the last walk's or the Python code moved: a switch-out without them
/// gets, in userspace, the frames of the last walk whose two stacks are
/// its own. On the real job (8 workers) reusing by age alone walked the
/// kernel stack at one tracked switch in six, at 4.4 µs a walk.
#[inline(always)]
fn offcpu_copied<C: StackIdContext>(
    ctx: &C,
    state: &mut ThreadState,
    tid: u32,
    reason: u32,
    now: u64,
) -> (i32, i32) {
    let slot = reason as usize % STACK_KINDS;
    let last = state.last_stacks[slot];
    profile_begin(switch_part::USER_STACK);
    let user_stack_id = offcpu_copy(state, tid, now, reason);
    profile_end(switch_part::USER_STACK);
    let same_site = user_stack_id >= 0 && user_stack_id == last.user_stack_id;
    let young = now.saturating_sub(last.walked_ns) < STACK_REUSE_NS;
    let moved = (same_site || young) && python::moved(&state.py, state.tgid, last.py_position);
    let kernel_reused = if same_site {
        young || reason != stack_kind::RUNNABLE
    } else {
        young && !moved
    };
    let kernel_stack_id = if kernel_reused {
        last.kernel_stack_id
    } else {
        profile_begin(switch_part::KERNEL_WALK);
        let id = stack_id(ctx, 0);
        profile_end(switch_part::KERNEL_WALK);
        id
    };
    if kernel_reused && same_site && !moved {
        return (user_stack_id, kernel_stack_id);
    }
    let walked_ns = if kernel_reused { last.walked_ns } else { now };
    remember_walk(
        state,
        slot,
        tid,
        now,
        walked_ns,
        user_stack_id,
        kernel_stack_id,
    )
}

/// Sends the thread's Python frames with a switch-out's new stacks and
/// keeps those as its last walk for reason `slot` (walked at `walked_ns`).
/// Frames that could not be sent lose the user stack with them, and the
/// next switch-out walks again rather than lend this one out.
#[inline(always)]
fn remember_walk(
    state: &mut ThreadState,
    slot: usize,
    tid: u32,
    now: u64,
    walked_ns: u64,
    user_stack_id: i32,
    kernel_stack_id: i32,
) -> (i32, i32) {
    profile_begin(switch_part::PYTHON_WALK);
    let sent = python::record(&mut state.py, tid, state.tgid, now);
    profile_end(switch_part::PYTHON_WALK);
    let (walked_ns, user_stack_id, py_position) = match sent {
        Some(position) => (walked_ns, user_stack_id, position),
        None => (0, -1, 0),
    };
    state.last_stacks[slot] = LastStacks {
        walked_ns,
        user_stack_id,
        kernel_stack_id,
        py_position,
    };
    (user_stack_id, kernel_stack_id)
}

/// The user stack a switch-out for `reason` leaves from, as a reference to
/// a copy: one of the thread's last copies when its registers are the same
/// as then (a thread that blocks, or yields) and so are its callers
/// ([`site_holds`]), else a new copy in the next slot.
///
/// Not for a preempted thread: the registers tell a call site (its
/// instruction, stack and frame pointers), not the callers above it, and a
/// thread preempted as it leaves a system call stands at the same ones
/// whichever function made the call at that depth. On a workload whose two
/// functions call `clock_gettime` from the same depth, the runnable time
/// of one went to the other's copy: 84–98% of it to the function whose
/// run delay was 74–77%. A preempted thread's copies are bounded by the
/// sampling period instead (`recent_preemption`), and made in a slot of
/// their own ([`PREEMPT_SLOT`]). A thread that yields
/// (`sched_yield`, an OpenMP pool's spin) waits at its call site as one
/// that blocks does, again and again: matched by site, it costs no copy.
#[inline(always)]
fn offcpu_copy(state: &mut ThreadState, tid: u32, now: u64, reason: u32) -> i32 {
    let Some((regs, syscall)) = user_regs() else {
        count_lost(lost_stack::NO_REGS);
        return -1;
    };
    if reason == stack_kind::RUNNABLE && syscall != SYS_SCHED_YIELD {
        // A slot of its own, no fingerprint, no site to check: in the
        // switch-out slots these (two thirds of the switch-out copies on
        // the real job with 8 workers) pushed out the copies of the sites
        // where threads block.
        return switch_copy(state, tid, PREEMPT_SLOT, &regs, now)
            .map_or(-1, |seq| copy_ref(seq, PREEMPT_SLOT));
    }
    let print = fingerprint(regs.ip, regs.sp, regs.bp);
    // Another call site stood at these registers: the new copy's reuse is
    // checked every time too.
    let mut doubted = false;
    for slot in 0..STACK_SLOTS {
        if state.fingerprints[slot] == print {
            if site_holds(state, tid, slot, regs.sp, now) {
                return copy_ref(state.slot_seqs[slot], slot as u32);
            }
            doubted = true;
        }
    }
    let slot = state.next_slot as usize % STACK_SLOTS;
    state.next_slot = state.next_slot.wrapping_add(1);
    let copied = switch_copy(state, tid, slot as u32, &regs, now);
    state.site_trusted_until_ns[slot] = 0;
    state.site_doubts = (state.site_doubts & !(1 << slot)) | (u32::from(doubted) << slot);
    // A copy userspace never saw: no later switch-out may refer to it.
    state.fingerprints[slot] = if copied.is_some() { print } else { 0 };
    let Some(seq) = copied else {
        return -1;
    };
    state.slot_seqs[slot] = seq;
    copy_ref(seq, slot as u32)
}

/// A new copy of the current task's user stack in `slot`, made at a
/// switch-out: its sequence number, or None when userspace will never
/// see it.
#[inline(always)]
fn switch_copy(
    state: &mut ThreadState,
    tid: u32,
    slot: u32,
    regs: &UserRegs,
    now: u64,
) -> Option<u32> {
    let seq = next_copy(state);
    profile_begin(switch_part::NEW_COPY);
    let emitted = emit_copy(tid, state.tgid, seq, slot, regs, now, Scratch::Switch);
    profile_end(switch_part::NEW_COPY);
    emitted.then_some(seq)
}

/// Whether the copy in `slot`, made at the registers the thread stands at
/// now, is of the same call site: trusted for about a sampling period
/// after its [`SiteCheck`] last passed (drawn as a preemption's reuse is),
/// else checked, every time once another site has stood at its
/// registers (`site_doubts`). A copy userspace has not unwound yet (its
/// first tens of milliseconds) has no check, and holds.
///
/// Checking at every reuse would read a map and the stack at every block
/// of every thread (pingpong blocks 100,000 times a second); trusted
/// between checks, a caller that shares another's registers takes the
/// other's stack for at most about a period, until a check meets it, and
/// from then on never.
#[inline(always)]
fn site_holds(state: &mut ThreadState, tid: u32, slot: usize, sp: u64, now: u64) -> bool {
    let doubted = state.site_doubts & (1 << slot) != 0;
    if !doubted && now < state.site_trusted_until_ns[slot] {
        return true;
    }
    profile_begin(switch_part::SITE_CHECK);
    let same = same_callers(tid, slot as u32, state.slot_seqs[slot], sp);
    profile_end(switch_part::SITE_CHECK);
    match same {
        Some(false) => {
            profile_begin(switch_part::SITE_DIFFERS);
            state.site_doubts |= 1 << slot;
            profile_end(switch_part::SITE_DIFFERS);
            false
        }
        Some(true) if !doubted => {
            state.site_trusted_until_ns[slot] = about_a_period_after(now);
            true
        }
        _ => true,
    }
}

/// Whether the stack above `sp` holds the return addresses userspace found
/// in copy `seq` of the thread's `slot`, where it found them; None when it
/// has not said (not unwound yet, or its check evicted). The stack up to
/// the last of them is read at once into this CPU's switch scratch buffer,
/// free until a copy is made.
#[inline(always)]
fn same_callers(tid: u32, slot: u32, seq: u32, sp: u64) -> Option<bool> {
    // SAFETY: a map value, read only here (userspace replaces it whole).
    let check = unsafe { SITE_CHECKS.get(&site_check_key(tid, slot)) }?;
    if check.seq != seq {
        return None;
    }
    let count = check.count as usize;
    if count == 0 || count > SITE_CHECK_FRAMES {
        return Some(true);
    }
    let span = usize::from(check.offsets[(count - 1) % SITE_CHECK_FRAMES]) + 8;
    if span > SITE_CHECK_SPAN {
        return None; // not as userspace writes them
    }
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let buf = STACK_SCRATCH.get_ptr_mut(cpu * 2 + Scratch::Switch as u32)?;
    let base = buf.cast::<u8>();
    // SAFETY: the scratch buffer holds far more than SITE_CHECK_SPAN bytes.
    if unsafe { read_user(base, span, sp) } != 0 {
        return Some(false);
    }
    for i in 0..SITE_CHECK_FRAMES {
        if i >= count {
            break;
        }
        // Userspace sends only 8-aligned offsets under the span.
        let at = usize::from(check.offsets[i]) & (SITE_CHECK_SPAN - 8);
        // SAFETY: an aligned word within the buffer; past `span` lie the
        // last copy's bytes, which no offset userspace sends reaches.
        let word = unsafe { base.add(at).cast::<u64>().read() };
        if word != check.return_addresses[i] {
            return Some(false);
        }
    }
    Some(true)
}

/// The next copy's sequence number.
#[inline(always)]
fn next_copy(state: &mut ThreadState) -> u32 {
    state.copies = state.copies.wrapping_add(1) & COPY_SEQ_MASK;
    state.copies
}

/// x86-64 `struct pt_regs`, as 8-byte words: where the user registers are,
/// and the system call the task entered the kernel for (`orig_ax`).
const PT_REGS_BP: usize = 4;
const PT_REGS_ORIG_AX: usize = 15;
const PT_REGS_IP: usize = 16;
const PT_REGS_CS: usize = 17;
const PT_REGS_SP: usize = 19;

/// x86-64 `sched_yield`.
const SYS_SCHED_YIELD: i64 = 24;

/// The current task's user registers, as the kernel saved them when it
/// entered the kernel (a system call, or the interrupt that preempted or
/// sampled it), from `bpf_task_pt_regs` (5.15+, with BTF), and the system
/// call it entered for (negative for an interrupt). None when they are not
/// user-mode registers (a kernel thread).
#[inline(always)]
fn user_regs() -> Option<(UserRegs, i64)> {
    // SAFETY: BTF helpers on the current task; the verifier checks every
    // load from the pt_regs pointer against the kernel's BTF and turns it
    // into a load that cannot fault.
    unsafe {
        let task = bpf_get_current_task_btf();
        let regs = bpf_task_pt_regs(task) as *const u64;
        if regs.is_null() {
            return None;
        }
        let cs = core::ptr::read_volatile(regs.add(PT_REGS_CS));
        if cs & 3 != 3 {
            return None;
        }
        let user = UserRegs {
            ip: core::ptr::read_volatile(regs.add(PT_REGS_IP)),
            sp: core::ptr::read_volatile(regs.add(PT_REGS_SP)),
            bp: core::ptr::read_volatile(regs.add(PT_REGS_BP)),
        };
        Some((
            user,
            core::ptr::read_volatile(regs.add(PT_REGS_ORIG_AX)) as i64,
        ))
    }
}

/// Which of this CPU's two scratch buffers a copy is built in.
#[derive(Clone, Copy)]
enum Scratch {
    Switch = 0,
    Sampler = 1,
}

/// Builds a [`StackCopyEvent`] of the current task (registers `regs`, the
/// stack from `regs.sp`) in scratch and puts it into the ring buffer;
/// false (counted) when it could not.
#[inline(always)]
fn emit_copy(
    tid: u32,
    tgid: u32,
    seq: u32,
    slot: u32,
    regs: &UserRegs,
    now: u64,
    scratch: Scratch,
) -> bool {
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(cpu * 2 + scratch as u32) else {
        count_lost(lost_stack::NO_SCRATCH);
        return false;
    };
    let base = buf.cast::<u8>();
    // SAFETY: `base` is a STACK_SCRATCH_BYTES map value, 8-aligned; the
    // head's three parts fit before STACK_COPY_HEAD, the stack after it.
    let (len, flags) = unsafe { copy_stack(base.add(STACK_COPY_HEAD), regs.sp) };
    let total = (STACK_COPY_HEAD + len + 7) & !7;
    if total > STACK_SCRATCH_BYTES {
        return false; // cannot be; tells the verifier the bound
    }
    unsafe {
        base.cast::<StackCopyEvent>().write(StackCopyEvent {
            hdr: {
                let mut hdr = StackCopyEvent::header(now, cpu as u16);
                hdr.len = total as u32;
                hdr
            },
            tid,
            tgid,
            seq,
            slot,
        });
        base.add(size_of::<StackCopyEvent>())
            .cast::<CopySection>()
            .write(CopySection {
                kind: section::USER_STACK,
                flags,
                len: (size_of::<UserRegs>() + len) as u32,
            });
        base.add(size_of::<StackCopyEvent>() + size_of::<CopySection>())
            .cast::<UserRegs>()
            .write(*regs);
    }
    // SAFETY: the first `total` bytes of the map value, just written.
    let record = unsafe { core::slice::from_raw_parts(base, total) };
    emit_copy_record(record, kind::STACK_COPY)
}

/// Pages a copy can hold.
const MAX_PAGES: usize = (MAX_STACK_COPY_BYTES / STACK_PAGE) as usize;

/// Copies up to `STACK_COPY_BYTES` of the user stack from `sp` to `dst`:
/// the rest of sp's page, then whole pages, then what is left of the cap
/// (within one more page), so the copy ends exactly at the first page that
/// cannot be read. Returns the bytes copied and the section's flags.
///
/// # Safety
/// `dst` has room for MAX_STACK_COPY_BYTES + STACK_PAGE bytes.
#[inline(always)]
unsafe fn copy_stack(dst: *mut u8, sp: u64) -> (usize, u16) {
    const PAGE: usize = STACK_PAGE as usize;
    const MAX: usize = MAX_STACK_COPY_BYTES as usize;
    let cap = stack_copy_bytes() as usize;
    let first = PAGE - (sp as usize & (PAGE - 1));
    let first = if first > cap { cap } else { first };
    // The checks against constants below repeat what the cap ensures, for
    // a verifier that cannot relate two unknown values (before 6.8).
    if first > PAGE {
        return (0, user_stack_flags::FAILED);
    }
    if unsafe { read_user(dst, first, sp) } != 0 {
        return (0, user_stack_flags::FAILED);
    }
    let mut len = first;
    for _ in 0..MAX_PAGES {
        if len + PAGE > cap || len > MAX - PAGE {
            break;
        }
        if unsafe { read_user(dst.add(len), PAGE, sp + len as u64) } != 0 {
            return (len, user_stack_flags::SHORT);
        }
        len += PAGE;
    }
    let rest = cap.saturating_sub(len) & (PAGE - 1);
    if rest > 0 && len <= MAX {
        if unsafe { read_user(dst.add(len), rest, sp + len as u64) } != 0 {
            return (len, user_stack_flags::SHORT);
        }
        len += rest;
    }
    (len, 0)
}

/// bpf_probe_read_user: 0, or a negative errno (the destination is zeroed).
#[inline(always)]
unsafe fn read_user(dst: *mut u8, size: usize, src: u64) -> i64 {
    unsafe { bpf_probe_read_user(dst.cast(), size as u32, src as *const _) }
}

//! Maps shared by all programs, and the helpers every program uses to filter
//! and emit. One file per group of tracepoints below.
//!
//! The maps: the event stream as eight ring buffers `EVENTS0`…`EVENTS7`
//! (`RING_BUFFER_BYTES`, 16 MiB in all, CPU c writing to shard c % 8), the
//! stack copies' own `COPIES0`…`COPIES7` (32 MiB), `TRACKED_TGIDS`,
//! `TRACKED_TIDS` (with each thread's `ThreadState`), `LOST` (per-CPU drop
//! counters), `STACKS` (the kernel's stack map) and `STACK_SCRATCH` (two
//! buffers per CPU a stack copy is built in). The globals userspace sets at
//! load time, which the verifier reads as constants: `OFFSETS`,
//! `SAMPLE_STACKS`, `STACK_MODE`, `STACK_COPY_BYTES`, `PREEMPT_STACK_GAP_NS`,
//! `PYTHON_FRAMES`,
//! `FILE_OFFSETS` (in `steps.rs`).
//! `emit` reserves a record in this CPU's event shard and submits it with
//! `BPF_RB_NO_WAKEUP` (userspace polls every 50 ms), counting a full buffer
//! in `LOST[kind]`; `emit_copy_record` does the same in the copy shard for a
//! record built in a buffer, whose length the verifier cannot know at
//! reservation.
//!
//! Every program filters before any other work (see main.rs). The
//! deliberate exceptions: the `block_rq_*` programs and
//! `tprof_bio_frontmerge` run for every request on the machine, because
//! device statistics are machine-wide; `tprof_bio_split`, `tprof_futex_exit`
//! and `tprof_cuda_return` filter on maps only tracked threads fill
//! (`BIO_OWNERS`, the thread's futex wait, `CUDA_CALLS`); `tprof_futex_enter`
//! first drops operations that do not wait. No program reads a kernel struct
//! at a hard-coded offset: tracepoint fields are read at the offsets in
//! `OFFSETS`, which userspace fills from tracefs and, for the raw scheduler
//! programs' `task_struct` fields, from the kernel's BTF; the pipe
//! program's walk from a task to an fd's pipe uses `FILE_OFFSETS`, from
//! the BTF too (and the x86-64 `pt_regs` layout, user ABI, as the stack
//! copies do). Nothing is pinned:
//! every program and map lives only as long as tprof's file descriptors.

mod block;
mod cuda;
mod futex;
mod mappings;
mod python;
mod sched;
mod stacks;
mod steps;
mod task;

use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf, StackTrace},
};
use profiler_ebpf::{
    AbiEvent, BPF_NOEXIST, COPY_RING_BUFFER_BYTES, DEFAULT_SAMPLE_HZ, DEFAULT_STACK_COPY_BYTES,
    EventHeader, LOST_SLOTS, MAX_SITE_CHECKS, MAX_STACKS, MAX_TRACKED_TGIDS, MAX_TRACKED_TIDS,
    RING_BUFFER_BYTES, STACK_SCRATCH_BYTES, SiteCheck, ThreadState, TracepointOffsets, stack_mode,
};

/// bpf_ringbuf_submit flag: do not wake the consumer.
const BPF_RB_NO_WAKEUP: u64 = 1;

/// All streamed events, drained by userspace's capture loop: one ring
/// buffer per group of CPUs (`EVENT_SHARDS`), so CPUs do not contend for
/// one buffer's lock on every event. Userspace sizes them (the shards no
/// CPU uses get one page) and merges them by timestamp.
#[map]
static EVENTS0: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS1: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS2: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS3: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS4: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS5: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS6: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
#[map]
static EVENTS7: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);
const _: () = assert!(profiler_ebpf::EVENT_SHARDS == 8);

/// Stack copies (`StackCopyEvent`), sharded as the events are, in ring
/// buffers of their own: a burst of large copies cannot crowd scheduler
/// events out. Userspace drains these after the event shards, so any event
/// it reads has its copy (committed before it) in reach.
#[map]
static COPIES0: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES1: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES2: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES3: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES4: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES5: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES6: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);
#[map]
static COPIES7: RingBuf = RingBuf::with_byte_size(COPY_RING_BUFFER_BYTES, 0);

/// This CPU's one of eight shards. Branches, not an index: the verifier
/// needs each map pointer from its own load instruction.
macro_rules! shard {
    ($s0:ident, $s1:ident, $s2:ident, $s3:ident, $s4:ident, $s5:ident, $s6:ident, $s7:ident) => {{
        let cpu = unsafe { bpf_get_smp_processor_id() };
        if cpu & 4 == 0 {
            if cpu & 2 == 0 {
                if cpu & 1 == 0 { &$s0 } else { &$s1 }
            } else if cpu & 1 == 0 {
                &$s2
            } else {
                &$s3
            }
        } else if cpu & 2 == 0 {
            if cpu & 1 == 0 { &$s4 } else { &$s5 }
        } else if cpu & 1 == 0 {
            &$s6
        } else {
            &$s7
        }
    }};
}

/// This CPU's event shard.
#[inline(always)]
fn events_shard() -> &'static RingBuf {
    shard!(
        EVENTS0, EVENTS1, EVENTS2, EVENTS3, EVENTS4, EVENTS5, EVENTS6, EVENTS7
    )
}

/// This CPU's stack copy shard.
#[inline(always)]
fn copies_shard() -> &'static RingBuf {
    shard!(
        COPIES0, COPIES1, COPIES2, COPIES3, COPIES4, COPIES5, COPIES6, COPIES7
    )
}

/// Tracked processes (tgid → 1). Programs that run in the context of the
/// task they describe (fork, exec, exit) filter on this.
#[map]
static TRACKED_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TRACKED_TGIDS, 0);

/// Tracked threads (tid → [`ThreadState`]). sched_switch and the wakeups
/// name the other task only by tid, so they need this map; it gives them
/// its tgid, and holds all the per-thread state of the hot paths (off-CPU
/// cached stack walks, the futex wait in progress), updated in place
/// through the pointer the filtering lookup returns. A preallocated hash
/// updated in place costs nothing beyond that lookup, where an insert and a
/// delete per event (or an LRU map) cost an allocation and a lock.
#[map]
static TRACKED_TIDS: HashMap<u32, ThreadState> = HashMap::with_max_entries(MAX_TRACKED_TIDS, 0);

/// Drop counters: slot 0 = tracked maps full, slot k = ring buffer full for
/// event kind k, and the `lost_stack` slots. Per CPU so counting never
/// contends.
#[map]
static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOST_SLOTS, 0);

/// Kernel stacks by id (bpf_get_stackid), and user stacks in
/// `stack_mode::FRAME_POINTERS`, shared by on- and off-CPU sampling. Events
/// carry the ids; userspace reads each new id's frames once, symbolizes
/// them and records them as the recording's own.
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(MAX_STACKS, 0);

/// What tells each switch-out copy's call site from others at the same
/// registers ([`SiteCheck`], by `site_check_key(tid, slot)`): userspace
/// writes one once it has unwound the copy; the switch program only reads.
#[map]
static SITE_CHECKS: LruHashMap<u64, SiteCheck> = LruHashMap::with_max_entries(MAX_SITE_CHECKS, 0);

/// Where a stack copy record is built before it goes into the ring buffer
/// (a reservation needs a size the verifier knows; a copy's is not known
/// until its pages are read). Two per CPU, entry `2 * cpu + user`: the
/// switch programs and the sampler, which an NMI-based sampler could run
/// inside a switch program. Userspace sizes it for the machine's CPUs.
#[map]
static STACK_SCRATCH: Array<[u8; STACK_SCRATCH_BYTES]> = Array::with_max_entries(2, 0);

/// Tracepoint field offsets, overridden by userspace at load time from the
/// running kernel's tracefs format files. The defaults are 6.x's layout.
#[unsafe(no_mangle)]
static OFFSETS: TracepointOffsets = TracepointOffsets {
    switch_prev_pid: 24,
    switch_prev_state: 32,
    switch_next_pid: 56,
    wakeup_pid: 24,
    wakeup_target_cpu: 32,
    newtask_pid: 8,
    newtask_clone_flags: 32,
    exec_old_pid: 16,
    exit_group_dead: 32,
    rename_pid: 8,
    rename_newcomm: 28,
    bio_dev: 8,
    bio_sector: 16,
    bio_nr_sector: 24,
    split_dev: 8,
    split_sector: 16,
    split_new_sector: 24,
    rq_dev: 8,
    rq_sector: 16,
    complete_dev: 8,
    complete_sector: 16,
    complete_nr_sector: 24,
    complete_error: 28,
    complete_rwbs: 34,
    futex_uaddr: 16,
    futex_op: 24,
    futex_wait_uaddr: 16,
    futex_waitv_waiters: 16,
    futex_ret: 16,
    task_pid: 0,
    task_exit_state: 0,
    task_cpu: 0,
    task_runtime: 0,
    task_prev_runtime: 0,
    task_fsbase: 0,
    mmap_ret: 16,
    mprotect_ret: 16,
    _pad: [0; 3],
};

/// Non-zero when stacks are sampled (`tprof record --no-stacks` clears it,
/// sparing every switch of a tracked thread two stack walks).
#[unsafe(no_mangle)]
static SAMPLE_STACKS: u32 = 1;

#[inline(always)]
fn stacks_enabled() -> bool {
    unsafe { core::ptr::read_volatile(&SAMPLE_STACKS) != 0 }
}

/// How user stacks are taken (`stack_mode`). Userspace sets it at load
/// time; the verifier reads it as a constant and checks only that mode's
/// code, so a kernel without BTF never sees the copy mode's BTF helpers.
#[unsafe(no_mangle)]
static STACK_MODE: u32 = stack_mode::COPY;

/// Bytes of user stack a copy takes from sp (`--stack-size`).
#[unsafe(no_mangle)]
static STACK_COPY_BYTES: u32 = DEFAULT_STACK_COPY_BYTES;

#[inline(always)]
fn copies_stacks() -> bool {
    unsafe { core::ptr::read_volatile(&STACK_MODE) == stack_mode::COPY }
}

#[inline(always)]
fn stack_copy_bytes() -> u32 {
    unsafe { core::ptr::read_volatile(&STACK_COPY_BYTES) }
}

/// The sampling period (`--hz`): a preempted thread's stacks are taken
/// about once per period of each stretch it runs (`stacks::recent_preemption`).
#[unsafe(no_mangle)]
static PREEMPT_STACK_GAP_NS: u64 = 1_000_000_000 / DEFAULT_SAMPLE_HZ;

#[inline(always)]
fn preempt_stack_gap_ns() -> u64 {
    unsafe { core::ptr::read_volatile(&PREEMPT_STACK_GAP_NS) }
}

/// Non-zero when the switch program measures where its time goes
/// (`switch_part`, into `SWITCH_PROFILE`). A constant to the verifier: 0
/// (the default) drops the measuring code.
#[unsafe(no_mangle)]
static PROFILE_SWITCH: u32 = 0;

/// The switch program's time by part: per CPU, `3 * part` the
/// nanoseconds, `3 * part + 1` the runs, `3 * part + 2` when the part
/// began (kept here, not in a register across the part's calls).
#[map]
static SWITCH_PROFILE: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(3 * profiler_ebpf::switch_part::COUNT, 0);

/// Notes when `part` of the switch program begins, if it is measured.
#[inline(always)]
fn profile_begin(part: u32) {
    if unsafe { core::ptr::read_volatile(&PROFILE_SWITCH) } == 0 {
        return;
    }
    if let Some(began) = SWITCH_PROFILE.get_ptr_mut(3 * part + 2) {
        unsafe { *began = bpf_ktime_get_ns() };
    }
}

/// Adds the time since `part` began to its total.
#[inline(always)]
fn profile_end(part: u32) {
    if unsafe { core::ptr::read_volatile(&PROFILE_SWITCH) } == 0 {
        return;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(began) = SWITCH_PROFILE.get(3 * part + 2).copied() else {
        return;
    };
    if let Some(ns) = SWITCH_PROFILE.get_ptr_mut(3 * part) {
        unsafe { *ns += now.saturating_sub(began) };
    }
    if let Some(runs) = SWITCH_PROFILE.get_ptr_mut(3 * part + 1) {
        unsafe { *runs += 1 };
    }
}

/// Non-zero when Python frames are walked (`--no-python-frames` clears
/// it). A constant to the verifier, which then never looks at the walk's
/// code when it is 0: a kernel without `bpf_loop` (before 5.17) loads the
/// programs that way.
#[unsafe(no_mangle)]
static PYTHON_FRAMES: u32 = 1;

#[inline(always)]
fn python_enabled() -> bool {
    unsafe { core::ptr::read_volatile(&PYTHON_FRAMES) != 0 }
}

/// The offsets as userspace set them. Volatile so the compiler cannot fold
/// the defaults into the code.
#[inline(always)]
fn offsets() -> TracepointOffsets {
    unsafe { core::ptr::read_volatile(&OFFSETS) }
}

/// The header of a `T` record stamped now, on this CPU.
#[inline(always)]
fn header<T: AbiEvent>() -> EventHeader {
    header_at::<T>(unsafe { bpf_ktime_get_ns() })
}

/// A header stamped `ts_ns`, for a program that already read the clock.
#[inline(always)]
fn header_at<T: AbiEvent>(ts_ns: u64) -> EventHeader {
    T::header(ts_ns, unsafe { bpf_get_smp_processor_id() } as u16)
}

/// Tgid of a tracked thread, or None.
#[inline(always)]
fn tracked_tgid(tid: u32) -> Option<u32> {
    unsafe { TRACKED_TIDS.get(&tid) }.map(|t| t.tgid)
}

/// A tracked thread's state, to read and update in place, or None.
#[inline(always)]
fn thread_state(tid: u32) -> Option<*mut ThreadState> {
    TRACKED_TIDS.get_ptr_mut(&tid)
}

#[inline(always)]
fn is_tracked_process(tgid: u32) -> bool {
    unsafe { TRACKED_TGIDS.get(&tgid) }.is_some()
}

/// Counts one lost event in slot `slot` of `LOST`.
#[inline(always)]
fn count_lost(slot: u32) {
    if let Some(counter) = LOST.get_ptr_mut(slot) {
        unsafe { *counter += 1 };
    }
}

/// Adds `n` to `key`'s counter on this CPU, in a per-CPU hash whose
/// values userspace sums over the CPUs (so no atomics are needed): in place
/// when the key exists, else as a new key; when another CPU created the key
/// in between, in this CPU's slot of it. `Err` only when the map is full.
#[inline(always)]
fn add_per_cpu<K>(map: &PerCpuHashMap<K, u64>, key: &K, n: u64) -> Result<(), i32> {
    if let Some(total) = map.get_ptr_mut(key) {
        unsafe { *total += n };
        return Ok(());
    }
    match map.insert(key, n, BPF_NOEXIST) {
        Ok(()) => Ok(()),
        Err(e) if e == -profiler_ebpf::errno::EEXIST => {
            if let Some(total) = map.get_ptr_mut(key) {
                unsafe { *total += n };
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Copies a stack copy record built in `STACK_SCRATCH` into this CPU's copy
/// shard; false, counted as lost under `kind`, when full.
#[inline(always)]
fn emit_copy_record(record: &[u8], kind: u16) -> bool {
    match copies_shard().output::<[u8]>(record, BPF_RB_NO_WAKEUP) {
        Ok(()) => true,
        Err(_) => {
            count_lost(u32::from(kind));
            false
        }
    }
}

/// Copies `event` into the ring buffer, counting it as lost when full.
#[inline(always)]
fn emit<T: AbiEvent + 'static>(event: T) {
    match events_shard().reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(event);
            // Userspace polls on a timer; skipping the wakeup saves an
            // irq_work per event batch.
            entry.submit(BPF_RB_NO_WAKEUP);
        }
        None => count_lost(u32::from(T::KIND)),
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

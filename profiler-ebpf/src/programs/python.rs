//! Python frames, kernel half: for a thread of a process userspace found
//! running CPython (`PY_PROCS`), walk its frame chain at each on-CPU sample
//! and each walked switch-out ([`profiler_ebpf::python::walk`]) and emit
//! the frames as a [`PyStackEvent`] just before the event they belong to,
//! with the same timestamp and tid. No program of its own: `stacks` calls
//! [`record`] where it takes the native stacks, so the Python walk rides
//! the same once-per-parked-thread economy off CPU.
//!
//! Fork, exec and exit keep `PY_PROCS` in step ([`inherit`], [`forget`]):
//! a forked DataLoader worker has its parent's address space, so its first
//! samples are walked with its parent's layout before userspace looks.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_task, bpf_get_smp_processor_id, bpf_probe_read_kernel, bpf_probe_read_user,
        bpf_probe_read_user_buf, generated::bpf_loop,
    },
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use profiler_ebpf::{
    EventHeader, MAX_TRACKED_TGIDS, PyProcInfo, PyStackEvent, PyThreadCache, kind,
    python::{
        FRAME_WORDS, FindState, MAX_PY_STEPS, MAX_THREAD_NODES, PY_NO_THREAD, PY_RETRY_NS,
        PyStackRecord, ReadMem, WalkState, find_step, info_flags, list_mark, owns, position,
        walk_step,
    },
};

use super::{BPF_RB_NO_WAKEUP, count_lost, events_shard, offsets, python_enabled};

/// Python processes (tgid → where their interpreter keeps its frames),
/// filled by userspace and copied to forked children here.
#[map]
static PY_PROCS: HashMap<u32, PyProcInfo> = HashMap::with_max_entries(MAX_TRACKED_TGIDS, 0);

/// Everything one walk works on, in a per-CPU map value rather than on the
/// stack: the record (2 KiB, far beyond the 512-byte BPF stack), and the
/// loops' state. The loops run under bpf_loop, whose callback the verifier
/// checks again until its states converge: state kept in a map value is
/// unknown to it, so they converge at once, where counters on the stack
/// would be followed through every iteration.
#[repr(C)]
struct PyScratch {
    rec: PyStackRecord,
    info: PyProcInfo,
    walk: WalkState,
    find: FindState,
    frame: [u64; FRAME_WORDS],
    /// The walked thread's [`position`], 0 when it was not walked.
    position: u64,
}

#[map]
static PY_SCRATCH: PerCpuArray<PyScratch> = PerCpuArray::with_max_entries(1, 0);

/// The current task's user memory.
struct UserMemory;

impl ReadMem for UserMemory {
    #[inline(always)]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
    }

    #[inline(always)]
    fn read_frame(&self, addr: u64, out: &mut [u64; FRAME_WORDS]) -> bool {
        // SAFETY: `out` as bytes.
        let bytes = unsafe {
            core::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size_of_val(out))
        };
        unsafe { bpf_probe_read_user_buf(addr as *const u8, bytes) }.is_ok()
    }
}

/// This CPU's scratch space; programs do not nest on a CPU.
#[inline(always)]
fn scratch() -> Option<&'static mut PyScratch> {
    // SAFETY: a per-CPU value only the running program touches.
    PY_SCRATCH.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// If the current thread's process runs CPython, walks its Python frames
/// and emits them stamped `now`. Returns the thread's [`position`] at the
/// walk (0 when it runs no Python), for [`moved`] to compare later; None
/// when the frames could not be emitted (the ring buffer was full): the
/// caller then drops the native stack it would have paired them with, so
/// no stack goes out with Python frames missing or taken from another
/// walk.
#[inline(always)]
pub(crate) fn record(cache: &mut PyThreadCache, tid: u32, tgid: u32, now: u64) -> Option<u64> {
    if !python_enabled() {
        return Some(0);
    }
    let Some(info) = (unsafe { PY_PROCS.get(&tgid) }) else {
        return Some(0);
    };
    let Some(s) = scratch() else {
        return Some(0);
    };
    s.info = *info;
    let flags = walk_thread(s, cache, tid, now);
    let len = s.rec.len();
    s.rec.head = PyStackEvent {
        hdr: EventHeader {
            ts_ns: now,
            kind: kind::PY_STACK,
            cpu: unsafe { bpf_get_smp_processor_id() } as u16,
            len: len as u32,
        },
        tid,
        tgid,
        flags,
        frames: s.rec.head.frames,
        _pad: 0,
    };
    // SAFETY: the record's first `len` bytes (len() is at most its size).
    let bytes = unsafe { core::slice::from_raw_parts((&raw const s.rec).cast::<u8>(), len) };
    match events_shard().output::<[u8]>(bytes, BPF_RB_NO_WAKEUP) {
        Ok(()) => Some(s.position),
        Err(_) => {
            count_lost(u32::from(kind::PY_STACK));
            None
        }
    }
}

/// The thread's state from its cache, checked, or from the thread list
/// (for a thread without one: at most once per PY_RETRY_NS while the list
/// stays as it was); then its walk into `s.rec`. Returns the record's
/// flags.
#[inline(always)]
fn walk_thread(s: &mut PyScratch, cache: &mut PyThreadCache, tid: u32, now: u64) -> u16 {
    s.rec.head.frames = 0;
    s.position = 0;
    let key = if s.info.flags & info_flags::MATCH_FSBASE != 0 {
        fsbase()
    } else {
        u64::from(tid)
    };
    if key == 0 {
        return PY_NO_THREAD;
    }
    let mem = UserMemory;
    let mut tstate = cache.tstate;
    if tstate != 0 && !owns(&mem, &s.info, tstate, key) {
        tstate = 0;
        cache.tstate = 0;
    }
    if tstate == 0 {
        let Some(mark) = list_mark(&mem, &s.info) else {
            return PY_NO_THREAD;
        };
        if cache.missed_ns != 0
            && cache.missed_mark == mark
            && now.saturating_sub(cache.missed_ns) < PY_RETRY_NS
        {
            return PY_NO_THREAD;
        }
        let Some(find) = FindState::start(&mem, &s.info, key) else {
            return PY_NO_THREAD;
        };
        s.find = find;
        run(MAX_THREAD_NODES, find_callback);
        // Looked up again: the callbacks wrote through their own pointer.
        let Some(s) = scratch() else {
            return PY_NO_THREAD;
        };
        tstate = s.find.found;
        if tstate == 0 {
            cache.missed_ns = now;
            cache.missed_mark = mark;
            return PY_NO_THREAD;
        }
        cache.tstate = tstate;
    }
    let Some(s) = scratch() else {
        return PY_NO_THREAD;
    };
    s.position = position(&mem, &s.info, tstate, &mut s.frame);
    s.walk = WalkState::start(&mem, &s.info, tstate);
    run(MAX_PY_STEPS, walk_callback);
    let Some(s) = scratch() else {
        return PY_NO_THREAD;
    };
    s.rec.head.frames = s.walk.frames as u16;
    s.walk.finish()
}

/// Calls `callback` up to `times` times, until it returns 1.
#[inline(always)]
fn run(times: usize, callback: extern "C" fn(u64, *mut c_void) -> i64) {
    // The callbacks keep their state in PY_SCRATCH; bpf_loop still wants a
    // context pointer.
    let mut unused = 0u64;
    // SAFETY: a static callback and a pointer to this stack, as bpf_loop
    // wants them.
    unsafe {
        bpf_loop(
            times as u32,
            callback as *mut c_void,
            (&raw mut unused).cast(),
            0,
        )
    };
}

#[inline(never)]
extern "C" fn find_callback(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(s) = scratch() else {
        return 1;
    };
    if find_step(&UserMemory, &s.info, &mut s.find) {
        0
    } else {
        1
    }
}

#[inline(never)]
extern "C" fn walk_callback(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(s) = scratch() else {
        return 1;
    };
    if walk_step(
        &UserMemory,
        &s.info,
        &mut s.walk,
        &mut s.frame,
        &mut s.rec.frames,
    ) {
        0
    } else {
        1
    }
}

/// Whether the current thread's Python code may have moved since the walk
/// that found it at `walked` (a [`position`]), which then may not be
/// reused. A thread whose Python thread state is known moved when its
/// position did. One without: when it was
/// never looked up (its last walk may predate userspace finding the
/// interpreter) or its process's thread list gained a thread since it
/// missed ([`list_mark`]); else it is no Python thread (a pool thread) and
/// its walks are reused on the native stacks' terms alone. Without the
/// first two, a main thread whose native registers in `queue.get()` were
/// those of an earlier wait in `Thread.start()` (Python calls do not grow
/// the C stack in 3.11+) kept that early walk's empty Python frames for its
/// whole wait.
#[inline(always)]
pub(crate) fn moved(cache: &PyThreadCache, tgid: u32, walked: u64) -> bool {
    if !python_enabled() {
        return false;
    }
    let Some(info) = (unsafe { PY_PROCS.get(&tgid) }) else {
        return false;
    };
    if cache.tstate == 0 {
        // The volatile load keeps LLVM from comparing a None's payload (a
        // register no path set, there) and selecting the result after,
        // which the verifier refuses where the reuse decision inlines this.
        return cache.missed_ns == 0
            || match list_mark(&UserMemory, info) {
                Some(mark) => mark != unsafe { core::ptr::read_volatile(&cache.missed_mark) },
                None => true,
            };
    }
    let Some(s) = scratch() else {
        return false;
    };
    position(&UserMemory, info, cache.tstate, &mut s.frame) != walked
}

/// The current thread's fsbase (its `pthread_self()` on x86-64), 0 when
/// the kernel's BTF did not give its offset.
#[inline(always)]
fn fsbase() -> u64 {
    let off = offsets().task_fsbase;
    if off == 0 {
        return 0;
    }
    let task = unsafe { bpf_get_current_task() };
    unsafe { bpf_probe_read_kernel((task + u64::from(off)) as *const u64) }.unwrap_or(0)
}

/// A new process forked from `parent`: the same address space, so the same
/// interpreter layout until it execs.
#[inline(always)]
pub(crate) fn inherit(parent: u32, child: u32) {
    if let Some(info) = unsafe { PY_PROCS.get(&parent) } {
        let info = *info;
        let _ = PY_PROCS.insert(&child, &info, 0);
    }
}

/// A process exec'd (its interpreter is gone, userspace looks again) or
/// exited.
#[inline(always)]
pub(crate) fn forget(tgid: u32) {
    let _ = PY_PROCS.remove(&tgid);
}

//! Python frames: the ABI between the kernel's walk of a CPython thread's
//! frame chain and capture, and the walk itself, written once for both
//! sides. The kernel runs [`walk`] over `bpf_probe_read_user` at every
//! on-CPU sample and every walked switch-out; capture's tests run the same
//! code over `process_vm_readv` against live interpreters, so the offsets
//! and the walk are checked on every installed CPython without a kernel.
//!
//! CPython keeps its frames in its own chain, not on the C stack: each
//! thread's `PyThreadState` points at its innermost frame, each frame at
//! its caller. The kernel records, per frame, the code object's address,
//! the instruction index and a fingerprint of the code object; capture
//! names the code objects (qualname, file, line) while the process lives.
//!
//! The thread state is found through the interpreter's thread list, by
//! `native_thread_id` (3.11+) or by `thread_id` = `pthread_self()` = the
//! thread's fsbase (3.10), and cached per thread. The current-thread
//! variable (`_Py_tss_tstate`) is NULL whenever the thread released the
//! GIL, which is most of the off-CPU view.
//!
//! What is here: `PyProcInfo` (where one process's interpreter keeps its
//! threads and frames: `PY_PROCS`' value), the `PyStackEvent` record with its
//! `PyFrame`s, `PyThreadCache` (part of `ThreadState`), and the walk over a
//! `ReadMem` trait, in steps (`find_step` over the thread lists, `walk_step`
//! over the frame chain, `position` for the reuse check): the kernel
//! implements `ReadMem` with `bpf_probe_read_user` and drives the steps with
//! `bpf_loop`, the tests with `process_vm_readv` and plain loops, so the walk
//! the kernel runs is the one tested against live interpreters.

use crate::{AbiEvent, EventHeader, kind};

/// Most Python frames kept per stack (the leaf side; a deeper stack is
/// marked [`PY_TRUNCATED`]). A power of two, so a masked index is always
/// in bounds.
pub const MAX_PY_FRAMES: usize = 128;
/// Frames the walk may step through, Python frames and the interpreter's
/// entry shims together.
pub const MAX_PY_STEPS: usize = 192;
/// Thread-list nodes (and interpreters) looked at to find a thread's state.
pub const MAX_THREAD_NODES: usize = 256;
/// Words of a frame read in one go: every field the walk needs lies within
/// its first 112 bytes in every supported version (3.10's `f_lasti` at 96
/// is the furthest); 128 are read, so a masked index never leaves them.
pub const FRAME_WORDS: usize = 16;
/// A thread with no Python thread state is looked up again at most this
/// often while its process's thread list stays as it was (PyTorch's pool
/// threads have none, and a miss walks the list); at once when the list
/// gains a thread ([`list_mark`]).
pub const PY_RETRY_NS: u64 = 100_000_000;

/// [`PyProcInfo::layout`]: where a thread's innermost frame is and what
/// a frame looks like.
pub mod layout {
    /// 3.10: `tstate->frame`, a `PyFrameObject`; one C-level evaluation
    /// per frame; `f_lasti` an int of code units.
    pub const FRAME_OBJECT: u16 = 1;
    /// 3.11, 3.12: `tstate->cframe->current_frame`, an
    /// `_PyInterpreterFrame`; `prev_instr` a pointer into the bytecode.
    pub const CFRAME: u16 = 2;
    /// 3.13+: `tstate->current_frame`; `instr_ptr` into the bytecode.
    pub const CURRENT_FRAME: u16 = 3;
}

/// [`PyProcInfo::flags`].
pub mod info_flags {
    /// Match the thread list on `thread_id` against the thread's fsbase
    /// (3.10, which has no `native_thread_id`).
    pub const MATCH_FSBASE: u16 = 1;
    /// `fr_owner` is 3.11's `is_entry`: the frame began a C-level
    /// evaluation.
    pub const ENTRY_FLAG: u16 = 2;
    /// `fr_owner` is the frame's owner (3.12+): [`super::OWNER_SHIM`] and
    /// above are the interpreter's shims, not Python frames.
    pub const OWNER: u16 = 4;
}

/// The first frame owner that is not a Python function (3.12, 3.13:
/// `FRAME_OWNED_BY_CSTACK`, the entry shim each `_PyEval_EvalFrameDefault`
/// pushes; 3.14: `FRAME_OWNED_BY_INTERPRETER`, its successor, with
/// `FRAME_OWNED_BY_CSTACK` = 4 above it).
pub const OWNER_SHIM: u8 = 3;

/// Where one process's interpreter keeps its threads and frames: the
/// address of `_PyRuntime` and byte offsets, from `_Py_DebugOffsets`
/// (3.13+) or a checked table (3.10–3.12). Userspace fills `PY_PROCS`
/// with one per Python process it finds. 48 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyProcInfo {
    /// `&_PyRuntime` in the process.
    pub runtime: u64,
    /// Applied to a frame's code pointer: 3.14's `_PyStackRef` tags its
    /// low bits.
    pub code_mask: u64,
    /// (major << 8) | minor, for the record.
    pub version: u16,
    /// One of [`layout`].
    pub layout: u16,
    /// [`info_flags`].
    pub flags: u16,
    /// `_PyRuntime.interpreters.head`.
    pub interp_head: u16,
    /// `PyInterpreterState.next`.
    pub interp_next: u16,
    /// `PyInterpreterState.threads.head` (3.10: `tstate_head`).
    pub threads_head: u16,
    /// `PyThreadState.next`.
    pub ts_next: u16,
    /// `native_thread_id` (3.11+) or `thread_id` (3.10).
    pub ts_match: u16,
    /// `frame` (3.10), `cframe` (3.11, 3.12) or `current_frame` (3.13+).
    pub ts_frame: u16,
    /// `_PyCFrame.current_frame` (3.11, 3.12).
    pub cframe_current: u16,
    /// The frame's code object (`f_code`, `f_executable`).
    pub fr_code: u16,
    /// The calling frame (`f_back`, `previous`).
    pub fr_back: u16,
    /// `f_lasti` (3.10), `prev_instr` (3.11, 3.12), `instr_ptr` (3.13+).
    pub fr_instr: u16,
    /// `is_entry` (3.11) or `owner` (3.12+); see [`info_flags`].
    pub fr_owner: u16,
    /// `co_code_adaptive`, the bytecode the instruction pointer points into.
    pub co_adaptive: u16,
    /// The code object's 8 bytes folded into [`PyFrame::fingerprint`]: the
    /// word ending in `co_firstlineno`, which never changes after creation.
    pub co_fingerprint: u16,
}
const _: () = assert!(size_of::<PyProcInfo>() == 48);
// SAFETY: a repr(C) struct of integers with no hidden padding (the
// derived bytemuck::Pod checks it): every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for PyProcInfo {}

/// [`PyFrame::code`]'s low bit: this frame is the outermost of its C-level
/// evaluation (the next frame out runs in another `_PyEval_EvalFrameDefault`
/// call). Code objects are at least 8-byte aligned.
pub const PY_BOUNDARY: u64 = 1;

/// One Python frame as the kernel saw it. 16 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyFrame {
    /// The code object's address, with [`PY_BOUNDARY`] in bit 0.
    pub code: u64,
    /// The instruction being executed, in code units from the start of the
    /// bytecode; negative before the first one.
    pub lasti: i32,
    /// [`fingerprint`] of the code object, so a freed and reused address
    /// is never named after the code object it held before.
    pub fingerprint: u32,
}
const _: () = assert!(size_of::<PyFrame>() == 16);

impl PyFrame {
    pub fn code_object(&self) -> u64 {
        self.code & !PY_BOUNDARY
    }

    pub fn is_boundary(&self) -> bool {
        self.code & PY_BOUNDARY != 0
    }
}

/// [`PyStackEvent::flags`].
/// More frames than [`MAX_PY_FRAMES`]: the outermost were left out.
pub const PY_TRUNCATED: u16 = 1;
/// A read failed (memory unmapped, paged out, or the chain changed under
/// the walk): the frames before it were kept.
pub const PY_FAULT: u16 = 2;
/// The thread has no Python thread state (a native thread of a Python
/// process, or one that has not started Python yet).
pub const PY_NO_THREAD: u16 = 4;

/// The Python frames of one on-CPU sample or walked switch-out, emitted
/// just before its [`crate::SampleEvent`] or [`crate::SwitchEvent`] by the
/// same program, with the same timestamp and tid: capture pairs them, and
/// splices the frames into that event's user stack. Never stored in a
/// recording. `hdr.len` is 32 + 16 × `frames`; the frames follow, leaf
/// first. 32 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyStackEvent {
    pub hdr: EventHeader,
    pub tid: u32,
    pub tgid: u32,
    /// [`PY_TRUNCATED`], [`PY_FAULT`], [`PY_NO_THREAD`].
    pub flags: u16,
    /// How many [`PyFrame`]s follow.
    pub frames: u16,
    pub _pad: u32,
}
const _: () = assert!(size_of::<PyStackEvent>() == 32);
impl AbiEvent for PyStackEvent {
    const KIND: u16 = kind::PY_STACK;
}

/// The kernel's scratch record (a per-CPU map value: far beyond the BPF
/// stack), of which the first `32 + 16 × frames` bytes are emitted.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PyStackRecord {
    pub head: PyStackEvent,
    pub frames: [PyFrame; MAX_PY_FRAMES],
}
const _: () = assert!(size_of::<PyStackRecord>() == 32 + 16 * MAX_PY_FRAMES);

impl PyStackRecord {
    /// Bytes to emit: the header and the frames filled in.
    pub fn len(&self) -> usize {
        let frames = (self.head.frames as usize).min(MAX_PY_FRAMES);
        size_of::<PyStackEvent>() + frames * size_of::<PyFrame>()
    }

    pub fn is_empty(&self) -> bool {
        self.head.frames == 0
    }
}

/// A thread's cached Python thread state, part of its `ThreadState`.
/// 24 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyThreadCache {
    /// Its `PyThreadState` (checked at each use), 0 when not known.
    pub tstate: u64,
    /// When the thread list last had no state for it: not looked up again
    /// before [`PY_RETRY_NS`] later unless the list changed since.
    pub missed_ns: u64,
    /// The list's [`list_mark`] at that miss.
    pub missed_mark: u64,
}
const _: () = assert!(size_of::<PyThreadCache>() == 24);

/// Reads the walked process's memory: `bpf_probe_read_user` in the kernel,
/// `process_vm_readv` in capture's tests.
pub trait ReadMem {
    fn read_u64(&self, addr: u64) -> Option<u64>;
    /// Fills `out` with the [`FRAME_WORDS`] words at `addr`; false when
    /// any of them cannot be read.
    fn read_frame(&self, addr: u64, out: &mut [u64; FRAME_WORDS]) -> bool;
}

/// The word of a frame buffer holding byte offset `off` (8-aligned).
#[inline(always)]
fn word(buf: &[u64; FRAME_WORDS], off: u16) -> u64 {
    buf[(off as usize >> 3) & (FRAME_WORDS - 1)]
}

/// The byte at offset `off` of a frame buffer (little-endian).
#[inline(always)]
fn byte(buf: &[u64; FRAME_WORDS], off: u16) -> u8 {
    (word(buf, off) >> ((u64::from(off) & 7) * 8)) as u8
}

/// Folds a code object's fingerprint word into 32 bits.
#[inline(always)]
pub fn fingerprint(word: u64) -> u32 {
    let mixed = word.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 32) as u32 ^ (mixed as u32)
}

/// Whether `tstate` is still the state of the thread known by `key`
/// (its tid, or its fsbase for 3.10).
#[inline(always)]
pub fn owns<M: ReadMem>(mem: &M, info: &PyProcInfo, tstate: u64, key: u64) -> bool {
    tstate != 0 && mem.read_u64(tstate + u64::from(info.ts_match)) == Some(key)
}

/// Frames [`position`] folds in.
pub const POSITION_FRAMES: usize = 3;

/// Where a thread's Python code is: its innermost frames and their
/// instructions, folded into one word (0 when they cannot be read). Two
/// waits from different Python code differ here even when their native
/// stacks are the same (both in the interpreter's lock code, say). Several
/// frames, not one: 3.10 reuses a code object's frame object from call to
/// call, so the same function waiting for two callers has one address.
/// `buf` is scratch space.
#[inline(always)]
pub fn position<M: ReadMem>(
    mem: &M,
    info: &PyProcInfo,
    tstate: u64,
    buf: &mut [u64; FRAME_WORDS],
) -> u64 {
    let Some(mut frame) = mem.read_u64(tstate + u64::from(info.ts_frame)) else {
        return 0;
    };
    if info.layout == layout::CFRAME && frame != 0 {
        frame = mem
            .read_u64(frame + u64::from(info.cframe_current))
            .unwrap_or(0);
    }
    let mut folded = 0u64;
    for _ in 0..POSITION_FRAMES {
        if frame == 0 || !mem.read_frame(frame, buf) {
            break;
        }
        folded = (folded ^ frame ^ word(buf, info.fr_instr).rotate_left(32))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        frame = word(buf, info.fr_back);
    }
    folded
}

/// What changes when a thread state joins the first interpreter's list,
/// or when the newest one takes its thread's identity: its head (CPython
/// puts a new thread state first) folded with the head's match key, 0
/// while there is no interpreter or no thread yet. A thread that missed
/// is looked up again as soon as this moves, so one whose miss came while
/// the interpreter was starting (userspace hands the kernel a process as
/// soon as its libpython is mapped), before its own state was linked, or
/// in a forked child before CPython gave the surviving state the child's
/// tid (3.11+ match on the native tid, and a DataLoader worker forked from
/// a trainer whose only Python thread heads the list keeps that head) is
/// not left without Python frames for [`PY_RETRY_NS`]. None when a read
/// fails.
#[inline(always)]
pub fn list_mark<M: ReadMem>(mem: &M, info: &PyProcInfo) -> Option<u64> {
    let interp = mem.read_u64(info.runtime + u64::from(info.interp_head))?;
    if interp == 0 {
        return Some(0);
    }
    let head = mem.read_u64(interp + u64::from(info.threads_head))?;
    if head == 0 {
        return Some(0);
    }
    let key = mem.read_u64(head + u64::from(info.ts_match))?;
    Some(head ^ key.rotate_left(32))
}

/// Where a search of the thread lists is. The search runs one
/// [`find_step`] at a time: a plain loop here, `bpf_loop` in the kernel
/// (whose verifier would otherwise walk every iteration of every path).
#[derive(Clone, Copy, Debug, Default)]
pub struct FindState {
    /// The thread to find: its tid, or its fsbase for 3.10.
    pub key: u64,
    /// The next interpreter whose list to search.
    pub interp: u64,
    /// The next thread state to look at; 0 between lists.
    pub tstate: u64,
    /// The thread's state once found.
    pub found: u64,
}

impl FindState {
    /// A search from the first interpreter; None when it cannot be read.
    #[inline(always)]
    pub fn start<M: ReadMem>(mem: &M, info: &PyProcInfo, key: u64) -> Option<FindState> {
        Some(FindState {
            key,
            interp: mem.read_u64(info.runtime + u64::from(info.interp_head))?,
            tstate: 0,
            found: 0,
        })
    }
}

/// One node of the search: true to go on.
#[inline(always)]
pub fn find_step<M: ReadMem>(mem: &M, info: &PyProcInfo, st: &mut FindState) -> bool {
    if st.tstate == 0 {
        // This interpreter's list is done: the next one's.
        if st.interp == 0 {
            return false;
        }
        let interp = st.interp;
        let (Some(head), Some(next)) = (
            mem.read_u64(interp + u64::from(info.threads_head)),
            mem.read_u64(interp + u64::from(info.interp_next)),
        ) else {
            return false;
        };
        st.tstate = head;
        st.interp = next;
        return true;
    }
    let tstate = st.tstate;
    match mem.read_u64(tstate + u64::from(info.ts_match)) {
        Some(key) if key == st.key => {
            st.found = tstate;
            false
        }
        Some(_) => match mem.read_u64(tstate + u64::from(info.ts_next)) {
            Some(next) => {
                st.tstate = next;
                true
            }
            None => false,
        },
        None => false,
    }
}

/// The thread state of the thread known by `key`, from every
/// interpreter's thread list; None when no list holds it (or a read
/// failed).
pub fn find_thread_state<M: ReadMem>(mem: &M, info: &PyProcInfo, key: u64) -> Option<u64> {
    let mut st = FindState::start(mem, info, key)?;
    for _ in 0..MAX_THREAD_NODES {
        if !find_step(mem, info, &mut st) {
            break;
        }
    }
    (st.found != 0).then_some(st.found)
}

/// Where a walk of a frame chain is: one [`walk_step`] at a time.
#[derive(Clone, Copy, Debug, Default)]
pub struct WalkState {
    /// The next frame to read; 0 at the end of the chain.
    pub frame: u64,
    /// Frames recorded so far.
    pub frames: u32,
    /// [`PyStackEvent::flags`] so far.
    pub flags: u16,
    pub _pad: u16,
}

impl WalkState {
    /// A walk from the innermost frame of `tstate`.
    #[inline(always)]
    pub fn start<M: ReadMem>(mem: &M, info: &PyProcInfo, tstate: u64) -> WalkState {
        let mut st = WalkState::default();
        let frame = mem.read_u64(tstate + u64::from(info.ts_frame));
        let frame = match frame {
            Some(cframe) if info.layout == layout::CFRAME && cframe != 0 => {
                mem.read_u64(cframe + u64::from(info.cframe_current))
            }
            other => other,
        };
        match frame {
            Some(frame) => st.frame = frame,
            None => st.flags = PY_FAULT,
        }
        st
    }

    /// The flags once the steps stopped: a chain that goes on past the
    /// last step was cut short.
    pub fn finish(&self) -> u16 {
        if self.frame != 0 && self.flags & PY_FAULT == 0 {
            self.flags | PY_TRUNCATED
        } else {
            self.flags
        }
    }
}

/// Reads one frame of the chain (into `buf`, scratch space) and records
/// it in `out`: true to go on.
#[inline(always)]
pub fn walk_step<M: ReadMem>(
    mem: &M,
    info: &PyProcInfo,
    st: &mut WalkState,
    buf: &mut [u64; FRAME_WORDS],
    out: &mut [PyFrame; MAX_PY_FRAMES],
) -> bool {
    let frame = st.frame;
    if frame == 0 || st.flags & PY_FAULT != 0 || st.frames as usize >= MAX_PY_FRAMES {
        return false;
    }
    if !mem.read_frame(frame, buf) {
        st.flags |= PY_FAULT;
        return false;
    }
    let buf = &*buf;
    let back = word(buf, info.fr_back);
    let n = st.frames as usize;
    if info.flags & info_flags::OWNER != 0 {
        let owner = byte(buf, info.fr_owner);
        if owner >= OWNER_SHIM {
            // An entry shim: the frames leafward of it ran in a later
            // C-level evaluation than those rootward.
            if owner == OWNER_SHIM && n > 0 {
                out[(n - 1) & (MAX_PY_FRAMES - 1)].code |= PY_BOUNDARY;
            }
            st.frame = back;
            return true;
        }
    }
    let code = word(buf, info.fr_code) & info.code_mask & !PY_BOUNDARY;
    if code == 0 {
        st.flags |= PY_FAULT;
        return false;
    }
    let Some(fp_word) = mem.read_u64(code + u64::from(info.co_fingerprint)) else {
        st.flags |= PY_FAULT;
        return false;
    };
    let instr = word(buf, info.fr_instr);
    let (lasti, boundary) = if info.layout == layout::FRAME_OBJECT {
        // One C-level evaluation per frame.
        (instr as u32 as i32, true)
    } else {
        let base = code + u64::from(info.co_adaptive);
        let units = (instr as i64).wrapping_sub(base as i64) / 2;
        let lasti = if units < -1 || units > i64::from(i32::MAX) {
            -1
        } else {
            units as i32
        };
        let entry = info.flags & info_flags::ENTRY_FLAG != 0 && byte(buf, info.fr_owner) != 0;
        (lasti, entry)
    };
    out[n & (MAX_PY_FRAMES - 1)] = PyFrame {
        code: code | if boundary { PY_BOUNDARY } else { 0 },
        lasti,
        fingerprint: fingerprint(fp_word),
    };
    st.frames += 1;
    st.frame = back;
    true
}

/// Walks the frame chain of `tstate` into `out`, leaf first, and returns
/// its [`PyStackEvent::flags`], setting `out.head.frames`.
pub fn walk<M: ReadMem>(mem: &M, info: &PyProcInfo, tstate: u64, out: &mut PyStackRecord) -> u16 {
    let mut st = WalkState::start(mem, info, tstate);
    let mut buf = [0u64; FRAME_WORDS];
    for _ in 0..MAX_PY_STEPS {
        if !walk_step(mem, info, &mut st, &mut buf, &mut out.frames) {
            break;
        }
    }
    out.head.frames = st.frames as u16;
    st.finish()
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::collections::BTreeMap;

    use super::*;

    /// Memory of 8-byte words; anything else faults.
    #[derive(Default)]
    struct Words(BTreeMap<u64, u64>);

    impl ReadMem for Words {
        fn read_u64(&self, addr: u64) -> Option<u64> {
            self.0.get(&addr).copied()
        }

        fn read_frame(&self, addr: u64, out: &mut [u64; FRAME_WORDS]) -> bool {
            for (i, w) in out.iter_mut().enumerate() {
                match self.0.get(&(addr + 8 * i as u64)) {
                    Some(v) => *w = *v,
                    None => return false,
                }
            }
            true
        }
    }

    /// A 3.12-like layout: `current_frame` straight in the thread state,
    /// code at 0, previous at 8, instruction at 56, owner at 70.
    fn info() -> PyProcInfo {
        PyProcInfo {
            runtime: 0x1000,
            code_mask: !0,
            layout: layout::CURRENT_FRAME,
            flags: info_flags::OWNER,
            interp_head: 0,
            threads_head: 16,
            ts_next: 8,
            ts_match: 24,
            ts_frame: 32,
            fr_code: 0,
            fr_back: 8,
            fr_instr: 56,
            fr_owner: 70,
            co_adaptive: 64,
            co_fingerprint: 8,
            ..PyProcInfo::default()
        }
    }

    /// Frame `i` at 0x10000 + 0x100 i, calling frame i+1; `owners` says
    /// each frame's owner byte; code objects at 0x90000 + 0x100 i.
    fn chain(mem: &mut Words, owners: &[u8]) {
        for (i, &owner) in owners.iter().enumerate() {
            let frame = 0x10000 + 0x100 * i as u64;
            let code = 0x90000 + 0x100 * i as u64;
            let back = if i + 1 < owners.len() {
                frame + 0x100
            } else {
                0
            };
            for w in 0..FRAME_WORDS as u64 {
                mem.0.insert(frame + 8 * w, 0);
            }
            mem.0.insert(frame, code);
            mem.0.insert(frame + 8, back);
            // Instruction 5: code + co_adaptive + 10 bytes.
            mem.0.insert(frame + 56, code + 64 + 10);
            mem.0.insert(frame + 64, u64::from(owner) << 48);
            mem.0.insert(code + 8, 1000 + i as u64);
        }
    }

    /// One interpreter whose list holds threads 7 (state at 0x2000) and 9
    /// (0x3000), thread 9 at frame 0x10000.
    fn threads(mem: &mut Words) {
        mem.0.insert(0x1000, 0x5000); // interpreters.head
        mem.0.insert(0x5000 + 16, 0x2000); // threads.head
        mem.0.insert(0x5000, 0); // no next interpreter
        mem.0.insert(0x2000 + 8, 0x3000);
        mem.0.insert(0x2000 + 24, 7);
        mem.0.insert(0x3000 + 8, 0);
        mem.0.insert(0x3000 + 24, 9);
        mem.0.insert(0x3000 + 32, 0x10000);
    }

    fn walked(mem: &Words) -> (u16, std::vec::Vec<PyFrame>) {
        let mut rec = std::boxed::Box::new(PyStackRecord {
            head: PyStackEvent::default(),
            frames: [PyFrame::default(); MAX_PY_FRAMES],
        });
        let tstate = find_thread_state(mem, &info(), 9).expect("thread 9 listed");
        let flags = walk(mem, &info(), tstate, &mut rec);
        (flags, rec.frames[..rec.head.frames as usize].to_vec())
    }

    #[test]
    fn finds_threads_and_marks_evaluation_boundaries() {
        let mut mem = Words::default();
        threads(&mut mem);
        assert_eq!(find_thread_state(&mem, &info(), 8), None);
        // leaf, shim, mid, root, shim.
        chain(&mut mem, &[0, 3, 0, 0, 3]);
        let (flags, frames) = walked(&mem);
        assert_eq!(flags, 0);
        let codes: std::vec::Vec<(u64, bool, i32)> = frames
            .iter()
            .map(|f| (f.code_object(), f.is_boundary(), f.lasti))
            .collect();
        assert_eq!(
            codes,
            [(0x90000, true, 5), (0x90200, false, 5), (0x90300, true, 5)]
        );
        assert_eq!(frames[0].fingerprint, fingerprint(1000));
    }

    #[test]
    fn a_fault_keeps_the_frames_before_it() {
        let mut mem = Words::default();
        threads(&mut mem);
        chain(&mut mem, &[0, 0, 0]);
        // The third frame's code object is unmapped.
        mem.0.remove(&(0x90200 + 8));
        let (flags, frames) = walked(&mem);
        assert_eq!(flags, PY_FAULT);
        assert_eq!(frames.len(), 2);
    }

    #[test]
    fn a_cycle_or_a_deep_chain_is_cut_short() {
        let mut mem = Words::default();
        threads(&mut mem);
        chain(&mut mem, &[0]);
        // The frame calls itself, forever.
        mem.0.insert(0x10000 + 8, 0x10000);
        let (flags, frames) = walked(&mem);
        assert_eq!(flags, PY_TRUNCATED);
        assert_eq!(frames.len(), MAX_PY_FRAMES);
    }
}

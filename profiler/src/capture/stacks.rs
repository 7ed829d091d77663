//! Turns the stacks each drained event refers to into the recording's own.
//! User stacks come as copies ([`StackCopyEvent`]: registers and stack
//! bytes, unwound here with each file's CFI, [`Unwinder`]) or, on kernels
//! without BTF, as frame-pointer walks in the kernel's stack map; kernel
//! stacks always come from the stack map. Each new stack is read or unwound
//! once, its frames named ([`Namer`]), and frames and stacks are interned
//! and handed on (FRAMES, then STACK_DEFS) to go before the events that use
//! them. The resolve stage ([`super::resolve`]) drives it, one drain at a
//! time.
//! The events keep their bytes but for their stack fields, which now index
//! the recording's STACK_DEFS, and the copies are dropped: raw stack bytes
//! never reach the file, which needs nothing from this machine.
//! The Python frames the kernel walked for an event arrive as a record
//! just before it: [`PythonFrames`] pairs them, names them and splices them
//! into the event's user stack; the record itself is not written either.
//!
//! A copy is unwound when it arrives and filed under its thread and slot for
//! the events that refer to it (`copy_ref`); a reference the stage cannot
//! match (the copy lost, or drained after the event) is a lost stack,
//! counted, never another copy's. Where the session is not told of new
//! mappings by the kernel (it polls them), an address in no known mapping
//! re-reads the process's mappings (at most every `REREAD_EVERY`, 20 ms:
//! `import torch` maps libraries faster than the once-a-second refresh)
//! and unwinds again; where it is told, the maps are read before the
//! events that follow the change, and the addresses that miss are walks
//! gone astray (one-frame stacks cut at a leaf whose caller is not code,
//! 33 in a 15 s recording of the real job), which re-reading never found.
//! A stack that stops short of its thread's root ends under a
//! `[truncated]` frame, so flamegraphs group partial stacks apart rather
//! than root them wrongly; a file frame without a symbol (stripped wheels)
//! is named by its function's start from the file's CFI
//! (`libgomp.so.1+0x1de40`), so one function's samples add up. What became
//! of the unwinds ([`StackCounts`]: truncated, short, cut, unmatched) goes
//! into the LOST record.

use std::{
    rc::Rc,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

// The resolve stage looks these up for every switch-out and sample: SipHash's
// resistance to chosen keys buys nothing against the kernel's ids.
use foldhash::{HashMap, HashMapExt as _};
use profiler_ebpf::{
    CopySection, EventHeader, ExitEvent, NO_STACK_KIND, PREEMPT_SLOT, SAMPLE_SLOT,
    SITE_CHECK_FRAMES, SITE_CHECK_SPAN, STACK_SLOTS, SampleEvent, SiteCheck, StackCopyEvent,
    SwitchEvent, UserRegs as AbiRegs, copy_ref_parts, kind, section, stack_mode, user_stack_flags,
};
use tprof_core::recording::{
    FrameBatch, LostCounts, StackBatch,
    stacks::markers::{NO_MAPPINGS, TRUNCATED},
};

use super::clock::thread_cpu_ns;
use super::procfs::{self, Mapping};
use super::programs::StackSource;
use super::python::Interpreter;
use super::python::frames::{PyStack, PythonFrames};
use super::symbols::{AddressSpaces, Namer, Site, return_site, user_site};
use super::unwind::{End, Unwinder, Unwound, UserRegs};

/// A recording stack id: an index into its STACK_DEFS, or -1 for none.
type StackId = i32;

/// What became of the user stacks the resolve stage unwound, for the LOST
/// record (the session reads it while the stage updates it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct StackCounts {
    /// Stack ids the stack map no longer held when read.
    pub unreadable: u64,
    /// Unwinds that ran past a full copy (deeper than `--stack-size`) or
    /// past [`super::unwind::MAX_DEPTH`] frames.
    pub truncated: u64,
    /// Unwinds that ran past a copy cut short by an unreadable page.
    pub short: u64,
    /// Unwinds cut at something that was not a frame.
    pub cut: u64,
    /// Copies with registers but not a byte of stack.
    pub copy_failed: u64,
    /// Events referring to a copy the stage never got (it came after the
    /// event, or not at all).
    pub unmatched: u64,
    /// CPU time the resolve stage spent unwinding and interning the
    /// events' stacks, in nanoseconds (`TPROF_STACK_COPY_STATS` prints it
    /// per copy: the benches' measure of the stage's cost that does not
    /// depend on how fast the job ran).
    pub resolve_cpu_ns: u64,
    /// CPU time it spent naming new frames (symbols, lines), nanoseconds:
    /// most of it when a large library is first seen.
    pub naming_cpu_ns: u64,
    /// Unwinds that finished with their thread's last walk.
    pub finished_with_last: u64,
}

impl StackCounts {
    /// Adds these counts to the kernel's.
    pub(super) fn add_to(&self, lost: &mut LostCounts) {
        lost.stack_failed += self.unreadable;
        lost.stack_truncated += self.truncated;
        lost.stack_copy_short += self.short;
        lost.stack_cut += self.cut;
        lost.stack_copy_failed += self.copy_failed;
        lost.stack_copy_lost += self.unmatched;
    }
}

/// Everything needed to turn the events' stacks into the recording's.
pub(super) struct StackResolver {
    source: StackSource,
    /// How the kernel takes user stacks ([`stack_mode`]).
    mode: u32,
    namer: Namer,
    spaces: AddressSpaces,
    unwinder: Unwinder,
    frames: Interner,
    /// Per process, the frame id of each user address an unwind found:
    /// most addresses recur in every copy, and looking one up here skips
    /// finding its mapping and hashing its site (a path) to intern it.
    memos: HashMap<u32, FrameMemo>,
    /// Frame ids (outermost first) → stack id.
    stacks: HashMap<Vec<u32>, u32>,
    /// Stacks interned since the last dictionary write, in id order.
    new_stacks: Vec<Vec<u32>>,
    /// Frame-pointer mode: (tgid, kernel user-stack id) → recording stack
    /// id. Keyed by process too: the kernel shares one id between
    /// processes whose addresses are equal, which name different code when
    /// their mappings differ.
    user: HashMap<(u32, i32), StackId>,
    /// Copy mode: per thread, each slot's last copy, unwound.
    copies: HashMap<u32, [Option<Copied>; STACK_SLOTS + 2]>,
    /// Frame-pointer mode: (tgid, kernel user-stack id) → its sites,
    /// outermost first (None when the stack map no longer held it), for
    /// splicing.
    native: HashMap<(u32, i32), Option<Rc<Vec<Site>>>>,
    /// (tgid, native stack, Python frames) → recording stack id. The native
    /// stack is the kernel's user-stack id in frame-pointer mode, the
    /// recording's id of the unwound copy in copy mode (-1: none).
    spliced: HashMap<(u32, i32, Option<Rc<PyStack>>), StackId>,
    python: PythonFrames,
    /// (kernel stack id, walked at a switch-out) → recording stack id.
    kernel: HashMap<(i32, bool), StackId>,
    counts: StackCounts,
    /// Where the session reads `counts`.
    shared: Arc<Mutex<StackCounts>>,
    /// When each process's mappings were last re-read for an unknown
    /// address.
    reread: HashMap<u32, Instant>,
    /// The session reads a process's maps whenever the kernel says it
    /// mapped executable memory: an unknown address is then not code
    /// mapped since (a walk that went astray, mostly), and re-reading the
    /// maps for it would not find it.
    maps_told: bool,
}

/// A copy of a thread's user stack, unwound: its sequence number, its
/// frames (outermost first) for splicing Python frames into, and its stack
/// without them.
#[derive(Clone)]
struct Copied {
    seq: u32,
    frames: Rc<Vec<u32>>,
    stack: StackId,
}

/// One process's user addresses already interned, valid while what its
/// addresses resolve to stays the same ([`AddressSpaces::stamp`]).
#[derive(Default)]
struct FrameMemo {
    stamp: u64,
    frames: HashMap<u64, u32>,
}

/// Addresses one process's memo holds before it starts again (a process
/// that runs ever new JIT code).
const MEMO_LIMIT: usize = 1 << 16;

/// Spliced stacks remembered before the memo starts again: nearly every
/// on-CPU sample's Python frames are new (the instruction moved), so
/// without a bound the memo grew by a few hundred entries a second, each
/// holding its Python frames (about 150 KB a second on the real job).
const SPLICED_LIMIT: usize = 1 << 14;

/// How often one process's mappings may be re-read for an unknown address.
const REREAD_EVERY: Duration = Duration::from_millis(20);

/// What to do with an event once its stacks are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// Write it.
    Yes,
    /// Drop it: a stack copy, now unwound, or Python frames, now part of
    /// the stack of the event they came for.
    No,
}

impl StackResolver {
    pub(super) fn new(
        source: StackSource,
        mode: u32,
        maps_told: bool,
        shared: Arc<Mutex<StackCounts>>,
    ) -> StackResolver {
        StackResolver {
            source,
            mode,
            namer: Namer::default(),
            spaces: AddressSpaces::default(),
            unwinder: Unwinder::default(),
            frames: Interner::default(),
            memos: HashMap::new(),
            stacks: HashMap::new(),
            new_stacks: Vec::new(),
            user: HashMap::new(),
            copies: HashMap::new(),
            native: HashMap::new(),
            spliced: HashMap::new(),
            python: PythonFrames::default(),
            kernel: HashMap::new(),
            counts: StackCounts::default(),
            shared,
            reread: HashMap::new(),
            maps_told,
        }
    }

    pub(super) fn add_maps(&mut self, pid: u32, maps: Vec<Mapping>) {
        self.spaces.add_snapshot(pid, maps);
    }

    pub(super) fn set_parent(&mut self, child: u32, parent: u32) {
        self.spaces.set_parent(child, parent);
        self.python.set_parent(child, parent);
    }

    /// A process's CPython, whose frames it names and splices in.
    pub(super) fn add_interpreter(&mut self, interp: Arc<Interpreter>) {
        self.python.add_interpreter(interp);
    }

    /// Rewrites the stack fields of one event (a ring-buffer record) from
    /// the kernel's to the recording's, interning what is new. A stack copy
    /// is unwound and kept for the events that refer to it, and not
    /// written. Other events are left as they are.
    pub(super) fn rewrite(&mut self, event: &mut [u8]) -> Keep {
        let Some(hdr) = read::<EventHeader>(event) else {
            return Keep::Yes;
        };
        match hdr.kind {
            kind::STACK_COPY => {
                self.copy(event);
                return Keep::No;
            }
            kind::PY_STACK => {
                self.python.take_record(event);
                return Keep::No;
            }
            kind::SWITCH if event.len() >= size_of::<SwitchEvent>() => {
                let mut e: SwitchEvent = read(event).expect("length checked");
                if e.prev_kind == NO_STACK_KIND {
                    return Keep::Yes;
                }
                let python = self.python.for_switch(
                    e.prev_tid,
                    hdr.ts_ns,
                    e.prev_kind,
                    e.prev_user_stack,
                    e.prev_kernel_stack,
                );
                e.prev_user_stack =
                    self.user_stack(e.prev_tgid, e.prev_tid, e.prev_user_stack, python);
                e.prev_kernel_stack = self.kernel_stack(e.prev_kernel_stack, true);
                write(event, &e);
            }
            kind::SAMPLE if event.len() >= size_of::<SampleEvent>() => {
                let mut e: SampleEvent = read(event).expect("length checked");
                let python = self
                    .python
                    .for_sample(e.tid, hdr.ts_ns, e.user_stack, e.kernel_stack);
                e.user_stack = self.user_stack(e.tgid, e.tid, e.user_stack, python);
                e.kernel_stack = self.kernel_stack(e.kernel_stack, false);
                write(event, &e);
            }
            kind::EXEC => {
                if let Some(e) = read::<profiler_ebpf::ExecEvent>(event) {
                    self.python.exec(e.tgid, hdr.ts_ns);
                    self.spaces.exec(e.tgid);
                }
            }
            kind::EXIT => {
                if let Some(e) = read::<ExitEvent>(event) {
                    self.copies.remove(&e.tid);
                    if e.group_dead != 0 {
                        self.forget_process(e.tgid);
                    }
                    self.python.exit(e.tid);
                }
            }
            _ => {}
        }
        Keep::Yes
    }

    /// The frames and stacks interned since the last call, the frames named
    /// now (while the processes' files are surely there), for the sink to
    /// take before the events that refer to them.
    /// `cpu_since` is the thread's CPU time when the batch's resolving
    /// began ([`StackCounts::resolve_cpu_ns`]).
    pub(super) fn take_new(&mut self, cpu_since: u64) -> (Option<FrameBatch>, Option<StackBatch>) {
        let naming_since = thread_cpu_ns();
        self.counts.resolve_cpu_ns += naming_since.saturating_sub(cpu_since);
        let frames = (!self.frames.new_sites().is_empty()).then(|| {
            let first = self.frames.first_new as u32;
            let new = self.frames.new_sites();
            let unwinder = &mut self.unwinder;
            let frames = self.namer.frames(new, &self.spaces, &mut |path, offset| {
                unwinder.function_start(path, offset)
            });
            self.frames.taken();
            FrameBatch { first, frames }
        });
        let stacks = (!self.new_stacks.is_empty()).then(|| {
            let first = (self.stacks.len() - self.new_stacks.len()) as u32;
            let stacks = std::mem::take(&mut self.new_stacks);
            StackBatch { first, stacks }
        });
        self.counts.naming_cpu_ns += thread_cpu_ns().saturating_sub(naming_since);
        self.counts.finished_with_last = self.unwinder.finished_with_last();
        if let Ok(mut shared) = self.shared.lock() {
            *shared = self.counts;
        }
        (frames, stacks)
    }

    /// The recording's id of the user stack an event refers to (a copy of
    /// the thread's stack, or a frame-pointer walk in the stack map), with
    /// `python`'s frames spliced in.
    fn user_stack(
        &mut self,
        tgid: u32,
        tid: u32,
        reference: i32,
        python: Option<Rc<PyStack>>,
    ) -> StackId {
        let plain = python.is_none() && !self.python.marks(tgid);
        let walked = self.mode == stack_mode::FRAME_POINTERS;
        if plain && walked {
            return self.walked_user_stack(tgid, reference);
        }
        if plain {
            // Most switch-outs: the copy's stack as it is, its frames not
            // needed (nor their Rc's count touched).
            return self.copied(tid, reference).map_or(-1, |c| c.stack);
        }
        let copied = if walked {
            None
        } else {
            self.copied(tid, reference).cloned()
        };
        let native_key = match &copied {
            _ if walked => reference,
            Some(c) => c.stack,
            None => -1,
        };
        let key = (tgid, native_key, python);
        if let Some(&known) = self.spliced.get(&key) {
            return known;
        }
        if self.spliced.len() >= SPLICED_LIMIT {
            self.spliced.clear();
        }
        let native = match copied {
            Some(c) => Some(c.frames),
            None if walked => self.native_sites(tgid, reference).map(|sites| {
                let ids = sites.iter().map(|s| self.frames.intern(s.clone()));
                Rc::new(ids.collect())
            }),
            None => None,
        };
        let spliced = self.python.user_frames(
            tgid,
            native.as_deref().map(Vec::as_slice),
            key.2.as_deref(),
            &mut self.frames,
        );
        let resolved = spliced.map_or(-1, |frames| self.intern_frames(&frames));
        self.spliced.insert(key, resolved);
        resolved
    }

    /// Copy mode: the copy an event refers to, if the stage got it
    /// (counted when not).
    fn copied(&mut self, tid: u32, reference: i32) -> Option<&Copied> {
        if reference < 0 {
            return None;
        }
        let (seq, slot) = copy_ref_parts(reference);
        match self.copies.get(&tid).and_then(|s| s.get(slot as usize)) {
            Some(Some(copy)) if copy.seq == seq => Some(copy),
            _ => {
                self.counts.unmatched += 1;
                None
            }
        }
    }

    /// Drops what is kept per process for one whose last thread exited
    /// (a DataLoader's workers come and go every epoch).
    fn forget_process(&mut self, tgid: u32) {
        self.memos.remove(&tgid);
        self.spliced.retain(|&(pid, ..), _| pid != tgid);
        self.native.retain(|&(pid, _), _| pid != tgid);
        self.user.retain(|&(pid, _), _| pid != tgid);
    }

    /// Unwinds a [`StackCopyEvent`] and files its stack under its thread
    /// and slot.
    fn copy(&mut self, record: &[u8]) {
        let Some(head) = read::<StackCopyEvent>(record) else {
            return;
        };
        let end = (head.hdr.len as usize).min(record.len());
        let Some((flags, regs, stack)) = user_stack_section(&record[..end]) else {
            return;
        };
        let regs = UserRegs {
            ip: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
        };
        let tgid = head.tgid;
        let mut memo = self.memo(tgid, None);
        let thread = (tgid, head.tid);
        let mut unwound = self.unwind(&memo, thread, regs, stack);
        // An address in no mapping we know: the process mapped something
        // since its last snapshot (dlopen, a JIT's code).
        if unwound.unknown_address && self.reread_maps(tgid) {
            memo = self.memo(tgid, Some(memo));
            unwound = self.unwind(&memo, thread, regs, stack);
        }
        self.count(&unwound, flags);
        if head.slot < SAMPLE_SLOT {
            let check = site_check(head.seq, &unwound, stack);
            self.source.file_site_check(head.tid, head.slot, &check);
        }
        let frames = self.unwound_frames(tgid, &unwound, &mut memo);
        self.memos.insert(tgid, memo);
        let stack = self.intern_frames(&frames);
        let slots = self
            .copies
            .entry(head.tid)
            .or_insert_with(|| std::array::from_fn(|_| None));
        if let Some(entry) = slots.get_mut(head.slot.min(PREEMPT_SLOT) as usize) {
            *entry = Some(Copied {
                seq: head.seq,
                frames: Rc::new(frames),
                stack,
            });
        }
    }

    fn count(&mut self, unwound: &Unwound, flags: u16) {
        let counts = &mut self.counts;
        if flags & user_stack_flags::FAILED != 0 {
            counts.copy_failed += 1;
            return;
        }
        match unwound.end {
            End::Root => {}
            End::PastCopy if flags & user_stack_flags::SHORT != 0 => counts.short += 1,
            End::PastCopy | End::TooDeep => counts.truncated += 1,
            End::Cut | End::NoMappings => counts.cut += 1,
        }
    }

    /// The frames of an unwind, outermost first, under a [`TRUNCATED`]
    /// marker when it did not reach the thread's root ([`NO_MAPPINGS`]
    /// when it could not begin).
    fn unwound_frames(&mut self, tgid: u32, unwound: &Unwound, memo: &mut FrameMemo) -> Vec<u32> {
        let mut frames = Vec::with_capacity(unwound.addrs.len() + 1);
        match unwound.end {
            End::Root => {}
            End::NoMappings => frames.push(self.frames.intern(Site::Marker(NO_MAPPINGS))),
            _ => frames.push(self.frames.intern(Site::Marker(TRUNCATED))),
        }
        for (depth, &ip) in unwound.addrs.iter().enumerate().rev() {
            let addr = return_site(ip, depth);
            let id = if let Some(&id) = memo.frames.get(&addr) {
                id
            } else {
                let id = self.frames.intern(user_site(&self.spaces, tgid, addr));
                memo.frames.insert(addr, id);
                id
            };
            frames.push(id);
        }
        frames
    }

    /// Process `tgid`'s memo (`held`, or the one it left), emptied when
    /// what its addresses resolve to may have changed since it was filled.
    fn memo(&mut self, tgid: u32, held: Option<FrameMemo>) -> FrameMemo {
        let stamp = self.spaces.stamp(tgid);
        match held.or_else(|| self.memos.remove(&tgid)) {
            Some(memo) if memo.stamp == stamp && memo.frames.len() < MEMO_LIMIT => memo,
            _ => FrameMemo {
                stamp,
                frames: HashMap::new(),
            },
        }
    }

    /// Unwinds a copy of a thread of `tgid`, taking whether an address is
    /// code from the memo where it holds it: the walk checks every return
    /// address, and finding its mapping was a tenth of the stage's time.
    fn unwind(
        &mut self,
        memo: &FrameMemo,
        (tgid, tid): (u32, u32),
        regs: UserRegs,
        stack: &[u8],
    ) -> Unwound {
        let (spaces, frames) = (&self.spaces, &self.frames);
        let is_code = |addr: u64| match memo.frames.get(&addr) {
            Some(&id) => !matches!(frames.site(id), Site::Unmapped(_)),
            None => spaces.is_code(tgid, addr),
        };
        self.unwinder
            .unwind_with(spaces, (tgid, tid), regs, stack, &is_code)
    }

    /// Frame-pointer mode: a user stack without Python frames.
    fn walked_user_stack(&mut self, tgid: u32, id: i32) -> StackId {
        if id < 0 {
            return -1;
        }
        if let Some(&known) = self.user.get(&(tgid, id)) {
            return known;
        }
        let resolved = match self.native_sites(tgid, id) {
            Some(sites) => self.intern_stack(sites.to_vec()),
            None => -1,
        };
        self.user.insert((tgid, id), resolved);
        resolved
    }

    /// Frame-pointer mode: the sites of process `tgid`'s user stack `id`,
    /// read from the stack map once; None when it holds none (counted as
    /// unreadable).
    fn native_sites(&mut self, tgid: u32, id: i32) -> Option<Rc<Vec<Site>>> {
        if id < 0 {
            return None;
        }
        if let Some(known) = self.native.get(&(tgid, id)) {
            return known.clone();
        }
        let sites = match self.source.frames(id as u32) {
            Some(ips) if !ips.is_empty() => {
                let mut sites = self.user_sites(tgid, &ips);
                // An address in no mapping we know: the process mapped
                // something since its last snapshot (dlopen, a JIT's code).
                if sites.iter().any(|s| matches!(s, Site::Unmapped(_))) && self.reread_maps(tgid) {
                    sites = self.user_sites(tgid, &ips);
                }
                Some(Rc::new(sites))
            }
            _ => {
                self.count_unreadable();
                None
            }
        };
        self.native.insert((tgid, id), sites.clone());
        sites
    }

    /// The sites of a user stack's addresses (leaf first), outermost first.
    fn user_sites(&self, tgid: u32, ips: &[u64]) -> Vec<Site> {
        ips.iter()
            .enumerate()
            .rev()
            .map(|(depth, &ip)| user_site(&self.spaces, tgid, return_site(ip, depth)))
            .collect()
    }

    /// Reads `tgid`'s mappings again, at most once per [`REREAD_EVERY`];
    /// true when it did. Never when the session is told of new mappings.
    fn reread_maps(&mut self, tgid: u32) -> bool {
        if self.maps_told {
            return false;
        }
        let now = Instant::now();
        if self
            .reread
            .get(&tgid)
            .is_some_and(|last| now.duration_since(*last) < REREAD_EVERY)
        {
            return false;
        }
        self.reread.insert(tgid, now);
        match procfs::exec_maps(tgid) {
            Some(maps) => {
                self.spaces.add_snapshot(tgid, maps);
                true
            }
            None => false,
        }
    }

    fn kernel_stack(&mut self, id: i32, offcpu: bool) -> StackId {
        if id < 0 {
            return -1;
        }
        if let Some(&known) = self.kernel.get(&(id, offcpu)) {
            return known;
        }
        let ips = if offcpu {
            self.source.offcpu_kernel_frames(id as u32)
        } else {
            self.source.frames(id as u32)
        };
        let resolved = match ips {
            Some(ips) if !ips.is_empty() => {
                let sites: Vec<Site> = ips
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(depth, &ip)| Site::Kernel(return_site(ip, depth)))
                    .collect();
                self.intern_stack(sites)
            }
            _ => self.count_unreadable(),
        };
        self.kernel.insert((id, offcpu), resolved);
        resolved
    }

    fn count_unreadable(&mut self) -> StackId {
        self.counts.unreadable += 1;
        -1
    }

    fn intern_stack(&mut self, sites: Vec<Site>) -> StackId {
        let ids: Vec<u32> = sites.into_iter().map(|s| self.frames.intern(s)).collect();
        self.intern_frames(&ids)
    }

    /// The stack id of frames `ids` (a copy's, mostly one seen before:
    /// copied only when new).
    fn intern_frames(&mut self, ids: &[u32]) -> StackId {
        if let Some(&id) = self.stacks.get(ids) {
            return id as StackId;
        }
        let id = self.stacks.len() as u32;
        self.stacks.insert(ids.to_vec(), id);
        self.new_stacks.push(ids.to_vec());
        id as StackId
    }
}

/// The recording's frames so far: each site once, under its id.
#[derive(Default)]
pub(crate) struct Interner {
    ids: HashMap<Site, u32>,
    /// By id.
    sites: Vec<Site>,
    /// The first id not yet handed to the dictionary ([`Interner::taken`]).
    first_new: usize,
}

impl Interner {
    /// The id of `site`, a new one if it has none yet.
    pub(crate) fn intern(&mut self, site: Site) -> u32 {
        let next = self.sites.len() as u32;
        *self.ids.entry(site).or_insert_with_key(|site| {
            self.sites.push(site.clone());
            next
        })
    }

    /// The site of frame `id` (an id this interner gave).
    pub(crate) fn site(&self, id: u32) -> &Site {
        &self.sites[id as usize]
    }

    /// The sites interned since the last [`Interner::taken`], in id order.
    fn new_sites(&self) -> &[Site] {
        &self.sites[self.first_new..]
    }

    /// The new sites went into the dictionary.
    fn taken(&mut self) {
        self.first_new = self.sites.len();
    }
}

/// The user stack section of a copy record: its flags, the registers and
/// the stack bytes. Sections are walked by length, so a section of a kind
/// this tprof does not know (or a later one) is skipped.
/// What the kernel checks before it reuses switch-out copy `seq` for a
/// switch-out at the same registers: the first callers' return addresses
/// the walk found, each where it lies on the copied stack.
fn site_check(seq: u32, unwound: &Unwound, stack: &[u8]) -> SiteCheck {
    let mut check = SiteCheck {
        seq,
        ..SiteCheck::default()
    };
    let callers = unwound.addrs.iter().skip(1);
    let found = (unwound.return_offsets.iter().zip(callers))
        .filter(|&(&offset, &ra)| {
            let aligned = offset % 8 == 0 && offset + 8 <= SITE_CHECK_SPAN as u64;
            aligned && word_at(stack, offset) == Some(ra)
        })
        .take(SITE_CHECK_FRAMES);
    for (i, (&offset, &ra)) in found.enumerate() {
        check.offsets[i] = offset as u16;
        check.return_addresses[i] = ra;
        check.count = i as u32 + 1;
    }
    check
}

/// The 8-byte word `offset` bytes into `stack`.
fn word_at(stack: &[u8], offset: u64) -> Option<u64> {
    let at = usize::try_from(offset).ok()?;
    let bytes = stack.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

fn user_stack_section(record: &[u8]) -> Option<(u16, AbiRegs, &[u8])> {
    let mut at = size_of::<StackCopyEvent>();
    while let Some(head) = record.get(at..).and_then(read::<CopySection>) {
        let start = at + size_of::<CopySection>();
        let payload = record.get(start..start.checked_add(head.len as usize)?)?;
        if head.kind == section::USER_STACK {
            let regs = read::<AbiRegs>(payload)?;
            return Some((head.flags, regs, &payload[size_of::<AbiRegs>()..]));
        }
        at = (start + head.len as usize).next_multiple_of(8);
    }
    None
}

fn read<T: bytemuck::Pod>(bytes: &[u8]) -> Option<T> {
    bytes
        .get(..size_of::<T>())
        .map(bytemuck::pod_read_unaligned)
}

fn write<T: bytemuck::Pod>(bytes: &mut [u8], value: &T) {
    bytes[..size_of::<T>()].copy_from_slice(bytemuck::bytes_of(value));
}

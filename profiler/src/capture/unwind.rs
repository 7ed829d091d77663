//! Unwinds the user stacks the kernel copied: a thread's registers (ip, sp,
//! bp) and the top of its stack, walked with framehop over the CFI
//! (`.eh_frame`) of the files the process maps, as perf's `--call-graph
//! dwarf` and samply do. Frame pointers serve only where a file has no CFI
//! for an address (framehop's fallback), and everything such a walk finds
//! is checked: a return address outside every executable mapping or a stack
//! pointer that does not grow ends the unwind as cut rather than adding
//! garbage frames, and so does a stack deeper than [`MAX_DEPTH`].
//!
//! One framehop unwinder per process, built from the `/proc/<pid>/maps`
//! snapshots capture keeps ([`AddressSpaces`]); each file's unwind sections
//! are read once ([`ElfFile`]) and shared by every process mapping it. The
//! same sections give the function start of an address ([`Unwinder::
//! function_start`]), which names frames that have no symbol.
//!
//! A forked child that has no snapshot of its own unwinds with its parent's
//! mappings; a process's unwinder is rebuilt when its mappings change. Files
//! are read through `/proc/<pid>/map_files` when a live mapping is at hand
//! (a deleted or replaced file, a container's mount namespace), the vDSO
//! from tprof's own memory. A leaf in code without CFI (libjpeg-turbo's
//! hand-written SIMD in OpenCV's wheel; a frameless memcpy) gets both
//! guesses, the return address at sp and a frame-pointer frame, and keeps
//! the one whose return address is code. framehop is StackPulse's fork
//! (crate `framehop-stackpulse` 0.17, upstream's API): it evaluates CFA
//! expressions that read memory (`CFA = *(rbp - 8)` in every function that
//! realigns its stack for AVX, libtorch's vectorized kernels among them),
//! where upstream framehop 0.16 fell back to frame pointers and lost the rest of the
//! stack. Why copy and unwind here rather than unwind in the kernel:
//! docs/decisions.md.

use std::{collections::HashMap, fs::File, ops::Range, os::unix::fs::FileExt, sync::Arc};

use framehop::{
    Error as WalkError, ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _,
    UnwinderWithDetails as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags, read::ReadCache};

use super::procfs::{self, Mapping};
use super::symbols::{AddressSpaces, Site, user_site};
use tail::Trail;

mod tail;

/// Frames past this depth are cut: few real stacks are this deep (a deep
/// recursion), and a loop in a garbage chain would never end.
pub(super) const MAX_DEPTH: usize = 512;

/// Threads whose last walk is kept ([`Trail`]) before they are all let go.
const MAX_TRAILS: usize = 4096;

/// Unwinders kept at once, one per process; the least recently used goes
/// first (a job that forks thousands of short-lived processes).
const MAX_PROCESSES: usize = 256;

/// A thread's user registers where it was stopped: what unwinding starts
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// How an unwind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// At a thread's root: a frame whose CFI says it has no caller
    /// (`_start`, `clone3`).
    Root,
    /// The copy ended before the stack did: the stack is deeper than the
    /// bytes copied (`--stack-size`), or a page of it could not be read.
    PastCopy,
    /// After [`MAX_DEPTH`] frames.
    TooDeep,
    /// At something that is not a frame: a return address in no executable
    /// mapping, a stack pointer that did not grow, or a read below the
    /// stack.
    Cut,
    /// Not begun: tprof has no mappings for the process (it was gone
    /// before they were read), so only the leaf is known.
    NoMappings,
}

/// An unwound stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unwound {
    /// The leaf's instruction pointer, then each caller's return address.
    pub addrs: Vec<u64>,
    /// Where each caller's return address (`addrs[1..]`) was read, in
    /// bytes above the stack pointer: the words the kernel checks before
    /// it reuses a switch-out's copy for another at the same registers.
    pub return_offsets: Vec<u64>,
    pub end: End,
    /// An address (the leaf, or where the walk was cut) lies in no mapping
    /// tprof knows: the process may have mapped something since its last
    /// snapshot (dlopen), so it is worth re-reading its mappings and
    /// unwinding again.
    pub unknown_address: bool,
}

/// Unwinds copied stacks of any tracked process.
#[derive(Default)]
pub(super) struct Unwinder {
    files: ElfFiles,
    processes: HashMap<u32, ProcessUnwinder>,
    /// Each thread's last walk, for its next to finish with.
    trails: HashMap<u32, Trail>,
    /// A walk done with, whose vectors the next walk fills: a walk grew
    /// five of them from empty, a third of the resolve stage's
    /// allocations on the real job.
    spare: Trail,
    /// Walks that finished with their thread's last.
    met: u64,
    /// Bumped on every unwind, to find the least recently used process.
    clock: u64,
}

/// The framehop unwinder of one process's mappings.
struct ProcessUnwinder {
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    caches: RuleCaches,
    /// The generation of the mappings it was built from
    /// ([`AddressSpaces::mappings`]).
    generation: u64,
    last_used: u64,
}

impl Unwinder {
    /// Unwinds the stack of a thread of `pid` stopped at `regs`, from
    /// `stack`, the bytes copied from `regs.sp` upward.
    #[cfg(test)]
    pub(super) fn unwind(
        &mut self,
        spaces: &AddressSpaces,
        pid: u32,
        regs: UserRegs,
        stack: &[u8],
    ) -> Unwound {
        self.unwind_with(spaces, (pid, pid), regs, stack, &|addr| {
            spaces.is_code(pid, addr)
        })
    }

    /// [`Unwinder::unwind`] for thread `tid` of process `pid`, asking
    /// `is_code` whether an address of `pid` is code (the caller may know
    /// most of them already). Where the walk meets the thread's last walk
    /// it finishes with it ([`Trail::meeting`]).
    pub(super) fn unwind_with(
        &mut self,
        spaces: &AddressSpaces,
        (pid, tid): (u32, u32),
        regs: UserRegs,
        stack: &[u8],
        is_code: &impl Fn(u64) -> bool,
    ) -> Unwound {
        self.clock += 1;
        let clock = self.clock;
        let Some(owner) = self.process(spaces, pid) else {
            return Unwound {
                addrs: vec![regs.ip],
                return_offsets: Vec::new(),
                end: End::NoMappings,
                unknown_address: true,
            };
        };
        self.processes.get_mut(&owner).expect("just made").last_used = clock;
        let stamp = spaces.stamp(pid);
        let (last, stale) = match self.trails.remove(&tid) {
            Some(t) if t.stamp == stamp => (Some(t), None),
            other => (None, other),
        };
        if self.trails.len() >= MAX_TRAILS {
            self.trails.clear(); // threads come and go; the live ones refill it
        }
        let process = self.processes.get_mut(&owner).expect("just made");
        let files = &mut self.files;
        // Asked only when the leaf's step fails: looking the leaf's CFI up
        // was a seventh of a walk's time.
        let mut leaf_has_cfi = || has_cfi(files, spaces, pid, regs.ip);
        let walked = Walk {
            regs,
            stack,
            is_code,
        };
        let mut leaf = std::mem::take(&mut self.spare);
        leaf.restart(stamp, [regs.ip, regs.sp, regs.bp]);
        let (unwound, trail, met) = walked.run(process, leaf, last.as_ref(), &mut leaf_has_cfi);
        self.met += u64::from(met);
        self.trails.insert(tid, trail);
        if let Some(done) = last.or(stale) {
            self.spare = done;
        }
        unwound
    }

    /// Walks so far that finished with their thread's last.
    pub(super) fn finished_with_last(&self) -> u64 {
        self.met
    }

    /// The start of the function holding `offset` in the file at `path`, as
    /// a file offset, from the file's CFI; None when it has none there.
    pub(super) fn function_start(&mut self, path: &str, offset: u64) -> Option<u64> {
        self.files.get(path, None)?.function_start(offset)
    }

    /// The pid whose unwinder unwinds `pid`'s stacks (its own, or an
    /// ancestor's), (re)built when its mappings changed.
    fn process(&mut self, spaces: &AddressSpaces, pid: u32) -> Option<u32> {
        let (owner, generation, maps) = spaces.mappings(pid)?;
        let fresh = self
            .processes
            .get(&owner)
            .is_some_and(|p| p.generation == generation);
        if !fresh {
            if self.processes.len() >= MAX_PROCESSES && !self.processes.contains_key(&owner) {
                self.evict_least_recent();
            }
            let mut unwinder = UnwinderX86_64::new();
            for mapping in maps {
                if let Some(module) = self.files.module(owner, mapping) {
                    unwinder.add_module(module);
                }
            }
            self.processes.insert(
                owner,
                ProcessUnwinder {
                    unwinder,
                    caches: RuleCaches::default(),
                    generation,
                    last_used: 0,
                },
            );
        }
        Some(owner)
    }

    fn evict_least_recent(&mut self) {
        if let Some(&pid) = self
            .processes
            .iter()
            .min_by_key(|(_, p)| p.last_used)
            .map(|(pid, _)| pid)
        {
            self.processes.remove(&pid);
        }
    }
}

/// framehop's rule caches of one process, each address always in the
/// same one. A cache holds 509 rules, one per slot of `address % 509`; the
/// real job's walks meet more addresses than that, and a fifth of the
/// lookups missed on another address in their slot (each miss a binary
/// search of `.eh_frame_hdr` and a CFI evaluation, a third of the
/// unwinding). Spreading the addresses over several caches by a
/// different part of them gives each slot as many places.
struct RuleCaches(Box<[CacheX86_64; RULE_CACHES]>);

/// How many caches [`RuleCaches`] has per process (each 509 rules and a
/// gimli context: tens of KB).
const RULE_CACHES: usize = 8;

impl Default for RuleCaches {
    fn default() -> RuleCaches {
        RuleCaches(Box::new(std::array::from_fn(|_| CacheX86_64::new())))
    }
}

impl RuleCaches {
    /// The cache for `address`: chosen by the bits above framehop's slot
    /// (`address / 509`), so addresses that share a slot seldom share a
    /// cache.
    fn for_address(&mut self, address: u64) -> &mut CacheX86_64 {
        &mut self.0[(address / 509 % RULE_CACHES as u64) as usize]
    }
}

/// True when the file mapped at `addr` in `pid` has a CFI entry for it
/// (false for JIT code, and for addresses in no mapping).
fn has_cfi(files: &mut ElfFiles, spaces: &AddressSpaces, pid: u32, addr: u64) -> bool {
    match user_site(spaces, pid, addr) {
        Site::File(path, offset) => files
            .get(&path, None)
            .is_some_and(|file| file.function_start(offset).is_some()),
        _ => false,
    }
}

/// One stack to walk: the registers it starts from, the bytes copied from
/// their sp up, and what the walk asks of the process.
struct Walk<'a, F: Fn(u64) -> bool> {
    regs: UserRegs,
    stack: &'a [u8],
    is_code: &'a F,
}

impl<F: Fn(u64) -> bool> Walk<'_, F> {
    /// Walks the stack, frame by frame, checking each step, into `trail`,
    /// until it ends or meets `last` (the thread's last walk), whose rest
    /// it then takes. `leaf_has_cfi`: whether the file holding the leaf
    /// has a CFI entry for it.
    fn run(
        &self,
        process: &mut ProcessUnwinder,
        mut trail: Trail,
        last: Option<&Trail>,
        leaf_has_cfi: &mut dyn FnMut() -> bool,
    ) -> (Unwound, Trail, bool) {
        let regs = self.regs;
        let mut finished_with_last = false;
        let same_from = last.map(|l| l.same_reads_from(|a| self.word(a).ok()));
        let copy_end = regs.sp.saturating_add(self.stack.len() as u64);
        let mut walk_regs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::from_instruction_pointer(regs.ip);
        let mut unknown_address = !(self.is_code)(regs.ip);
        let end = loop {
            let depth = trail.addrs.len();
            let here = [trail.addrs[depth - 1], walk_regs.sp(), walk_regs.bp()];
            if let (Some(last), Some(same_from)) = (last, same_from) {
                let met = last.meeting(here, depth == 1, same_from);
                if let Some(j) = met.filter(|j| depth + last.addrs.len() - j - 1 <= MAX_DEPTH) {
                    trail.finish_with(last, j);
                    finished_with_last = true;
                    break trail.end.expect("a last walk has ended");
                }
            }
            trail.starts.push(trail.reads.len());
            if depth >= MAX_DEPTH {
                break End::TooDeep;
            }
            let before = walk_regs;
            let reads = &mut trail.reads;
            let mut read = |addr: u64| -> Result<u64, ()> {
                let word = self.word(addr);
                reads.push((addr, word.ok()));
                word
            };
            let step = process.unwinder.unwind_frame_with_details(
                address,
                &mut walk_regs,
                process.caches.for_address(address.address()),
                &mut read,
            );
            let next = match step {
                Ok(outcome) => match outcome.return_address() {
                    None => break End::Root,
                    Some(ra) => Ok(ra),
                },
                Err(e) => Err(e),
            };
            let caller = match next {
                Ok(ra) if is_caller(ra, before.sp(), walk_regs.sp(), self.is_code) => ra,
                // The leaf is in code without CFI (hand-written assembly, such
                // as libjpeg-turbo's SIMD routines in OpenCV's wheel, or JIT
                // code), where framehop guessed: a frameless function's return
                // address at sp, or a frame pointer's chain. Try both.
                _ if depth == 1 && !leaf_has_cfi() => {
                    match leaf_without_cfi(before, &mut read, self.is_code) {
                        Some((ra, regs)) => {
                            walk_regs = regs;
                            ra
                        }
                        None => break ended(next.map(|_| ()), copy_end, &mut trail),
                    }
                }
                _ => break ended(next.map(|_| ()), copy_end, &mut trail),
            };
            // Each step, framehop's or ours, read the return address just
            // below the caller's stack pointer.
            let slot = walk_regs.sp().saturating_sub(8);
            trail.push(caller, slot, [caller, walk_regs.sp(), walk_regs.bp()]);
            address = FrameAddress::from_return_address(caller).expect("checked not null");
        };
        trail.end = Some(end);
        unknown_address |= trail.end_unknown;
        let unwound = Unwound {
            addrs: trail.addrs.clone(),
            return_offsets: trail
                .slots
                .iter()
                .map(|s| s.saturating_sub(regs.sp))
                .collect(),
            end,
            unknown_address,
        };
        (unwound, trail, finished_with_last)
    }

    /// The copied word at `addr`; Err outside the copy.
    fn word(&self, addr: u64) -> Result<u64, ()> {
        let at = usize::try_from(addr.checked_sub(self.regs.sp).ok_or(())?).map_err(|_| ())?;
        let word = self.stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
    }
}

/// How a walk that could not take its next step ended.
fn ended(step: Result<(), WalkError>, copy_end: u64, trail: &mut Trail) -> End {
    match step {
        Err(WalkError::CouldNotReadStack(at)) if at >= copy_end => End::PastCopy,
        Err(_) => End::Cut,
        Ok(()) => {
            // A return address that is not a caller's: garbage, or code
            // mapped since the last snapshot.
            trail.end_unknown = true;
            End::Cut
        }
    }
}

/// A step's return address is a caller's: not null, in code (looked up one
/// byte back: the call, not what follows it, since a call may be a
/// function's last instruction), and the stack pointer grew.
fn is_caller(ra: u64, sp_before: u64, sp_after: u64, is_code: &impl Fn(u64) -> bool) -> bool {
    ra != 0 && sp_after > sp_before && is_code(ra - 1)
}

/// The caller of a leaf in code without CFI, by whichever of the two rules
/// such code follows finds one: a frameless function (the return address
/// at sp), or one with a frame pointer (bp within the stack, the return
/// address above the saved bp).
fn leaf_without_cfi(
    regs: UnwindRegsX86_64,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
    is_code: &impl Fn(u64) -> bool,
) -> Option<(u64, UnwindRegsX86_64)> {
    let (sp, bp) = (regs.sp(), regs.bp());
    let frameless = read(sp)
        .ok()
        .map(|ra| (ra, UnwindRegsX86_64::new(ra, sp + 8, bp)));
    let frame_pointer = (bp >= sp && bp % 8 == 0)
        .then(|| Some((read(bp.checked_add(8)?).ok()?, read(bp).ok()?)))
        .flatten()
        .map(|(ra, saved_bp)| (ra, UnwindRegsX86_64::new(ra, bp + 16, saved_bp)));
    [frameless, frame_pointer]
        .into_iter()
        .flatten()
        .find(|&(ra, next)| is_caller(ra, sp, next.sp(), is_code))
}

/// Every file's unwind sections, read once (by path; the vDSO from tprof's
/// own, since it is one image per kernel).
#[derive(Default)]
struct ElfFiles {
    /// None: the file could not be read or is not an ELF file.
    by_path: HashMap<String, Option<Arc<ElfFile>>>,
}

impl ElfFiles {
    /// The framehop module of one executable mapping of process `pid`.
    fn module(&mut self, pid: u32, mapping: &Mapping) -> Option<Module<Arc<[u8]>>> {
        if mapping.path.is_empty() || mapping.path.starts_with("[anon") {
            return None; // JIT code: no CFI; framehop falls back to frame pointers
        }
        let file = self.get(&mapping.path, Some((pid, mapping)))?;
        let base = file.bias(mapping)?;
        Some(Module::new(
            mapping.path.to_string(),
            mapping.start..mapping.end,
            base,
            file.section_info(),
        ))
    }

    /// The file at `path`, read the first time through `/proc/<pid>/
    /// map_files` when a mapping of a live process is at hand (a deleted or
    /// replaced file, a file in a container's mount namespace), else by path.
    fn get(&mut self, path: &str, seen_in: Option<(u32, &Mapping)>) -> Option<Arc<ElfFile>> {
        if let Some(known) = self.by_path.get(path) {
            return known.clone();
        }
        let read = if path == "[vdso]" {
            ElfFile::own_vdso()
        } else if path.starts_with('[') {
            None
        } else {
            let via_map_files = seen_in.and_then(|(pid, m)| {
                File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)).ok()
            });
            via_map_files
                .or_else(|| File::open(path.trim_end_matches(" (deleted)")).ok())
                .and_then(|f| ElfFile::read(&ReadCache::new(f)))
        };
        let read = read.map(Arc::new);
        self.by_path.insert(path.to_string(), read.clone());
        read
    }
}

/// What unwinding needs of one ELF file: its loadable segments (to place
/// it in a process) and its CFI sections, as stated addresses (SVMAs) and
/// bytes.
#[derive(Debug, Default)]
struct ElfFile {
    segments: Vec<Segment>,
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    eh_frame: Option<Section>,
    eh_frame_hdr: Option<Section>,
    /// Only when there is no `.eh_frame` (framehop reads one or the other).
    debug_frame: Option<Arc<[u8]>>,
}

/// A PT_LOAD segment.
#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    svma: u64,
    executable: bool,
}

#[derive(Debug, Clone)]
struct Section {
    svma: Range<u64>,
    data: Arc<[u8]>,
}

/// ELF `p_flags` bit of an executable segment.
const PF_X: u32 = 1;

impl ElfFile {
    /// Reads the segments and unwind sections, and only those (a libtorch
    /// is gigabytes; its `.eh_frame` is a small part).
    fn read<'data, R: object::ReadRef<'data>>(data: R) -> Option<ElfFile> {
        let elf = object::File::parse(data).ok()?;
        let segments = elf
            .segments()
            .map(|s| {
                let (file_offset, file_size) = s.file_range();
                Segment {
                    file_offset,
                    file_size,
                    svma: s.address(),
                    executable: matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & PF_X != 0),
                }
            })
            .collect();
        let range = |name: &str| {
            elf.section_by_name(name)
                .map(|s| s.address()..s.address() + s.size())
        };
        let section = |name: &str| {
            let s = elf.section_by_name(name)?;
            Some(Section {
                svma: s.address()..s.address() + s.size(),
                data: Arc::from(s.data().ok()?),
            })
        };
        let eh_frame = section(".eh_frame");
        let debug_frame = if eh_frame.is_none() {
            section(".debug_frame").map(|s| s.data)
        } else {
            None
        };
        Some(ElfFile {
            segments,
            text: range(".text"),
            got: range(".got"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            eh_frame,
            debug_frame,
        })
    }

    /// tprof's own vDSO image, read from its memory: every process on this
    /// kernel maps the same one.
    fn own_vdso() -> Option<ElfFile> {
        let maps = procfs::exec_maps(std::process::id())?;
        let vdso = maps.iter().find(|m| &*m.path == "[vdso]")?;
        let mut image = vec![0; (vdso.end - vdso.start) as usize];
        File::open("/proc/self/mem")
            .ok()?
            .read_exact_at(&mut image, vdso.start)
            .ok()?;
        ElfFile::read(image.as_slice())
    }

    /// The module's load bias in a process (framehop's base AVMA, as ELF
    /// files state addresses from 0): where `mapping` puts its file offset,
    /// minus the address the file states for that offset.
    fn bias(&self, mapping: &Mapping) -> Option<u64> {
        const PAGE: u64 = 4096;
        let segment = self
            .segments
            .iter()
            .filter(|s| {
                let start = s.file_offset & !(PAGE - 1);
                start <= mapping.offset && mapping.offset < s.file_offset + s.file_size.max(1)
            })
            .max_by_key(|s| s.executable)?;
        // The mapping may start up to a page before the segment's offset;
        // the difference is the same in the file and in memory.
        let svma = segment
            .svma
            .wrapping_add(mapping.offset)
            .wrapping_sub(segment.file_offset);
        Some(mapping.start.wrapping_sub(svma))
    }

    fn section_info(&self) -> ExplicitModuleSectionInfo<Arc<[u8]>> {
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.clone(),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|s| s.svma.clone()),
            eh_frame: self.eh_frame.as_ref().map(|s| s.data.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|s| s.svma.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|s| s.data.clone()),
            debug_frame: self.debug_frame.clone(),
            ..Default::default()
        }
    }

    /// The function start of file offset `offset`, as a file offset: the
    /// initial address of the CFI entry (FDE) covering it, found through
    /// `.eh_frame_hdr`'s search table.
    fn function_start(&self, offset: u64) -> Option<u64> {
        let svma = self.offset_to_svma(offset)?;
        let (hdr, eh_frame) = (self.eh_frame_hdr.as_ref()?, self.eh_frame.as_ref()?);
        let mut bases = BaseAddresses::default()
            .set_eh_frame_hdr(hdr.svma.start)
            .set_eh_frame(eh_frame.svma.start);
        if let Some(text) = &self.text {
            bases = bases.set_text(text.start);
        }
        if let Some(got) = &self.got {
            bases = bases.set_got(got.start);
        }
        let parsed = EhFrameHdr::new(&hdr.data, LittleEndian)
            .parse(&bases, 8)
            .ok()?;
        let fde = parsed
            .table()?
            .fde_for_address(
                &EhFrame::new(&eh_frame.data, LittleEndian),
                &bases,
                svma,
                EhFrame::cie_from_offset,
            )
            .ok()?;
        self.svma_to_offset(fde.initial_address())
    }

    fn offset_to_svma(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.file_offset <= offset && offset < s.file_offset + s.file_size)
            .map(|s| s.svma + (offset - s.file_offset))
    }

    fn svma_to_offset(&self, svma: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.svma <= svma && svma < s.svma + s.file_size)
            .map(|s| s.file_offset + (svma - s.svma))
    }
}

#[cfg(test)]
mod tests;

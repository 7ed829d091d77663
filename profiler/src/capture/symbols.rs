//! Names raw addresses: where each points ([`Site`]: a file and offset, the
//! kernel, JIT code, a pseudo mapping) and, in batches, which function
//! ([`Namer`]).
//!
//! User addresses are resolved against `/proc/<pid>/maps` snapshots that
//! capture takes while each process is alive ([`AddressSpaces`]), then looked
//! up in the mapped files on disk, so a DataLoader worker that exited long
//! before the recording ended still gets names. Symbolization happens here,
//! at record time, because the binaries may be missing wherever the
//! recording is read.
//!
//! A process that exited resolves through its own last snapshot or, with
//! none, its nearest ancestor's. [`Namer`] names sites with blazesym (ELF
//! files by file offset, kallsyms, the vDSO) and `/tmp/perf-<pid>.map` for
//! JIT code, and keeps blazesym's parsed files for the whole recording;
//! Python sites and markers arrive named. It runs in the resolve stage
//! only: the first sight of a large library costs blazesym seconds.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    sync::Arc,
};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Elf, Kernel, Process, Source},
};
use blazesym::{MaybeDefault, Pid};

mod functions;

use super::procfs::{self, Mapping};
use functions::{Functions, Named};
use tprof_core::recording::{Frame, FrameKind};

/// The executable mappings of every tracked process, as last seen alive.
#[derive(Debug, Default)]
pub(super) struct AddressSpaces {
    maps: HashMap<u32, Vec<Mapping>>,
    /// Per process, bumped whenever its mappings change, so the unwinder
    /// built from them knows to rebuild.
    generations: HashMap<u32, u64>,
    next_generation: u64,
    /// child → parent, for children that exited before their first snapshot
    /// (a forked child maps what its parent mapped).
    parents: HashMap<u32, u32>,
    /// Per process, from the same counter as `generations`, bumped when
    /// its parent link is made or cut: which mappings stand for it changed.
    relinked: HashMap<u32, u64>,
}

impl AddressSpaces {
    /// Adds a `/proc/<pid>/maps` snapshot. Mappings from an earlier snapshot
    /// that the new one does not overlap are kept: samples taken before a
    /// dlclose or an exec still resolve.
    pub(super) fn add_snapshot(&mut self, pid: u32, fresh: Vec<Mapping>) {
        let old = self.maps.remove(&pid).unwrap_or_default();
        let kept: Vec<Mapping> = old
            .iter()
            .filter(|m| !fresh.iter().any(|f| f.start < m.end && m.start < f.end))
            .cloned()
            .collect();
        let mut merged = fresh;
        merged.extend(kept);
        // By address, for the binary search in `lookup` (they do not
        // overlap: the kept ones are those no fresh one overlaps).
        merged.sort_by_key(|m| m.start);
        if merged != old || !self.generations.contains_key(&pid) {
            self.next_generation += 1;
            self.generations.insert(pid, self.next_generation);
        }
        self.maps.insert(pid, merged);
    }

    /// The mappings that hold `pid`'s code: its own snapshot, else its
    /// nearest ancestor's (a forked child maps what its parent mapped), as
    /// (whose, generation, mappings).
    pub(super) fn mappings(&self, pid: u32) -> Option<(u32, u64, &[Mapping])> {
        let (owner, maps) = self
            .ancestors(pid)
            .find_map(|p| Some((p, self.maps.get(&p)?)))?;
        let generation = self.generations.get(&owner).copied().unwrap_or_default();
        Some((owner, generation, maps))
    }

    /// True when `addr` lies in an executable mapping of `pid` (or of the
    /// ancestor whose mappings stand for it).
    pub(super) fn is_code(&self, pid: u32, addr: u64) -> bool {
        self.lookup(pid, addr).is_some()
    }

    pub(super) fn set_parent(&mut self, child: u32, parent: u32) {
        self.parents.insert(child, parent);
        self.relink(child);
    }

    /// A number that changes whenever what an address of `pid` resolves to
    /// may have: its mappings, an ancestor's that stand for some of them,
    /// or its parent link changed. Generations only grow, so the largest
    /// along the lineage moves whenever any of them does.
    pub(super) fn stamp(&self, pid: u32) -> u64 {
        let of = |map: &HashMap<u32, u64>, p: u32| map.get(&p).copied().unwrap_or_default();
        self.ancestors(pid)
            .map(|p| of(&self.generations, p).max(of(&self.relinked, p)))
            .max()
            .unwrap_or_default()
    }

    fn relink(&mut self, pid: u32) {
        self.next_generation += 1;
        self.relinked.insert(pid, self.next_generation);
    }

    /// `pid` exec'd: from now on its parent's mappings no longer stand for
    /// its own (an `ldconfig` that torch's import runs, gone before its
    /// mappings are read, would otherwise be named by the interpreter's).
    /// Its own snapshot, if any, is kept: it may be the new image's, read
    /// before this event was drained.
    pub(super) fn exec(&mut self, pid: u32) {
        self.parents.remove(&pid);
        self.relink(pid);
    }

    fn ancestors(&self, pid: u32) -> impl Iterator<Item = u32> + '_ {
        ancestors(&self.parents, pid)
    }

    /// The mapping holding `addr` in `pid`, or in its nearest ancestor with a
    /// snapshot.
    fn lookup(&self, pid: u32, addr: u64) -> Option<(u32, &Mapping)> {
        self.ancestors(pid).find_map(|p| {
            let maps = self.maps.get(&p)?;
            // The last mapping starting at or below `addr`: a torch
            // process has over a thousand, and every unwinding step looks
            // one up.
            let at = maps.partition_point(|m| m.start <= addr);
            let m = &maps[at.checked_sub(1)?];
            (addr < m.end).then_some((p, m))
        })
    }
}

/// `pid` and its known ancestors in `parents` (child → parent), nearest
/// first, walked in place (this is asked at every stack copy, unwind and
/// Python splice); 16 of them at most, which also ends a cycle.
pub(super) fn ancestors<S: std::hash::BuildHasher>(
    parents: &HashMap<u32, u32, S>,
    pid: u32,
) -> impl Iterator<Item = u32> + '_ {
    std::iter::successors(Some(pid), |p| parents.get(p).copied()).take(16)
}

/// Where one raw address points, before symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Site {
    /// A file-backed address: (path, file offset).
    File(Arc<str>, u64),
    /// JIT code: (pid whose perf map to read, address).
    Anon(u32, u64),
    /// A pseudo mapping such as `[vdso]`: (name, offset).
    Pseudo(Arc<str>, u64),
    Kernel(u64),
    /// An address in no mapping tprof saw.
    Unmapped(u64),
    /// A Python function, named by its code object: (qualified name, file,
    /// line; 0 when the line is unknown).
    Python(Arc<str>, Arc<str>, u32),
    /// Not code: a note in the stack, such as `[truncated]` or `[python: truncated]`.
    Marker(&'static str),
}

/// Frames below the leaf hold return addresses, which point just past the
/// call; one byte back lands in the calling function even when the call was
/// its last instruction.
pub(super) fn return_site(ip: u64, depth: usize) -> u64 {
    if depth == 0 { ip } else { ip.saturating_sub(1) }
}

pub(super) fn user_site(spaces: &AddressSpaces, pid: u32, addr: u64) -> Site {
    match spaces.lookup(pid, addr) {
        Some((owner, m)) if m.path.is_empty() || m.path.starts_with("[anon") => {
            Site::Anon(owner, addr)
        }
        Some((_, m)) if m.path.starts_with('[') => {
            Site::Pseudo(Arc::clone(&m.path), addr - m.start)
        }
        Some((_, m)) => {
            let path = match m.path.strip_suffix(" (deleted)") {
                Some(file) => file.into(),
                None => Arc::clone(&m.path),
            };
            Site::File(path, addr - m.start + m.offset)
        }
        None => Site::Unmapped(addr),
    }
}

/// Names sites, one batch at a time, keeping what it learns between
/// batches: blazesym's parsed files (a libtorch takes seconds to parse) and
/// each JIT's perf map.
pub(super) struct Namer {
    /// Without demangling: [`Demangled`] does it once per name. Without
    /// auto reload: blazesym would stat each file by its path at every
    /// call to see whether it changed (3% of the writer thread on the real
    /// job), and a file replaced on disk is not the one the process maps,
    /// which is what the frames are of.
    symbolizer: Symbolizer,
    demangled: Demangled,
    functions: Functions,
    /// Each process's perf map with the file length it was read at: re-read
    /// when it grew (JITs append as they compile).
    perf_maps: HashMap<u32, (u64, Vec<PerfMapEntry>)>,
}

impl Default for Namer {
    fn default() -> Namer {
        Namer {
            symbolizer: Symbolizer::builder()
                .enable_demangling(false)
                .enable_auto_reload(false)
                .build(),
            demangled: Demangled::default(),
            functions: Functions::default(),
            perf_maps: HashMap::new(),
        }
    }
}

/// Symbol names demangled, each once: the frames of a recording name the
/// same functions again and again (every on-CPU sample's leaf is a new
/// address, mostly in a function named already), and demangling a C++
/// name took as long as finding its symbol.
#[derive(Default)]
struct Demangled {
    names: HashMap<String, String>,
}

impl Demangled {
    /// The demangled form of `name` (a Rust or C++ symbol, as blazesym
    /// would give it), or `name` itself.
    fn of(&mut self, name: &str) -> String {
        if let Some(known) = self.names.get(name) {
            return known.clone();
        }
        let demangled = demangle(name);
        self.names.insert(name.to_string(), demangled.clone());
        demangled
    }
}

/// What blazesym's demangling does for a symbol of unknown language: Rust
/// first (its legacy scheme is C++'s with a hash), then C++.
fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|symbol| symbol.demangle().ok())
        .unwrap_or_else(|| name.to_string())
}

impl Namer {
    /// One frame per site, in order. A file's frame without a symbol is
    /// put at the start of its function, as `function_start` finds it in
    /// the file's CFI, so that its samples add up under one name.
    pub(super) fn frames(
        &mut self,
        sites: &[Site],
        spaces: &AddressSpaces,
        function_start: &mut dyn FnMut(&str, u64) -> Option<u64>,
    ) -> Vec<Frame> {
        let mut frames = vec![Frame::default(); sites.len()];
        let mut by_file: BTreeMap<&Arc<str>, Vec<(u64, usize)>> = BTreeMap::new();
        let mut kernel: Vec<(u64, usize)> = Vec::new();
        for (index, site) in sites.iter().enumerate() {
            match site {
                Site::File(path, offset) => match self.remembered(path, *offset, function_start) {
                    Some(frame) => frames[index] = frame,
                    None => by_file.entry(path).or_default().push((*offset, index)),
                },
                Site::Kernel(addr) => kernel.push((*addr, index)),
                Site::Anon(pid, addr) => frames[index] = self.jit_frame(spaces, *pid, *addr),
                Site::Pseudo(name, offset) => {
                    frames[index] = Frame {
                        module: name.to_string(),
                        offset: *offset,
                        symbol: (&**name == "[vdso]")
                            .then(|| vdso_symbol(&self.symbolizer, *offset))
                            .flatten(),
                        kind: FrameKind::Native,
                    };
                }
                Site::Unmapped(addr) => {
                    frames[index] = Frame {
                        offset: *addr,
                        ..Frame::default()
                    }
                }
                // Named already: the code object was read when its frame
                // was first seen.
                Site::Python(name, file, line) => {
                    frames[index] = Frame {
                        module: file.to_string(),
                        offset: u64::from(*line),
                        symbol: Some(name.to_string()),
                        kind: FrameKind::Python,
                    }
                }
                Site::Marker(text) => frames[index] = Frame::marker(text),
            }
        }
        for (path, offsets) in by_file {
            self.name_in_file(path, &offsets, &mut frames, function_start);
        }
        if kernel.is_empty() {
            // blazesym builds its kallsyms resolver at every call.
            return frames;
        }
        let source = Source::Kernel(Kernel {
            // kallsyms is enough for function names; looking for a vmlinux
            // with debug info would cost seconds for nothing.
            vmlinux: MaybeDefault::None,
            ..Default::default()
        });
        let names = resolve(
            &self.symbolizer,
            &source,
            |a: &[u64]| Input::AbsAddr(a),
            &kernel,
        );
        for ((addr, index), named) in kernel.iter().zip(names) {
            frames[*index] = Frame {
                module: "[kernel]".to_string(),
                offset: *addr,
                symbol: named.map(|n| n.name),
                kind: FrameKind::Kernel,
            };
        }
        frames
    }

    /// The frame of `offset` in the file at `path` from a function named
    /// before, if it lies in one ([`Functions`]).
    fn remembered(
        &self,
        path: &str,
        offset: u64,
        function_start: &mut dyn FnMut(&str, u64) -> Option<u64>,
    ) -> Option<Frame> {
        if let Some(name) = self.functions.name(path, offset) {
            return Some(native(path, offset, Some(name.to_string())));
        }
        let start = function_start(path, offset)?;
        self.functions
            .is_unnamed(path, start)
            .then(|| native(path, start, None))
    }

    /// Names `offsets` (each with its index in `frames`) of the file at
    /// `path` with blazesym, and remembers their functions.
    fn name_in_file(
        &mut self,
        path: &Arc<str>,
        offsets: &[(u64, usize)],
        frames: &mut [Frame],
        function_start: &mut dyn FnMut(&str, u64) -> Option<u64>,
    ) {
        let names = resolve(
            &self.symbolizer,
            &Source::Elf(Elf::new(&**path)),
            |a: &[u64]| Input::FileOffset(a),
            offsets,
        );
        for (&(offset, index), named) in offsets.iter().zip(names) {
            frames[index] = match named {
                Some(named) => {
                    let named = Named {
                        name: self.demangled.of(&named.name),
                        ..named
                    };
                    self.functions.learn(path, offset, &named);
                    native(path, offset, Some(named.name))
                }
                None => match function_start(path, offset) {
                    Some(start) => {
                        self.functions.learn_unnamed(path, start);
                        native(path, start, None)
                    }
                    None => native(path, offset, None),
                },
            };
        }
    }

    /// JIT code: named by the perf map of the process that ran it, or of an
    /// ancestor (a forked worker runs code its parent JIT-compiled, which
    /// may be listed only in the parent's perf map).
    fn jit_frame(&mut self, spaces: &AddressSpaces, pid: u32, addr: u64) -> Frame {
        for owner in spaces.ancestors(pid) {
            let found = jit_frame(self.perf_map(owner), addr);
            if found.symbol.is_some() {
                return found;
            }
        }
        jit_frame(&[], addr)
    }

    fn perf_map(&mut self, pid: u32) -> &[PerfMapEntry] {
        let path = format!("/tmp/perf-{pid}.map");
        let len = fs::metadata(&path).map_or(0, |m| m.len());
        let entry = self.perf_maps.entry(pid).or_default();
        if entry.0 != len {
            *entry = (len, read_perf_map(&path));
        }
        &entry.1
    }
}

/// The vDSO is one image per kernel, so an offset into any process's vDSO
/// names the same function as that offset into tprof's own.
fn vdso_symbol(symbolizer: &Symbolizer, offset: u64) -> Option<String> {
    let own = procfs::exec_maps(std::process::id())?;
    let vdso = own.iter().find(|m| &*m.path == "[vdso]")?;
    let source = Source::Process(Process::new(Pid::Slf));
    match symbolizer.symbolize_single(&source, Input::AbsAddr(vdso.start + offset)) {
        Ok(Symbolized::Sym(sym)) => Some(sym.name.into_owned()),
        _ => None,
    }
}

/// A native frame of the file at `path`.
fn native(path: &str, offset: u64, symbol: Option<String>) -> Frame {
    Frame {
        module: path.to_string(),
        offset,
        symbol,
        kind: FrameKind::Native,
    }
}

/// Names for a batch of addresses of one source (not demangled); None
/// where unknown (the frame then shows its module and offset).
fn resolve(
    symbolizer: &Symbolizer,
    source: &Source,
    input: fn(&[u64]) -> Input<&[u64]>,
    addrs: &[(u64, usize)],
) -> Vec<Option<Named>> {
    let raw: Vec<u64> = addrs.iter().map(|(a, _)| *a).collect();
    match symbolizer.symbolize(source, input(&raw)) {
        Ok(found) => found
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => Some(Named {
                    name: sym.name.into_owned(),
                    into: sym.offset as u64,
                    size: sym.size.map(|size| size as u64),
                }),
                Symbolized::Unknown(_) => None,
            })
            .collect(),
        Err(_) => std::iter::repeat_with(|| None).take(addrs.len()).collect(),
    }
}

/// One line of a `/tmp/perf-<pid>.map` file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PerfMapEntry {
    start: u64,
    size: u64,
    name: String,
}

/// The perf map a JIT (or CPython 3.12+'s perf trampoline) wrote.
fn read_perf_map(path: &str) -> Vec<PerfMapEntry> {
    fs::read_to_string(path)
        .map(|text| parse_perf_map(&text))
        .unwrap_or_default()
}

/// `START SIZE name` per line, START and SIZE in hex.
fn parse_perf_map(text: &str) -> Vec<PerfMapEntry> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            Some(PerfMapEntry {
                start: hex(parts.next()?)?,
                size: hex(parts.next()?)?,
                name: parts.next()?.to_string(),
            })
        })
        .collect()
}

fn jit_frame(entries: &[PerfMapEntry], addr: u64) -> Frame {
    // Later lines win: a JIT may reuse an address range.
    let hit = entries
        .iter()
        .rev()
        .find(|e| e.start <= addr && addr < e.start + e.size);
    Frame {
        module: "[anon]".to_string(),
        offset: addr,
        symbol: hit.map(|e| e.name.clone()),
        kind: FrameKind::Jit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_and_lookup() {
        let entries =
            parse_perf_map("7f0000001000 20 py::f:/a.py\n0x7f0000002000 0x10 [jit] g h\nbad\n");
        assert_eq!(entries.len(), 2);
        assert_eq!(
            jit_frame(&entries, 0x7f000000101f).symbol.as_deref(),
            Some("py::f:/a.py")
        );
        assert_eq!(
            jit_frame(&entries, 0x7f0000002001).symbol.as_deref(),
            Some("[jit] g h")
        );
        assert_eq!(jit_frame(&entries, 0x7f0000001020).symbol, None);
    }

    /// C++ and Rust names demangle as blazesym would have them; a C name
    /// stays; each is worked out once.
    #[test]
    fn names_are_demangled_once() {
        let mut names = Demangled::default();
        assert_eq!(names.of("_ZN2at6native5emptyEv"), "at::native::empty()");
        assert_eq!(
            names.of("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(names.of("PyEval_EvalCode"), "PyEval_EvalCode");
        assert_eq!(names.of("_ZN2at6native5emptyEv"), "at::native::empty()");
        assert_eq!(names.names.len(), 3);
    }

    #[test]
    fn exited_child_resolves_through_its_parent() {
        let mut spaces = AddressSpaces::default();
        spaces.maps.insert(
            10,
            vec![Mapping {
                start: 0x1000,
                end: 0x2000,
                offset: 0x400,
                path: "/bin/x".into(),
            }],
        );
        spaces.set_parent(11, 10);
        assert_eq!(
            user_site(&spaces, 11, 0x1010),
            Site::File("/bin/x".into(), 0x410)
        );
        assert_eq!(user_site(&spaces, 12, 0x1010), Site::Unmapped(0x1010));
    }

    #[test]
    fn an_execd_child_is_not_named_by_its_parent() {
        let mut spaces = AddressSpaces::default();
        spaces.add_snapshot(
            10,
            vec![Mapping {
                start: 0x1000,
                end: 0x2000,
                offset: 0,
                path: "/usr/bin/python3".into(),
            }],
        );
        spaces.set_parent(11, 10);
        spaces.exec(11);
        assert_eq!(user_site(&spaces, 11, 0x1010), Site::Unmapped(0x1010));
        assert!(spaces.mappings(11).is_none());
        // Its own snapshot of the new image still names it.
        let ldconfig = Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: "/sbin/ldconfig".into(),
        };
        spaces.add_snapshot(11, vec![ldconfig]);
        assert_eq!(
            user_site(&spaces, 11, 0x1010),
            Site::File("/sbin/ldconfig".into(), 0x10)
        );
    }

    /// A process's stamp moves when its own mappings change, when an
    /// ancestor's that stand for it change, and when its parent link is
    /// made or cut; another process's snapshot, or the same mappings read
    /// again, leave it.
    #[test]
    fn the_stamp_moves_when_what_addresses_resolve_to_may_have() {
        let mapping = |start: u64, path: &str| Mapping {
            start,
            end: start + 0x1000,
            offset: 0,
            path: path.into(),
        };
        let mut spaces = AddressSpaces::default();
        spaces.add_snapshot(10, vec![mapping(0x1000, "/usr/bin/python3")]);
        spaces.add_snapshot(20, vec![mapping(0x1000, "/bin/sh")]);
        let mut last = spaces.stamp(11);
        let mut moved = |spaces: &AddressSpaces, expected: bool, what: &str| {
            let now = spaces.stamp(11);
            assert_eq!(now != last, expected, "{what}");
            last = now;
        };
        spaces.set_parent(11, 10);
        moved(&spaces, true, "linked to its parent");
        spaces.add_snapshot(20, vec![mapping(0x3000, "/bin/sh")]);
        moved(&spaces, false, "another process mapped something");
        spaces.add_snapshot(10, vec![mapping(0x1000, "/usr/bin/python3")]);
        moved(&spaces, false, "the parent's maps read again, unchanged");
        spaces.add_snapshot(10, vec![mapping(0x5000, "/usr/lib/libtorch.so")]);
        moved(&spaces, true, "the parent mapped a library");
        spaces.add_snapshot(11, vec![mapping(0x7000, "/usr/lib/libc.so.6")]);
        moved(&spaces, true, "its own first snapshot");
        spaces.exec(11);
        moved(&spaces, true, "it exec'd");
    }
}

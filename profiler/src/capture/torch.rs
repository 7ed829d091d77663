//! Step detection's probes, userspace half: finds the libtorch (the file
//! holding the autograd engine and `record_function`, `libtorch_cpu.so`)
//! each tracked process has mapped and probes it once per file, for every
//! process mapping it (the kernel program keeps tracked processes only);
//! and says whether pipe transfers are traced, and until when: the pipe
//! program stands down once a tracked process asks its DataLoader for a
//! batch, from when the marks frame the steps. The result is the
//! recording's STEP_PROBES record.
//!
//! A job imports torch after it starts, so the targets are scanned every
//! few drains until one maps libtorch (its first iteration is seconds of
//! imports later), and every process once a second as CUDA's are. The
//! exported functions are probed at once; the end of a `record_function`
//! region, which is not exported, is looked up in the full symbol table on
//! a thread of its own and probed by offset when found (`catch_up`, at
//! the next look), so the first steps of a job may lack it.

use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc;

use anyhow::{Context as _, Result};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use super::cuda::{MappedLibrary, NewLibraries, probed_library};
use super::programs::KernelPrograms;
use tprof_core::recording::StepProbes;

/// True for the libtorch file that holds the probed functions:
/// libtorch_cpu.so (torch ≥ 1.8 splits libtorch into it and the device
/// libraries).
pub(super) fn is_libtorch(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libtorch_cpu") && name.contains(".so")
}

/// The full mangled symbol of each probed function in the library's
/// dynamic symbol table (`profiler_ebpf::mark::ALL`), read lazily (the
/// file is hundreds of megabytes; its symbol table a few).
pub(super) fn mark_symbols(file: &File) -> Result<Vec<(u32, Option<String>)>> {
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache)?;
    let mut out: Vec<(u32, Option<String>)> = profiler_ebpf::mark::ALL
        .iter()
        .map(|&(what, _)| (what, None))
        .collect();
    for sym in elf.dynamic_symbols() {
        if sym.address() == 0 || !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        for (slot, &(_, prefix)) in out.iter_mut().zip(&profiler_ebpf::mark::ALL) {
            if slot.1.is_none() && name.starts_with(prefix) {
                slot.1 = Some(name.to_string());
            }
        }
    }
    Ok(out)
}

/// The file offset of the end of a `record_function` region
/// (`mark::RECORD_FUNCTION_EXIT_SYMBOL`), from the library's full symbol
/// table: half a million symbols and 78 MB of names in torch 2.15, found
/// in about a second (debug build, mapped), so never on the drain's
/// thread.
fn exit_offset(path: &std::path::Path) -> Result<u64> {
    let file = File::open(path)?;
    // Mapped, not read through a cache: half a million names read one
    // pread each took seconds; mapped, page faults bring them in.
    // SAFETY: the mapping is read-only and private; a library file changed
    // under a running job would break the job first.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let elf = object::File::parse(&*map)?;
    let prefix = profiler_ebpf::mark::RECORD_FUNCTION_EXIT_SYMBOL;
    let symbol = elf
        .symbols()
        .find(|s| s.is_definition() && s.name().is_ok_and(|n| n.starts_with(prefix)))
        .with_context(|| format!("{prefix}…: not in the symbol table"))?;
    let section = symbol
        .section_index()
        .and_then(|i| elf.section_by_index(i).ok())
        .context("its section is not in the file")?;
    let (start, _) = section.file_range().context("its section has no bytes")?;
    Ok(symbol.address() - section.address() + start)
}

/// A lookup of the exit symbol, done: the library (as attached) and the
/// offset, or why not.
struct ExitFound {
    library: PathBuf,
    index: usize,
    offset: Result<u64>,
}

pub(super) struct TorchTracer {
    libraries: NewLibraries,
    info: StepProbes,
    dirty: bool,
    /// Lookups of the exit symbol under way, on threads of their own.
    exits: (mpsc::Sender<ExitFound>, mpsc::Receiver<ExitFound>),
}

impl TorchTracer {
    pub(super) fn new(programs: &KernelPrograms) -> TorchTracer {
        let pipes = programs.pipes();
        TorchTracer {
            libraries: NewLibraries::default(),
            info: StepProbes {
                pipes: pipes.is_ok(),
                pipes_status: pipes.err().map(str::to_string),
                pipes_until_ns: None,
                libraries: Vec::new(),
            },
            dirty: true,
            exits: mpsc::channel(),
        }
    }

    /// Looks for the exit symbol of the library just probed (its index in
    /// `info.libraries`) on a thread of low priority: the job is importing
    /// torch meanwhile, and its steps come seconds later.
    fn find_exit(&self, library: PathBuf, index: usize) {
        let sender = self.exits.0.clone();
        let spawned = std::thread::Builder::new()
            .name("tprof-symtab".into())
            .spawn(move || {
                // Only this thread's niceness: below the job's, whose imports
                // run meanwhile, and well below tprof's own (-10).
                // SAFETY: setpriority on the calling thread (who 0) takes
                // plain integers and touches no memory.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) };
                let offset = exit_offset(&library);
                let _ = sender.send(ExitFound {
                    library,
                    index,
                    offset,
                });
            });
        if let Err(e) = spawned {
            eprintln!("tprof: note: cannot look for the end of libtorch's regions: {e}");
        }
    }

    /// What happened since the last look: the region ends whose lookups
    /// finished are probed, and the pipe program's stand-down noted.
    pub(super) fn catch_up(&mut self, programs: &mut KernelPrograms) {
        self.attach_exits(programs);
        self.note_marks_taking_over(programs);
    }

    /// Probes the region ends whose lookups finished.
    fn attach_exits(&mut self, programs: &mut KernelPrograms) {
        while let Ok(found) = self.exits.1.try_recv() {
            let symbol = profiler_ebpf::mark::RECORD_FUNCTION_EXIT_SYMBOL;
            let attached = found.offset.and_then(|offset| {
                programs.attach_torch_at(
                    &found.library,
                    profiler_ebpf::mark::RECORD_FUNCTION_EXIT,
                    offset,
                )
            });
            let Some(library) = self.info.libraries.get_mut(found.index) else {
                continue;
            };
            match attached {
                Ok(()) => library.probed.push(format!("{symbol}…")),
                Err(e) => library.missing.push(format!("{symbol}…: {e:#}")),
            }
            self.dirty = true;
        }
    }

    /// Notes when the pipe program stood down, once it has: a tracked
    /// process asked its DataLoader for a batch, and libtorch's marks frame
    /// the steps from then on (`profiler_ebpf::mark::LOADER_PREFIX`).
    pub(super) fn note_marks_taking_over(&mut self, programs: &KernelPrograms) {
        if !self.info.pipes || self.info.pipes_until_ns.is_some() || !self.found() {
            return;
        }
        if let Some(since) = programs.steps_from_marks_since() {
            self.info.pipes_until_ns = Some(since);
            self.dirty = true;
        }
    }

    /// Whether some libtorch is probed already.
    pub(super) fn found(&self) -> bool {
        !self.info.libraries.is_empty()
    }

    /// Probes the libtorch files `pid` has mapped that no other tracked
    /// process had. A process that is gone has nothing to scan.
    pub(super) fn scan(
        &mut self,
        programs: &mut KernelPrograms,
        pid: u32,
        now_ns: u64,
    ) -> Result<()> {
        let found = self.libraries.in_process(pid, is_libtorch);
        self.probe(programs, pid, now_ns, found)
    }

    /// As [`TorchTracer::scan`], in `pid`'s maps read already.
    pub(super) fn scan_maps(
        &mut self,
        programs: &mut KernelPrograms,
        pid: u32,
        maps: &str,
        now_ns: u64,
    ) -> Result<()> {
        let found = self.libraries.in_maps(pid, maps, is_libtorch);
        self.probe(programs, pid, now_ns, found)
    }

    fn probe(
        &mut self,
        programs: &mut KernelPrograms,
        pid: u32,
        now_ns: u64,
        found: Vec<(MappedLibrary, PathBuf)>,
    ) -> Result<()> {
        for (lib, path) in found {
            let symbols = match File::open(&path)
                .map_err(anyhow::Error::from)
                .and_then(|f| mark_symbols(&f))
            {
                Ok(symbols) => symbols,
                Err(e) => {
                    eprintln!("tprof: note: cannot read {}'s symbols: {e:#}", lib.path);
                    continue;
                }
            };
            let probes = programs.attach_torch(&path, &symbols)?;
            let all = profiler_ebpf::mark::ALL.len();
            let library = probed_library("training steps", lib, pid, now_ns, probes, all);
            self.info.libraries.push(library);
            self.find_exit(path, self.info.libraries.len() - 1);
            self.dirty = true;
        }
        Ok(())
    }

    /// The record, if it changed since the last call.
    pub(super) fn take_changed(&mut self) -> Option<StepProbes> {
        std::mem::take(&mut self.dirty).then(|| self.info.clone())
    }

    pub(super) fn info(&self) -> &StepProbes {
        &self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::cuda::mapped_libraries;

    #[test]
    fn finds_libtorch_once() {
        let maps = "\
7f0000000000-7f0000010000 r--p 00000000 fe:01 42 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
7f0000010000-7f0000080000 r-xp 00010000 fe:01 42 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
7f0000090000-7f00000a0000 r-xp 00000000 fe:01 43 /venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so
";
        let libs = mapped_libraries(maps, is_libtorch);
        assert_eq!(libs.len(), 1);
        assert_eq!(libs[0].inode, 42);
        assert!(!is_libtorch("/x/libtorch.so"));
    }
}

//! The interpreter one process runs ([`Interpreter`]), and how it is
//! found ([`Finder`]): the executable itself when it is static, else the
//! libpython it maps, each interpreter file read once.

use std::{collections::HashMap, fs, os::unix::fs::MetadataExt as _, sync::Arc};

use profiler_ebpf::PyProcInfo;

use super::elf::{self, Build};
use super::layout::{Layout, Unsupported};
use crate::capture::procfs;

/// The interpreter one process runs.
#[derive(Debug, Clone)]
pub(in crate::capture) struct Interpreter {
    pub pid: u32,
    /// The file holding `_PyRuntime`, as `/proc/<pid>/maps` names it.
    pub path: String,
    pub build: Arc<Build>,
    /// `&_PyRuntime` in the process.
    pub runtime: u64,
    /// When it was found (CLOCK_MONOTONIC): an exec event older than this
    /// is the one that brought it in, not one that replaced it.
    pub found_ns: u64,
}

impl Interpreter {
    /// Its layout, or why tprof cannot walk it.
    pub(in crate::capture) fn layout(&self) -> Result<&Layout, &Unsupported> {
        self.build.layout.as_ref()
    }

    /// What the kernel needs to walk its threads, when it can.
    pub(in crate::capture) fn proc_info(&self) -> Option<PyProcInfo> {
        let layout = self.layout().ok()?;
        Some(PyProcInfo {
            runtime: self.runtime,
            ..layout.info
        })
    }

    /// Whether a native frame at file offset `offset` of `path` is in the
    /// eval loop: where Python frames go.
    pub(in crate::capture) fn is_eval_frame(&self, path: &str, offset: u64) -> bool {
        path == self.path
            && self
                .build
                .eval_ranges
                .iter()
                .any(|&(start, end)| start <= offset && offset < end)
    }
}

/// Finds the interpreters of processes, reading each interpreter file once.
#[derive(Default)]
pub(super) struct Finder {
    /// By (device, inode): the build in the file, None for a file that
    /// holds none.
    builds: HashMap<(u64, u64), Option<Arc<Build>>>,
}

impl Finder {
    /// The interpreter `pid` runs, or None when it maps none (not Python,
    /// not yet: a just exec'd python maps its libpython a moment later, or
    /// gone).
    pub(super) fn find(&mut self, pid: u32) -> Option<Interpreter> {
        self.find_in(pid, &procfs::exec_maps(pid)?)
    }

    /// As [`Finder::find`], in `pid`'s executable mappings read already.
    pub(super) fn find_in(&mut self, pid: u32, maps: &[procfs::Mapping]) -> Option<Interpreter> {
        for m in maps.iter().filter(|m| is_candidate(&m.path)) {
            let file = format!("/proc/{pid}/root{}", m.path);
            let Ok(meta) = fs::metadata(&file) else {
                continue;
            };
            let build = self
                .builds
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| {
                    map_file(&file)
                        .and_then(|data| elf::inspect(&data, &m.path))
                        .map(Arc::new)
                })
                .clone();
            let Some(build) = build else { continue };
            let Some(bias) = build.load_bias(m.start, m.offset) else {
                continue;
            };
            return Some(Interpreter {
                pid,
                path: m.path.to_string(),
                runtime: bias + build.runtime_vaddr,
                build,
                found_ns: crate::capture::clock::monotonic_ns(),
            });
        }
        None
    }
}

/// A file's bytes, mapped: only the pages inspecting it reads (its symbol
/// tables, a few words of data) come in.
fn map_file(path: &str) -> Option<memmap2::Mmap> {
    let file = fs::File::open(path).ok()?;
    // SAFETY: a file a process runs as its code: changing it in place would
    // break that process too, and a truncation is a SIGBUS tprof shares
    // with it. Nothing here outlives the inspection.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

/// A file that may hold CPython: `python3.11`, `libpython3.11.so.1.0`,
/// and the like (the interpreter, embedded or not, is always called so).
fn is_candidate(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.starts_with('/') && name.contains("python") && !path.ends_with(" (deleted)")
}

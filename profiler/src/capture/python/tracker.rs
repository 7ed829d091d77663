//! Which tracked processes run CPython, kept current as the job forks,
//! execs and starts processes: capture's tracker asks [`PythonTracker::scan`]
//! about each process when it is tracked, appears or execs, on every drain
//! while it is young (a just exec'd python maps its libpython a moment
//! later), and once a second after that; what is found goes to the kernel
//! (`PY_PROCS`) and to the resolve stage.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::interpreter::{Finder, Interpreter};
use super::layout::Version;
use crate::capture::procfs::Mapping;

#[derive(Default)]
pub(crate) struct PythonTracker {
    finder: Finder,
    /// Processes whose interpreter is known.
    known: HashMap<u32, Arc<Interpreter>>,
    /// Notes already printed (one per kind of problem, not per process).
    noted: BTreeSet<String>,
}

impl PythonTracker {
    /// Looks for `pid`'s interpreter unless it is known already: Some when
    /// found now.
    pub(crate) fn scan(&mut self, pid: u32) -> Option<Arc<Interpreter>> {
        if self.known.contains_key(&pid) {
            return None;
        }
        let interp = Arc::new(self.finder.find(pid)?);
        self.known.insert(pid, Arc::clone(&interp));
        Some(interp)
    }

    /// As [`PythonTracker::scan`], in `pid`'s executable mappings read
    /// already.
    pub(crate) fn scan_in(&mut self, pid: u32, maps: &[Mapping]) -> Option<Arc<Interpreter>> {
        if self.known.contains_key(&pid) {
            return None;
        }
        let interp = Arc::new(self.finder.find_in(pid, maps)?);
        self.known.insert(pid, Arc::clone(&interp));
        Some(interp)
    }

    /// A fork's interpreter: its parent's, at the same addresses (a fork
    /// copies the address space). None when the parent's is not known (or
    /// the child's is already). It holds from the fork at `forked_ns`, not
    /// from now: an exec after the fork, drained after this, replaces it
    /// (a forkserver's fork-then-exec often falls across two drains).
    pub(crate) fn inherit(
        &mut self,
        child: u32,
        parent: u32,
        forked_ns: u64,
    ) -> Option<Arc<Interpreter>> {
        if self.known.contains_key(&child) {
            return None;
        }
        let interp = Arc::new(Interpreter {
            pid: child,
            found_ns: forked_ns,
            ..Interpreter::clone(self.known.get(&parent)?)
        });
        self.known.insert(child, Arc::clone(&interp));
        Some(interp)
    }

    /// Whether `pid`'s interpreter is known.
    pub(crate) fn knows(&self, pid: u32) -> bool {
        self.known.contains_key(&pid)
    }

    /// `pid` exec'd or was just created at `ts`: its interpreter, if any,
    /// is to be looked up again, unless it was found after that.
    pub(crate) fn forget(&mut self, pid: u32, ts: u64) {
        if self.known.get(&pid).is_some_and(|i| i.found_ns < ts) {
            self.known.remove(&pid);
        }
    }

    /// Says once per kind of problem why a process gets no Python frames:
    /// `by_fsbase` false when the kernel cannot tell 3.10's threads apart.
    pub(crate) fn note(&mut self, interp: &Interpreter, by_fsbase: bool) {
        let why = match interp.layout() {
            Err(e) => format!(
                "process {} runs {e}: its stacks carry [python: unknown version] instead of \
                 Python frames",
                interp.pid
            ),
            Ok(l) if l.version == Version::new(3, 10) && !by_fsbase => format!(
                "process {} runs CPython 3.10, whose threads tprof tells apart by their fsbase, \
                 which this kernel's BTF does not locate: no Python frames for it",
                interp.pid
            ),
            Ok(_) => return,
        };
        let kind: String = why.split_once("runs ").map_or(&*why, |(_, k)| k).into();
        if self.noted.insert(kind) {
            eprintln!("tprof: note: {why}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::python::elf::Build;
    use crate::capture::python::layout::{self, Version};

    fn interpreter(pid: u32, found_ns: u64) -> Arc<Interpreter> {
        Arc::new(Interpreter {
            pid,
            path: "/usr/bin/python3.11".into(),
            build: Arc::new(Build {
                layout: layout::layout(Version::new(3, 11), None),
                runtime_vaddr: 0,
                eval_ranges: Vec::new(),
                segments: Vec::new(),
                fixed_address: false,
            }),
            runtime: 0x7f00_0000,
            found_ns,
        })
    }

    /// A forkserver forks, and execs before the drain that saw its fork
    /// is done with it: the exec, drained next, is later than the fork
    /// though earlier than the inheriting, and replaces the parent's
    /// interpreter, whose addresses the new image does not share.
    #[test]
    fn an_exec_after_the_fork_replaces_the_inherited_interpreter() {
        let mut tracker = PythonTracker::default();
        tracker.known.insert(10, interpreter(10, 100));
        let inherited = tracker.inherit(11, 10, 1_000).expect("the parent's");
        assert_eq!((inherited.pid, inherited.found_ns), (11, 1_000));
        tracker.forget(11, 1_500);
        assert!(
            !tracker.knows(11),
            "the exec'd image kept its parent's interpreter"
        );
        // An exec before the fork (the parent's own) is not the child's.
        let again = tracker.inherit(12, 10, 2_000).expect("the parent's");
        tracker.forget(12, 1_900);
        assert!(tracker.knows(again.pid));
    }
}

//! Python frames in the resolve stage: pairs each [`PyStackEvent`] with
//! the sample or switch-out it was walked for, names its code objects
//! (once per code object and process) and splices the named frames into
//! that event's native user stack. The stack resolver (`capture::stacks`)
//! calls in here; everything Python about a stack is decided here.
//!
//! A switch-out within `STACK_REUSE_NS` of its thread's last walk for the
//! same reason reuses that walk in the kernel, native and Python frames
//! alike, and comes without a record: it gets the Python frames of that
//! walk, if its native stacks are the ones that walk took (the kernel
//! drops the native stack of a walk whose Python record it could not
//! emit, so a lost record never lends its place to another).

use std::{rc::Rc, sync::Arc};

// The resolve stage looks these up for every switch-out and sample.
use foldhash::HashMap;

use profiler_ebpf::{
    PyStackEvent,
    python::{PY_FAULT, PY_NO_THREAD, PY_TRUNCATED, PyFrame},
    stack_kind,
};

use super::code::{CodeInfo, read_code};
use super::interpreter::Interpreter;
use super::memory::ProcessMemory;
use super::splice::{PyEntry, splice};
use crate::capture::stacks::Interner;
use crate::capture::symbols::{Site, ancestors};

use tprof_core::recording::stacks::python_marker as marker;

/// One walk's Python frames, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyStack {
    pub flags: u16,
    pub frames: Vec<PyFrame>,
}

/// The Python half of the stack resolver.
#[derive(Default)]
pub(crate) struct PythonFrames {
    /// Each process's interpreter, as the session found it.
    interpreters: HashMap<u32, Arc<Interpreter>>,
    /// child → parent: a forked child runs its parent's interpreter, and
    /// its code objects from before the fork sit at the same addresses.
    parents: HashMap<u32, u32>,
    /// Per thread: the record waiting for its event (timestamp, stack).
    pending: HashMap<u32, (u64, Rc<PyStack>)>,
    /// Per (thread, off-CPU kind): its last walked switch-out's native
    /// stack ids and Python frames, which reusing switch-outs get.
    last_walk: HashMap<(u32, u32), (i32, i32, Rc<PyStack>)>,
    /// (process, code object, fingerprint) → its names, None when unreadable.
    codes: HashMap<(u32, u64, u32), Option<Arc<CodeInfo>>>,
    /// (oldest known ancestor, code object, fingerprint) → the names a
    /// descendant read: its siblings (the workers of other epochs) have
    /// the same code at the same address, from before their forks. Never
    /// consulted for the ancestor itself, whose memory went its own way.
    family: HashMap<(u32, u64, u32), Arc<CodeInfo>>,
    /// (process, false, code object, fingerprint, instruction) → frame id;
    /// for a process forked from another, (its oldest known ancestor, true,
    /// …), shared with its siblings as `family` shares code objects: every
    /// DataLoader worker of every epoch names the same frames. A family's
    /// holds named frames only: one a worker could not read may be
    /// readable in the next.
    frame_ids: HashMap<FrameKey, u32>,
}

/// A [`PythonFrames::frame_ids`] key.
type FrameKey = (u32, bool, u64, u32, i32);

/// Python frames whose ids [`PythonFrames`] keeps before it starts again.
const FRAME_IDS_LIMIT: usize = 1 << 18;

impl PythonFrames {
    pub(crate) fn add_interpreter(&mut self, interp: Arc<Interpreter>) {
        self.interpreters.insert(interp.pid, interp);
    }

    pub(crate) fn set_parent(&mut self, child: u32, parent: u32) {
        self.parents.insert(child, parent);
    }

    /// `tgid` exec'd at `ts`: what was known about its memory is void,
    /// except an interpreter found after the exec (the session looks at a
    /// just exec'd process every few milliseconds, before its exec event
    /// is drained).
    pub(crate) fn exec(&mut self, tgid: u32, ts: u64) {
        if self
            .interpreters
            .get(&tgid)
            .is_some_and(|i| i.found_ns < ts)
        {
            self.interpreters.remove(&tgid);
        }
        self.parents.remove(&tgid);
        self.codes.retain(|&(pid, _, _), _| pid != tgid);
        self.family.retain(|&(root, _, _), _| root != tgid);
        self.frame_ids.retain(|&(pid, ..), _| pid != tgid);
    }

    /// A thread exited: its pending and reusable walks go with it.
    pub(crate) fn exit(&mut self, tid: u32) {
        self.pending.remove(&tid);
        self.last_walk.retain(|&(t, _), _| t != tid);
    }

    /// Keeps a [`PyStackEvent`] record (with its frames) for its event.
    pub(crate) fn take_record(&mut self, record: &[u8]) {
        let Some(head) = record
            .get(..size_of::<PyStackEvent>())
            .map(bytemuck::pod_read_unaligned::<PyStackEvent>)
        else {
            return;
        };
        let frames = record[size_of::<PyStackEvent>()..]
            .chunks_exact(size_of::<PyFrame>())
            .take(usize::from(head.frames))
            .map(bytemuck::pod_read_unaligned)
            .collect();
        let stack = PyStack {
            flags: head.flags,
            frames,
        };
        self.pending
            .insert(head.tid, (head.hdr.ts_ns, Rc::new(stack)));
    }

    /// The Python frames of an on-CPU sample of `tid` at `ts`, whose native
    /// stacks are `user` and `kernel` (kernel ids). They are the thread's
    /// last walk for a preemption too: the kernel lends a sample's stacks to
    /// the preemptions that follow it (`lend_to_preemption`), with no
    /// frames of their own.
    pub(crate) fn for_sample(
        &mut self,
        tid: u32,
        ts: u64,
        user: i32,
        kernel: i32,
    ) -> Option<Rc<PyStack>> {
        let stack = self.paired(tid, ts)?;
        self.last_walk.insert(
            (tid, stack_kind::RUNNABLE),
            (user, kernel, Rc::clone(&stack)),
        );
        Some(stack)
    }

    /// The Python frames of a switch-out of `tid` at `ts` for off-CPU kind
    /// `kind`, whose native stacks are `user` and `kernel` (kernel ids).
    pub(crate) fn for_switch(
        &mut self,
        tid: u32,
        ts: u64,
        kind: u32,
        user: i32,
        kernel: i32,
    ) -> Option<Rc<PyStack>> {
        if self.pending.is_empty() && self.last_walk.is_empty() {
            return None;
        }
        if let Some(stack) = self.paired(tid, ts) {
            self.last_walk
                .insert((tid, kind), (user, kernel, Rc::clone(&stack)));
            return Some(stack);
        }
        match self.last_walk.get(&(tid, kind)) {
            Some((u, k, stack)) if *u == user && *k == kernel => Some(Rc::clone(stack)),
            _ => None,
        }
    }

    /// The pending record of `tid` if it was walked at `ts`.
    fn paired(&mut self, tid: u32, ts: u64) -> Option<Rc<PyStack>> {
        match self.pending.remove(&tid) {
            Some((at, stack)) if at == ts => Some(stack),
            // A record for a later event (its event is still in the ring
            // buffer): keep waiting.
            Some((at, stack)) if at > ts => {
                self.pending.insert(tid, (at, stack));
                None
            }
            _ => None,
        }
    }

    /// The user stack of process `tgid`, outermost first, as frame ids of
    /// `frames`: its native frames (None when the kernel could not take
    /// them) with `python`'s frames spliced in, and a marker where the walk
    /// fell short. None when there is nothing at all.
    pub(crate) fn user_frames(
        &mut self,
        tgid: u32,
        native: Option<&[u32]>,
        python: Option<&PyStack>,
        frames: &mut Interner,
    ) -> Option<Vec<u32>> {
        let interp = self.interpreter(tgid);
        if let Some(interp) = &interp
            && interp.layout().is_err()
        {
            let mut out = vec![frames.intern(Site::Marker(marker::UNKNOWN_VERSION))];
            out.extend_from_slice(native?);
            return Some(out);
        }
        let Some(python) = python.filter(|p| p.flags & PY_NO_THREAD == 0) else {
            return native.map(<[u32]>::to_vec);
        };
        let mut out = Vec::new();
        if python.flags & (PY_TRUNCATED | PY_FAULT) != 0 {
            out.push(frames.intern(Site::Marker(marker::TRUNCATED)));
        }
        let root = self.root(tgid);
        let entries: Vec<PyEntry<u32>> = python
            .frames
            .iter()
            .map(|frame| PyEntry {
                site: self.frame_id(tgid, root, frame, frames),
                boundary: frame.is_boundary(),
            })
            .collect();
        let is_eval = |&id: &u32| match (frames.site(id), &interp) {
            (Site::File(path, offset), Some(interp)) => interp.is_eval_frame(path, *offset),
            _ => false,
        };
        out.extend(splice(native.unwrap_or_default(), &entries, is_eval));
        (!out.is_empty()).then_some(out)
    }

    /// The frame id of one Python frame: its code object named, at its
    /// line. Remembered by (process, code object, fingerprint, instruction),
    /// a forked process's by its oldest known ancestor's (`frame_ids`): the
    /// same frames come in walk after walk, and naming one (its code object
    /// found, its line looked up, its site's strings hashed) was most of
    /// what splicing cost.
    fn frame_id(&mut self, tgid: u32, root: u32, frame: &PyFrame, frames: &mut Interner) -> u32 {
        let family = root != tgid;
        let key = (
            root,
            family,
            frame.code_object(),
            frame.fingerprint,
            frame.lasti,
        );
        if let Some(&id) = self.frame_ids.get(&key) {
            return id;
        }
        if self.frame_ids.len() >= FRAME_IDS_LIMIT {
            self.frame_ids.clear();
        }
        let site = self.site(tgid, frame);
        let named = matches!(site, Site::Python(..));
        let id = frames.intern(site);
        if named || !family {
            self.frame_ids.insert(key, id);
        }
        id
    }

    /// `pid`'s oldest known ancestor (itself when it has no known parent),
    /// as [`Self::code`] finds it for `family`.
    fn root(&self, pid: u32) -> u32 {
        ancestors(&self.parents, pid).last().unwrap_or(pid)
    }

    /// Whether every user stack of `tgid` gets a marker: it runs a CPython
    /// tprof cannot walk.
    pub(crate) fn marks(&self, tgid: u32) -> bool {
        self.interpreter(tgid)
            .is_some_and(|interp| interp.layout().is_err())
    }

    /// The interpreter of `tgid`, or of its nearest ancestor that has one
    /// known (a worker forked before capture looked at it).
    fn interpreter(&self, tgid: u32) -> Option<Arc<Interpreter>> {
        ancestors(&self.parents, tgid).find_map(|pid| self.interpreters.get(&pid).cloned())
    }

    /// The site of one frame: its code object named, at its line.
    fn site(&mut self, tgid: u32, frame: &PyFrame) -> Site {
        match self.code(tgid, frame) {
            Some(code) => Site::Python(
                Arc::clone(&code.name),
                Arc::clone(&code.file),
                code.line(frame.lasti),
            ),
            None => Site::Marker(marker::UNREADABLE),
        }
    }

    /// The names of a frame's code object, read from the process or, when
    /// it cannot be read there (it exited), from its ancestors: code
    /// objects from before a fork sit at the same address, under the same
    /// fingerprint.
    fn code(&mut self, tgid: u32, frame: &PyFrame) -> Option<Arc<CodeInfo>> {
        let key = (tgid, frame.code_object(), frame.fingerprint);
        if let Some(known) = self.codes.get(&key) {
            return known.clone();
        }
        let lineage: Vec<u32> = ancestors(&self.parents, tgid).collect();
        // Named in an ancestor or a sibling already: a DataLoader's
        // workers, forked anew every epoch, run the trainer's code objects
        // and each other's, and reading each again from every new worker
        // was a tenth of tprof's time on the real job.
        let root = *lineage.last().expect("not empty");
        let family = (root, frame.code_object(), frame.fingerprint);
        let inherited = lineage[1..]
            .iter()
            .find_map(|&pid| {
                let code = frame.code_object();
                self.codes.get(&(pid, code, frame.fingerprint))?.clone()
            })
            .or_else(|| self.family.get(&family).cloned().filter(|_| root != tgid));
        if let Some(code) = inherited {
            self.codes.insert(key, Some(Arc::clone(&code)));
            return Some(code);
        }
        let found = lineage.into_iter().find_map(|pid| {
            let interp = self.interpreter(pid)?;
            let layout = interp.layout().ok()?;
            read_code(
                ProcessMemory { pid },
                &layout.info,
                &layout.code,
                frame.code_object(),
                frame.fingerprint,
            )
            .map(Arc::new)
        });
        if let Some(code) = &found
            && root != tgid
        {
            self.family.insert(family, Arc::clone(code));
        }
        self.codes.insert(key, found.clone());
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::python::elf::Build;
    use crate::capture::python::layout::{self, Unsupported, Version};
    use crate::capture::python::lines::LineMap;
    use profiler_ebpf::{EventHeader, kind, python::PY_BOUNDARY};

    /// No such process: its memory cannot be read.
    const GONE: u32 = 0x3fff_fff0;

    /// [`PythonFrames::user_frames`] of native sites, as sites. `frames`
    /// lives as long as `py`, which remembers the ids it gave.
    fn user_sites(
        (py, frames): (&mut PythonFrames, &mut Interner),
        tgid: u32,
        native: Option<&[Site]>,
        python: Option<&PyStack>,
    ) -> Option<Vec<Site>> {
        let native: Option<Vec<u32>> =
            native.map(|sites| sites.iter().map(|s| frames.intern(s.clone())).collect());
        let ids = py.user_frames(tgid, native.as_deref(), python, frames)?;
        Some(ids.iter().map(|&id| frames.site(id).clone()).collect())
    }

    fn interpreter(pid: u32, layout: Result<layout::Layout, Unsupported>) -> Arc<Interpreter> {
        Arc::new(Interpreter {
            pid,
            path: "/usr/lib/libpython3.11.so.1.0".into(),
            build: Arc::new(Build {
                layout,
                runtime_vaddr: 0,
                eval_ranges: vec![(0x1000, 0x2000)],
                segments: Vec::new(),
                fixed_address: false,
            }),
            runtime: 0,
            found_ns: 0,
        })
    }

    fn record(tid: u32, ts: u64, flags: u16, frames: &[PyFrame]) -> Vec<u8> {
        let head = PyStackEvent {
            hdr: EventHeader {
                ts_ns: ts,
                kind: kind::PY_STACK,
                cpu: 0,
                len: (32 + 16 * frames.len()) as u32,
            },
            tid,
            tgid: GONE,
            flags,
            frames: frames.len() as u16,
            _pad: 0,
        };
        let mut bytes = bytemuck::bytes_of(&head).to_vec();
        for f in frames {
            bytes.extend_from_slice(bytemuck::bytes_of(f));
        }
        bytes
    }

    const FRAME: PyFrame = PyFrame {
        code: 0x7f00_0000_1000 | PY_BOUNDARY,
        lasti: 3,
        fingerprint: 7,
    };

    #[test]
    fn records_pair_with_their_event_once() {
        let mut py = PythonFrames::default();
        py.take_record(&record(5, 100, 0, &[FRAME]));
        assert_eq!(
            py.for_sample(5, 90, 11, -1),
            None,
            "an earlier event keeps it waiting"
        );
        let stack = py.for_sample(5, 100, 11, -1).expect("paired");
        assert_eq!(stack.frames, [FRAME]);
        assert_eq!(py.for_sample(5, 100, 11, -1), None);
        // A record whose event never came is dropped by a later event.
        py.take_record(&record(5, 200, 0, &[FRAME]));
        assert_eq!(py.for_sample(5, 300, 13, -1), None);
        assert_eq!(py.for_sample(5, 200, 13, -1), None);
    }

    /// A preemption that borrows a sample's stacks gets its frames; one
    /// with its own walk, or other ids, does not.
    #[test]
    fn a_preemption_gets_the_frames_of_the_sample_it_borrows() {
        let mut py = PythonFrames::default();
        let runnable = stack_kind::RUNNABLE;
        py.take_record(&record(5, 100, 0, &[FRAME]));
        let sampled = py.for_sample(5, 100, 21, -1).expect("paired");
        assert_eq!(py.for_switch(5, 120, runnable, 21, -1), Some(sampled));
        assert_eq!(py.for_switch(5, 130, runnable, 22, -1), None);
        assert_eq!(py.for_switch(5, 140, stack_kind::SLEEP, 21, -1), None);
    }

    #[test]
    fn an_exec_forgets_only_an_interpreter_found_before_it() {
        let mut py = PythonFrames::default();
        let mut found = |at: u64| {
            let mut interp = (*interpreter(7, Err(Unsupported::UnknownVersion))).clone();
            interp.found_ns = at;
            py.add_interpreter(Arc::new(interp));
        };
        found(500);
        py.exec(7, 400);
        assert!(py.marks(7), "found after the exec: the new image's");
        py.exec(7, 600);
        assert!(!py.marks(7), "found before the exec: the old image's");
    }

    #[test]
    fn a_reused_switch_out_gets_the_walk_it_reuses() {
        let mut py = PythonFrames::default();
        py.take_record(&record(5, 100, 0, &[FRAME]));
        let walked = py.for_switch(5, 100, 3, 11, 12).expect("paired");
        // Within STACK_REUSE_NS the kernel sends the same ids and no record.
        assert_eq!(py.for_switch(5, 150, 3, 11, 12), Some(Rc::clone(&walked)));
        // Another reason, or other native stacks (a walk whose record was
        // lost): nothing borrowed.
        assert_eq!(py.for_switch(5, 160, 6, 11, 12), None);
        assert_eq!(py.for_switch(5, 170, 3, 13, 12), None);
        py.exit(5);
        assert_eq!(py.for_switch(5, 180, 3, 11, 12), None);
    }

    #[test]
    fn unreadable_code_objects_and_cut_walks_are_marked() {
        let (mut py, mut frames) = (PythonFrames::default(), Interner::default());
        py.add_interpreter(interpreter(GONE, layout::layout(Version::new(3, 11), None)));
        let native = [Site::Kernel(1)];
        let stack = PyStack {
            flags: PY_TRUNCATED,
            frames: vec![FRAME],
        };
        let sites = user_sites((&mut py, &mut frames), GONE, Some(&native), Some(&stack)).unwrap();
        assert_eq!(
            sites,
            [
                Site::Marker(marker::TRUNCATED),
                Site::Marker(marker::UNREADABLE),
                Site::Kernel(1)
            ]
        );
        // A thread without Python frames keeps its native stack alone.
        let none = PyStack {
            flags: PY_NO_THREAD,
            frames: Vec::new(),
        };
        assert_eq!(
            user_sites((&mut py, &mut frames), GONE, Some(&native), Some(&none)).unwrap(),
            native
        );
        // Python frames without a native stack still make a stack.
        let sites = user_sites((&mut py, &mut frames), GONE, None, Some(&stack)).unwrap();
        assert_eq!(sites.len(), 2);
    }

    /// Workers forked from one trainer share the ids of the frames one of
    /// them named; a frame one could not name is not lent to the others,
    /// and the trainer's own frames are its own.
    #[test]
    fn forked_siblings_share_named_frames() {
        let (mut py, mut frames) = (PythonFrames::default(), Interner::default());
        let (trainer, first, second) = (GONE, GONE + 1, GONE + 2);
        py.add_interpreter(interpreter(
            trainer,
            layout::layout(Version::new(3, 11), None),
        ));
        py.set_parent(first, trainer);
        py.set_parent(second, trainer);
        let stack = PyStack {
            flags: 0,
            frames: vec![FRAME],
        };
        // Unreadable everywhere (GONE has no memory): named in none.
        let unread = py.user_frames(first, None, Some(&stack), &mut frames);
        assert!(py.frame_ids.is_empty(), "a marker is not lent");
        // The trainer's code object, read: the first worker names the
        // frame through it, and the second gets that id from the family.
        let code = CodeInfo {
            name: "step".into(),
            file: "train.py".into(),
            lines: LineMap::new(layout::LineTable::Locations, &[], 7),
        };
        let key = (trainer, FRAME.code_object(), FRAME.fingerprint);
        py.codes.insert(key, Some(Arc::new(code)));
        py.codes.retain(|&(pid, ..), _| pid == trainer);
        let named = py.user_frames(first, None, Some(&stack), &mut frames);
        assert_ne!(named, unread);
        assert_eq!(py.frame_ids.len(), 1);
        py.codes.clear();
        assert_eq!(
            py.user_frames(second, None, Some(&stack), &mut frames),
            named
        );
        // The trainer's own frame: its own key, its own naming (its code
        // unreadable now).
        assert_eq!(
            py.user_frames(trainer, None, Some(&stack), &mut frames),
            unread
        );
        py.exec(trainer, u64::MAX);
        assert!(py.frame_ids.is_empty());
    }

    /// A Python frame is named once per process and instruction, and
    /// named anew after its process execs (other code at the address).
    #[test]
    fn a_frames_id_is_remembered_until_its_process_execs() {
        let (mut py, mut frames) = (PythonFrames::default(), Interner::default());
        py.add_interpreter(interpreter(GONE, layout::layout(Version::new(3, 11), None)));
        let stack = PyStack {
            flags: 0,
            frames: vec![FRAME],
        };
        let first = py.user_frames(GONE, None, Some(&stack), &mut frames);
        assert_eq!(first, py.user_frames(GONE, None, Some(&stack), &mut frames));
        assert_eq!(py.frame_ids.len(), 1);
        py.exec(GONE, u64::MAX);
        assert!(py.frame_ids.is_empty());
    }

    #[test]
    fn an_unknown_version_marks_every_stack_of_the_process_and_its_children() {
        let (mut py, mut frames) = (PythonFrames::default(), Interner::default());
        py.add_interpreter(interpreter(
            40,
            Err(Unsupported::Version(Version::new(3, 9))),
        ));
        py.set_parent(41, 40);
        assert!(py.marks(41));
        assert!(!py.marks(42));
        let native = [Site::Kernel(1)];
        assert_eq!(
            user_sites((&mut py, &mut frames), 41, Some(&native), None).unwrap(),
            [Site::Marker(marker::UNKNOWN_VERSION), Site::Kernel(1)]
        );
    }
}

//! Turns the kernel's stack ids in each drained event into the recording's
//! own: reads each new id's addresses from the stack map once, names its
//! frames ([`Namer`]), interns frames and stacks, and has the new ones
//! written (FRAMES, then STACK_DEFS) before the events that use them. The
//! events keep their bytes but for the stack ids, which now index the
//! recording's STACK_DEFS, so the file needs nothing from this machine.
//! The Python frames the kernel walked for an event arrive as a record
//! just before it: [`PythonFrames`] pairs them, names them and splices them
//! into the event's user stack; the record itself is not written.

use std::{
    collections::HashMap,
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Result;
use profiler_ebpf::{EventHeader, ExitEvent, NO_STACK_KIND, SampleEvent, SwitchEvent, kind};
use tprof_core::recording::{FrameBatch, StackBatch, record};

use super::file::RecordingFile;
use super::procfs::{self, Mapping};
use super::programs::StackSource;
use super::python::Interpreter;
use super::python::frames::{PyStack, PythonFrames};
use super::symbols::{AddressSpaces, Namer, Site, return_site, user_site};

/// A recording stack id: an index into its STACK_DEFS, or -1 for none.
type StackId = i32;

/// Everything needed to turn kernel stack ids into the recording's.
pub struct StackResolver {
    source: StackSource,
    namer: Namer,
    spaces: AddressSpaces,
    /// Site → frame id.
    frames: HashMap<Site, u32>,
    /// Sites interned since the last dictionary write, in id order.
    new_frames: Vec<Site>,
    /// Frame ids (outermost first) → stack id.
    stacks: HashMap<Vec<u32>, u32>,
    /// Stacks interned since the last dictionary write, in id order.
    new_stacks: Vec<Vec<u32>>,
    /// (tgid, kernel user-stack id) → recording stack id. Keyed by process
    /// too: the kernel shares one id between processes whose addresses are
    /// equal, which name different code when their mappings differ.
    user: HashMap<(u32, i32), StackId>,
    /// (tgid, kernel user-stack id) → its sites, outermost first (None
    /// when the stack map no longer held it), for splicing.
    native: HashMap<(u32, i32), Option<Rc<Vec<Site>>>>,
    /// (tgid, kernel user-stack id, Python frames) → recording stack id.
    spliced: HashMap<(u32, i32, Option<Rc<PyStack>>), StackId>,
    python: PythonFrames,
    /// (kernel stack id, walked at a switch-out) → recording stack id.
    kernel: HashMap<(i32, bool), StackId>,
    /// Stack ids the map no longer held when read (counted as failed).
    unreadable: u64,
    /// When each process's mappings were last re-read for an unknown
    /// address.
    reread: HashMap<u32, Instant>,
}

/// How often one process's mappings may be re-read for an unknown address.
const REREAD_EVERY: Duration = Duration::from_millis(100);

impl StackResolver {
    pub fn new(source: StackSource) -> StackResolver {
        StackResolver {
            source,
            namer: Namer::default(),
            spaces: AddressSpaces::default(),
            frames: HashMap::new(),
            new_frames: Vec::new(),
            stacks: HashMap::new(),
            new_stacks: Vec::new(),
            user: HashMap::new(),
            native: HashMap::new(),
            spliced: HashMap::new(),
            python: PythonFrames::default(),
            kernel: HashMap::new(),
            unreadable: 0,
            reread: HashMap::new(),
        }
    }

    pub fn add_maps(&mut self, pid: u32, maps: Vec<Mapping>) {
        self.spaces.add_snapshot(pid, maps);
    }

    pub fn set_parent(&mut self, child: u32, parent: u32) {
        self.spaces.set_parent(child, parent);
        self.python.set_parent(child, parent);
    }

    /// A process's CPython, whose frames it names and splices in.
    pub fn add_interpreter(&mut self, interp: Arc<Interpreter>) {
        self.python.add_interpreter(interp);
    }

    /// Stack ids that named nothing when read.
    pub fn unreadable(&self) -> u64 {
        self.unreadable
    }

    /// Rewrites the stack ids of one event (a ring-buffer record) from the
    /// kernel's to the recording's, interning what is new. Other events
    /// are left as they are. False for a record that is not to be written
    /// (Python frames, now part of the stack of the event they came for).
    pub fn rewrite(&mut self, event: &mut [u8]) -> bool {
        let Some(hdr) = read::<EventHeader>(event) else {
            return true;
        };
        match hdr.kind {
            kind::PY_STACK => {
                self.python.take_record(event);
                return false;
            }
            kind::SWITCH if event.len() >= size_of::<SwitchEvent>() => {
                let mut e: SwitchEvent = read(event).expect("length checked");
                if e.prev_kind == NO_STACK_KIND {
                    return true;
                }
                let python = self.python.for_switch(
                    e.prev_tid,
                    hdr.ts_ns,
                    e.prev_kind,
                    e.prev_user_stack,
                    e.prev_kernel_stack,
                );
                e.prev_user_stack = self.user_stack(e.prev_tgid, e.prev_user_stack, python);
                e.prev_kernel_stack = self.kernel_stack(e.prev_kernel_stack, true);
                write(event, &e);
            }
            kind::SAMPLE if event.len() >= size_of::<SampleEvent>() => {
                let mut e: SampleEvent = read(event).expect("length checked");
                let python = self.python.for_sample(e.tid, hdr.ts_ns);
                e.user_stack = self.user_stack(e.tgid, e.user_stack, python);
                e.kernel_stack = self.kernel_stack(e.kernel_stack, false);
                write(event, &e);
            }
            kind::EXEC => {
                if let Some(e) = read::<profiler_ebpf::ExecEvent>(event) {
                    self.python.exec(e.tgid);
                }
            }
            kind::EXIT => {
                if let Some(e) = read::<ExitEvent>(event) {
                    self.python.exit(e.tid);
                }
            }
            _ => {}
        }
        true
    }

    /// Writes the frames and stacks interned since the last call, named now
    /// (while the processes' files are surely there), before the events
    /// that refer to them.
    pub fn write_new(&mut self, out: &mut RecordingFile) -> Result<()> {
        if !self.new_frames.is_empty() {
            let first = (self.frames.len() - self.new_frames.len()) as u32;
            let frames = self.namer.frames(&self.new_frames, &self.spaces);
            self.new_frames.clear();
            out.write_json(record::FRAMES, &FrameBatch { first, frames })?;
        }
        if !self.new_stacks.is_empty() {
            let first = (self.stacks.len() - self.new_stacks.len()) as u32;
            let stacks = std::mem::take(&mut self.new_stacks);
            out.write_json(record::STACK_DEFS, &StackBatch { first, stacks })?;
        }
        Ok(())
    }

    /// The recording's id of process `tgid`'s user stack `id` (a kernel
    /// stack-map id, -1 for none) with `python`'s frames spliced in.
    fn user_stack(&mut self, tgid: u32, id: i32, python: Option<Rc<PyStack>>) -> StackId {
        if python.is_none() && !self.python.marks(tgid) {
            return self.native_stack(tgid, id);
        }
        let key = (tgid, id, python);
        if let Some(&known) = self.spliced.get(&key) {
            return known;
        }
        let native = self.native_sites(tgid, id);
        let resolved = match self.python.user_sites(
            tgid,
            native.as_deref().map(Vec::as_slice),
            key.2.as_deref(),
        ) {
            Some(sites) => self.intern_stack(sites),
            None => -1,
        };
        self.spliced.insert(key, resolved);
        resolved
    }

    /// A user stack without Python frames.
    fn native_stack(&mut self, tgid: u32, id: i32) -> StackId {
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

    /// The sites of process `tgid`'s user stack `id`, read from the stack
    /// map once; None when it holds none (counted as unreadable).
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

    /// Reads `tgid`'s mappings again, at most once per [`REREAD_EVERY`]
    /// (garbage frame-pointer chains are full of unmapped addresses); true
    /// when it did.
    fn reread_maps(&mut self, tgid: u32) -> bool {
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
        self.unreadable += 1;
        -1
    }

    fn intern_stack(&mut self, sites: Vec<Site>) -> StackId {
        let ids: Vec<u32> = sites.into_iter().map(|s| self.intern_frame(s)).collect();
        let next = self.stacks.len() as u32;
        let id = *self.stacks.entry(ids).or_insert_with_key(|ids| {
            self.new_stacks.push(ids.clone());
            next
        });
        id as StackId
    }

    fn intern_frame(&mut self, site: Site) -> u32 {
        let next = self.frames.len() as u32;
        *self.frames.entry(site).or_insert_with_key(|site| {
            self.new_frames.push(site.clone());
            next
        })
    }
}

fn read<T: bytemuck::Pod>(bytes: &[u8]) -> Option<T> {
    bytes
        .get(..size_of::<T>())
        .map(bytemuck::pod_read_unaligned)
}

fn write<T: bytemuck::Pod>(bytes: &mut [u8], value: &T) {
    bytes[..size_of::<T>()].copy_from_slice(bytemuck::bytes_of(value));
}

//! What is tracked, and what is known of it: the targets (the launched
//! command, or the `-p` processes with their descendants and threads),
//! every process seen since, their /proc snapshots and mappings, and the
//! watches on them for a CPython, a CUDA runtime and a libtorch.
//!
//! The kernel keeps the tracked set itself once a target is in it
//! (`tprof_newtask` adds every thread and child). The tracker seeds it,
//! then learns from each drain which processes appeared or exec'd
//! ([`Tracker::appeared`]) and writes their snapshots before their events,
//! so the resolve stage names their frames against their own mappings.
//! A process's maps are read when they change: the kernel says when a
//! tracked process maps executable memory (`kind::EXEC_MAP` events, read
//! in the same drain as the events that may run that code), and each
//! reading serves everyone who needs the maps (the resolve stage's
//! mappings, the CUDA and libtorch watches, the Python lookup). Where the
//! kernel cannot say (no BTF, `TPROF_POLL_MAPS=1`), they are polled: a
//! process is young for [`YOUNG_FOR`] after it appears, still mapping its
//! libraries, so its maps are re-read on every drain, and every process's
//! once a second. One whose CPython is not found at once is looked at
//! every 2 ms for [`PYTHON_WATCH_FOR`]. What is found goes to the kernel
//! (Python layouts, CUDA and libtorch probes) and down the pipeline
//! (mappings, interpreters, the CUDA and STEP_PROBES records when they
//! change).
//!
//! The tracker owns no kernel object and no queue: the session lends it
//! the programs and the pipeline for each job.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use tprof_core::recording::{CudaInfo, Origin, ProcessInfo, StepProbes, ThreadInfo, record};

use super::clock::monotonic_ns;
use super::cuda::CudaTracer;
use super::pipeline::Pipeline;
use super::procfs::{self, Mapping};
use super::programs::KernelPrograms;
use super::python::tracker::PythonTracker;
use super::torch::TorchTracer;

/// How long after it appears a process's maps are re-read on every drain.
const YOUNG_FOR: Duration = Duration::from_secs(2);
/// How long a process that just appeared or exec'd is looked at for
/// CPython (every `scheduler::PYTHON_WATCH_EVERY`) until found.
const PYTHON_WATCH_FOR: Duration = Duration::from_millis(300);

/// Refuses targets that cannot be profiled, each with the reason.
pub(super) fn check_targets(pids: &[u32]) -> Result<()> {
    for &pid in pids {
        let stat = match procfs::read_stat_of_live(pid) {
            Ok(stat) => stat,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !procfs::exists(pid) => {
                bail!("no such process: {pid}; check the PID with `ps -p {pid}`")
            }
            // Not taken for "no such process" (see `procfs::has_exited`):
            // the error says what the read met.
            Err(e) => bail!("cannot read /proc/{pid}/stat: {e}; run tprof again"),
        };
        if pid == std::process::id() {
            bail!("process {pid} is tprof itself; give the PID of the job to profile");
        }
        if stat.is_kernel_thread() {
            bail!(
                "process {pid} ({}) is a kernel thread; tprof profiles user processes",
                stat.comm
            );
        }
        if stat.is_dead() {
            bail!("process {pid} ({}) has already exited (zombie)", stat.comm);
        }
    }
    Ok(())
}

/// The targets and every process seen since.
pub(super) struct Tracker {
    /// The processes whose exit ends the recording.
    roots: Vec<u32>,
    /// Processes with a /proc snapshot in the recording.
    known: HashSet<u32>,
    /// Processes that appeared or exec'd lately, whose libraries are still
    /// being mapped: their maps are re-read every tick, not every second.
    young: Vec<(u32, Instant)>,
    /// Young processes whose CPython, if any, is not found yet: looked at
    /// every `PYTHON_WATCH_EVERY`.
    python_watch: Vec<(u32, Instant)>,
    /// Threads and processes of `-p` targets that could not be tracked
    /// because the tracked maps were full: counted with the kernel's own
    /// tracking_full drops.
    untracked: u64,
    threads_seen: usize,
    /// Stacks are sampled: mappings are read to name their frames.
    maps: bool,
    cuda: CudaTracer,
    /// libtorch probes for step marks, and whether pipes are traced.
    torch: TorchTracer,
    /// Which processes run CPython (when Python frames are wanted).
    python: PythonTracker,
    python_frames: bool,
    /// The kernel says when a process maps executable memory: its maps are
    /// read then ([`Tracker::appeared`]), not polled.
    map_events: bool,
    /// Processes whose maps a drain read, with their executable mappings,
    /// for the Python lookup after the drain's events; whether each just
    /// appeared or exec'd (else it only mapped more).
    read: Vec<(u32, Vec<Mapping>, bool)>,
    /// The kernel's count of mapping events it could not send, when last
    /// looked at: a rise means some change went unsaid.
    maps_lost: u64,
    /// Processes a drain saw forked (and not exec'd since), with their
    /// parents and when they were forked.
    forked: Vec<(u32, u32, u64)>,
}

impl Tracker {
    /// A tracker of `roots`; `maps` when stacks are sampled, `cuda` unless
    /// CUDA tracing is off.
    pub(super) fn new(roots: Vec<u32>, programs: &KernelPrograms, maps: bool, cuda: bool) -> Self {
        Tracker {
            roots,
            known: HashSet::new(),
            young: Vec::new(),
            python_watch: Vec::new(),
            untracked: 0,
            threads_seen: 0,
            maps,
            cuda: CudaTracer::new(cuda),
            torch: TorchTracer::new(programs),
            python: PythonTracker::default(),
            python_frames: programs.python_frames(),
            map_events: programs.map_events(),
            read: Vec::new(),
            maps_lost: 0,
            forked: Vec::new(),
        }
    }

    pub(super) fn roots(&self) -> &[u32] {
        &self.roots
    }

    /// Every process seen, live or not.
    pub(super) fn known(&self) -> &HashSet<u32> {
        &self.known
    }

    pub(super) fn threads_seen(&self) -> usize {
        self.threads_seen
    }

    /// Tasks of the targets the full tracked maps refused.
    pub(super) fn untracked(&self) -> u64 {
        self.untracked
    }

    /// Some process is on the Python watch.
    pub(super) fn watching_python(&self) -> bool {
        !self.python_watch.is_empty()
    }

    /// Tracks the launched command (the one root), held before exec.
    pub(super) fn track_launched(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        argv: &[String],
        start_ns: u64,
    ) -> Result<()> {
        let pid = self.roots[0];
        programs.track_process(pid)?;
        programs.track_thread(pid, pid)?;
        // Looked at from now: its exec event waits for the next drain.
        self.python_watch.push((pid, Instant::now()));
        let info = ProcessInfo {
            pid,
            ppid: std::process::id(),
            comm: argv[0]
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .chars()
                .take(15)
                .collect(),
            cmdline: argv.to_vec(),
            origin: Origin::Launched,
            seen_ns: start_ns,
        };
        out.write_json(record::PROCESS, &info)?;
        self.known.insert(pid);
        let thread = ThreadInfo {
            tid: pid,
            pid,
            comm: info.comm.clone(),
            state: 'S',
        };
        out.write_json(record::THREAD, &thread)?;
        self.threads_seen = 1;
        Ok(())
    }

    /// Tracks the running roots, their descendants and all their threads.
    /// Each process is tracked in the kernel before its threads and children
    /// are listed, so one created in between is caught by the kernel.
    pub(super) fn track_attached(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        let mut pending = self.roots.clone();
        while !pending.is_empty() {
            let mut tracked = Vec::new();
            for &pid in &pending {
                self.known.insert(pid);
                if programs.track_process(pid).is_err() {
                    // The tracked-process map is full: counted, not fatal.
                    self.untracked += 1;
                    continue;
                }
                tracked.push(pid);
            }
            for pid in tracked {
                let maps = self.snapshot_process(programs, out, pid, Origin::Attached)?;
                self.track_threads(programs, out, pid)?;
                if let Some(maps) = maps {
                    self.scan_python_in(programs, out, pid, &maps);
                }
            }
            let all: Vec<u32> = self.known.iter().copied().collect();
            pending = procfs::descendants(&all)
                .into_iter()
                .filter(|p| !self.known.contains(p))
                .collect();
        }
        Ok(())
    }

    fn track_threads(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pid: u32,
    ) -> Result<()> {
        for tid in procfs::tasks(pid) {
            if programs.track_thread(tid, pid).is_err() {
                // The tracked-thread map is full: counted, not fatal.
                self.untracked += 1;
                continue;
            }
            // A thread that exited between the listing and now would stay in
            // the map forever; drop it again.
            let Some(stat) = procfs::task_stat(pid, tid) else {
                programs.untrack_thread(tid);
                continue;
            };
            let info = ThreadInfo {
                tid,
                pid,
                comm: stat.comm,
                state: stat.state,
            };
            out.write_json(record::THREAD, &info)?;
            self.threads_seen += 1;
        }
        Ok(())
    }

    /// Writes `pid`'s PROCESS record and reads its maps
    /// ([`Tracker::read_maps`]); its executable mappings, None when it is
    /// gone.
    fn snapshot_process(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pid: u32,
        origin: Origin,
    ) -> Result<Option<Vec<Mapping>>> {
        if !Self::process_record(out, pid, origin)? {
            return Ok(None);
        }
        self.read_maps(programs, out, pid)
    }

    /// Writes `pid`'s PROCESS record; false when it is gone already (its
    /// events still tell its story).
    fn process_record(out: &mut Pipeline, pid: u32, origin: Origin) -> Result<bool> {
        let Some(stat) = procfs::stat(pid) else {
            return Ok(false);
        };
        let info = ProcessInfo {
            pid,
            ppid: stat.ppid,
            comm: stat.comm,
            cmdline: procfs::cmdline(pid),
            origin,
            seen_ns: monotonic_ns(),
        };
        out.write_json(record::PROCESS, &info)?;
        Ok(true)
    }

    /// Reads `pid`'s maps once and hands them to everyone who needs them:
    /// the resolve stage (its executable mappings, when stacks are
    /// sampled), the CUDA and libtorch watches. Returns the executable
    /// mappings, for the Python lookup; None when the process is gone.
    fn read_maps(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pid: u32,
    ) -> Result<Option<Vec<Mapping>>> {
        let Some(text) = procfs::maps_text(pid) else {
            return Ok(None); // gone; keep what we had
        };
        let maps = procfs::parse_exec_maps(&text);
        if self.maps {
            out.send_maps(pid, maps.clone());
        }
        let now = monotonic_ns();
        self.cuda.scan_maps(programs, pid, &text, now)?;
        self.torch.scan_maps(programs, pid, &text, now)?;
        Ok(Some(maps))
    }

    /// A drain saw `pid` created (with its parent) or exec at `ts`: its
    /// interpreter, if any, is to be looked up again.
    pub(super) fn changed(&mut self, out: &mut Pipeline, pid: u32, parent: Option<u32>, ts: u64) {
        match parent {
            Some(parent) => {
                out.set_parent(pid, parent);
                self.forked.push((pid, parent, ts));
            }
            // A new image: its maps are its own.
            None => self.forked.retain(|&(p, _, _)| p != pid),
        }
        // A new image, or a new process (maybe under a reused pid).
        self.python.forget(pid, ts);
    }

    /// The parent `pid` was forked from in this drain, and when, when its
    /// maps are its parent's still: no exec since, the kernel says when it
    /// maps more, and the parent's interpreter (if any) is known, not
    /// still looked for: neither on the watch nor appeared in this very
    /// drain (a forkserver forks, execs and forks its worker within a few
    /// ms, and the worker's fork is often drained with the exec, before the
    /// forkserver's new image has been looked at).
    fn forked_copy(&self, pid: u32) -> Option<(u32, u64)> {
        let &(_, parent, ts) = self.forked.iter().find(|&&(p, _, _)| p == pid)?;
        let watched = self.python_watch.iter().any(|&(p, _)| p == parent);
        let pending = self
            .read
            .iter()
            .any(|&(p, _, appeared)| p == parent && appeared);
        let looked_at = !watched && !pending;
        (self.map_events && self.known.contains(&parent) && looked_at).then_some((parent, ts))
    }

    /// Processes a drain saw appear or exec (`appeared`) or map executable
    /// memory (`mapped`), before their events go down the pipeline: the
    /// resolve stage names their stacks against these snapshots. Each
    /// one's maps are read once ([`Tracker::read_maps`]): a new mapping or
    /// an exec may have brought the CUDA runtime or libtorch in (a launched
    /// job, a worker started with spawn, `import torch`).
    pub(super) fn appeared(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        appeared: &[u32],
        mapped: &[u32],
    ) -> Result<()> {
        self.read.clear();
        for &pid in appeared {
            if !self.known.insert(pid) && self.read.iter().any(|r| r.0 == pid) {
                continue; // forked and exec'd in one drain: read once
            }
            if !self.map_events {
                self.young.push((pid, Instant::now()));
            }
            if let Some((parent, forked_ns)) = self.forked_copy(pid) {
                // A fork maps what its parent mapped: named through the
                // parent's maps until it maps more, its interpreter the
                // parent's. Its libraries are the parent's, probed already.
                Self::process_record(out, pid, Origin::Forked)?;
                let inherited = self.python.inherit(pid, parent, forked_ns);
                self.found_python(programs, out, inherited);
                continue;
            }
            if let Some(maps) = self.snapshot_process(programs, out, pid, Origin::Forked)? {
                self.read.push((pid, maps, true));
            }
        }
        self.forked.clear();
        for &pid in mapped {
            // Read above already; or one the tracker never saw appear (a
            // target's mapping between its tracking and the first drain
            // is read again all the same).
            if appeared.contains(&pid) || self.read.iter().any(|r| r.0 == pid) {
                continue;
            }
            if let Some(maps) = self.read_maps(programs, out, pid)? {
                self.read.push((pid, maps, false));
            }
        }
        Ok(())
    }

    /// The same processes, after their events: the resolve stage forgets
    /// an exec'd process's old interpreter at its exec event, so the new
    /// one goes after it. (A forked child's first frames, in that batch,
    /// are named through its parent's.) One that appeared and whose
    /// CPython is not found now is watched for it; one that mapped more
    /// may have loaded an interpreter (a program embedding Python).
    pub(super) fn look_for_python(&mut self, programs: &mut KernelPrograms, out: &mut Pipeline) {
        for (pid, maps, appeared) in std::mem::take(&mut self.read) {
            // Not found yet, and not found by the watch since its exec.
            if !self.scan_python_in(programs, out, pid, &maps)
                && appeared
                && self.python_frames
                && !self.python.knows(pid)
            {
                self.python_watch.retain(|&(p, _)| p != pid);
                self.python_watch.push((pid, Instant::now()));
            }
        }
    }

    /// Re-reads the maps of processes younger than [`YOUNG_FOR`]: a
    /// process maps its libraries (and a JIT its code) in its first
    /// moments, and a short-lived worker may exit before the once-a-second
    /// refresh.
    pub(super) fn refresh_young_maps(&mut self, programs: &mut KernelPrograms, out: &mut Pipeline) {
        self.young.retain(|(_, seen)| seen.elapsed() < YOUNG_FOR);
        if !self.maps || self.map_events {
            return;
        }
        let young: Vec<u32> = self.young.iter().map(|&(pid, _)| pid).collect();
        for pid in young {
            out.snapshot_maps(pid);
            self.scan_python(programs, out, pid);
        }
    }

    /// Looks at the processes on the Python watch again; one whose
    /// interpreter turns up has its maps re-read too (its libpython frames
    /// are named against them).
    pub(super) fn watch_python(&mut self, programs: &mut KernelPrograms, out: &mut Pipeline) {
        self.python_watch
            .retain(|(_, since)| since.elapsed() < PYTHON_WATCH_FOR);
        let watched: Vec<u32> = self.python_watch.iter().map(|&(pid, _)| pid).collect();
        for pid in watched {
            if self.scan_python(programs, out, pid) {
                out.snapshot_maps(pid);
                self.python_watch.retain(|&(p, _)| p != pid);
            }
        }
    }

    /// Looks for the CPython `pid` runs, if not known yet, and has the
    /// kernel walk its threads' Python frames and the resolve stage name
    /// them. True when found now.
    fn scan_python(&mut self, programs: &mut KernelPrograms, out: &mut Pipeline, pid: u32) -> bool {
        if !self.python_frames || self.python.knows(pid) {
            return false;
        }
        let found = self.python.scan(pid);
        self.found_python(programs, out, found)
    }

    /// As [`Tracker::scan_python`], in `pid`'s executable mappings read
    /// already.
    fn scan_python_in(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pid: u32,
        maps: &[Mapping],
    ) -> bool {
        if !self.python_frames || self.python.knows(pid) {
            return false;
        }
        let found = self.python.scan_in(pid, maps);
        self.found_python(programs, out, found)
    }

    fn found_python(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        found: Option<std::sync::Arc<super::python::Interpreter>>,
    ) -> bool {
        let Some(interp) = found else {
            return false;
        };
        let pid = interp.pid;
        self.python
            .note(&interp, programs.python_threads_by_fsbase());
        if let Some(info) = interp.proc_info()
            && let Err(e) = programs.set_python(pid, info)
        {
            eprintln!("tprof: note: {e:#}");
        }
        out.add_interpreter(interp);
        true
    }

    /// Re-reads the maps of live processes, so libraries loaded since the
    /// last snapshot resolve even if the process exits before the end:
    /// when mappings are polled, or when the kernel lost some of its
    /// mapping events (`maps_lost`, its running count of them).
    pub(super) fn refresh_maps(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        maps_lost: u64,
    ) -> Result<()> {
        let lost = maps_lost > self.maps_lost;
        self.maps_lost = maps_lost;
        if self.map_events && !lost {
            return Ok(());
        }
        let known: Vec<u32> = self.known.iter().copied().collect();
        for pid in known {
            if self.map_events {
                // Everything polling would have done, once.
                if let Some(maps) = self.read_maps(programs, out, pid)? {
                    self.scan_python_in(programs, out, pid, &maps);
                }
                continue;
            }
            if self.maps {
                out.snapshot_maps(pid);
            }
            // A process that loads Python late (one embedding it).
            self.scan_python(programs, out, pid);
        }
        Ok(())
    }

    /// Until some libtorch is probed, looks for one in the roots: a job
    /// imports torch seconds after it starts, and its first iteration
    /// follows, so it is probed well before that.
    pub(super) fn look_for_torch(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        self.torch.catch_up(programs);
        // With mapping events, a libtorch is probed in the drain that says
        // it was mapped.
        if self.torch.found() || self.map_events {
            return self.write_step_probes(out);
        }
        let now = monotonic_ns();
        for &pid in &self.roots {
            self.torch.scan(programs, pid, now)?;
        }
        self.write_step_probes(out)
    }

    /// Looks for a CUDA runtime (or libtorch) loaded since the last look (a
    /// job importing torch now), where mappings are polled, and records the
    /// cudaLaunchKernel counts.
    pub(super) fn refresh_cuda(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        let now = monotonic_ns();
        for &pid in self.known.iter().filter(|_| !self.map_events) {
            self.cuda.scan(programs, pid, now)?;
            self.torch.scan(programs, pid, now)?;
        }
        self.torch.catch_up(programs);
        self.write_step_probes(out)?;
        self.cuda.refresh_launches(programs)?;
        self.write_cuda(out)
    }

    /// Writes the CUDA and STEP_PROBES records that changed.
    pub(super) fn write_changes(&mut self, out: &mut Pipeline) -> Result<()> {
        self.write_cuda(out)?;
        self.write_step_probes(out)
    }

    fn write_cuda(&mut self, out: &mut Pipeline) -> Result<()> {
        match self.cuda.take_changed() {
            Some(info) => out.write_json(record::CUDA, &info),
            None => Ok(()),
        }
    }

    fn write_step_probes(&mut self, out: &mut Pipeline) -> Result<()> {
        match self.torch.take_changed() {
            Some(info) => out.write_json(record::STEP_PROBES, &info),
            None => Ok(()),
        }
    }

    /// The last cudaLaunchKernel counts, and whether libtorch's marks took
    /// over from the pipe reads, read after the last drain.
    pub(super) fn last_reads(&mut self, programs: &KernelPrograms) -> Result<()> {
        self.torch.note_marks_taking_over(programs);
        self.cuda.refresh_launches(programs)
    }

    /// The CUDA and STEP_PROBES records as they stand, written once more
    /// at the end (so a recording says when nothing was found).
    pub(super) fn final_records(&self) -> (&CudaInfo, &StepProbes) {
        (self.cuda.info(), self.torch.info())
    }

    /// Every root has exited (for `-p`; a launched command is reaped
    /// instead).
    pub(super) fn roots_gone(&self) -> bool {
        self.roots.iter().all(|&pid| procfs::has_exited(pid))
    }
}

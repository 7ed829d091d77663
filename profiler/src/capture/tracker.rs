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
//! A process is young for [`YOUNG_FOR`] after that: it is still mapping its
//! libraries, so its maps are re-read on every drain rather than once a
//! second; one whose CPython is not found at once is looked at every 2 ms
//! for [`PYTHON_WATCH_FOR`]. What is found goes to the kernel (Python
//! layouts, CUDA and libtorch probes) and down the pipeline (mappings,
//! interpreters, the CUDA and STEP_PROBES records when they change).
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
use super::procfs;
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
        let Some(stat) = procfs::stat(pid) else {
            bail!("no such process: {pid}; check the PID with `ps -p {pid}`");
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
                self.snapshot_process(out, pid, Origin::Attached)?;
                self.track_threads(programs, out, pid)?;
                self.cuda.scan(programs, pid, monotonic_ns())?;
                self.torch.scan(programs, pid, monotonic_ns())?;
                self.scan_python(programs, out, pid)?;
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

    fn snapshot_process(&mut self, out: &mut Pipeline, pid: u32, origin: Origin) -> Result<()> {
        let Some(stat) = procfs::stat(pid) else {
            return Ok(()); // already gone; its events still tell its story
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
        if self.maps {
            out.snapshot_maps(pid)?;
        }
        Ok(())
    }

    /// A drain saw `pid` created (with its parent) or exec at `ts`: its
    /// interpreter, if any, is to be looked up again.
    pub(super) fn changed(
        &mut self,
        out: &mut Pipeline,
        pid: u32,
        parent: Option<u32>,
        ts: u64,
    ) -> Result<()> {
        if let Some(parent) = parent {
            out.set_parent(pid, parent)?;
        }
        // A new image, or a new process (maybe under a reused pid).
        self.python.forget(pid, ts);
        Ok(())
    }

    /// Processes a drain saw appear or exec, before their events go down
    /// the pipeline: the resolve stage names their stacks against these
    /// snapshots. An exec may have brought the CUDA runtime or libtorch in
    /// (a launched job, a worker started with spawn).
    pub(super) fn appeared(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pids: &[u32],
    ) -> Result<()> {
        for &pid in pids {
            self.known.insert(pid);
            self.young.push((pid, Instant::now()));
            self.snapshot_process(out, pid, Origin::Forked)?;
            self.cuda.scan(programs, pid, monotonic_ns())?;
            self.torch.scan(programs, pid, monotonic_ns())?;
        }
        Ok(())
    }

    /// The same processes, after their events: the resolve stage forgets
    /// an exec'd process's old interpreter at its exec event, so the new
    /// one goes after it. (A forked child's first frames, in that batch,
    /// are named through its parent's.) One whose CPython is not found now
    /// is watched for it.
    pub(super) fn look_for_python(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pids: &[u32],
    ) -> Result<()> {
        for &pid in pids {
            // Not found yet, and not found by the watch since its exec.
            if !self.scan_python(programs, out, pid)?
                && self.python_frames
                && !self.python.knows(pid)
            {
                self.python_watch.retain(|&(p, _)| p != pid);
                self.python_watch.push((pid, Instant::now()));
            }
        }
        Ok(())
    }

    /// Re-reads the maps of processes younger than [`YOUNG_FOR`]: a
    /// process maps its libraries (and a JIT its code) in its first
    /// moments, and a short-lived worker may exit before the once-a-second
    /// refresh.
    pub(super) fn refresh_young_maps(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        self.young.retain(|(_, seen)| seen.elapsed() < YOUNG_FOR);
        if !self.maps {
            return Ok(());
        }
        let young: Vec<u32> = self.young.iter().map(|&(pid, _)| pid).collect();
        for pid in young {
            out.snapshot_maps(pid)?;
            self.scan_python(programs, out, pid)?;
        }
        Ok(())
    }

    /// Looks at the processes on the Python watch again; one whose
    /// interpreter turns up has its maps re-read too (its libpython frames
    /// are named against them).
    pub(super) fn watch_python(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        self.python_watch
            .retain(|(_, since)| since.elapsed() < PYTHON_WATCH_FOR);
        let watched: Vec<u32> = self.python_watch.iter().map(|&(pid, _)| pid).collect();
        for pid in watched {
            if self.scan_python(programs, out, pid)? {
                out.snapshot_maps(pid)?;
                self.python_watch.retain(|&(p, _)| p != pid);
            }
        }
        Ok(())
    }

    /// Looks for the CPython `pid` runs, if not known yet, and has the
    /// kernel walk its threads' Python frames and the resolve stage name
    /// them. True when found now.
    fn scan_python(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
        pid: u32,
    ) -> Result<bool> {
        if !self.python_frames {
            return Ok(false);
        }
        let Some(interp) = self.python.scan(pid) else {
            return Ok(false);
        };
        self.python
            .note(&interp, programs.python_threads_by_fsbase());
        if let Some(info) = interp.proc_info()
            && let Err(e) = programs.set_python(pid, info)
        {
            eprintln!("tprof: note: {e:#}");
        }
        out.add_interpreter(interp)?;
        Ok(true)
    }

    /// Re-reads the maps of live processes, so libraries loaded since the
    /// last snapshot resolve even if the process exits before the end.
    pub(super) fn refresh_maps(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        if !self.maps {
            return Ok(());
        }
        let known: Vec<u32> = self.known.iter().copied().collect();
        for pid in known {
            out.snapshot_maps(pid)?;
            // A process that loads Python late (one embedding it).
            self.scan_python(programs, out, pid)?;
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
        self.torch.attach_exits(programs);
        if self.torch.found() {
            return self.write_step_probes(out);
        }
        let now = monotonic_ns();
        for &pid in &self.roots {
            self.torch.scan(programs, pid, now)?;
        }
        self.write_step_probes(out)
    }

    /// Looks for a CUDA runtime (or libtorch) loaded since the last look (a
    /// job importing torch now) and records the cudaLaunchKernel counts.
    pub(super) fn refresh_cuda(
        &mut self,
        programs: &mut KernelPrograms,
        out: &mut Pipeline,
    ) -> Result<()> {
        let now = monotonic_ns();
        for &pid in &self.known {
            self.cuda.scan(programs, pid, now)?;
            self.torch.scan(programs, pid, now)?;
        }
        self.torch.attach_exits(programs);
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

    /// The last cudaLaunchKernel counts, read after the last drain.
    pub(super) fn last_launches(&mut self, programs: &KernelPrograms) -> Result<()> {
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
        self.roots
            .iter()
            .all(|&pid| procfs::stat(pid).is_none_or(|s| s.is_dead()))
    }
}

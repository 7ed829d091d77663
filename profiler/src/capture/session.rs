//! One recording in progress: tracks the targets, then every 50 ms drains
//! the kernel's events into the recording's pipeline ([`Pipeline`]: a
//! writer thread names their stacks and writes them), snapshots new
//! processes, samples /proc/stat, and once a second refreshes lost counts,
//! GPU samples, `/proc/<pid>/maps` and the CUDA state; at the end writes the
//! totals and the footer.
//!
//! The loop in detail: every tick (`DRAIN_EVERY`, 50 ms) it drains the
//! event shards (unless the writer is `MAX_IN_FLIGHT` batches behind),
//! snapshots processes that appeared or exec'd (and looks for a libcudart
//! and a CPython in them), and flushes; every other tick it samples
//! /proc/stat; every `EXPIRE_EVERY` (5 s) it has
//! `KernelPrograms::expire_in_flight` drop and count the requests, bios and
//! CUDA calls whose end will not come. It stops on a signal, `--duration` or
//! the targets' exit; `stop_command` then passes the stop on to a launched
//! command's process group and keeps draining until the group is gone
//! (SIGKILL after `--kill-after`), so the job's exit is in the recording.
//! `finish` writes the CUDA and LOST records and the FOOTER, with the
//! command's exit status.

use std::{
    collections::HashSet,
    io::{IsTerminal as _, Write as _},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use profiler_ebpf::kind;

use super::clock::{anchor, monotonic_ns};
use super::cuda::CudaTracer;
use super::file::cut_short_error;
use super::gpu::GpuSampler;
use super::launch::{KILL_WAIT, LaunchedCommand};
use super::options::{RecordOptions, RecordOutcome, StopReason};
use super::pipeline::Pipeline;
use super::programs::{Expired, KernelPrograms};
use super::python::tracker::PythonTracker;
use super::signals::{FINISHING, Signals};
use super::sink::encode;
use super::torch::TorchTracer;
use super::{limits, procfs};
use tprof_core::recording::{
    self, ClockAnchor, Event, Footer, GpuInfo, Header, LostCounts, Origin, ProcessInfo, ThreadInfo,
    events::Framing, record,
};

/// How often the ring buffer is drained and the file flushed. Polling on a
/// timer instead of waking per event keeps tprof's cost flat under load (the
/// kernel side submits with BPF_RB_NO_WAKEUP).
const DRAIN_EVERY: Duration = Duration::from_millis(50);
/// How long after it appears a process's maps are re-read on every drain.
const YOUNG_FOR: Duration = Duration::from_secs(2);
/// How often a process that just appeared or exec'd is looked at for
/// CPython until found, and for how long. The kernel walks no Python frames
/// before userspace hands it the interpreter, and a switch-out's stacks
/// are taken once, when it begins: a script that blocks 30 ms after exec
/// (in `queue.get()`, say) kept native frames only for the whole wait when
/// the look came with the next 50 ms drain. A python maps its libpython a
/// millisecond after exec and runs its first Python code some ten later.
const PYTHON_WATCH_EVERY: Duration = Duration::from_millis(2);
const PYTHON_WATCH_FOR: Duration = Duration::from_millis(300);
/// How often /proc/stat is sampled (every other drain).
const SAMPLE_EVERY_TICKS: u32 = 2;
/// How often (in drain ticks) the targets are scanned for libtorch until
/// one maps it: every 200 ms.
const TORCH_SCAN_EVERY_TICKS: u32 = 4;
/// How often the status line and the lost counts are refreshed, and the
/// `/proc/<pid>/maps` snapshots of live processes (for dlopen'd libraries,
/// and a CUDA runtime loaded after tracking began).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How often the maps of things in flight are checked for entries whose end
/// will not come (reading them costs two system calls per entry), or as
/// often as their expiry age when that is shorter (tests), down to every
/// drain.
const EXPIRE_EVERY: Duration = Duration::from_secs(5);

/// Set to 1 to have `tprof record` print, when it ends, how many user stack
/// copies it drained from the ring buffer and their bytes per second (the
/// benches' measure of what copying stacks costs; docs/benchmarks.md).
const STACK_COPY_STATS_ENV: &str = "TPROF_STACK_COPY_STATS";

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

/// One recording in progress.
pub(super) struct Session {
    programs: KernelPrograms,
    out: Pipeline,
    /// The recording file, for messages.
    path: PathBuf,
    /// The processes whose exit ends the recording.
    roots: Vec<u32>,
    /// The launched command, which we reap, and stop with the recording.
    command: Option<LaunchedCommand>,
    /// How long the command's group gets to exit once stopped (`--kill-after`).
    kill_after: Duration,
    /// Set while stopping: what the status line adds.
    stopping: Option<String>,
    /// Processes with a /proc snapshot in the recording.
    known: HashSet<u32>,
    /// Processes that appeared or exec'd lately, whose libraries are still
    /// being mapped: their maps are re-read every tick, not every second.
    young: Vec<(u32, Instant)>,
    /// Young processes whose CPython, if any, is not found yet: looked at
    /// every PYTHON_WATCH_EVERY.
    python_watch: Vec<(u32, Instant)>,
    sample_hz: Option<u64>,
    events: u64,
    /// User stack copies drained, and their bytes (ring-buffer records,
    /// headers included): what stacks cost the ring buffer, printed at the
    /// end when [`STACK_COPY_STATS_ENV`] is set.
    copies: u64,
    copy_bytes: u64,
    lost: LostCounts,
    /// Threads and processes of `-p` targets that could not be tracked
    /// because the tracked maps were full: counted with the kernel's own
    /// tracking_full drops.
    untracked: u64,
    /// Entries of the maps of things in flight dropped so far because their
    /// end will not come: counted as lost.
    expired: Expired,
    /// How old a request or bio in flight may get (`MapLimits`).
    in_flight_expiry: Duration,
    last_expiry: Instant,
    started: Instant,
    ticks: u32,
    last_status: Instant,
    threads_seen: usize,
    /// Written after the header.
    gpu_info: GpuInfo,
    gpu: Option<GpuSampler>,
    cuda: CudaTracer,
    /// libtorch probes for step marks, and whether pipes are traced.
    torch: TorchTracer,
    /// Which processes run CPython (when Python frames are wanted).
    python: PythonTracker,
    python_frames: bool,
    /// Ticks on which the writer was too far behind to take a drain.
    lagged_ticks: u64,
}

impl Session {
    pub(super) fn new(
        programs: KernelPrograms,
        out: Pipeline,
        opts: &RecordOptions,
        (gpu_info, gpu): (GpuInfo, Option<GpuSampler>),
    ) -> Session {
        let python_frames = programs.python_frames();
        let torch = TorchTracer::new(&programs);
        Session {
            torch,
            programs,
            out,
            path: opts.output.clone(),
            roots: Vec::new(),
            command: None,
            kill_after: opts.kill_after,
            stopping: None,
            known: HashSet::new(),
            young: Vec::new(),
            python_watch: Vec::new(),
            sample_hz: opts.sample_hz,
            events: 0,
            copies: 0,
            copy_bytes: 0,
            lost: LostCounts::default(),
            untracked: 0,
            expired: Expired::default(),
            in_flight_expiry: opts.limits.in_flight_expiry,
            last_expiry: Instant::now(),
            started: Instant::now(),
            ticks: 0,
            last_status: Instant::now(),
            threads_seen: 0,
            gpu_info,
            gpu,
            cuda: CudaTracer::new(opts.cuda),
            python: PythonTracker::default(),
            python_frames,
            lagged_ticks: 0,
        }
    }

    fn write_header(&mut self, start: ClockAnchor, command: Option<Vec<String>>) -> Result<()> {
        let uname = uname();
        let header = Header {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            kernel_release: uname.0,
            hostname: uname.1,
            cores: procfs::online_cpus(),
            start,
            targets: self.roots.clone(),
            command,
            block_devices: procfs::block_devices(),
            cpu_limit: self.roots.first().map(|&pid| limits::cpu_limit(pid)),
            sample_hz: self.sample_hz,
            node: Some(super::node::identity(&self.roots)),
            user_stacks: self.sample_hz.map(|_| self.programs.user_stacks()),
        };
        self.out.write_json(record::HEADER, &header)?;
        self.out.write_json(record::GPU_INFO, &self.gpu_info)?;
        Ok(())
    }

    /// Tracks a launched command, held before exec.
    pub(super) fn track_launched(
        &mut self,
        pid: u32,
        argv: &[String],
        start: ClockAnchor,
    ) -> Result<()> {
        self.roots = vec![pid];
        self.programs.track_process(pid)?;
        self.programs.track_thread(pid, pid)?;
        // Looked at from now: its exec event waits for the next drain.
        self.python_watch.push((pid, Instant::now()));
        self.write_header(start, Some(argv.to_vec()))?;
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
            seen_ns: start.monotonic_ns,
        };
        self.out.write_json(record::PROCESS, &info)?;
        self.known.insert(pid);
        let thread = ThreadInfo {
            tid: pid,
            pid,
            comm: info.comm.clone(),
            state: 'S',
        };
        self.out.write_json(record::THREAD, &thread)?;
        self.threads_seen = 1;
        Ok(())
    }

    /// Tracks running processes, their descendants and all their threads.
    /// Each process is tracked in the kernel before its threads and children
    /// are listed, so one created in between is caught by the kernel.
    pub(super) fn track_attached(&mut self, pids: &[u32], start: ClockAnchor) -> Result<()> {
        self.roots = pids.to_vec();
        self.write_header(start, None)?;
        let mut pending: Vec<u32> = pids.to_vec();
        while !pending.is_empty() {
            let mut tracked = Vec::new();
            for &pid in &pending {
                self.known.insert(pid);
                if self.programs.track_process(pid).is_err() {
                    // The tracked-process map is full: counted, not fatal.
                    self.untracked += 1;
                    continue;
                }
                tracked.push(pid);
            }
            for pid in tracked {
                self.snapshot_process(pid, Origin::Attached)?;
                self.track_threads(pid)?;
                self.cuda.scan(&mut self.programs, pid, monotonic_ns())?;
                self.torch.scan(&mut self.programs, pid, monotonic_ns())?;
                self.scan_python(pid)?;
            }
            let all: Vec<u32> = self.known.iter().copied().collect();
            pending = procfs::descendants(&all)
                .into_iter()
                .filter(|p| !self.known.contains(p))
                .collect();
        }
        Ok(())
    }

    fn track_threads(&mut self, pid: u32) -> Result<()> {
        for tid in procfs::tasks(pid) {
            if self.programs.track_thread(tid, pid).is_err() {
                // The tracked-thread map is full: counted, not fatal.
                self.untracked += 1;
                continue;
            }
            // A thread that exited between the listing and now would stay in
            // the map forever; drop it again.
            let Some(stat) = procfs::task_stat(pid, tid) else {
                self.programs.untrack_thread(tid);
                continue;
            };
            let info = ThreadInfo {
                tid,
                pid,
                comm: stat.comm,
                state: stat.state,
            };
            self.out.write_json(record::THREAD, &info)?;
            self.threads_seen += 1;
        }
        Ok(())
    }

    fn snapshot_process(&mut self, pid: u32, origin: Origin) -> Result<()> {
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
        self.out.write_json(record::PROCESS, &info)?;
        if self.sample_hz.is_some() {
            self.out.snapshot_maps(pid)?;
        }
        Ok(())
    }

    /// The launched command, released: from now on it is reaped and
    /// stopped with the recording.
    pub(super) fn command_started(&mut self, command: LaunchedCommand) {
        self.command = Some(command);
    }

    /// The launched command's pid (and process group), while there is one.
    pub(super) fn command_pid(&self) -> Option<u32> {
        self.command.as_ref().map(LaunchedCommand::pid)
    }

    /// The one line a script waiting for tprof to attach can look for.
    pub(super) fn announce(&self) {
        eprintln!(
            "tprof: recording {} process(es), {} thread(s) to {} (Ctrl-C to stop)",
            self.known.len(),
            self.threads_seen,
            self.path.display()
        );
        match &self.gpu_info.status {
            Some(reason) => eprintln!("tprof: no GPU data: {reason}"),
            None => eprintln!("tprof: sampling {} GPU(s)", self.gpu_info.devices.len()),
        }
    }

    pub(super) async fn run(
        &mut self,
        signals: &mut Signals,
        duration: Option<Duration>,
    ) -> Result<StopReason> {
        let mut tick = tokio::time::interval(DRAIN_EVERY);
        let mut python_tick = tokio::time::interval(PYTHON_WATCH_EVERY);
        python_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let deadline = duration.map(|d| self.started + d);
        loop {
            tokio::select! {
                // A stop request wins over another drain: the user is waiting.
                biased;
                reason = signals.next() => return Ok(reason),
                _ = python_tick.tick(), if !self.python_watch.is_empty() => {
                    self.watch_python()?;
                }
                _ = tick.tick() => {
                    self.on_tick()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(StopReason::Duration);
                    }
                    if self.roots_exited() {
                        return Ok(StopReason::TargetsExited);
                    }
                }
            }
        }
    }

    /// Stops the launched command when the recording stopped before it
    /// did: passes the stop on to its process group (the signal tprof got;
    /// SIGTERM for `--duration`), keeps recording while the group shuts
    /// down, and kills it after `--kill-after`. Targets of `-p` are left
    /// alone.
    pub(super) async fn stop_command(&mut self, reason: StopReason) -> Result<()> {
        let Some(command) = &mut self.command else {
            return Ok(());
        };
        let sig = match reason {
            StopReason::TargetsExited => return Ok(()),
            StopReason::Interrupted => libc::SIGINT,
            StopReason::HungUp => libc::SIGHUP,
            StopReason::Terminated | StopReason::Duration => libc::SIGTERM,
        };
        if !command.group_alive() {
            return Ok(());
        }
        command.stop(sig);
        let pid = command.pid();
        let kill_at = Instant::now() + self.kill_after;
        let mut tick = tokio::time::interval(DRAIN_EVERY);
        let mut killed_at = None;
        loop {
            tick.tick().await;
            let now = Instant::now();
            let left = kill_at.saturating_duration_since(now).as_secs_f64().ceil();
            self.stopping = Some(format!(
                "waiting for the command (process group {pid}) to exit, SIGKILL in {left:.0} s"
            ));
            self.on_tick()?;
            let command = self.command.as_mut().expect("checked above");
            if !command.group_alive() {
                break;
            }
            match killed_at {
                None if now >= kill_at => {
                    command.kill();
                    killed_at = Some(now);
                }
                // SIGKILL waits only for uninterruptible sleeps to end.
                Some(at) if now.duration_since(at) >= KILL_WAIT => {
                    eprintln!(
                        "tprof: warning: processes of the command's group {pid} are still \
                         alive {} s after SIGKILL (in uninterruptible sleep?); recording stops \
                         without them",
                        KILL_WAIT.as_secs()
                    );
                    break;
                }
                _ => {}
            }
        }
        self.stopping = None;
        Ok(())
    }

    fn on_tick(&mut self) -> Result<()> {
        self.drain()?;
        self.refresh_young_maps()?;
        if self.last_expiry.elapsed() >= self.in_flight_expiry.clamp(DRAIN_EVERY, EXPIRE_EVERY) {
            self.expire_in_flight();
        }
        self.ticks += 1;
        if self.ticks.is_multiple_of(TORCH_SCAN_EVERY_TICKS) && !self.torch.found() {
            // A job imports torch seconds after it starts, and its first
            // iteration follows: probe libtorch well before that.
            let now = monotonic_ns();
            for pid in self.roots.clone() {
                self.torch.scan(&mut self.programs, pid, now)?;
            }
            self.write_step_probes()?;
        }
        if self.ticks.is_multiple_of(SAMPLE_EVERY_TICKS)
            && let Some(sample) = procfs::system_sample(monotonic_ns())
        {
            self.out.write_json(record::SYSTEM, &sample)?;
        }
        if self.last_status.elapsed() >= STATUS_EVERY {
            self.last_status = Instant::now();
            self.refresh_lost()?;
            // Once a second: one record per series per second keeps the
            // file small; a killed recording loses at most that second.
            self.drain_gpu()?;
            self.refresh_maps()?;
            self.refresh_cuda()?;
            self.status_line();
        }
        self.out.flush()?;
        Ok(())
    }

    /// Moves every event from the ring buffer into the recording, and
    /// snapshots processes that appeared or exec'd. When the writer is too
    /// far behind, the events wait in the ring buffer for a later tick.
    fn drain(&mut self) -> Result<()> {
        if self.out.is_full() {
            self.lagged_ticks += 1;
            return Ok(());
        }
        let mut new_processes = Vec::new();
        let mut batch = self.out.empty_batch();
        batch.gather(|push| self.programs.drain_events(push));
        for bytes in batch.in_order() {
            if is_stack_copy(bytes) {
                self.copies += 1;
                self.copy_bytes += bytes.len() as u64;
            } else {
                self.events += 1;
            }
            if let Some((pid, parent, ts)) = process_change(bytes) {
                if let Some(parent) = parent {
                    self.out.set_parent(pid, parent)?;
                }
                // A new image, or a new process (maybe under a reused pid).
                self.python.forget(pid, ts);
                new_processes.push(pid);
            }
        }
        // Before the events: the writer names their stacks against these
        // processes' mappings.
        for &pid in &new_processes {
            self.known.insert(pid);
            self.young.push((pid, Instant::now()));
            self.snapshot_process(pid, Origin::Forked)?;
            // An exec may have brought the CUDA runtime in (a launched job,
            // a worker started with spawn).
            self.cuda.scan(&mut self.programs, pid, monotonic_ns())?;
            self.torch.scan(&mut self.programs, pid, monotonic_ns())?;
        }
        self.out.send_events(batch)?;
        // After the events: the writer forgets an exec'd process's old
        // interpreter at its exec event. (A forked child's first frames,
        // in this batch, are named through its parent's.)
        for pid in new_processes {
            // Not found yet, and not found by the watch since its exec.
            if !self.scan_python(pid)? && self.python_frames && !self.python.knows(pid) {
                self.python_watch.retain(|&(p, _)| p != pid);
                self.python_watch.push((pid, Instant::now()));
            }
        }
        self.write_cuda()?;
        self.write_step_probes()?;
        Ok(())
    }

    /// Writes the STEP_PROBES record when it changed.
    fn write_step_probes(&mut self) -> Result<()> {
        match self.torch.take_changed() {
            Some(info) => self.out.write_json(record::STEP_PROBES, &info),
            None => Ok(()),
        }
    }

    /// Moves the GPU samples gathered so far into the recording.
    fn drain_gpu(&mut self) -> Result<()> {
        let Some(gpu) = &self.gpu else {
            return Ok(());
        };
        for batch in gpu.drain(&self.known) {
            self.out.write_json(record::GPU_SAMPLES, &batch)?;
        }
        Ok(())
    }

    /// The kernel's drop counts plus what could not be tracked at attach
    /// and the stacks the writer found gone from the stack map, and the
    /// entries of things in flight that expired.
    fn lost_counts(&self) -> Result<LostCounts> {
        let mut lost = self.programs.lost_counts()?;
        lost.tracking_full += self.untracked;
        self.out.stack_counts().add_to(&mut lost);
        self.expired.count_in(&mut lost);
        Ok(lost)
    }

    /// Drops (and counts) the entries of requests, bios and CUDA calls whose
    /// end will not come.
    fn expire_in_flight(&mut self) {
        let expired = self.programs.expire_in_flight(self.in_flight_expiry);
        self.expired.add(expired);
        self.last_expiry = Instant::now();
    }

    fn refresh_lost(&mut self) -> Result<()> {
        let lost = self.lost_counts()?;
        if lost != self.lost {
            self.out.write_json(record::LOST, &lost)?;
            self.lost = lost;
        }
        Ok(())
    }

    /// Re-reads the maps of processes younger than YOUNG_FOR: a process
    /// maps its libraries (and a JIT its code) in its first moments, and a
    /// short-lived worker may exit before the once-a-second refresh.
    fn refresh_young_maps(&mut self) -> Result<()> {
        self.young.retain(|(_, seen)| seen.elapsed() < YOUNG_FOR);
        if self.sample_hz.is_none() {
            return Ok(());
        }
        let young: Vec<u32> = self.young.iter().map(|&(pid, _)| pid).collect();
        for pid in young {
            self.out.snapshot_maps(pid)?;
            self.scan_python(pid)?;
        }
        Ok(())
    }

    /// Looks at the processes on the Python watch again; one whose
    /// interpreter turns up has its maps re-read too (the writer names its
    /// libpython frames against them).
    fn watch_python(&mut self) -> Result<()> {
        self.python_watch
            .retain(|(_, since)| since.elapsed() < PYTHON_WATCH_FOR);
        let watched: Vec<u32> = self.python_watch.iter().map(|&(pid, _)| pid).collect();
        for pid in watched {
            if self.scan_python(pid)? {
                self.out.snapshot_maps(pid)?;
                self.python_watch.retain(|&(p, _)| p != pid);
            }
        }
        Ok(())
    }

    /// Looks for the CPython `pid` runs, if not known yet, and has the
    /// kernel walk its threads' Python frames and the writer name them.
    /// True when found now.
    fn scan_python(&mut self, pid: u32) -> Result<bool> {
        if !self.python_frames {
            return Ok(false);
        }
        let Some(interp) = self.python.scan(pid) else {
            return Ok(false);
        };
        self.python
            .note(&interp, self.programs.python_threads_by_fsbase());
        if let Some(info) = interp.proc_info()
            && let Err(e) = self.programs.set_python(pid, info)
        {
            eprintln!("tprof: note: {e:#}");
        }
        self.out.add_interpreter(interp)?;
        Ok(true)
    }

    /// Re-reads the maps of live processes, so libraries loaded since the
    /// last snapshot resolve even if the process exits before the end.
    fn refresh_maps(&mut self) -> Result<()> {
        if self.sample_hz.is_none() {
            return Ok(());
        }
        let known: Vec<u32> = self.known.iter().copied().collect();
        for pid in known {
            self.out.snapshot_maps(pid)?;
            // A process that loads Python late (one embedding it).
            self.scan_python(pid)?;
        }
        Ok(())
    }

    /// Writes the CUDA record when it changed.
    fn write_cuda(&mut self) -> Result<()> {
        match self.cuda.take_changed() {
            Some(info) => self.out.write_json(record::CUDA, &info),
            None => Ok(()),
        }
    }

    /// Looks for a CUDA runtime loaded since the last look (a job importing
    /// torch now) and records the cudaLaunchKernel counts.
    fn refresh_cuda(&mut self) -> Result<()> {
        let now = monotonic_ns();
        let pids: Vec<u32> = self.known.iter().copied().collect();
        for pid in pids {
            self.cuda.scan(&mut self.programs, pid, now)?;
            self.torch.scan(&mut self.programs, pid, now)?;
        }
        self.write_step_probes()?;
        self.cuda.refresh_launches(&self.programs)?;
        self.write_cuda()
    }

    fn status_line(&self) {
        let lagging = if self.out.is_full() {
            " (writing behind: events wait in the ring buffer)"
        } else {
            ""
        };
        let mut line = format!(
            "tprof: {:.0} s, {} events, {} lost, {} processes{lagging}",
            self.started.elapsed().as_secs_f64(),
            self.events,
            self.lost.total(),
            self.known.len()
        );
        if let Some(stopping) = &self.stopping {
            line = format!("{line}; {stopping}; {FINISHING}");
        }
        if std::io::stderr().is_terminal() {
            eprint!("\r\x1b[K{line}");
            let _ = std::io::stderr().flush();
        } else if self.started.elapsed().as_secs().is_multiple_of(10) {
            eprintln!("{line}");
        }
    }

    fn roots_exited(&mut self) -> bool {
        if let Some(command) = &mut self.command {
            return command.try_reap();
        }
        self.roots
            .iter()
            .all(|&pid| procfs::stat(pid).is_none_or(|s| s.is_dead()))
    }

    /// Drains what is left, writes the totals and the footer, and detaches.
    /// On an error, before or here, the recording so far stays readable and
    /// the error says so.
    pub(super) fn finish(mut self, result: Result<StopReason>) -> Result<RecordOutcome> {
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
        let path = self.path.clone();
        match result {
            Ok(reason) => self.complete(reason),
            Err(err) => {
                // The command must not outlive tprof: stopped as a
                // `--duration` would, without recording its end.
                if let Some(command) = &mut self.command {
                    command.stop_and_wait(libc::SIGTERM, self.kill_after);
                }
                // `self` is dropped here: the programs detach, and the
                // writer thread ends when its queue is empty.
                Err(err)
            }
        }
        .map_err(|e| cut_short_error(&path, e))
    }

    fn complete(mut self, stop_reason: StopReason) -> Result<RecordOutcome> {
        // The last drain must not be put off: wait for the writer.
        while self.out.is_full() {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.drain()?;
        // What the kernel lost up to the last drain: programs skipped
        // after it (tprof's own map reads and detach threads below make
        // the kernel skip some) lose nothing of the recording.
        let mut lost = self.programs.lost_counts()?;
        // Nothing after the last drain is kept, so the job stops paying
        // for the programs now, not once the file is written.
        self.programs.detach();
        if let Some(gpu) = &mut self.gpu {
            gpu.stop();
        }
        self.drain_gpu()?;
        self.cuda.refresh_launches(&self.programs)?;
        self.expire_in_flight();
        let (mut sink, stack_counts) = self.out.finish()?;
        sink.record(record::CUDA, &encode(self.cuda.info())?)?;
        sink.record(record::STEP_PROBES, &encode(self.torch.info())?)?;
        lost.tracking_full += self.untracked;
        stack_counts.add_to(&mut lost);
        self.expired.count_in(&mut lost);
        self.lost = lost;
        sink.record(record::LOST, &encode(&self.lost)?)?;
        let command_exit = self.command.as_ref().map(LaunchedCommand::exit);
        let footer = Footer {
            end: anchor(),
            stop_reason: stop_reason.as_str().to_string(),
            command_exit: command_exit.clone(),
            clock_sync: super::clock::clock_sync(),
        };
        sink.record(record::FOOTER, &encode(&footer)?)?;
        sink.finish()?;
        // The recording is whole: what is left is the kernel's.
        self.programs.wait_detached();
        drop(self.programs);
        if std::env::var_os(STACK_COPY_STATS_ENV).is_some_and(|v| v == "1") {
            eprintln!(
                "{}",
                copy_stats_line(
                    self.copies,
                    self.copy_bytes,
                    self.started.elapsed().as_secs_f64()
                )
            );
        }
        Ok(RecordOutcome {
            path: self.path,
            stop_reason,
            events: self.events,
            lost: self.lost,
            command_exit,
        })
    }
}

/// `tprof: stack copies: N drained, B bytes in S s (R bytes/s)`: B counts
/// whole ring-buffer records (header, registers and the stack bytes).
fn copy_stats_line(copies: u64, bytes: u64, secs: f64) -> String {
    format!(
        "tprof: stack copies: {copies} drained, {bytes} bytes in {secs:.2} s ({:.0} bytes/s)",
        bytes as f64 / secs.max(1e-9)
    )
}

/// A stack copy: unwound by the writer, not written, so not an event of
/// the recording.
fn is_stack_copy(bytes: &[u8]) -> bool {
    bytes.get(8..10) == Some(&kind::STACK_COPY.to_le_bytes()[..])
}

/// The pid of a process that a raw event says was created (with its parent)
/// or exec'd.
fn process_change(bytes: &[u8]) -> Option<(u32, Option<u32>, u64)> {
    let ts = u64::from_le_bytes(bytes.get(0..8)?.try_into().ok()?);
    let kind = u16::from_le_bytes(bytes.get(8..10)?.try_into().ok()?);
    if kind != kind::FORK && kind != kind::EXEC {
        return None;
    }
    match recording::events::decode(bytes, Framing::Length).ok()?.0? {
        Event::Fork {
            parent_tgid,
            child_tgid,
            ..
        } if child_tgid != parent_tgid => Some((child_tgid, Some(parent_tgid), ts)),
        Event::Exec { tgid, .. } => Some((tgid, None, ts)),
        _ => None,
    }
}

/// (kernel release, hostname).
fn uname() -> (String, String) {
    // SAFETY: uname fills a zeroed struct.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid utsname to fill.
    unsafe { libc::uname(&mut u) };
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.release), field(&u.nodename))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_stats_line_gives_bytes_per_second() {
        assert_eq!(
            copy_stats_line(3, 3000, 2.0),
            "tprof: stack copies: 3 drained, 3000 bytes in 2.00 s (1500 bytes/s)"
        );
        // No time elapsed: no division by zero.
        assert!(copy_stats_line(0, 0, 0.0).ends_with("(0 bytes/s)"));
    }

    #[test]
    fn a_stack_copy_is_told_from_an_event_by_its_kind() {
        let mut copy = 7u64.to_le_bytes().to_vec();
        copy.extend_from_slice(&kind::STACK_COPY.to_le_bytes());
        assert!(is_stack_copy(&copy));
        let mut fork = 7u64.to_le_bytes().to_vec();
        fork.extend_from_slice(&kind::FORK.to_le_bytes());
        assert!(!is_stack_copy(&fork));
    }
}

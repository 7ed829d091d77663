//! Capture: everything that touches the live system. Loads and attaches the
//! kernel programs, decides what is tracked, drains events into the
//! recording as it goes, samples /proc and the GPUs ([`gpu`]), probes the CUDA runtime the
//! job loads ([`cuda`]), and stops on a signal, the duration or the targets' exit.
//!
//! Architecture invariant: the only module that needs root and the only one
//! that uses aya (through [`programs`]). What it writes is all that later
//! stages see.

mod btf;
pub mod cuda;
pub mod gpu;
mod launch;
pub mod limits;
pub mod procfs;
mod programs;
mod symbols;
pub mod tracefs;

use std::{
    collections::HashSet,
    fs::File,
    io::{BufWriter, IsTerminal as _, Write as _},
    path::{Path, PathBuf},
    sync::OnceLock,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use profiler_ebpf::kind;
use serde::Serialize;
use tokio::signal::unix::{Signal, SignalKind, signal};

use cuda::CudaTracer;
use gpu::{GpuOptions, GpuSampler};
use programs::KernelPrograms;
pub use programs::MapLimits;
use symbols::AddressSpaces;
use tprof_core::recording::{
    self, ClockAnchor, Event, Footer, GpuInfo, Header, LostCounts, Origin, ProcessInfo, ThreadInfo,
    Writer, record,
};

/// How often the ring buffer is drained and the file flushed. Polling on a
/// timer instead of waking per event keeps tprof's cost flat under load (the
/// kernel side submits with BPF_RB_NO_WAKEUP).
const DRAIN_EVERY: Duration = Duration::from_millis(50);
/// How long after it appears a process's maps are re-read on every drain.
const YOUNG_FOR: Duration = Duration::from_secs(2);
/// How often /proc/stat is sampled (every other drain).
const SAMPLE_EVERY_TICKS: u32 = 2;
/// How often the status line and the lost counts are refreshed, and the
/// /proc/<pid>/maps snapshots of live processes (for dlopen'd libraries,
/// and a CUDA runtime loaded after tracking began).
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// What `tprof record` was asked to do, validated.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Running processes to attach to (with their descendants).
    pub pids: Vec<u32>,
    /// A command to launch and trace from its exec (empty: none).
    pub command: Vec<String>,
    pub duration: Option<Duration>,
    pub output: PathBuf,
    pub force: bool,
    pub gpu: GpuOptions,
    /// On-CPU sampling frequency; None: no stacks at all (--no-stacks).
    pub sample_hz: Option<u64>,
    /// Trace CUDA runtime calls (off with --no-cuda).
    pub cuda: bool,
    /// Kernel map sizes (defaults unless a test shrinks them).
    pub limits: MapLimits,
}

/// Why recording stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Interrupted,
    Terminated,
    HungUp,
    TargetsExited,
}

impl StopReason {
    fn is_signal(self) -> bool {
        matches!(
            self,
            StopReason::Interrupted | StopReason::Terminated | StopReason::HungUp
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Interrupted => "interrupted",
            StopReason::Terminated => "terminated",
            StopReason::HungUp => "hung up",
            StopReason::TargetsExited => "targets exited",
        }
    }
}

/// What a finished recording holds.
#[derive(Debug, Clone)]
pub struct RecordOutcome {
    pub path: PathBuf,
    pub stop_reason: StopReason,
    pub events: u64,
    pub lost: LostCounts,
}

/// Records until a stop condition; the recording is complete on `Ok`.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(record_async(opts))
}

async fn record_async(opts: &RecordOptions) -> Result<RecordOutcome> {
    // Before anything can be interrupted: a Ctrl-C from now on stops cleanly.
    let mut signals = Signals::new()?;
    check_root()?;
    check_capabilities()?;
    check_targets(&opts.pids)?;
    tracefs::ensure_mounted()?;
    let offsets = tracefs::tracepoint_offsets()?;
    let file = crate::output::create(&opts.output, opts.force)?;
    // Until recording starts, a failure leaves no empty file behind (it
    // would only make the next run's -o refuse the path).
    let unstarted = Unstarted(&opts.output);
    let mut programs = KernelPrograms::load(&offsets, opts.sample_hz.is_some(), opts.limits)?;
    let held = if opts.command.is_empty() {
        None
    } else {
        Some(launch::spawn_held(&opts.command)?)
    };
    raise_priority();
    // Before the window opens: NVML can take a while to start.
    let gpu = gpu::start(&opts.gpu);
    let start = anchor();
    programs.attach()?;
    if let Some(hz) = opts.sample_hz {
        programs.attach_sampler(hz)?;
    }
    let writer = Writer::new(BufWriter::with_capacity(1 << 20, file))
        .with_context(|| format!("writing the recording to {} failed", opts.output.display()))?;
    let mut session = Session::new(programs, writer, opts, gpu);
    match &held {
        Some(child) => session.track_launched(child.pid, &opts.command, start)?,
        None => session.track_attached(&opts.pids, start)?,
    }
    if let Some(child) = held {
        child.release()?;
    }
    std::mem::forget(unstarted);
    session.announce();
    let result = session.run(&mut signals, opts.duration).await;
    // From here a signal means "stop now", even mid-write.
    arm_force_stop(&opts.output);
    if let Ok(reason) = &result
        && reason.is_signal()
    {
        eprintln!(
            "tprof: stopping ({}); press Ctrl-C again to stop at once",
            reason.as_str()
        );
    }
    let outcome = session.finish(result);
    // The recording is complete or has failed: what follows (flamegraphs,
    // the report) is stopped by a signal the ordinary way.
    disarm_force_stop();
    if let Ok(outcome) = &outcome {
        let stacks_lost = match outcome.lost.stack_lost() {
            0 => String::new(),
            n => format!(", {n} stacks lost"),
        };
        eprintln!(
            "tprof: stopped ({}), {} events, {} lost{stacks_lost}, written to {}",
            outcome.stop_reason.as_str(),
            outcome.events,
            outcome.lost.total(),
            outcome.path.display()
        );
    }
    outcome
}

/// The nice value capture runs at. The capture thread drains the ring
/// buffer every 50 ms; a job that keeps every CPU busy at the default
/// priority starved it for long enough that the 16 MiB ring buffer
/// overflowed (bench capacity runs at 16 producer pairs lost up to a million
/// events; at nice -10, none). The work is the same either way, it is only
/// done on time.
const CAPTURE_NICE: i32 = -10;

/// Raises this thread's priority (Linux nice values are per thread; threads
/// started later inherit it). Called after the launched command is forked,
/// so the job keeps its own priority. Best effort: recording still works
/// without it.
fn raise_priority() {
    // SAFETY: setpriority has no memory preconditions.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, CAPTURE_NICE) } != 0 {
        eprintln!(
            "tprof: warning: cannot raise the capture thread's priority ({}); \
             a job that keeps every CPU busy may make it lose events",
            std::io::Error::last_os_error()
        );
    }
}

fn check_root() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("tprof record needs root to load eBPF programs; run it with sudo");
    }
    Ok(())
}

/// Capability bits (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Root without the capabilities (in a container, or under a reduced
/// capability bounding set) gets EPERM from the kernel; say what is missing.
fn check_capabilities() -> Result<()> {
    let Some(effective) = procfs::effective_capabilities() else {
        return Ok(()); // cannot tell: let the kernel decide
    };
    if let Some(missing) = missing_capabilities(effective, tracefs::is_mounted()) {
        bail!(
            "tprof record runs as root without {missing} (a container or a capability \
             bounding set dropped them); run it as full root: sudo on the host, or a \
             privileged container"
        );
    }
    Ok(())
}

/// What `effective` lacks of what tprof needs: CAP_BPF and CAP_PERFMON to
/// load and attach programs, or CAP_SYS_ADMIN in their place; and
/// CAP_SYS_ADMIN itself to mount tracefs when it is not mounted.
fn missing_capabilities(effective: u64, tracefs_mounted: bool) -> Option<String> {
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return None;
    }
    if !tracefs_mounted {
        return Some("CAP_SYS_ADMIN (to mount tracefs)".into());
    }
    match (has(CAP_BPF), has(CAP_PERFMON)) {
        (true, true) => None,
        (false, true) => Some("CAP_BPF (or CAP_SYS_ADMIN)".into()),
        (true, false) => Some("CAP_PERFMON (or CAP_SYS_ADMIN)".into()),
        (false, false) => Some("CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)".into()),
    }
}

fn check_targets(pids: &[u32]) -> Result<()> {
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

/// SIGINT, SIGTERM and SIGHUP, caught so each stops the recording cleanly.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        let catch = |kind| signal(kind).context("cannot install signal handlers");
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
        })
    }
}

/// Removes the output file of a recording that failed to start, when
/// dropped; forgotten once it starts.
struct Unstarted<'a>(&'a Path);

impl Drop for Unstarted<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// What a second signal prints before tprof exits; set by [`arm_force_stop`].
static FORCE_STOP_MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();

/// Replaces the stopping handlers: once recording is stopping (its final
/// drain, stack symbolization and footer can take a while), SIGINT, SIGTERM
/// or SIGHUP ends tprof at once. Nothing is lost that was flushed: the file
/// is a readable prefix, and exiting closes the last descriptors of the
/// programs and maps, so the kernel detaches and frees them all.
fn arm_force_stop(path: &Path) {
    let _ = FORCE_STOP_MESSAGE.set(
        format!(
            "error: stopped at once by a second signal; the recording so far is kept in {} \
             (`tprof report` reads it as cut short)\n",
            path.display()
        )
        .into_bytes(),
    );
    let handler = force_stop as extern "C" fn(libc::c_int);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only calls async-signal-safe functions
        // (write, _exit) on memory set before it was installed.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

fn disarm_force_stop() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: restoring the default disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

extern "C" fn force_stop(sig: libc::c_int) {
    if let Some(message) = FORCE_STOP_MESSAGE.get() {
        // SAFETY: write and _exit are async-signal-safe; the buffer is
        // never freed.
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
    }
    unsafe { libc::_exit(128 + sig) };
}

/// The error a recording that could not be finished ends with: what went
/// wrong, then that the prefix on disk is kept, and how to fix a full disk.
fn cut_short_error(path: &Path, err: anyhow::Error) -> anyhow::Error {
    let no_space = err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| code == libc::ENOSPC || code == libc::EDQUOT)
    });
    let fix = if no_space {
        "; free some space or record to another disk with -o"
    } else {
        ""
    };
    anyhow!(
        "{err:#}; the recording so far is kept in {} (`tprof report` reads it as cut short){fix}",
        path.display()
    )
}

/// The recording file being written, with every write failure naming it.
struct Output {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
}

impl Output {
    fn failed(&self) -> String {
        format!("writing the recording to {} failed", self.path.display())
    }

    fn write_json<T: Serialize>(&mut self, kind: u32, value: &T) -> Result<()> {
        self.writer
            .write_json(kind, value)
            .with_context(|| self.failed())
    }

    fn push_event(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.push_event(bytes).with_context(|| self.failed())
    }

    fn flush(&mut self) -> Result<()> {
        self.writer.flush().with_context(|| self.failed())
    }

    /// Flushes everything and syncs it to the disk.
    fn finish(self) -> Result<()> {
        let failed = self.failed();
        let file = self
            .writer
            .finish()
            .context(failed.clone())?
            .into_inner()
            .map_err(|e| e.into_error())
            .context(failed.clone())?;
        file.sync_all().context(failed)
    }
}

/// CLOCK_MONOTONIC now, in ns (the clock of bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Both clocks, read back to back.
pub fn anchor() -> ClockAnchor {
    ClockAnchor {
        monotonic_ns: monotonic_ns(),
        realtime_ns: clock_ns(libc::CLOCK_REALTIME),
    }
}

/// One recording in progress.
struct Session {
    programs: KernelPrograms,
    out: Output,
    /// The processes whose exit ends the recording.
    roots: Vec<u32>,
    /// The launched command's pid, which we must reap.
    child: Option<u32>,
    /// Processes with a /proc snapshot in the recording.
    known: HashSet<u32>,
    /// Their executable mappings, for symbolizing stacks at the end.
    spaces: AddressSpaces,
    /// Processes that appeared or exec'd lately, whose libraries are still
    /// being mapped: their maps are re-read every tick, not every second.
    young: Vec<(u32, Instant)>,
    sample_hz: Option<u64>,
    events: u64,
    lost: LostCounts,
    /// Threads and processes of `-p` targets that could not be tracked
    /// because the tracked maps were full: counted with the kernel's own
    /// tracking_full drops.
    untracked: u64,
    started: Instant,
    ticks: u32,
    last_status: Instant,
    threads_seen: usize,
    /// Written after the header.
    gpu_info: GpuInfo,
    gpu: Option<GpuSampler>,
    cuda: CudaTracer,
    /// One drain's events, kept between drains for its buffers.
    batch: DrainBatch,
}

/// The events of one drain, gathered from every ring-buffer shard and put
/// in timestamp order, so the recording keeps the order one shared buffer
/// gave: each shard is in order, and everything reserved before the drain
/// began is read in it.
#[derive(Default)]
struct DrainBatch {
    bytes: Vec<u8>,
    /// (timestamp, offset in `bytes`, length) of each event.
    order: Vec<(u64, usize, usize)>,
}

impl DrainBatch {
    fn gather(&mut self, shards: &mut [aya::maps::RingBuf<aya::maps::MapData>]) {
        self.bytes.clear();
        self.order.clear();
        for shard in shards {
            while let Some(item) = shard.next() {
                let bytes: &[u8] = &item;
                let ts = bytes
                    .get(..8)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                self.order.push((ts, self.bytes.len(), bytes.len()));
                self.bytes.extend_from_slice(bytes);
            }
        }
        // Stable: events of one timestamp keep their shard's order.
        self.order.sort_by_key(|&(ts, _, _)| ts);
    }

    fn in_order(&self) -> impl Iterator<Item = &[u8]> {
        self.order
            .iter()
            .map(|&(_, start, len)| &self.bytes[start..start + len])
    }
}

impl Session {
    fn new(
        programs: KernelPrograms,
        writer: Writer<BufWriter<File>>,
        opts: &RecordOptions,
        (gpu_info, gpu): (GpuInfo, Option<GpuSampler>),
    ) -> Session {
        Session {
            programs,
            out: Output {
                writer,
                path: opts.output.clone(),
            },
            roots: Vec::new(),
            child: None,
            known: HashSet::new(),
            spaces: AddressSpaces::default(),
            young: Vec::new(),
            sample_hz: opts.sample_hz,
            events: 0,
            lost: LostCounts::default(),
            untracked: 0,
            started: Instant::now(),
            ticks: 0,
            last_status: Instant::now(),
            threads_seen: 0,
            gpu_info,
            gpu,
            cuda: CudaTracer::new(opts.cuda),
            batch: DrainBatch::default(),
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
        };
        self.out.write_json(record::HEADER, &header)?;
        self.out.write_json(record::GPU_INFO, &self.gpu_info)?;
        Ok(())
    }

    /// Tracks a launched command, held before exec.
    fn track_launched(&mut self, pid: u32, argv: &[String], start: ClockAnchor) -> Result<()> {
        self.roots = vec![pid];
        self.child = Some(pid);
        self.programs.track_process(pid)?;
        self.programs.track_thread(pid, pid)?;
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
    fn track_attached(&mut self, pids: &[u32], start: ClockAnchor) -> Result<()> {
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
        self.spaces.snapshot(pid);
        Ok(())
    }

    /// The one line a script waiting for tprof to attach can look for.
    fn announce(&self) {
        eprintln!(
            "tprof: recording {} process(es), {} thread(s) to {} (Ctrl-C to stop)",
            self.known.len(),
            self.threads_seen,
            self.out.path.display()
        );
        match &self.gpu_info.status {
            Some(reason) => eprintln!("tprof: no GPU data: {reason}"),
            None => eprintln!("tprof: sampling {} GPU(s)", self.gpu_info.devices.len()),
        }
    }

    async fn run(
        &mut self,
        signals: &mut Signals,
        duration: Option<Duration>,
    ) -> Result<StopReason> {
        let mut tick = tokio::time::interval(DRAIN_EVERY);
        let deadline = duration.map(|d| self.started + d);
        loop {
            tokio::select! {
                // A stop request wins over another drain: the user is waiting.
                biased;
                _ = signals.interrupt.recv() => return Ok(StopReason::Interrupted),
                _ = signals.terminate.recv() => return Ok(StopReason::Terminated),
                _ = signals.hangup.recv() => return Ok(StopReason::HungUp),
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

    fn on_tick(&mut self) -> Result<()> {
        self.drain()?;
        self.refresh_young_maps();
        self.ticks += 1;
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
            self.refresh_maps();
            self.refresh_cuda()?;
            self.status_line();
        }
        self.out.flush()?;
        Ok(())
    }

    /// Moves every event from the ring buffer into the recording, and
    /// snapshots processes that appeared or exec'd.
    fn drain(&mut self) -> Result<()> {
        let mut new_processes = Vec::new();
        let mut batch = std::mem::take(&mut self.batch);
        batch.gather(&mut self.programs.events);
        for bytes in batch.in_order() {
            self.events += 1;
            if let Some((pid, parent)) = process_change(bytes) {
                if let Some(parent) = parent {
                    self.spaces.set_parent(pid, parent);
                }
                new_processes.push(pid);
            }
            self.out.push_event(bytes)?;
        }
        self.batch = batch;
        for pid in new_processes {
            self.known.insert(pid);
            self.young.push((pid, Instant::now()));
            self.snapshot_process(pid, Origin::Forked)?;
            // An exec may have brought the CUDA runtime in (a launched job,
            // a worker started with spawn).
            self.cuda.scan(&mut self.programs, pid, monotonic_ns())?;
        }
        self.write_cuda(false)?;
        Ok(())
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

    /// The kernel's drop counts plus what could not be tracked at attach.
    fn lost_counts(&self) -> Result<LostCounts> {
        let mut lost = self.programs.lost_counts()?;
        lost.tracking_full += self.untracked;
        Ok(lost)
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
    fn refresh_young_maps(&mut self) {
        self.young.retain(|(_, seen)| seen.elapsed() < YOUNG_FOR);
        if self.sample_hz.is_none() {
            return;
        }
        for &(pid, _) in &self.young {
            self.spaces.snapshot(pid);
        }
    }

    /// Re-reads the maps of live processes, so libraries loaded since the
    /// last snapshot resolve even if the process exits before the end.
    fn refresh_maps(&mut self) {
        if self.sample_hz.is_none() {
            return;
        }
        for &pid in &self.known {
            self.spaces.snapshot(pid);
        }
    }

    /// Writes the CUDA record when it changed (or always, at the end).
    fn write_cuda(&mut self, force: bool) -> Result<()> {
        let failed = self.out.failed();
        self.cuda.write(&mut self.out.writer, force).context(failed)
    }

    /// Looks for a CUDA runtime loaded since the last look (a job importing
    /// torch now) and records the cudaLaunchKernel counts.
    fn refresh_cuda(&mut self) -> Result<()> {
        let now = monotonic_ns();
        let pids: Vec<u32> = self.known.iter().copied().collect();
        for pid in pids {
            self.cuda.scan(&mut self.programs, pid, now)?;
        }
        self.cuda.refresh_launches(&self.programs)?;
        self.write_cuda(false)
    }

    /// Reads the kernel's stack aggregate, symbolizes it and writes the
    /// STACKS record.
    fn write_stacks(&mut self) -> Result<()> {
        let Some(hz) = self.sample_hz else {
            return Ok(());
        };
        let raw = self.programs.read_stacks()?;
        let table = symbols::build_table(&raw, &self.spaces, hz, monotonic_ns());
        self.out.write_json(record::STACKS, &table)?;
        Ok(())
    }

    fn status_line(&self) {
        let line = format!(
            "tprof: {:.0} s, {} events, {} lost, {} processes",
            self.started.elapsed().as_secs_f64(),
            self.events,
            self.lost.total(),
            self.known.len()
        );
        if std::io::stderr().is_terminal() {
            eprint!("\r\x1b[K{line}");
            let _ = std::io::stderr().flush();
        } else if self.started.elapsed().as_secs().is_multiple_of(10) {
            eprintln!("{line}");
        }
    }

    fn roots_exited(&mut self) -> bool {
        if let Some(child) = self.child {
            let mut status = 0;
            // SAFETY: reaping our own child without blocking.
            let rc = unsafe { libc::waitpid(child as i32, &mut status, libc::WNOHANG) };
            return rc == child as i32 || rc < 0;
        }
        self.roots
            .iter()
            .all(|&pid| procfs::stat(pid).is_none_or(|s| s.is_dead()))
    }

    /// Drains what is left, writes the totals and the footer, and detaches.
    /// On an error, before or here, the recording so far stays readable and
    /// the error says so.
    fn finish(self, result: Result<StopReason>) -> Result<RecordOutcome> {
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
        let path = self.out.path.clone();
        // On an error `self` is dropped here: the programs detach.
        result
            .and_then(|reason| self.complete(reason))
            .map_err(|e| cut_short_error(&path, e))
    }

    fn complete(mut self, stop_reason: StopReason) -> Result<RecordOutcome> {
        self.drain()?;
        if let Some(gpu) = &mut self.gpu {
            gpu.stop();
        }
        self.drain_gpu()?;
        self.write_stacks()?;
        self.cuda.refresh_launches(&self.programs)?;
        self.write_cuda(true)?;
        self.lost = self.lost_counts()?;
        self.out.write_json(record::LOST, &self.lost)?;
        let footer = Footer {
            end: anchor(),
            stop_reason: stop_reason.as_str().to_string(),
        };
        self.out.write_json(record::FOOTER, &footer)?;
        let path = self.out.path.clone();
        self.out.finish()?;
        drop(self.programs);
        Ok(RecordOutcome {
            path,
            stop_reason,
            events: self.events,
            lost: self.lost,
        })
    }
}

/// The pid of a process that a raw event says was created (with its parent)
/// or exec'd.
fn process_change(bytes: &[u8]) -> Option<(u32, Option<u32>)> {
    let kind = u16::from_le_bytes(bytes.get(8..10)?.try_into().ok()?);
    if kind != kind::FORK && kind != kind::EXEC {
        return None;
    }
    match recording::events::decode(bytes).ok()?.0 {
        Event::Fork {
            parent_tgid,
            child_tgid,
            ..
        } if child_tgid != parent_tgid => Some((child_tgid, Some(parent_tgid))),
        Event::Exec { tgid, .. } => Some((tgid, None)),
        _ => None,
    }
}

/// (kernel release, hostname).
fn uname() -> (String, String) {
    // SAFETY: uname fills a zeroed struct.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
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
    fn names_the_missing_capabilities() {
        let caps = |list: &[u32]| list.iter().fold(0u64, |acc, c| acc | 1 << c);
        assert_eq!(missing_capabilities(caps(&[CAP_SYS_ADMIN]), false), None);
        assert_eq!(
            missing_capabilities(caps(&[CAP_BPF, CAP_PERFMON]), true),
            None
        );
        let only_bpf = missing_capabilities(caps(&[CAP_BPF]), true).unwrap();
        assert!(only_bpf.starts_with("CAP_PERFMON"), "{only_bpf}");
        let none = missing_capabilities(0, true).unwrap();
        assert!(none.contains("CAP_BPF and CAP_PERFMON"), "{none}");
        let unmounted = missing_capabilities(caps(&[CAP_BPF, CAP_PERFMON]), false).unwrap();
        assert!(unmounted.contains("tracefs"), "{unmounted}");
    }
}

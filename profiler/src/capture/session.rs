//! One capture in progress, from the programs' load to the last record:
//! the session owns the kernel programs, the pipeline to the sink, the GPU
//! sampler and the launched command, and runs the periodic jobs the
//! [`Scheduler`] calls for, each the work of a module of its own: the
//! drain (here: the ring buffers into the pipeline), the [`Tracker`]
//! (targets, their snapshots and maps, the Python, CUDA and libtorch
//! watches), the [`Losses`] and the progress line ([`status`]).
//!
//! [`Session::start`] loads and attaches the programs, launches the command
//! or finds the targets, and writes the recording's start; [`Session::run`]
//! records until a signal, `--duration` or the targets' exit;
//! [`Session::stop`] passes the stop on to a launched command's process
//! group and keeps draining until the group is gone (SIGKILL after
//! `--kill-after`), so the job's exit is in the recording;
//! [`Session::finish`] drains what is left, detaches the programs at once
//! (the job stops paying for them now, not once the file is written) and
//! writes the CUDA, STEP_PROBES and LOST records and the FOOTER, with the
//! command's exit status. Whatever stops it (a signal, a second signal, a
//! full disk, an error), what the sink holds is a readable prefix and no
//! program or map outlives the process.

#![allow(
    rustdoc::private_intra_doc_links,
    reason = "the map above names private stages: it is for readers of the source"
)]

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use tprof_core::recording::{ClockAnchor, Footer, GpuInfo, LostCounts, record};

use super::clock::{self, anchor, monotonic_ns};
use super::drain::{DrainBatch, Drained, exec_mapped, process_change};
use super::file::cut_short_error;
use super::gpu::{self, GpuSampler};
use super::header::header;
use super::launch::{self, HeldChild, KILL_WAIT, LaunchedCommand};
use super::losses::Losses;
use super::options::{CaptureOptions, CaptureOutcome, Destination, StopReason};
use super::pipeline::{Pipeline, Threads};
use super::programs::{KernelPrograms, StackSettings};
use super::resolve::StackSetup;
use super::scheduler::{Job, Scheduler, Timers};
use super::signals::{self, Signals};
use super::sink::{Sink, encode};
use super::status::{self, Progress};
use super::tracker::{self, Tracker};
use super::{privileges, procfs, tracefs};
use profiler_ebpf::TracepointOffsets;

/// Set to 1 to have `tprof record` print, when it ends, how many user stack
/// copies it drained from the ring buffer and their bytes per second (the
/// benches' measure of what copying stacks costs; docs/benchmarks.md).
const STACK_COPY_STATS_ENV: &str = "TPROF_STACK_COPY_STATS";

/// Milliseconds to wait after attaching, before the targets are tracked: a
/// stand-in for the kernel holding an attach on a busy machine, so a test
/// can have its target exit meanwhile.
const ATTACH_DELAY_ENV: &str = "TPROF_ATTACH_DELAY_MS";

/// An attach that took this long is named in the error of targets that
/// exited meanwhile.
const SLOW_ATTACH: Duration = Duration::from_secs(2);

/// Checks what capture needs before anything is created: root and its
/// capabilities, the targets, tracefs; the tracepoints' field offsets.
pub(super) fn check(opts: &CaptureOptions) -> Result<TracepointOffsets> {
    privileges::check_root()?;
    privileges::check_capabilities()?;
    tracker::check_targets(&opts.pids)?;
    tracefs::ensure_mounted()?;
    tracefs::tracepoint_offsets()
}

/// The error of `-p` targets that all exited before they were tracked:
/// nothing of them was recorded. On a busy machine the kernel can hold a
/// new attach for seconds while an earlier tracer's programs are detached
/// (docs/benchmarks.md, "Stopping"); a slow attach is named as the likely
/// cause.
fn exited_while_attaching(pids: &[u32], took: Duration) -> String {
    let which = if let [pid] = pids {
        format!("process {pid} exited")
    } else {
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        format!("processes {} exited", pids.join(", "))
    };
    let slow = if took >= SLOW_ATTACH {
        format!(
            "; attaching took {:.1} s (on a busy machine the kernel can hold an attach \
             while an earlier tracer's programs are being detached)",
            took.as_secs_f64()
        )
    } else {
        String::new()
    };
    format!(
        "{which} while tprof was attaching, before any of it was traced{slow}; \
         run tprof again while the job runs"
    )
}

/// One capture in progress.
pub(super) struct Session {
    programs: KernelPrograms,
    out: Pipeline,
    /// Where the records go, for messages.
    destination: Destination,
    tracker: Tracker,
    scheduler: Scheduler,
    losses: Losses,
    drained: Drained,
    /// The launched command, which we reap, and stop with the recording.
    command: Option<LaunchedCommand>,
    /// How long the command's group gets to exit once stopped (`--kill-after`).
    kill_after: Duration,
    /// Set while stopping: what the status line adds.
    stopping: Option<String>,
    started: Instant,
    sample_hz: Option<u64>,
    /// Written after the header.
    gpu_info: GpuInfo,
    gpu: Option<GpuSampler>,
}

impl Session {
    /// Loads and attaches the programs, launches the command or finds the
    /// targets, starts the pipeline into `sink` (which messages call
    /// `destination`), and writes the recording's start. A launched command
    /// runs from here on.
    pub(super) fn start(
        opts: &CaptureOptions,
        offsets: &TracepointOffsets,
        sink: Box<dyn Sink>,
        destination: Destination,
    ) -> Result<Session> {
        let attaching = Instant::now();
        let stacks = opts.sample_hz.map(|hz| StackSettings {
            copy_bytes: opts.stack_copy_bytes,
            hz,
        });
        let mut programs = KernelPrograms::load(offsets, stacks, opts.python_frames, opts.limits)?;
        let held = if opts.command.is_empty() {
            None
        } else {
            Some(launch::spawn_held(&opts.command)?)
        };
        privileges::raise_priority();
        // Before the window opens: NVML can take a while to start.
        let gpu = gpu::start(&opts.gpu);
        let start = anchor();
        programs.attach()?;
        if let Some(hz) = opts.sample_hz {
            programs.attach_sampler(hz)?;
        }
        if let Some(ms) = std::env::var(ATTACH_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
        {
            std::thread::sleep(Duration::from_millis(ms));
        }
        let attach_took = attaching.elapsed();
        let stacks = match opts.sample_hz {
            Some(_) => programs.take_stack_source().map(|source| StackSetup {
                source,
                mode: programs.stack_mode(),
                maps_told: programs.map_events(),
            }),
            None => None,
        };
        let out = Pipeline::start(sink, stacks, Threads::from_env())?;
        let roots = match &held {
            Some(child) => vec![child.pid],
            None => opts.pids.clone(),
        };
        let mut session = Session::new(opts, programs, out, roots, gpu, destination);
        session.track(opts, start, held)?;
        if session.command.is_none() && session.tracker.roots_gone() {
            bail!("{}", exited_while_attaching(&opts.pids, attach_took));
        }
        Ok(session)
    }

    fn new(
        opts: &CaptureOptions,
        programs: KernelPrograms,
        out: Pipeline,
        roots: Vec<u32>,
        (gpu_info, gpu): (GpuInfo, Option<GpuSampler>),
        destination: Destination,
    ) -> Session {
        let tracker = Tracker::new(roots, &programs, opts.sample_hz.is_some(), opts.cuda);
        let now = Instant::now();
        Session {
            programs,
            out,
            destination,
            tracker,
            scheduler: Scheduler::new(opts.limits.in_flight_expiry, now),
            losses: Losses::new(opts.limits.in_flight_expiry),
            drained: Drained::default(),
            command: None,
            kill_after: opts.kill_after,
            stopping: None,
            started: now,
            sample_hz: opts.sample_hz,
            gpu_info,
            gpu,
        }
    }

    /// Writes the header, tracks the targets, and lets a held command run.
    fn track(
        &mut self,
        opts: &CaptureOptions,
        start: ClockAnchor,
        held: Option<HeldChild>,
    ) -> Result<()> {
        let command = held.as_ref().map(|_| opts.command.clone());
        self.write_header(start, command)?;
        let (programs, out) = (&mut self.programs, &mut self.out);
        match held {
            Some(child) => {
                let argv = &opts.command;
                self.tracker
                    .track_launched(programs, out, argv, start.monotonic_ns)?;
                self.command = Some(child.release()?);
            }
            None => self.tracker.track_attached(programs, out)?,
        }
        Ok(())
    }

    fn write_header(&mut self, start: ClockAnchor, command: Option<Vec<String>>) -> Result<()> {
        let user_stacks = self.programs.user_stacks();
        let roots = self.tracker.roots();
        let header = header(start, roots, command, self.sample_hz, user_stacks);
        self.out.write_json(record::HEADER, &header)?;
        self.out.write_json(record::GPU_INFO, &self.gpu_info)?;
        Ok(())
    }

    /// The launched command's pid (and process group), while there is one.
    fn command_pid(&self) -> Option<u32> {
        self.command.as_ref().map(LaunchedCommand::pid)
    }

    /// The one line a script waiting for tprof to attach can look for.
    pub(super) fn announce(&self) {
        let processes = self.tracker.known().len();
        let threads = self.tracker.threads_seen();
        status::announce(processes, threads, &self.destination, &self.gpu_info);
    }

    /// Records until a stop signal, the `duration` or the targets' exit.
    pub(super) async fn run(
        &mut self,
        signals: &mut Signals,
        duration: Option<Duration>,
    ) -> Result<StopReason> {
        let mut timers = Timers::start().context("cannot start the drain's timer")?;
        let deadline = duration.map(|d| self.started + d);
        loop {
            let watching = self.tracker.watching_python();
            tokio::select! {
                // A stop request wins over another drain: the user is waiting.
                biased;
                reason = signals.next() => return Ok(reason),
                job = timers.next(watching) => match job.context("the drain's timer failed")? {
                    Job::WatchPython => {
                        self.tracker.watch_python(&mut self.programs, &mut self.out);
                    }
                    Job::Tick => {
                        self.on_tick()?;
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Ok(StopReason::Duration);
                        }
                        if self.roots_exited() {
                            return Ok(StopReason::TargetsExited);
                        }
                    }
                },
            }
        }
    }

    /// Stops: from here a signal within a second of the first is a
    /// duplicate, and a later one means "stop now", even mid-write; then a
    /// launched command is stopped and waited for.
    pub(super) async fn stop(&mut self, result: Result<StopReason>) -> Result<StopReason> {
        let by_signal = result.as_ref().is_ok_and(|r| r.is_signal());
        let group = self.command_pid().unwrap_or(0);
        signals::arm_force_stop(self.destination.file(), by_signal, group);
        let reason = result?;
        status::announce_stop(reason, self.command_pid(), self.kill_after);
        self.stop_command(reason).await?;
        Ok(reason)
    }

    /// Stops the launched command when the recording stopped before it
    /// did: passes the stop on to its process group (the signal tprof got;
    /// SIGTERM for `--duration`), keeps recording while the group shuts
    /// down, and kills it after `--kill-after`. Targets of `-p` are left
    /// alone.
    async fn stop_command(&mut self, reason: StopReason) -> Result<()> {
        let Some(command) = &mut self.command else {
            return Ok(());
        };
        let sig = match reason {
            StopReason::TargetsExited => return Ok(()),
            // `q` in the live view stops the command as a Ctrl-C would.
            StopReason::Interrupted | StopReason::Quit => libc::SIGINT,
            StopReason::HungUp => libc::SIGHUP,
            StopReason::Terminated | StopReason::Duration => libc::SIGTERM,
        };
        if !command.group_alive() {
            return Ok(());
        }
        command.stop(sig);
        let pid = command.pid();
        let kill_at = Instant::now() + self.kill_after;
        let mut tick = Timers::drains().context("cannot start the drain's timer")?;
        let mut killed_at = None;
        loop {
            tick.tick().await.context("the drain's timer failed")?;
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

    /// A drain tick: the drain and the young processes' maps, then the
    /// slower jobs due now, then a flush.
    fn on_tick(&mut self) -> Result<()> {
        self.drain()?;
        let (programs, out) = (&mut self.programs, &mut self.out);
        self.tracker.refresh_young_maps(programs, out);
        let due = self.scheduler.due(Instant::now());
        if due.expire {
            self.losses.expire(programs);
        }
        if due.torch_scan {
            self.tracker.look_for_torch(programs, out)?;
        }
        if due.system_sample
            && let Some(sample) = procfs::system_sample(monotonic_ns())
        {
            out.write_json(record::SYSTEM, &sample)?;
        }
        if due.status {
            self.losses
                .refresh(programs, self.tracker.untracked(), out)?;
            self.drain_gpu()?;
            let maps_lost = self.losses.written().ring_buffer_full.get("exec_map");
            let maps_lost = maps_lost.copied().unwrap_or(0);
            let (programs, out) = (&mut self.programs, &mut self.out);
            self.tracker.refresh_maps(programs, out, maps_lost)?;
            self.tracker.refresh_cuda(programs, out)?;
            // The live view draws its own progress.
            if self.destination.file().is_some() {
                self.progress().show();
            }
        }
        self.out.flush()
    }

    /// Moves every event from the ring buffer into the pipeline, with the
    /// snapshots of processes that appeared or exec'd before them. When
    /// the pipeline is too far behind, the events wait in the ring buffer
    /// for a later tick.
    fn drain(&mut self) -> Result<()> {
        if self.out.is_full() {
            return Ok(());
        }
        let mut batch = self.out.empty_batch();
        batch.gather(|push| self.programs.drain_events(push));
        self.drained.add(batch.counts());
        let (appeared, mapped) = if batch.has_process_records() {
            self.process_records(&batch)
        } else {
            (Vec::new(), Vec::new())
        };
        if !mapped.is_empty() {
            // Used up here: the maps are read below, before the events.
            batch.rewrite(|record| exec_mapped(record).is_none());
        }
        let (programs, out) = (&mut self.programs, &mut self.out);
        self.tracker.appeared(programs, out, &appeared, &mapped)?;
        out.send_events(batch);
        self.tracker.look_for_python(programs, out);
        self.tracker.write_changes(out)
    }

    /// The processes a batch's records say appeared (forked or exec'd,
    /// each told to the tracker in order) and those that mapped new code.
    fn process_records(&mut self, batch: &DrainBatch) -> (Vec<u32>, Vec<u32>) {
        let mut appeared = Vec::new();
        let mut mapped = Vec::new();
        for record in batch.in_order() {
            if let Some(pid) = exec_mapped(record) {
                if !mapped.contains(&pid) {
                    mapped.push(pid);
                }
            } else if let Some(change) = process_change(record) {
                let (pid, parent, ts) = (change.pid, change.parent, change.ts);
                self.tracker.changed(&mut self.out, pid, parent, ts);
                appeared.push(pid);
            }
        }
        (appeared, mapped)
    }

    /// Moves the GPU samples gathered so far into the pipeline.
    fn drain_gpu(&mut self) -> Result<()> {
        let Some(gpu) = &self.gpu else {
            return Ok(());
        };
        for batch in gpu.drain(self.tracker.known()) {
            self.out.write_json(record::GPU_SAMPLES, &batch)?;
        }
        Ok(())
    }

    fn progress(&self) -> Progress<'_> {
        Progress {
            elapsed: self.started.elapsed(),
            events: self.drained.events,
            lost: self.losses.written().total(),
            processes: self.tracker.known().len(),
            lagging: self.out.is_full(),
            stopping: self.stopping.as_deref(),
        }
    }

    fn roots_exited(&mut self) -> bool {
        match &mut self.command {
            Some(command) => command.try_reap(),
            None => self.tracker.roots_gone(),
        }
    }

    /// Drains what is left, writes the totals and the footer, and detaches.
    /// On an error, before or here, the recording so far stays readable and
    /// the error says so.
    pub(super) fn finish(mut self, result: Result<StopReason>) -> Result<CaptureOutcome> {
        let destination = self.destination.clone();
        if destination.file().is_some() {
            status::end_progress();
        }
        match result {
            Ok(reason) => self.complete(reason),
            Err(err) => {
                // The command must not outlive tprof: stopped as a
                // `--duration` would, without recording its end.
                if let Some(command) = &mut self.command {
                    command.stop_and_wait(libc::SIGTERM, self.kill_after);
                }
                // `self` is dropped here: the programs detach, and the
                // stages end when their queue is empty.
                Err(err)
            }
        }
        .map_err(|e| match destination.file() {
            Some(path) => cut_short_error(path, e),
            None => e,
        })
    }

    fn complete(mut self, stop_reason: StopReason) -> Result<CaptureOutcome> {
        let kernel_lost = self.last_drain()?;
        let (mut sink, stack_counts) = self.out.finish()?;
        let lost = self
            .losses
            .total(kernel_lost, self.tracker.untracked(), stack_counts);
        let command_exit = self.command.as_ref().map(LaunchedCommand::exit);
        let footer = Footer {
            end: anchor(),
            stop_reason: stop_reason.as_str().to_string(),
            command_exit: command_exit.clone(),
            clock_sync: clock::clock_sync(),
        };
        write_end(&mut *sink, &self.tracker, &lost, &footer)?;
        sink.finish()?;
        let switch_profile = self.programs.switch_profile();
        if !switch_profile.is_empty() {
            eprintln!("{}", status::switch_profile_line(&switch_profile));
        }
        // The recording is whole: what is left is the kernel's.
        self.programs.wait_detached();
        drop(self.programs);
        if std::env::var_os(STACK_COPY_STATS_ENV).is_some_and(|v| v == "1") {
            let secs = self.started.elapsed().as_secs_f64();
            let (copies, bytes) = (self.drained.copies, self.drained.copy_bytes);
            eprintln!(
                "{}",
                status::copy_stats_line((copies, bytes), secs, &stack_counts)
            );
        }
        Ok(CaptureOutcome {
            stop_reason,
            events: self.drained.events,
            lost,
            command_exit,
        })
    }

    /// The last drain, then the programs detached at once: nothing after
    /// it is kept, so the job stops paying for them now, not once the file
    /// is written. The kernel's lost counts up to the last drain: programs
    /// skipped after it (tprof's own map reads and detach threads make the
    /// kernel skip some) lose nothing of the recording.
    fn last_drain(&mut self) -> Result<LostCounts> {
        // The last drain must not be put off: wait for the pipeline.
        while self.out.is_full() {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.drain()?;
        let kernel_lost = self.programs.lost_counts()?;
        self.programs.detach();
        if let Some(gpu) = &mut self.gpu {
            gpu.stop();
        }
        self.drain_gpu()?;
        self.tracker.last_reads(&self.programs)?;
        self.losses.expire_at_stop(&mut self.programs);
        Ok(kernel_lost)
    }
}

/// The records that close a recording, after the last of the pipeline's:
/// CUDA and STEP_PROBES as they stand, the LOST totals, the FOOTER.
fn write_end(
    sink: &mut dyn Sink,
    tracker: &Tracker,
    lost: &LostCounts,
    footer: &Footer,
) -> Result<()> {
    let (cuda, step_probes) = tracker.final_records();
    sink.record(record::CUDA, &encode(cuda)?)?;
    sink.record(record::STEP_PROBES, &encode(step_probes)?)?;
    sink.record(record::LOST, &encode(lost)?)?;
    sink.record(record::FOOTER, &encode(footer)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_gone_before_tracking_are_named_with_a_slow_attach() {
        let quick = exited_while_attaching(&[42], Duration::from_millis(300));
        assert_eq!(
            quick,
            "process 42 exited while tprof was attaching, before any of it was traced; \
             run tprof again while the job runs"
        );
        let slow = exited_while_attaching(&[42, 43], Duration::from_millis(5_840));
        assert!(
            slow.starts_with("processes 42, 43 exited while tprof was attaching")
                && slow.contains("; attaching took 5.8 s (on a busy machine"),
            "{slow}"
        );
    }
}

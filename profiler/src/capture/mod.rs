//! Capture: everything that touches the live system. Loads and attaches the
//! kernel programs, decides what is tracked, drains events into the
//! recording as it goes, samples /proc and the GPUs ([`gpu`]), probes the CUDA runtime the
//! job loads ([`cuda`]), and stops on a signal, the duration or the targets' exit.
//!
//! [`record`] is the entry point; the stages it runs are modules of their
//! own: [`privileges`] checks, [`programs`] (the kernel side, the only
//! module that uses aya), [`launch`] (the command `record --` starts),
//! [`session`] (the recording loop), [`signals`] (how it stops), [`file`](mod@file)
//! (the recording file written) and [`clock`].
//!
//! Architecture invariant: the only module that needs root and the only one
//! that uses aya (through [`programs`]). What it writes is all that later
//! stages see.
//!
//! [`record`] builds a current-thread tokio runtime and runs `start`
//! (privilege checks, load, launch or find the targets, attach, track),
//! `Session::run`, `Session::stop_command` (a launched command is stopped
//! and waited for), then `Session::finish` (the last drain, CUDA, lost
//! counts and the footer). Inside capture only `programs` names an aya
//! type; whatever needs the live machine (symbols, process names and
//! command lines, device names, NVML's wall-clock timestamps turned into
//! CLOCK_MONOTONIC) is resolved here, at record time. Whatever stops a
//! recording (a signal, a second signal, a full disk, an error), the file
//! on disk is a readable prefix and no program or map outlives the process.
// The map above names private stages: it is for readers of the source
// (`cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

mod btf;
mod clock;
pub mod cuda;
mod drain;
mod file;
pub mod gpu;
mod launch;
pub mod limits;
mod node;
mod options;
mod pipeline;
mod privileges;
pub mod procfs;
mod programs;
mod python;
mod resolve;
mod session;
mod signals;
mod sink;
mod stacks;
mod symbols;
mod torch;
pub mod tracefs;
mod unwind;

use std::time::Duration;

use anyhow::{Context as _, Result};

pub use clock::{anchor, monotonic_ns};
use file::{RecordingFile, Unstarted};
pub use options::{RecordOptions, RecordOutcome, StopReason};
use pipeline::{Pipeline, Threads};
use programs::KernelPrograms;
pub use programs::MapLimits;
use session::Session;
use signals::Signals;

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
    let mut session = start(opts)?;
    session.announce();
    let result = session.run(&mut signals, opts.duration).await;
    // From here a signal within a second of the first is a duplicate, and
    // a later one means "stop now", even mid-write.
    let by_signal = result.as_ref().is_ok_and(|r| r.is_signal());
    let group = session.command_pid().unwrap_or(0);
    signals::arm_force_stop(&opts.output, by_signal, group);
    let result = match result {
        Ok(reason) => {
            announce_stop(reason, session.command_pid(), opts.kill_after);
            session.stop_command(reason).await.map(|()| reason)
        }
        Err(e) => Err(e),
    };
    stop(session, result)
}

/// What stopping does, on one line (a script can wait for "finishing").
fn announce_stop(reason: StopReason, command: Option<u32>, kill_after: Duration) {
    let what = match (reason, command) {
        (StopReason::TargetsExited, _) => return,
        (_, Some(pid)) => {
            let sig = match reason {
                StopReason::Interrupted => "SIGINT",
                StopReason::HungUp => "SIGHUP",
                _ => "SIGTERM",
            };
            format!(
                "stopping the command: {sig} to its process group {pid}, SIGKILL after {} s",
                kill_after.as_secs_f64()
            )
        }
        (_, None) => "detaching; the targets keep running".to_string(),
    };
    let hint = if reason.is_signal() {
        signals::FINISHING
    } else {
        "finishing…"
    };
    eprintln!("tprof: {} ({what}); {hint}", reason.as_str());
}

/// Checks what recording needs, loads and attaches the programs, launches
/// the command or finds the targets, and writes the recording's start.
fn start(opts: &RecordOptions) -> Result<Session> {
    privileges::check_root()?;
    privileges::check_capabilities()?;
    session::check_targets(&opts.pids)?;
    tracefs::ensure_mounted()?;
    let offsets = tracefs::tracepoint_offsets()?;
    let file = crate::output::create(&opts.output, opts.force)?;
    // Until recording starts, a failure leaves no empty file behind (it
    // would only make the next run's -o refuse the path).
    let unstarted = Unstarted(&opts.output);
    let stacks = opts.sample_hz.map(|_| opts.stack_copy_bytes);
    let mut programs = KernelPrograms::load(&offsets, stacks, opts.python_frames, opts.limits)?;
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
    let out = RecordingFile::create(file, opts.output.clone())?;
    let stacks = match opts.sample_hz {
        Some(_) => programs
            .take_stack_source()
            .map(|source| (source, programs.stack_mode())),
        None => None,
    };
    let out = Pipeline::start(Box::new(out), stacks, Threads::from_env())?;
    let mut session = Session::new(programs, out, opts, gpu);
    match &held {
        Some(child) => session.track_launched(child.pid, &opts.command, start)?,
        None => session.track_attached(&opts.pids, start)?,
    }
    if let Some(child) = held {
        session.command_started(child.release()?);
    }
    std::mem::forget(unstarted);
    Ok(session)
}

/// Finishes the recording (or says where its prefix is); from then on a
/// signal has its ordinary effect again, but for a duplicate of the first.
fn stop(session: Session, result: Result<StopReason>) -> Result<RecordOutcome> {
    let outcome = session.finish(result);
    signals::disarm_force_stop();
    if let Ok(outcome) = &outcome {
        if let Some(exit) = &outcome.command_exit {
            eprintln!("tprof: the command (pid {}) {}", exit.pid, exit.describe());
        }
        let stacks_lost = match outcome.lost.stack_lost() {
            0 => String::new(),
            n => format!(", {n} stacks lost"),
        };
        let in_flight_lost = match outcome.lost.in_flight_lost() {
            0 => String::new(),
            n => format!(", {n} requests, bios or CUDA calls lost in flight"),
        };
        eprintln!(
            "tprof: stopped ({}), {} events, {} lost{stacks_lost}{in_flight_lost}, written to {}",
            outcome.stop_reason.as_str(),
            outcome.events,
            outcome.lost.total(),
            outcome.path.display()
        );
    }
    outcome
}

//! Capture: everything that touches the live system. Loads and attaches the
//! kernel programs, decides what is tracked, drains events into the
//! recording as it goes, samples /proc and the GPUs ([`gpu`]), probes the
//! CUDA runtime the job loads ([`cuda`]), and stops on a signal, the
//! duration or the targets' exit.
//!
//! Architecture invariant: the only module that needs root and the only one
//! that uses aya (through [`programs`]). What it writes is all that later
//! stages see. Inside capture only `programs` names an aya type; whatever
//! needs the live machine (symbols, process names and command lines, device
//! names, NVML's wall-clock timestamps turned into CLOCK_MONOTONIC) is
//! resolved here, at record time. Whatever stops a recording (a signal, a
//! second signal, a full disk, an error), the file on disk is a readable
//! prefix and no program or map outlives the process.
//!
//! [`record`] is the entry point. It runs, in order: [`session::check`]
//! (root, capabilities, targets, tracefs), the file ([`file`](mod@file)),
//! `Session::start` (load, launch or find the targets, attach, track),
//! `Session::run` (until [`signals`], the duration or the targets' exit),
//! `Session::stop` (a launched command is stopped and waited for) and
//! `Session::finish` (the last drain, the totals, the footer).
//!
//! The capture is stages, each owning its state, on these threads:
//!
//! - the session's (this one, a current-thread tokio runtime):
//!   [`session`] runs the jobs [`scheduler`] calls for: the drain
//!   ([`drain`]), the [`tracker`] (targets, snapshots, maps, the Python,
//!   CUDA and libtorch watches), the [`losses`] and the progress line
//!   ([`status`]);
//! - `tprof-unwind` (or `tprof-writer`'s, by default): the resolve stage
//!   ([`resolve`]: [`stacks`], [`unwind`], [`symbols`], `python::frames`),
//!   drained events in, events with named stacks out;
//! - `tprof-writer`: the write stage, into a [`sink`] (the recording file);
//! - `tprof-gpu`: the NVML sampler ([`gpu`]).
//!
//! [`pipeline`] starts the stage threads and bounds the queue to them.
//! Options and outcomes are in [`options`]: the import graph runs one way,
//! from this module down, never back up.
// The map above names private stages: it is for readers of the source
// (`cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

mod btf;
mod clock;
pub mod cuda;
mod drain;
mod file;
pub mod gpu;
mod header;
mod launch;
pub mod limits;
mod losses;
mod node;
mod options;
mod pipeline;
mod privileges;
pub mod procfs;
mod programs;
mod python;
mod resolve;
mod scheduler;
mod session;
mod signals;
mod sink;
mod stacks;
mod status;
mod symbols;
mod torch;
pub mod tracefs;
mod tracker;
mod unwind;

use anyhow::{Context as _, Result};

pub use clock::{anchor, monotonic_ns};
use file::{RecordingFile, Unstarted};
pub use options::{RecordOptions, RecordOutcome, StopReason};
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

/// The recording's life, in order: checks, the file, the capture into it,
/// the stop, the end.
async fn record_async(opts: &RecordOptions) -> Result<RecordOutcome> {
    // Before anything can be interrupted: a Ctrl-C from now on stops cleanly.
    let mut signals = Signals::new()?;
    let offsets = session::check(opts)?;
    let file = crate::output::create(&opts.output, opts.force)?;
    // Until recording starts, a failure leaves no empty file behind (it
    // would only make the next run's -o refuse the path).
    let unstarted = Unstarted(&opts.output);
    let sink = RecordingFile::create(file, opts.output.clone())?;
    let mut session = Session::start(opts, &offsets, Box::new(sink))?;
    std::mem::forget(unstarted);
    session.announce();
    let result = session.run(&mut signals, opts.duration).await;
    let result = session.stop(result).await;
    // Finishes the recording (or says where its prefix is); from then on a
    // signal has its ordinary effect again, but for a duplicate of the
    // first.
    let outcome = session.finish(result);
    signals::disarm_force_stop();
    if let Ok(outcome) = &outcome {
        status::stopped(outcome);
    }
    outcome
}

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
//! [`record`] and [`watch`] (`tprof top`'s, into [`live`]) are the entry
//! points. `record` runs, in order: [`session::check`]
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
//! - `tprof-writer`: the write stage, into a [`sink`] (the recording file,
//!   or for `tprof top` the [`live`] view's channel);
//! - `tprof-gpu`: the NVML sampler ([`gpu`]).
//!
//! [`pipeline`] starts the stage threads and bounds the queue to them.
//! Options and outcomes are in [`options`]: the import graph runs one way,
//! from this module down, never back up.
#![allow(
    rustdoc::private_intra_doc_links,
    reason = "the map above names private stages: it is for readers of the \
              source (`cargo doc --document-private-items`)"
)]

mod btf;
mod clock;
pub mod cuda;
mod drain;
mod file;
pub mod gpu;
mod header;
mod launch;
pub mod limits;
pub mod live;
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
mod ticker;
mod torch;
pub mod tracefs;
mod tracker;
mod unwind;

use anyhow::{Context as _, Result};

pub use clock::{anchor, monotonic_ns};
use file::{RecordingFile, Unstarted};
use live::{Feed, LiveSink};
pub use options::{
    CaptureOptions, CaptureOutcome, Destination, RecordOptions, RecordOutcome, StopReason,
};
pub use programs::{MapLimits, RELEASE_SUBCOMMAND, release, serve_release};
use session::Session;
use signals::Signals;
pub use signals::{StopReceiver, StopRequests};

/// Records until a stop condition; the recording is complete on `Ok`.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome> {
    runtime()?.block_on(record_async(opts))
}

/// Captures into the live view until a stop condition (a signal, a
/// request through the [`StopRequests`] that made `requests`, the targets'
/// exit): `feed` gets everything a recording would hold, then
/// [`Feed::End`]. The programs are detached on any return.
pub fn watch(
    opts: &CaptureOptions,
    feed: std::sync::mpsc::SyncSender<Feed>,
    requests: StopReceiver,
) -> Result<CaptureOutcome> {
    runtime()?.block_on(watch_async(opts, feed, requests))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The recording's life, in order: checks, the file, the capture into it,
/// the stop, the end.
async fn record_async(opts: &RecordOptions) -> Result<RecordOutcome> {
    // Before anything can be interrupted: a Ctrl-C from now on stops cleanly.
    let mut signals = Signals::new(None)?;
    let offsets = session::check(&opts.capture)?;
    let file = crate::output::create(&opts.output, opts.force)?;
    // Until recording starts, a failure leaves no empty file behind (it
    // would only make the next run's -o refuse the path).
    let unstarted = Unstarted(&opts.output);
    let sink = RecordingFile::create(file, opts.output.clone())?;
    let to = Destination::File(opts.output.clone());
    let session = Session::start(&opts.capture, &offsets, Box::new(sink), to)?;
    std::mem::forget(unstarted);
    let outcome = run_session(session, &mut signals, opts.capture.duration)
        .await
        .map(|outcome| RecordOutcome::new(opts.output.clone(), outcome));
    if let Ok(outcome) = &outcome {
        status::stopped(outcome);
    }
    outcome
}

/// `tprof top`'s capture: the same stages into the live view's channel.
async fn watch_async(
    opts: &CaptureOptions,
    feed: std::sync::mpsc::SyncSender<Feed>,
    requests: StopReceiver,
) -> Result<CaptureOutcome> {
    let mut signals = Signals::new(Some(requests))?;
    let offsets = session::check(opts)?;
    let sink = LiveSink::new(feed);
    let session = Session::start(opts, &offsets, Box::new(sink), Destination::Live)?;
    run_session(session, &mut signals, opts.duration).await
}

/// A started session's life: announced, run until a stop condition,
/// stopped, finished.
async fn run_session(
    mut session: Session,
    signals: &mut Signals,
    duration: Option<std::time::Duration>,
) -> Result<CaptureOutcome> {
    session.announce();
    let result = session.run(signals, duration).await;
    let result = session.stop(result).await;
    // Finishes the capture (or says where a recording's prefix is); from
    // then on a signal has its ordinary effect again, but for a duplicate
    // of the first.
    let outcome = session.finish(result);
    signals::disarm_force_stop();
    outcome
}

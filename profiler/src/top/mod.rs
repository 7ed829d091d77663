//! `tprof top`: the live view of a training job, refreshed every interval,
//! that replaces `top -H` and `iostat -x 1` with the reasons threads wait,
//! the steps, and the leading finding.
//!
//! It runs the capture `tprof record` runs (`capture::watch`: the same
//! kernel programs, drain, resolve stage and costs), into a different
//! sink: the live feed (`capture::live`), which carries the recording's
//! records and events over a bounded channel. Threads:
//!
//! - main: the capture (its tokio runtime, the drain), as in `record`;
//! - `tprof-top` ([`analyst`]): the feed into the rolling [`window`], and
//!   each interval the model of the window and its summary, the same
//!   analysis `tprof report` runs, read into a [`frame`]; and the
//!   recording file `r` asks for ([`tee`]);
//! - `tprof-ui`: the [`screen`] (ratatui, keys) or the [`batch`] printer
//!   (text or JSON lines), which asks capture to stop on `q`, Ctrl-C,
//!   after `-n` frames, and when it ends for any other reason (an error,
//!   the terminal hung up);
//! - `tprof-stderr` on the screen: what is written to stdout and stderr
//!   while it is up ([`stdio`]).
//!
//! Stopping is `record`'s: capture detaches the programs at once, the
//! launched command (`top -- CMD`) is stopped with it, a second signal
//! ends tprof at once; the analysis thread then finishes the file of `r`,
//! the view ends, the terminal is restored and what was written meanwhile
//! is printed. Capture ends the same way when the targets exit (`-p`) or
//! the command does (`-- CMD`), and when the view ends first. tprof waits
//! for the view [`VIEW_GRACE`] at most, so nothing it can block on (a
//! terminal gone) keeps tprof, and the programs, alive.

mod analyst;
mod batch;
mod frame;
mod screen;
mod stdio;
mod tee;
mod threads;
mod view;
mod window;

use std::{
    io::{IsTerminal as _, Write as _},
    path::PathBuf,
    sync::mpsc::{self, RecvTimeoutError},
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow};
use profiler::capture::{self, CaptureOptions, CaptureOutcome, StopRequests, live::FEED_BOUND};

use analyst::Settings;
use stdio::Redirected;

/// How the view is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Full screen, with keys.
    Screen,
    /// A frame per interval on stdout: text, or JSON lines.
    Batch { json: bool },
}

/// What `tprof top` was asked to do, validated.
#[derive(Debug, Clone)]
pub(crate) struct TopOptions {
    pub capture: CaptureOptions,
    pub interval: Duration,
    pub window: Duration,
    pub mode: Mode,
    /// Stop after this many frames.
    pub frames: Option<u64>,
    /// Where `r` writes.
    pub output: Option<PathBuf>,
    pub force: bool,
}

/// Batch text's width when stdout is not a terminal and COLUMNS is unset.
const BATCH_WIDTH: u16 = 132;

/// How long the view gets to end once capture and the analysis have: it
/// ends as soon as it sees the analysis gone (a tenth of a second), unless
/// it is stuck writing to or reading from a terminal that went away.
const VIEW_GRACE: Duration = Duration::from_secs(2);

/// Watches until `q`, a signal, `-n` frames or the targets' exit.
pub(crate) fn run(opts: &TopOptions) -> Result<()> {
    let (feed_tx, feed_rx) = mpsc::sync_channel(FEED_BOUND);
    let (updates_tx, updates_rx) = mpsc::channel();
    let (requests_tx, requests_rx) = mpsc::channel();
    let (stop, stop_rx) = StopRequests::new();
    let settings = Settings {
        interval: opts.interval,
        window: opts.window,
        output: opts.output.clone(),
        force: opts.force,
    };
    let width = batch_width();
    let (redirected, out) = match opts.mode {
        Mode::Screen => Redirected::to_pipe()?,
        Mode::Batch { .. } => Redirected::to_stderr()?,
    };
    // To put the terminal back if the view cannot.
    let terminal = out.try_clone().context("cannot copy the terminal")?;
    let analyst = analyst::spawn(settings, feed_rx, updates_tx, requests_rx)?;
    let (mode, frames, output) = (opts.mode, opts.frames, redirected.lines());
    let view_stop = stop.clone();
    let (ended_tx, ended) = mpsc::channel();
    std::thread::Builder::new()
        .name("tprof-ui".into())
        .spawn(move || {
            let shown = match mode {
                Mode::Screen => screen::Screen {
                    terminal: out,
                    frames,
                    stop: view_stop.clone(),
                    requests: requests_tx,
                    output,
                }
                .run(&updates_rx),
                Mode::Batch { json } => batch::Batch {
                    out,
                    json,
                    width,
                    frames,
                    stop: view_stop.clone(),
                }
                .run(&updates_rx),
            };
            // However the view ended (an error, a terminal gone), capture
            // must not go on without it: a request after the capture
            // ended is ignored.
            view_stop.stop();
            let _ = ended_tx.send(shown);
        })
        .context("cannot start the tprof-ui thread")?;
    // On this thread: a launched command's PR_SET_PDEATHSIG follows the
    // thread that forked it (capture::launch).
    let outcome = capture::watch(&opts.capture, feed_tx, stop_rx);
    let analysed = join_owned(analyst, "tprof-top");
    // Not joined: a view stuck on a dead terminal must not keep tprof
    // alive (and the job traced) for ever; exiting ends it.
    let shown = match ended.recv_timeout(VIEW_GRACE) {
        Ok(shown) => shown,
        Err(RecvTimeoutError::Timeout) => {
            if mode == Mode::Screen {
                screen::leave(&terminal);
            }
            Err(anyhow!("the view did not end (its terminal is gone?)"))
        }
        Err(RecvTimeoutError::Disconnected) => Err(anyhow!("the tprof-ui thread panicked")),
    };
    let written = redirected.restore();
    finish((shown, outcome), analysed, &written)
}

/// Prints what was written while the screen was up, then how it ended;
/// the first error wins. A terminal gone meanwhile is not an error.
fn finish(
    (shown, outcome): (Result<()>, Result<CaptureOutcome>),
    analysed: Result<()>,
    written: &[String],
) -> Result<()> {
    let mut stderr = std::io::stderr().lock();
    for line in written {
        let _ = writeln!(stderr, "{line}");
    }
    let outcome = outcome?;
    analysed?;
    shown?;
    if let Some(exit) = &outcome.command_exit {
        let _ = writeln!(
            stderr,
            "tprof: the command (pid {}) {}",
            exit.pid,
            exit.describe()
        );
    }
    let _ = writeln!(
        stderr,
        "tprof: stopped ({}), {} events, {} lost",
        outcome.stop_reason.as_str(),
        outcome.events,
        outcome.lost.total()
    );
    Ok(())
}

fn join_owned(handle: JoinHandle<Result<()>>, name: &str) -> Result<()> {
    handle
        .join()
        .map_err(|_| anyhow!("the {name} thread panicked"))?
}

/// The batch text's width: the terminal's, else `COLUMNS`, else
/// [`BATCH_WIDTH`].
fn batch_width() -> u16 {
    if std::io::stdout().is_terminal()
        && let Ok((width, _)) = ratatui::crossterm::terminal::size()
    {
        return width;
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&w| w >= 40)
        .unwrap_or(BATCH_WIDTH)
}

//! Stopping on a signal. SIGINT, SIGTERM and SIGHUP are caught while
//! recording: the first means "stop and finish" (the launched command is
//! stopped and waited for, the recording completed). Once stopping, only a
//! second signal at least [`DUPLICATE_WINDOW`] after the first means "stop
//! at once"; one sooner is the same request delivered twice and is
//! ignored. Two deliveries milliseconds apart are common: `timeout` signals
//! its child and then its whole process group, a batch scheduler and a
//! wrapper script each pass on one cancellation, a signal to a process
//! group reaches tprof beside a forwarded copy.
//!
//! The live view (`tprof top`) stops the same way from its keys: a
//! [`StopRequests`] handle asks, and [`Signals::next`] answers it like a
//! signal ([`StopReason::Quit`]).
//!
//! While recording the signals arrive through tokio. Once stopping,
//! `arm_force_stop` installs a plain async-signal-safe handler: a later
//! signal kills the launched command's group and exits at once (128 + the
//! signal), the file a readable prefix. Once the recording is complete
//! (`disarm_force_stop`), a signal has its default effect, duplicates still
//! ignored, so `timeout`'s second copy cannot cut the report short.

use std::{
    path::Path,
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

use super::clock::monotonic_ns;
use super::options::StopReason;

/// Signals this close to the first stop signal are duplicates of it.
pub(super) const DUPLICATE_WINDOW: Duration = Duration::from_secs(1);

/// What tprof prints while it finishes, and on a first signal that comes
/// while it is already stopping for another reason (the duration).
pub(super) const FINISHING: &str = "finishing… (Ctrl-C again to stop now)";

/// SIGINT, SIGTERM and SIGHUP, caught so each stops the recording cleanly;
/// and the live view's requests, when there is one.
pub(super) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    requests: Option<mpsc::UnboundedReceiver<()>>,
}

/// Asks a capture to stop, from any thread: what `q` does in `tprof top`.
/// Cloned freely; a request after the capture ended is ignored.
#[derive(Debug, Clone)]
pub struct StopRequests(mpsc::UnboundedSender<()>);

impl StopRequests {
    /// A handle, and the receiving end for [`Signals::new`].
    pub fn new() -> (StopRequests, StopReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (StopRequests(tx), StopReceiver(rx))
    }

    pub fn stop(&self) {
        let _ = self.0.send(());
    }
}

/// Where a capture hears its [`StopRequests`].
#[derive(Debug)]
pub struct StopReceiver(mpsc::UnboundedReceiver<()>);

impl Signals {
    /// Catches the signals, and hears `requests` when given.
    pub(super) fn new(requests: Option<StopReceiver>) -> Result<Signals> {
        let catch = |kind| signal(kind).context("cannot install signal handlers");
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
            requests: requests.map(|r| r.0),
        })
    }

    /// Waits for the next stop signal or request.
    pub(super) async fn next(&mut self) -> StopReason {
        let Signals {
            interrupt,
            terminate,
            hangup,
            requests,
        } = self;
        let request = async {
            if let Some(rx) = requests
                && rx.recv().await.is_some()
            {
                return;
            }
            // None, or every handle dropped: nobody can ask any more.
            std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = interrupt.recv() => StopReason::Interrupted,
            _ = terminate.recv() => StopReason::Terminated,
            _ = hangup.recv() => StopReason::HungUp,
            () = request => StopReason::Quit,
        }
    }
}

/// CLOCK_MONOTONIC ns of the first stop signal; 0 until one came.
static FIRST_SIGNAL_NS: AtomicU64 = AtomicU64::new(0);
/// The launched command's process group, killed on a stop at once; 0: none
/// (`-p`: the targets are left alone).
static COMMAND_GROUP: AtomicI32 = AtomicI32::new(0);
/// What the handler prints: on a first signal, and before exiting at once.
static MESSAGES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();

/// Replaces the stopping handlers for the time recording is stopping (the
/// command's grace period, the final drain, stack symbolization, the
/// footer): a signal within [`DUPLICATE_WINDOW`] of the first is ignored,
/// a later one kills the launched command's group (`command_group`, 0 for
/// none) and ends tprof at once with 128 + the signal. Nothing is lost that
/// was flushed: the file is a readable prefix, and exiting closes the last
/// descriptors of the programs and maps, so the kernel detaches and frees
/// them all. `by_signal`: the stop was itself a signal, now. `file`: the
/// recording file, if there is one, which the last message names.
pub(super) fn arm_force_stop(file: Option<&Path>, by_signal: bool, command_group: u32) {
    let kept = match file {
        Some(path) => format!(
            "; the recording so far is kept in {} (`tprof report` reads it as cut short)",
            path.display()
        ),
        None => String::new(),
    };
    let _ = MESSAGES.set((
        format!("tprof: {FINISHING}\n").into_bytes(),
        format!("error: stopped at once by a second signal{kept}\n").into_bytes(),
    ));
    if by_signal {
        FIRST_SIGNAL_NS.store(monotonic_ns(), Ordering::SeqCst);
    }
    COMMAND_GROUP.store(command_group as i32, Ordering::SeqCst);
    let handler = on_signal_while_stopping as extern "C" fn(libc::c_int);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with the handler set is valid; the
        // handler only calls async-signal-safe functions (clock_gettime,
        // kill, write, _exit) on memory set before it was installed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            // Writes interrupted by an ignored duplicate resume.
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(sig, &raw const action, std::ptr::null_mut());
        }
    }
}

/// The recording is complete or has failed: what follows (flamegraphs, the
/// report) is stopped by a signal the ordinary way, except a duplicate of
/// the first stop signal (within [`DUPLICATE_WINDOW`]), which is still
/// ignored: `timeout` or a scheduler's second copy must not cut the report
/// of a recording that finished quickly.
pub(super) fn disarm_force_stop() {
    RECORDING_DONE.store(true, Ordering::SeqCst);
}

/// Set by [`disarm_force_stop`].
static RECORDING_DONE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal_while_stopping(sig: libc::c_int) {
    let now = monotonic_ns();
    let first = FIRST_SIGNAL_NS.load(Ordering::SeqCst);
    let done = RECORDING_DONE.load(Ordering::SeqCst);
    let duplicate = first != 0 && now.saturating_sub(first) < DUPLICATE_WINDOW.as_nanos() as u64;
    if duplicate {
        return;
    }
    if done {
        // SAFETY: signal and raise are async-signal-safe: the default
        // action, as if no handler had been installed.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return;
    }
    let Some((finishing, stopped)) = MESSAGES.get() else {
        return;
    };
    if first == 0 {
        // The first signal, while stopping for the duration: already done.
        FIRST_SIGNAL_NS.store(now, Ordering::SeqCst);
        // SAFETY: write is async-signal-safe; the buffer is never freed.
        unsafe { libc::write(2, finishing.as_ptr().cast(), finishing.len()) };
        return;
    }
    let group = COMMAND_GROUP.load(Ordering::SeqCst);
    // SAFETY: kill, write and _exit are async-signal-safe; the buffer is
    // never freed.
    unsafe {
        if group > 0 {
            libc::kill(-group, libc::SIGKILL);
        }
        libc::write(2, stopped.as_ptr().cast(), stopped.len());
        libc::_exit(128 + sig)
    }
}

//! Stopping on a signal. SIGINT, SIGTERM and SIGHUP are caught while
//! recording, so each stops it cleanly; once recording is stopping, one
//! more ends tprof at once.

use std::{path::Path, sync::OnceLock};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::StopReason;

/// SIGINT, SIGTERM and SIGHUP, caught so each stops the recording cleanly.
pub(super) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    pub(super) fn new() -> Result<Signals> {
        let catch = |kind| signal(kind).context("cannot install signal handlers");
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
        })
    }

    /// Waits for the next stop signal.
    pub(super) async fn next(&mut self) -> StopReason {
        tokio::select! {
            _ = self.interrupt.recv() => StopReason::Interrupted,
            _ = self.terminate.recv() => StopReason::Terminated,
            _ = self.hangup.recv() => StopReason::HungUp,
        }
    }
}

/// What a second signal prints before tprof exits; set by [`arm_force_stop`].
static FORCE_STOP_MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();

/// Replaces the stopping handlers: once recording is stopping (its final
/// drain, stack symbolization and footer can take a while), SIGINT, SIGTERM
/// or SIGHUP ends tprof at once. Nothing is lost that was flushed: the file
/// is a readable prefix, and exiting closes the last descriptors of the
/// programs and maps, so the kernel detaches and frees them all.
pub(super) fn arm_force_stop(path: &Path) {
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

pub(super) fn disarm_force_stop() {
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

//! Where text goes while `tprof top` runs. The view owns the terminal (or
//! in batch mode stdout) through a descriptor of its own, and descriptors
//! 1 and 2 are pointed elsewhere until it ends, so nothing else writes
//! into a frame: neither tprof's own messages (capture's warnings) nor the
//! command `top -- CMD` launched, which inherits them.
//!
//! - On the screen, both go into a pipe: a thread keeps the last lines,
//!   the status line shows the newest, and they are printed to the real
//!   stderr once the screen is restored.
//! - In batch mode stdout carries the frames: descriptor 1 is pointed at
//!   stderr, so the launched command's output goes there.

use std::{
    collections::VecDeque,
    fs::File,
    io::{BufRead as _, BufReader},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use anyhow::{Context as _, Result};

/// Lines kept of what was written while the screen was up.
const KEPT_LINES: usize = 200;
/// How long the restore waits for the pipe's last lines.
const LAST_LINES_WAIT: Duration = Duration::from_millis(200);

/// Descriptors 1 and 2 as they were, put back by [`Redirected::restore`]
/// or when dropped.
pub(super) struct Redirected {
    stdout: OwnedFd,
    stderr: OwnedFd,
    /// What was written to them meanwhile (screen mode).
    captured: Option<Captured>,
    restored: bool,
}

/// The pipe's lines, and word from its reader once it reached the end.
struct Captured {
    lines: Lines,
    ended: Mutex<mpsc::Receiver<()>>,
}

/// The last lines written to 1 and 2 while the screen is up, shared with
/// the view (which shows the newest); empty in batch mode.
#[derive(Debug, Clone, Default)]
pub(super) struct Lines(Option<Arc<Mutex<VecDeque<String>>>>);

impl Lines {
    /// The newest line written to 1 or 2.
    pub(super) fn last(&self) -> Option<String> {
        let kept = self
            .0
            .as_ref()?
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.back().cloned()
    }

    fn all(&self) -> Vec<String> {
        let Some(lines) = &self.0 else {
            return Vec::new();
        };
        let kept = lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.iter().cloned().collect()
    }
}

/// A copy of `fd`, closed on exec (the launched command must not get it).
fn dup(fd: i32) -> Result<OwnedFd> {
    // SAFETY: fcntl has no memory preconditions; a non-negative result is a
    // new descriptor we own.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot copy a descriptor");
    }
    // SAFETY: `copy` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

fn dup2(from: i32, to: i32) -> Result<()> {
    // SAFETY: dup2 has no memory preconditions.
    if unsafe { libc::dup2(from, to) } < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot redirect a descriptor");
    }
    Ok(())
}

impl Redirected {
    /// Screen mode: returns the terminal (the old stdout) for the view, and
    /// sends 1 and 2 into a pipe whose lines are kept.
    pub(super) fn to_pipe() -> Result<(Redirected, File)> {
        // Made first: an error below puts 1 and 2 back as it drops.
        let mut redirected = Redirected::saved()?;
        let terminal = File::from(dup(1)?);
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error()).context("pipe2");
        }
        // SAFETY: both are fresh descriptors we own.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        dup2(write.as_raw_fd(), 1)?;
        dup2(write.as_raw_fd(), 2)?;
        drop(write);
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let keep = Arc::clone(&lines);
        let (done, ended) = mpsc::channel();
        // Never joined: a worker the command left behind may hold the
        // pipe open after tprof is done with it.
        std::thread::Builder::new()
            .name("tprof-stderr".into())
            .spawn(move || {
                for line in BufReader::new(File::from(read)).lines() {
                    let Ok(line) = line else { break };
                    let mut kept = keep
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if kept.len() == KEPT_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
                let _ = done.send(());
            })
            .context("cannot start the tprof-stderr thread")?;
        let ended = Mutex::new(ended);
        let lines = Lines(Some(lines));
        redirected.captured = Some(Captured { lines, ended });
        Ok((redirected, terminal))
    }

    /// Batch mode: returns stdout for the frames, and points 1 at stderr.
    pub(super) fn to_stderr() -> Result<(Redirected, File)> {
        let saved = Redirected::saved()?;
        let frames = File::from(dup(1)?);
        dup2(2, 1)?;
        Ok((saved, frames))
    }

    /// 1 and 2 as they are now.
    fn saved() -> Result<Redirected> {
        Ok(Redirected {
            stdout: dup(1)?,
            stderr: dup(2)?,
            captured: None,
            restored: false,
        })
    }

    /// What is written to 1 and 2 from now on (screen mode; else none).
    pub(super) fn lines(&self) -> Lines {
        self.captured
            .as_ref()
            .map(|c| c.lines.clone())
            .unwrap_or_default()
    }

    /// Puts 1 and 2 back, and gives the lines written meanwhile.
    pub(super) fn restore(mut self) -> Vec<String> {
        self.put_back();
        let Some(captured) = &self.captured else {
            return Vec::new();
        };
        // Ours are closed now: the reader reaches the end unless the
        // command's leftovers still hold the pipe.
        if let Ok(ended) = captured.ended.lock() {
            let _ = ended.recv_timeout(LAST_LINES_WAIT);
        }
        captured.lines.all()
    }

    fn put_back(&mut self) {
        if !self.restored {
            let _ = dup2(self.stdout.as_raw_fd(), 1);
            let _ = dup2(self.stderr.as_raw_fd(), 2);
            self.restored = true;
        }
    }
}

impl Drop for Redirected {
    fn drop(&mut self) {
        self.put_back();
    }
}

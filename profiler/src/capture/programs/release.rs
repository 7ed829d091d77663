//! Handing the kernel's last part of detaching to a helper process, so
//! that tprof can exit as soon as the recording is written.
//!
//! Closing a link attached through a perf event (a classic or syscall
//! tracepoint, a uprobe) makes the kernel detach the program, across an
//! RCU tasks-trace grace period, and then destroy the perf event, one at a
//! time behind another (`perf_trace_destroy` holds `event_mutex` across
//! `tracepoint_synchronize_unregister`). On a machine whose CPUs the job
//! keeps busy those grace periods add up to a second or more, and now and
//! then one lasts until the job's busy threads stop: `tprof record -p PID
//! -d 5s` on the paced benchmark job returned 13–15 s after its recording
//! ended in 4 of 19 runs, waiting on the last links.
//!
//! The kernel does that work in whichever process drops the last
//! reference to a link. So [`hand_off`] starts `tprof __release-links FD…`
//! (this binary, in a process group of its own, stdio on /dev/null) with
//! every link and perf event tprof holds inherited, after which tprof's own
//! closes only drop references and are immediate. The helper closes every
//! other descriptor it inherited (a pipe some caller reads to its end),
//! then each link on a thread of its own (the program detaches, and waits
//! that overlap share a grace period, as when tprof did it), and exits
//! when the kernel is done. The job is released as soon as before; tprof
//! no longer waits for the kernel (on the paced job, 30–39 ms from the
//! recording's end to exit, against 0.7 s, and 10 s in 2 runs of 10,
//! before: docs/benchmarks.md). Nothing is handed off when the helper
//! cannot start: the caller then detaches in-process and waits, as
//! before.

use std::{
    fs,
    os::{
        fd::{FromRawFd as _, OwnedFd, RawFd},
        unix::process::CommandExt as _,
    },
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
};

/// The hidden subcommand the helper runs as.
pub const SUBCOMMAND: &str = "__release-links";

/// Set by an executable that answers [`SUBCOMMAND`] (the `tprof` binary,
/// through [`serve_release`]); a test binary that captures does not, and
/// detaches in-process.
static ANSWERS: AtomicBool = AtomicBool::new(false);

/// Says this executable runs [`release`] when started as [`SUBCOMMAND`].
pub fn serve_release() {
    ANSWERS.store(true, Ordering::Relaxed);
}

/// Milliseconds the helper holds the links before closing them: a stand-in
/// for a slow release, so a test can see tprof exit without waiting for it.
const HOLD_ENV: &str = "TPROF_RELEASE_HOLD_MS";

/// What `/proc/self/fd` shows for the descriptors the helper takes.
const KINDS: [&str; 2] = ["anon_inode:bpf_link", "anon_inode:[perf_event]"];

/// Starts the helper with every link and perf event descriptor this
/// process holds; true once it runs with them (from then on this process's
/// closes of those descriptors are immediate). False when there were none
/// or the helper could not start.
pub(super) fn hand_off() -> bool {
    if !ANSWERS.load(Ordering::Relaxed) {
        return false;
    }
    let fds = held();
    if fds.is_empty() {
        return false;
    }
    // Inherited across the exec only without close-on-exec; put back
    // right after, so no later child of tprof inherits them.
    for &fd in &fds {
        set_cloexec(fd, false);
    }
    let started = Command::new("/proc/self/exe")
        .arg(SUBCOMMAND)
        .args(fds.iter().map(ToString::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Out of the terminal's foreground group: a second Ctrl-C or the
        // caller's kill of tprof's group would cut the closes short.
        .process_group(0)
        .spawn();
    for &fd in &fds {
        set_cloexec(fd, true);
    }
    // spawn() returns once the exec succeeded: the helper holds them. It
    // is not waited for: it outlives tprof by the kernel's work, and its
    // parent is then init, which reaps it.
    started.is_ok()
}

/// The helper's whole run: closes each descriptor named (of the kinds
/// [`hand_off`] passes; anything else is left alone) on a thread of its
/// own, and returns when the kernel has finished with all of them.
pub fn release(fds: &[RawFd]) {
    close_others(fds);
    if let Some(ms) = std::env::var(HOLD_ENV).ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let closes: Vec<_> = fds
        .iter()
        .copied()
        .filter(|&fd| is_handed_over(fd))
        .filter_map(|fd| {
            // SAFETY: the descriptor was inherited open for this process
            // to close (checked to be a link or perf event above), and
            // nothing else in this process refers to it.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            std::thread::Builder::new().spawn(move || drop(owned)).ok()
        })
        .collect();
    for close in closes {
        let _ = close.join();
    }
}

/// Closes every descriptor above stderr but `keep`: tprof's own parent may
/// have left it others (a pipe whose reader waits for its end), which the
/// helper must not hold past tprof's exit.
fn close_others(keep: &[RawFd]) {
    for fd in open_fds() {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing a descriptor nothing in this process uses
            // (the directory's own is gone by now: close fails with EBADF).
            unsafe { libc::close(fd) };
        }
    }
}

/// The link and perf event descriptors this process holds. Found in
/// /proc/self/fd rather than asked of the links: aya keeps a link's
/// descriptor to itself.
fn held() -> Vec<RawFd> {
    let mut fds: Vec<RawFd> = open_fds()
        .into_iter()
        .filter(|&fd| is_handed_over(fd))
        .collect();
    fds.sort_unstable();
    fds
}

/// Every descriptor this process has open (read whole before returning,
/// so the directory's own is closed by then).
fn open_fds() -> Vec<RawFd> {
    let Ok(dir) = fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether `fd` is of a kind [`KINDS`] names, as /proc/self/fd shows it.
fn is_handed_over(fd: RawFd) -> bool {
    fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|target| KINDS.iter().any(|k| target.as_os_str() == *k))
}

fn set_cloexec(fd: RawFd, on: bool) {
    // SAFETY: F_GETFD/F_SETFD on a descriptor this process holds open;
    // they change only its close-on-exec flag.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let flags = if on {
                flags | libc::FD_CLOEXEC
            } else {
                flags & !libc::FD_CLOEXEC
            };
            libc::fcntl(fd, libc::F_SETFD, flags);
        }
    }
}

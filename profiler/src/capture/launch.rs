//! `tprof record -- CMD`: starts the command held at the door, so it can be
//! tracked before it runs its first instruction, lets it exec, and stops it
//! with the recording, so it never outlives tprof.
//!
//! std's `Command::spawn` waits for the exec to happen before returning, so
//! it cannot hold a child before exec; this forks by hand. Everything the
//! child does between fork and exec is async-signal-safe (setpgid, prctl,
//! getppid, read, execv, write, _exit) and uses memory prepared before the
//! fork.
//!
//! The command runs in a process group of its own (its pid is the group
//! id), like a shell job. A Ctrl-C at the terminal then reaches tprof's
//! group only, and tprof passes it on once (`LaunchedCommand::stop`): the
//! job does not get one from the terminal and a second from tprof. What it
//! costs: the command is not in the terminal's foreground group, so one that
//! reads the terminal is stopped (SIGTTIN), and Ctrl-Z stops tprof, not the
//! job. A job that needs the terminal is started on its own and recorded
//! with `-p`.
//!
//! If tprof dies without stopping it (`kill -9`), the kernel sends the
//! command SIGKILL (`PR_SET_PDEATHSIG`). That signal follows the death of
//! the *thread* that forked, not of the process; tprof forks on its main
//! thread, which lives as long as tprof. It reaches the command only, not
//! the processes it started (PyTorch's DataLoader workers notice their
//! parent is gone and exit by themselves).
//!
//! The child waits on a pipe until tprof has tracked its pid, then calls
//! `execv`; a failed `execv` comes back over a `CLOEXEC` pipe, and a child
//! whose tprof died first exits 126 rather than run untraced.
//! `LaunchedCommand` reaps the command, tells whether its group is alive,
//! stops it (with the signal tprof got), kills the group, and kills it when
//! dropped while the command still runs, so no error path leaves the job
//! running; a command that exited by itself ends the recording and its
//! leftovers are left alone.

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use std::time::{Duration, Instant};

use super::procfs;
use tprof_core::recording::CommandExit;

/// A forked child waiting for [`HeldChild::release`] to exec the command.
pub(super) struct HeldChild {
    pub pid: u32,
    /// Write end of the gate: one byte releases the child.
    gate: libc::c_int,
    /// Read end of the exec-error pipe (closed on a successful exec).
    errors: libc::c_int,
    program: PathBuf,
}

/// Finds `name` the way a shell would: a path if it has a slash, else on PATH.
fn resolve(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .with_context(|| format!("command not found: {name} (not on PATH)"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn pipe() -> Result<[libc::c_int; 2]> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    Ok(fds)
}

/// Forks a child, in a process group of its own, that waits at the gate,
/// then execs `argv`.
pub(super) fn spawn_held(argv: &[String]) -> Result<HeldChild> {
    let program = resolve(&argv[0])?;
    let c_program = CString::new(program.as_os_str().as_bytes())?;
    let c_args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("command arguments must not contain NUL bytes")?;
    let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    c_argv.push(std::ptr::null());
    let [gate_rd, gate_wr] = pipe()?;
    let [err_rd, err_wr] = pipe()?;
    // SAFETY: getpid has no preconditions.
    let tprof = unsafe { libc::getpid() };

    // SAFETY: the child only calls async-signal-safe functions on memory
    // prepared above, then execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // SAFETY: in the child just forked, with the strings and fds
        // prepared before the fork (see child_after_fork).
        unsafe { child_after_fork(tprof, gate_rd, err_wr, &c_program, &c_argv) };
    }
    // Also from this side, so the group exists before tprof signals it,
    // whichever of the two runs first. (EACCES once the child has exec'd
    // cannot happen: it waits at the gate.)
    // SAFETY: setpgid and close have no memory preconditions.
    unsafe {
        libc::setpgid(pid, pid);
        libc::close(gate_rd);
        libc::close(err_wr);
    }
    Ok(HeldChild {
        pid: pid as u32,
        gate: gate_wr,
        errors: err_rd,
        program,
    })
}

/// In the child: its own process group, SIGKILL when tprof dies, wait at
/// the gate, exec, or report errno and exit 127.
unsafe fn child_after_fork(
    tprof: libc::pid_t,
    gate: libc::c_int,
    errors: libc::c_int,
    program: &CString,
    argv: &[*const libc::c_char],
) -> ! {
    // SAFETY: setpgid, prctl and getppid have no memory preconditions.
    unsafe {
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // tprof died before the prctl took effect: no signal will come.
        if libc::getppid() != tprof {
            libc::_exit(126);
        }
    }
    let mut byte = 0u8;
    loop {
        // SAFETY: reading one byte into a local.
        let n = unsafe { libc::read(gate, (&raw mut byte).cast(), 1) };
        if n == 1 {
            break;
        }
        if n == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // tprof went away before releasing us: do not run untraced.
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(126) };
        }
    }
    // SAFETY: program and argv are NUL-terminated and outlive the call.
    unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let bytes = errno.to_ne_bytes();
    // SAFETY: writing four bytes from a local, then exiting.
    unsafe {
        libc::write(errors, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

impl HeldChild {
    /// Lets the child exec; fails if the exec failed.
    pub(super) fn release(self) -> Result<LaunchedCommand> {
        let go = [1u8];
        // SAFETY: writing one byte from a local, then closing our fds.
        unsafe {
            libc::write(self.gate, go.as_ptr().cast(), 1);
            libc::close(self.gate);
        }
        let mut errno = [0u8; 4];
        // Blocks until exec succeeds (CLOEXEC closes the pipe: 0 bytes) or
        // the child reports why it failed.
        // SAFETY: reading at most four bytes into a local array.
        let n = unsafe { libc::read(self.errors, errno.as_mut_ptr().cast(), errno.len()) };
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.errors) };
        if n == 4 {
            let err = std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
            // Reap it: it exited 127.
            let _ = LaunchedCommand::new(self.pid).reap(0);
            bail!("cannot run {}: {err}", self.program.display());
        }
        Ok(LaunchedCommand::new(self.pid))
    }
}

/// The running command and its process group (same id). Dropped while the
/// command still runs (an error, a panic), it kills the group: the command
/// must not outlive tprof.
#[derive(Debug)]
pub(super) struct LaunchedCommand {
    exit: CommandExit,
    /// Reaped: `exit` holds its status.
    reaped: bool,
}

impl LaunchedCommand {
    fn new(pid: u32) -> LaunchedCommand {
        LaunchedCommand {
            exit: CommandExit {
                pid,
                ..CommandExit::default()
            },
            reaped: false,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.exit.pid
    }

    /// Reaps the command if it has exited (without blocking); true once it
    /// has.
    pub(super) fn try_reap(&mut self) -> bool {
        self.reap(libc::WNOHANG)
    }

    fn reap(&mut self, flags: libc::c_int) -> bool {
        if self.reaped {
            return true;
        }
        let mut status = 0;
        // SAFETY: waiting for our own child; status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(self.exit.pid as i32, &raw mut status, flags) };
        if rc == self.exit.pid as i32 {
            if libc::WIFEXITED(status) {
                self.exit.code = Some(libc::WEXITSTATUS(status));
            } else if libc::WIFSIGNALED(status) {
                self.exit.signal = Some(libc::WTERMSIG(status));
            }
            self.reaped = true;
        } else if rc < 0 {
            // Not our child any more (reaped elsewhere): nothing to wait for.
            self.reaped = true;
        }
        self.reaped
    }

    /// True while any process of the command's group is alive: the command
    /// itself or what it started (that did not leave the group).
    pub(super) fn group_alive(&mut self) -> bool {
        if !self.try_reap() {
            return true;
        }
        // SAFETY: signal 0 only checks that the group has a process;
        // ESRCH, the common answer once it has exited, spares the /proc scan.
        if unsafe { libc::kill(-(self.exit.pid as i32), 0) } != 0 {
            return false;
        }
        // Zombies (exited, not yet reaped by their parent) do not count.
        !procfs::group_members(self.exit.pid).is_empty()
    }

    /// Passes a stop on to the whole group (`sig`: SIGINT, SIGTERM, SIGHUP).
    pub(super) fn stop(&mut self, sig: libc::c_int) {
        self.exit.stop_signal = Some(sig);
        self.signal_group(sig);
    }

    /// SIGKILL to the whole group, once the grace period is over.
    pub(super) fn kill(&mut self) {
        self.exit.killed = true;
        self.signal_group(libc::SIGKILL);
    }

    fn signal_group(&self, sig: libc::c_int) {
        // SAFETY: kill has no memory preconditions; ESRCH (the group is
        // gone) is fine.
        unsafe { libc::kill(-(self.exit.pid as i32), sig) };
    }

    /// Stops the group with `sig` and waits for it, SIGKILL after `grace`,
    /// without recording meanwhile (the recording has failed).
    pub(super) fn stop_and_wait(&mut self, sig: libc::c_int, grace: Duration) {
        if !self.group_alive() {
            return;
        }
        self.stop(sig);
        let started = Instant::now();
        while self.group_alive() {
            if started.elapsed() >= grace && !self.exit.killed {
                self.kill();
            }
            if started.elapsed() >= grace + KILL_WAIT {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How it ended, so far.
    pub(super) fn exit(&self) -> CommandExit {
        self.exit.clone()
    }
}

/// How long the group is waited for after SIGKILL: only a process in
/// uninterruptible sleep outlives it, until its IO ends.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(2);

impl Drop for LaunchedCommand {
    /// A command still running here (an error path) is killed with its
    /// group. One that exited by itself ended the recording; what it left
    /// running in its group is its own business, as with `perf record`.
    fn drop(&mut self) {
        if !self.try_reap() {
            self.kill();
            let started = Instant::now();
            while !self.try_reap() && started.elapsed() < KILL_WAIT {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

//! `tprof record -- CMD`: starts the command held at the door, so it can be
//! tracked before it runs its first instruction, then lets it exec.
//!
//! std's `Command::spawn` waits for the exec to happen before returning, so
//! it cannot hold a child before exec; this forks by hand. Everything the
//! child does between fork and exec is async-signal-safe (read, execv,
//! write, _exit) and uses memory prepared before the fork.

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

/// A forked child waiting for [`HeldChild::release`] to exec the command.
pub struct HeldChild {
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

/// Forks a child that waits at the gate, then execs `argv`.
pub fn spawn_held(argv: &[String]) -> Result<HeldChild> {
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

    // SAFETY: the child only calls async-signal-safe functions on memory
    // prepared above, then execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        unsafe { child_after_fork(gate_rd, err_wr, &c_program, &c_argv) };
    }
    // SAFETY: closing our copies of the child's ends.
    unsafe {
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

/// In the child: wait at the gate, exec, or report errno and exit 127.
unsafe fn child_after_fork(
    gate: libc::c_int,
    errors: libc::c_int,
    program: &CString,
    argv: &[*const libc::c_char],
) -> ! {
    let mut byte = 0u8;
    loop {
        // SAFETY: reading one byte into a local.
        let n = unsafe { libc::read(gate, (&raw mut byte).cast(), 1) };
        if n == 1 {
            break;
        }
        if n == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // tprof went away before releasing us: do not run untraced.
            unsafe { libc::_exit(126) };
        }
    }
    // SAFETY: program and argv are NUL-terminated and outlive the call.
    unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let bytes = errno.to_ne_bytes();
    unsafe {
        libc::write(errors, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

impl HeldChild {
    /// Lets the child exec; fails if the exec failed.
    pub fn release(self) -> Result<()> {
        let go = [1u8];
        // SAFETY: writing one byte from a local, then closing our fds.
        unsafe {
            libc::write(self.gate, go.as_ptr().cast(), 1);
            libc::close(self.gate);
        }
        let mut errno = [0u8; 4];
        // Blocks until exec succeeds (CLOEXEC closes the pipe: 0 bytes) or
        // the child reports why it failed.
        let n = unsafe { libc::read(self.errors, errno.as_mut_ptr().cast(), errno.len()) };
        unsafe { libc::close(self.errors) };
        if n == 4 {
            let err = std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
            bail!("cannot run {}: {err}", self.program.display());
        }
        Ok(())
    }
}

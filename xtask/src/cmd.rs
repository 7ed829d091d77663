//! Small helpers for running commands from the workspace root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// The workspace root: xtask lives one level below it.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A command run from the workspace root, with cargo's bin directory on
/// PATH: under `sudo` PATH is reset, but bpf-linker (found by rustc as the
/// BPF linker) and cargo-installed tools live there.
pub(crate) fn command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(root()).env("PATH", path_with_cargo_bin());
    cmd
}

/// The cargo that runs this xtask, so nested builds use the same toolchain.
/// Cargo, for every build xtask runs: these must have the eBPF programs,
/// so profiler's build script may not fall back to a build without them.
pub(crate) fn cargo() -> Command {
    let mut cargo = command(&std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.env("TPROF_REQUIRE_EBPF", "1");
    cargo
}

fn cargo_bin_dir() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))?;
    Some(home.join("bin"))
}

fn path_with_cargo_bin() -> std::ffi::OsString {
    let current = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&current).collect();
    if let Some(bin) = cargo_bin_dir().filter(|b| !dirs.contains(b)) {
        dirs.push(bin);
    }
    std::env::join_paths(dirs).unwrap_or(current)
}

/// Runs `cmd` with inherited stdio and fails unless it exits 0.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout, or None if it could not start
/// or exited non-zero (used for "is it installed?" probes).
pub(crate) fn probe(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(std::process::Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn describe(cmd: &Command) -> String {
    let args = cmd.get_args().map(|a| a.to_string_lossy());
    std::iter::once(cmd.get_program().to_string_lossy())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

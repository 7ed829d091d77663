//! `cargo xtask test`: the one command CI runs (through .ci/run). Lints,
//! builds tprof (and with it the eBPF object), runs every test and fuzzes
//! the recording reader for a minute; the integration tests load real eBPF
//! programs, hence root.
//!
//! In order: setup, `cargo fmt --check`, the committed protobuf code
//! checked against profiler/core/proto/, clippy with `-D warnings`
//! (`--no-lint` skips these three), the build, the workspace's other tests,
//! the fuzzer for `--fuzz-seconds` (60 by default; 0 skips it; a crash
//! fails the run), then the integration tests one at a time with
//! `TPROF_BIN` and `TPROF_JOB_PYTHON` set.
//!
//! The integration tests write recordings, data files under target/ and a
//! 256 MiB file under /var/tmp for real disk reads; on a machine whose
//! disk is shared and nearly full, each such test used to fail with its
//! own `dd failed` or a cut recording. The free space is checked before
//! them (a clear error below `NEEDED_FREE`) and printed again after a
//! failure, so a full disk reads as one.

use std::path::Path;

use anyhow::{Result, bail};

use crate::cmd::{self, cargo, run as run_cmd};
use crate::{fuzz, setup};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Skip `cargo fmt --check` and `cargo clippy`.
    #[arg(long)]
    no_lint: bool,
    /// How long to fuzz the recording reader (`cargo xtask fuzz`) after the
    /// unit tests; 0 skips it. A crash, a leak or an input that makes the
    /// reader allocate past the limit fails the run.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    fuzz_seconds: u64,
}

pub(crate) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask test needs root (it loads eBPF programs): run it with sudo");
    }
    let installed = setup::run()?;
    if !args.no_lint {
        lint()?;
    }
    run_cmd(cargo().args(["build", "-p", "profiler"]))?;
    tests(&installed.job_python, args.fuzz_seconds)
}

fn lint() -> Result<()> {
    run_cmd(cargo().args(["fmt", "--all", "--check"]))?;
    // The committed protobuf code is what profiler/core/proto/ gives.
    crate::protos::run_task(&crate::protos::Args { check: true })?;
    run_cmd(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}

/// Unit and other tests run in parallel; the integration tests run one at a
/// time because they trace the whole machine's scheduler and compete for its
/// two cores, which would skew each other's ground truth. Both get TPROF_BIN
/// so no test guesses where the binary is; the integration tests get the
/// train-job venv's interpreter as TPROF_JOB_PYTHON, which also tells the
/// real-job tests that a missing venv is a failure, not a reason to skip.
/// The fuzzer runs between them: a reader regression fails the build
/// before the long part.
fn tests(job_python: &std::path::Path, fuzz_seconds: u64) -> Result<()> {
    let tprof = cmd::root().join("target/debug/tprof");
    run_cmd(
        cargo()
            .args(["test", "--workspace", "--exclude", "tprof-tests"])
            .env("TPROF_BIN", &tprof),
    )?;
    if fuzz_seconds > 0 {
        fuzz::fuzz(fuzz_seconds, fuzz::RSS_LIMIT_MB)?;
    }
    let target = cmd::root().join("target");
    check_free_space(&target)?;
    let result = run_cmd(
        cargo()
            .args(["test", "-p", "tprof-tests", "--", "--test-threads=1"])
            .env("TPROF_BIN", &tprof)
            .env("TPROF_JOB_PYTHON", job_python),
    );
    if result.is_err() {
        for dir in written_dirs(&target) {
            if let Some(free) = free_bytes(dir) {
                eprintln!(
                    "after the failure: {} free under {}",
                    mib(free),
                    dir.display()
                );
            }
        }
    }
    result
}

/// What the integration tests write at once at most: the 256 MiB file of
/// the disk-bound zoo test (kept between runs), a 96 MiB data file and the
/// recordings being written and read beside them, with room to spare.
const NEEDED_FREE: u64 = 1 << 30;

/// Where the zoo's disk-bound test keeps its file (tests/workloads/train_job.py
/// `--disk-file`): off tmpfs, so its reads reach a disk.
const SCRATCH: &str = "/var/tmp";

/// Where the integration tests write.
fn written_dirs(target: &Path) -> [&Path; 2] {
    [target, Path::new(SCRATCH)]
}

/// Fails with the figures when target/ or /var/tmp has less than
/// `NEEDED_FREE`, and says how much there is either way.
fn check_free_space(target: &Path) -> Result<()> {
    for dir in written_dirs(target) {
        let Some(free) = free_bytes(dir) else {
            continue;
        };
        println!("disk: {} free under {}", mib(free), dir.display());
        if free < NEEDED_FREE {
            bail!(
                "only {} free under {} and the integration tests write up to {} at once: \
                 free some space on that disk (target/ of other clones, old recordings) and rerun",
                mib(free),
                dir.display(),
                mib(NEEDED_FREE)
            );
        }
    }
    Ok(())
}

/// Bytes an unprivileged writer may still use on the file system holding
/// `dir` (statvfs's f_bavail), or None when it cannot be read.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a live struct
    // for statvfs to fill; neither is kept past the call.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &raw mut stat) };
    (rc == 0).then(|| stat.f_bavail * stat.f_frsize)
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_read_and_a_missing_directory_is_none() {
        let here = free_bytes(Path::new(env!("CARGO_MANIFEST_DIR"))).expect("statvfs of xtask/");
        let df = cmd::probe(std::process::Command::new("df").args([
            "-B1",
            "--output=avail",
            env!("CARGO_MANIFEST_DIR"),
        ]))
        .expect("df");
        let df: u64 = df.lines().nth(1).unwrap().trim().parse().unwrap();
        // Other writers may move it between the two reads.
        assert!(
            here.abs_diff(df) < 256 << 20,
            "statvfs {here} against df {df}"
        );
        assert_eq!(free_bytes(Path::new("/no/such/dir")), None);
    }
}

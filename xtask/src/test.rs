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
    run_cmd(
        cargo()
            .args(["test", "-p", "tprof-tests", "--", "--test-threads=1"])
            .env("TPROF_BIN", &tprof)
            .env("TPROF_JOB_PYTHON", job_python),
    )
}

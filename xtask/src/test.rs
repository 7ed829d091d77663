//! `cargo xtask test`: the one command CI runs (through .ci/run). Lints,
//! builds tprof (and with it the eBPF object), then runs every test; the
//! integration tests load real eBPF programs, hence root.

use anyhow::{Result, bail};

use crate::cmd::{self, cargo, run as run_cmd};
use crate::setup;

#[derive(clap::Args)]
pub struct Args {
    /// Skip `cargo fmt --check` and `cargo clippy`.
    #[arg(long)]
    no_lint: bool,
}

pub fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask test needs root (it loads eBPF programs): run it with sudo");
    }
    setup::run()?;
    if !args.no_lint {
        lint()?;
    }
    run_cmd(cargo().args(["build", "-p", "profiler"]))?;
    tests()
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
/// so no test guesses where the binary is.
fn tests() -> Result<()> {
    let tprof = cmd::root().join("target/debug/tprof");
    run_cmd(
        cargo()
            .args(["test", "--workspace", "--exclude", "tprof-tests"])
            .env("TPROF_BIN", &tprof),
    )?;
    run_cmd(
        cargo()
            .args(["test", "-p", "tprof-tests", "--", "--test-threads=1"])
            .env("TPROF_BIN", &tprof),
    )
}

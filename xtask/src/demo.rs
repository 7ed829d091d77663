//! `cargo xtask demo`: record the bundled demo (tests/workloads/demo_pipeline.c,
//! an imitation of a PyTorch input pipeline that oversubscribes the CPU) with
//! a release build of tprof and show the report.

use std::path::Path;

use anyhow::{Result, bail};

use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::setup;

pub fn run() -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask demo needs root (tprof loads eBPF programs): run it with sudo");
    }
    setup::run()?;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let dir = cmd::root().join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let workload = dir.join("demo_pipeline");
    compile_demo(&workload)?;
    record(&workload, &dir.join("demo.tprof"))
}

fn compile_demo(out: &Path) -> Result<()> {
    run_cmd(
        command("gcc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
            .arg(out)
            .arg("tests/workloads/demo_pipeline.c"),
    )
}

/// tprof's output (and the demo's own) streams straight to the terminal.
fn record(workload: &Path, recording: &Path) -> Result<()> {
    run_cmd(
        command("target/release/tprof")
            .args(["record", "--force", "-o"])
            .arg(recording)
            .arg("--")
            .arg(workload),
    )
}

//! `cargo xtask demo`: record the bundled demo training pipeline with a
//! release build of tprof, print the report, and say where the report,
//! flamegraphs and timeline are.
//!
//! The demo is tests/workloads/pipeline.c: a "trainer" process and forked
//! "pt_data_worker" processes passing batches through a pipe, shaped like a
//! PyTorch DataLoader. Its default configuration reproduces the common
//! failure: four workers, each with an OpenMP-style pool of three threads,
//! decoding on however few cores the machine has, so the trainer (and the
//! GPU it would feed) starves. `--healthy` runs one worker without a pool
//! that keeps up with a trainer doing real work, for contrast.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;

use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::{setup, workloads};

#[derive(ClapArgs)]
pub(crate) struct Args {
    /// Run the healthy configuration (workers keep up) instead.
    #[arg(long)]
    healthy: bool,
}

/// One demo configuration: the pipeline's arguments and pool size.
struct Config {
    name: &'static str,
    /// WORKERS BATCHES DECODE_MS TRAIN_MS MODE
    args: [&'static str; 5],
    pool: &'static str,
}

const STARVED: Config = Config {
    name: "demo",
    args: ["4", "240", "30", "5", "cpu"],
    pool: "3",
};

const HEALTHY: Config = Config {
    name: "demo-healthy",
    args: ["1", "150", "4", "10", "cpu"],
    pool: "0",
};

pub(crate) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask demo needs root (tprof loads eBPF programs): run it with sudo");
    }
    setup::run()?;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let dir = cmd::root().join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let workload = workloads::build("pipeline", &dir)?;
    let config = if args.healthy { &HEALTHY } else { &STARVED };
    let recording = dir.join(format!("{}.tprof", config.name));
    record(&workload, config, &recording)?;
    let report = write_report(&recording)?;
    print_outputs(&recording, &report);
    Ok(())
}

/// tprof's output (its report included) streams straight to the terminal.
fn record(workload: &Path, config: &Config, recording: &Path) -> Result<()> {
    run_cmd(
        command("target/release/tprof")
            .args(["record", "--force", "-o"])
            .arg(recording)
            .arg("--")
            .arg(workload)
            .args(config.args)
            .env("PIPELINE_POOL", config.pool),
    )
}

/// Saves the terminal report next to the recording.
fn write_report(recording: &Path) -> Result<PathBuf> {
    let out = command("target/release/tprof")
        .arg("report")
        .arg(recording)
        .output()
        .context("run tprof report")?;
    if !out.status.success() {
        bail!(
            "tprof report failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = recording.with_extension("report.txt");
    std::fs::write(&path, &out.stdout)?;
    Ok(path)
}

/// Lists what tprof wrote: every file next to the recording with its name.
fn print_outputs(recording: &Path, report: &Path) {
    let dir = recording.parent().unwrap_or(Path::new("."));
    let stem = recording
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    println!("\nDemo outputs:");
    println!("  recording  {}", recording.display());
    println!("  report     {}", report.display());
    let mut others: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(&stem) && p.as_path() != recording && p.as_path() != report
        })
        .collect();
    others.sort();
    for p in others {
        println!("  {:<10} {}", kind_of(&p), p.display());
    }
}

fn kind_of(path: &Path) -> &'static str {
    let name = path.to_string_lossy();
    if name.ends_with(".svg") {
        "flamegraph"
    } else if name.contains("timeline") {
        "timeline"
    } else {
        "output"
    }
}

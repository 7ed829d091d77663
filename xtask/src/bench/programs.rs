//! `cargo xtask bench programs`: each kernel program's runs a second, ns a
//! run and ms a second on one job, between two readings of the kernel's
//! BPF statistics in the recording's steady state (`with_bpf_stats`,
//! `program_stats`: the programs tprof's process holds, so another tprof
//! running beside it is not counted). One run; alternate builds with
//! `--tprof`. The statistics add two clock reads to every run, included.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;

use crate::bench_python::{program_stats, with_bpf_stats};
use crate::cmd;

#[derive(ClapArgs)]
pub(super) struct Args {
    /// The tprof to run (default: target/release/tprof, built first).
    #[arg(long)]
    tprof: Option<PathBuf>,
    /// Attach to this process (`record -p`) instead of launching COMMAND.
    #[arg(long)]
    pid: Option<u32>,
    /// Seconds into the recording of the first reading.
    #[arg(long, default_value_t = 8.0)]
    from: f64,
    /// Seconds into the recording of the second reading.
    #[arg(long, default_value_t = 14.0)]
    to: f64,
    /// The job to launch under `tprof record --`.
    #[arg(last = true)]
    command: Vec<String>,
}

pub(super) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!(
            "cargo xtask bench programs needs root (tprof loads eBPF programs): run it with sudo"
        );
    }
    if args.command.is_empty() == args.pid.is_none() {
        bail!("give either a command after `--` or --pid PID, not both or neither");
    }
    if !(0.0 < args.from && args.from < args.to) {
        bail!("--from must be positive and before --to");
    }
    let tprof = if let Some(path) = &args.tprof {
        path.clone()
    } else {
        cmd::run(cmd::cargo().args(["build", "--release", "-p", "profiler"]))?;
        PathBuf::from("target/release/tprof")
    };
    let mut c = super::tprof_record(&tprof);
    c.args(["-o", "target/bench/programs.tprof"]);
    match args.pid {
        Some(pid) => c.args([
            "-p",
            &pid.to_string(),
            "-d",
            &format!("{}s", args.to.ceil() + 1.0),
        ]),
        None => c.arg("--").args(&args.command),
    };
    std::fs::create_dir_all("target/bench")?;
    // tprof's and the job's output would bury the table.
    let stderr = "target/bench/programs.stderr";
    c.stdout(Stdio::null()).stderr(File::create(stderr)?);
    with_bpf_stats(|| {
        let mut child = c
            .spawn()
            .with_context(|| format!("start {}", cmd::describe(&c)))?;
        std::thread::sleep(Duration::from_secs_f64(args.from));
        let before = program_stats(child.id());
        std::thread::sleep(Duration::from_secs_f64(args.to - args.from));
        let after = program_stats(child.id());
        let status = child.wait()?;
        let (Some(before), Some(after)) = (before, after) else {
            bail!(
                "no program statistics read: tprof was not recording at both readings; its stderr: {stderr}"
            );
        };
        print!("{}", table(&before, &after, args.to - args.from));
        if !status.success() {
            bail!("tprof exited with {status}; its stderr: {stderr}");
        }
        Ok(())
    })
}

/// One line per program that ran between the readings, busiest first,
/// and the total.
fn table(
    before: &BTreeMap<String, (u64, u64)>,
    after: &BTreeMap<String, (u64, u64)>,
    seconds: f64,
) -> String {
    let mut rows: Vec<(f64, f64, f64, &str)> = after
        .iter()
        .filter_map(|(name, &(cnt, ns))| {
            let (cnt0, ns0) = before.get(name).copied().unwrap_or_default();
            let runs = cnt.saturating_sub(cnt0);
            let ns = ns.saturating_sub(ns0);
            (runs > 0).then(|| {
                let per_s = runs as f64 / seconds;
                (
                    ns as f64 / seconds / 1e6,
                    per_s,
                    ns as f64 / runs as f64,
                    name.as_str(),
                )
            })
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut out = String::new();
    for (ms, per_s, per_run, name) in &rows {
        out.push_str(&format!(
            "{name:24} {per_s:10.0} runs/s {per_run:7.0} ns {ms:6.1} ms/s\n"
        ));
    }
    let total: f64 = rows.iter().map(|r| r.0).sum();
    out.push_str(&format!("{:24} {:25} {total:6.1} ms/s\n", "all", ""));
    out
}

//! The real PyTorch job's side of the overhead bench (issue 29): the
//! suite's DataLoader job in the two configurations the issue names,
//! untraced, under `tprof record`, under `tprof top` and under `perf record
//! --call-graph dwarf` at tprof's sampling rate (99 Hz), rounds rotating the
//! order, medians. `xtask/scripts/real_overhead.py` runs the rounds (it is
//! also the command for one-off comparisons, documented in
//! docs/benchmarks.md); this module runs it per configuration and files
//! the tables it prints in results.md, so that one `cargo xtask bench`
//! prints the paced ratios, the real job's and each tool's own CPU.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context as _, Result, bail};

use super::real::generate_images;
use crate::cmd::{command, describe};

/// One configuration of the job.
struct Job {
    num_workers: u32,
    /// OMP/MKL_NUM_THREADS; None: torch's default pools.
    omp: Option<u32>,
    iterations: u32,
}

impl Job {
    fn label(&self) -> String {
        let threads = self
            .omp
            .map_or_else(|| "default threads".to_string(), |n| format!("OMP/MKL={n}"));
        format!(
            "num_workers={}, {threads}, {} iterations",
            self.num_workers, self.iterations
        )
    }
}

/// The two: many workers each with torch's default pools (the
/// busiest tprof sees), and the advised two workers with one thread each.
const JOBS: [Job; 2] = [
    Job {
        num_workers: 8,
        omp: None,
        iterations: 60,
    },
    Job {
        num_workers: 2,
        omp: Some(1),
        iterations: 80,
    },
];

/// The tools run beside the untraced job (real_overhead.py's `--config`).
const CONFIGS: [&str; 3] = ["record=", "top=top", "perf=perf"];

/// Runs every configuration for `rounds` rounds and adds its table to `md`.
pub(super) fn overhead(python: &Path, tprof: &Path, rounds: usize, md: &mut String) -> Result<()> {
    generate_images(python)?;
    md.push_str(
        "## The real PyTorch job\n\n\
         The suite's DataLoader job untraced, under `tprof record`, under \
         `tprof top --batch` and under `perf record -F 99 --call-graph dwarf`; \
         rounds rotate the order; the tool's CPU is its process's threads' CPU \
         time (schedstat) over the job's timed iterations.\n\n",
    );
    for job in &JOBS {
        let mut script = command("python3");
        script
            .arg("xtask/scripts/real_overhead.py")
            .arg("--python")
            .arg(python)
            .arg("--tprof")
            .arg(tprof)
            .args(["--rounds", &rounds.to_string()])
            .args(["--num-workers", &job.num_workers.to_string()])
            .args(["--iterations", &job.iterations.to_string()]);
        if let Some(omp) = job.omp {
            script.args(["--omp", &omp.to_string()]);
        }
        for config in CONFIGS {
            script.args(["--config", config]);
        }
        println!("\nreal job overhead: {}", job.label());
        let lines = streamed(&mut script)?;
        md.push_str(&format!(
            "### {}\n\n`{}`\n\n",
            job.label(),
            describe(&script)
        ));
        // The load averages as a paragraph, then the table after a blank
        // line (a table does not interrupt a paragraph in every renderer).
        for prefix in ["load average", "|"] {
            for line in lines.iter().filter(|l| l.starts_with(prefix)) {
                md.push_str(line);
                md.push_str(if prefix == "|" { "\n" } else { "  \n" });
            }
            md.push('\n');
        }
    }
    Ok(())
}

/// Runs `cmd`, printing its stdout as it comes (a round a line), and
/// returns its lines.
fn streamed(cmd: &mut std::process::Command) -> Result<Vec<String>> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start {}", describe(cmd)))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(lines)
}

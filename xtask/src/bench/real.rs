//! `cargo xtask bench real`: is tprof's advice right on a real job?
//!
//! The bundled PyTorch job (tests/workloads/train_job.py) is run untraced
//! over num_workers ∈ {0, 1, 2, 4, 8} × {default thread pools,
//! OMP_NUM_THREADS=MKL_NUM_THREADS=1}, measuring its own throughput
//! (iterations per second over its timed iterations, imports and warm-up
//! left out). Then tprof records the 8-worker default run, as a user would
//! the job they started with; the `changes` of its findings are applied to
//! that configuration, and the advised configuration is run alongside the
//! sweep. The result is its throughput against the best of the sweep (the
//! goal: at least 95%). Rounds run every configuration once, in an order
//! rotated each round; each figure is the median over rounds. Results go
//! to target/bench/real.md (docs/benchmarks.md keeps a copy with notes).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;
use serde_json::Value;

use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::setup;

#[derive(ClapArgs)]
pub(super) struct Args {
    /// Rounds: each runs every configuration once.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Timed iterations per run (after two of warm-up).
    #[arg(long, default_value_t = 60)]
    iterations: u32,
}

/// A configuration of the job.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Config {
    num_workers: u64,
    /// OMP_NUM_THREADS and MKL_NUM_THREADS; None leaves them unset.
    omp: Option<u64>,
    mkl: Option<u64>,
    pin_memory: bool,
    pub(super) persistent_workers: bool,
    pub(super) prefetch_factor: Option<u64>,
    /// More of the job's options, fixed for a configuration (the zoo's
    /// pathologies: `--dataset python`, `--epoch-batches 4`, …).
    pub(super) extra: Vec<String>,
    /// `--dtype`: what a batch holds when the workers send it.
    pub(super) dtype: Option<String>,
    /// `--collate numpy`: a collate_fn that returns numpy arrays, which
    /// travel pickled whole (false: default_collate's tensors).
    pub(super) numpy_collate: bool,
    /// `--metrics-thread`: a thread in the trainer that holds the GIL.
    pub(super) metrics_thread: bool,
}

impl Config {
    pub(super) fn sweep(num_workers: u64, one_thread: bool) -> Config {
        Config {
            num_workers,
            omp: one_thread.then_some(1),
            mkl: one_thread.then_some(1),
            pin_memory: false,
            persistent_workers: false,
            prefetch_factor: None,
            extra: Vec::new(),
            dtype: None,
            numpy_collate: false,
            metrics_thread: false,
        }
    }

    pub(super) fn label(&self) -> String {
        let threads = match (self.omp, self.mkl) {
            (None, None) => "default threads".to_string(),
            (Some(o), Some(m)) if o == m => format!("OMP/MKL={o}"),
            (o, m) => format!(
                "OMP={} MKL={}",
                o.map_or("default".into(), |v| v.to_string()),
                m.map_or("default".into(), |v| v.to_string())
            ),
        };
        let mut label = format!("num_workers={}, {threads}", self.num_workers);
        if self.pin_memory {
            label.push_str(", pin_memory");
        }
        if self.persistent_workers {
            label.push_str(", persistent_workers");
        }
        if let Some(p) = self.prefetch_factor {
            label.push_str(&format!(", prefetch_factor={p}"));
        }
        if let Some(d) = &self.dtype {
            label.push_str(&format!(", batches {d}"));
        }
        if self.numpy_collate {
            label.push_str(", numpy collate");
        }
        if self.metrics_thread {
            label.push_str(", metrics thread");
        }
        label
    }

    pub(super) fn command(&self, python: &Path, iterations: u32) -> Command {
        let mut c = command(python.to_str().expect("utf-8 path"));
        c.arg("tests/workloads/train_job.py")
            .arg("--data-dir")
            .arg(data_dir())
            .args(["--num-workers", &self.num_workers.to_string()])
            .args(["--iterations", &iterations.to_string()]);
        if self.pin_memory {
            c.arg("--pin-memory");
        }
        if self.persistent_workers {
            c.arg("--persistent-workers");
        }
        if let Some(p) = self.prefetch_factor {
            c.args(["--prefetch-factor", &p.to_string()]);
        }
        if let Some(d) = &self.dtype {
            c.args(["--dtype", d]);
        }
        if self.numpy_collate {
            c.args(["--collate", "numpy"]);
        }
        if self.metrics_thread {
            c.arg("--metrics-thread");
        }
        c.args(&self.extra);
        c.env_remove("OMP_NUM_THREADS")
            .env_remove("MKL_NUM_THREADS");
        if let Some(o) = self.omp {
            c.env("OMP_NUM_THREADS", o.to_string());
        }
        if let Some(m) = self.mkl {
            c.env("MKL_NUM_THREADS", m.to_string());
        }
        c
    }
}

/// The swept configurations: num_workers 0, 1, 2, 4, 8 × two thread settings.
const SWEPT: usize = 10;

/// The job's JPEGs, in RAM so no run waits for the disk (the integration
/// tests use the same directory: tests/support/real_job.rs).
pub(super) fn data_dir() -> PathBuf {
    PathBuf::from("/dev/shm/tprof-train-job-images")
}

/// Generates the job's JPEGs into [`data_dir`] (the job skips what is
/// there already).
pub(super) fn generate_images(python: &Path) -> Result<()> {
    run_cmd(
        command(python.to_str().context("utf-8 path")?)
            .arg("tests/workloads/train_job.py")
            .arg("--data-dir")
            .arg(data_dir())
            .arg("--generate-only"),
    )
}

pub(super) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask bench real needs root (tprof loads eBPF programs): run it with sudo");
    }
    let python = setup::run()?.job_python;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let dir = cmd::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    generate_images(&python)?;
    let load_before = load_average();

    let recorded = Config::sweep(8, false);
    println!("recording {} with tprof", recorded.label());
    let recording = dir.join("real-8-workers.tprof");
    let (findings, advised, skipped) = advise(&python, &recorded, args.iterations, &recording)?;
    println!("tprof advises: {}", advised.label());

    let mut configs: Vec<Config> = [false, true]
        .into_iter()
        .flat_map(|one| [0, 1, 2, 4, 8].map(|n| Config::sweep(n, one)))
        .collect();
    debug_assert_eq!(configs.len(), SWEPT);
    let advised_index = if let Some(i) = configs.iter().position(|c| *c == advised) {
        i
    } else {
        configs.push(advised.clone());
        configs.len() - 1
    };
    let rates = sweep(&python, &configs, args)?;
    let load_after = load_average();
    let md = results(
        args,
        &configs,
        &rates,
        advised_index,
        &findings,
        &skipped,
        (&load_before, &load_after),
    );
    let out = dir.join("real.md");
    std::fs::write(&out, &md)?;
    println!("\n{md}\nwritten to {}", out.display());
    Ok(())
}

/// Records `config` with tprof and applies its findings' changes to it:
/// the findings (id and changes, for the results) and the advised config,
/// with the changes it could not apply.
pub(super) fn advise(
    python: &Path,
    config: &Config,
    iterations: u32,
    recording: &Path,
) -> Result<(Vec<Value>, Config, Vec<String>)> {
    let tprof = cmd::root().join("target/release/tprof");
    let job = config.command(python, iterations);
    let mut record = command(tprof.to_str().context("utf-8 path")?);
    record
        .args([
            "record",
            "--force",
            "--no-flamegraphs",
            "--no-timeline",
            "--no-report",
            "-o",
        ])
        .arg(recording)
        .arg("--")
        .arg(job.get_program())
        .args(job.get_args())
        .envs(job.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .stdout(Stdio::null());
    for (key, value) in job.get_envs() {
        if value.is_none() {
            record.env_remove(key);
        }
    }
    run_cmd(&mut record)?;
    let out = command(tprof.to_str().context("utf-8 path")?)
        .args(["report", "--json"])
        .arg(recording)
        .output()?;
    if !out.status.success() {
        bail!(
            "tprof report --json failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let report: Value = serde_json::from_slice(&out.stdout).context("tprof report --json")?;
    let findings: Vec<Value> = report["findings"].as_array().cloned().unwrap_or_default();
    let mut advised = config.clone();
    let mut skipped = Vec::new();
    for change in findings
        .iter()
        .flat_map(|f| f["changes"].as_array().cloned().unwrap_or_default())
    {
        if !apply(&mut advised, &change) {
            skipped.push(change.to_string());
        }
    }
    Ok((findings, advised, skipped))
}

/// Applies one `{"setting", "from"?, "to"}`; false for a setting the job
/// has no switch for.
pub(super) fn apply(config: &mut Config, change: &Value) -> bool {
    let to = &change["to"];
    match (change["setting"].as_str(), to.as_u64(), to.as_bool()) {
        (Some("num_workers"), Some(n), _) => config.num_workers = n,
        (Some("OMP_NUM_THREADS"), Some(n), _) => config.omp = Some(n),
        (Some("MKL_NUM_THREADS"), Some(n), _) => config.mkl = Some(n),
        (Some("prefetch_factor"), Some(n), _) => config.prefetch_factor = Some(n),
        (Some("pin_memory"), _, Some(b)) => config.pin_memory = b,
        (Some("persistent_workers"), _, Some(b)) => config.persistent_workers = b,
        (Some("batch_dtype"), _, _) if to.is_string() => {
            config.dtype = to.as_str().map(str::to_string);
        }
        (Some("collate_fn"), _, _) if to.as_str() == Some("tensors") => {
            config.numpy_collate = false;
        }
        _ => return false,
    }
    true
}

/// Iterations per second of every config in every round, rounds in a
/// rotated order.
fn sweep(python: &Path, configs: &[Config], args: &Args) -> Result<Vec<Vec<f64>>> {
    let mut rates = vec![Vec::new(); configs.len()];
    for round in 0..args.rounds {
        for k in 0..configs.len() {
            let i = (k + round) % configs.len();
            let rate = run_job(python, &configs[i], args.iterations)?;
            println!(
                "round {}: {}: {rate:.2} it/s",
                round + 1,
                configs[i].label()
            );
            rates[i].push(rate);
        }
    }
    Ok(rates)
}

/// One untraced run; the job's own iterations per second.
pub(super) fn run_job(python: &Path, config: &Config, iterations: u32) -> Result<f64> {
    let out = config
        .command(python, iterations)
        .stderr(Stdio::null())
        .output()
        .context("run train_job.py")?;
    if !out.status.success() {
        bail!("train_job.py ({}) failed: {}", config.label(), out.status);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "summary")
        .and_then(|v| v["iterations_per_s"].as_f64())
        .context("train_job.py printed no summary")
}

pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    }
}

pub(super) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn results(
    args: &Args,
    configs: &[Config],
    rates: &[Vec<f64>],
    advised: usize,
    findings: &[Value],
    skipped: &[String],
    load: (&str, &str),
) -> String {
    let medians: Vec<f64> = rates.iter().map(|r| median(r)).collect();
    // The best of the sweep proper: the advised configuration, when it is
    // not one of the swept ones, comes after them.
    let swept = SWEPT.min(configs.len());
    let (best, best_rate) = medians[..swept]
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or((0, 0.0), |(i, r)| (i, *r));
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mut md = format!(
        "Command: `sudo cargo xtask bench real --rounds {} --iterations {}`\n\
         Machine: {cpus} CPUs, Linux {}; load average {} before, {} after.\n\n",
        args.rounds,
        args.iterations,
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        load.0,
        load.1
    );
    md.push_str("| configuration | median it/s | runs (it/s) | of the best |\n|---|---|---|---|\n");
    for i in 0..configs.len() {
        let runs: Vec<String> = rates[i].iter().map(|r| format!("{r:.2}")).collect();
        let mark = match (i == best, i == advised) {
            (true, true) => " (best; advised)",
            (true, false) => " (best)",
            (false, true) => " (advised)",
            _ => "",
        };
        md.push_str(&format!(
            "| {}{mark} | {:.2} | {} | {:.0}% |\n",
            configs[i].label(),
            medians[i],
            runs.join(", "),
            100.0 * medians[i] / best_rate.max(f64::MIN_POSITIVE)
        ));
    }
    md.push_str("\ntprof's findings on the recorded `num_workers=8, default threads` run:\n\n");
    for f in findings {
        md.push_str(&format!(
            "- `{}`: {}; changes: {}\n",
            f["id"].as_str().unwrap_or("?"),
            f["title"].as_str().unwrap_or("?"),
            f["changes"]
        ));
    }
    if !skipped.is_empty() {
        md.push_str(&format!(
            "\nNot applied (the job has no switch for them): {}\n",
            skipped.join(", ")
        ));
    }
    let ratio = medians[advised] / best_rate.max(f64::MIN_POSITIVE);
    md.push_str(&format!(
        "\nAdvised configuration ({}): {:.2} it/s, {:.1}% of the best of the sweep ({}, {:.2} it/s); goal ≥ 95%: {}.\n",
        configs[advised].label(),
        medians[advised],
        100.0 * ratio,
        configs[best].label(),
        best_rate,
        if ratio >= 0.95 { "met" } else { "missed" }
    ));
    md
}

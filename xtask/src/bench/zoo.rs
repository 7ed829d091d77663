//! `cargo xtask bench zoo`: is tprof's verdict right, and does its
//! predicted step hold, across the ways a real input pipeline fails?
//!
//! Each pathology of the zoo is the bundled PyTorch job
//! (tests/workloads/train_job.py) in a bad configuration (loading on the
//! training thread, workers restarted every epoch, a slow `worker_init_fn`,
//! too many workers with oversubscribed pools, a disk, decode-bound
//! workers, a bursty dataset, every item fetched from remote storage,
//! batches costly to pass, a thread holding the
//! GIL, and a compute-bound job that needs nothing), with
//! a sweep of the settings that matter to it and a healthy configuration.
//! For each: tprof records the bad configuration (release build, default
//! settings), the `changes` of its findings are applied to it, and tprof
//! records the healthy one too. Then every configuration runs untraced,
//! rounds alternating, each figure the median over rounds. Reported per
//! pathology (target/bench/zoo.md, copied into docs/benchmarks.md):
//!
//! - the finding tprof led with, and whether it is the expected one;
//! - the advised configuration's throughput as a share of the best of the
//!   sweep (goal ≥ 95%);
//! - the finding's predicted mean step against the advised configuration's
//!   measured one (goal within 20%);
//! - the findings on the healthy configuration (goal: none advises a
//!   setting; where its trainer still waits for batches because the cores
//!   are full, `cpu_saturated` says so, and names what to make cheaper).
//!
//! A finding whose fix is no setting (the GIL's holder, a function to make
//! cheaper) has no advised configuration: its row says so, and gives the
//! healthy configuration's throughput (the fix made in the code) instead.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;
use serde_json::Value;

use super::real::{Config, advise, data_dir, load_average, median, run_job};
use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::setup;

#[derive(ClapArgs)]
pub(super) struct Args {
    /// Rounds: each runs every configuration of every pathology once.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Only the pathologies whose name contains this.
    #[arg(long)]
    only: Option<String>,
}

/// One pathology.
struct Case {
    name: &'static str,
    /// What goes wrong, for the table.
    what: &'static str,
    /// The findings that name it (the first is the one expected to lead).
    expect: &'static [&'static str],
    bad: Config,
    /// The settings that matter to it, swept.
    sweep: Vec<Config>,
    healthy: Config,
    /// Timed iterations per run.
    iterations: u32,
}

/// The job with OpenMP and MKL at one thread (as DataLoader workers run
/// torch), `extra` options fixed.
fn job(num_workers: u64, extra: &[&str]) -> Config {
    let mut c = Config::sweep(num_workers, true);
    c.extra = extra.iter().map(|s| (*s).to_string()).collect();
    c
}

fn with(mut c: Config, f: impl FnOnce(&mut Config)) -> Config {
    f(&mut c);
    c
}

fn cases() -> Vec<Case> {
    // Every case but the restarts keeps its workers (persistent_workers), so
    // that each shows its own pathology and not also the epochs' restarts.
    let kept = |n: u64, extra: &'static [&'static str]| {
        with(job(n, extra), |c| c.persistent_workers = true)
    };
    let workers = |extra: &'static [&'static str], ns: &[u64]| -> Vec<Config> {
        ns.iter().map(|&n| kept(n, extra)).collect()
    };
    const PYTHON: &[&str] = &["--dataset", "python"];
    const RESTART: &[&str] = &["--epoch-batches", "4"];
    const SLOW_INIT: &[&str] = &["--epoch-batches", "6", "--worker-init-ms", "300"];
    const DISK: &[&str] = &["--dataset", "disk"];
    const DECODE: &[&str] = &["--blur", "21", "--image-size", "48"];
    const BURSTY: &[&str] = &[
        "--dataset",
        "bursty",
        "--burst-ms",
        "180",
        "--image-size",
        "96",
        "--epoch-batches",
        "96",
    ];
    const REMOTE: &[&str] = &[
        "--dataset",
        "remote",
        "--fetch-ms",
        "1.5",
        "--image-size",
        "96",
        "--epoch-batches",
        "96",
    ];
    const LARGE: &[&str] = &["--dataset", "large", "--image-size", "96"];
    const COMPUTE: &[&str] = &["--model", "large"];
    let restarts = |extra: &'static [&'static str]| -> Vec<Config> {
        [1, 2]
            .into_iter()
            .flat_map(|n| [false, true].map(|p| with(job(n, extra), |c| c.persistent_workers = p)))
            .collect()
    };
    // The large images as `dtype`, collated into numpy arrays (pickled
    // whole through the pipe) or into tensors (through shared memory).
    let batches = |dtype: &str, numpy: bool| {
        with(kept(2, LARGE), |c| {
            c.dtype = Some(dtype.into());
            c.numpy_collate = numpy;
        })
    };
    let pools = |n: u64, one: bool| with(Config::sweep(n, one), |c| c.persistent_workers = true);
    vec![
        Case {
            name: "trainer_loading",
            what: "num_workers=0 with a pure-Python __getitem__",
            expect: &["loading_in_trainer"],
            bad: job(0, PYTHON),
            sweep: workers(PYTHON, &[0, 1, 2, 3]),
            healthy: kept(2, PYTHON),
            iterations: 30,
        },
        Case {
            name: "epoch_restart",
            what: "4-batch epochs without persistent_workers",
            expect: &["workers_restarted", "slow_worker_start"],
            bad: job(2, RESTART),
            sweep: restarts(RESTART),
            healthy: kept(2, RESTART),
            iterations: 32,
        },
        Case {
            name: "slow_worker_init",
            what: "a worker_init_fn that opens an index for 300 ms, 6-batch epochs",
            expect: &["slow_worker_start", "workers_restarted"],
            bad: job(2, SLOW_INIT),
            sweep: restarts(SLOW_INIT),
            healthy: kept(2, SLOW_INIT),
            iterations: 30,
        },
        Case {
            name: "oversubscribed",
            what: "num_workers=8 with default OpenMP/MKL pools",
            expect: &["thread_oversubscription", "too_many_workers"],
            bad: pools(8, false),
            sweep: [false, true]
                .into_iter()
                .flat_map(|one| [2, 4, 8].map(|n| pools(n, one)))
                .collect(),
            healthy: pools(2, true),
            iterations: 40,
        },
        Case {
            name: "disk",
            what: "random 4 KiB O_DIRECT reads per item, num_workers=2",
            expect: &["disk_bound"],
            bad: kept(2, DISK),
            // With a deeper prefetch at 8 workers too: whether more reads
            // in flight absorb the slow ones.
            sweep: [
                workers(DISK, &[1, 2, 4, 8]),
                vec![with(kept(8, DISK), |c| c.prefetch_factor = Some(4))],
            ]
            .concat(),
            healthy: kept(8, DISK),
            iterations: 30,
        },
        Case {
            name: "decode",
            what: "costly decode in one worker on 2 cores",
            expect: &["decode_bound"],
            bad: kept(1, DECODE),
            sweep: workers(DECODE, &[1, 2, 3]),
            healthy: kept(2, DECODE),
            iterations: 40,
        },
        Case {
            name: "bursty",
            what: "every 8th batch waits 180 ms for remote storage, prefetch_factor=2",
            expect: &["prefetch_starved"],
            bad: with(kept(2, BURSTY), |c| c.prefetch_factor = Some(2)),
            sweep: [2, 4, 8]
                .map(|p| with(kept(2, BURSTY), |c| c.prefetch_factor = Some(p)))
                .into(),
            healthy: with(kept(2, BURSTY), |c| c.prefetch_factor = Some(8)),
            iterations: 48,
        },
        Case {
            name: "remote",
            what: "every item waits 1.5 ms for remote storage, num_workers=2",
            expect: &["latency_bound"],
            bad: kept(2, REMOTE),
            sweep: workers(REMOTE, &[2, 4, 6, 8]),
            healthy: kept(8, REMOTE),
            iterations: 40,
        },
        Case {
            name: "costly_batches",
            what: "full-resolution float64 images collated into numpy arrays, resized by the trainer",
            expect: &["costly_batches"],
            bad: batches("float64", true),
            sweep: [
                ("float64", true),
                ("uint8", true),
                ("float64", false),
                ("uint8", false),
            ]
            .map(|(d, numpy)| batches(d, numpy))
            .into(),
            healthy: batches("uint8", false),
            iterations: 12,
        },
        Case {
            name: "gil",
            what: "a metrics thread in the trainer computing in pure Python",
            expect: &["gil_contention"],
            bad: with(kept(2, &[]), |c| c.metrics_thread = true),
            sweep: [true, false]
                .map(|m| with(kept(2, &[]), |c| c.metrics_thread = m))
                .into(),
            healthy: kept(2, &[]),
            iterations: 40,
        },
        Case {
            name: "compute_bound",
            what: "a large model, the pipeline keeping up (healthy)",
            expect: &["compute_bound"],
            bad: kept(2, COMPUTE),
            sweep: workers(COMPUTE, &[1, 2]),
            healthy: kept(2, COMPUTE),
            iterations: 12,
        },
    ]
}

/// What tprof made of one pathology.
struct Verdict {
    findings: Vec<Value>,
    advised: Option<Config>,
    skipped: Vec<String>,
    /// The predicted mean step (ms) of the first finding with changes.
    predicted_ms: Option<f64>,
    /// The healthy configuration's findings: id, and the settings it
    /// would change (none, is the goal).
    healthy_findings: Vec<(String, Vec<String>)>,
}

pub(super) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask bench zoo needs root (tprof loads eBPF programs): run it with sudo");
    }
    let python = setup::run()?.job_python;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let dir = cmd::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    run_cmd(
        command(python.to_str().context("utf-8 path")?)
            .arg("tests/workloads/train_job.py")
            .arg("--data-dir")
            .arg(data_dir())
            .args(["--dataset", "disk", "--generate-only"]),
    )?;
    let load_before = load_average();
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| args.only.as_deref().is_none_or(|o| c.name.contains(o)))
        .collect();
    let mut md = String::new();
    let mut rows = Vec::new();
    for case in &cases {
        println!("== {}: {}", case.name, case.what);
        let verdict = verdict(&python, case, &dir)?;
        let configs = configs(case, &verdict);
        let rates = rounds(&python, case, &configs, args.rounds)?;
        rows.push(row(case, &verdict, &configs, &rates));
        md.push_str(&details(case, &verdict, &configs, &rates));
    }
    let load_after = load_average();
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mut out = format!(
        "Command: `sudo cargo xtask bench zoo --rounds {}`\n\
         Machine: {cpus} CPUs, Linux {}; load average {load_before} before, {load_after} after.\n\n\
         | pathology | tprof leads with | advised | advised / best | predicted / measured step | healthy config's findings (→ the settings they advise) |\n\
         |---|---|---|---|---|---|\n",
        args.rounds,
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
    );
    for r in &rows {
        out.push_str(r);
    }
    out.push('\n');
    out.push_str(&md);
    let path = dir.join("zoo.md");
    std::fs::write(&path, &out)?;
    println!("\n{out}\nwritten to {}", path.display());
    Ok(())
}

/// Records the bad and the healthy configuration and applies the bad
/// one's changes.
fn verdict(python: &Path, case: &Case, dir: &Path) -> Result<Verdict> {
    let bad = dir.join(format!("zoo-{}.tprof", case.name));
    let (findings, advised, skipped) = advise(python, &case.bad, case.iterations, &bad)?;
    let changing = findings
        .iter()
        .find(|f| f["changes"].as_array().is_some_and(|c| !c.is_empty()));
    let predicted_ms = changing.and_then(|f| f["predicted_step_ms"].as_f64());
    let advised = (changing.is_some() && advised != case.bad).then_some(advised);
    let healthy = dir.join(format!("zoo-{}-healthy.tprof", case.name));
    let (healthy_findings, _, _) = advise(python, &case.healthy, case.iterations, &healthy)?;
    for f in &findings {
        println!("  finding: {} ({})", f["id"], f["title"]);
    }
    Ok(Verdict {
        findings,
        advised,
        skipped,
        predicted_ms,
        healthy_findings: healthy_findings
            .iter()
            .filter_map(|f| {
                let settings = f["changes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| format!("{}={}", c["setting"].as_str().unwrap_or("?"), c["to"]))
                    .collect();
                Some((f["id"].as_str()?.to_string(), settings))
            })
            .collect(),
    })
}

/// The sweep, then the bad, advised and healthy configurations when they
/// are not in it.
fn configs(case: &Case, verdict: &Verdict) -> Vec<Config> {
    let mut out = case.sweep.clone();
    for c in [
        Some(&case.bad),
        verdict.advised.as_ref(),
        Some(&case.healthy),
    ]
    .into_iter()
    .flatten()
    {
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// Untraced iterations per second, every configuration once per round,
/// the order rotated each round.
fn rounds(python: &Path, case: &Case, configs: &[Config], rounds: usize) -> Result<Vec<Vec<f64>>> {
    let mut rates = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        for k in 0..configs.len() {
            let i = (k + round) % configs.len();
            let rate = run_job(python, &configs[i], case.iterations)?;
            println!(
                "  round {}: {}: {rate:.2} it/s",
                round + 1,
                configs[i].label()
            );
            rates[i].push(rate);
        }
    }
    Ok(rates)
}

fn row(case: &Case, verdict: &Verdict, configs: &[Config], rates: &[Vec<f64>]) -> String {
    let medians: Vec<f64> = rates.iter().map(|r| median(r)).collect();
    let best = medians
        .iter()
        .take(case.sweep.len())
        .copied()
        .fold(0.0, f64::max);
    let lead = verdict
        .findings
        .first()
        .and_then(|f| f["id"].as_str())
        .unwrap_or("(none)");
    let expected = if case.expect.contains(&lead) {
        ""
    } else {
        " (expected "
    };
    let lead = if expected.is_empty() {
        format!("`{lead}`")
    } else {
        format!("`{lead}`{expected}`{}`)", case.expect[0])
    };
    let rate_of = |c: &Config| {
        configs
            .iter()
            .position(|x| x == c)
            .map_or(0.0, |i| medians[i])
    };
    let (advised, share, prediction) = if let Some(a) = &verdict.advised {
        let rate = rate_of(a);
        let share = rate / best.max(f64::MIN_POSITIVE);
        let prediction = verdict.predicted_ms.map_or("no prediction".into(), |p| {
            let measured = 1e3 / rate.max(f64::MIN_POSITIVE);
            let off = p / measured - 1.0;
            format!(
                "{p:.1} / {measured:.1} ms ({:+.0}%{})",
                100.0 * off,
                if off.abs() <= 0.2 { "" } else { ", missed" }
            )
        });
        (
            format!("{} ({:.2} it/s)", a.label(), rate),
            format!(
                "{:.0}%{}",
                100.0 * share,
                if share >= 0.95 { "" } else { " (missed)" }
            ),
            prediction,
        )
    } else {
        let healthy = rate_of(&case.healthy);
        (
            "no setting".to_string(),
            format!(
                "— (the fix in code, as the healthy configuration: {:.0}%)",
                100.0 * healthy / best.max(f64::MIN_POSITIVE)
            ),
            "—".to_string(),
        )
    };
    let healthy = healthy_cell(&verdict.healthy_findings);
    format!(
        "| {} | {lead} | {advised} | {share} | {prediction} | {healthy} |\n",
        case.name
    )
}

/// The healthy configuration's findings, each with the settings it
/// would change: the goal is that none would change any.
fn healthy_cell(findings: &[(String, Vec<String>)]) -> String {
    if findings.is_empty() {
        return "none".into();
    }
    let advises = findings.iter().any(|(_, settings)| !settings.is_empty());
    let list: Vec<String> = findings
        .iter()
        .map(|(id, settings)| {
            if settings.is_empty() {
                format!("`{id}`")
            } else {
                format!("`{id}` → {}", settings.join(", "))
            }
        })
        .collect();
    format!(
        "{}{}",
        list.join("; "),
        if advises { " (missed)" } else { "" }
    )
}

fn details(case: &Case, verdict: &Verdict, configs: &[Config], rates: &[Vec<f64>]) -> String {
    let mut md = format!(
        "### {}: {}\n\nRecorded: {}.\n\n| configuration | median it/s | runs |\n|---|---|---|\n",
        case.name,
        case.what,
        case.bad.label()
    );
    for (c, r) in configs.iter().zip(rates) {
        let runs: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
        let mut marks = Vec::new();
        if *c == case.bad {
            marks.push("recorded");
        }
        if verdict.advised.as_ref() == Some(c) {
            marks.push("advised");
        }
        if *c == case.healthy {
            marks.push("healthy");
        }
        let marks = if marks.is_empty() {
            String::new()
        } else {
            format!(" ({})", marks.join(", "))
        };
        md.push_str(&format!(
            "| {}{marks} | {:.2} | {} |\n",
            c.label(),
            median(r),
            runs.join(", ")
        ));
    }
    md.push_str("\nFindings:\n\n");
    for f in &verdict.findings {
        md.push_str(&format!(
            "- `{}`: {}; changes: {}; predicted step: {}\n",
            f["id"].as_str().unwrap_or("?"),
            f["title"].as_str().unwrap_or("?"),
            f["changes"],
            f["predicted_step_ms"]
        ));
    }
    if !verdict.skipped.is_empty() {
        md.push_str(&format!(
            "\nNot applied (the job has no switch for them): {}\n",
            verdict.skipped.join(", ")
        ));
    }
    md.push('\n');
    md
}

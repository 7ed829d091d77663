//! `cargo xtask bench-python`: Python frames against py-spy, and what the
//! Python walk costs.
//!
//! - Shares: tests/workloads/python/mix.py (burn_a, burn_b and
//!   compress_loop under main → step, 1/2, 1/6 and 1/3 of the main
//!   thread's CPU time by its own clock) recorded by `tprof record` and by
//!   `py-spy record --native`, both at 99 Hz, on every installed CPython:
//!   each function's share of the samples under `step`, next to the share
//!   of CPU time the job measured, and the share of compress_loop's
//!   samples in libz (native code under the Python call).
//! - Cost: the same job at Python depth 0 and 100 (recurse() frames
//!   above main), untraced, under `tprof record` and under `tprof record
//!   --no-python-frames`, rounds alternating; the job's rounds per second
//!   against untraced (median over rounds), and with
//!   `kernel.bpf_stats_enabled` the ns per run of `tprof_sample` (an
//!   on-CPU sample: Python walk each time) and `tprof_switch_r` (every
//!   switch of the machine; a walk at most once per ms per thread and
//!   reason, a check that the Python code has not moved otherwise).
//!
//! Results go to target/bench/python.md (docs/benchmarks.md keeps them with
//! notes). Run it on a quiet machine: the header records the load average.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;

use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::setup;

#[derive(ClapArgs)]
pub(crate) struct Args {
    /// Rounds of the cost comparison (each runs every configuration).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds each run of the job lasts.
    #[arg(long, default_value_t = 6)]
    seconds: u64,
}

/// The interpreters compared, where installed.
const PYTHONS: &[&str] = &[
    "/root/.pyenv/versions/3.10.13/bin/python3",
    "/root/.pyenv/versions/3.11.7/bin/python3",
    "/root/.pyenv/versions/3.12.1/bin/python3",
    "/root/.pyenv/versions/3.13.0/bin/python3",
    "/usr/bin/python3.11",
];

/// The functions of the shares table, with the share of the main thread's
/// CPU time the job gives each.
const FUNCTIONS: [(&str, &str); 3] = [
    ("burn_a", "a_ns"),
    ("burn_b", "b_ns"),
    ("compress_loop", "zlib_ns"),
];

pub(crate) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask bench-python needs root (tprof loads eBPF programs): run it with sudo");
    }
    setup::run()?;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let dir = cmd::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let pythons: Vec<&str> = PYTHONS
        .iter()
        .copied()
        .filter(|p| {
            let there = Path::new(p).exists();
            if !there {
                println!("skipped: {p} is not installed");
            }
            there
        })
        .collect();
    let Some(&cost_python) = pythons
        .iter()
        .find(|p| p.contains("3.12"))
        .or(pythons.first())
    else {
        bail!("no CPython of {PYTHONS:?} is installed");
    };
    let mut md = header(args);
    md.push_str("## Function shares: tprof and py-spy --native\n\n");
    for python in &pythons {
        shares(&dir, python, args.seconds, &mut md)?;
    }
    cost(&dir, cost_python, args, &mut md)?;
    let out = dir.join("python.md");
    std::fs::write(&out, &md)?;
    println!("\n{md}\nwritten to {}", out.display());
    Ok(())
}

fn header(args: &Args) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!(
        "Command: `sudo cargo xtask bench-python --rounds {} --seconds {}`\n\
         Machine: {cpus} CPUs, kernel {}; load average at the start: {}\n\n",
        args.rounds,
        args.seconds,
        kernel.trim(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn mix() -> PathBuf {
    cmd::root().join("tests/workloads/python/mix.py")
}

fn tprof() -> PathBuf {
    cmd::root().join("target/release/tprof")
}

/// One run of the job: its ground truth (the "done" line).
fn job_truth(truth_file: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(truth_file)
        .with_context(|| format!("read {}", truth_file.display()))?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["role"] == "done")
        .context("the job printed no done line")
}

/// Folded stacks (`tprof flamegraph --folded`, `py-spy --format raw`) as
/// (frames root to leaf, count).
pub(crate) fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_string).collect(),
                count.parse().ok()?,
            ))
        })
        .collect()
}

/// A Python frame label of either tool, as (function, file name):
/// tprof's `burn_a (mix.py)`, py-spy's `burn_a (mix.py:24)`.
fn python_frame(label: &str) -> Option<(String, String)> {
    let (function, rest) = label.rsplit_once(" (")?;
    let file = rest.strip_suffix(')')?;
    let file = file.split(':').next()?;
    let is_py = std::path::Path::new(file).extension() == Some("py".as_ref());
    is_py.then(|| {
        let short = function.rsplit('.').next().unwrap_or(function);
        (
            short.to_string(),
            file.rsplit('/').next().unwrap_or(file).to_string(),
        )
    })
}

/// What the shares table needs from one tool's stacks of one run.
#[derive(Default)]
struct Shares {
    /// Samples with `step` of mix.py in them, and per function of
    /// FUNCTIONS those of them with it too.
    under_step: u64,
    per_function: BTreeMap<&'static str, u64>,
    /// compress_loop's samples, and those of them in libz.
    zlib: u64,
    zlib_in_libz: u64,
    /// The job's samples, and those with any Python frame.
    total: u64,
    with_python: u64,
}

fn shares_of(stacks: &[(Vec<String>, u64)]) -> Shares {
    let mut s = Shares::default();
    for (frames, count) in stacks {
        let python: BTreeSet<(String, String)> =
            frames.iter().filter_map(|f| python_frame(f)).collect();
        let has = |f: &str| python.contains(&(f.to_string(), "mix.py".to_string()));
        s.total += count;
        if !python.is_empty() {
            s.with_python += count;
        }
        if has("step") {
            s.under_step += count;
            for (f, _) in FUNCTIONS {
                if has(f) {
                    *s.per_function.entry(f).or_default() += count;
                }
            }
        }
        if has("compress_loop") {
            s.zlib += count;
            if frames.iter().any(|f| in_libz(f)) {
                s.zlib_in_libz += count;
            }
        }
    }
    s
}

/// Whether a frame is zlib's: py-spy labels every native frame with its
/// library (`deflate (libz.so.1.2.13)`), tprof a named function by its
/// name alone (`deflate`) and an unnamed one by library and offset
/// (`libz.so.1.2.13+0x5d80`).
fn in_libz(frame: &str) -> bool {
    frame.contains("libz.so")
        || ["deflate", "inflate", "adler32", "crc32", "_tr_"]
            .iter()
            .any(|p| frame.starts_with(p) && !frame.contains(' '))
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "–".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// Records the job with tprof, then with py-spy, and adds their table.
fn shares(dir: &Path, python: &str, seconds: u64, md: &mut String) -> Result<()> {
    let secs = seconds.to_string();
    let recording = dir.join("python.tprof");
    let truth_tprof = dir.join("python-tprof.jsonl");
    let _ = std::fs::remove_file(&truth_tprof);
    run_quiet(
        command(tprof().to_str().unwrap())
            .args([
                "record",
                "--force",
                "--no-report",
                "--no-flamegraphs",
                "--no-timeline",
            ])
            .arg("-o")
            .arg(&recording)
            .args(["--", python])
            .arg(mix())
            .arg(&secs)
            .env("TPROF_TRUTH_FILE", &truth_tprof),
    )?;
    let folded = command(tprof().to_str().unwrap())
        .args(["flamegraph", "--folded", "--kind", "cpu"])
        .arg(&recording)
        .output()
        .context("tprof flamegraph")?;
    let tprof_shares = shares_of(&parse_folded(&String::from_utf8_lossy(&folded.stdout)));
    let truth_tprof = job_truth(&truth_tprof)?;

    let raw = dir.join("python.py-spy.txt");
    let truth_spy = dir.join("python-py-spy.jsonl");
    let _ = std::fs::remove_file(&truth_spy);
    run_quiet(
        command(setup::py_spy_bin().to_str().unwrap())
            .args(["record", "--native", "--format", "raw", "--rate", "99"])
            .arg("-o")
            .arg(&raw)
            .args(["--", python])
            .arg(mix())
            .arg(&secs)
            .env("TPROF_TRUTH_FILE", &truth_spy),
    )?;
    let spy_shares = shares_of(&parse_folded(&std::fs::read_to_string(&raw)?));
    let truth_spy = job_truth(&truth_spy)?;

    let cpu = |t: &serde_json::Value, key: &str| t[key].as_f64().unwrap_or(0.0);
    let cpu_share = |t: &serde_json::Value, key: &str| {
        let total: f64 = FUNCTIONS.iter().map(|(_, k)| cpu(t, k)).sum();
        format!("{:.1}%", 100.0 * cpu(t, key) / total.max(1.0))
    };
    md.push_str(&format!(
        "### {python}\n\n\
         | function | CPU share, tprof's run | tprof | CPU share, py-spy's run | py-spy |\n\
         |---|---|---|---|---|\n"
    ));
    for (f, key) in FUNCTIONS {
        md.push_str(&format!(
            "| {f} | {} | {} | {} | {} |\n",
            cpu_share(&truth_tprof, key),
            pct(
                tprof_shares.per_function.get(f).copied().unwrap_or(0),
                tprof_shares.under_step
            ),
            cpu_share(&truth_spy, key),
            pct(
                spy_shares.per_function.get(f).copied().unwrap_or(0),
                spy_shares.under_step
            ),
        ));
    }
    md.push_str(&format!(
        "| samples under step | | {} | | {} |\n\
         | compress_loop's samples in libz | | {} | | {} |\n\
         | the job's samples with Python frames | | {} of {} | | {} of {} |\n\n",
        tprof_shares.under_step,
        spy_shares.under_step,
        pct(tprof_shares.zlib_in_libz, tprof_shares.zlib),
        pct(spy_shares.zlib_in_libz, spy_shares.zlib),
        pct(tprof_shares.with_python, tprof_shares.total),
        tprof_shares.total,
        pct(spy_shares.with_python, spy_shares.total),
        spy_shares.total,
    ));
    Ok(())
}

fn run_quiet(c: &mut Command) -> Result<()> {
    let out = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("could not start {}", cmd::describe(c)))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            cmd::describe(c),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// One configuration of the cost comparison.
#[derive(Clone, Copy, PartialEq)]
enum Config {
    Untraced,
    Tprof,
    NoPython,
}

impl Config {
    const ALL: [Config; 3] = [Config::Untraced, Config::Tprof, Config::NoPython];

    fn name(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::Tprof => "`tprof record`",
            Config::NoPython => "`tprof record --no-python-frames`",
        }
    }
}

/// One run: the job's rounds per second, and the two programs' ns per run.
#[derive(Default, Clone, Copy)]
struct Run {
    rounds_per_s: f64,
    sample_ns: f64,
    switch_ns: f64,
    samples: u64,
}

fn cost(dir: &Path, python: &str, args: &Args, md: &mut String) -> Result<()> {
    md.push_str(&format!(
        "## Cost of the Python walk\n\n{python}, mix.py for {} s per run, {} rounds alternating; \
         medians. Loss: the job's rounds per second against untraced in the same round.\n\n\
         | Python depth | configuration | rounds/s | loss | tprof_sample ns/run | \
         tprof_switch_r ns/run | samples/run |\n|---|---|---|---|---|---|---|\n",
        args.seconds, args.rounds
    ));
    let result = with_bpf_stats(|| {
        for depth in [0u32, 100] {
            let mut runs: BTreeMap<usize, Vec<Run>> = BTreeMap::new();
            for round in 0..args.rounds {
                for i in 0..Config::ALL.len() {
                    // Rotate the order so no configuration always runs first.
                    let c = (i + round) % Config::ALL.len();
                    let run = cost_run(dir, python, Config::ALL[c], depth, args.seconds)?;
                    runs.entry(c).or_default().push(run);
                }
            }
            let untraced = runs[&0].clone();
            for (c, config) in Config::ALL.iter().enumerate() {
                let r = &runs[&c];
                let losses: Vec<f64> = r
                    .iter()
                    .zip(&untraced)
                    .map(|(run, base)| 1.0 - run.rounds_per_s / base.rounds_per_s)
                    .collect();
                let med = |f: fn(&Run) -> f64| median(r.iter().map(f).collect());
                let traced = *config != Config::Untraced;
                md.push_str(&format!(
                    "| {depth} | {} | {:.1} | {:.1}% | {} | {} | {} |\n",
                    config.name(),
                    med(|r| r.rounds_per_s),
                    100.0 * median(losses),
                    if traced {
                        format!("{:.0}", med(|r| r.sample_ns))
                    } else {
                        "–".into()
                    },
                    if traced {
                        format!("{:.0}", med(|r| r.switch_ns))
                    } else {
                        "–".into()
                    },
                    if traced {
                        format!("{:.0}", med(|r| r.samples as f64))
                    } else {
                        "–".into()
                    },
                ));
            }
        }
        Ok(())
    });
    md.push('\n');
    result
}

/// Runs `f` with the kernel's per-program run counts and times on
/// (`kernel.bpf_stats_enabled`), then puts the setting back as it was.
pub(crate) fn with_bpf_stats(f: impl FnOnce() -> Result<()>) -> Result<()> {
    const SETTING: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let before = std::fs::read_to_string(SETTING).unwrap_or_default();
    std::fs::write(SETTING, "1").context("enable kernel.bpf_stats_enabled")?;
    let result = f();
    let _ = std::fs::write(SETTING, before.trim());
    result
}

fn cost_run(dir: &Path, python: &str, config: Config, depth: u32, seconds: u64) -> Result<Run> {
    let truth = dir.join("python-cost.jsonl");
    let _ = std::fs::remove_file(&truth);
    let job = [
        python.to_string(),
        mix().display().to_string(),
        seconds.to_string(),
        depth.to_string(),
    ];
    let mut c = if config == Config::Untraced {
        command(python)
    } else {
        let mut c = crate::bench::tprof_record(&tprof());
        c.arg("-o").arg(dir.join("python-cost.tprof"));
        if config == Config::NoPython {
            c.arg("--no-python-frames");
        }
        c.arg("--").arg(python);
        c
    };
    c.args(&job[1..])
        .env("TPROF_TRUTH_FILE", &truth)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c
        .spawn()
        .with_context(|| format!("start {}", cmd::describe(&c)))?;
    // The counters only grow; the last polls may catch tprof closing its
    // programs, so each program keeps its largest reading.
    let mut last: Option<BTreeMap<String, (u64, u64)>> = None;
    let start = Instant::now();
    while child.try_wait()?.is_none() {
        std::thread::sleep(Duration::from_millis(200));
        if config != Config::Untraced
            && start.elapsed() > Duration::from_secs(1)
            && let Some(now) = program_stats(child.id())
        {
            let merged = last.get_or_insert_with(BTreeMap::new);
            for (name, reading) in now {
                let kept = merged.entry(name).or_insert(reading);
                if reading.0 > kept.0 {
                    *kept = reading;
                }
            }
        }
    }
    let done = job_truth(&truth)?;
    let rounds = done["rounds"].as_f64().unwrap_or(0.0);
    let mut run = Run {
        rounds_per_s: rounds / seconds as f64,
        ..Run::default()
    };
    if let Some(stats) = last {
        let per_run = |name: &str| {
            stats
                .get(name)
                .map_or(0.0, |&(cnt, ns)| ns as f64 / cnt.max(1) as f64)
        };
        run.sample_ns = per_run("tprof_sample");
        run.switch_ns = per_run("tprof_switch_r");
        run.samples = stats.get("tprof_sample").map_or(0, |&(cnt, _)| cnt);
    }
    Ok(run)
}

/// (run_cnt, run_time_ns) of each program process `pid` holds, from its
/// fdinfo and bpftool.
pub(crate) fn program_stats(pid: u32) -> Option<BTreeMap<String, (u64, u64)>> {
    let mut ids = BTreeSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .ok()?
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(fd.path())
            && let Some(id) = text
                .lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        {
            ids.insert(id);
        }
    }
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .ok()?;
    let progs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
    let stats: BTreeMap<String, (u64, u64)> = progs
        .iter()
        .filter(|p| p["id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                (
                    p["run_cnt"].as_u64().unwrap_or(0),
                    p["run_time_ns"].as_u64().unwrap_or(0),
                ),
            )
        })
        .collect();
    (!stats.is_empty()).then_some(stats)
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        f64::midpoint(values[n / 2 - 1], values[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libz_frames_of_either_tool() {
        assert!(in_libz("deflate (libz.so.1.2.13)"));
        assert!(in_libz("deflate"));
        assert!(in_libz("libz.so.1.2.13+0x5d80"));
        assert!(in_libz("adler32_z"));
        assert!(!in_libz("compress_loop (mix.py)"));
        assert!(!in_libz("deflate_helper (mix.py)"));
        assert!(!in_libz("PyObject_Vectorcall"));
    }
}

//! `cargo xtask bench stacks`: what whole user stacks cost, and whether
//! they weigh what perf's DWARF unwinding weighs.
//!
//! - Cost: `kernel.bpf_stats_enabled`'s ns per run of `tprof_switch_r` (every
//!   context switch of the machine) and `tprof_sample` (an on-CPU sample),
//!   with user stacks copied and unwound in userspace (the default) and with
//!   frame-pointer walks in the kernel (`TPROF_FRAME_POINTER_STACKS=1`), on
//!   the paced, pinned pingpong job of `cargo xtask bench` (`record -p`,
//!   with its throughput against an untraced run in the same round) and on
//!   the real PyTorch job (tests/workloads/train_job.py, num_workers=8,
//!   default thread pools, `record --`). Rounds alternate the modes;
//!   figures are medians over rounds.
//! - Ring buffer: the bytes per second the stack copies put through it on
//!   the real job (`TPROF_STACK_COPY_STATS=1`: tprof counts the copies it
//!   drains).
//! - Weights: the same real job under `perf record --call-graph dwarf`
//!   (cpu-clock at 99 Hz, perf's default 8 KiB copy) and tprof's on-CPU
//!   folded stacks of a default-mode round: each tool's share of on-CPU
//!   samples per module of the leaf frame (cv2, libtorch, libgomp, Python,
//!   the kernel, ...), the top leaf functions, and the share of samples
//!   whose stack reaches its thread's root (tprof's from `stacks` in
//!   `tprof report --json`, perf's from the outermost frame).
//!
//! Results go to target/bench/stacks.md, with both tools' folded stacks
//! beside it (stacks-tprof.folded, stacks-perf.folded).

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;
use serde_json::Value;

use super::real::{Config, generate_images};
use super::{Job, Paths, median, prepare, read_counts, tprof_record};
use crate::bench_python::{parse_folded, program_stats, with_bpf_stats};
use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::setup;

#[derive(ClapArgs)]
pub(super) struct Args {
    /// Rounds: each runs every configuration once.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Timed iterations of each real-job run (after two of warm-up).
    #[arg(long, default_value_t = 60)]
    iterations: u32,
    /// Context switches per second the paced job is tuned to (untraced).
    #[arg(long, default_value_t = 150_000)]
    switches: u64,
}

/// How user stacks are taken.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Untraced,
    /// The default: the top of the stack copied, unwound with CFI.
    Copies,
    /// `TPROF_FRAME_POINTER_STACKS=1`.
    FramePointers,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Copies => "stacks copied (default)",
            Mode::FramePointers => "frame-pointer walks (`TPROF_FRAME_POINTER_STACKS=1`)",
        }
    }

    fn apply(self, c: &mut Command) {
        c.env_remove("TPROF_FRAME_POINTER_STACKS");
        if self == Mode::FramePointers {
            c.env("TPROF_FRAME_POINTER_STACKS", "1");
        }
    }
}

/// One traced run's figures.
#[derive(Clone, Copy, Default)]
struct Run {
    /// The job's throughput (pingpong's round trips/s or the real job's it/s).
    rate: f64,
    switch_ns: f64,
    switch_runs_per_s: f64,
    sample_ns: f64,
    sample_runs: u64,
    /// From TPROF_STACK_COPY_STATS (real job).
    copy_bytes_per_s: f64,
    copies: u64,
}

pub(super) fn run(args: &Args) -> Result<()> {
    if !cmd::is_root() {
        bail!("cargo xtask bench stacks needs root (tprof loads eBPF programs): run it with sudo");
    }
    let python = setup::run()?.job_python;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let paths = prepare()?;
    generate_images(&python)?;
    let mut md = header(args);
    with_bpf_stats(|| {
        paced_cost(&paths, args, &mut md)?;
        real_cost(&paths, &python, args, &mut md)
    })?;
    weights(&paths, &python, args, &mut md)?;
    md.push_str(&format!("Load average at the end: {}\n", load_average()));
    let out = paths.dir.join("stacks.md");
    std::fs::write(&out, &md)?;
    println!("\n{md}\nwritten to {}", out.display());
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn header(args: &Args) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!(
        "Command: `sudo cargo xtask bench stacks --rounds {} --iterations {} --switches {}`\n\
         Machine: {cpus} CPUs, kernel {}; load average at the start: {}\n\n",
        args.rounds,
        args.iterations,
        args.switches,
        kernel.trim(),
        load_average()
    )
}

/// Waits for `child`, polling the bpf_stats of the programs it holds every
/// 200 ms; each program keeps its largest reading (the counters only grow,
/// and the last polls may catch tprof closing its programs).
fn wait_polling(child: &mut Child) -> Result<BTreeMap<String, (u64, u64)>> {
    let mut stats: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let start = Instant::now();
    while child.try_wait()?.is_none() {
        std::thread::sleep(Duration::from_millis(200));
        if start.elapsed() > Duration::from_millis(500)
            && let Some(now) = program_stats(child.id())
        {
            for (name, reading) in now {
                let kept = stats.entry(name).or_insert(reading);
                if reading.0 > kept.0 {
                    *kept = reading;
                }
            }
        }
    }
    Ok(stats)
}

/// (ns per run, runs) of one program.
fn per_run(stats: &BTreeMap<String, (u64, u64)>, name: &str) -> (f64, u64) {
    stats
        .get(name)
        .map_or((0.0, 0), |&(cnt, ns)| (ns as f64 / cnt.max(1) as f64, cnt))
}

const PACED_MODES: [Mode; 3] = [Mode::Untraced, Mode::Copies, Mode::FramePointers];

/// The paced, pinned pingpong job under each mode.
fn paced_cost(paths: &Paths, args: &Args, md: &mut String) -> Result<()> {
    let job = super::calibrate(
        paths,
        Job {
            name: "paced, pinned",
            pairs: 2,
            work: 25_000,
            pin: true,
        },
        args.switches,
    )?;
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); PACED_MODES.len()];
    for round in 0..args.rounds {
        for k in 0..PACED_MODES.len() {
            let i = (k + round) % PACED_MODES.len();
            let mode = PACED_MODES[i];
            let mut child = job.spawn(paths, super::RUN_S)?;
            std::thread::sleep(Duration::from_millis(300));
            let stats = if mode == Mode::Untraced {
                BTreeMap::new()
            } else {
                let mut c = tprof_record(&paths.tprof);
                c.args(["-p", &child.id().to_string()])
                    .args(["-d", &format!("{}s", super::RUN_S - 1), "-o"])
                    .arg(paths.dir.join("stacks-paced.tprof"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                mode.apply(&mut c);
                let mut tprof = c.spawn().context("start tprof record -p")?;
                wait_polling(&mut tprof)?
            };
            let counts = read_counts(&mut child, &[])?;
            child.wait()?;
            let (switch_ns, switch_cnt) = per_run(&stats, "tprof_switch_r");
            let (sample_ns, sample_runs) = per_run(&stats, "tprof_sample");
            let run = Run {
                rate: super::rate(&counts, |c| c.round_trips),
                switch_ns,
                switch_runs_per_s: switch_cnt as f64 / (super::RUN_S - 1) as f64,
                sample_ns,
                sample_runs,
                ..Run::default()
            };
            eprintln!(
                "paced round {round}: {:<52} {:>9.0} round trips/s  switch {:>5.0} ns  sample {:>5.0} ns",
                mode.name(),
                run.rate,
                run.switch_ns,
                run.sample_ns
            );
            runs[i].push(run);
        }
    }
    md.push_str(&format!(
        "## Stack cost on the paced, pinned job\n\n\
         pingpong, 2 pairs each pinned to one CPU, WORK {} (about {} switches/s untraced); \
         `tprof record -p PID -d {}s` from 0.3 s; {} rounds alternating; medians. \
         ns per run: `bpftool prog show` run_time_ns / run_cnt over the recording.\n\n\
         | configuration | round trips/s | ratio to untraced | `tprof_switch_r` runs/s | `tprof_switch_r` ns/run | `tprof_sample` runs | `tprof_sample` ns/run |\n\
         |---|---|---|---|---|---|---|\n",
        job.work,
        args.switches,
        super::RUN_S - 1,
        args.rounds
    ));
    table_rows(&PACED_MODES, &runs, md, false);
    Ok(())
}

fn table_rows(modes: &[Mode], runs: &[Vec<Run>], md: &mut String, real: bool) {
    for (i, mode) in modes.iter().enumerate() {
        let r = &runs[i];
        let med = |f: fn(&Run) -> f64| median(r.iter().map(f).collect());
        // A run whose programs gave no reading (bpftool failed, or something
        // else on the machine turned kernel.bpf_stats_enabled off) is left
        // out of the per-run figures, and counted.
        let read: Vec<&Run> = r.iter().filter(|r| r.switch_ns > 0.0).collect();
        let med_read = |f: fn(&Run) -> f64| median(read.iter().map(|r| f(r)).collect());
        let ratio = median(
            r.iter()
                .zip(&runs[0])
                .map(|(run, base)| run.rate / base.rate.max(f64::MIN_POSITIVE))
                .collect(),
        );
        let rate = if real {
            format!("{:.2}", med(|r| r.rate))
        } else {
            format!("{:.0}", med(|r| r.rate))
        };
        if *mode == Mode::Untraced {
            md.push_str(&format!(
                "| {} | {rate} | 1.000 | – | – | – | – |",
                mode.name()
            ));
        } else {
            md.push_str(&format!(
                "| {} | {rate} | {ratio:.3} | {:.0} | {:.0} | {:.0} | {:.0}{} |",
                mode.name(),
                med_read(|r| r.switch_runs_per_s),
                med_read(|r| r.switch_ns),
                med_read(|r| r.sample_runs as f64),
                med_read(|r| r.sample_ns),
                if read.len() < r.len() {
                    format!(
                        " ({} of {} runs gave no bpf_stats)",
                        r.len() - read.len(),
                        r.len()
                    )
                } else {
                    String::new()
                }
            ));
        }
        if real {
            if *mode == Mode::Untraced {
                md.push_str(" – |");
            } else {
                md.push_str(&format!(
                    " {:.0} ({:.0} copies/run) |",
                    med(|r| r.copy_bytes_per_s),
                    med(|r| r.copies as f64)
                ));
            }
        }
        md.push('\n');
    }
    md.push('\n');
}

/// The real job's configuration measured here: what the issues name.
fn real_config() -> Config {
    Config::sweep(8, false)
}

/// The job's own iterations per second, from its summary line.
fn job_rate(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "summary")
        .and_then(|v| v["iterations_per_s"].as_f64())
}

/// `tprof record -- JOB` of the real job in `mode`, writing `recording`;
/// the job's truth goes to a file (its stdout is mixed with tprof's).
fn record_real(
    paths: &Paths,
    python: &Path,
    mode: Mode,
    iterations: u32,
    recording: &Path,
) -> Result<Run> {
    let job = real_config().command(python, iterations);
    let truth = paths.dir.join("stacks-real-truth.jsonl");
    let _ = std::fs::remove_file(&truth);
    let mut c = tprof_record(&paths.tprof);
    c.arg("-o")
        .arg(recording)
        .arg("--")
        .arg(job.get_program())
        .args(job.get_args())
        .env_remove("OMP_NUM_THREADS")
        .env_remove("MKL_NUM_THREADS")
        .env("TPROF_TRUTH_FILE", &truth)
        .env("TPROF_STACK_COPY_STATS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    mode.apply(&mut c);
    let mut child = c.spawn().context("start tprof record -- train_job.py")?;
    let mut stderr = child.stderr.take().context("tprof stderr")?;
    // tprof writes a line every 10 s and one at the end: read them on a
    // thread so the pipe never fills.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let stats = wait_polling(&mut child)?;
    let stderr = reader.join().unwrap_or_default();
    let status = child.wait()?;
    if !status.success() {
        bail!("tprof record -- train_job.py failed ({status}): {stderr}");
    }
    let truth = std::fs::read_to_string(&truth).context("the job's truth file")?;
    let (copies, secs, copy_bytes_per_s) = copy_stats(&stderr).with_context(|| {
        format!("tprof printed no `stack copies` line (TPROF_STACK_COPY_STATS): {stderr}")
    })?;
    let (switch_ns, switch_cnt) = per_run(&stats, "tprof_switch_r");
    let (sample_ns, sample_runs) = per_run(&stats, "tprof_sample");
    Ok(Run {
        rate: job_rate(&truth).context("train_job.py printed no summary")?,
        switch_ns,
        switch_runs_per_s: switch_cnt as f64 / secs.max(1e-9),
        sample_ns,
        sample_runs,
        copy_bytes_per_s,
        copies,
    })
}

/// (copies, seconds, bytes/s) from tprof's `stack copies: N drained, B
/// bytes in S s (R bytes/s)` line.
fn copy_stats(stderr: &str) -> Option<(u64, f64, f64)> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("tprof: stack copies: "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let copies = words.first()?.parse().ok()?;
    let secs = words.get(5)?.parse().ok()?;
    let rate = line
        .split_once('(')?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((copies, secs, rate))
}

/// One untraced run of the real job: its it/s.
fn untraced_real(python: &Path, iterations: u32) -> Result<f64> {
    let out = real_config()
        .command(python, iterations)
        .stderr(Stdio::null())
        .output()
        .context("run train_job.py")?;
    if !out.status.success() {
        bail!("train_job.py failed: {}", out.status);
    }
    job_rate(&String::from_utf8_lossy(&out.stdout)).context("train_job.py printed no summary")
}

/// The real job under each mode. Its switch rate is its own (a few
/// thousand a second), so runs/s are left out; the copies' bytes are added.
fn real_cost(paths: &Paths, python: &Path, args: &Args, md: &mut String) -> Result<()> {
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); PACED_MODES.len()];
    let default_recording = paths.dir.join("stacks-real.tprof");
    for round in 0..args.rounds {
        for k in 0..PACED_MODES.len() {
            let i = (k + round) % PACED_MODES.len();
            let mode = PACED_MODES[i];
            let run = match mode {
                Mode::Untraced => Run {
                    rate: untraced_real(python, args.iterations)?,
                    ..Run::default()
                },
                Mode::Copies => {
                    record_real(paths, python, mode, args.iterations, &default_recording)?
                }
                Mode::FramePointers => record_real(
                    paths,
                    python,
                    mode,
                    args.iterations,
                    &paths.dir.join("stacks-real-fp.tprof"),
                )?,
            };
            eprintln!(
                "real round {round}: {:<52} {:>6.2} it/s  switch {:>5.0} ns  sample {:>5.0} ns  copies {:>9.0} B/s",
                mode.name(),
                run.rate,
                run.switch_ns,
                run.sample_ns,
                run.copy_bytes_per_s
            );
            runs[i].push(run);
        }
    }
    md.push_str(&format!(
        "## Stack cost on the real PyTorch job\n\n\
         tests/workloads/train_job.py, {}, {} timed iterations, \
         `tprof record -- python train_job.py ...`; {} rounds alternating; medians. \
         Ring buffer: the stack-copy records tprof drained (`TPROF_STACK_COPY_STATS=1`), \
         bytes over the recording's wall time.\n\n\
         | configuration | it/s | ratio to untraced | `tprof_switch_r` runs/s | `tprof_switch_r` ns/run | `tprof_sample` runs | `tprof_sample` ns/run | stack copies, ring-buffer bytes/s |\n\
         |---|---|---|---|---|---|---|---|\n",
        real_config().label(),
        args.iterations,
        args.rounds
    ));
    table_rows(&PACED_MODES, &runs, md, true);
    Ok(())
}

/// The module group a frame's library or binary belongs to.
fn group_of_module(module: &str) -> &'static str {
    let m = module.rsplit('/').next().unwrap_or(module);
    if m.starts_with("[kernel") || m == "[vdso]" {
        "kernel"
    } else if m.starts_with("cv2") || m.contains("opencv") || m.starts_with("libopencv") {
        "cv2 (OpenCV)"
    } else if m.starts_with("libtorch") || m.starts_with("libc10") || m.starts_with("_C.") {
        "libtorch"
    } else if m.starts_with("libgomp") {
        "libgomp"
    } else if m.starts_with("libpython") || m.starts_with("python") {
        "Python interpreter"
    } else if m.starts_with("libc.so") || m.starts_with("libm.so") || m.starts_with("ld-linux") {
        "libc, libm, ld.so"
    } else if m.contains("openblas") || m.contains("mkl") || m.starts_with("_multiarray") {
        "numpy, BLAS"
    } else if m.starts_with("libjpeg") || m.starts_with("libpng") || m.starts_with("libz") {
        "image codecs, zlib"
    } else if m.starts_with('[') {
        "unknown"
    } else {
        "other"
    }
}

/// A function name as both tools can agree on it: no parameter list, no
/// perf `+0x...` offset.
fn normalize(name: &str) -> String {
    let name = name.split("+0x").next().unwrap_or(name);
    let name = match name.find('(') {
        Some(i) if i > 0 && !name.ends_with(".py)") => &name[..i],
        _ => name,
    };
    name.trim().to_string()
}

/// perf's samples as (frames root first, module of each frame), from `perf
/// script -F comm,tid,ip,sym,dso` (frames leaf first, `ip sym (dso)`).
fn parse_perf_script(text: &str) -> Vec<Vec<(String, String)>> {
    let mut samples = Vec::new();
    let mut frames: Vec<(String, String)> = Vec::new();
    let mut in_sample = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            if in_sample {
                frames.reverse();
                samples.push(std::mem::take(&mut frames));
            }
            in_sample = false;
        } else if line.starts_with(char::is_whitespace) {
            let line = line.trim();
            let (rest, module) = match line.rsplit_once(" (") {
                Some((rest, dso)) => (rest, dso.trim_end_matches(')').to_string()),
                None => (line, String::new()),
            };
            // "ip sym": the symbol may hold spaces.
            let sym = rest.split_once(' ').map_or("[unknown]", |(_, s)| s.trim());
            frames.push((sym.to_string(), module));
        } else {
            if in_sample {
                frames.reverse();
                samples.push(std::mem::take(&mut frames));
            }
            in_sample = true;
        }
    }
    if in_sample {
        frames.reverse();
        samples.push(frames);
    }
    samples
}

/// Shares of `total` per key, largest first.
fn shares(counts: &HashMap<String, u64>) -> Vec<(String, f64)> {
    let total: u64 = counts.values().sum();
    let mut v: Vec<(String, f64)> = counts
        .iter()
        .map(|(k, &c)| (k.clone(), c as f64 / total.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// The group of tprof's leaf frame: kernel frames end in `_[k]`, Python
/// frames are `function (file.py)` (the interpreter executing them),
/// unnamed ones `module+0xOFFSET`, named ones are looked up in what perf
/// says each name's module is.
fn tprof_leaf_group(leaf: &str, modules: &HashMap<String, String>) -> String {
    if leaf.ends_with("_[k]") {
        return "kernel".into();
    }
    if leaf.ends_with(".py)") || leaf.contains(".py:") {
        return "Python interpreter".into();
    }
    if let Some((module, _)) = leaf.split_once("+0x") {
        return group_of_module(module).into();
    }
    match modules.get(&normalize(leaf)) {
        Some(m) => group_of_module(m).into(),
        None => "(name not in perf's samples)".into(),
    }
}

/// A folded line of the `perf` process itself (tprof records it with the
/// job it launched): its first frame is the process, `perf` (`perf-exec`
/// before the exec, `NAME (child)` in a child process).
fn is_perf_process(line: &str) -> bool {
    line.split(';')
        .next()
        .is_some_and(|p| p == "perf" || p.starts_with("perf (") || p.starts_with("perf-exec"))
}

/// tprof's leaf named as perf names it: kernel frames without `_[k]`, a
/// function without a symbol (`module+0xSTART`) as perf's `[unknown]` in
/// that module, `[no symbol] (module)`.
fn tprof_leaf_name(leaf: &str) -> String {
    if let Some(k) = leaf.strip_suffix("_[k]") {
        return k.to_string();
    }
    if let Some((module, offset)) = leaf.split_once("+0x")
        && !module.contains(' ')
        && offset.chars().all(|c| c.is_ascii_hexdigit())
    {
        return format!("[no symbol] ({module})");
    }
    normalize(leaf)
}

/// perf and tprof on the same real job, by weight.
fn weights(paths: &Paths, python: &Path, args: &Args, md: &mut String) -> Result<()> {
    // The rooted share: tprof alone, the default-mode recording of the
    // last round.
    let report = command(paths.tprof.to_str().expect("utf-8 path"))
        .args(["report", "--json"])
        .arg(paths.dir.join("stacks-real.tprof"))
        .output()
        .context("tprof report --json")?;
    let report: Value = serde_json::from_slice(&report.stdout).context("tprof report --json")?;
    let stacks = &report["stacks"];

    // The weights: both tools on one run of the job, so that they see the
    // same execution (run to run, how long the OpenMP pools spin moves
    // with the machine's load): `tprof record -- perf record ... -- JOB`,
    // perf's own process left out of tprof's stacks.
    let recording = paths.dir.join("stacks-both.tprof");
    let perf_data = paths.dir.join("stacks-perf.data");
    let job = real_config().command(python, args.iterations);
    let mut both = tprof_record(&paths.tprof);
    both.arg("-o")
        .arg(&recording)
        .args([
            "--",
            "perf",
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "99",
            "--call-graph",
            "dwarf",
            "-o",
        ])
        .arg(&perf_data)
        .arg("--")
        .arg(job.get_program())
        .args(job.get_args())
        .env_remove("OMP_NUM_THREADS")
        .env_remove("MKL_NUM_THREADS")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    run_cmd(&mut both)?;
    let folded = command(paths.tprof.to_str().expect("utf-8 path"))
        .args(["flamegraph", "--folded", "--kind", "cpu"])
        .arg(&recording)
        .output()
        .context("tprof flamegraph --folded")?;
    if !folded.status.success() {
        bail!(
            "tprof flamegraph --folded failed: {}",
            String::from_utf8_lossy(&folded.stderr)
        );
    }
    let folded_text: String = String::from_utf8_lossy(&folded.stdout)
        .lines()
        .filter(|l| !is_perf_process(l))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(paths.dir.join("stacks-tprof.folded"), &folded_text)?;
    let script = command("perf")
        // Inlined frames left out: tprof does not split them either, and
        // perf finds them with addr2line, minutes per library of torch's.
        .args(["script", "--no-inline", "-F", "comm,tid,ip,sym,dso", "-i"])
        .arg(&perf_data)
        .stderr(Stdio::null())
        .output()
        .context("perf script")?;
    let perf_samples = parse_perf_script(&String::from_utf8_lossy(&script.stdout));
    let mut perf_folded: HashMap<String, u64> = HashMap::new();
    let mut modules: HashMap<String, String> = HashMap::new();
    let mut perf_groups: HashMap<String, u64> = HashMap::new();
    let mut perf_leaves: HashMap<String, u64> = HashMap::new();
    let mut perf_rooted = 0u64;
    for frames in &perf_samples {
        for (sym, module) in frames {
            if sym != "[unknown]" {
                modules
                    .entry(normalize(sym))
                    .or_insert_with(|| module.clone());
            }
        }
        let stack: Vec<String> = frames.iter().map(|(s, _)| s.clone()).collect();
        *perf_folded.entry(stack.join(";")).or_default() += 1;
        let Some((leaf, module)) = frames.last() else {
            continue;
        };
        *perf_groups
            .entry(group_of_module(module).to_string())
            .or_default() += 1;
        let leaf = if leaf == "[unknown]" {
            format!(
                "[no symbol] ({})",
                module.rsplit('/').next().unwrap_or(module)
            )
        } else {
            normalize(leaf)
        };
        *perf_leaves.entry(leaf).or_default() += 1;
        let root = frames.iter().find(|(_, m)| !m.starts_with("[kernel"));
        if root.is_some_and(|(s, _)| {
            matches!(
                normalize(s).as_str(),
                "_start" | "clone3" | "__clone3" | "clone" | "__clone"
            )
        }) {
            perf_rooted += 1;
        }
    }
    let mut perf_folded_text: Vec<String> = perf_folded
        .iter()
        .map(|(s, c)| format!("{s} {c}"))
        .collect();
    perf_folded_text.sort();
    std::fs::write(
        paths.dir.join("stacks-perf.folded"),
        perf_folded_text.join("\n") + "\n",
    )?;

    let mut tprof_groups: HashMap<String, u64> = HashMap::new();
    let mut tprof_leaves: HashMap<String, u64> = HashMap::new();
    let mut tprof_total = 0u64;
    for (frames, count) in parse_folded(&folded_text) {
        let Some(leaf) = frames.last() else { continue };
        tprof_total += count;
        *tprof_groups
            .entry(tprof_leaf_group(leaf, &modules))
            .or_default() += count;
        *tprof_leaves.entry(tprof_leaf_name(leaf)).or_default() += count;
    }
    let perf_total = perf_samples.len() as u64;

    md.push_str(&format!(
        "## Weights against `perf record --call-graph dwarf`\n\n\
         One run of the job ({}, {} timed iterations) under both tools, \
         `tprof record -- perf record -e cpu-clock -F 99 --call-graph dwarf -- python train_job.py ...`: \
         tprof's on-CPU folded stacks (`tprof flamegraph --folded --kind cpu`, perf's own \
         process left out: {tprof_total} samples) and perf's (`perf script --no-inline`: \
         {perf_total} samples). Share of each tool's on-CPU samples by the \
         module of the leaf frame (a tprof leaf named by symbol takes the module perf gives \
         that name; a Python frame as leaf is the interpreter running it).\n\n\
         | leaf module | tprof | perf |\n|---|---|---|\n",
        real_config().label(),
        args.iterations
    ));
    let tg = shares(&tprof_groups);
    let pg: HashMap<String, f64> = shares(&perf_groups).into_iter().collect();
    let tg_map: HashMap<String, f64> = tg.iter().cloned().collect();
    let mut keys: Vec<String> = tg.iter().map(|(k, _)| k.clone()).collect();
    for k in pg.keys() {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    for k in &keys {
        md.push_str(&format!(
            "| {k} | {:.1}% | {:.1}% |\n",
            100.0 * tg_map.get(k).copied().unwrap_or(0.0),
            100.0 * pg.get(k).copied().unwrap_or(0.0)
        ));
    }
    md.push_str(
        "\nTop leaf functions (tprof's fifteen largest, and perf's share of the same name; \
         a function without a symbol is `[no symbol] (module)`, all of a module's together; \
         kernel functions without tprof's `_[k]`):\n\n| leaf function | tprof | perf |\n|---|---|---|\n",
    );
    let pl: HashMap<String, f64> = shares(&perf_leaves).into_iter().collect();
    for (name, share) in shares(&tprof_leaves).into_iter().take(15) {
        md.push_str(&format!(
            "| `{name}` | {:.1}% | {} |\n",
            100.0 * share,
            pl.get(&name)
                .map_or("–".to_string(), |s| format!("{:.1}%", 100.0 * s))
        ));
    }
    md.push_str("\nperf's fifteen largest leaf functions:\n\n| leaf function | perf | tprof |\n|---|---|---|\n");
    let tl: HashMap<String, f64> = shares(&tprof_leaves).into_iter().collect();
    for (name, share) in shares(&perf_leaves).into_iter().take(15) {
        md.push_str(&format!(
            "| `{name}` | {:.1}% | {} |\n",
            100.0 * share,
            tl.get(&name)
                .map_or("–".to_string(), |s| format!("{:.1}%", 100.0 * s))
        ));
    }
    let samples = stacks["samples"].as_u64().unwrap_or(0);
    md.push_str(&format!(
        "\nStacks reaching the thread's root: tprof {} of {samples} on-CPU samples ({}; `stacks` \
         in `tprof report --json` of the last default-mode round, tprof alone: mode {}, \
         {} truncated, {} lost); perf {perf_rooted} of {perf_total} ({:.1}%; outermost user \
         frame `_start` or `clone3`/`clone`).\n\n",
        stacks["rooted"],
        if samples > 0 {
            format!(
                "{:.1}%",
                100.0 * stacks["rooted"].as_u64().unwrap_or(0) as f64 / samples as f64
            )
        } else {
            "–".into()
        },
        stacks["mode"],
        stacks["truncated"],
        stacks["lost"],
        100.0 * perf_rooted as f64 / perf_total.max(1) as f64
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_script_samples_come_root_first_with_their_modules() {
        let text = "python3 101 \n\
            \tffffffff81000000 do_syscall_64 ([kernel.kallsyms])\n\
            \t7f0000001000 cv::GaussianBlur(cv::_InputArray const&) (/x/cv2.abi3.so)\n\
            \t7f0000002000 [unknown] (/x/libgomp-a34b.so.1)\n\
            \t401000 _start (/usr/bin/python3.11)\n\
            \n\
            python3 102 \n\
            \t7f0000003000 main (/usr/bin/python3.11)\n\n";
        let samples = parse_perf_script(text);
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0][0].0, "_start");
        assert_eq!(
            samples[0][3],
            ("do_syscall_64".into(), "[kernel.kallsyms]".into())
        );
        assert_eq!(samples[0][2].1, "/x/cv2.abi3.so");
        assert_eq!(normalize(&samples[0][2].0), "cv::GaussianBlur");
        assert_eq!(
            samples[1],
            vec![("main".into(), "/usr/bin/python3.11".into())]
        );
    }

    #[test]
    fn leaf_groups() {
        let modules = HashMap::from([("cv::resize".to_string(), "/x/cv2.abi3.so".to_string())]);
        assert_eq!(tprof_leaf_group("do_syscall_64_[k]", &modules), "kernel");
        assert_eq!(
            tprof_leaf_group("Imgs.__getitem__ (train_job.py)", &modules),
            "Python interpreter"
        );
        assert_eq!(
            tprof_leaf_group("libgomp.so.1+0x1de40", &modules),
            "libgomp"
        );
        assert_eq!(tprof_leaf_group("cv::resize", &modules), "cv2 (OpenCV)");
        assert_eq!(
            tprof_leaf_group("mystery", &modules),
            "(name not in perf's samples)"
        );
        assert_eq!(group_of_module("/v/torch/lib/libtorch_cpu.so"), "libtorch");
        assert_eq!(
            group_of_module("/v/libpython3.11.so.1.0"),
            "Python interpreter"
        );
    }

    #[test]
    fn tprof_leaves_are_named_as_perf_names_them() {
        assert_eq!(tprof_leaf_name("copy_page_range_[k]"), "copy_page_range");
        assert_eq!(
            tprof_leaf_name("libgomp.so.1+0x1de40"),
            "[no symbol] (libgomp.so.1)"
        );
        assert_eq!(tprof_leaf_name("cv::resize(int)"), "cv::resize");
        assert_eq!(
            tprof_leaf_name("step (train_job.py)"),
            "step (train_job.py)"
        );
        assert!(is_perf_process("perf (trainer);perf;main 3"));
        assert!(!is_perf_process("python (trainer);python;main 3"));
    }

    #[test]
    fn copy_stats_line_is_read() {
        let stderr = "tprof: 10 s, 5 events\n\
            tprof: stack copies: 12 drained, 98304 bytes in 2.00 s (49152 bytes/s); \
            resolving stacks took 6.6 ms of CPU (550.0 us a copy), naming frames 1.2 ms\n";
        assert_eq!(copy_stats(stderr), Some((12, 2.0, 49152.0)));
        assert_eq!(copy_stats("nothing"), None);
    }
}

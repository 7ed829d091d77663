//! `cargo xtask bench`: what tprof costs the job it watches, next to what a
//! user would otherwise run, and how far it scales. Results go to
//! target/bench/results.md (docs/benchmarks.md keeps a copy with notes).
//!
//! - Overhead: the throughput of tests/workloads/pingpong.c (producer
//!   processes ping-ponging with consumer threads, a shared mutex, O_DIRECT
//!   reads) untraced, under `tprof record -p`, under libbpf-tools'
//!   offcputime, runqlat and biolatency together, under `perf sched
//!   record`, and with tprof's busiest tracepoints only counted (`perf
//!   stat -a`: what seeing the events costs the machine, the floor any
//!   tracer of them pays there); once paced by per-item work
//!   (`--switches`) to a pipeline's rate above the 100,000
//!   switches/s, with each pair pinned to one CPU so that throughput is
//!   bound by CPU time alone and a tracer's cost shows directly
//!   (unpinned, placement moves a paced job's throughput by up to a
//!   quarter run to run); once unpinned at full tilt (the most
//!   switches two cores can make). Rounds alternate the configurations;
//!   each ratio is the median over rounds of the throughput against the same
//!   round's untraced run.
//! - The real PyTorch job (`bench/real_overhead.rs`): the suite's
//!   DataLoader job in the two configurations issue 29 names, untraced,
//!   under `tprof record`, `tprof top` and `perf record --call-graph
//!   dwarf`, with each tool's own CPU (`--real-rounds`; 0 leaves it out).
//! - tprof's cost by switch rate: the paced, pinned job tuned to rates
//!   from 50,000 to 400,000 switches/s, untraced and under tprof.
//! - tprof's own CPU time and peak RSS while recording (rusage of the tprof
//!   process, which does not reap the job).
//! - Capacity: event rate and drops as producer pairs grow.
//! - Recording size per event and per second; `tprof report` and `tprof
//!   timeline` speed (million events/s) and peak memory (also as a multiple
//!   of the recording's size).

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args as ClapArgs;

use crate::cmd::{self, cargo, command, run as run_cmd};
use crate::setup;

mod programs;
mod real;
mod real_overhead;
mod stacks;
mod zoo;

#[derive(ClapArgs)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    which: Option<Which>,
    /// Rounds of the overhead comparison (each runs every configuration).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Producer/consumer pairs of the overhead workload.
    #[arg(long, default_value_t = 2)]
    pairs: usize,
    /// Context switches per second the paced job is tuned to (untraced),
    /// by choosing pingpong's WORK (arithmetic per item in the producers):
    /// a pipeline's rate above the floor of 100,000.
    #[arg(long, default_value_t = 150_000)]
    switches: u64,
    /// Only the overhead on the paced, pinned job (the bound the issues
    /// set: about 4 minutes), without full tilt, the rate sweep and
    /// capacity.
    #[arg(long)]
    paced_only: bool,
    /// Rounds of the real PyTorch job's overhead (two configurations,
    /// untraced, `tprof record`, `tprof top` and `perf record --call-graph
    /// dwarf`; about 3 minutes a round); 0 leaves it out.
    #[arg(long, default_value_t = 3)]
    real_rounds: usize,
    /// Another tprof binary (an earlier build) to run as one more
    /// configuration of the overhead tables, alternating with this one:
    /// the two compared on the same machine in the same hour.
    #[arg(long, value_name = "TPROF")]
    against: Option<PathBuf>,
}

/// One setting of the overhead job.
#[derive(Clone, Copy)]
struct Job {
    name: &'static str,
    pairs: usize,
    /// pingpong's WORK: 0 is full tilt.
    work: u64,
    /// Each pair's producer and consumer on one CPU (pingpong's `pin`).
    pin: bool,
}

impl Job {
    /// Starts pingpong as this job for `seconds`, its output piped.
    fn spawn(&self, paths: &Paths, seconds: u64) -> Result<Child> {
        let mut c = command(paths.pingpong.to_str().unwrap());
        c.args([self.pairs.to_string(), seconds.to_string()])
            .arg(&paths.io_file)
            .arg(self.work.to_string());
        if self.pin {
            c.arg("pin");
        }
        c.stdout(Stdio::piped()).spawn().context("start pingpong")
    }
}

/// The workload runs this long; throughput is measured from second
/// MEASURE_FROM to second RUN_S - 1, when every tool is attached.
const RUN_S: u64 = 8;
const MEASURE_FROM: u64 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    None,
    Tprof,
    /// tprof without stacks: what the scheduler, IO and futex events cost
    /// on their own.
    TprofNoStacks,
    /// tprof without the step detector's pipe program
    /// (`TPROF_NO_PIPES=1`), which runs at every `read` exit.
    TprofNoPipes,
    /// The `--against` build, default settings.
    TprofAgainst,
    /// `tprof top --batch`: the live view's capture and its analysis every
    /// interval, on the same kernel programs as `record`.
    TprofTop,
    LibbpfTools,
    PerfSched,
    /// The tracepoints under tprof's busiest programs, counted by `perf
    /// stat -a`: what seeing these events costs the machine with the
    /// cheapest stock consumer, a floor to read the tracers' ratios
    /// against on a machine whose tracepoints cost more than the one the
    /// bounds were set on.
    Tracepoints,
}

/// The tracepoints tprof's programs run at on this job, thousands of times
/// a second (profiler/src/capture/programs/attach.rs): the switches and
/// wakeups, the futex syscalls and the pipe program's `read` exit. The
/// syscall ones make every syscall on the machine take the slow path.
const BUSY_TRACEPOINTS: &str = "sched:sched_switch,sched:sched_waking,sched:sched_wakeup_new,\
    syscalls:sys_enter_futex,syscalls:sys_exit_futex,syscalls:sys_exit_read";

impl Tool {
    const ALL: [Tool; 8] = [
        Tool::None,
        Tool::Tprof,
        Tool::TprofTop,
        Tool::TprofNoStacks,
        Tool::TprofNoPipes,
        Tool::LibbpfTools,
        Tool::PerfSched,
        Tool::Tracepoints,
    ];

    /// The overhead table's configurations: [`Tool::ALL`], and the
    /// `--against` build when there is one.
    fn overhead_set(paths: &Paths) -> Vec<Tool> {
        let mut tools = Tool::ALL.to_vec();
        if paths.against.is_some() {
            tools.push(Tool::TprofAgainst);
        }
        tools
    }

    fn name(self) -> &'static str {
        match self {
            Tool::None => "untraced",
            Tool::Tprof => "tprof record",
            Tool::TprofNoStacks => "tprof record --no-stacks",
            Tool::TprofNoPipes => "tprof record, TPROF_NO_PIPES=1 (no pipe program)",
            Tool::TprofAgainst => "tprof record, the `--against` build",
            Tool::TprofTop => "tprof top --batch (a frame a second)",
            Tool::LibbpfTools => "offcputime + runqlat + biolatency",
            Tool::PerfSched => "perf sched record",
            Tool::Tracepoints => "perf stat -a on tprof's busiest tracepoints (counting only)",
        }
    }

    fn is_tprof(self) -> bool {
        !matches!(
            self,
            Tool::None | Tool::LibbpfTools | Tool::PerfSched | Tool::Tracepoints
        )
    }
}

/// Where a run's tprof writes its stderr (in the bench's directory): the
/// error of one that failed.
const TPROF_STDERR: &str = "tprof.stderr";

/// One run of the workload under one tool.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    /// Round trips per second over the measured seconds.
    rate: f64,
    /// Machine-wide context switches per second over the same seconds.
    switches: f64,
    /// The tools' CPU seconds, start to exit, and largest peak RSS (KiB).
    tool_cpu_s: f64,
    /// The tools' CPU milliseconds per second over the measured seconds:
    /// the steady state, without the start-up (loading and verifying the
    /// kernel programs) and the last drain that `tool_cpu_s` includes.
    tool_cpu_ms_per_s: f64,
    tool_maxrss_kib: i64,
}

struct Paths {
    dir: PathBuf,
    tprof: PathBuf,
    pingpong: PathBuf,
    io_file: PathBuf,
    /// `--against`'s tprof.
    against: Option<PathBuf>,
}

/// `tprof record` recording only: no report, flamegraphs or timelines
/// after it, so tprof's CPU and memory are those of capture.
pub(crate) fn tprof_record(tprof: &Path) -> Command {
    let mut c = command(tprof.to_str().expect("utf-8 path"));
    c.args([
        "record",
        "--force",
        "--no-report",
        "--no-flamegraphs",
        "--no-timeline",
    ]);
    c
}

/// Benchmarks other than the overhead one (the default).
#[derive(clap::Subcommand)]
enum Which {
    /// Run the real PyTorch job over num_workers × thread settings, record
    /// the 8-worker run, apply tprof's advice and compare its throughput
    /// with the best of the sweep; writes target/bench/real.md.
    Real(real::Args),
    /// What copied user stacks cost (bpf_stats ns per run against
    /// frame-pointer walks, on the paced job and the real PyTorch job; the
    /// ring-buffer bytes/s of the copies), and the real job's on-CPU
    /// weights next to `perf record --call-graph dwarf`'s; writes
    /// target/bench/stacks.md.
    Stacks(stacks::Args),
    /// A zoo of real PyTorch input-pipeline pathologies: record each bad
    /// configuration, apply tprof's changes, and measure the advised
    /// configuration against a sweep and the predicted step against the
    /// measured one; writes target/bench/zoo.md.
    Zoo(zoo::Args),
    /// Each kernel program's runs a second and ns a run on one job (`--
    /// COMMAND` under `tprof record`, or `--pid`), between two readings of
    /// the kernel's BPF statistics in the steady state; prints a table.
    Programs(programs::Args),
}

pub(crate) fn run(args: &Args) -> Result<()> {
    match &args.which {
        Some(Which::Real(real)) => return real::run(real),
        Some(Which::Stacks(stacks)) => return stacks::run(stacks),
        Some(Which::Zoo(zoo)) => return zoo::run(zoo),
        Some(Which::Programs(programs)) => return programs::run(programs),
        None => {}
    }
    if !cmd::is_root() {
        bail!("cargo xtask bench needs root (the tracers load eBPF programs): run it with sudo");
    }
    let installed = setup::run()?;
    run_cmd(cargo().args(["build", "--release", "-p", "profiler"]))?;
    let paths = Paths {
        against: args.against.clone(),
        ..prepare()?
    };
    if let Some(against) = &paths.against
        && !against.is_file()
    {
        bail!(
            "--against {}: no such file; pass the path of another tprof binary",
            against.display()
        );
    }
    let mut md = header(args);
    let full_tilt = Job {
        name: "full tilt",
        pairs: args.pairs,
        work: 0,
        pin: false,
    };
    let paced = Job {
        name: "paced, pinned",
        pairs: args.pairs,
        work: 8000,
        pin: true,
    };
    let paced = calibrate(&paths, paced, args.switches)?;
    overhead(&paths, paced, args.rounds, &mut md)?;
    if args.real_rounds > 0 {
        let python = &installed.job_python;
        real_overhead::overhead(python, &paths.tprof, args.real_rounds, &mut md)?;
    }
    if !args.paced_only {
        overhead(&paths, full_tilt, args.rounds, &mut md)?;
        rate_sweep(&paths, paced, args.rounds, &mut md)?;
        capacity(&paths, &mut md)?;
    }
    let out = paths.dir.join("results.md");
    std::fs::write(&out, &md)?;
    println!("\n{md}\nwritten to {}", out.display());
    Ok(())
}

fn prepare() -> Result<Paths> {
    let dir = cmd::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let pingpong = dir.join("pingpong");
    run_cmd(
        command("gcc")
            .args(["-O2", "-pthread", "-o"])
            .arg(&pingpong)
            .arg("tests/workloads/pingpong.c"),
    )?;
    let io_file = dir.join("io.bin");
    if !io_file.exists() {
        run_cmd(
            command("dd")
                .args([
                    "if=/dev/urandom",
                    "bs=1M",
                    "count=64",
                    "conv=fsync",
                    "status=none",
                ])
                .arg(format!("of={}", io_file.display())),
        )?;
    }
    Ok(Paths {
        tprof: cmd::root().join("target/release/tprof"),
        dir,
        pingpong,
        io_file,
        against: None,
    })
}

fn header(args: &Args) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!(
        "Command: `sudo cargo xtask bench --rounds {} --pairs {} --switches {} --real-rounds {}{}`\n\
         Machine: {cpus} CPUs, kernel {}; load average at the start: {}\n\n",
        args.rounds,
        args.pairs,
        args.switches,
        args.real_rounds,
        match (args.paced_only, &args.against) {
            (false, None) => String::new(),
            (true, None) => " --paced-only".to_string(),
            (paced, Some(against)) => format!(
                "{} --against {}",
                if paced { " --paced-only" } else { "" },
                against.display()
            ),
        },
        kernel.trim(),
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    )
}

/// `job_kind` with the WORK that brings it, untraced, to about `switches`
/// context switches per second on this machine: a few short runs from its
/// WORK, scaling WORK by how far each missed.
fn calibrate(paths: &Paths, mut job_kind: Job, switches: u64) -> Result<Job> {
    for _ in 0..4 {
        let mut job = job_kind.spawn(paths, 3)?;
        let counts = read_counts(&mut job, &[])?;
        job.wait()?;
        let at = |t: u64| counts.iter().find(|c| c.t == t).map_or(0, |c| c.ctxt);
        let rate = at(3).saturating_sub(at(1)) as f64 / 2.0;
        let work = job_kind.work;
        eprintln!("calibrating: WORK {work}: {rate:.0} context switches/s");
        let scale = (rate / switches as f64).clamp(0.1, 10.0);
        if (0.9..=1.1).contains(&scale) {
            break;
        }
        job_kind.work = ((work as f64 * scale) as u64).max(1);
    }
    Ok(job_kind)
}

fn overhead(paths: &Paths, job: Job, rounds: usize, md: &mut String) -> Result<()> {
    let tools = Tool::overhead_set(paths);
    let runs = alternate(paths, job, &tools, rounds)?;
    md.push_str(&format!(
        "## Overhead on the job: {}\n\n\
         pingpong with {} producer/consumer pairs{} plus futex and O_DIRECT traffic, \
         WORK {} (untraced: {:.0} context switches/s on the machine); \
         {rounds} rounds; throughput = round trips/s over seconds {MEASURE_FROM}-{}; \
         ratio = median over rounds of (throughput / the same round's untraced throughput).\n\n\
         tool CPU ms/s = the tools' CPU per second over the same seconds (the steady state); \
         tool CPU s = from start to exit, loading the kernel programs and the last drain included.\n\n\
         | configuration | median round trips/s | ratio to untraced | throughput loss | tool CPU ms/s (median) | tool CPU s (median) | tool peak RSS MiB (max) |\n\
         |---|---|---|---|---|---|---|\n",
        job.name,
        job.pairs,
        if job.pin { " (each pair pinned to one CPU)" } else { "" },
        job.work,
        median(runs[0].iter().map(|r| r.switches).collect()),
        RUN_S - 1
    ));
    for (i, tool) in tools.iter().enumerate() {
        let ratio = median_ratio(&runs[i], &runs[0]);
        md.push_str(&format!(
            "| {} | {:.0} | {:.3} | {:.1}% | {:.1} | {:.2} | {:.1} |\n",
            tool.name(),
            median(runs[i].iter().map(|r| r.rate).collect()),
            ratio,
            100.0 * (1.0 - ratio),
            median(runs[i].iter().map(|r| r.tool_cpu_ms_per_s).collect()),
            median(runs[i].iter().map(|r| r.tool_cpu_s).collect()),
            runs[i].iter().map(|r| r.tool_maxrss_kib).max().unwrap_or(0) as f64 / 1024.0
        ));
    }
    md.push('\n');
    Ok(())
}

/// tprof's cost against the job's switch rate: the paced, pinned job tuned
/// to each rate, untraced and under tprof. The cost is per event, so the
/// loss grows with the rate; this is the table to read a job's own rate
/// (from its report) against.
fn rate_sweep(paths: &Paths, base: Job, rounds: usize, md: &mut String) -> Result<()> {
    md.push_str(&format!(
        "## tprof's cost by switch rate\n\n\
         The paced, pinned job tuned to each rate; {rounds} rounds of untraced and \
         `tprof record` (default settings) alternating.\n\n\
         | switches/s asked | WORK | untraced switches/s | untraced round trips/s | tprof round trips/s | throughput loss | tprof CPU ms/s, steady (median) | tprof CPU s (median) |\n\
         |---|---|---|---|---|---|---|---|\n"
    ));
    for switches in SWEEP_SWITCHES {
        let job = calibrate(
            paths,
            Job {
                name: "sweep",
                ..base
            },
            switches,
        )?;
        let runs = alternate(paths, job, &[Tool::None, Tool::Tprof], rounds)?;
        let ratio = median_ratio(&runs[1], &runs[0]);
        md.push_str(&format!(
            "| {switches} | {} | {:.0} | {:.0} | {:.0} | {:.1}% | {:.1} | {:.2} |\n",
            job.work,
            median(runs[0].iter().map(|r| r.switches).collect()),
            median(runs[0].iter().map(|r| r.rate).collect()),
            median(runs[1].iter().map(|r| r.rate).collect()),
            100.0 * (1.0 - ratio),
            median(runs[1].iter().map(|r| r.tool_cpu_ms_per_s).collect()),
            median(runs[1].iter().map(|r| r.tool_cpu_s).collect()),
        ));
    }
    md.push('\n');
    Ok(())
}

/// Switch rates of the sweep, around the floor of 100,000/s.
const SWEEP_SWITCHES: [u64; 4] = [50_000, 100_000, 200_000, 400_000];

/// `rounds` runs of `job` under each of `tools`, the order rotating each
/// round so no tool always runs first (warm caches, drift); `runs[i]` are
/// `tools[i]`'s.
fn alternate(paths: &Paths, job: Job, tools: &[Tool], rounds: usize) -> Result<Vec<Vec<Run>>> {
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); tools.len()];
    for round in 0..rounds {
        for k in 0..tools.len() {
            let i = (k + round) % tools.len();
            let run = run_retried(paths, tools[i], job)?;
            eprintln!(
                "{} (WORK {}) round {round}: {:<36} {:>10.0} round trips/s {:>10.0} switches/s",
                job.name,
                job.work,
                tools[i].name(),
                run.rate,
                run.switches
            );
            runs[i].push(run);
        }
    }
    Ok(runs)
}

/// The median over rounds of each run's throughput against the same
/// round's baseline run.
fn median_ratio(runs: &[Run], baseline: &[Run]) -> f64 {
    median(
        runs.iter()
            .zip(baseline)
            .map(|(r, base)| r.rate / base.rate)
            .collect(),
    )
}

/// [`run_once`], tried once more if it fails: on the development VM about
/// one start of tprof in a hundred (2026-12-07) finds its target gone
/// (`kill(pid, 0)` says ESRCH for a pingpong the bench has not reaped;
/// `procfs::read_stat_of_live` has the history), and one such start
/// ended a 10-minute bench. A second failure ends it, with the run's
/// stderr.
fn run_retried(paths: &Paths, tool: Tool, job_kind: Job) -> Result<Run> {
    run_once(paths, tool, job_kind).or_else(|err| {
        eprintln!("{}: {err:#}; running it again", tool.name());
        run_once(paths, tool, job_kind)
    })
}

/// Runs the workload for RUN_S seconds with `tool` attached from ~0.3 s on.
fn run_once(paths: &Paths, tool: Tool, job_kind: Job) -> Result<Run> {
    wait_for_release_helpers();
    let mut job = job_kind.spawn(paths, RUN_S)?;
    std::thread::sleep(Duration::from_millis(300));
    let tools = start_tool(paths, tool, job.id())?;
    let pids: Vec<u32> = tools.iter().map(Child::id).collect();
    let counts = read_counts(&mut job, &pids)?;
    job.wait()?;
    let mut run = Run {
        rate: rate(&counts, |c| c.round_trips),
        switches: rate(&counts, |c| c.ctxt),
        tool_cpu_ms_per_s: rate(&counts, |c| c.tool_cpu_ns) / 1e6,
        ..Run::default()
    };
    for child in tools {
        let usage = wait_rusage(child)?;
        // A tool that did not trace the run would pass for a cheap one.
        if tool.is_tprof() && !usage.succeeded {
            bail!(
                "{} failed in a run; its stderr: {}",
                tool.name(),
                paths.dir.join(TPROF_STDERR).display()
            );
        }
        run.tool_cpu_s += usage.cpu_s;
        run.tool_maxrss_kib = run.tool_maxrss_kib.max(usage.maxrss_kib);
    }
    Ok(run)
}

fn start_tool(paths: &Paths, tool: Tool, pid: u32) -> Result<Vec<Child>> {
    let secs = (RUN_S - 1).to_string();
    let pid = pid.to_string();
    let quiet = |mut c: Command| -> Result<Child> {
        let stderr = if tool.is_tprof() {
            Stdio::from(File::create(paths.dir.join(TPROF_STDERR))?)
        } else {
            Stdio::null()
        };
        c.stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("start {}", cmd::describe(&c)))
    };
    Ok(match tool {
        Tool::None => Vec::new(),
        Tool::Tprof | Tool::TprofNoStacks | Tool::TprofNoPipes | Tool::TprofAgainst => {
            let binary = match (tool, &paths.against) {
                (Tool::TprofAgainst, Some(against)) => against,
                _ => &paths.tprof,
            };
            let mut c = tprof_record(binary);
            if tool == Tool::TprofNoPipes {
                c.env("TPROF_NO_PIPES", "1");
            }
            c.args(["-p", &pid])
                .args(["-d", &format!("{secs}s"), "-o"])
                .arg(paths.dir.join("bench.tprof"));
            if tool == Tool::TprofNoStacks {
                c.arg("--no-stacks");
            }
            vec![quiet(c)?]
        }
        Tool::TprofTop => {
            // One frame a second for as long as the others record.
            let mut c = command(paths.tprof.to_str().expect("utf-8 path"));
            c.args(["top", "--batch", "-p", &pid, "-n", &secs]);
            vec![quiet(c)?]
        }
        Tool::LibbpfTools => {
            let mut off = command("offcputime");
            off.args(["-p", &pid, &secs]);
            let mut rq = command("runqlat");
            rq.args(["-p", &pid, &secs, "1"]);
            let mut bio = command("biolatency");
            bio.args([secs.as_str(), "1"]);
            vec![quiet(off)?, quiet(rq)?, quiet(bio)?]
        }
        Tool::PerfSched => {
            let mut c = command("perf");
            c.args(["sched", "record", "-o"])
                .arg(paths.dir.join("perf.data"))
                .args(["--", "sleep", &secs]);
            vec![quiet(c)?]
        }
        Tool::Tracepoints => {
            let mut c = command("perf");
            c.args(["stat", "-a", "-e", BUSY_TRACEPOINTS, "--", "sleep", &secs]);
            vec![quiet(c)?]
        }
    })
}

/// One second's line of pingpong's output, and the tools' CPU when it
/// came.
struct Count {
    t: u64,
    round_trips: u64,
    ctxt: u64,
    /// CPU nanoseconds the tools' processes had used when the line was
    /// read.
    tool_cpu_ns: u64,
}

/// The job's per-second cumulative counts, each with the CPU the
/// processes `tools` had used by then.
fn read_counts(job: &mut Child, tools: &[u32]) -> Result<Vec<Count>> {
    let stdout = job.stdout.take().context("pingpong stdout")?;
    let mut counts = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let v: serde_json::Value = serde_json::from_str(&line).context("pingpong output")?;
        let field = |name: &str| v[name].as_u64().unwrap_or(0);
        counts.push(Count {
            t: field("t"),
            round_trips: field("round_trips"),
            ctxt: field("ctxt"),
            tool_cpu_ns: tools.iter().map(|&pid| cpu_ns(pid)).sum(),
        });
    }
    Ok(counts)
}

/// CPU nanoseconds process `pid`'s live threads have used (the first
/// field of each `/proc/PID/task/TID/schedstat`): exact to the
/// nanosecond, where `/proc/PID/stat` counts 10 ms ticks. 0 once the
/// process is gone.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Per-second rate of a cumulative count over the measured seconds.
fn rate(counts: &[Count], value: impl Fn(&Count) -> u64) -> f64 {
    let at = |t: u64| counts.iter().find(|c| c.t == t).map_or(0, &value);
    let (from, to) = (MEASURE_FROM, RUN_S - 1);
    at(to).saturating_sub(at(from)) as f64 / (to - from) as f64
}

/// What a child used, and whether it exited with success.
struct Usage {
    cpu_s: f64,
    maxrss_kib: i64,
    succeeded: bool,
}

/// Waits for `child` and returns its CPU seconds, peak RSS and exit.
fn wait_rusage(child: Child) -> Result<Usage> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is a plain C struct; wait4 fills it for our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: status and usage are valid locals for wait4 to fill.
    let rc = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    if rc != pid {
        bail!("wait4({pid}): {}", std::io::Error::last_os_error());
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Ok(Usage {
        cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
        maxrss_kib: usage.ru_maxrss,
        succeeded: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
}

/// Waits (at most a minute) until no tprof release helper (`tprof
/// __release-links`, which detaches an ended run's programs) is left: on a
/// busy machine the kernel holds a new attach until a helper's detach is
/// done, and the next run's tprof would attach seconds late, or after the
/// job ended, and pass for a cheap one.
fn wait_for_release_helpers() {
    let deadline = Instant::now() + Duration::from_mins(1);
    while release_helper_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether a process runs with the helper's subcommand among its arguments
/// (the profiler's `capture::RELEASE_SUBCOMMAND`; xtask does not link the
/// profiler).
fn release_helper_running() -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
            cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == b"__release-links")
        })
    })
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

/// Event rates and drops as the job's switch rate grows; recording size;
/// `tprof report` and `tprof timeline` speed and peak memory on each
/// recording (memory as a multiple of the recording's size: they stream
/// the events, so it is the model's size that counts).
fn capacity(paths: &Paths, md: &mut String) -> Result<()> {
    md.push_str(
        "## Capacity, recording size, analysis speed\n\n\
         tprof record -p on pingpong with more pairs each row (default settings); \
         tprof CPU % is of one core over the measured seconds, start-up excluded.\n\n\
         | pairs | events/s | lost | bytes/event | recording MB/s | tprof CPU % | \
         report M events/s | report peak RSS MiB (x recording) | \
         timeline M events/s | timeline peak RSS MiB (x recording) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for pairs in [1, 2, 4, 8, 16] {
        let job = Job {
            name: "capacity",
            pairs,
            work: 0,
            pin: false,
        };
        let run = run_retried(paths, Tool::Tprof, job)?;
        let recording = paths.dir.join("bench.tprof");
        let bytes = std::fs::metadata(&recording)?.len() as f64;
        let report = timed(&paths.tprof, &["report", "--json"], &recording)?;
        let json: serde_json::Value =
            serde_json::from_slice(&report.stdout).context("tprof report --json output")?;
        let timeline_out = paths.dir.join("bench.timeline.html");
        let timeline = timed(
            &paths.tprof,
            &["timeline", "--force", "-o", timeline_out.to_str().unwrap()],
            &recording,
        )?;
        let events = json["events"].as_f64().unwrap_or(0.0);
        let lost = json["lost_events"].as_u64().unwrap_or(0);
        let duration = json["duration_s"].as_f64().unwrap_or(1.0).max(1e-9);
        let rate = |t: &Timed| events / t.secs.max(1e-9) / 1e6;
        let rss = |t: &Timed| {
            let mib = t.maxrss_kib as f64 / 1024.0;
            format!("{mib:.0} ({:.2})", mib * 1024.0 * 1024.0 / bytes.max(1.0))
        };
        md.push_str(&format!(
            "| {pairs} | {:.0} | {lost} | {:.1} | {:.2} | {:.1} | {:.2} | {} | {:.2} | {} |\n",
            events / duration,
            bytes / events.max(1.0),
            bytes / duration / 1e6,
            run.tool_cpu_ms_per_s / 10.0,
            rate(&report),
            rss(&report),
            rate(&timeline),
            rss(&timeline),
        ));
    }
    md.push('\n');
    Ok(())
}

/// One timed tprof command.
struct Timed {
    stdout: Vec<u8>,
    secs: f64,
    maxrss_kib: i64,
}

/// `tprof ARGS RECORDING`: its stdout, wall seconds and peak RSS.
fn timed(tprof: &Path, args: &[&str], recording: &Path) -> Result<Timed> {
    let started = Instant::now();
    let mut child = Command::new(tprof)
        .args(args)
        .arg(recording)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().context("stdout")?, &mut stdout)?;
    let maxrss_kib = wait_rusage(child)?.maxrss_kib;
    let secs = started.elapsed().as_secs_f64();
    Ok(Timed {
        stdout,
        secs,
        maxrss_kib,
    })
}

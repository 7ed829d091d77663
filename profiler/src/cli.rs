//! Command-line interface: clap definitions and argument validation. Turns
//! what the user typed into the options each stage takes.

use std::{
    io::IsTerminal as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};

use profiler::analysis::{
    flame,
    roles::Role,
    select::{self, Selection, Stretch},
};
use profiler::capture::{CaptureOptions, MapLimits, RecordOptions, gpu::GpuOptions, procfs};

use crate::top::{Mode, TopOptions};
use profiler::output;
use profiler::outputs::{self, Exporter, Reads};
use profiler::render::trace::html::HTML;

/// Read when `--nvml-lib` is not given (sudo drops it unless kept with
/// `sudo --preserve-env=TPROF_NVML_LIB`).
const NVML_LIB_ENV: &str = "TPROF_NVML_LIB";

#[derive(Parser, Debug)]
#[command(
    name = "tprof",
    version,
    about = "Why is my training job's CPU saturated while its GPU idles?",
    long_about = "tprof attaches to a running job (or launches one) with eBPF, records what every \
thread of it and of its child processes does — on a CPU, waiting for one, or blocked — and \
reports where the time went.",
    after_help = "Examples:\n  \
sudo tprof record -p 12345 -d 30s      attach to a running job and its DataLoader workers\n  \
sudo tprof record -- python train.py   launch a job and trace it from its first instruction\n  \
sudo tprof top -p 12345                watch a job live (q quits, r records what follows)\n  \
sudo tprof top -p 12345 --batch -n 5   five plain-text frames, one a second (--json: JSON lines)\n  \
tprof report tprof-20261202-153000.tprof --json\n  \
tprof flamegraph rec.tprof --kind offcpu -o offcpu.svg\n  \
tprof flamegraph --diff before.tprof after.tprof -o diff.svg\n  \
tprof timeline rec.tprof -o rec.json    open in Perfetto UI (ui.perfetto.dev) or chrome://tracing\n  \
tprof timeline rec.tprof -o rec.html    one page to open in any browser\n  \
tprof export rec.tprof --format perfetto -o rec.pftrace\n  \
tprof export rec.tprof --format pprof --kind cpu -o rec.pb.gz   for go tool pprof, Pyroscope, Parca\n  \
tprof merge node0.tprof node1.tprof -o job.pftrace   one trace of a multi-node job, and which rank lags"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Record a running job (-p) or a command (-- CMD), then print the report.
    Record(RecordArgs),
    /// Watch a running job (-p) or a command (-- CMD) live: a full-screen
    /// view like `top -H` and `iostat -x 1`, with why each thread waits and
    /// the leading finding; `r` records what follows to a file.
    #[command(after_help = TOP_KEYS)]
    Top(TopArgs),
    /// Print the report of a recording.
    Report(ReportArgs),
    /// Draw a flamegraph SVG (or print folded stacks) of a recording.
    Flamegraph(FlamegraphArgs),
    /// Write the timeline of a recording: a Perfetto trace, trace event
    /// JSON for chrome://tracing, or a self-contained HTML page.
    Timeline(TimelineArgs),
    /// Convert a recording for other tools: a Perfetto trace of every slice,
    /// a pprof profile (go tool pprof, Pyroscope, Parca, Grafana), or any
    /// other of tprof's outputs.
    Export(ExportArgs),
    /// Merge the recordings of a multi-node job (one per node or rank) into
    /// one Perfetto trace, and report which rank holds the others back.
    Merge(MergeArgs),
}

#[derive(Args, Debug)]
pub(crate) struct RecordArgs {
    /// Stop after this long (e.g. 30s, 500ms, 2m); default: until Ctrl-C or
    /// until the targets exit. A command tprof launched is stopped then too
    /// (SIGTERM, see --kill-after).
    #[arg(short, long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Write the recording here [default: tprof-YYYYmmdd-HHMMSS.tprof].
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Do not print the report after recording.
    #[arg(long)]
    pub no_report: bool,
    /// Do not write the cpu and wall flamegraphs next to the recording.
    #[arg(long)]
    pub no_flamegraphs: bool,
    /// Do not write the timelines (.timeline.html and .timeline.json) next
    /// to the recording.
    #[arg(long)]
    pub no_timeline: bool,
    #[command(flatten)]
    pub capture: CaptureArgs,
}

/// What to capture and how: the targets and the kernel side, shared by
/// `record` and `top`.
#[derive(Args, Debug)]
pub(crate) struct CaptureArgs {
    /// Attach to this running process and all its descendants (repeatable).
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// The NVML library to load [default: $TPROF_NVML_LIB, else
    /// libnvidia-ml.so.1 from the loader's path].
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// Do not sample the GPUs.
    #[arg(long, conflicts_with_all = ["nvml_lib", "gpu_hz"])]
    pub no_gpu: bool,
    /// Rate for polling what the GPU driver does not buffer itself
    /// (utilization where the driver has no sample buffer, memory used).
    #[arg(long, value_name = "HZ", default_value_t = 20.0, value_parser = parse_hz)]
    pub gpu_hz: f64,
    /// On-CPU stack sampling frequency in Hz (cpu-clock); a preempted
    /// thread's stacks are taken about as often.
    #[arg(long, value_name = "HZ", default_value_t = profiler_ebpf::DEFAULT_SAMPLE_HZ,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub hz: u64,
    /// Record no stacks: no sampling, no off-CPU stacks, no flamegraphs.
    #[arg(long)]
    pub no_stacks: bool,
    /// Most bytes of each thread's user stack copied at a sample or a new
    /// off-CPU site, then unwound with the binaries' CFI: 4k to 64k, in
    /// steps of 4k. Deeper stacks are cut there, under a `[truncated]` frame
    /// (the report counts them); a copy stops where the stack does.
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = parse_stack_size,
          conflicts_with = "no_stacks")]
    pub stack_size: u32,
    /// Leave Python frames out of the stacks (no walk of CPython's frame
    /// chain; native frames only).
    #[arg(long, conflicts_with = "no_stacks")]
    pub no_python_frames: bool,
    /// Do not trace CUDA runtime calls (uprobes on the libcudart the job
    /// loads; each traced call costs the job one or two uprobe traps).
    #[arg(long)]
    pub no_cuda: bool,
    /// Size of the kernel's tracked-thread map (default 65536). Hidden: for
    /// tests that fill the tracked set with a modest fork bomb.
    #[arg(long, hide = true, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(profiler_ebpf::MAX_TRACKED_TIDS)))]
    pub max_tracked_threads: Option<u32>,
    /// Size of the kernel's event ring buffer in bytes, a power of two of
    /// at least the page size (default 16 MiB). Hidden: for tests that
    /// overflow it.
    #[arg(long, hide = true, value_name = "BYTES", value_parser = parse_ring_buffer_size)]
    pub ring_buffer_size: Option<u32>,
    /// Entries of the kernel's maps of things in flight: block requests,
    /// tracked bios and CUDA calls (default 16384 each). Hidden: for tests
    /// that fill them.
    #[arg(long, hide = true, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(profiler_ebpf::MAX_REQUESTS)))]
    pub max_in_flight: Option<u32>,
    /// Age at which a block request or tracked bio still in flight is taken
    /// for one whose end the kernel will not report, dropped and counted
    /// (default 60s). Hidden: for tests that expire entries.
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_duration)]
    pub expire_in_flight_after: Option<Duration>,
    /// When tprof stops before the command does (Ctrl-C, a signal to
    /// tprof, --duration, q in top), how long the command's process group
    /// gets to exit after tprof passes the stop on to it (SIGINT, SIGTERM
    /// or SIGHUP, as tprof got; SIGTERM for --duration, SIGINT for q),
    /// before SIGKILL. With -- CMD only: -p targets are left running.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration,
          conflicts_with = "pids")]
    pub kill_after: Duration,
    /// The command to launch and trace (after --). It runs in a process
    /// group of its own, so a Ctrl-C reaches it once, through tprof; it
    /// cannot read the terminal (trace a job that does with -p).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub(crate) struct TopArgs {
    /// How often the view is redrawn: each frame shows this last stretch
    /// of time (e.g. 1s, 500ms, 2s).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// How far back the leading finding and the roles look; they are
    /// found again once a window has passed (e.g. 10s, 30s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub window: Duration,
    /// Print one plain-text frame per interval instead of the full-screen
    /// view (for scripts and CI logs; also when stdout is not a terminal).
    #[arg(short, long)]
    pub batch: bool,
    /// Stop after this many frames.
    #[arg(short = 'n', long = "iterations", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frames: Option<u64>,
    /// Print each frame as one JSON object per line (docs/json.md); implies
    /// --batch.
    #[arg(long)]
    pub json: bool,
    /// Where `r` writes its recording of what follows [default:
    /// tprof-YYYYmmdd-HHMMSS.tprof].
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Let `r` overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub capture: CaptureArgs,
}

#[derive(Args, Debug)]
pub(crate) struct ReportArgs {
    /// A recording made by `tprof record`.
    pub path: PathBuf,
    /// Print the report as JSON (the contract in docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct FlamegraphArgs {
    /// A recording made by `tprof record` (with --diff: the BEFORE one).
    pub path: PathBuf,
    /// With --diff: the AFTER recording, compared against PATH.
    #[arg(value_name = "AFTER", requires = "diff")]
    pub after: Option<PathBuf>,
    /// Differential flamegraph of PATH (before) and AFTER: red grew, blue shrank.
    #[arg(long, requires = "after")]
    pub diff: bool,
    /// cpu: on-CPU samples; offcpu: time off CPU by reason; wall: both, in time
    /// (each thread's on-CPU samples share out its scheduled time on a CPU).
    #[arg(long, value_enum, default_value_t = FlameKind::Cpu)]
    pub kind: FlameKind,
    /// Write the SVG here [default: PATH.KIND.svg; with --diff:
    /// AFTER.KIND.diff.svg].
    #[arg(short, long, value_name = "FILE.svg")]
    pub output: Option<PathBuf>,
    /// Print folded stacks (`frame;frame count`) to stdout instead of an SVG.
    #[arg(long, conflicts_with_all = ["output", "diff"])]
    pub folded: bool,
    /// Only these processes (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only these threads (repeatable).
    #[arg(long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// Split Python frames by line: `function (file.py:42)` rather than
    /// `function (file.py)`.
    #[arg(long)]
    pub lines: bool,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Keep the interpreter's own frames between Python frames (by default
    /// a Python stack reads as py-spy shows it: Python functions and the
    /// native code they call, without CPython's eval loop in between).
    #[arg(long)]
    pub interpreter_frames: bool,
    /// Overwrite the SVG if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Which part of a recording to show, cut the way the report's step
/// anatomy cuts time.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct SelectArgs {
    /// Which stretch of the run: startup (before the first step: imports,
    /// worker start), steady (the steps), teardown (after the last step), or
    /// all [default: steady when the recording has steps, else all; for
    /// timelines, all].
    #[arg(long, value_enum, value_name = "PHASE", conflicts_with_all = ["steps", "slowest"])]
    pub phase: Option<PhaseArg>,
    /// Only steps A to B (1-based, as the report numbers them), e.g. 10-20
    /// or 7.
    #[arg(long, value_name = "A-B", value_parser = parse_steps, conflicts_with = "slowest")]
    pub steps: Option<(usize, usize)>,
    /// Only the N slowest steps.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub slowest: Option<u64>,
    /// Only threads of this role (repeatable): trainer, data_worker,
    /// pin_memory, pool, helper, other.
    #[arg(long = "role", value_name = "ROLE", value_parser = parse_role)]
    pub roles: Vec<Role>,
}

impl SelectArgs {
    pub(crate) fn selection(&self) -> Selection {
        Selection {
            stretch: self.phase.map(PhaseArg::stretch),
            steps: self.steps,
            slowest: self.slowest.map(|n| n as usize),
            roles: self.roles.clone(),
        }
    }
}

/// `--phase`: clap's face of [`Stretch`].
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PhaseArg {
    Startup,
    Steady,
    Teardown,
    All,
}

impl PhaseArg {
    fn stretch(self) -> Stretch {
        match self {
            PhaseArg::Startup => Stretch::Startup,
            PhaseArg::Steady => Stretch::Steady,
            PhaseArg::Teardown => Stretch::Teardown,
            PhaseArg::All => Stretch::All,
        }
    }
}

/// `A-B` or `A`: 1-based step numbers, A ≤ B.
fn parse_steps(text: &str) -> Result<(usize, usize), String> {
    let number = |t: &str| {
        t.trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("`{text}` is not a step range (try 10-20, or 7 for one step)"))
    };
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (number(a)?, number(b)?),
        None => (number(text)?, number(text)?),
    };
    if a > b {
        return Err(format!(
            "`{text}`: the first step comes after the last (try {b}-{a})"
        ));
    }
    Ok((a, b))
}

fn parse_role(text: &str) -> Result<Role, String> {
    select::role_named(text).ok_or_else(|| {
        format!("`{text}` is not a role: trainer, data_worker, pin_memory, pool, helper or other")
    })
}

#[derive(Args, Debug)]
pub(crate) struct TimelineArgs {
    /// A recording made by `tprof record`.
    pub path: PathBuf,
    /// Write the timeline here; the extension picks the format: .pftrace
    /// for Perfetto UI and trace_processor, .json for chrome://tracing (and
    /// Perfetto UI), .html for a page that opens in any browser [default:
    /// PATH.timeline.html].
    #[arg(short, long, value_name = "FILE.pftrace|FILE.json|FILE.html")]
    pub output: Option<PathBuf>,
    /// Merge each thread's slices shorter than this with their neighbours
    /// (e.g. 50us, 1ms; 1ns merges nothing); for .json and .html raised
    /// further when the timeline would be too large for a viewer to open
    /// (a .pftrace is never capped).
    #[arg(long, value_name = "DURATION", default_value = "50us", value_parser = parse_duration)]
    pub min_slice: Duration,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Overwrite the output if it exists.
    #[arg(long)]
    pub force: bool,
}

impl TimelineArgs {
    /// Where to write, and in which format.
    pub(crate) fn output_and_format(&self) -> Result<(PathBuf, &'static Exporter)> {
        let out = self
            .output
            .clone()
            .unwrap_or_else(|| timeline_path(&self.path, &HTML));
        let format = outputs::timeline_for(&out)?;
        Ok((out, format))
    }
}

#[derive(Args, Debug)]
pub(crate) struct ExportArgs {
    /// A recording made by `tprof record`.
    pub path: PathBuf,
    /// The format to write.
    #[arg(long, value_parser = export_format())]
    pub format: &'static Exporter,
    /// Stacks (pprof, folded, flamegraph): cpu (on-CPU samples), offcpu
    /// (time off CPU by reason) or wall (both).
    #[arg(long, value_enum, default_value_t = FlameKind::Cpu)]
    pub kind: FlameKind,
    /// Write it here [default: PATH.EXT for a timeline, PATH.KIND.EXT for
    /// stacks, PATH.report.EXT for the report: PATH.pftrace,
    /// PATH.cpu.pb.gz, PATH.report.json].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Stacks: only these processes (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Stacks: only these threads (repeatable).
    #[arg(long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Stacks: keep the interpreter's own frames between Python frames.
    #[arg(long)]
    pub interpreter_frames: bool,
    /// Overwrite the output if it exists.
    #[arg(long)]
    pub force: bool,
}

/// `--format`: the name of any exporter of the list that reads one
/// recording, each with what it is, its extension and what opens it. A
/// format added to the list is a value here with nothing else to change.
fn export_format() -> impl clap::builder::TypedValueParser<Value = &'static Exporter> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};
    let names = outputs::EXPORTERS
        .iter()
        .filter(|e| !e.reads_two())
        .map(|e| {
            let help = format!("{} [.{}: {}]", e.about, e.extension(), e.opens_in);
            PossibleValue::new(e.name).help(help)
        });
    PossibleValuesParser::new(names)
        .map(|name| outputs::exporter(&name).expect("a name of the list"))
}

impl ExportArgs {
    pub(crate) fn output_path(&self) -> PathBuf {
        self.output.clone().unwrap_or_else(|| {
            // What it shows goes in the name where the extension alone would
            // not tell two outputs apart (the report's JSON and a Chrome
            // trace, two kinds of stacks).
            let mut name = self.path.as_os_str().to_owned();
            match self.format.reads {
                Reads::Stacks(_) | Reads::TwoRecordings(_) => {
                    name.push(format!(".{}", flame::FlameKind::from(self.kind).name()));
                }
                Reads::Summary(_) => name.push(".report"),
                Reads::Timeline { .. } => {}
            }
            name.push(format!(".{}", self.format.extension()));
            PathBuf::from(name)
        })
    }

    pub(crate) fn filter(&self) -> flame::Filter {
        flame::Filter {
            pids: self.pids.clone(),
            tids: self.tids.clone(),
            // Python frames by function, as the flamegraphs show them.
            lines: false,
            interpreter_frames: self.interpreter_frames,
            ..flame::Filter::default()
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct MergeArgs {
    /// The recordings of one job, one per node or rank (at least two).
    #[arg(required = true, num_args = 2.., value_name = "RECORDING")]
    pub paths: Vec<PathBuf>,
    /// Write the merged Perfetto trace here [default: none, report only].
    #[arg(short, long, value_name = "FILE.pftrace")]
    pub output: Option<PathBuf>,
    /// Print the cross-node report as JSON (docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Overwrite the output if it exists.
    #[arg(long)]
    pub force: bool,
}

/// `REC.timeline.EXT` next to the recording `REC`.
pub(crate) fn timeline_path(recording: &Path, format: &Exporter) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(format!(".timeline.{}", format.extension()));
    PathBuf::from(name)
}

/// Which flamegraph: clap's face of [`profiler::analysis::flame::FlameKind`].
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlameKind {
    Cpu,
    Offcpu,
    Wall,
}

impl From<FlameKind> for flame::FlameKind {
    fn from(kind: FlameKind) -> flame::FlameKind {
        match kind {
            FlameKind::Cpu => flame::FlameKind::Cpu,
            FlameKind::Offcpu => flame::FlameKind::OffCpu,
            FlameKind::Wall => flame::FlameKind::Wall,
        }
    }
}

impl FlamegraphArgs {
    pub(crate) fn filter(&self) -> flame::Filter {
        flame::Filter {
            pids: self.pids.clone(),
            tids: self.tids.clone(),
            lines: self.lines,
            interpreter_frames: self.interpreter_frames,
            ..flame::Filter::default()
        }
    }
}

/// What `top`'s keys do, under its --help.
const TOP_KEYS: &str = "Keys:\n  \
q, Esc, Ctrl-C  quit (detaches: the programs come off, -p targets keep running)\n  \
s, S            sort the threads by the next (previous) column\n  \
t w m p h o     show or hide the threads of the trainer, data workers, pin-memory, pools, helpers, others\n  \
space           pause the view (capture goes on)\n  \
r               start or stop writing a recording of what follows (-o PATH; tprof report reads it)\n\n\
top also ends when the targets exit (-p) or the command does (-- CMD), when its terminal closes, \
and on SIGINT, SIGTERM or SIGHUP; a command it launched is stopped with it (SIGINT on q, else \
the signal top got; SIGKILL after --kill-after).";

impl RecordArgs {
    /// Checks the combination of arguments and builds capture's options.
    pub(crate) fn to_options(&self) -> Result<RecordOptions> {
        Ok(RecordOptions {
            capture: self.capture.to_options("record", self.duration)?,
            output: self.output.clone().unwrap_or_else(output::default_path),
            force: self.force,
        })
    }
}

impl TopArgs {
    /// Checks the combination of arguments and builds the view's options.
    pub(crate) fn to_options(&self) -> Result<TopOptions> {
        if self.interval < MIN_TOP_INTERVAL {
            bail!(
                "--interval {:?} is too short: a frame needs at least {:?} of events",
                self.interval,
                MIN_TOP_INTERVAL
            );
        }
        if self.window < self.interval || self.window > MAX_TOP_WINDOW {
            bail!(
                "--window must be between the interval ({:?}) and {} s",
                self.interval,
                MAX_TOP_WINDOW.as_secs()
            );
        }
        let mode = if self.batch || self.json || !std::io::stdout().is_terminal() {
            Mode::Batch { json: self.json }
        } else {
            Mode::Screen
        };
        Ok(TopOptions {
            capture: self.capture.to_options("watch", None)?,
            interval: self.interval,
            window: self.window,
            mode,
            frames: self.frames,
            output: self.output.clone(),
            force: self.force,
        })
    }
}

/// Shorter frames would hold two drains' worth of events or fewer.
const MIN_TOP_INTERVAL: Duration = Duration::from_millis(200);
/// The window's events are held in memory.
const MAX_TOP_WINDOW: Duration = Duration::from_mins(5);

impl CaptureArgs {
    /// Checks the targets and builds capture's options; `verb` (record,
    /// watch) says what there was nothing to do.
    fn to_options(&self, verb: &str, duration: Option<Duration>) -> Result<CaptureOptions> {
        match (self.pids.is_empty(), self.command.is_empty()) {
            (true, true) => {
                bail!("nothing to {verb}: give -p PID for a running job or -- CMD to launch one")
            }
            (false, false) => bail!("give either -p PID or -- CMD, not both"),
            _ => {}
        }
        Ok(CaptureOptions {
            pids: self.pids.clone(),
            command: self.command.clone(),
            duration,
            gpu: GpuOptions {
                enabled: !self.no_gpu,
                library: self
                    .nvml_lib
                    .clone()
                    .or_else(|| std::env::var_os(NVML_LIB_ENV).map(PathBuf::from)),
                hz: self.gpu_hz,
            },
            sample_hz: (!self.no_stacks).then_some(self.hz),
            stack_copy_bytes: self.stack_size,
            python_frames: !self.no_python_frames,
            cuda: !self.no_cuda,
            limits: {
                let defaults = MapLimits::default();
                MapLimits {
                    tracked_threads: self.max_tracked_threads.unwrap_or(defaults.tracked_threads),
                    ring_buffer_bytes: self.ring_buffer_size.unwrap_or(defaults.ring_buffer_bytes),
                    in_flight: self.max_in_flight.unwrap_or(defaults.in_flight),
                    in_flight_expiry: self
                        .expire_in_flight_after
                        .unwrap_or(defaults.in_flight_expiry),
                }
            },
            kill_after: self.kill_after,
        })
    }
}

/// A ring buffer size: the kernel wants a power of two that is a multiple
/// of the page size.
fn parse_ring_buffer_size(text: &str) -> Result<u32, String> {
    let bytes: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a size in bytes (try 65536)"))?;
    let page = procfs::page_size();
    if !bytes.is_power_of_two() || bytes < page {
        return Err(format!(
            "ring buffer size {bytes} must be a power of two of at least {page} bytes"
        ));
    }
    Ok(bytes)
}

/// A stack copy size: `16k`, `16KiB` or `16384`, a multiple of 4 KiB (the
/// kernel copies pages) up to what its buffers hold.
fn parse_stack_size(text: &str) -> Result<u32, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = match lower
        .strip_suffix("kib")
        .or_else(|| lower.strip_suffix('k'))
    {
        Some(kib) => (kib, 1024),
        None => (lower.as_str(), 1),
    };
    let page = profiler_ebpf::STACK_PAGE;
    let max = profiler_ebpf::MAX_STACK_COPY_BYTES;
    let bytes = number
        .trim()
        .parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("`{text}` is not a size (try 16k or 16384)"))?;
    if bytes < page || bytes > max || !bytes.is_multiple_of(page) {
        return Err(format!(
            "stack size {text} must be a multiple of 4k from 4k to {}k",
            max / 1024
        ));
    }
    Ok(bytes)
}

/// A polling rate: positive, and no faster than NVML can answer.
fn parse_hz(text: &str) -> Result<f64, String> {
    let hz: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a rate in Hz (try 20)"))?;
    if !(hz > 0.0 && hz <= 1000.0) {
        return Err(format!("rate `{text}` must be above 0 and at most 1000 Hz"));
    }
    Ok(hz)
}

/// `10ns`, `50us`, `500ms`, `30s`, `2m`, `1h`, or a bare number of seconds (`1.5`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 30s, 500ms or 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}` (use ns, us, ms, s, m or h)"
            ));
        }
    };
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(format!("duration `{text}` must be positive"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::render::pprof::PPROF;
    use profiler::render::trace::{chrome::CHROME, perfetto::PERFETTO};

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse_duration("1ns").unwrap(), Duration::from_nanos(1));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_mins(2));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn record_needs_exactly_one_kind_of_target() {
        let args = |pids: Vec<u32>, command: Vec<String>| RecordArgs {
            duration: None,
            output: Some("x".into()),
            force: false,
            no_report: false,
            no_flamegraphs: false,
            no_timeline: false,
            capture: CaptureArgs {
                pids,
                nvml_lib: None,
                no_gpu: false,
                gpu_hz: 20.0,
                hz: 99,
                no_stacks: false,
                stack_size: 64 << 10,
                no_python_frames: false,
                no_cuda: false,
                max_tracked_threads: None,
                ring_buffer_size: None,
                max_in_flight: None,
                expire_in_flight_after: None,
                kill_after: Duration::from_secs(5),
                command,
            },
        };
        assert!(args(vec![], vec![]).to_options().is_err());
        assert!(args(vec![1], vec!["ls".into()]).to_options().is_err());
        assert!(args(vec![1], vec![]).to_options().is_ok());
    }

    #[test]
    fn parses_stack_sizes() {
        assert_eq!(parse_stack_size("16k"), Ok(16384));
        assert_eq!(parse_stack_size("8KiB"), Ok(8192));
        assert_eq!(parse_stack_size("32768"), Ok(32768));
        assert_eq!(parse_stack_size("4K"), Ok(4096));
        assert_eq!(parse_stack_size("64k"), Ok(65536));
        for bad in ["0", "2k", "6000", "68k", "1m", "big", "-4k"] {
            assert!(parse_stack_size(bad).is_err(), "{bad}");
        }
    }

    /// `--kill-after` is for a launched command: refused with `-p`, 5 s
    /// unless given.
    #[test]
    fn kill_after_goes_with_a_command() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command);
        assert!(parse(&["tprof", "record", "-p", "1", "--kill-after", "1s"]).is_err());
        let Ok(Command::Record(given)) =
            parse(&["tprof", "record", "--kill-after", "500ms", "--", "ls"])
        else {
            panic!("record --kill-after 500ms -- ls did not parse");
        };
        assert_eq!(given.capture.kill_after, Duration::from_millis(500));
        let Ok(Command::Record(default)) = parse(&["tprof", "record", "--", "ls"]) else {
            panic!("record -- ls did not parse");
        };
        assert_eq!(
            default.to_options().unwrap().capture.kill_after,
            Duration::from_secs(5)
        );
    }

    /// `top` takes record's targets; its interval and window are checked,
    /// and --json is a batch of JSON lines.
    #[test]
    fn top_checks_its_interval_window_and_targets() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|cli| cli.command) {
            Ok(Command::Top(top)) => top.to_options(),
            Ok(_) => panic!("not top"),
            Err(e) => Err(anyhow::anyhow!("{e}")),
        };
        let ok = parse(&["tprof", "top", "-p", "1", "--json", "-n", "3"]).unwrap();
        assert_eq!(ok.mode, Mode::Batch { json: true });
        assert_eq!((ok.frames, ok.interval), (Some(3), Duration::from_secs(1)));
        assert_eq!(ok.window, Duration::from_secs(10));
        let err = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(err(&["tprof", "top"]).contains("nothing to watch"));
        assert!(err(&["tprof", "top", "-p", "1", "--interval", "50ms"]).contains("too short"));
        assert!(err(&["tprof", "top", "-p", "1", "--window", "500ms"]).contains("--window"));
        assert!(parse(&["tprof", "top", "-b", "--", "python", "x.py"]).is_ok());
    }

    #[test]
    fn step_ranges() {
        assert_eq!(parse_steps("10-20"), Ok((10, 20)));
        assert_eq!(parse_steps("7"), Ok((7, 7)));
        assert!(parse_steps("20-10").unwrap_err().contains("try 10-20"));
        assert!(parse_steps("0-3").is_err());
        assert!(parse_steps("a-b").is_err());
        assert!(parse_role("worker").unwrap_err().contains("data_worker"));
    }

    #[test]
    fn default_paths() {
        assert_eq!(
            timeline_path(Path::new("d/r.tprof"), &CHROME),
            PathBuf::from("d/r.tprof.timeline.json")
        );
        let export = |format, kind| ExportArgs {
            path: "r.tprof".into(),
            format,
            kind,
            output: None,
            pids: vec![],
            tids: vec![],
            select: SelectArgs::default(),
            interpreter_frames: false,
            force: false,
        };
        let perfetto = export(&PERFETTO, FlameKind::Cpu);
        assert_eq!(perfetto.output_path(), PathBuf::from("r.tprof.pftrace"));
        let pprof = export(&PPROF, FlameKind::Offcpu);
        assert_eq!(pprof.output_path(), PathBuf::from("r.tprof.offcpu.pb.gz"));
        let json = export(&profiler::render::json::JSON, FlameKind::Cpu);
        assert_eq!(json.output_path(), PathBuf::from("r.tprof.report.json"));
        assert_eq!(
            export(&CHROME, FlameKind::Cpu).output_path(),
            PathBuf::from("r.tprof.json")
        );
        // No two formats write to one default file.
        let mut paths = Vec::new();
        for format in outputs::EXPORTERS.iter().filter(|e| !e.reads_two()) {
            for kind in [FlameKind::Cpu, FlameKind::Offcpu, FlameKind::Wall] {
                let path = export(format, kind).output_path();
                let again = paths
                    .iter()
                    .any(|(p, f): &(PathBuf, &str)| *p == path && *f != format.name);
                assert!(
                    !again,
                    "{} and another format write {}",
                    format.name,
                    path.display()
                );
                paths.push((path, format.name));
            }
        }
    }

    #[test]
    fn export_formats_are_the_lists() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command);
        let format = |name: &str| match parse(&["tprof", "export", "r.tprof", "--format", name]) {
            Ok(Command::Export(args)) => Ok(args.format.name),
            Ok(_) => panic!("not an export"),
            Err(e) => Err(e.kind()),
        };
        assert_eq!(format("perfetto"), Ok("perfetto"));
        assert_eq!(format("pprof"), Ok("pprof"));
        assert_eq!(format("html"), Ok("html"));
        let refused = Err(clap::error::ErrorKind::InvalidValue);
        assert_eq!(format("svg"), refused);
        assert_eq!(
            format("flamegraph-diff"),
            refused,
            "it needs two recordings"
        );
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}

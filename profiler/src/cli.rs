//! Command-line interface: clap definitions and argument validation. Turns
//! what the user typed into the options each stage takes.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};

use profiler::analysis::flame;
use profiler::capture::{MapLimits, RecordOptions, gpu::GpuOptions, procfs};
use profiler::output;
pub use profiler::outputs::TimelineFormat;

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
tprof report tprof-20261202-153000.tprof --json\n  \
tprof flamegraph rec.tprof --kind offcpu -o offcpu.svg\n  \
tprof flamegraph --diff before.tprof after.tprof -o diff.svg\n  \
tprof timeline rec.tprof -o rec.json    open in Perfetto UI (ui.perfetto.dev) or chrome://tracing\n  \
tprof timeline rec.tprof -o rec.html    one page to open in any browser"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Record a running job (-p) or a command (-- CMD), then print the report.
    Record(RecordArgs),
    /// Print the report of a recording.
    Report(ReportArgs),
    /// Draw a flamegraph SVG (or print folded stacks) of a recording.
    Flamegraph(FlamegraphArgs),
    /// Write the timeline of a recording: trace event JSON for Perfetto UI
    /// and chrome://tracing, or a self-contained HTML page.
    Timeline(TimelineArgs),
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Attach to this running process and all its descendants (repeatable).
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Stop after this long (e.g. 30s, 500ms, 2m); default: until Ctrl-C or
    /// until the targets exit.
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
    /// On-CPU stack sampling frequency in Hz (cpu-clock).
    #[arg(long, value_name = "HZ", default_value_t = profiler_ebpf::DEFAULT_SAMPLE_HZ,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub hz: u64,
    /// Record no stacks: no sampling, no off-CPU stacks, no flamegraphs.
    #[arg(long)]
    pub no_stacks: bool,
    /// Leave Python frames out of the stacks (no walk of CPython's frame
    /// chain; native frames only).
    #[arg(long, conflicts_with = "no_stacks")]
    pub no_python_frames: bool,
    /// Do not write the cpu and wall flamegraphs next to the recording.
    #[arg(long)]
    pub no_flamegraphs: bool,
    /// Do not write the timelines (.timeline.html and .timeline.json) next
    /// to the recording.
    #[arg(long)]
    pub no_timeline: bool,
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
    /// The command to launch and trace (after --).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A recording made by `tprof record`.
    pub path: PathBuf,
    /// Print the report as JSON (the contract in docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct FlamegraphArgs {
    /// A recording made by `tprof record` (with --diff: the BEFORE one).
    pub path: PathBuf,
    /// With --diff: the AFTER recording, compared against PATH.
    #[arg(value_name = "AFTER", requires = "diff")]
    pub after: Option<PathBuf>,
    /// Differential flamegraph of PATH (before) and AFTER: red grew, blue shrank.
    #[arg(long, requires = "after")]
    pub diff: bool,
    /// cpu: on-CPU samples; offcpu: time off CPU by reason; wall: both, in time.
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
    /// Overwrite the SVG if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct TimelineArgs {
    /// A recording made by `tprof record`.
    pub path: PathBuf,
    /// Write the timeline here; the extension picks the format: .json for
    /// Perfetto UI and chrome://tracing, .html for a page that opens in any
    /// browser [default: PATH.timeline.html].
    #[arg(short, long, value_name = "FILE.json|FILE.html")]
    pub output: Option<PathBuf>,
    /// Merge each thread's slices shorter than this with their neighbours
    /// (e.g. 50us, 1ms; 1ns merges nothing); raised further when the
    /// timeline would be too large for a viewer to open.
    #[arg(long, value_name = "DURATION", default_value = "50us", value_parser = parse_duration)]
    pub min_slice: Duration,
    /// Overwrite the output if it exists.
    #[arg(long)]
    pub force: bool,
}

impl TimelineArgs {
    /// Where to write, and in which format.
    pub fn output_and_format(&self) -> Result<(PathBuf, TimelineFormat)> {
        let out = self
            .output
            .clone()
            .unwrap_or_else(|| timeline_path(&self.path, TimelineFormat::Html));
        let format = TimelineFormat::of(&out)?;
        Ok((out, format))
    }
}

/// `REC.timeline.EXT` next to the recording `REC`.
pub fn timeline_path(recording: &Path, format: TimelineFormat) -> PathBuf {
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
    pub fn filter(&self) -> flame::Filter {
        flame::Filter {
            pids: self.pids.clone(),
            tids: self.tids.clone(),
            lines: self.lines,
        }
    }
}

impl RecordArgs {
    /// Checks the combination of arguments and builds capture's options.
    pub fn to_options(&self) -> Result<RecordOptions> {
        match (self.pids.is_empty(), self.command.is_empty()) {
            (true, true) => {
                bail!("nothing to record: give -p PID for a running job or -- CMD to launch one")
            }
            (false, false) => bail!("give either -p PID or -- CMD, not both"),
            _ => {}
        }
        Ok(RecordOptions {
            pids: self.pids.clone(),
            command: self.command.clone(),
            duration: self.duration,
            output: self.output.clone().unwrap_or_else(output::default_path),
            force: self.force,
            gpu: GpuOptions {
                enabled: !self.no_gpu,
                library: self
                    .nvml_lib
                    .clone()
                    .or_else(|| std::env::var_os(NVML_LIB_ENV).map(PathBuf::from)),
                hz: self.gpu_hz,
            },
            sample_hz: (!self.no_stacks).then_some(self.hz),
            python_frames: !self.no_python_frames,
            cuda: !self.no_cuda,
            limits: {
                let defaults = MapLimits::default();
                MapLimits {
                    tracked_threads: self.max_tracked_threads.unwrap_or(defaults.tracked_threads),
                    ring_buffer_bytes: self.ring_buffer_size.unwrap_or(defaults.ring_buffer_bytes),
                }
            },
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
pub fn parse_duration(text: &str) -> Result<Duration, String> {
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

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse_duration("1ns").unwrap(), Duration::from_nanos(1));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn record_needs_exactly_one_kind_of_target() {
        let args = |pids: Vec<u32>, command: Vec<String>| RecordArgs {
            pids,
            duration: None,
            output: Some("x".into()),
            force: false,
            no_report: false,
            nvml_lib: None,
            no_gpu: false,
            gpu_hz: 20.0,
            hz: 99,
            no_stacks: false,
            no_python_frames: false,
            no_flamegraphs: false,
            no_timeline: false,
            no_cuda: false,
            max_tracked_threads: None,
            ring_buffer_size: None,
            command,
        };
        assert!(args(vec![], vec![]).to_options().is_err());
        assert!(args(vec![1], vec!["ls".into()]).to_options().is_err());
        assert!(args(vec![1], vec![]).to_options().is_ok());
    }

    #[test]
    fn timeline_format_from_the_extension() {
        let format = |p: &str| TimelineFormat::of(Path::new(p)).ok();
        assert_eq!(format("a.json"), Some(TimelineFormat::Json));
        assert_eq!(format("a.HTML"), Some(TimelineFormat::Html));
        assert_eq!(format("a.htm"), Some(TimelineFormat::Html));
        assert_eq!(format("a.svg"), None);
        assert_eq!(format("a"), None);
        assert_eq!(
            timeline_path(Path::new("d/r.tprof"), TimelineFormat::Json),
            PathBuf::from("d/r.tprof.timeline.json")
        );
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}

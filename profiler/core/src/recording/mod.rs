//! The recording file: one versioned format, shared by the writer (capture)
//! and every reader (report, flamegraph, timeline). docs/recording-format.md
//! describes it byte by byte; that page and [`FORMAT_VERSION`] change together.
//!
//! Layout: an 16-byte preamble ([`MAGIC`], version, reserved), then records
//! `[kind: u32 LE][len: u32 LE][payload: len bytes]` to the end of the file.
//! Metadata payloads are JSON (serde types below); event payloads are the
//! kernel ABI structs of `profiler_ebpf`, back to back, little endian, each
//! starting with a header that gives its length. A reader skips (and
//! counts) record and event kinds it does not know, so adding one needs no
//! new version. The writer appends and flushes as it goes, so a killed
//! recording is a readable prefix; a [`Footer`] record marks a recording
//! that ended normally.
//!
//! Architecture invariant: nothing here touches the kernel or the live
//! system; [`reader::parse`] takes bytes and returns values.

pub mod events;
pub mod reader;
pub mod stacks;
pub mod writer;

use serde::{Deserialize, Serialize};

pub use events::Event;
pub use reader::{Recording, read};
pub use stacks::{
    Frame, FrameBatch, FrameKind, StackBatch, StackDictionary, StackKind, StackSample, StackTable,
};
pub use writer::Writer;

/// First bytes of every recording.
pub const MAGIC: [u8; 8] = *b"TPROFREC";
/// Bump on any change a reader of the previous version would misread: a
/// changed ABI struct, a renamed or retyped JSON field, a changed meaning.
/// (Since version 4 a new record or event kind is not one: readers skip
/// kinds they do not know.) See the changelog in docs/recording-format.md.
pub const FORMAT_VERSION: u32 = 4;
/// Oldest version this reader still reads: version 2 only added the STACKS
/// record and version 3 the CUDA record and CUDA call events, so a version
/// 1 file reads as a recording without stacks, and 1 and 2 as recordings in
/// which no CUDA library was looked for. Versions 1 to 3 are framed by
/// kind (see [`events::Framing`]).
pub const OLDEST_READABLE_VERSION: u32 = 1;
/// Size of the preamble: magic, version, reserved u32.
pub const PREAMBLE_LEN: usize = 16;
/// Largest record payload a reader accepts; a larger length means corruption.
pub const MAX_RECORD_LEN: u32 = 64 << 20;

/// Record kinds (the `kind` word before each payload).
pub mod record {
    pub const HEADER: u32 = 1;
    pub const PROCESS: u32 = 2;
    pub const THREAD: u32 = 3;
    pub const EVENTS: u32 = 4;
    pub const SYSTEM: u32 = 5;
    pub const LOST: u32 = 6;
    pub const FOOTER: u32 = 7;
    /// GPU sampling's setup ([`super::GpuInfo`]): the GPUs found and the
    /// series each lacks, or why there is no GPU data at all. At most one,
    /// written after the header.
    pub const GPU_INFO: u32 = 8;
    /// A batch of one GPU series' samples ([`super::GpuSeries`]), already
    /// on CLOCK_MONOTONIC. A series spans many records; readers concatenate.
    pub const GPU_SAMPLES: u32 = 9;
    /// [`super::StackTable`], written once when recording ends (versions 2
    /// and 3; version 4 streams FRAMES and STACK_DEFS instead).
    pub const STACKS: u32 = 10;
    /// [`super::CudaInfo`]: the CUDA runtime libraries found and probed,
    /// and cudaLaunchKernel counts (since v3). Rewritten when it changes;
    /// the last one holds the totals.
    pub const CUDA: u32 = 11;
    /// [`super::FrameBatch`]: frames interned since the last one (since v4).
    pub const FRAMES: u32 = 12;
    /// [`super::StackBatch`]: stacks interned since the last one, made of
    /// frames already written (since v4).
    pub const STACK_DEFS: u32 = 13;
}

/// A pair of clock readings taken together, to convert between CLOCK_MONOTONIC
/// (kernel event timestamps) and wall-clock time (NVML, humans).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchor {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
}

impl ClockAnchor {
    /// The CLOCK_MONOTONIC time of a wall-clock time (ns), by the offset
    /// between the two clocks when this anchor was taken.
    pub fn realtime_to_monotonic(&self, realtime_ns: u64) -> u64 {
        let mono =
            i128::from(self.monotonic_ns) + i128::from(realtime_ns) - i128::from(self.realtime_ns);
        mono.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// First record: what was recorded, where, and when the window opened.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub tool_version: String,
    pub kernel_release: String,
    pub hostname: String,
    /// Online CPUs of the machine.
    pub cores: u32,
    /// Opening of the recording window: events before it are ignored.
    pub start: ClockAnchor,
    /// The `-p` targets, or the launched command's pid.
    pub targets: Vec<u32>,
    /// The launched command (`tprof record -- CMD`), if any.
    pub command: Option<Vec<String>>,
    /// Block devices of the machine: kernel dev_t (major << 20 | minor) → name.
    #[serde(default)]
    pub block_devices: std::collections::BTreeMap<u32, String>,
    /// The CPUs the first target may use, at the start.
    #[serde(default)]
    pub cpu_limit: Option<CpuLimit>,
    /// On-CPU stack sampling frequency (since v4; None: no stacks were
    /// sampled, `--no-stacks`). Earlier versions carry it in STACKS.
    #[serde(default)]
    pub sample_hz: Option<u64>,
    /// How user stacks were taken, when they were (since v4; None in
    /// earlier recordings, which walked frame pointers).
    #[serde(default)]
    pub user_stacks: Option<UserStacks>,
}

/// How a recording's user stacks were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum UserStacks {
    /// The kernel copied each stack's top `copy_bytes` and capture unwound
    /// it with each file's CFI (`.eh_frame`).
    Dwarf { copy_bytes: u32 },
    /// The kernel walked frame pointers: wrong wherever code keeps none
    /// (kernels without BTF or `bpf_task_pt_regs`, before 5.15).
    FramePointers,
}

/// The CPUs a job may use: the machine's, its cpuset's, its cgroup quota's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuLimit {
    /// Online CPUs of the machine.
    pub online: u32,
    /// CPUs in the job's affinity mask (cpuset), if known.
    pub cpuset: Option<u32>,
    /// The tightest cgroup CPU quota on its cgroup path, in CPUs.
    pub quota: Option<f64>,
}

impl CpuLimit {
    /// The CPUs the job can use, and which limit decides it.
    pub fn effective(&self) -> (f64, &'static str) {
        let mut cores = (f64::from(self.online), "machine");
        if let Some(set) = self.cpuset.filter(|&n| n > 0 && n < self.online) {
            cores = (f64::from(set), "cpuset");
        }
        if let Some(q) = self.quota.filter(|&q| q < cores.0) {
            cores = (q, "cgroup CPU quota");
        }
        cores
    }
}

/// How a process came to be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A `-p` target or one of its descendants, running before the recording.
    Attached,
    /// Launched by `tprof record -- CMD`.
    Launched,
    /// Created by a tracked process during the recording.
    Forked,
}

/// A snapshot of a tracked process from /proc (at attach, or soon after it
/// appeared or exec'd). Later snapshots of the same pid supersede earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub cmdline: Vec<String>,
    pub origin: Origin,
    /// When the snapshot was taken (CLOCK_MONOTONIC ns).
    pub seen_ns: u64,
}

/// A thread that existed when the recording started (threads created later
/// arrive as fork events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    /// Its /proc state letter at attach (R, S, D, …): the state of a thread
    /// that produces no event in the whole window.
    pub state: char,
}

/// A machine-wide sample of /proc/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemSample {
    pub ts_ns: u64,
    /// Threads running or waiting for a CPU, machine-wide (procs_running).
    pub procs_running: u32,
    /// Threads in uninterruptible sleep (procs_blocked).
    pub procs_blocked: u32,
    /// Cumulative busy CPU time of all CPUs, in clock ticks.
    pub busy_ticks: u64,
    /// Cumulative total CPU time of all CPUs, in clock ticks.
    pub total_ticks: u64,
}

/// Events the kernel could not deliver, cumulative since the start. The last
/// record in the file holds the totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostCounts {
    /// Ring buffer full, per event kind name.
    pub ring_buffer_full: std::collections::BTreeMap<String, u64>,
    /// New threads or processes not tracked because the tracked maps were full.
    pub tracking_full: u64,
    /// Events userspace could not decode (should be zero).
    pub undecodable: u64,
    /// Program runs the kernel skipped because another BPF program was
    /// running on the same CPU (bpf_prog_info.recursion_misses).
    #[serde(default)]
    pub recursion_misses: u64,
    /// Stacks not taken because their stack-map bucket held another stack.
    #[serde(default)]
    pub stack_collisions: u64,
    /// Stacks not taken for another reason (stack map out of memory).
    #[serde(default)]
    pub stack_failed: u64,
    /// Samples or off-CPU intervals dropped because the in-kernel aggregate
    /// was full (versions 2 and 3, which aggregated in the kernel).
    #[serde(default)]
    pub stack_aggregate_full: u64,
    /// Off-CPU intervals lost because the switch-out map was full
    /// (versions 2 and 3).
    #[serde(default)]
    pub offcpu_full: u64,
    /// User stacks copied by the kernel that never reached their sample or
    /// switch-out: the ring buffer had no room for the copy, the thread had
    /// no user registers, or the copy came after the event that used it
    /// (since v4, stack copy mode). Such a stack reads `[user stack lost]`.
    #[serde(default)]
    pub stack_copy_lost: u64,
    /// Copies with the registers but not a byte of the stack (the page at
    /// sp could not be read): the stack is its leaf, under `[truncated]`.
    #[serde(default)]
    pub stack_copy_failed: u64,
    /// Stacks deeper than the bytes copied (`--stack-size`) or than 512
    /// frames: unwound as far as that, under a `[truncated]` frame.
    #[serde(default)]
    pub stack_truncated: u64,
    /// Stacks whose copy stopped at a page that could not be read before
    /// `--stack-size`, and that went on past it: `[truncated]` there.
    #[serde(default)]
    pub stack_copy_short: u64,
    /// Stacks whose unwinding met something that is not a frame (a return
    /// address outside every executable mapping, a stack pointer that did
    /// not grow): cut there under a `[truncated]` frame.
    #[serde(default)]
    pub stack_cut: u64,
}

impl LostCounts {
    /// Events lost: these make thread times approximate. Stack losses are
    /// counted apart ([`LostCounts::stack_lost`]): they only thin the
    /// flamegraphs.
    /// (Sums saturate: the counts come from a file, which may be hostile.)
    pub fn total(&self) -> u64 {
        saturating_sum(self.ring_buffer_full.values().copied().chain([
            self.tracking_full,
            self.undecodable,
            self.recursion_misses,
        ]))
    }

    /// Stacks, samples and off-CPU intervals lost by stack sampling (a lost
    /// stack still counts its sample, under a "[user stack lost]" frame).
    pub fn stack_lost(&self) -> u64 {
        saturating_sum([
            self.stack_collisions,
            self.stack_failed,
            self.stack_aggregate_full,
            self.offcpu_full,
            self.stack_copy_lost,
        ])
    }

    /// User stacks kept only in part, under a `[truncated]` frame: not
    /// lost, but short of their thread's root.
    pub fn stack_partial(&self) -> u64 {
        saturating_sum([
            self.stack_copy_failed,
            self.stack_truncated,
            self.stack_copy_short,
            self.stack_cut,
        ])
    }
}

fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

/// Last record of a recording that ended normally.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footer {
    pub end: ClockAnchor,
    /// Why recording stopped: "duration", "interrupted", "terminated",
    /// "targets exited", or an error.
    pub stop_reason: String,
}

/// GPU sampling's setup, written once. Either `status` says why there is no
/// GPU data (no NVML library, no driver, no GPU, `--no-gpu`), or `devices`
/// lists what is sampled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Why there is no GPU data; None when sampling ran.
    pub status: Option<String>,
    /// The NVML library asked for (a path or the loader's name for it).
    pub library: Option<String>,
    pub devices: Vec<GpuDevice>,
}

/// One GPU as NVML enumerates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// NVML's index (not necessarily CUDA's).
    pub index: u32,
    pub name: String,
    pub memory_total_bytes: Option<u64>,
    /// Where utilization comes from: the driver's sample buffer, or
    /// utilization rates polled at a fixed rate.
    pub utilization_source: String,
    /// Series this GPU or library cannot give, each with the NVML function
    /// and why (e.g. "per-process utilization (nvmlDeviceGetProcessUtilization):
    /// not in the NVML library").
    pub missing: Vec<String>,
}

/// What a GPU series measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuMetric {
    /// % of the period a kernel ran.
    GpuUtilPct,
    /// % of the period device memory was read or written.
    MemUtilPct,
    MemUsedBytes,
    PcieRxBytesPerS,
    PcieTxBytesPerS,
    SmClockMhz,
    PowerMw,
    /// One process's SM utilization (with `pid`); 0 when the driver listed
    /// other processes but not this one.
    ProcessSmUtilPct,
}

/// Samples of one series of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSeries {
    pub gpu: u32,
    pub metric: GpuMetric,
    /// The process, for per-process metrics.
    pub pid: Option<u32>,
    /// `(CLOCK_MONOTONIC ns, value)`, oldest first. A utilization value is
    /// the driver's average over the period since the series' previous
    /// sample; other values are readings at that time.
    pub points: Vec<(u64, u64)>,
}

/// CUDA runtime tracing's state: which libcudart files the tracked
/// processes mapped and which functions were probed in each, and the
/// cudaLaunchKernel counts. Written by every tprof since v3, also when no
/// library was found (then `libraries` is empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaInfo {
    /// Why no library was looked for (`--no-cuda`); None when tracing ran.
    #[serde(default)]
    pub status: Option<String>,
    pub libraries: Vec<CudaLibrary>,
    /// cudaLaunchKernel calls per process (tgid → count), cumulative.
    pub launches: std::collections::BTreeMap<u32, u64>,
}

/// One CUDA runtime library file, found in a tracked process's maps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaLibrary {
    /// The path as the process that mapped it sees it.
    pub path: String,
    /// The process whose maps showed it first.
    pub pid: u32,
    /// When its probes were attached (CLOCK_MONOTONIC ns): calls before
    /// this were not seen.
    pub attached_ns: u64,
    /// Functions probed.
    pub probed: Vec<String>,
    /// Functions the library does not export, or whose probe failed, with why.
    pub missing: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_wall_clock_to_monotonic() {
        let anchor = ClockAnchor {
            monotonic_ns: 1_000,
            realtime_ns: 1_000_000,
        };
        assert_eq!(anchor.realtime_to_monotonic(1_000_500), 1_500);
        assert_eq!(anchor.realtime_to_monotonic(999_500), 500);
        assert_eq!(anchor.realtime_to_monotonic(0), 0);
    }
}

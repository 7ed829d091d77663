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
//!
//! Any change a reader of the previous version would misread bumps
//! [`FORMAT_VERSION`] and gets a changelog entry in recording-format.md;
//! readers accept every version from [`OLDEST_READABLE_VERSION`] on, and
//! take a record longer than [`MAX_RECORD_LEN`] for corruption.

pub mod events;
pub mod reader;
pub mod stacks;
pub mod writer;

use serde::{Deserialize, Serialize};

pub use events::Event;
pub use reader::{Recording, read};
pub use stacks::{
    Frame, FrameBatch, FrameKind, StackBatch, StackDictionary, StackKind, StackSample, StackTable,
    TimedStack,
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
    /// [`super::StepProbes`]: what step detection could see: the libtorch
    /// files probed for marks and whether pipe transfers were traced
    /// (version 4, later addition). Rewritten when it changes; the last
    /// one holds.
    pub const STEP_PROBES: u32 = 14;
}

/// A pair of clock readings taken together, to convert between CLOCK_MONOTONIC
/// (kernel event timestamps) and wall-clock time (NVML, humans, other
/// machines).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchor {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
    /// How far apart the two readings may be: half the time between the
    /// monotonic readings taken just before and just after the wall clock
    /// (None in recordings made before tprof measured it).
    #[serde(default)]
    pub uncertainty_ns: Option<u64>,
}

impl ClockAnchor {
    /// The CLOCK_MONOTONIC time of a wall-clock time (ns), by the offset
    /// between the two clocks when this anchor was taken.
    pub fn realtime_to_monotonic(&self, realtime_ns: u64) -> u64 {
        let mono =
            i128::from(self.monotonic_ns) + i128::from(realtime_ns) - i128::from(self.realtime_ns);
        mono.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// The wall-clock time of a CLOCK_MONOTONIC time (ns).
    pub fn monotonic_to_realtime(&self, monotonic_ns: u64) -> u64 {
        let real =
            i128::from(self.realtime_ns) + i128::from(monotonic_ns) - i128::from(self.monotonic_ns);
        real.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// CLOCK_REALTIME minus CLOCK_MONOTONIC at this anchor (ns): constant
    /// on one boot unless the wall clock is stepped.
    pub fn offset_ns(&self) -> i128 {
        i128::from(self.realtime_ns) - i128::from(self.monotonic_ns)
    }
}

/// Where a recording was made and which part of a job it saw: what tells
/// the recordings of a multi-node job apart and lines them up (since v4,
/// optional; recordings without it read as None).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// `/proc/sys/kernel/random/boot_id`: two recordings with the same one
    /// share one CLOCK_MONOTONIC.
    #[serde(default)]
    pub boot_id: Option<String>,
    /// `/etc/machine-id`: the machine, across boots.
    #[serde(default)]
    pub machine_id: Option<String>,
    /// The wall clock's synchronization when recording started, as the
    /// kernel's NTP state (adjtimex) gives it.
    #[serde(default)]
    pub clock_sync: Option<ClockSync>,
    /// The job's rank variables, from the first target's environment.
    #[serde(default)]
    pub rank: Option<RankInfo>,
}

/// The kernel's view of the wall clock's accuracy (adjtimex).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSync {
    /// False when the kernel reports the clock unsynchronized (no NTP or
    /// PTP daemon disciplines it): other machines' clocks may be off by
    /// anything.
    pub synchronized: bool,
    /// The daemon's estimate of the wall clock's error (`esterror`), ns.
    pub est_error_ns: u64,
    /// Its bound on that error (`maxerror`), ns.
    pub max_error_ns: u64,
}

/// Which rank of a distributed job a recording's target is, from the
/// variables launchers set (torchrun, Slurm, Open MPI, MPICH).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    /// The process whose environment it was read from.
    pub pid: u32,
    /// Global rank: RANK, else SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK.
    pub rank: Option<u32>,
    /// Rank on this node: LOCAL_RANK, else SLURM_LOCALID,
    /// OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID.
    pub local_rank: Option<u32>,
    /// Ranks in the job: WORLD_SIZE, else SLURM_NTASKS,
    /// OMPI_COMM_WORLD_SIZE, PMI_SIZE.
    pub world_size: Option<u32>,
    /// This node's index: GROUP_RANK, else NODE_RANK, SLURM_NODEID.
    pub node_rank: Option<u32>,
    /// The job: SLURM_JOB_ID, else TORCHELASTIC_RUN_ID.
    pub job_id: Option<String>,
    /// Every variable above that was set, name → value.
    pub env: std::collections::BTreeMap<String, String>,
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
    /// The machine and rank (since v4, optional).
    #[serde(default)]
    pub node: Option<NodeIdentity>,
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
    /// Those runs by program name, the programs with any (since
    /// 2026-12-06): `tprof_rq_complete`'s are block completions, whose
    /// request is then missing from its thread's and its device's figures.
    #[serde(default)]
    pub recursion_misses_by_program: std::collections::BTreeMap<String, u64>,
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
    /// Block requests whose start and issue times were lost because the
    /// kernel's map of requests in flight was full (their completion is
    /// still recorded, without a queue or service time).
    #[serde(default)]
    pub requests_full: u64,
    /// Block requests in flight dropped from that map after a minute with
    /// no completion (one whose completion the kernel did not trace, or
    /// one that did take that long and then lost its times).
    #[serde(default)]
    pub requests_expired: u64,
    /// Block requests of tracked threads still in flight at the stop though
    /// their thread had exited (since 2026-12-06): completions the kernel
    /// ran no program for (a synchronous read completes before its thread
    /// goes on), or an asynchronous read still in flight. Their bytes and
    /// waits are missing from the thread's figures.
    #[serde(default)]
    pub requests_orphaned: u64,
    /// Bios of tracked threads whose submitter was lost because the map of
    /// bio owners was full: their requests are not attributed to a thread.
    #[serde(default)]
    pub bio_owners_full: u64,
    /// Bios of tracked threads that did not become a request on their
    /// device within a minute (a stacked device's upper bio, such as dm's,
    /// whose requests are issued on the device below; or a bio that waited
    /// that long, whose request then has no owner).
    #[serde(default)]
    pub bio_owners_expired: u64,
    /// CUDA runtime calls lost because the map of calls in progress was
    /// full.
    #[serde(default)]
    pub cuda_calls_full: u64,
    /// CUDA runtime calls whose thread exited inside them: never returned,
    /// so never recorded.
    #[serde(default)]
    pub cuda_calls_unreturned: u64,
    /// cudaLaunchKernel calls not counted because the per-process count map
    /// was full.
    #[serde(default)]
    pub cuda_launches_full: u64,
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

    /// Block requests that lost their times or their owner, CUDA calls and
    /// cudaLaunchKernel counts lost: things in flight the kernel's maps
    /// could not keep. They make IO attribution, device statistics and the
    /// CUDA section approximate.
    pub fn in_flight_lost(&self) -> u64 {
        saturating_sum([
            self.requests_full,
            self.requests_expired,
            self.requests_orphaned,
            self.bio_owners_full,
            self.bio_owners_expired,
            self.cuda_calls_full,
            self.cuda_calls_unreturned,
            self.cuda_launches_full,
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
    /// How the command `tprof record -- CMD` launched ended; absent for
    /// `-p` recordings and in recordings made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_exit: Option<CommandExit>,
    /// The wall clock's synchronization when recording ended (since v4,
    /// optional).
    #[serde(default)]
    pub clock_sync: Option<ClockSync>,
}

/// How the launched command ended, and what tprof did to stop it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandExit {
    pub pid: u32,
    /// Its exit status, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The signal that ended it, when one did. (Neither this nor `code`:
    /// it had not ended when recording did.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The signal tprof sent its process group to stop it, when the
    /// recording stopped before the command did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<i32>,
    /// tprof killed its process group (SIGKILL): what was left of it after
    /// the grace period, or all of it when tprof failed.
    #[serde(default)]
    pub killed: bool,
}

/// The name of a Linux signal number (x86-64 and arm64 share these).
pub fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

impl CommandExit {
    /// How it ended, in words, with what tprof did: "exited with status 0",
    /// "ended by SIGINT (tprof sent SIGINT to stop it)", "had not exited
    /// when recording ended".
    pub fn describe(&self) -> String {
        let signal = |n: i32| signal_name(n).map_or_else(|| format!("signal {n}"), str::to_string);
        let ended = match (self.code, self.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(n)) => format!("ended by {}", signal(n)),
            (None, None) => "had not exited when recording ended".to_string(),
        };
        let killed = if self.killed {
            ", then SIGKILL to its process group after the grace period"
        } else {
            ""
        };
        match self.stop_signal {
            Some(n) => format!("{ended} (tprof sent {} to stop it{killed})", signal(n)),
            None if self.killed => format!("{ended} (tprof killed its process group)"),
            None => ended,
        }
    }
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

/// What step detection could see (`analysis::steps`): written by capture
/// when it changes and once at the end. Absent in older recordings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepProbes {
    /// Pipe transfers of tracked threads were traced (kernel event
    /// `PIPE`).
    pub pipes: bool,
    /// Why they were not, when not.
    #[serde(default)]
    pub pipes_status: Option<String>,
    /// When they stopped being traced (CLOCK_MONOTONIC ns): a tracked
    /// process asked its DataLoader for a batch (a `MARK` whose name is
    /// `profiler_ebpf::mark::LOADER_PREFIX`'s), and from then on libtorch's
    /// marks frame the steps. None: traced to the end (or not at all).
    #[serde(default)]
    pub pipes_until_ns: Option<u64>,
    /// libtorch files found in tracked processes' maps and the functions
    /// probed in each for marks (kernel event `MARK`).
    pub libraries: Vec<CudaLibrary>,
}

/// One probed library file (a CUDA runtime, or libtorch for step marks),
/// found in a tracked process's maps.
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
            ..Default::default()
        };
        assert_eq!(anchor.realtime_to_monotonic(1_000_500), 1_500);
        assert_eq!(anchor.realtime_to_monotonic(999_500), 500);
        assert_eq!(anchor.realtime_to_monotonic(0), 0);
    }

    #[test]
    fn command_exit_in_words() {
        assert_eq!(signal_name(2), Some("SIGINT"));
        assert_eq!(signal_name(31), Some("SIGSYS"));
        assert_eq!(
            (signal_name(0), signal_name(32), signal_name(-1)),
            (None, None, None)
        );
        let exit = |code, signal, stop_signal, killed| CommandExit {
            pid: 7,
            code,
            signal,
            stop_signal,
            killed,
        };
        assert_eq!(
            exit(Some(0), None, None, false).describe(),
            "exited with status 0"
        );
        assert_eq!(
            exit(None, Some(2), Some(2), false).describe(),
            "ended by SIGINT (tprof sent SIGINT to stop it)"
        );
        assert_eq!(
            exit(None, Some(9), Some(15), true).describe(),
            "ended by SIGKILL (tprof sent SIGTERM to stop it, then SIGKILL to its process \
             group after the grace period)"
        );
        assert_eq!(
            exit(None, None, None, true).describe(),
            "had not exited when recording ended (tprof killed its process group)"
        );
        assert_eq!(
            exit(None, Some(64), None, false).describe(),
            "ended by signal 64"
        );
    }
}

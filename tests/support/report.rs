//! The parts of `tprof report --json` the tests check, decoded into types so
//! a missing or renamed field fails with serde's message naming it.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct Report {
    /// CLOCK_MONOTONIC ns of the window's start (the `_s` times' origin).
    pub start_monotonic_ns: u64,
    pub duration_s: f64,
    pub cores: u32,
    pub events: u64,
    pub lost_events: u64,
    pub lost: Lost,
    pub threads: Vec<Thread>,
    pub processes: Vec<Process>,
    pub devices: Vec<Device>,
    pub futexes: Vec<Futex>,
    pub gpus: Vec<Gpu>,
    /// Why there is no GPU data; None when there is.
    pub gpu_status: Option<String>,
    /// tid (as a string) → role.
    pub roles: std::collections::BTreeMap<String, String>,
    pub steps: Steps,
    pub findings: Vec<Finding>,
    pub cores_effective: f64,
    pub cores_source: String,
    pub cuda: Cuda,
    pub pipeline: Pipeline,
    pub job_on_cpu: f64,
    pub job_runnable: f64,
    pub machine: Option<Machine>,
    /// How whole the on-CPU samples' user stacks are; None without stacks.
    pub stacks: Option<Stacks>,
}

/// The kinds of loss `lost_events` sums (docs/json.md).
#[derive(Debug, Deserialize)]
pub struct Lost {
    pub ring_buffer_full: std::collections::BTreeMap<String, u64>,
    pub tracking_full: u64,
    pub undecodable: u64,
    pub recursion_misses: u64,
    /// Those by program name.
    #[serde(default)]
    pub recursion_misses_by_program: std::collections::BTreeMap<String, u64>,
    /// Block requests of exited threads never seen to complete.
    #[serde(default)]
    pub requests_orphaned: u64,
}

/// The machine around the job.
#[derive(Debug, Deserialize)]
pub struct Machine {
    pub mean_runnable_threads: f64,
    pub cpu_busy_pct: f64,
    /// CPUs kept busy by other processes.
    pub other_cpus: f64,
}

/// The input pipeline over the training phase.
#[derive(Debug, Deserialize)]
pub struct Pipeline {
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    pub whole_window: bool,
    pub data_wait_frac: f64,
    pub data_workers: DataWorkers,
    pub pin_memory_tids: Vec<i64>,
    pub helpers: Vec<Helper>,
    pub pools: Vec<PoolGroup>,
    pub cpu: PhaseCpu,
    pub advice: Option<Advice>,
}

#[derive(Debug, Deserialize)]
pub struct DataWorkers {
    pub pids: Vec<i64>,
    pub at_a_time: usize,
    pub restarts: usize,
}

#[derive(Debug, Deserialize)]
pub struct Helper {
    pub pid: i64,
    pub comm: String,
}

#[derive(Debug, Deserialize)]
pub struct PoolGroup {
    pub pid: i64,
    pub in_worker: bool,
    pub library: String,
    pub threads: usize,
}

#[derive(Debug, Deserialize)]
pub struct PhaseCpu {
    pub trainer_s: f64,
    pub trainer_side_s: f64,
    pub workers_s: f64,
    pub pool_spin_s: f64,
    pub job_on_cpu: f64,
    pub job_runnable: f64,
}

#[derive(Debug, Deserialize)]
pub struct Advice {
    pub cores: f64,
    pub worker_to_trainer: f64,
    pub trainer_serial_share: f64,
    pub workers_needed: f64,
    pub num_workers: usize,
    pub pool_threads: usize,
    pub trainer_bound: bool,
}

/// One setting a finding's fix changes.
#[derive(Debug, Deserialize)]
pub struct Change {
    pub setting: String,
    /// Absent when the recording cannot tell.
    pub from: Option<Value>,
    pub to: Value,
}

/// `stacks` of the report: how user stacks were taken, and how many of the
/// on-CPU samples' reach their thread's root.
#[derive(Debug, Deserialize)]
pub struct Stacks {
    pub mode: Option<String>,
    pub copy_bytes: Option<u32>,
    pub samples: u64,
    pub rooted: Option<u64>,
    pub truncated: u64,
    pub lost: u64,
}

/// One ranked cause, with its evidence and fix.
#[derive(Debug, Deserialize)]
pub struct Finding {
    pub id: String,
    pub title: String,
    pub severity: String,
    pub explains_frac: f64,
    pub evidence: Vec<String>,
    pub fix: String,
    pub changes: Vec<Change>,
    pub expect: String,
}

impl Finding {
    /// The change of `setting`, if the fix makes one.
    pub fn change(&self, setting: &str) -> Option<&Change> {
        self.changes.iter().find(|c| c.setting == setting)
    }
}

/// Batches the trainer waited for, and who it waited on.
#[derive(Debug, Deserialize)]
pub struct Steps {
    pub trainer_tid: Option<i64>,
    pub source: StepSource,
    /// Steps (training iterations, or batches).
    pub count: u64,
    /// Batches the trainer waited for.
    pub deliveries: u64,
    pub startup: Option<Span>,
    pub items: Vec<StepItem>,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub data_wait_frac: f64,
    pub blame: Blame,
}

/// Which detector defined the steps.
#[derive(Debug, Deserialize)]
pub struct StepSource {
    pub detector: String,
    pub confidence: Option<String>,
    pub why: String,
}

#[derive(Debug, Deserialize)]
pub struct Span {
    pub start_s: f64,
    pub end_s: f64,
}

#[derive(Debug, Deserialize)]
pub struct StepItem {
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    /// The end is tprof's estimate (the last step).
    pub end_estimated: bool,
    pub data_wait_s: f64,
    pub worker_pid: Option<i64>,
}

/// Shares of the delivering workers' time during data waits.
#[derive(Debug, Deserialize)]
pub struct Blame {
    pub on_cpu: f64,
    pub runnable: f64,
    pub io: f64,
    pub futex: f64,
    pub sleep: f64,
}

impl Blame {
    /// The cause with the largest share.
    pub fn leading(&self) -> &'static str {
        [
            ("on_cpu", self.on_cpu),
            ("runnable", self.runnable),
            ("io", self.io),
            ("futex", self.futex),
            ("sleep", self.sleep),
        ]
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or("none", |(name, _)| name)
    }
}

impl Report {
    /// The finding `id`, if it fired.
    pub fn finding(&self, id: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.id == id)
    }

    /// Ids of the findings, ranked.
    pub fn finding_ids(&self) -> Vec<&str> {
        self.findings.iter().map(|f| f.id.as_str()).collect()
    }

    pub fn role(&self, tid: i64) -> &str {
        self.roles
            .get(&tid.to_string())
            .map_or("missing", String::as_str)
    }
}

/// CUDA runtime calls of the job.
#[derive(Debug, Deserialize)]
pub struct Cuda {
    pub visible: bool,
    pub status: Option<String>,
    pub library: Option<String>,
    /// Function name → calls.
    pub calls: std::collections::BTreeMap<String, u64>,
    pub failed_calls: u64,
    pub h2d_copies: H2dCopies,
    pub trainer: Option<CudaTrainer>,
    pub findings: Vec<CudaFinding>,
}

impl Cuda {
    pub fn calls_of(&self, function: &str) -> u64 {
        self.calls.get(function).copied().unwrap_or(0)
    }

    pub fn finding_ids(&self) -> Vec<&str> {
        self.findings.iter().map(|f| f.id.as_str()).collect()
    }
}

#[derive(Debug, Deserialize)]
pub struct H2dCopies {
    pub count: u64,
    pub bytes: u64,
    pub pageable: u64,
    pub pinned: u64,
    pub followed_by_sync: u64,
    pub blocked_s: f64,
}

#[derive(Debug, Deserialize)]
pub struct CudaTrainer {
    pub pid: i64,
    pub tid: i64,
    pub sync_s: f64,
    pub syncs: u64,
}

#[derive(Debug, Deserialize)]
pub struct CudaFinding {
    pub id: String,
    pub severity: String,
    pub evidence: String,
    pub fix: String,
    pub copies: u64,
    pub bytes: u64,
    pub blocked_s: f64,
}

/// A block device in iostat -x terms over the recording window.
#[derive(Debug, Deserialize)]
pub struct Device {
    pub name: String,
    pub r_s: f64,
    pub w_s: f64,
    pub rmb_s: f64,
    pub wmb_s: f64,
    pub r_await_ms: f64,
    pub w_await_ms: f64,
    pub aqu_sz: f64,
    pub util_pct: f64,
}

/// Waits on one futex word of one process.
#[derive(Debug, Deserialize)]
pub struct Futex {
    pub pid: i64,
    /// Hex, as C's %p prints it.
    pub uaddr: String,
    pub waiters: u64,
    pub wait_s: f64,
    pub wakers: Vec<Waker>,
}

#[derive(Debug, Deserialize)]
pub struct Waker {
    pub pid: i64,
    pub tid: i64,
    pub wakes: u64,
}

#[derive(Debug, Deserialize)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub util_mean_pct: Option<f64>,
    pub idle_frac: Option<f64>,
    /// `[start_s, end_s]` relative to the recording start.
    pub idle_intervals: Vec<(f64, f64)>,
    pub mem_peak_bytes: Option<u64>,
    pub utilization_source: String,
    pub missing: Vec<String>,
    pub processes: Vec<GpuProcess>,
}

#[derive(Debug, Deserialize)]
pub struct GpuProcess {
    pub pid: i64,
    pub comm: String,
    pub sm_util_mean_pct: f64,
}

#[derive(Debug, Deserialize)]
pub struct Thread {
    pub pid: i64,
    pub tid: i64,
    /// The process's parent.
    pub ppid: i64,
    pub comm: String,
    pub lifetime_s: f64,
    pub on_cpu_s: f64,
    pub runnable_s: f64,
    pub blocked_s: f64,
    pub blocked_interruptible_s: f64,
    pub blocked_uninterruptible_s: f64,
    /// Blocked time by reason; with on-CPU and runnable these are the five
    /// states that sum to the lifetime.
    pub io_s: f64,
    pub futex_s: f64,
    pub sleep_s: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

#[derive(Debug, Deserialize)]
pub struct Process {
    pub pid: i64,
    pub ppid: i64,
    pub comm: String,
    /// Kept loose: the tests only look at it in failure messages.
    pub cmdline: Value,
    /// trainer | data_worker | helper | other.
    pub role: String,
    pub on_cpu_s: f64,
    pub runnable_s: f64,
}

impl Report {
    pub fn from_json(json: Value) -> Report {
        serde_json::from_value(json.clone()).unwrap_or_else(|e| {
            panic!("`tprof report --json` does not match the documented shape: {e}\n{json:#}")
        })
    }

    pub fn thread(&self, tid: i64) -> &Thread {
        self.threads
            .iter()
            .find(|t| t.tid == tid)
            .unwrap_or_else(|| panic!("thread {tid} missing from the report; {}", self.summary()))
    }

    pub fn threads_named(&self, comm: &str) -> Vec<&Thread> {
        self.threads.iter().filter(|t| t.comm == comm).collect()
    }

    pub fn process(&self, pid: i64) -> &Process {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or_else(|| panic!("process {pid} missing from the report; {}", self.summary()))
    }

    /// One line per thread, for failure messages.
    pub fn summary(&self) -> String {
        let rows: Vec<String> = self
            .threads
            .iter()
            .map(|t| {
                format!(
                    "  pid {} tid {} {:?}: life {:.3}s cpu {:.3}s runnable {:.3}s blocked {:.3}s",
                    t.pid, t.tid, t.comm, t.lifetime_s, t.on_cpu_s, t.runnable_s, t.blocked_s
                )
            })
            .collect();
        format!("threads in the report:\n{}", rows.join("\n"))
    }
}

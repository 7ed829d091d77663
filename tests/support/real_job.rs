//! The real PyTorch training job (tests/workloads/train_job.py) under
//! tprof: its Python environment, its settings, recording it from start
//! (`record -- python …`) or attached to it with its workers alive
//! (`record -p PID`), and its own ground truth.
//!
//! The job needs the venv `cargo xtask setup` makes (torch, OpenCV, numpy;
//! see xtask/src/job_env.rs). [`RealJob::find`] takes its interpreter from
//! `TPROF_JOB_PYTHON` (set by `cargo xtask test`, where a missing venv is a
//! failure) or from `target/train-job-python` (written by setup); without
//! either, a test says so on the terminal and skips.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tempfile::TempDir;

use crate::process::{Finished, Running};
use crate::report::Report;
use crate::tprof::{record_command, report_json, tprof};
use crate::workload::{read_truth_file, workspace_root};

/// Far beyond a job's run time (tens of seconds on a loaded machine).
const JOB_TIMEOUT: Duration = Duration::from_mins(5);
/// torch's import alone takes seconds; under a loaded machine, more.
const READY_TIMEOUT: Duration = Duration::from_mins(3);

/// The interpreter of the train-job venv.
pub struct RealJob {
    python: PathBuf,
}

/// Thread pools as the environment leaves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// No OMP_NUM_THREADS or MKL_NUM_THREADS: one pool thread per core.
    Default,
    /// OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1.
    One,
}

/// The job's DataLoader and environment settings.
#[derive(Debug, Clone, Copy)]
pub struct JobConfig {
    pub num_workers: u32,
    pub pin_memory: bool,
    pub persistent_workers: bool,
    pub threads: Threads,
    pub batch_size: u32,
    /// Timed iterations (after two of warm-up).
    pub iterations: u32,
    /// More of the job's options (the zoo's pathologies: `--dataset
    /// python`, `--epoch-batches 4`, …).
    pub extra: &'static [&'static str],
}

impl JobConfig {
    pub fn new(num_workers: u32, threads: Threads) -> JobConfig {
        JobConfig {
            num_workers,
            pin_memory: false,
            persistent_workers: false,
            threads,
            batch_size: 32,
            iterations: 40,
            extra: &[],
        }
    }

    #[must_use]
    pub fn args(mut self, extra: &'static [&'static str]) -> JobConfig {
        self.extra = extra;
        self
    }

    #[must_use]
    pub fn pin_memory(mut self, on: bool) -> JobConfig {
        self.pin_memory = on;
        self
    }

    #[must_use]
    pub fn persistent_workers(mut self, on: bool) -> JobConfig {
        self.persistent_workers = on;
        self
    }

    #[must_use]
    pub fn iterations(mut self, n: u32) -> JobConfig {
        self.iterations = n;
        self
    }
}

/// Serializes image generation: the first job of a test run makes them.
static IMAGES: Mutex<bool> = Mutex::new(false);

impl RealJob {
    /// The venv's interpreter; None (with a message on the terminal) when
    /// setup has not made it and this is not `cargo xtask test`.
    pub fn find() -> Option<RealJob> {
        if let Some(path) = std::env::var_os("TPROF_JOB_PYTHON") {
            let python = PathBuf::from(path);
            assert!(
                python.is_file(),
                "TPROF_JOB_PYTHON={} does not exist: run `cargo xtask setup`",
                python.display()
            );
            return Some(RealJob { python });
        }
        let pointer = workspace_root().join("target/train-job-python");
        let python = std::fs::read_to_string(&pointer)
            .ok()
            .map(|text| PathBuf::from(text.trim()))
            .filter(|p| p.is_file());
        if python.is_none() {
            // Straight to the terminal: libtest hides a passing test's
            // eprintln!, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the real-PyTorch job needs its venv; run `cargo xtask setup` \
                 (no {} or TPROF_JOB_PYTHON)",
                pointer.display()
            );
        }
        python.map(|python| RealJob { python })
    }

    fn script() -> PathBuf {
        workspace_root().join("tests/workloads/train_job.py")
    }

    /// Where the job's JPEGs are kept between runs (made on first use, 40
    /// MB): in RAM, so no run waits for a disk that the machine's other
    /// work keeps busy (a test of the CPU pipeline would get disk_bound).
    /// `cargo xtask bench real` uses the same directory.
    fn data_dir() -> PathBuf {
        PathBuf::from("/dev/shm/tprof-train-job-images")
    }

    fn ensure_images(&self) {
        let mut made = IMAGES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *made {
            return;
        }
        let out = Command::new(&self.python)
            .arg(Self::script())
            .arg("--data-dir")
            .arg(Self::data_dir())
            .arg("--generate-only")
            .output()
            .expect("run train_job.py --generate-only");
        assert!(
            out.status.success(),
            "generating the job's images failed: {}",
            crate::show(&out)
        );
        *made = true;
    }

    /// The job's command line.
    pub fn argv(&self, config: &JobConfig, go_file: Option<&Path>) -> Vec<String> {
        let mut argv = vec![
            self.python.display().to_string(),
            Self::script().display().to_string(),
            "--data-dir".into(),
            Self::data_dir().display().to_string(),
            "--num-workers".into(),
            config.num_workers.to_string(),
            "--batch-size".into(),
            config.batch_size.to_string(),
            "--iterations".into(),
            config.iterations.to_string(),
        ];
        if config.pin_memory {
            argv.push("--pin-memory".into());
        }
        if config.persistent_workers {
            argv.push("--persistent-workers".into());
        }
        argv.extend(config.extra.iter().map(|a| (*a).to_string()));
        if let Some(go) = go_file {
            argv.push("--go-file".into());
            argv.push(go.display().to_string());
        }
        argv
    }

    fn set_threads(command: &mut Command, threads: Threads) {
        match threads {
            Threads::Default => {
                command
                    .env_remove("OMP_NUM_THREADS")
                    .env_remove("MKL_NUM_THREADS");
            }
            Threads::One => {
                command
                    .env("OMP_NUM_THREADS", "1")
                    .env("MKL_NUM_THREADS", "1");
            }
        }
    }

    /// `tprof record -- python train_job.py …`: the job from its first
    /// instruction (interpreter start and imports included) to its exit.
    pub fn record(&self, config: &JobConfig) -> RealRun {
        self.ensure_images();
        let dir = tempfile::tempdir().expect("create temp dir");
        let recording = dir.path().join("job.tprof");
        let truth_file = dir.path().join("truth.jsonl");
        let argv = self.argv(config, None);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut command = record_command(&recording, &["--no-flamegraphs", "--no-timeline"], &argv);
        command.env("TPROF_TRUTH_FILE", &truth_file);
        Self::set_threads(&mut command, config.threads);
        let record = Running::spawn(&mut command).wait(JOB_TIMEOUT);
        assert!(
            record.status.success(),
            "tprof record -- train_job.py failed: {record:#?}"
        );
        RealRun::read(*config, record, recording, &truth_file, dir)
    }

    /// `tprof record -p PID` on a job already running: the job warms up
    /// (its workers are forked and alive), tprof attaches, and only then
    /// does the job run its timed iterations and exit.
    pub fn record_attached(&self, config: &JobConfig) -> RealRun {
        self.ensure_images();
        let dir = tempfile::tempdir().expect("create temp dir");
        let recording = dir.path().join("job.tprof");
        let truth_file = dir.path().join("truth.jsonl");
        let go_file = dir.path().join("go");
        let argv = self.argv(config, Some(&go_file));
        let mut job_cmd = Command::new(&argv[0]);
        job_cmd
            .args(&argv[1..])
            .env("TPROF_TRUTH_FILE", &truth_file);
        Self::set_threads(&mut job_cmd, config.threads);
        let mut job = Running::spawn(&mut job_cmd);
        loop {
            let line = job.next_stdout_line(READY_TIMEOUT);
            if line.contains("\"event\":\"ready\"") {
                break;
            }
        }
        let pid = job.pid().to_string();
        let mut tprof_cmd = record_command(
            &recording,
            &["-p", &pid, "--no-flamegraphs", "--no-timeline"],
            &[],
        );
        let mut tprof = Running::spawn(&mut tprof_cmd);
        tprof.wait_for_stderr("recording", READY_TIMEOUT);
        std::fs::write(&go_file, b"").expect("create the go file");
        let job_done = job.wait(JOB_TIMEOUT);
        assert!(
            job_done.status.success(),
            "train_job.py failed: {job_done:#?}"
        );
        let record = tprof.wait(JOB_TIMEOUT);
        assert!(
            record.status.success(),
            "tprof record -p failed: {record:#?}"
        );
        RealRun::read(*config, record, recording, &truth_file, dir)
    }
}

/// The job started on its own, warmed up (its workers alive) and held
/// before its timed iterations until [`HeldJob::go`], reporting each timed
/// iteration as it ends (`--progress`), so a test can watch it live and
/// stop it when done (dropping it kills it).
pub struct HeldJob {
    pub job: Running,
    pub config: JobConfig,
    pub ready: Ready,
    truth_file: PathBuf,
    go_file: PathBuf,
    /// Holds the truth file, and whatever the test writes, until the test
    /// ends.
    pub dir: TempDir,
}

impl RealJob {
    /// Starts the job with `config` (and `--progress`), and waits for its
    /// warm-up to end.
    pub fn start_held(&self, config: &JobConfig) -> HeldJob {
        self.ensure_images();
        let dir = tempfile::tempdir().expect("create temp dir");
        let truth_file = dir.path().join("truth.jsonl");
        let go_file = dir.path().join("go");
        let mut argv = self.argv(config, Some(&go_file));
        argv.push("--progress".into());
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env("TPROF_TRUTH_FILE", &truth_file);
        Self::set_threads(&mut command, config.threads);
        let mut job = Running::spawn(&mut command);
        let ready = loop {
            let line = job.next_stdout_line(READY_TIMEOUT);
            if line.contains("\"event\":\"ready\"") {
                let value: Value = serde_json::from_str(&line).expect("the ready line is JSON");
                break parse::<Ready>(value);
            }
        };
        HeldJob {
            job,
            config: *config,
            ready,
            truth_file,
            go_file,
            dir,
        }
    }
}

impl HeldJob {
    pub fn pid(&self) -> u32 {
        self.job.pid() as u32
    }

    /// Lets the timed iterations begin.
    pub fn go(&self) {
        std::fs::write(&self.go_file, b"").expect("create the go file");
    }

    /// The timed iterations that ended so far.
    pub fn iterations(&self) -> Vec<Iteration> {
        read_truth_file(&self.truth_file)
            .into_iter()
            .filter(|l| l["event"] == "iteration")
            .map(parse)
            .collect()
    }
}

/// A recorded run of the job: tprof's report (JSON and text) and the job's
/// own account of what happened.
pub struct RealRun {
    pub config: JobConfig,
    pub record: Finished,
    pub report: Report,
    /// The same report as `tprof report --json` printed it, for fields the
    /// typed [`Report`] does not decode.
    pub json: Value,
    /// `tprof report` as a person reads it.
    pub text: String,
    pub truth: JobTruth,
    pub recording: PathBuf,
    /// Holds the recording and truth file until the test ends.
    pub dir: TempDir,
}

impl RealRun {
    fn read(
        config: JobConfig,
        record: Finished,
        recording: PathBuf,
        truth: &Path,
        dir: TempDir,
    ) -> RealRun {
        let json = report_json(&recording);
        let report = Report::from_json(json.clone());
        let out = tprof()
            .arg("report")
            .arg(&recording)
            .output()
            .expect("run tprof report");
        assert!(
            out.status.success(),
            "tprof report failed: {}",
            crate::show(&out)
        );
        RealRun {
            config,
            record,
            report,
            json,
            text: String::from_utf8_lossy(&out.stdout).into_owned(),
            truth: JobTruth::from_lines(&read_truth_file(truth)),
            recording,
            dir,
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("ground truth line: {e}: {v}"))
}

/// What train_job.py says about itself (see its docstring).
#[derive(Debug)]
pub struct JobTruth {
    pub config: JobSettings,
    /// Every worker process it started, across epochs, from worker_init_fn.
    pub workers: Vec<WorkerStart>,
    /// Each worker's threads, as last reported.
    pub worker_threads: Vec<WorkerThreads>,
    /// Each DataLoader iterator the job made: one per epoch without
    /// persistent_workers.
    pub epochs: Vec<Epoch>,
    pub ready: Ready,
    pub summary: Summary,
}

#[derive(Debug, Deserialize)]
pub struct JobSettings {
    pub pid: u32,
    pub num_workers: u32,
    /// "none", "real" or "stand-in" (no accelerator: a copy in its place).
    pub pin_memory_thread: String,
    pub torch_threads: u32,
    pub usable_cores: u32,
}

#[derive(Debug, Deserialize)]
pub struct WorkerStart {
    pub id: u32,
    pub pid: u32,
    pub ppid: u32,
    pub ts_ns: u64,
}

#[derive(Debug, Deserialize)]
pub struct Epoch {
    pub epoch: u32,
    pub worker_pids: Vec<u32>,
    pub pin_memory_tid: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct WorkerThreads {
    pub pid: u32,
    pub threads: Vec<ThreadInfo>,
}

#[derive(Debug, Deserialize)]
pub struct ThreadInfo {
    pub tid: u32,
    pub name: String,
    /// Started by Python (threading knows it), not by a native library.
    pub python: bool,
}

#[derive(Debug, Deserialize)]
pub struct Ready {
    pub worker_pids: Vec<u32>,
    pub pin_memory_tid: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct Iteration {
    pub start_ns: u64,
    pub batch_ns: u64,
    pub end_ns: u64,
}

#[derive(Debug, Deserialize)]
pub struct Summary {
    pub iterations: Vec<Iteration>,
    /// The warm-up iterations before the timed ones (before `ready`).
    #[serde(default)]
    pub warmup_iterations: Vec<Iteration>,
    pub iterations_per_s: f64,
    pub epochs: u32,
    pub pin_memory_tid: Option<u32>,
    pub main_threads: Vec<ThreadInfo>,
}

impl JobTruth {
    fn from_lines(lines: &[Value]) -> JobTruth {
        let of = |event: &'static str| lines.iter().filter(move |l| l["event"] == event);
        let one = |event: &'static str| -> Value {
            of(event).next().cloned().unwrap_or_else(|| {
                panic!("no {event:?} line in the job's ground truth: {lines:#?}")
            })
        };
        let mut worker_threads: Vec<WorkerThreads> = Vec::new();
        for line in of("worker_threads") {
            let latest: WorkerThreads = parse(line.clone());
            worker_threads.retain(|w| w.pid != latest.pid);
            worker_threads.push(latest);
        }
        JobTruth {
            config: parse(one("config")),
            workers: of("worker_start").map(|l| parse(l.clone())).collect(),
            worker_threads,
            epochs: of("epoch").map(|l| parse(l.clone())).collect(),
            ready: parse(one("ready")),
            summary: parse(one("summary")),
        }
    }

    /// Pids of every worker process, across epochs.
    pub fn worker_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.workers.iter().map(|w| w.pid).collect();
        pids.sort_unstable();
        pids
    }

    /// The pin-memory threads, one per DataLoader iterator, in tid order.
    pub fn pin_memory_tids(&self) -> Vec<u32> {
        let mut tids: Vec<u32> = self
            .epochs
            .iter()
            .filter_map(|e| e.pin_memory_tid)
            .collect();
        tids.sort_unstable();
        tids.dedup();
        tids
    }
}

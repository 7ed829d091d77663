//! The verdict's rules, one table each: the job that fires a rule, the
//! nearest jobs that must not (each threshold approached from below), and
//! how the findings rank. Jobs are [`Summary`] values built by hand
//! ([`Job`]), so each case states exactly what the rule sees.
//!
//! What is checked is behaviour: which findings, in which order, what share
//! of the trainer's time each explains, the numbers their evidence cites and
//! the settings their fixes change. Titles, fixes and prose are free to
//! change. Thresholds are the rules' own constants, so a case "at the
//! threshold" follows a retuned one.
//!
//! The rules read the training phase (analysis::pipeline); here it is the
//! whole window, which every thread lives, and [`Job::findings`] derives
//! the phase from the hand-built `Summary` before diagnosing.

use super::{
    CONTENDED, Finding, FindingId, GPU_BUSY_PCT, LEADING, OVERSUBSCRIBED, POOL_COST,
    POOLS_CONTENDED, SATURATED_UTIL_PCT, STARVED, SettingValue, Severity, TRAINER_BUSY,
    TRAINER_QUEUED, diagnose, severity,
};
use crate::analysis::{
    DeviceStats, IoStat, Summary, ThreadStats,
    cuda::CudaFinding,
    gpu::GpuStats,
    pipeline::{PhaseThread, PoolGroup},
    roles::{PoolLibrary, Role},
    steps::Blame,
    summarize,
};
use crate::model::{Breakdown, Model, ThreadKey};

/// How far below (or above) a threshold the nearest non-firing (firing)
/// case sits.
const NEAR: f64 = 1e-6;

/// The trainer's tid and pid.
const TRAINER: u32 = 1;

/// A job as `diagnose` sees it. Every thread lives the whole window of
/// 1 s, so a thread's seconds are also shares of its life.
#[derive(Clone)]
struct Job(Summary, PoolSpin);

/// The share of pool threads' on-CPU time spent spinning for work.
#[derive(Clone, Copy, Default)]
struct PoolSpin(f64);

impl Job {
    /// A job on `cores` usable cores with nothing in it yet.
    fn on(cores: f64) -> Job {
        let mut s = summarize(&Model::default());
        s.duration_s = 1.0;
        s.cores_effective = cores;
        s.cores_source = "machine";
        Job(s, PoolSpin::default())
    }

    fn thread(mut self, tid: u32, pid: u32, role: Role, on_cpu: f64, runnable: f64) -> Job {
        self.0.threads.push(ThreadStats {
            pid,
            tid,
            key: ThreadKey { tid, start_ns: 0 },
            comm: role.name().to_string(),
            depth: usize::from(pid != TRAINER),
            lifetime_s: 1.0,
            on_cpu_s: on_cpu,
            runnable_s: runnable,
            blocked_s: 1.0 - on_cpu - runnable,
            blocked_interruptible_s: 1.0 - on_cpu - runnable,
            blocked_uninterruptible_s: 0.0,
            io_s: 0.0,
            futex_s: 0.0,
            sleep_s: 1.0 - on_cpu - runnable,
            read_bytes: 0,
            write_bytes: 0,
            voluntary_switches: 0,
            involuntary_switches: 0,
            exited: false,
        });
        self.0
            .roles
            .by_thread
            .insert(ThreadKey { tid, start_ns: 0 }, role);
        self
    }

    /// The trainer: on a CPU and waiting for one these shares of its life.
    fn trainer(mut self, on_cpu: f64, runnable: f64) -> Job {
        self.0.roles.trainer = Some(ThreadKey {
            tid: TRAINER,
            start_ns: 0,
        });
        self.0.steps.trainer_tid = Some(TRAINER);
        self.thread(TRAINER, TRAINER, Role::Trainer, on_cpu, runnable)
    }

    /// `n` single-threaded data-worker processes (pids 10, 11, …), each
    /// with these shares of its life.
    fn workers(mut self, n: u32, on_cpu: f64, runnable: f64) -> Job {
        for pid in 10..10 + n {
            self = self.thread(pid, pid, Role::DataWorker, on_cpu, runnable);
        }
        self
    }

    /// `per_worker` pool threads in each of the first `workers` workers'
    /// processes (tids 100, 101, …), each with these shares of its life.
    fn pools(mut self, workers: u32, per_worker: u32, shares: [f64; 3]) -> Job {
        let [on_cpu, runnable, futex] = shares;
        let mut tid = 100;
        for pid in 10..10 + workers {
            for _ in 0..per_worker {
                self = self.thread(tid, pid, Role::Pool, on_cpu, runnable);
                let t = self.0.threads.last_mut().expect("just added");
                t.futex_s = futex;
                t.sleep_s -= futex;
                tid += 1;
            }
        }
        self
    }

    /// `count` batches waited for, the trainer waiting `frac` of its time,
    /// and what the delivering workers did meanwhile.
    fn steps(mut self, count: usize, frac: f64, blame: Blame) -> Job {
        self.0.steps.count = count;
        self.0.steps.data_wait_frac = frac;
        self.0.steps.data_wait_s = frac;
        self.0.steps.blame = blame;
        self
    }

    /// The job's average threads on a CPU and waiting for one.
    fn demand(mut self, on_cpu: f64, runnable: f64) -> Job {
        self.0.job_on_cpu = on_cpu;
        self.0.job_runnable = runnable;
        self
    }

    fn disk(mut self, util_pct: f64) -> Job {
        self.0.devices.push(DeviceStats {
            name: "vda".into(),
            window: IoStat {
                r_s: 250.0,
                rmb_s: 62.5,
                r_await_ms: 4.0,
                aqu_sz: 1.5,
                util_pct,
                ..IoStat::default()
            },
            series: vec![],
            users: vec![],
        });
        self
    }

    fn gpu(mut self, util_mean_pct: Option<f64>) -> Job {
        self.0.gpus.push(GpuStats {
            index: self.0.gpus.len() as u32,
            name: "GPU".into(),
            util_mean_pct,
            idle_frac: None,
            idle_intervals: vec![],
            mem_peak_bytes: None,
            memory_total_bytes: None,
            pcie_rx_bytes_per_s: None,
            pcie_tx_bytes_per_s: None,
            sm_clock_mhz: None,
            power_w: None,
            utilization_source: "samples".into(),
            missing: vec![],
            processes: vec![],
        });
        self
    }

    /// A finding of analysis::cuda: `id` with its severity and the time its
    /// copies blocked the copying threads.
    fn cuda(mut self, id: FindingId, severity: Severity, blocked_s: f64) -> Job {
        self.0.cuda.findings.push(CudaFinding {
            id,
            severity,
            evidence: format!("{id} evidence"),
            fix: format!("{id} fix"),
            copies: 40,
            bytes: 40 << 20,
            blocked_s,
        });
        self
    }

    /// Pool threads spend this share of their on-CPU time spinning.
    fn with_spin(mut self, share: f64) -> Job {
        self.1 = PoolSpin(share);
        self
    }

    fn with(mut self, change: impl FnOnce(&mut Summary)) -> Job {
        change(&mut self.0);
        self
    }

    fn findings(&self) -> Vec<Finding> {
        diagnose(&self.with_phase())
    }

    /// The summary with its training phase: the whole 1 s window, each
    /// thread's time in it as built, the job's demand and data waits as
    /// set, pool threads as OpenMP pools in their processes.
    fn with_phase(&self) -> Summary {
        let mut s = self.0.clone();
        let ns = |secs: f64| (secs.max(0.0) * 1e9).round() as u64;
        let p = &mut s.pipeline;
        p.start_ns = 0;
        p.end_ns = ns(s.duration_s);
        p.whole_window = true;
        p.data_wait_frac = s.steps.data_wait_frac;
        p.threads = s
            .threads
            .iter()
            .map(|t| PhaseThread {
                key: t.key,
                tid: t.tid,
                pid: t.pid,
                role: s.roles.of(t.tid),
                in_worker: t.pid != TRAINER,
                // A case that changes one share keeps the thread's life:
                // other sleep takes up the difference.
                time: Breakdown {
                    on_cpu: ns(t.on_cpu_s),
                    runnable: ns(t.runnable_s),
                    io: ns(t.io_s),
                    futex: ns(t.futex_s),
                    sleep: ns(t.lifetime_s - t.on_cpu_s - t.runnable_s - t.io_s - t.futex_s),
                },
                spin_share: if s.roles.of(t.tid) == Role::Pool {
                    self.1.0
                } else {
                    0.0
                },
            })
            .collect();
        let mut workers: Vec<u32> = p
            .threads
            .iter()
            .filter(|t| t.role == Role::DataWorker)
            .map(|t| t.pid)
            .collect();
        workers.sort_unstable();
        workers.dedup();
        p.workers.at_a_time = workers.len();
        p.workers.pids = workers;
        p.pools = Vec::new();
        for t in p.threads.iter().filter(|t| t.role == Role::Pool) {
            match p.pools.iter_mut().find(|g| g.pid == t.pid) {
                Some(g) => g.threads += 1,
                None => p.pools.push(PoolGroup {
                    pid: t.pid,
                    in_worker: t.in_worker,
                    library: PoolLibrary::OpenMp,
                    threads: 1,
                }),
            }
        }
        p.settle(&s.roles, s.cores_effective);
        p.cpu.job_on_cpu = s.job_on_cpu;
        p.cpu.job_runnable = s.job_runnable;
        s
    }

    fn finding(&self, id: &str) -> Option<Finding> {
        self.findings().into_iter().find(|f| f.id == id)
    }
}

fn blame(on_cpu: f64, runnable: f64, io: f64, futex: f64) -> Blame {
    Blame {
        on_cpu,
        runnable,
        io,
        futex,
        sleep: 1.0 - on_cpu - runnable - io - futex,
    }
}

fn ids(findings: &[Finding]) -> Vec<&'static str> {
    findings.iter().map(|f| f.id.name()).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// One row of a rule's table: a job, and what the rule must make of it:
/// `Some(explains)` when it fires, `None` when it must not.
struct Case {
    name: &'static str,
    job: Job,
    explains: Option<f64>,
}

fn case(name: &'static str, job: Job, explains: Option<f64>) -> Case {
    Case {
        name,
        job,
        explains,
    }
}

/// Runs a rule's table; on failure names each case that went wrong.
fn check_table(id: &str, cases: Vec<Case>) {
    let mut wrong = Vec::new();
    for c in &cases {
        let got = c.job.finding(id).map(|f| f.explains_frac);
        let right = match (got, c.explains) {
            (Some(got), Some(want)) => close(got, want),
            (None, None) => true,
            _ => false,
        };
        if !right {
            wrong.push(format!(
                "{}: explains {got:?}, expected {:?}; all findings: {:?}",
                c.name,
                c.explains,
                ids(&c.job.findings())
            ));
        }
    }
    assert!(wrong.is_empty(), "{id}:\n  {}", wrong.join("\n  "));
}

/// Panics unless one of the finding's evidence lines mentions `text`.
fn assert_cites(f: &Finding, text: &str) {
    assert!(
        f.evidence.iter().any(|e| e.contains(text)),
        "{} does not cite {text:?}: {:#?}",
        f.id,
        f.evidence
    );
}

// too_many_workers

/// Four workers on two cores, runnable half their life; the trainer waits
/// half its time for data while the delivering worker waits for a CPU.
fn crowded_workers() -> Job {
    Job::on(2.0)
        .trainer(0.1, 0.0)
        .workers(4, 0.25, 0.5)
        .demand(1.0, 3.0)
        .steps(10, 0.5, blame(0.2, 0.8, 0.0, 0.0))
}

#[test]
fn too_many_workers_table() {
    let base = crowded_workers;
    check_table(
        "too_many_workers",
        vec![
            // The data-wait part: 0.5 waiting × 0.8 of it behind a CPU.
            case("starved behind the CPU", base(), Some(0.4)),
            case(
                "starved exactly at STARVED",
                base().with(|s| s.steps.data_wait_frac = STARVED),
                Some(STARVED * 0.8),
            ),
            case(
                "data waits just under STARVED",
                base().with(|s| s.steps.data_wait_frac = STARVED - NEAR),
                None,
            ),
            case(
                "no batch waited for",
                base().with(|s| s.steps.count = 0),
                None,
            ),
            case(
                "blame just at LEADING",
                base().with(|s| s.steps.blame.runnable = LEADING + NEAR),
                Some(0.5 * (LEADING + NEAR)),
            ),
            case(
                "blame just under LEADING",
                base().with(|s| s.steps.blame.runnable = LEADING - NEAR),
                None,
            ),
            case(
                "demand just at OVERSUBSCRIBED per core",
                base().demand(0.0, 2.0 * OVERSUBSCRIBED + NEAR),
                Some(0.4),
            ),
            case(
                "demand just under OVERSUBSCRIBED per core",
                base().demand(0.0, 2.0 * OVERSUBSCRIBED - NEAR),
                None,
            ),
            // Workers on a CPU 0.25 of their life wait CONTENDED of the
            // time they want one when runnable 0.25 × C / (1 − C).
            case(
                "workers waiting just over CONTENDED of their demand",
                Job::on(2.0)
                    .trainer(0.1, 0.0)
                    .workers(4, 0.25, 0.25 * CONTENDED / (1.0 - CONTENDED) + NEAR)
                    .demand(1.0, 3.0)
                    .steps(10, 0.5, blame(0.2, 0.8, 0.0, 0.0)),
                Some(0.4),
            ),
            case(
                "workers waiting just under CONTENDED of their demand",
                Job::on(2.0)
                    .trainer(0.1, 0.0)
                    .workers(4, 0.25, 0.25 * CONTENDED / (1.0 - CONTENDED) - NEAR)
                    .demand(1.0, 3.0)
                    .steps(10, 0.5, blame(0.2, 0.8, 0.0, 0.0)),
                None,
            ),
            // The measured CPU calls for as many workers as run: none too
            // many. Workers needing r = 4 × 0.25 / 0.5 = 2 times the
            // trainer's CPU fill 2 × 2 / 3 = 1.33 workers on 2 cores.
            case(
                "the advice keeps the workers there are",
                Job::on(2.0)
                    .trainer(0.5, 0.0)
                    .workers(2, 0.5, 0.5)
                    .demand(1.5, 3.0)
                    .steps(10, 0.5, blame(0.2, 0.8, 0.0, 0.0)),
                None,
            ),
            // Not starved, but the trainer queues behind the job: the part
            // blamed on the workers is their share of the job's runnable
            // time (2.0 of 3.0 thread-seconds).
            case(
                "trainer queued at TRAINER_QUEUED, no data waits",
                Job::on(2.0)
                    .trainer(0.5, TRAINER_QUEUED)
                    .workers(4, 0.25, 0.5)
                    .demand(1.0, 3.0),
                Some(TRAINER_QUEUED * 2.0 / 3.0),
            ),
            case(
                "trainer queued just under TRAINER_QUEUED, no data waits",
                Job::on(2.0)
                    .trainer(0.5, TRAINER_QUEUED - NEAR)
                    .workers(4, 0.25, 0.5)
                    .demand(1.0, 3.0),
                None,
            ),
        ],
    );
}

#[test]
fn too_many_workers_evidence_and_advice() {
    let f = crowded_workers().finding("too_many_workers").unwrap();
    assert_eq!(f.severity, Severity::High);
    assert!(f.title.contains("4 worker processes"), "{}", f.title);
    assert_cites(&f, "waited 50% of its time for data");
    assert_cites(&f, "waiting for a CPU 80%");
    assert_cites(&f, "2.0 CPUs per usable core (1.0 running + 3.0 runnable");
    assert_cites(&f, "waited for a CPU 67% of the time they wanted one");
    // Per batch the workers burn 10 times the trainer's CPU (4 × 0.25
    // against 0.1 CPU-s): on 2 cores a step takes at least (1 + 10) / 2 =
    // 5.5 times the trainer's CPU, in which 10 / 5.5 = 1.82 workers busy
    // all the time make a batch. Not cores − 1.
    assert_cites(
        &f,
        "(1 + 10.00) / 2.0 = 5.50 of that, in which 1.82 workers busy all the time make a batch: num_workers=2",
    );
    assert!(f.fix.contains("num_workers=2 (from 4)"), "{}", f.fix);
    assert_eq!(f.changes.len(), 1);
    let change = f.changes[0];
    assert_eq!(change.setting, "num_workers");
    assert_eq!(change.from, Some(SettingValue::Count(4)));
    assert_eq!(change.to, SettingValue::Count(2));
}

#[test]
fn too_many_workers_advice_follows_the_cpu_per_batch() {
    // The trainer needs 0.2 s of CPU per batch against the workers' 0.1 s:
    // one worker keeps up, on any number of cores.
    let f = Job::on(8.0)
        .trainer(0.2, 0.0)
        .workers(4, 0.025, 0.5)
        .demand(1.0, 15.0)
        .steps(1, 0.5, blame(0.2, 0.8, 0.0, 0.0))
        .finding("too_many_workers")
        .unwrap();
    assert!(f.fix.contains("num_workers=1 (from 4)"), "{}", f.fix);
    // Workers needing 2.8 times the trainer's CPU: three, when the cores
    // allow.
    let f = Job::on(8.0)
        .trainer(0.1, 0.0)
        .workers(4, 0.07, 0.5)
        .demand(1.0, 15.0)
        .steps(1, 0.5, blame(0.2, 0.8, 0.0, 0.0))
        .finding("too_many_workers")
        .unwrap();
    assert!(f.fix.contains("num_workers=3 (from 4)"), "{}", f.fix);
}

// thread_oversubscription

/// Two workers, each with two pool threads that wait for a CPU 40% and at
/// barriers 20% of their life: six threads on two cores.
fn pooled_workers() -> Job {
    Job::on(2.0)
        .trainer(0.1, 0.0)
        .workers(2, 0.25, 0.5)
        .pools(2, 2, [0.1, 0.4, 0.2])
        .demand(1.0, 3.0)
        .steps(10, 0.5, blame(0.2, 0.4, 0.0, 0.4))
}

#[test]
fn thread_oversubscription_table() {
    let base = pooled_workers;
    let pools = |shares| {
        Job::on(2.0)
            .trainer(0.1, 0.0)
            .workers(2, 0.25, 0.5)
            .pools(2, 2, shares)
            .demand(1.0, 3.0)
            .steps(10, 0.5, blame(0.2, 0.4, 0.0, 0.4))
    };
    check_table(
        "thread_oversubscription",
        vec![
            // 0.5 waiting × (0.4 futex + 0.4 runnable).
            case("starved behind pools", base(), Some(0.4)),
            case(
                "no pool threads",
                Job::on(2.0)
                    .trainer(0.1, 0.0)
                    .workers(2, 0.25, 0.5)
                    .demand(1.0, 3.0)
                    .steps(10, 0.5, blame(0.2, 0.4, 0.0, 0.4)),
                None,
            ),
            case(
                "threads exactly twice the cores",
                base().with(|s| s.cores_effective = 3.0),
                Some(0.4),
            ),
            case(
                "threads under twice the cores",
                base().with(|s| s.cores_effective = 3.0 + NEAR),
                None,
            ),
            case(
                "pools contended just at POOLS_CONTENDED",
                pools([0.1, POOLS_CONTENDED - 0.2 + NEAR, 0.2]),
                Some(0.4),
            ),
            case(
                "pools contended just under POOLS_CONTENDED",
                pools([0.1, POOLS_CONTENDED - 0.2 - NEAR, 0.2]),
                None,
            ),
            // Four pool threads working w each on 2 cores: 2 × w of the
            // cores' time.
            case(
                "contended pools working just at POOL_COST",
                pools([POOL_COST / 2.0 + NEAR, 0.4, 0.2]),
                Some(0.4),
            ),
            case(
                "contended pools working just under POOL_COST",
                pools([POOL_COST / 2.0 - NEAR, 0.4, 0.2]),
                None,
            ),
            // A pool in the trainer's process (torch's OpenMP pool) while
            // the workers need every core: more threads than the one core
            // the advice leaves the trainer, however little it works.
            case(
                "the trainer's pool is bigger than the cores left to it",
                Job::on(2.0)
                    .trainer(0.1, 0.0)
                    .workers(2, 0.25, 0.5)
                    .pools(2, 1, [0.0, 0.5, 0.5])
                    .thread(50, TRAINER, Role::Pool, 0.01, 0.5)
                    .demand(1.0, 3.0)
                    .steps(10, 0.5, blame(0.2, 0.4, 0.0, 0.4)),
                Some(0.4),
            ),
            case(
                "idle pools in the workers only",
                Job::on(2.0)
                    .trainer(0.1, 0.0)
                    .workers(2, 0.25, 0.5)
                    .pools(2, 1, [0.0, 0.5, 0.5])
                    .demand(1.0, 3.0)
                    .steps(10, 0.5, blame(0.2, 0.4, 0.0, 0.4)),
                None,
            ),
            case(
                "futex + runnable blame just at LEADING",
                base().with(|s| {
                    s.steps.blame.futex = LEADING / 2.0 + NEAR;
                    s.steps.blame.runnable = LEADING / 2.0;
                }),
                Some(0.5 * (LEADING + NEAR)),
            ),
            // The base job wants 4.0 CPUs on 2 cores: starved, it is named
            // by its demand when the blame falls short.
            case(
                "blame just under LEADING, the job wanting 2 CPUs per core",
                base().with(|s| {
                    s.steps.blame.futex = LEADING / 2.0 - NEAR;
                    s.steps.blame.runnable = LEADING / 2.0;
                }),
                Some(0.5 * (LEADING - NEAR)),
            ),
            case(
                "blame just under LEADING, the job wanting OVERSUBSCRIBED CPUs per core",
                base().with(|s| {
                    s.steps.blame.futex = LEADING / 2.0 - NEAR;
                    s.steps.blame.runnable = LEADING / 2.0;
                    s.job_runnable = 2.0 * OVERSUBSCRIBED - 1.0;
                }),
                Some(0.5 * (LEADING - NEAR)),
            ),
            case(
                "blame just under LEADING, the job wanting just under OVERSUBSCRIBED",
                base().with(|s| {
                    s.steps.blame.futex = LEADING / 2.0 - NEAR;
                    s.steps.blame.runnable = LEADING / 2.0;
                    s.job_runnable = 2.0 * OVERSUBSCRIBED - 1.0 - NEAR;
                }),
                None,
            ),
            case(
                "data waits just under STARVED",
                base().with(|s| s.steps.data_wait_frac = STARVED - NEAR),
                None,
            ),
            // Not starved, the trainer queued: the pools' share of the
            // job's runnable time is 4 × 0.4 of 3.0 thread-seconds.
            case(
                "trainer queued at TRAINER_QUEUED, no data waits",
                base().with(|s| {
                    s.steps.count = 0;
                    s.steps.data_wait_frac = 0.0;
                    s.threads[0].runnable_s = TRAINER_QUEUED;
                }),
                Some(TRAINER_QUEUED * 1.6 / 3.0),
            ),
        ],
    );
}

#[test]
fn thread_oversubscription_changes_the_pools_to_the_cores_left() {
    let f = pooled_workers().finding("thread_oversubscription").unwrap();
    // Workers needing 9 times the trainer's CPU take 1.8 of the 2 cores:
    // one thread for the trainer's pools.
    let settings: Vec<(&str, SettingValue)> = f.changes.iter().map(|c| (c.setting, c.to)).collect();
    assert_eq!(
        settings,
        [
            ("OMP_NUM_THREADS", SettingValue::Count(1)),
            ("MKL_NUM_THREADS", SettingValue::Count(1))
        ]
    );
    assert!(
        f.changes.iter().all(|c| c.from.is_none()),
        "{:?}",
        f.changes
    );
    assert!(f.fix.contains("OMP_NUM_THREADS=1"), "{}", f.fix);
    assert!(
        f.fix.contains("cv2.setNumThreads(1)"),
        "the workers' pools worked: {}",
        f.fix
    );
}

#[test]
fn thread_oversubscription_evidence() {
    let f = pooled_workers().finding("thread_oversubscription").unwrap();
    assert_eq!(f.severity, Severity::High);
    assert_cites(&f, "waited 50% of its time for data");
    assert_cites(
        &f,
        "40% of their time waiting for a CPU and 20% in futex waits",
    );
    assert_cites(&f, "40% in futex waits and 40% runnable");
    assert_cites(&f, "waited for a CPU 0% of its time");
}

// disk_bound

/// One worker reading for a trainer that waits half its time, the worker
/// in block IO 70% of those waits, on a disk half busy.
fn reading_worker() -> Job {
    Job::on(2.0)
        .trainer(0.1, 0.0)
        .workers(1, 0.1, 0.0)
        .demand(0.2, 0.0)
        .disk(50.0)
        .steps(10, 0.5, blame(0.1, 0.0, 0.7, 0.0))
}

#[test]
fn disk_bound_table() {
    let base = reading_worker;
    let no_io_blame = |s: &mut Summary| s.steps.blame.io = 0.0;
    check_table(
        "disk_bound",
        vec![
            case("starved behind block IO", base(), Some(0.35)),
            case(
                "io blame just at LEADING",
                base().with(|s| s.steps.blame.io = LEADING + NEAR),
                Some(0.5 * (LEADING + NEAR)),
            ),
            case(
                "io blame just under LEADING, disk not saturated",
                base().with(|s| s.steps.blame.io = LEADING - NEAR),
                None,
            ),
            // A saturated disk counts as half the waits whatever the blame.
            case(
                "disk saturated, no io blame",
                base()
                    .with(no_io_blame)
                    .with(|s| s.devices[0].window.util_pct = SATURATED_UTIL_PCT),
                Some(0.25),
            ),
            case(
                "disk just under saturated, no io blame",
                base()
                    .with(no_io_blame)
                    .with(|s| s.devices[0].window.util_pct = SATURATED_UTIL_PCT - NEAR),
                None,
            ),
            case(
                "the busiest of two disks decides",
                base().with(no_io_blame).disk(SATURATED_UTIL_PCT),
                Some(0.25),
            ),
            case(
                "data waits just under STARVED",
                base()
                    .with(|s| s.devices[0].window.util_pct = 100.0)
                    .with(|s| s.steps.data_wait_frac = STARVED - NEAR),
                None,
            ),
        ],
    );
}

#[test]
fn disk_bound_evidence() {
    let f = reading_worker().finding("disk_bound").unwrap();
    assert_eq!(f.severity, Severity::High);
    assert_cites(&f, "waited 50% of its time for data");
    assert_cites(&f, "in block IO 70% of the time");
    assert_cites(
        &f,
        "vda: 50% util, 250 r/s, 62.5 MB/s read, r_await 4.00 ms, aqu-sz 1.50",
    );
}

// decode_bound

/// One worker on a CPU 80% of the trainer's waits, one of two cores idle.
fn decoding_worker() -> Job {
    Job::on(2.0)
        .trainer(0.1, 0.0)
        .workers(1, 0.9, 0.0)
        .demand(1.0, 0.0)
        .steps(10, 0.5, blame(0.8, 0.0, 0.0, 0.0))
        .with(|s| s.steps.worker_top_functions = vec![("decode_jpeg".into(), 0.75)])
}

#[test]
fn decode_bound_table() {
    let base = decoding_worker;
    check_table(
        "decode_bound",
        vec![
            case("starved, worker on a CPU, a core idle", base(), Some(0.4)),
            case(
                "exactly half a core spare",
                base().demand(1.0, 0.5),
                Some(0.4),
            ),
            case(
                "just under half a core spare",
                base().demand(1.0, 0.5 + NEAR),
                None,
            ),
            case(
                "pools spinning for work leave their core spare",
                base()
                    .pools(1, 1, [0.6, 0.0, 0.0])
                    .demand(1.6, 0.0)
                    .with_spin(1.0),
                Some(0.4),
            ),
            case(
                "the same pools working",
                base().pools(1, 1, [0.6, 0.0, 0.0]).demand(1.6, 0.0),
                None,
            ),
            case(
                "on-CPU blame just at LEADING",
                base().with(|s| s.steps.blame.on_cpu = LEADING + NEAR),
                Some(0.5 * (LEADING + NEAR)),
            ),
            case(
                "on-CPU blame just under LEADING",
                base().with(|s| s.steps.blame.on_cpu = LEADING - NEAR),
                None,
            ),
            case(
                "data waits just under STARVED",
                base().with(|s| s.steps.data_wait_frac = STARVED - NEAR),
                None,
            ),
        ],
    );
}

#[test]
fn decode_bound_evidence_and_advice() {
    let f = decoding_worker().finding("decode_bound").unwrap();
    assert_eq!(f.severity, Severity::High);
    assert_cites(&f, "on a CPU 80% of the time");
    assert_cites(&f, "1.0 of 2.0 usable cores (machine) were idle");
    assert_cites(&f, "decode_jpeg (75%)");
    // One worker and one idle core: two workers.
    assert!(f.fix.contains("num_workers to 2"), "{}", f.fix);
    // Half a core idle still makes room for one more worker.
    let f = decoding_worker()
        .demand(1.0, 0.5)
        .finding("decode_bound")
        .unwrap();
    assert!(f.fix.contains("num_workers to 2"), "{}", f.fix);
    // Three idle cores: four.
    let f = decoding_worker()
        .with(|s| s.cores_effective = 4.0)
        .finding("decode_bound")
        .unwrap();
    assert!(f.fix.contains("num_workers to 4"), "{}", f.fix);
}

// trainer_cpu_bound

/// A trainer on a CPU 70% of its life that hardly waits for data.
fn busy_trainer() -> Job {
    Job::on(2.0)
        .trainer(0.7, 0.1)
        .workers(2, 0.1, 0.0)
        .demand(0.9, 0.1)
        .steps(10, 0.05, blame(0.5, 0.0, 0.0, 0.0))
}

#[test]
fn trainer_cpu_bound_table() {
    let base = busy_trainer;
    check_table(
        "trainer_cpu_bound",
        vec![
            case("trainer busy, data keeps up", base(), Some(0.7)),
            case(
                "trainer busy exactly TRAINER_BUSY",
                base().with(|s| s.threads[0].on_cpu_s = TRAINER_BUSY),
                Some(TRAINER_BUSY),
            ),
            case(
                "trainer busy just under TRAINER_BUSY",
                base().with(|s| s.threads[0].on_cpu_s = TRAINER_BUSY - NEAR),
                None,
            ),
            case(
                "data waits exactly STARVED",
                base().with(|s| s.steps.data_wait_frac = STARVED),
                None,
            ),
            case(
                "no steps: a lone busy thread is still the trainer",
                base().with(|s| s.steps.count = 0),
                Some(0.7),
            ),
            case(
                "no trainer",
                base().with(|s| s.steps.trainer_tid = None),
                None,
            ),
        ],
    );
}

#[test]
fn trainer_cpu_bound_evidence() {
    let f = busy_trainer().finding("trainer_cpu_bound").unwrap();
    assert_eq!(f.severity, Severity::High);
    assert!(f.title.contains("70%"), "{}", f.title);
    assert_cites(&f, "ran 0.70 s and waited for a CPU 0.10 s of its 1.00 s");
    assert_cites(&f, "only 5% of its time for data");
}

// gpu_bound

#[test]
fn gpu_bound_table() {
    let base = || {
        busy_trainer()
            .with(|s| s.threads[0].on_cpu_s = 0.2)
            .gpu(Some(90.0))
    };
    check_table(
        "gpu_bound",
        vec![
            case("GPU busy, data keeps up", base(), Some(0.9)),
            case(
                "GPU exactly GPU_BUSY_PCT",
                busy_trainer().gpu(Some(GPU_BUSY_PCT)),
                Some(GPU_BUSY_PCT / 100.0),
            ),
            case(
                "GPU just under GPU_BUSY_PCT",
                busy_trainer().gpu(Some(GPU_BUSY_PCT - NEAR)),
                None,
            ),
            case(
                "the busiest GPU decides",
                busy_trainer().gpu(Some(10.0)).gpu(Some(85.0)),
                Some(0.85),
            ),
            case("no utilization series", busy_trainer().gpu(None), None),
            case(
                "data waits exactly STARVED",
                base().with(|s| s.steps.data_wait_frac = STARVED),
                None,
            ),
        ],
    );
    let f = base().finding("gpu_bound").unwrap();
    assert_eq!(f.severity, Severity::Low, "GPU-bound is never urgent");
    assert_cites(&f, "mean GPU utilization 90%");
}

// The CUDA copy findings

#[test]
fn cuda_findings_explain_the_trainers_blocked_time() {
    let job = busy_trainer()
        .cuda(FindingId::PageableCopies, Severity::High, 0.2)
        .cuda(FindingId::SyncCopies, Severity::Medium, 0.05);
    let pageable = job.finding("pageable_copies").unwrap();
    assert!(close(pageable.explains_frac, 0.2));
    // Severity is analysis::cuda's, not the share's.
    assert_eq!(pageable.severity, Severity::High);
    assert_cites(&pageable, "pageable_copies evidence");
    assert_cites(
        &pageable,
        "40 copies, 40.0 MiB, blocking the copying threads 0.20 s",
    );
    let sync = job.finding("sync_copies").unwrap();
    assert!(close(sync.explains_frac, 0.05));
    assert_eq!(sync.severity, Severity::Medium);
    // Capped at the trainer's whole life; nothing without a trainer.
    let capped = busy_trainer().cuda(FindingId::SyncCopies, Severity::Medium, 3.0);
    assert!(close(
        capped.finding("sync_copies").unwrap().explains_frac,
        1.0
    ));
    let orphan = Job::on(2.0).cuda(FindingId::SyncCopies, Severity::Medium, 0.5);
    assert!(close(
        orphan.finding("sync_copies").unwrap().explains_frac,
        0.0
    ));
}

// Across rules

#[test]
fn severity_by_share_explained() {
    assert_eq!(severity(0.3), Severity::High);
    assert_eq!(severity(0.3 - NEAR), Severity::Medium);
    assert_eq!(severity(0.1), Severity::Medium);
    assert_eq!(severity(0.1 - NEAR), Severity::Low);
    assert_eq!(severity(0.0), Severity::Low);
}

#[test]
fn a_pipeline_that_keeps_up_gets_no_input_finding() {
    // Every worker condition of every input rule, but the trainer neither
    // waits for data nor for a CPU.
    let job = Job::on(2.0)
        .trainer(0.5, 0.0)
        .workers(4, 0.25, 0.5)
        .pools(2, 2, [0.1, 0.4, 0.2])
        .demand(1.0, 3.0)
        .disk(100.0)
        .steps(10, 0.0, blame(0.25, 0.25, 0.25, 0.25));
    assert_eq!(ids(&job.findings()), Vec::<&str>::new());
}

#[test]
fn an_empty_job_gets_no_finding() {
    assert!(Job::on(2.0).findings().is_empty());
    assert!(Job::on(0.0).findings().is_empty());
}

#[test]
fn findings_rank_by_share_explained() {
    // Starved: pools (0.5 × 0.8 futex + runnable = 0.4), a CUDA finding
    // (0.3), and workers queued (0.5 × 0.4 runnable blame = 0.2) in a job
    // of three workers where the CPU measured calls for two.
    let starved = Job::on(2.0)
        .trainer(0.1, 0.0)
        .workers(3, 0.25, 0.5)
        .pools(2, 2, [0.1, 0.4, 0.2])
        .demand(1.0, 3.0)
        .steps(10, 0.5, blame(0.2, 0.4, 0.0, 0.4))
        .cuda(FindingId::PageableCopies, Severity::High, 0.3);
    let found = starved.findings();
    assert_eq!(
        ids(&found),
        [
            "thread_oversubscription",
            "pageable_copies",
            "too_many_workers"
        ]
    );
    let shares: Vec<f64> = found.iter().map(|f| f.explains_frac).collect();
    assert!(
        close(shares[0], 0.4) && close(shares[1], 0.3) && close(shares[2], 0.2),
        "{shares:?}"
    );
    // Not starved: a busy GPU (0.9) over a busy trainer (0.7) over copies.
    let fed = busy_trainer()
        .gpu(Some(90.0))
        .cuda(FindingId::SyncCopies, Severity::Medium, 0.05);
    assert_eq!(
        ids(&fed.findings()),
        ["gpu_bound", "trainer_cpu_bound", "sync_copies"]
    );
}

#[test]
fn ties_keep_the_rules_order() {
    // The trainer busy 90% of its life and the GPU busy 90%: the same
    // share; the trainer's rule, checked first, stays first.
    let job = busy_trainer()
        .with(|s| s.threads[0].on_cpu_s = 0.9)
        .with(|s| s.threads[0].runnable_s = 0.0)
        .gpu(Some(90.0));
    assert_eq!(ids(&job.findings()), ["trainer_cpu_bound", "gpu_bound"]);
}

//! The verdict: findings that name a cause, give the evidence in numbers,
//! and say which fix to try first and what it should change. Ranked by how
//! much of the trainer's time each explains.
//!
//! Every input-pipeline finding needs the trainer to be held up first: it
//! waits for data at least [`STARVED`] of its time, or (for the CPU
//! oversubscription findings) it waits for a CPU at least [`TRAINER_QUEUED`]
//! of its time behind the job's own threads. A pipeline that keeps up gets
//! none of them, however busy its workers look. docs/diagnosis.md
//! explains each rule, its thresholds and its blind spots.

use serde::Serialize;

use super::{Summary, ThreadStats, roles::Role, steps::StepStats};

#[cfg(test)]
mod tests;

/// The trainer waits for data at least this share of its time: the input
/// pipeline is the bottleneck.
pub const STARVED: f64 = 0.10;
/// CPU demand (running + runnable threads) per usable core that counts as
/// oversubscribed.
const OVERSUBSCRIBED: f64 = 1.5;
/// Share of a group's time spent waiting for a CPU that counts as contended.
const CONTENDED: f64 = 0.25;
/// Device utilization that counts as saturated.
const SATURATED_UTIL_PCT: f64 = 85.0;
/// A blame share that makes a cause a leading one.
const LEADING: f64 = 0.35;
/// Mean GPU utilization that counts as GPU-bound.
const GPU_BUSY_PCT: f64 = 80.0;
/// Trainer share of its life on a CPU that makes it CPU-bound.
const TRAINER_BUSY: f64 = 0.60;
/// Trainer share of its life waiting for a CPU that counts as held up by
/// the job's other threads.
const TRAINER_QUEUED: f64 = 0.25;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Low,
    Medium,
    High,
}

fn severity(explains: f64) -> Severity {
    if explains >= 0.3 {
        Severity::High
    } else if explains >= 0.1 {
        Severity::Medium
    } else {
        Severity::Low
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable: too_many_workers, thread_oversubscription, disk_bound,
    /// decode_bound, trainer_cpu_bound, sync_copies, pageable_copies, gpu_bound.
    pub id: &'static str,
    pub title: String,
    pub severity: Severity,
    /// Share of the trainer's time in the window this cause explains.
    pub explains_frac: f64,
    /// The numbers it rests on.
    pub evidence: Vec<String>,
    /// The fix to try first.
    pub fix: String,
    /// What the fix should change, to check it worked.
    pub expect: String,
}

/// What the rules look at, computed once.
struct Facts<'a> {
    s: &'a Summary,
    steps: &'a StepStats,
    cores: f64,
    cores_source: &'static str,
    trainer: Option<&'a ThreadStats>,
    workers: Group,
    pools: Group,
    /// Processes with data-worker threads.
    worker_processes: usize,
    /// Pool threads per process that has any.
    pool_sizes: Vec<(u32, usize)>,
}

/// Sums over a set of threads.
#[derive(Debug, Default)]
struct Group {
    threads: usize,
    life_s: f64,
    on_cpu_s: f64,
    runnable_s: f64,
    futex_s: f64,
    io_s: f64,
}

impl Group {
    fn of<'a>(threads: impl Iterator<Item = &'a ThreadStats>) -> Group {
        let mut g = Group::default();
        for t in threads {
            g.threads += 1;
            g.life_s += t.lifetime_s;
            g.on_cpu_s += t.on_cpu_s;
            g.runnable_s += t.runnable_s;
            g.futex_s += t.futex_s;
            g.io_s += t.io_s;
        }
        g
    }

    fn share(&self, part: f64) -> f64 {
        if self.life_s > 0.0 {
            part / self.life_s
        } else {
            0.0
        }
    }
}

pub fn diagnose(s: &Summary) -> Vec<Finding> {
    let facts = facts(s);
    let mut findings: Vec<Finding> = [
        too_many_workers(&facts),
        thread_oversubscription(&facts),
        disk_bound(&facts),
        decode_bound(&facts),
        trainer_cpu_bound(&facts),
        gpu_bound(&facts),
    ]
    .into_iter()
    .flatten()
    .chain(cuda_findings(&facts))
    .collect();
    findings.sort_by(|a, b| b.explains_frac.total_cmp(&a.explains_frac));
    findings
}

/// The CUDA copy findings (analysis::cuda), in the verdict's terms: what
/// they explain is the trainer's time blocked in those copies and syncs.
fn cuda_findings<'a>(f: &'a Facts) -> impl Iterator<Item = Finding> + 'a {
    let life = f.trainer.map_or(0.0, |t| t.lifetime_s);
    f.s.cuda.findings.iter().map(move |c| {
        let explains = if life > 0.0 { (c.blocked_s / life).min(1.0) } else { 0.0 };
        let title = match c.id {
            "pageable_copies" => "Host-to-device copies from pageable memory: pin_memory is off or ineffective",
            _ => "Pinned copies followed by a blocking sync: the copies do not overlap with compute",
        };
        Finding {
            id: c.id,
            title: title.to_string(),
            severity: if c.severity == "high" { Severity::High } else { Severity::Medium },
            explains_frac: explains,
            evidence: vec![
                c.evidence.clone(),
                format!(
                    "{} copies, {:.1} MiB, blocking the copying threads {:.2} s",
                    c.copies,
                    c.bytes as f64 / (1024.0 * 1024.0),
                    c.blocked_s
                ),
            ],
            fix: c.fix.clone(),
            expect: "The trainer's time in cudaMemcpy and stream syncs falls; the GPU idles less between steps.".into(),
        }
    })
}

fn facts(s: &Summary) -> Facts<'_> {
    let role = |t: &ThreadStats| s.roles.of(t.tid);
    let mut pool_sizes: Vec<(u32, usize)> = Vec::new();
    for t in s.threads.iter().filter(|t| role(t) == Role::Pool) {
        match pool_sizes.iter_mut().find(|(pid, _)| *pid == t.pid) {
            Some((_, n)) => *n += 1,
            None => pool_sizes.push((t.pid, 1)),
        }
    }
    let mut worker_pids: Vec<u32> = s
        .threads
        .iter()
        .filter(|t| role(t) == Role::DataWorker)
        .map(|t| t.pid)
        .collect();
    worker_pids.sort_unstable();
    worker_pids.dedup();
    Facts {
        s,
        steps: &s.steps,
        cores: s.cores_effective,
        cores_source: s.cores_source,
        trainer: s
            .steps
            .trainer_tid
            .and_then(|tid| s.threads.iter().find(|t| t.tid == tid)),
        workers: Group::of(s.threads.iter().filter(|t| role(t) == Role::DataWorker)),
        pools: Group::of(s.threads.iter().filter(|t| role(t) == Role::Pool)),
        worker_processes: worker_pids.len(),
        pool_sizes,
    }
}

impl Facts<'_> {
    fn starved(&self) -> bool {
        self.steps.count > 0 && self.steps.data_wait_frac >= STARVED
    }

    /// Share of its life the trainer waited for a CPU.
    fn trainer_queued(&self) -> f64 {
        self.trainer
            .filter(|t| t.lifetime_s > 0.0)
            .map_or(0.0, |t| t.runnable_s / t.lifetime_s)
    }

    /// The trainer's CPU queueing blamed on a group of threads, in
    /// proportion to the group's share of the job's runnable time.
    fn queued_behind(&self, group: &Group) -> f64 {
        let job_runnable = self.s.job_runnable * self.s.duration_s;
        if job_runnable <= 0.0 {
            return 0.0;
        }
        self.trainer_queued() * (group.runnable_s / job_runnable).min(1.0)
    }

    fn queued_text(&self) -> String {
        format!(
            "the trainer itself waited for a CPU {:.0}% of its time",
            100.0 * self.trainer_queued()
        )
    }

    /// The job's CPU demand (threads running or waiting for a CPU) per core.
    fn demand_per_core(&self) -> f64 {
        (self.s.job_on_cpu + self.s.job_runnable) / self.cores.max(1.0)
    }

    fn cores_text(&self) -> String {
        format!("{:.1} usable cores ({})", self.cores, self.cores_source)
    }

    fn wait_text(&self) -> String {
        format!(
            "the trainer waited {:.0}% of its time for data",
            100.0 * self.steps.data_wait_frac
        )
    }
}

fn too_many_workers(f: &Facts) -> Option<Finding> {
    let runnable_share = f.workers.share(f.workers.runnable_s);
    let blame = f.steps.blame.runnable;
    let starves_trainer = f.starved() && blame >= LEADING;
    let queues_trainer = f.trainer_queued() >= TRAINER_QUEUED;
    if !(starves_trainer || queues_trainer)
        || f.demand_per_core() < OVERSUBSCRIBED
        || runnable_share < CONTENDED
    {
        return None;
    }
    let data_part = if f.starved() {
        f.steps.data_wait_frac * blame
    } else {
        0.0
    };
    let explains = data_part + f.queued_behind(&f.workers);
    let suggestion = suggested_workers(f);
    Some(Finding {
        id: "too_many_workers",
        title: format!(
            "Too many data workers for the cores: {} worker processes want {:.1} CPUs on {}",
            f.worker_processes,
            f.s.job_on_cpu + f.s.job_runnable,
            f.cores_text()
        ),
        severity: severity(explains),
        explains_frac: explains,
        evidence: vec![
            f.wait_text(),
            format!(
                "during those waits the delivering worker was waiting for a CPU {:.0}% of the time",
                100.0 * blame
            ),
            f.queued_text(),
            format!(
                "the job's threads wanted {:.1} CPUs per usable core ({:.1} running + {:.1} runnable on {})",
                f.demand_per_core(),
                f.s.job_on_cpu,
                f.s.job_runnable,
                f.cores_text()
            ),
            format!(
                "data-worker threads spent {:.0}% of their time runnable",
                100.0 * runnable_share
            ),
        ],
        fix: format!(
            "Lower num_workers to {suggestion} (from {}): more workers than cores only queue for the CPU.",
            f.worker_processes
        ),
        expect:
            "Worker runnable time and the trainer's data waits drop; step time should not rise."
                .into(),
    })
}

/// Workers needed to feed the trainer, capped by the cores left after it:
/// per-batch worker CPU over the trainer's per-step CPU.
fn suggested_workers(f: &Facts) -> usize {
    let cap = (f.cores - 1.0).floor().max(1.0) as usize;
    let batches = f.steps.count.max(1) as f64;
    let worker_cpu_per_batch = (f.workers.on_cpu_s + f.pools.on_cpu_s) / batches;
    let trainer_cpu_per_step = f.trainer.map_or(0.0, |t| t.on_cpu_s / batches);
    if trainer_cpu_per_step <= 0.0 {
        return cap;
    }
    ((worker_cpu_per_batch / trainer_cpu_per_step).ceil() as usize).clamp(1, cap)
}

fn thread_oversubscription(f: &Facts) -> Option<Finding> {
    let pool_threads: usize = f.pool_sizes.iter().map(|(_, n)| n).sum();
    let threads = pool_threads + f.workers.threads;
    let contended = f.pools.share(f.pools.runnable_s + f.pools.futex_s);
    let blame = f.steps.blame.futex + f.steps.blame.runnable;
    let starves_trainer = f.starved() && blame >= LEADING;
    let queues_trainer = f.trainer_queued() >= TRAINER_QUEUED;
    if !(starves_trainer || queues_trainer)
        || pool_threads == 0
        || (threads as f64) < 2.0 * f.cores
        || contended < 0.4
    {
        return None;
    }
    let data_part = if f.starved() {
        f.steps.data_wait_frac * blame
    } else {
        0.0
    };
    let explains = data_part + f.queued_behind(&f.pools);
    let largest = f.pool_sizes.iter().map(|(_, n)| *n).max().unwrap_or(0);
    Some(Finding {
        id: "thread_oversubscription",
        title: format!(
            "Thread pools oversubscribe the CPU: {} processes × up to {largest} pool threads = {threads} threads on {}",
            f.pool_sizes.len(),
            f.cores_text()
        ),
        severity: severity(explains),
        explains_frac: explains,
        evidence: vec![
            f.wait_text(),
            format!(
                "pool threads spent {:.0}% of their time waiting for a CPU and {:.0}% in futex waits (pool barriers)",
                100.0 * f.pools.share(f.pools.runnable_s),
                100.0 * f.pools.share(f.pools.futex_s)
            ),
            format!(
                "during data waits the delivering worker was {:.0}% in futex waits and {:.0}% runnable",
                100.0 * f.steps.blame.futex,
                100.0 * f.steps.blame.runnable
            ),
            f.queued_text(),
        ],
        fix: "Set OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1 in the environment before the libraries load, \
              call cv2.setNumThreads(0) and torch.set_num_threads(1) in the DataLoader's worker_init_fn. \
              torch.set_num_threads alone does not cap OpenCV's pool or the OpenMP pools of other libraries."
            .into(),
        expect: "Pool threads per worker drop to one; futex and runnable time in the workers fall, and so do the trainer's data waits.".into(),
    })
}

fn disk_bound(f: &Facts) -> Option<Finding> {
    let busiest =
        f.s.devices
            .iter()
            .max_by(|a, b| a.window.util_pct.total_cmp(&b.window.util_pct));
    let saturated = busiest.is_some_and(|d| d.window.util_pct >= SATURATED_UTIL_PCT);
    let blame = f.steps.blame.io;
    if !f.starved() || !(saturated || blame >= LEADING) {
        return None;
    }
    let explains = f.steps.data_wait_frac * blame.max(if saturated { 0.5 } else { 0.0 });
    let mut evidence = vec![
        f.wait_text(),
        format!(
            "during those waits the delivering worker was in block IO {:.0}% of the time",
            100.0 * blame
        ),
        format!(
            "data workers spent {:.0}% of their time waiting for block IO",
            100.0 * f.workers.share(f.workers.io_s)
        ),
    ];
    if let Some(d) = busiest {
        evidence.push(format!(
            "{}: {:.0}% util, {:.0} r/s, {:.1} MB/s read, r_await {:.2} ms, aqu-sz {:.2}",
            d.name,
            d.window.util_pct,
            d.window.r_s,
            d.window.rmb_s,
            d.window.r_await_ms,
            d.window.aqu_sz
        ));
    }
    Some(Finding {
        id: "disk_bound",
        title: "Input is disk-bound: workers wait for block IO".into(),
        severity: severity(explains),
        explains_frac: explains,
        evidence,
        fix: "Read faster: cache the dataset in memory or on local NVMe, pack small files into larger \
              sequential shards (WebDataset, TFRecord), read larger chunks; more workers only help if \
              the device is not saturated."
            .into(),
        expect: "Workers' block-IO wait and the trainer's data waits fall; device %util drops or throughput rises.".into(),
    })
}

fn decode_bound(f: &Facts) -> Option<Finding> {
    let blame = f.steps.blame.on_cpu;
    let spare = f.cores - (f.s.job_on_cpu + f.s.job_runnable);
    if !f.starved() || blame < LEADING || spare < 0.5 {
        return None;
    }
    let explains = f.steps.data_wait_frac * blame;
    let top: Vec<String> = f
        .steps
        .worker_top_functions
        .iter()
        .map(|(func, share)| format!("{func} ({:.0}%)", 100.0 * share))
        .collect();
    let mut evidence = vec![
        f.wait_text(),
        format!(
            "during those waits the delivering worker was on a CPU {:.0}% of the time",
            100.0 * blame
        ),
        format!("{spare:.1} of {} were idle on average", f.cores_text()),
    ];
    if !top.is_empty() {
        evidence.push(format!("workers' hottest functions: {}", top.join(", ")));
    }
    Some(Finding {
        id: "decode_bound",
        title: "Workers are busy decoding and augmenting while cores sit idle".into(),
        severity: severity(explains),
        explains_frac: explains,
        evidence,
        fix: format!(
            "Raise num_workers to {} to use the idle cores, and make decoding cheaper \
             (smaller images, a faster decoder, augmentation on the GPU).",
            f.worker_processes + spare.floor().max(1.0) as usize
        ),
        expect: "More batches ready in time: the trainer's data waits fall while worker CPU rises."
            .into(),
    })
}

fn trainer_cpu_bound(f: &Facts) -> Option<Finding> {
    let t = f.trainer?;
    let busy = if t.lifetime_s > 0.0 {
        t.on_cpu_s / t.lifetime_s
    } else {
        0.0
    };
    if busy < TRAINER_BUSY || f.steps.data_wait_frac >= STARVED {
        return None;
    }
    Some(Finding {
        id: "trainer_cpu_bound",
        title: format!(
            "The trainer itself is CPU-bound (tid {} on a CPU {:.0}% of its time)",
            t.tid,
            100.0 * busy
        ),
        severity: severity(busy),
        explains_frac: busy,
        evidence: vec![
            format!(
                "the trainer (tid {}, {}) ran {:.2} s and waited for a CPU {:.2} s of its {:.2} s",
                t.tid, t.comm, t.on_cpu_s, t.runnable_s, t.lifetime_s
            ),
            format!("it waited only {:.0}% of its time for data", 100.0 * f.steps.data_wait_frac),
        ],
        fix: "Move CPU work off the training loop (preprocessing into the DataLoader, logging and \
              metrics off the main thread); open the cpu flamegraph filtered to the trainer's tid to see where it goes."
            .into(),
        expect: "The trainer's on-CPU share per step falls and the GPU's idle time with it.".into(),
    })
}

fn gpu_bound(f: &Facts) -> Option<Finding> {
    let util =
        f.s.gpus
            .iter()
            .filter_map(|g| g.util_mean_pct)
            .fold(None, |m: Option<f64>, u| Some(m.map_or(u, |m| m.max(u))))?;
    if util < GPU_BUSY_PCT || f.steps.data_wait_frac >= STARVED {
        return None;
    }
    Some(Finding {
        id: "gpu_bound",
        title: format!("GPU-bound: the GPU is busy ({util:.0}%), the input pipeline keeps up"),
        severity: Severity::Low,
        explains_frac: util / 100.0,
        evidence: vec![
            format!("mean GPU utilization {util:.0}%"),
            format!("the trainer waited only {:.0}% of its time for data", 100.0 * f.steps.data_wait_frac),
        ],
        fix: "Stop tuning the data loader; speed up the model itself (mixed precision, larger batches, fused kernels).".into(),
        expect: "Nothing in the loader will shorten steps; GPU-side changes will.".into(),
    })
}

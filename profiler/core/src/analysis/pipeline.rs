//! The input pipeline as a whole, over the training phase: how many data
//! workers ran at a time (and how often they were restarted), the helpers
//! the job ran on the side, where the CPU went, and from that the
//! DataLoader settings that would feed the trainer best on these cores.
//!
//! The verdict's advice is derived here, from what was measured, rather
//! than from a rule of thumb. Per batch, the workers need W CPU-seconds
//! and the trainer's side (its thread, its pools, the pin-memory thread)
//! T, of which the trainer thread's own share s·T runs one step after
//! another. A step then takes at least max(s·T, (T + W) / cores), and the
//! workers keep up when n / W batches a second match that rate:
//!
//! ```text
//!     n ≥ W / max(s·T, (T + W) / cores) = r / max(s, (1 + r) / cores),   r = W / T
//! ```
//!
//! Only the ratio r is needed, so batches need not be counted (the trainer
//! is woken only for the batches it waited for). CPU a pool burned waiting
//! for work (an OpenMP runtime spinning at its barriers, a pool spinning on
//! sched_yield) is not work, and is left out of W and T: the advised
//! configuration would not spend it. The threads the trainer's pools
//! should keep are the cores the workers leave it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::roles::{PoolLibrary, Role, Roles};
use super::steps::StepStats;
use crate::model::{Breakdown, Model, Process, ProcessKey, Thread, ThreadKey};

const NS: f64 = 1e9;

/// The input pipeline over the training phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pipeline {
    /// The training phase: the steady state of the steps (the first
    /// iteration's start to the last one's end) when iterations were
    /// seen; else from when the trainer began waiting for the first batch
    /// it waited for to the last such batch's arrival; the whole window
    /// when it waited for fewer than two.
    pub start_ns: u64,
    pub end_ns: u64,
    /// True when the phase is the whole window (no batches to bound it).
    pub whole_window: bool,
    pub workers: Workers,
    pub helpers: Vec<Helper>,
    /// Pin-memory threads, in tid order: one per set of workers (a new one
    /// each epoch without persistent_workers).
    pub pin_memory_tids: Vec<u32>,
    /// Pool threads per process and library.
    pub pools: Vec<PoolGroup>,
    /// Each thread's time in the phase, with its role.
    #[serde(skip)]
    pub threads: Vec<PhaseThread>,
    /// CPU seconds in the phase by side of the pipeline.
    pub cpu: PhaseCpu,
    /// The trainer's time waiting for data in the phase, as a share of it.
    pub data_wait_frac: f64,
    /// What the measured CPU says the settings should be; None without a
    /// trainer or without worker processes.
    pub advice: Option<Advice>,
}

/// The data-worker processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Workers {
    /// Every data-worker process seen, in pid order (a pid twice when two
    /// workers held it in turn).
    pub pids: Vec<u32>,
    /// How many were alive at a time for most of the phase: the loader's
    /// num_workers (several loaders at once add up).
    pub at_a_time: usize,
    /// Times a new set of workers started after the first: restarts at
    /// each epoch when persistent_workers is off.
    pub restarts: usize,
}

/// A process the job ran on the side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Helper {
    pub pid: u32,
    pub comm: String,
    pub on_cpu_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolGroup {
    pub pid: u32,
    /// The process is a data worker (else the trainer's or another).
    pub in_worker: bool,
    pub library: PoolLibrary,
    pub threads: usize,
}

/// A thread's time in the phase.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseThread {
    /// Who it is (a reused tid is another thread).
    pub key: ThreadKey,
    pub tid: u32,
    pub pid: u32,
    pub role: Role,
    /// Its process is a data worker.
    pub in_worker: bool,
    pub time: Breakdown,
    /// Of its on-CPU time, the share spent spinning for work.
    pub spin_share: f64,
}

impl PhaseThread {
    pub fn life_ns(&self) -> u64 {
        self.time.total()
    }

    /// On-CPU time that was work, not spinning.
    pub fn work_ns(&self) -> f64 {
        self.time.on_cpu as f64 * (1.0 - self.spin_share)
    }
}

/// CPU seconds in the phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseCpu {
    pub duration_s: f64,
    /// The trainer thread.
    pub trainer_s: f64,
    /// The rest of the trainer's side: its process's other threads (pools,
    /// the pin-memory thread, queue feeders), work only.
    pub trainer_side_s: f64,
    /// The data workers' threads and their pools, work only.
    pub workers_s: f64,
    /// CPU any thread of the job spent spinning for pool work (in an
    /// OpenMP runtime, or a pool's sched_yield loop).
    pub pool_spin_s: f64,
    /// The job's average threads on a CPU and waiting for one.
    pub job_on_cpu: f64,
    pub job_runnable: f64,
}

/// Settings derived from the measured CPU (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Advice {
    pub cores: f64,
    /// Worker CPU per unit of trainer-side CPU (r).
    pub worker_to_trainer: f64,
    /// The trainer thread's share of its side's CPU (s).
    pub trainer_serial_share: f64,
    /// Workers busy all the time that the best rate needs (W·X).
    pub workers_needed: f64,
    pub num_workers: usize,
    /// Threads for the trainer's pools (OMP_NUM_THREADS).
    pub pool_threads: usize,
    /// The trainer thread's step is the limit, not the cores.
    pub trainer_bound: bool,
}

pub fn pipeline(model: &Model, roles: &Roles, steps: &StepStats, cores: f64) -> Pipeline {
    let (start_ns, end_ns, whole_window) = phase(model, steps);
    let worker_pid = worker_processes(model, roles);
    let spin = spin_shares(model, roles);
    let threads: Vec<PhaseThread> = model
        .threads
        .iter()
        .filter(|t| t.start_ns < end_ns && t.end_ns > start_ns)
        .map(|t| PhaseThread {
            key: t.key(),
            tid: t.tid,
            pid: t.pid,
            role: roles.of_thread(t),
            in_worker: worker_pid.contains(&model.process_key(t)),
            time: t.breakdown(start_ns, end_ns),
            spin_share: spin.get(&t.key()).copied().unwrap_or(0.0),
        })
        .collect();
    let data_wait_ns: u64 = steps
        .deliveries
        .iter()
        .filter(|d| d.ts_ns > start_ns && d.ts_ns <= end_ns)
        .map(|d| d.data_wait_ns)
        .sum();
    let duration_s = (end_ns - start_ns) as f64 / NS;
    let mut pipeline = Pipeline {
        start_ns,
        end_ns,
        whole_window,
        workers: workers(model, &worker_pid, start_ns, end_ns),
        helpers: helpers(model, roles),
        pin_memory_tids: roles
            .by_thread
            .iter()
            .filter(|(_, r)| **r == Role::PinMemory)
            .map(|(key, _)| key.tid)
            .collect(),
        pools: pool_groups(model, roles, &worker_pid),
        threads,
        cpu: PhaseCpu::default(),
        data_wait_frac: if duration_s > 0.0 {
            (data_wait_ns as f64 / NS / duration_s).min(1.0)
        } else {
            0.0
        },
        advice: None,
    };
    pipeline.settle(roles, cores);
    pipeline
}

impl Pipeline {
    /// Works out what follows from the phase's threads: the CPU by side of
    /// the pipeline, the job's demand, and the advice.
    pub(crate) fn settle(&mut self, roles: &Roles, cores: f64) {
        let duration_s = self.end_ns.saturating_sub(self.start_ns) as f64 / NS;
        self.cpu = phase_cpu(&self.threads, roles, duration_s);
        self.advice = (roles.trainer.is_some() && self.workers.at_a_time > 0)
            .then(|| advise(&self.cpu, cores))
            .flatten();
    }
}

/// The training phase (see [`Pipeline::start_ns`]).
fn phase(model: &Model, steps: &StepStats) -> (u64, u64, bool) {
    // The steady state, where iterations were seen: startup (imports,
    // worker start) and teardown say nothing about the loader.
    if steps.source.confidence != Some("low")
        && let Some((start, end)) = steps.steady().filter(|(s, e)| e > s)
    {
        return (start, end, false);
    }
    match (steps.deliveries.first(), steps.deliveries.last()) {
        (Some(first), Some(last))
            if steps.deliveries.len() >= 2 && last.ts_ns > first.wait_start_ns =>
        {
            (first.wait_start_ns, last.ts_ns, false)
        }
        _ => (
            model.window_start_ns,
            model.window_end_ns.max(model.window_start_ns),
            true,
        ),
    }
}

/// Processes whose threads are data workers (a process's main thread
/// decides; a worker's pool threads do not make it one). By key: a pid a
/// worker held may be a helper's later.
fn worker_processes(model: &Model, roles: &Roles) -> Vec<ProcessKey> {
    let mut keys: Vec<ProcessKey> = model
        .threads
        .iter()
        .filter(|t| roles.of_thread(t) == Role::DataWorker)
        .map(|t| model.process_key(t))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The share of each thread's on-CPU time spent spinning for work: the
/// share of its samples in an OpenMP runtime or sched_yield
/// (roles::spin_shares); for a pool thread with no samples to tell that
/// waits as a sched_yield loop does, all of it.
fn spin_shares(model: &Model, roles: &Roles) -> HashMap<ThreadKey, f64> {
    let mut shares = super::roles::spin_shares(model);
    for t in &model.threads {
        if roles.pool_library_of(t).is_some() && super::roles::spins_on_yield(t) {
            shares.entry(t.key()).or_insert(1.0);
        }
    }
    shares
}

fn phase_cpu(threads: &[PhaseThread], roles: &Roles, duration_s: f64) -> PhaseCpu {
    let trainer_pid = roles
        .trainer
        .and_then(|key| threads.iter().find(|t| t.key == key))
        .map(|t| t.pid);
    let secs = |ns: f64| ns / NS;
    let mut cpu = PhaseCpu {
        duration_s,
        ..PhaseCpu::default()
    };
    let (mut on_cpu, mut runnable) = (0u64, 0u64);
    for t in threads {
        on_cpu += t.time.on_cpu;
        runnable += t.time.runnable;
        cpu.pool_spin_s += secs(t.time.on_cpu as f64 * t.spin_share);
        if Some(t.key) == roles.trainer {
            cpu.trainer_s += secs(t.work_ns());
        } else if t.in_worker {
            cpu.workers_s += secs(t.work_ns());
        } else if Some(t.pid) == trainer_pid && t.role != Role::Helper {
            cpu.trainer_side_s += secs(t.work_ns());
        }
    }
    if duration_s > 0.0 {
        cpu.job_on_cpu = secs(on_cpu as f64) / duration_s;
        cpu.job_runnable = secs(runnable as f64) / duration_s;
    }
    cpu
}

/// The worker count and trainer threads that feed the trainer best.
fn advise(cpu: &PhaseCpu, cores: f64) -> Option<Advice> {
    let trainer_side = cpu.trainer_s + cpu.trainer_side_s;
    if trainer_side <= 0.0 || cpu.workers_s <= 0.0 || cores <= 0.0 {
        return None;
    }
    let r = cpu.workers_s / trainer_side;
    let s = (cpu.trainer_s / trainer_side).clamp(0.0, 1.0);
    let capacity = (1.0 + r) / cores;
    let workers_needed = r / s.max(capacity);
    // The workers' share of the cores at that rate; what is left is the
    // trainer's, and its pools may use it.
    let worker_cores = workers_needed.min(cores);
    Some(Advice {
        cores,
        worker_to_trainer: r,
        trainer_serial_share: s,
        workers_needed,
        num_workers: (workers_needed.ceil() as usize).max(1),
        pool_threads: pool_threads_left(cores, worker_cores),
        trainer_bound: s > capacity,
    })
}

/// The OpenMP/MKL threads the trainer's pools may keep on `cores` usable
/// cores of which the workers keep `worker_cores` busy: what is left, at
/// least one.
pub(crate) fn pool_threads_left(cores: f64, worker_cores: f64) -> usize {
    ((cores - worker_cores).floor() as usize).max(1)
}

/// Worker processes alive at a time for most of the phase, and how many
/// times a new set started.
fn workers(model: &Model, keys: &[ProcessKey], start_ns: u64, end_ns: u64) -> Workers {
    let lives: Vec<(u64, u64)> = model
        .all_processes()
        .filter(|p| keys.contains(&p.key()))
        .map(|p| life(model, p))
        .collect();
    Workers {
        pids: keys.iter().map(|k| k.pid).collect(),
        at_a_time: most_common_count(&lives, start_ns, end_ns),
        restarts: restarts(&lives),
    }
}

fn life(model: &Model, p: &Process) -> (u64, u64) {
    (
        p.start_ns.max(model.window_start_ns),
        p.exit_ns.unwrap_or(model.window_end_ns),
    )
}

/// The number of intervals overlapping, weighted by how long each count
/// held within [start, end]; the count that held longest (ties: the
/// larger). Counts of zero do not compete when any other held.
fn most_common_count(lives: &[(u64, u64)], start: u64, end: u64) -> usize {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for &(a, b) in lives {
        let (a, b) = (a.max(start), b.min(end));
        if a < b {
            edges.push((a, 1));
            edges.push((b, -1));
        }
    }
    edges.sort_unstable();
    let mut held: BTreeMap<usize, u64> = BTreeMap::new();
    let (mut count, mut since) = (0i64, start);
    for (ts, delta) in edges {
        *held.entry(count.max(0) as usize).or_default() += ts - since;
        count += delta;
        since = ts;
    }
    *held.entry(count.max(0) as usize).or_default() += end.saturating_sub(since);
    held.into_iter()
        .filter(|&(n, t)| n > 0 && t > 0)
        .max_by_key(|&(n, t)| (t, n))
        .map_or(0, |(n, _)| n)
}

/// New worker sets after the first: a worker starting after every worker
/// alive before it began has exited, or while some still start, counts
/// once per set.
fn restarts(lives: &[(u64, u64)]) -> usize {
    let mut sorted = lives.to_vec();
    sorted.sort_unstable();
    let mut sets = 0usize;
    let mut last_end = 0u64;
    for (i, &(start, end)) in sorted.iter().enumerate() {
        if i == 0 || start >= last_end {
            sets += 1;
        }
        last_end = last_end.max(end);
    }
    sets.saturating_sub(1)
}

fn helpers(model: &Model, roles: &Roles) -> Vec<Helper> {
    let mut out: Vec<Helper> = Vec::new();
    for p in model.all_processes() {
        let threads: Vec<&Thread> = model
            .threads
            .iter()
            .filter(|t| model.process_key(t) == p.key() && roles.of_thread(t) == Role::Helper)
            .collect();
        if threads.is_empty() {
            continue;
        }
        let on_cpu: u64 = threads
            .iter()
            .map(|t| t.breakdown(t.start_ns, t.end_ns).on_cpu)
            .sum();
        out.push(Helper {
            pid: p.pid,
            comm: p.comm.clone(),
            on_cpu_s: on_cpu as f64 / NS,
        });
    }
    out.sort_by_key(|h| h.pid);
    out.dedup_by_key(|h| h.pid);
    out
}

fn pool_groups(model: &Model, roles: &Roles, workers: &[ProcessKey]) -> Vec<PoolGroup> {
    let threads: HashMap<ThreadKey, &Thread> = model.threads.iter().map(|t| (t.key(), t)).collect();
    let mut groups: BTreeMap<(ProcessKey, PoolLibrary), usize> = BTreeMap::new();
    for (key, lib) in &roles.pool_library {
        if let Some(t) = threads.get(key) {
            *groups.entry((model.process_key(t), *lib)).or_default() += 1;
        }
    }
    groups
        .into_iter()
        .map(|((process, library), threads)| PoolGroup {
            pid: process.pid,
            in_worker: workers.contains(&process),
            library,
            threads,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_count_alive_longest_is_num_workers() {
        // Two generations of three workers with a short overlap, and a
        // straggler alive a moment longer.
        let lives = [
            (0, 100 * MS),
            (0, 100 * MS),
            (0, 101 * MS),
            (99 * MS, 200 * MS),
            (99 * MS, 200 * MS),
            (99 * MS, 200 * MS),
        ];
        assert_eq!(most_common_count(&lives, 0, 200 * MS), 3);
        assert_eq!(restarts(&lives), 0, "overlapping starts are one set");
        let apart = [
            (0, 100 * MS),
            (0, 100 * MS),
            (110 * MS, 200 * MS),
            (110 * MS, 200 * MS),
        ];
        assert_eq!(most_common_count(&apart, 0, 200 * MS), 2);
        assert_eq!(restarts(&apart), 1);
        assert_eq!(most_common_count(&[], 0, 200 * MS), 0);
    }

    fn cpu(trainer: f64, trainer_side: f64, workers: f64) -> PhaseCpu {
        PhaseCpu {
            duration_s: 10.0,
            trainer_s: trainer,
            trainer_side_s: trainer_side,
            workers_s: workers,
            ..PhaseCpu::default()
        }
    }

    #[test]
    fn workers_fill_the_cores_the_trainer_leaves() {
        // Workers need 8.5× the trainer's CPU: on 2 cores the cores are the
        // limit, 2 × 8.5 / 9.5 = 1.79 workers busy, so 2 (not cores - 1).
        let a = advise(&cpu(1.0, 0.0, 8.5), 2.0).unwrap();
        assert!((a.workers_needed - 1.789).abs() < 0.01, "{a:?}");
        assert_eq!(
            (a.num_workers, a.pool_threads, a.trainer_bound),
            (2, 1, false)
        );
        // On 16 cores the trainer's serial step is the limit: 8.5 workers
        // keep it fed, and the trainer may keep 7 pool threads.
        let a = advise(&cpu(1.0, 0.0, 8.5), 16.0).unwrap();
        assert_eq!(
            (a.num_workers, a.pool_threads, a.trainer_bound),
            (9, 7, true)
        );
        // A trainer whose own thread does half its side's work (its pools
        // the rest) steps twice as fast, needing twice the workers.
        let a = advise(&cpu(1.0, 0.0, 8.5), 32.0).unwrap();
        assert_eq!(a.num_workers, 9);
        let a = advise(&cpu(0.5, 0.5, 8.5), 32.0).unwrap();
        assert_eq!(a.num_workers, 17);
        assert!((a.trainer_serial_share - 0.5).abs() < 1e-9);
        assert!(advise(&cpu(0.0, 0.0, 1.0), 2.0).is_none());
    }
}

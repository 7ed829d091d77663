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
#![allow(
    rustdoc::private_intra_doc_links,
    reason = "the map above names private stages: it is for readers of the \
              source (`cargo doc --document-private-items`)"
)]

use serde::Serialize;

use std::collections::BTreeMap;

use super::{
    Summary,
    anatomy::{Anatomy, Phase},
    pipeline::{Advice, PhaseThread, Pipeline},
    roles::{PoolLibrary, Role},
    steps::StepStats,
    whatif::StepModel,
};

mod phases;
#[cfg(test)]
mod tests;

/// `tprof flamegraph` of the workers' off-CPU time in the steady state:
/// what they waited for.
const STEADY_OFFCPU_WORKERS: &str =
    "tprof flamegraph REC --kind offcpu --phase steady --role data_worker";

/// The trainer waits for data at least this share of its time: the input
/// pipeline is the bottleneck.
pub const STARVED: f64 = 0.10;
/// CPU demand (running + runnable threads) per usable core that counts as
/// oversubscribed.
const OVERSUBSCRIBED: f64 = 1.5;
/// Share of the time a group of threads wanted a CPU (running or
/// runnable) that it spent waiting for one, counted as contended.
const CONTENDED: f64 = 0.5;
/// Share of the pools' life spent waiting (for a CPU, or at a barrier)
/// that counts as contended pools.
const POOLS_CONTENDED: f64 = 0.4;
/// Share of the cores' time in the phase (cores × its length) that pools
/// must burn spinning, or spend working while contended, to matter.
const POOL_COST: f64 = 0.10;
/// Device utilization that counts as saturated.
const SATURATED_UTIL_PCT: f64 = 85.0;
/// A blame share that makes a cause a leading one.
const LEADING: f64 = 0.35;
/// Workers that spend this share of their working time (on a CPU or in
/// block IO) in block IO are bound by reads, not by the cores.
const IO_BOUND_WORKERS: f64 = 0.5;
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

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a finding is about. The names (docs/json.md, "findings") are a
/// contract: scripts match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingId {
    TooManyWorkers,
    ThreadOversubscription,
    DiskBound,
    DecodeBound,
    TrainerCpuBound,
    SyncCopies,
    PageableCopies,
    GpuBound,
    LoadingInTrainer,
    WorkersRestarted,
    SlowWorkerStart,
    PrefetchStarved,
    LatencyBound,
    CostlyBatches,
    GilContention,
    ComputeBound,
    CpuSaturated,
    InputWait,
}

impl FindingId {
    pub fn name(self) -> &'static str {
        match self {
            FindingId::TooManyWorkers => "too_many_workers",
            FindingId::ThreadOversubscription => "thread_oversubscription",
            FindingId::DiskBound => "disk_bound",
            FindingId::DecodeBound => "decode_bound",
            FindingId::TrainerCpuBound => "trainer_cpu_bound",
            FindingId::SyncCopies => "sync_copies",
            FindingId::PageableCopies => "pageable_copies",
            FindingId::GpuBound => "gpu_bound",
            FindingId::LoadingInTrainer => "loading_in_trainer",
            FindingId::WorkersRestarted => "workers_restarted",
            FindingId::SlowWorkerStart => "slow_worker_start",
            FindingId::PrefetchStarved => "prefetch_starved",
            FindingId::LatencyBound => "latency_bound",
            FindingId::CostlyBatches => "costly_batches",
            FindingId::GilContention => "gil_contention",
            FindingId::ComputeBound => "compute_bound",
            FindingId::CpuSaturated => "cpu_saturated",
            FindingId::InputWait => "input_wait",
        }
    }
}

impl std::fmt::Display for FindingId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for FindingId {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
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
    pub id: FindingId,
    pub title: String,
    pub severity: Severity,
    /// Share of the trainer's time in the training phase this cause explains.
    pub explains_frac: f64,
    /// The numbers it rests on.
    pub evidence: Vec<String>,
    /// The fix to try first.
    pub fix: String,
    /// The fix as settings, for scripts: empty when it is no setting.
    pub changes: Vec<Change>,
    /// What the fix should change, to check it worked.
    pub expect: String,
    /// The phase of the step's anatomy it is about, when it is one.
    pub phase: Option<Phase>,
    /// The steady state's mean step as measured, and as the step model
    /// predicts it after the fix (analysis::whatif); None when the model
    /// has no term for the fix.
    pub step_ms: Option<f64>,
    pub predicted_step_ms: Option<f64>,
    /// The command that shows the evidence, `REC` standing for the
    /// recording's path.
    pub see: Option<String>,
}

/// One setting a fix changes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    /// num_workers, OMP_NUM_THREADS, MKL_NUM_THREADS, pin_memory,
    /// non_blocking, persistent_workers, prefetch_factor, batch_dtype (the
    /// type the workers send a batch as) or collate_fn (what it returns).
    pub setting: &'static str,
    /// Its value in the recorded job; absent when the recording cannot
    /// tell (environment variables, pin_memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<SettingValue>,
    pub to: SettingValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SettingValue {
    Count(u64),
    Flag(bool),
    Text(&'static str),
}

impl Change {
    fn count(setting: &'static str, from: Option<usize>, to: usize) -> Change {
        Change {
            setting,
            from: from.map(|n| SettingValue::Count(n as u64)),
            to: SettingValue::Count(to as u64),
        }
    }

    pub(crate) fn flag(setting: &'static str, to: bool) -> Change {
        Change {
            setting,
            from: None,
            to: SettingValue::Flag(to),
        }
    }

    fn text(setting: &'static str, to: &'static str) -> Change {
        Change {
            setting,
            from: None,
            to: SettingValue::Text(to),
        }
    }
}

/// What the rules look at, computed once. Times are the training phase's
/// (analysis::pipeline): a recording that began at `python train.py`
/// spends its first seconds importing, which says nothing of the loader.
struct Facts<'a> {
    s: &'a Summary,
    p: &'a Pipeline,
    steps: &'a StepStats,
    cores: f64,
    cores_source: &'static str,
    trainer: Option<&'a PhaseThread>,
    /// Data-worker threads, their pools apart.
    workers: Group,
    pools: Group,
    /// The pools inside data workers.
    worker_pools: Group,
    /// Worker processes alive at a time (num_workers).
    worker_processes: usize,
    anatomy: &'a Anatomy,
    /// The step model, when there are steps.
    model: Option<StepModel>,
}

/// Sums over a set of threads in the phase.
#[derive(Debug, Default)]
struct Group {
    threads: usize,
    life_s: f64,
    on_cpu_s: f64,
    runnable_s: f64,
    futex_s: f64,
    io_s: f64,
    spin_s: f64,
}

impl Group {
    fn of<'a>(threads: impl Iterator<Item = &'a PhaseThread>) -> Group {
        let secs = |ns: u64| ns as f64 / 1e9;
        let mut g = Group::default();
        for t in threads {
            g.threads += 1;
            g.life_s += secs(t.life_ns());
            g.on_cpu_s += secs(t.time.on_cpu);
            g.runnable_s += secs(t.time.runnable);
            g.futex_s += secs(t.time.futex);
            g.io_s += secs(t.time.io);
            g.spin_s += secs(t.time.on_cpu) * t.spin_share;
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

    /// Of the time the threads wanted a CPU, the share they waited for one.
    fn waiting_share(&self) -> f64 {
        let wanted = self.on_cpu_s + self.runnable_s;
        if wanted > 0.0 {
            self.runnable_s / wanted
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
    .chain(phases::findings(&facts))
    .chain(cuda_findings(&facts))
    .collect();
    // Never silent: a trainer that waited for batches with no finding for
    // the wait gets the critical path's top functions.
    let input = |f: &Finding| {
        f.phase
            .is_some_and(|p| p.is_batch_wait() || p == Phase::WorkerStart || p == Phase::Receiving)
    };
    if !findings.iter().any(input) {
        findings.extend(phases::input_limit(&facts));
    }
    findings.sort_by(|a, b| b.explains_frac.total_cmp(&a.explains_frac));
    by_predicted_gain(&mut findings);
    findings
}

/// Of the findings that predict a step, the one that predicts the most
/// time saved comes first, in the places those findings hold; the others
/// keep theirs. What a cause explains of the trainer's time is not what
/// its fix buys: on the suite's job (two workers, torch's default pool, 2
/// cores) `prefetch_starved` explained more and led with prefetch_factor=4
/// (predicted 50.6 → 40.5 ms), `thread_oversubscription` came second
/// (→ 38.5 ms); measured untraced, three rounds, medians: 15.00 it/s as
/// recorded, 14.13 with the prefetch, 18.18 with OMP_NUM_THREADS=1.
fn by_predicted_gain(findings: &mut [Finding]) {
    let slots: Vec<usize> = (0..findings.len())
        .filter(|&i| predicted_saving(&findings[i]).is_some())
        .collect();
    let mut ranked: Vec<Finding> = slots.iter().map(|&i| findings[i].clone()).collect();
    ranked.sort_by(|a, b| {
        let saving = |f: &Finding| predicted_saving(f).unwrap_or(0.0);
        saving(b).total_cmp(&saving(a))
    });
    for (slot, finding) in slots.into_iter().zip(ranked) {
        findings[slot] = finding;
    }
}

/// The share of the measured step a finding's change is predicted to save.
fn predicted_saving(f: &Finding) -> Option<f64> {
    match (f.step_ms, f.predicted_step_ms) {
        (Some(step), Some(predicted)) if step > 0.0 => Some((step - predicted).max(0.0) / step),
        _ => None,
    }
}

/// The CUDA copy findings (analysis::cuda), in the verdict's terms: what
/// they explain is the trainer's time blocked in those copies and syncs.
fn cuda_findings<'a>(f: &'a Facts) -> impl Iterator<Item = Finding> + 'a {
    let life =
        f.s.steps
            .trainer_tid
            .and_then(|tid| f.s.threads.iter().find(|t| t.tid == tid))
            .map_or(0.0, |t| t.lifetime_s);
    let copies_ms = f.anatomy.phase(Phase::Copies).map_or(0.0, |p| p.mean_ms);
    let (step_ms, predicted_step_ms) = f.predict(|m| m.without_serial(copies_ms));
    f.s.cuda.findings.iter().map(move |c| {
        let explains = if life > 0.0 { (c.blocked_s / life).min(1.0) } else { 0.0 };
        let (title, changes) = match c.id {
            FindingId::PageableCopies => (
                "Host-to-device copies from pageable memory: pin_memory is off or ineffective",
                vec![Change::flag("pin_memory", true), Change::flag("non_blocking", true)],
            ),
            _ => (
                "Pinned copies followed by a blocking sync: the copies do not overlap with compute",
                vec![Change::flag("non_blocking", true)],
            ),
        };
        Finding {
            id: c.id,
            title: title.to_string(),
            severity: c.severity,
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
            changes,
            expect: "The trainer's time in cudaMemcpy and stream syncs falls; the GPU idles less between steps.".into(),
            phase: Some(Phase::Copies),
            step_ms,
            predicted_step_ms,
            see: Some("tprof timeline REC --phase steady".into()),
        }
    })
}

fn facts(s: &Summary) -> Facts<'_> {
    let p = &s.pipeline;
    let trainer = s.steps.trainer_tid.and_then(|tid| {
        p.threads
            .iter()
            .filter(|t| t.tid == tid)
            .max_by_key(|t| t.life_ns())
    });
    Facts {
        s,
        p,
        steps: &s.steps,
        cores: s.cores_effective,
        cores_source: s.cores_source,
        trainer,
        workers: Group::of(
            p.threads
                .iter()
                .filter(|t| t.in_worker && t.role != Role::Pool),
        ),
        pools: Group::of(p.threads.iter().filter(|t| t.role == Role::Pool)),
        worker_pools: Group::of(
            p.threads
                .iter()
                .filter(|t| t.role == Role::Pool && t.in_worker),
        ),
        worker_processes: p.workers.at_a_time,
        anatomy: &s.anatomy,
        model: s.step_model,
    }
}

impl Facts<'_> {
    /// The measured mean step and the model's step after a change, in ms.
    fn predict(&self, after: impl Fn(&StepModel) -> f64) -> (Option<f64>, Option<f64>) {
        match &self.model {
            Some(m) => (Some(m.step_ms), Some(after(m))),
            None => (None, None),
        }
    }

    /// The trainer waited for data at least [`STARVED`] of the training
    /// phase and, where the anatomy has steps, of the steady state's steps
    /// too (worker starts counted when they recur): a job whose steady
    /// steps keep up (compute_bound) is not starved by waits at its start.
    fn starved(&self) -> bool {
        let steady = self.anatomy.steps.is_empty() || self.steady_wait() >= STARVED;
        self.steps.count > 0 && self.p.data_wait_frac >= STARVED && steady
    }

    /// The share of the steady state's steps the trainer waited for a
    /// batch, or for workers to start when they start again each epoch (a
    /// first set's start is a one-off the steady rate does not pay).
    fn steady_wait(&self) -> f64 {
        let starts = if self.p.workers.restarts > 0 {
            self.anatomy.share(Phase::WorkerStart)
        } else {
            0.0
        };
        self.anatomy.batch_wait_share() + starts
    }

    /// Share of the phase the trainer waited for a CPU.
    fn trainer_queued(&self) -> f64 {
        self.trainer
            .filter(|t| t.life_ns() > 0)
            .map_or(0.0, |t| t.time.runnable as f64 / t.life_ns() as f64)
    }

    /// The trainer's CPU queueing blamed on a group of threads, in
    /// proportion to the group's share of the job's runnable time.
    fn queued_behind(&self, group: &Group) -> f64 {
        let job_runnable = self.p.cpu.job_runnable * self.p.cpu.duration_s;
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

    fn demand(&self) -> f64 {
        self.p.cpu.job_on_cpu + self.p.cpu.job_runnable
    }

    /// The job's CPU demand (threads running or waiting for a CPU) per core.
    fn demand_per_core(&self) -> f64 {
        self.demand() / self.cores.max(1.0)
    }

    /// "5.9 CPUs per usable core (0.8 running + 11.1 runnable on …)", the
    /// quotient of the printed parts so that it checks out.
    fn demand_text(&self) -> String {
        let round1 = |x: f64| (x * 10.0).round() / 10.0;
        let (running, runnable) = (
            round1(self.p.cpu.job_on_cpu),
            round1(self.p.cpu.job_runnable),
        );
        format!(
            "the job's threads wanted {:.1} CPUs per usable core ({running:.1} running + {runnable:.1} runnable on {})",
            (running + runnable) / self.cores.max(1.0),
            self.cores_text()
        )
    }

    fn cores_text(&self) -> String {
        format!("{:.1} usable cores ({})", self.cores, self.cores_source)
    }

    /// "in the 8.1 s of training" (the report's "Training:" line says
    /// which stretch that is), so a reader knows what the shares are of.
    fn phase_text(&self) -> String {
        if self.p.whole_window {
            format!("in the {:.1} s recorded", self.p.cpu.duration_s)
        } else {
            format!("in the {:.1} s of training", self.p.cpu.duration_s)
        }
    }

    fn wait_text(&self) -> String {
        format!(
            "the trainer waited {:.0}% of its time for data {}",
            100.0 * self.p.data_wait_frac,
            self.phase_text()
        )
    }

    /// Threads of a group alive at a time, on average over the phase
    /// (worker processes restarted each epoch are not all alive at once).
    fn alive(&self, group: &Group) -> usize {
        if self.p.cpu.duration_s > 0.0 {
            (group.life_s / self.p.cpu.duration_s).round() as usize
        } else {
            0
        }
    }

    /// Threads of the trainer process's OpenMP and MKL pools (torch's
    /// intra-op pool), besides the trainer thread itself.
    fn trainer_pool_threads(&self) -> usize {
        let Some(pid) = self.trainer.map(|t| t.pid) else {
            return 0;
        };
        self.p
            .pools
            .iter()
            .filter(|g| g.pid == pid && matches!(g.library, PoolLibrary::OpenMp | PoolLibrary::Mkl))
            .map(|g| g.threads)
            .sum()
    }

    /// The most pool threads one process had.
    fn largest_pool(&self) -> usize {
        let mut per_process: BTreeMap<u32, usize> = BTreeMap::new();
        for g in &self.p.pools {
            *per_process.entry(g.pid).or_default() += g.threads;
        }
        per_process.values().copied().max().unwrap_or(0)
    }

    /// How the advised worker count follows from the CPU measured (the
    /// model in analysis::pipeline). Ratios print with two decimals,
    /// computed from the printed figures so the sentence checks out.
    fn advice_text(&self, a: &Advice) -> String {
        let c = &self.p.cpu;
        let round2 = |x: f64| (x * 100.0).round() / 100.0;
        let (workers, trainer, side) = (
            round2(c.workers_s),
            round2(c.trainer_s),
            round2(c.trainer_side_s),
        );
        // The quotient of the printed parts: at 0.44 + 0.10 CPU-s the
        // rounding alone moved the measured ratio (4.84) off theirs (4.78).
        let r = if trainer + side > 0.0 {
            round2(workers / (trainer + side))
        } else {
            round2(a.worker_to_trainer)
        };
        let (step, per_step) = if a.trainer_bound {
            let s = round2(a.trainer_serial_share);
            let text = format!(
                "a step takes at least the trainer thread's own {s:.2} of that (more than (1 + {r:.2}) / {:.1} cores = {:.2})",
                a.cores,
                (1.0 + r) / a.cores
            );
            (text, s)
        } else {
            let per_step = round2((1.0 + r) / a.cores);
            let text = format!(
                "on {:.1} cores a step takes at least (1 + {r:.2}) / {:.1} = {per_step:.2} of that",
                a.cores, a.cores,
            );
            (text, per_step)
        };
        format!(
            "per batch the workers need {r:.2}× the trainer side's CPU ({workers:.2} CPU-s of work against \
             {trainer:.2} for the trainer thread + {side:.2} for the rest of its process {}; pools spinning \
             for work left out); {step}, in which {:.2} workers busy all the time make a batch: num_workers={}",
            self.phase_text(),
            r / per_step.max(f64::MIN_POSITIVE),
            a.num_workers
        )
    }
}

fn too_many_workers(f: &Facts) -> Option<Finding> {
    let waiting = f.workers.waiting_share();
    let blame = f.steps.blame.runnable;
    let starves_trainer = f.starved() && blame >= LEADING;
    let queues_trainer = f.trainer_queued() >= TRAINER_QUEUED;
    let advice = f.p.advice?;
    // Workers that mostly wait for reads are not too many for the cores:
    // the advice counts CPU only, and more readers read side by side.
    let reading = f.workers.io_s >= IO_BOUND_WORKERS * (f.workers.on_cpu_s + f.workers.io_s);
    if !(starves_trainer || queues_trainer)
        || f.demand_per_core() < OVERSUBSCRIBED
        || waiting < CONTENDED
        || advice.num_workers >= f.worker_processes
        || reading
    {
        return None;
    }
    let data_part = if f.starved() {
        f.p.data_wait_frac * blame
    } else {
        0.0
    };
    let explains = data_part + f.queued_behind(&f.workers);
    let (step_ms, predicted_step_ms) = f.predict(|m| m.with_workers(advice.num_workers));
    Some(Finding {
        id: FindingId::TooManyWorkers,
        title: format!(
            "Too many data workers for the cores: {} worker processes at a time on {}, where the CPU they need calls for {}",
            f.worker_processes,
            f.cores_text(),
            advice.num_workers
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
            f.demand_text(),
            format!(
                "data-worker threads waited for a CPU {:.0}% of the time they wanted one",
                100.0 * waiting
            ),
            f.advice_text(&advice),
        ],
        fix: format!(
            "Set num_workers={} (from {}): more workers than the cores can run only queue for the CPU.",
            advice.num_workers, f.worker_processes
        ),
        changes: vec![Change::count(
            "num_workers",
            Some(f.worker_processes),
            advice.num_workers,
        )],
        expect:
            "Worker runnable time and the trainer's data waits drop; step time should not rise."
                .into(),
        phase: Some(Phase::WorkerCpuWait),
        step_ms,
        predicted_step_ms,
        see: Some(STEADY_OFFCPU_WORKERS.into()),
    })
}

fn thread_oversubscription(f: &Facts) -> Option<Finding> {
    let (pool_threads, worker_threads) = (f.alive(&f.pools), f.alive(&f.workers));
    let threads = pool_threads + worker_threads;
    let blame = f.steps.blame.futex + f.steps.blame.runnable;
    // A starved trainer whose workers wait for a CPU or at pool barriers
    // during the waits; or one whose job wants far more CPUs than there
    // are, its workers slowed the rest of the time: on the suite's job
    // (two workers, torch's default pools) the workers were on a CPU 92%
    // of the waits in one run in six, the trainer queued 22% of its time
    // against 25% and more in the others, and OMP_NUM_THREADS=1 takes it
    // from 15.0 to 18.2 it/s.
    let starves_trainer =
        f.starved() && (blame >= LEADING || f.demand_per_core() >= OVERSUBSCRIBED);
    let queues_trainer = f.trainer_queued() >= TRAINER_QUEUED;
    let capacity = f.cores * f.p.cpu.duration_s;
    let spinning = f.pools.spin_s / capacity.max(f64::MIN_POSITIVE);
    let contended_work = f.pools.share(f.pools.runnable_s + f.pools.futex_s) >= POOLS_CONTENDED
        && (f.pools.on_cpu_s - f.pools.spin_s) / capacity.max(f64::MIN_POSITIVE) >= POOL_COST;
    let trainer_pool_too_big =
        f.p.advice
            .is_some_and(|a| f.trainer_pool_threads() + 1 > a.pool_threads);
    if !(starves_trainer || queues_trainer)
        || f.pools.threads == 0
        || (threads as f64) < 2.0 * f.cores
        || !(trainer_pool_too_big || spinning >= POOL_COST || contended_work)
    {
        return None;
    }
    let data_part = if f.starved() {
        f.p.data_wait_frac * blame
    } else {
        0.0
    };
    let explains = data_part + f.queued_behind(&f.pools);
    let (fix, changes) = pool_fix(f);
    let (step_ms, predicted_step_ms) = f.predict(|m| {
        let n = f.p.advice.map_or(f.worker_processes, |a| {
            a.num_workers.min(f.worker_processes.max(1))
        });
        m.with_workers(n)
    });
    Some(Finding {
        id: FindingId::ThreadOversubscription,
        title: format!(
            "Thread pools oversubscribe the CPU: {pool_threads} pool threads (up to {} in one process) + \
             {worker_threads} data-worker threads = {threads} threads alive at a time on {}",
            f.largest_pool(),
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
                "of their {:.2} CPU-s, pool threads spent {:.2} spinning for work (OpenMP barriers, sched_yield loops)",
                f.pools.on_cpu_s, f.pools.spin_s
            ),
            format!(
                "during data waits the delivering worker was {:.0}% in futex waits and {:.0}% runnable",
                100.0 * f.steps.blame.futex,
                100.0 * f.steps.blame.runnable
            ),
            f.queued_text(),
        ],
        fix,
        changes,
        expect: "Pool threads per process drop; futex and runnable time in the workers fall, and so do the trainer's data waits.".into(),
        phase: Some(Phase::WorkerCpuWait),
        step_ms,
        predicted_step_ms,
        see: Some(STEADY_OFFCPU_WORKERS.into()),
    })
}

/// The pool settings to change: the OpenMP/MKL thread count the trainer's
/// pools keep (the cores the workers leave it; DataLoader workers already
/// run torch with one thread), and the pools inside the workers when they
/// cost CPU.
fn pool_fix(f: &Facts) -> (String, Vec<Change>) {
    let threads = f.p.advice.map_or(1, |a| a.pool_threads);
    let openmp =
        f.p.pools
            .iter()
            .any(|g| matches!(g.library, PoolLibrary::OpenMp | PoolLibrary::Mkl));
    let capacity = (f.cores * f.p.cpu.duration_s).max(f64::MIN_POSITIVE);
    let worker_pools_cost = f.worker_pools.on_cpu_s / capacity >= POOL_COST / 2.0;
    let mut changes = Vec::new();
    let mut fix = String::new();
    if openmp || !worker_pools_cost {
        changes.push(Change::count("OMP_NUM_THREADS", None, threads));
        changes.push(Change::count("MKL_NUM_THREADS", None, threads));
        let left = f.p.advice.map_or("no workers measured".to_string(), |a| {
            format!(
                "{:.1} cores - {:.2} busy workers",
                a.cores,
                a.workers_needed.min(a.cores)
            )
        });
        fix.push_str(&format!(
            "Set OMP_NUM_THREADS={threads} and MKL_NUM_THREADS={threads} in the environment before the \
             libraries load: the cores the workers leave the trainer's pools ({left}). "
        ));
    }
    if worker_pools_cost {
        fix.push_str(&format!(
            "The pools inside the workers used {:.2} CPU-s: call cv2.setNumThreads(1) in the DataLoader's \
             worker_init_fn (workers already run torch with one thread). ",
            f.worker_pools.on_cpu_s
        ));
    }
    fix.push_str(
        "torch.set_num_threads alone does not cap OpenCV's pool or the OpenMP pools of other libraries.",
    );
    (fix, changes)
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
    let explains = f.p.data_wait_frac * blame.max(if saturated { 0.5 } else { 0.0 });
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
    // More readers help while the device serves reads side by side and the
    // cores have room: the model's count, on the assumption that a read
    // takes as long with more of them in flight (the bench checks it).
    let more = f
        .model
        .map(|m| m.enough_workers())
        .filter(|&(n, _)| n > f.worker_processes && f.worker_processes > 0);
    let (step_ms, predicted_step_ms) = match more {
        Some((n, _)) => f.predict(|m| m.with_workers(n)),
        None => (f.model.map(|m| m.step_ms), None),
    };
    let mut fix =
        "Read faster: cache the dataset in memory or on local NVMe, pack small files into \
                   larger sequential shards (WebDataset, TFRecord), read larger chunks."
            .to_string();
    let mut changes = Vec::new();
    if let (Some((n, step)), Some(m)) = (more, f.model) {
        evidence.push(format!(
            "a worker takes {:.1} ms to make a batch, {:.1} ms of it in block IO; {} workers deliver \
             one every {:.1} ms where the rest of the step allows {:.1} ms: {n} workers keep up, \
             if the device serves {n} readers' requests as fast as it served {}",
            m.batch_ms,
            m.batch_io_ms,
            f.worker_processes,
            m.batch_ms / f.worker_processes.max(1) as f64,
            step,
            f.worker_processes
        ));
        fix = format!(
            "Set num_workers={n} (from {}): the workers wait for reads, not for the CPU, so more of \
             them read side by side while the device keeps up. Then read faster: cache the dataset \
             in memory or on local NVMe, pack small files into larger sequential shards.",
            f.worker_processes
        );
        changes.push(Change::count("num_workers", Some(f.worker_processes), n));
    }
    Some(Finding {
        id: FindingId::DiskBound,
        title: "Input is disk-bound: workers wait for block IO".into(),
        severity: severity(explains),
        explains_frac: explains,
        evidence,
        fix,
        changes,
        expect: "Workers' block-IO wait and the trainer's data waits fall; device %util drops or throughput rises.".into(),
        phase: Some(Phase::WorkerIo),
        step_ms,
        predicted_step_ms,
        see: Some(STEADY_OFFCPU_WORKERS.into()),
    })
}

fn decode_bound(f: &Facts) -> Option<Finding> {
    let blame = f.steps.blame.on_cpu;
    // A pool spinning for work (OpenCV's, OpenMP's) yields its CPU to
    // whoever wants it: it leaves the core as spare as an idle one. One
    // decoding worker's OpenCV pool spun 0.14 of a core on the zoo's job,
    // which put the spare core just under half.
    let spinning = f.p.cpu.pool_spin_s / f.p.cpu.duration_s.max(f64::MIN_POSITIVE);
    let spare = f.cores - (f.demand() - spinning).max(0.0);
    if !f.starved() || blame < LEADING || spare < 0.5 {
        return None;
    }
    let explains = f.p.data_wait_frac * blame;
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
        format!(
            "{spare:.1} of {} were idle on average{}",
            f.cores_text(),
            if spinning >= 0.05 {
                format!(" ({spinning:.2} of it pools spinning for work)")
            } else {
                String::new()
            }
        ),
    ];
    if !top.is_empty() {
        evidence.push(format!("workers' hottest functions: {}", top.join(", ")));
    }
    // The measured CPU's count when it asks for more; else one more per
    // idle core.
    let by_spare = f.worker_processes + spare.floor().max(1.0) as usize;
    let to = match f.p.advice {
        Some(a) if a.num_workers > f.worker_processes => a.num_workers,
        _ => by_spare,
    };
    if let Some(a) = f.p.advice.filter(|a| a.num_workers > f.worker_processes) {
        evidence.push(f.advice_text(&a));
    }
    let (step_ms, predicted_step_ms) = f.predict(|m| m.with_workers(to));
    Some(Finding {
        id: FindingId::DecodeBound,
        title: "Workers are busy decoding and augmenting while cores sit idle".into(),
        severity: severity(explains),
        explains_frac: explains,
        evidence,
        fix: format!(
            "Raise num_workers to {to} (from {}) to use the idle cores, and make decoding cheaper \
             (smaller images, a faster decoder, augmentation on the GPU).",
            f.worker_processes
        ),
        changes: vec![Change::count("num_workers", Some(f.worker_processes), to)],
        expect: "More batches ready in time: the trainer's data waits fall while worker CPU rises."
            .into(),
        phase: Some(Phase::WorkerBusy),
        step_ms,
        predicted_step_ms,
        see: Some("tprof flamegraph REC --phase steady --role data_worker".into()),
    })
}

fn trainer_cpu_bound(f: &Facts) -> Option<Finding> {
    let t = f.trainer?;
    let life = t.life_ns() as f64;
    let busy = if life > 0.0 {
        t.time.on_cpu as f64 / life
    } else {
        0.0
    };
    // Where the anatomy names the trainer's work (model compute, loading,
    // receiving, the GIL, copies), its own findings say it better.
    let named = [
        Phase::Compute,
        Phase::Loading,
        Phase::Receiving,
        Phase::Gil,
        Phase::Copies,
    ]
    .into_iter()
    .map(|p| f.anatomy.share(p))
    .sum::<f64>();
    if busy < TRAINER_BUSY || f.p.data_wait_frac >= STARVED || named >= phases::MIN_SHARE {
        return None;
    }
    let secs = |ns: u64| ns as f64 / 1e9;
    Some(Finding {
        id: FindingId::TrainerCpuBound,
        title: format!(
            "The trainer itself is CPU-bound (tid {} on a CPU {:.0}% of its time)",
            t.tid,
            100.0 * busy
        ),
        severity: severity(busy),
        explains_frac: busy,
        evidence: vec![
            format!(
                "the trainer (tid {}) ran {:.2} s and waited for a CPU {:.2} s of its {:.2} s {}",
                t.tid,
                secs(t.time.on_cpu),
                secs(t.time.runnable),
                secs(t.life_ns()),
                f.phase_text()
            ),
            format!("it waited only {:.0}% of its time for data", 100.0 * f.p.data_wait_frac),
        ],
        fix: "Move CPU work off the training loop (preprocessing into the DataLoader, logging and \
              metrics off the main thread); open the cpu flamegraph filtered to the trainer's tid to see where it goes."
            .into(),
        changes: Vec::new(),
        expect: "The trainer's on-CPU share per step falls and the GPU's idle time with it.".into(),
        phase: Some(Phase::Other),
        step_ms: f.model.map(|m| m.step_ms),
        predicted_step_ms: None,
        see: Some("tprof flamegraph REC --phase steady --role trainer".into()),
    })
}

fn gpu_bound(f: &Facts) -> Option<Finding> {
    let util =
        f.s.gpus
            .iter()
            .filter_map(|g| g.util_mean_pct)
            .fold(None, |m: Option<f64>, u| Some(m.map_or(u, |m| m.max(u))))?;
    if util < GPU_BUSY_PCT || f.p.data_wait_frac >= STARVED {
        return None;
    }
    Some(Finding {
        id: FindingId::GpuBound,
        title: format!("GPU-bound: the GPU is busy ({util:.0}%), the input pipeline keeps up"),
        severity: Severity::Low,
        explains_frac: util / 100.0,
        evidence: vec![
            format!("mean GPU utilization {util:.0}%"),
            format!("the trainer waited only {:.0}% of its time for data", 100.0 * f.p.data_wait_frac),
        ],
        fix: "Stop tuning the data loader; speed up the model itself (mixed precision, larger batches, fused kernels).".into(),
        changes: Vec::new(),
        expect: "Nothing in the loader will shorten steps; GPU-side changes will.".into(),
        phase: None,
        step_ms: f.model.map(|m| m.step_ms),
        predicted_step_ms: None,
        see: None,
    })
}

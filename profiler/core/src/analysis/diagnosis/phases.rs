//! Findings read from the step's anatomy (analysis::anatomy): a phase large
//! enough to matter, the setting that shrinks it, and the step the model
//! (analysis::whatif) predicts after the change. Each names the command
//! that shows its evidence.

use super::{Change, Facts, Finding, FindingId, STARVED, Severity, severity};
use crate::analysis::anatomy::{Phase, PhaseStats};
use crate::analysis::pipeline::pool_threads_left;
use crate::analysis::whatif::StepModel;

/// A phase must take at least this share of the steps to be a finding.
pub(super) const MIN_SHARE: f64 = 0.10;
/// Compute's share of the steps above which the job is compute-bound (with
/// the trainer waiting for batches less than [`STARVED`]).
const COMPUTE_BOUND: f64 = 0.5;
/// Of a phase's time, the share one label must have to be named as its
/// cause ("slow worker start: open_index").
const NAMED_CAUSE: f64 = 0.4;
/// Waits are bursty when this share of their time falls in the slowest
/// quarter of the steps.
const BURSTY: f64 = 0.6;
/// The waits of workers that fall behind on average are bursts rather than
/// a steady shortfall when this share of their time falls in the slowest
/// quarter of the steps. Higher than [`BURSTY`]: two workers that take
/// turns and fall behind alike make the trainer wait at every other step,
/// which alone puts half the wait in that quarter (the zoo's remote
/// storage job measured 0.60 and 0.63 on a slower machine, and lost its
/// finding at 0.6; its bursty job, every 8th batch 180 ms, 0.99).
const BURSTS_BEHIND: f64 = 0.75;
/// A finding whose whole point is a faster step (a deeper prefetch) fires
/// only when the step measured is this much above the one predicted.
const MIN_GAIN: f64 = 1.15;

/// Every finding of this module that applies.
pub(super) fn findings(f: &Facts) -> Vec<Finding> {
    [
        loading_in_trainer(f),
        worker_start(f),
        prefetch_starved(f),
        latency_bound(f),
        costly_batches(f),
        gil_contention(f),
        compute_bound(f),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn share(f: &Facts, phase: Phase) -> f64 {
    f.anatomy.share(phase)
}

fn mean_ms(f: &Facts, phase: Phase) -> f64 {
    f.anatomy.phase(phase).map_or(0.0, |p| p.mean_ms)
}

/// "parse_record (train_job.py) 78%, …": a phase's top labels.
fn tops(p: &PhaseStats, n: usize) -> String {
    p.top
        .iter()
        .take(n)
        .map(|(l, s)| format!("{l} {:.0}%", 100.0 * s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "step 52.3 ms now, 31.0 ms predicted (1.69×)".
fn prediction_text(m: &StepModel, predicted: f64) -> String {
    format!(
        "the step model predicts {predicted:.1} ms a step after the change, against {:.1} ms measured \
         ({:.2}× the throughput)",
        m.step_ms,
        m.step_ms / predicted.max(f64::MIN_POSITIVE)
    )
}

fn phase_share_text(f: &Facts, p: &PhaseStats) -> String {
    format!(
        "{} took {:.0}% of the steps' time ({:.1} ms a step on average, in {} of {} steps): {}",
        p.phase.title(),
        100.0 * p.share,
        p.mean_ms,
        p.steps,
        f.anatomy.steps.len(),
        tops(p, 3)
    )
}

fn gpu_text(p: &PhaseStats) -> Option<String> {
    p.gpu_idle_s
        .filter(|&s| s > 0.0)
        .map(|s| format!("the GPUs idled {s:.2} s during it"))
}

/// `num_workers=0`: loading on the training thread, serial with the step.
fn loading_in_trainer(f: &Facts) -> Option<Finding> {
    let p = f.anatomy.phase(Phase::Loading)?;
    if p.share < MIN_SHARE || f.worker_processes > 0 {
        return None;
    }
    let m = f.model?;
    let (n, predicted) = m.loading_moved(p.mean_ms);
    let mut evidence = vec![
        phase_share_text(f, p),
        format!(
            "the trainer's own time is {:.1} ms a step, {:.1} ms of it loading; in {n} worker \
             processes the loading overlaps the rest ({:.1} ms), within the {:.1} usable cores \
             ({:.1} ms of CPU a step)",
            m.serial_ms,
            p.mean_ms,
            (m.serial_ms - p.mean_ms).max(0.0),
            m.cores,
            m.trainer_cpu_ms + m.worker_cpu_ms
        ),
        prediction_text(&m, predicted),
    ];
    evidence.extend(gpu_text(p));
    let mut fix = format!(
        "Set num_workers={n} and persistent_workers=True: the DataLoader then loads in worker \
         processes while the trainer trains, instead of between steps, and the workers start once \
         rather than at every epoch."
    );
    // The prediction is for workers that start once: without
    // persistent_workers they start again at every epoch.
    let mut changes = vec![
        Change::count("num_workers", Some(0), n),
        Change::flag("persistent_workers", true),
    ];
    if let Some(cap) = trainer_pool_cap(f, &m, p.mean_ms, predicted) {
        let threads = cap.threads;
        evidence.push(format!(
            "the trainer's OpenMP/MKL pool runs {} threads; the workers will keep {:.2} of the {:.1} \
             cores busy, which leaves the pool {threads}",
            cap.pool, cap.busy, m.cores
        ));
        fix.push_str(&format!(
            " Set OMP_NUM_THREADS={threads} and MKL_NUM_THREADS={threads} too, before the libraries \
             load: with the loading in workers the trainer's pool would spin against them for the \
             cores."
        ));
        changes.push(Change::count("OMP_NUM_THREADS", None, threads));
        changes.push(Change::count("MKL_NUM_THREADS", None, threads));
    }
    Some(Finding {
        id: FindingId::LoadingInTrainer,
        title: format!(
            "Batches are loaded on the training thread (num_workers=0): {:.0}% of each step in {}",
            100.0 * p.share,
            p.top.first().map_or("the dataset", |(l, _)| l.as_str())
        ),
        severity: severity(p.share),
        explains_frac: p.share,
        evidence,
        fix,
        changes,
        expect: format!(
            "The trainer's loading phase is gone from its steps; a step takes about {predicted:.0} ms."
        ),
        phase: Some(Phase::Loading),
        step_ms: Some(m.step_ms),
        predicted_step_ms: Some(predicted),
        see: Some("tprof flamegraph REC --phase steady --role trainer".into()),
    })
}

/// The OpenMP/MKL threads the trainer's pool may keep once its loading
/// (`loading_ms` a step) runs in workers at a step of `predicted_ms`: the
/// cores the workers leave, at least one; None when the pool is no larger.
/// With the loading on the training thread the pool never competed with
/// it; in workers it does, and its spinning takes the cores the step model
/// counts on (the suite's job on 2 cores: num_workers=2 alone took it from
/// 13.3 to 13.8 it/s, with OMP_NUM_THREADS=1 as well from 13.6 to 20.1;
/// medians of three untraced rounds).
fn trainer_pool_cap(
    f: &Facts,
    m: &StepModel,
    loading_ms: f64,
    predicted_ms: f64,
) -> Option<PoolCap> {
    let busy = loading_ms / predicted_ms.max(f64::MIN_POSITIVE);
    let threads = pool_threads_left(m.cores, busy);
    // The pool's threads and the thread that calls into it.
    let pool = f.trainer_pool_threads() + 1;
    (pool > threads).then_some(PoolCap {
        pool,
        busy,
        threads,
    })
}

/// The trainer's pool as it runs (`pool` threads), the cores the workers
/// will keep busy, and the threads the pool may keep.
struct PoolCap {
    pool: usize,
    busy: f64,
    threads: usize,
}

/// Workers started again and again in the steady state: every epoch's new
/// set without `persistent_workers`, each paying its start (fork or spawn,
/// imports, `worker_init_fn`) before its first batch.
fn worker_start(f: &Facts) -> Option<Finding> {
    let p = f.anatomy.phase(Phase::WorkerStart)?;
    let restarts = f.p.workers.restarts;
    if p.share < MIN_SHARE || restarts == 0 {
        return None;
    }
    let m = f.model?;
    // With persistent workers the starts are gone, but the first batch of
    // each epoch is still made after the epoch begins.
    let total_ms = m.step_ms * m.steps as f64;
    let start_ms = p.mean_ms * m.steps as f64;
    let first_batches = p.steps as f64 * m.batch_ms;
    let predicted =
        ((total_ms - start_ms + first_batches) / m.steps as f64).max(m.without_restarts());
    let per_start = start_ms / p.steps.max(1) as f64;
    let named = p
        .top
        .first()
        .filter(|(label, s)| *s >= NAMED_CAUSE && !label.starts_with('['));
    let (id, title) = match named {
        Some((label, s)) => (
            FindingId::SlowWorkerStart,
            format!(
                "Slow worker start, paid at every epoch: {per_start:.0} ms each time, {:.0}% of it in {label}",
                100.0 * s
            ),
        ),
        None => (
            FindingId::WorkersRestarted,
            format!(
                "Workers are restarted every epoch: {per_start:.0} ms of each epoch's first step starting them"
            ),
        ),
    };
    let mut evidence = vec![
        phase_share_text(f, p),
        format!(
            "{restarts} new set(s) of workers started after the first, as at each epoch without \
             persistent_workers; a set takes {per_start:.0} ms from the old set's shutdown to the new \
             one's first batch"
        ),
        prediction_text(&m, predicted),
    ];
    evidence.extend(gpu_text(p));
    let fix = match named {
        Some((label, _)) => format!(
            "Set persistent_workers=True so that workers start once; and make the start cheaper: \
             {label} runs in every worker before its first batch (open it lazily on first use, or \
             share it from the parent before the fork)."
        ),
        None => "Set persistent_workers=True: the workers then start once, not at every epoch."
            .to_string(),
    };
    Some(Finding {
        id,
        title,
        severity: severity(p.share),
        explains_frac: p.share,
        evidence,
        fix,
        changes: vec![Change {
            from: Some(super::SettingValue::Flag(false)),
            ..Change::flag("persistent_workers", true)
        }],
        expect: format!(
            "No worker start at epoch boundaries; a step takes about {predicted:.0} ms on average."
        ),
        phase: Some(Phase::WorkerStart),
        step_ms: Some(m.step_ms),
        predicted_step_ms: Some(predicted),
        see: Some("tprof timeline REC --phase steady".into()),
    })
}

/// Waits that come in bursts while the workers keep up on average: a
/// costly batch holds the in-order queue, and a deeper prefetch would have
/// started it sooner.
fn prefetch_starved(f: &Facts) -> Option<Finding> {
    let m = f.model?;
    if m.workers == 0 || m.batch_ms <= 0.0 {
        return None;
    }
    // Steps whose worker started (an epoch's first) are another finding's.
    let (steps, started): (Vec<&crate::analysis::anatomy::PhaseTimes>, Vec<_>) = f
        .anatomy
        .steps
        .iter()
        .partition(|s| s.get(Phase::WorkerStart) == 0);
    if steps.is_empty() {
        return None;
    }
    let total: u64 = steps.iter().map(|s| s.total()).sum();
    let started_ns: u64 = started.iter().map(|s| s.total()).sum();
    let mut waits = steady_batch_waits(f);
    let waited: u64 = waits.iter().sum();
    let wait_share = waited as f64 / total.max(1) as f64;
    // Ranked against the other findings by its share of all the steps'
    // time: the started steps' time is part of what it does not explain.
    let explains = waited as f64 / (total + started_ns).max(1) as f64;
    let rest = m.serial_ms.max(m.cpu_bound_ms());
    let supply = m.batch_ms / m.workers as f64;
    // Waits for a CPU mean too many threads, not bursts.
    let busy =
        share(f, Phase::WorkerBusy) + share(f, Phase::WorkerIo) + share(f, Phase::WorkerSleep);
    if wait_share < MIN_SHARE
        // Workers that fall behind on average are short, not bursty; the
        // slowest one's pace is the prediction's (whatif), and MIN_GAIN
        // below asks that a deeper prefetch buy something against it.
        || supply > rest
        || busy < share(f, Phase::WorkerCpuWait)
    {
        return None;
    }
    let concentrated = concentration(&mut waits);
    let measured = total as f64 / 1e6 / steps.len() as f64;
    let steady = m.without_restarts();
    // A deeper prefetch starts the same work earlier, which needs cores
    // left idle between the bursts: with the cores full, the waits are the
    // cores' (cpu_saturated), however they bunch.
    if concentrated < BURSTY || measured < MIN_GAIN * steady || m.cores_full(steady_step_ms(f, &m))
    {
        return None;
    }
    // A deeper prefetch evens out the other steps; those a worker start
    // held up stay as measured.
    let predicted = (started_ns as f64 / 1e6 + steady * steps.len() as f64)
        / (steps.len() + started.len()) as f64;
    let longest_ms = waits.first().copied().unwrap_or(0) as f64 / 1e6;
    // Batches queued ahead must cover the longest wait at the predicted
    // pace, spread over the workers; PyTorch's default is 2 per worker.
    let ahead = (longest_ms / steady.max(f64::MIN_POSITIVE)).ceil() as usize;
    let factor = (ahead.div_ceil(m.workers) + 2).clamp(3, 16);
    Some(Finding {
        id: FindingId::PrefetchStarved,
        title: format!(
            "Prefetch starved: the workers keep up on average ({supply:.1} ms a batch against {rest:.1} ms \
             a step) but the trainer waits in bursts, up to {longest_ms:.0} ms"
        ),
        severity: severity(explains),
        explains_frac: explains,
        evidence: vec![
            format!(
                "the trainer waited for batches {:.0}% of the time of the steps no worker start held up, \
                 {:.0}% of it in the slowest quarter of them",
                100.0 * wait_share,
                100.0 * concentrated
            ),
            format!(
                "a worker makes a batch in {:.1} ms on average; {} workers deliver one every {supply:.1} ms{}",
                m.batch_ms,
                m.workers,
                if m.slowest_batch_ms > 1.1 * m.batch_ms {
                    format!(
                        ", but the slowest takes {:.1} ms a batch, and batches come back in the \
                         order they went out: one every {:.1} ms at best",
                        m.slowest_batch_ms,
                        m.slowest_batch_ms / m.workers as f64
                    )
                } else {
                    String::new()
                }
            ),
            format!(
                "those steps took {measured:.1} ms on average and would take {steady:.1} ms; {}",
                prediction_text(&m, predicted)
            ),
        ],
        fix: format!(
            "Set prefetch_factor={factor}: each worker then works further ahead, so that a costly \
             batch is started early enough to be ready when its turn comes."
        ),
        changes: vec![Change::count("prefetch_factor", None, factor)],
        expect: "Waits for a batch no longer come in bursts; steps even out near the average."
            .into(),
        phase: Some(Phase::WorkerBusy),
        step_ms: Some(m.step_ms),
        predicted_step_ms: Some(predicted),
        see: Some("tprof timeline REC --phase steady".into()),
    })
}

/// Workers that fall behind while they wait on something that is neither
/// a CPU nor the disk (an object store, a network filesystem, a service):
/// a waiting worker costs next to no CPU, so more of them overlap more of
/// the waits, until the trainer's own step or the cores bind. Workers
/// that keep up on average but wait in bursts are `prefetch_starved`'s;
/// workers on a CPU or in block IO are `decode_bound`'s and
/// `disk_bound`'s.
///
/// Which of these a job is comes from the workers' whole making of their
/// batches, not from the part the trainer waited through: that part is
/// the making's tail (collating, sending), so a worker that sleeps 85% of
/// its batch left the trainer waiting 10% of the steps on it asleep and 9%
/// on it collating (the zoo's remote storage job on a slower machine,
/// which lost its finding when the sleep alone had to be 10% and lead).
fn latency_bound(f: &Facts) -> Option<Finding> {
    let m = f.model?;
    let p = f.anatomy.phase(Phase::WorkerSleep)?;
    let behind = making_waits(f);
    let share: f64 = behind.iter().map(|w| w.share).sum();
    if m.workers == 0 || share < MIN_SHARE {
        return None;
    }
    let w = &f.anatomy.workers;
    let making = w.making_ns().max(1) as f64;
    let waiting = w.sleep_ns as f64 / making;
    let rest = m.serial_ms.max(m.cpu_bound_ms());
    let batch = m.batch_for(m.workers);
    let supply = batch / m.workers as f64;
    // Most of a batch's making spent waiting, workers short of the pace
    // the rest of the step allows, and cores to spare.
    if waiting < 0.5 || supply <= rest || m.cores_full(steady_step_ms(f, &m)) {
        return None;
    }
    // Waits a few steps hold are bursts, which the step model's mean
    // supply does not see: the bench's bursty job (every 8th batch 180 ms,
    // all on one of two workers) was told 3 workers for an 11.4 ms step
    // and measured 27.1 ms.
    if concentration(&mut steady_batch_waits(f)) >= BURSTS_BEHIND {
        return None;
    }
    let (to, predicted) = m.enough_workers();
    if to <= m.workers || predicted >= m.step_ms {
        return None;
    }
    let mut evidence = vec![
        format!(
            "the trainer waited {:.0}% of the steps' time for batches their workers were still \
             making: {}",
            100.0 * share,
            behind
                .iter()
                .map(|w| format!(
                    "{} {:.0}% ({})",
                    w.phase.title().trim_start_matches("wait: "),
                    100.0 * w.share,
                    tops(w, 2)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        format!(
            "a worker makes a batch in {:.1} ms, {:.0}% of it blocked neither on a CPU nor on the \
             disk; {} workers deliver one every {supply:.1} ms, where the trainer's own step \
             ({:.1} ms) and the cores ({:.1} ms a step for the job's CPU work) allow one every \
             {rest:.1} ms",
            batch,
            100.0 * waiting,
            m.workers,
            m.serial_ms,
            m.cpu_bound_ms()
        ),
        prediction_text(&m, predicted),
    ];
    evidence.extend(gpu_text(p));
    let what = p
        .top
        .first()
        .map_or("the workers' waits", |(l, _)| l.as_str());
    Some(Finding {
        id: FindingId::LatencyBound,
        title: format!(
            "Workers wait while making batches ({what}) and fall behind: {:.0}% of each step waits on them",
            100.0 * share
        ),
        severity: severity(share),
        explains_frac: share,
        evidence,
        fix: format!(
            "Raise num_workers to {to} (from {}): a waiting worker costs next to no CPU, so more \
             of them overlap more of the waits. Or make {what} wait less (a local cache, larger \
             or concurrent requests).",
            m.workers
        ),
        changes: vec![Change::count("num_workers", Some(m.workers), to)],
        expect: format!(
            "The trainer's waits for batches shrink; a step takes about {predicted:.0} ms."
        ),
        phase: Some(Phase::WorkerSleep),
        step_ms: Some(m.step_ms),
        predicted_step_ms: Some(predicted),
        see: Some("tprof flamegraph REC --kind wall --phase steady --role data_worker".into()),
    })
}

/// Batches that cost a lot to hand over: pickling and shared memory in the
/// worker, unpickling and rebuilding in the trainer.
fn costly_batches(f: &Facts) -> Option<Finding> {
    let total = share(f, Phase::Receiving) + share(f, Phase::Sending);
    if total < MIN_SHARE {
        return None;
    }
    let m = f.model?;
    let (receiving, sending) = (mean_ms(f, Phase::Receiving), mean_ms(f, Phase::Sending));
    let label = |phase| {
        f.anatomy
            .phase(phase)
            .map(|p| tops(p, 2))
            .unwrap_or_default()
    };
    // The share of receiving spent reading the pipe itself: the batch
    // travels through it pickled whole (numpy arrays, lists), where
    // tensors would leave only a handle to shared memory in it.
    let labels = f.anatomy.labels_of(Phase::Receiving);
    let all: u64 = labels.iter().map(|(_, ns)| ns).sum();
    let piped: u64 = labels
        .iter()
        .filter(|(l, _)| l.contains("Connection._recv") || l.contains("recv_bytes"))
        .map(|(_, ns)| ns)
        .sum();
    let pipe_share = piped as f64 / all.max(1) as f64;
    let pickled_whole = pipe_share >= 0.5;
    // Tensors take the pipe's part off receiving (and the workers' pickling
    // of the bytes off sending); a uint8 batch is a quarter of float32's
    // bytes (an eighth of float64's: the prediction is for the smaller
    // gain) for what is left.
    let (bytes_left, mut changes) = if pickled_whole {
        (
            1.0 - pipe_share,
            vec![Change::text("collate_fn", "tensors")],
        )
    } else {
        (1.0, Vec::new())
    };
    changes.push(Change::text("batch_dtype", "uint8"));
    let predicted = m.with_smaller_batches(receiving, 4.0 / bytes_left.max(0.01));
    let mut evidence = vec![
        format!(
            "receiving (the trainer unpickling, rebuilding tensors): {}",
            label(Phase::Receiving)
        ),
        format!(
            "sending (the worker pickling, writing out; {:.1} ms of its CPU a step): {}",
            m.sending_cpu_ms,
            label(Phase::Sending)
        ),
    ];
    if pickled_whole {
        evidence.push(format!(
            "{:.0}% of receiving is reading the pipe: the batches travel through it pickled whole, \
             not as tensors in shared memory",
            100.0 * pipe_share
        ));
    }
    evidence.push(format!(
        "{} ({}a uint8 batch is a quarter of float32's bytes)",
        prediction_text(&m, predicted),
        if pickled_whole {
            "tensors leave the pipe only a handle; "
        } else {
            ""
        }
    ));
    let tensors = if pickled_whole {
        "Send tensors: the batches are not tensors (numpy arrays, lists) and travel pickled \
         whole through the pipe; a collate_fn that returns tensors (default_collate does) sends \
         them through shared memory instead. "
    } else {
        ""
    };
    Some(Finding {
        id: FindingId::CostlyBatches,
        title: format!(
            "Batches are costly to pass between processes: {receiving:.1} ms receiving and {sending:.1} ms \
             sending per step"
        ),
        severity: severity(total),
        explains_frac: total,
        evidence,
        fix: format!(
            "{tensors}Send smaller batches: keep images uint8 in the workers (if they are not \
             already) and convert (and normalize) after the batch arrives, on the GPU where there \
             is one; resize before sending, not after."
        ),
        changes,
        expect: "The trainer's receiving phase shrinks with the batch's bytes.".into(),
        phase: Some(Phase::Receiving),
        step_ms: Some(m.step_ms),
        predicted_step_ms: Some(predicted),
        see: Some("tprof flamegraph REC --phase steady --role trainer".into()),
    })
}

/// The trainer waiting for the GIL another of its process's threads holds.
fn gil_contention(f: &Facts) -> Option<Finding> {
    let p = f.anatomy.phase(Phase::Gil)?;
    if p.share < MIN_SHARE {
        return None;
    }
    let m = f.model?;
    let predicted = m.without_serial(p.mean_ms);
    let holder = p.top.first().map_or("another thread", |(l, _)| l.as_str());
    Some(Finding {
        id: FindingId::GilContention,
        title: format!(
            "The trainer waits for the GIL: {:.0}% of each step, {holder}",
            100.0 * p.share
        ),
        severity: severity(p.share),
        explains_frac: p.share,
        evidence: vec![phase_share_text(f, p), prediction_text(&m, predicted)],
        fix: "Move the holder's pure-Python work out of the training process (a separate process, \
              or less often), or into code that releases the GIL; no DataLoader setting changes it."
            .into(),
        changes: Vec::new(),
        expect: "The trainer's GIL waits vanish from its steps.".into(),
        phase: Some(Phase::Gil),
        step_ms: Some(m.step_ms),
        predicted_step_ms: Some(predicted),
        see: Some("tprof flamegraph REC --kind wall --phase steady --role trainer".into()),
    })
}

/// The model itself is the step: the input pipeline keeps up.
fn compute_bound(f: &Facts) -> Option<Finding> {
    let p = f.anatomy.phase(Phase::Compute)?;
    if p.share < COMPUTE_BOUND || f.anatomy.batch_wait_share() >= STARVED {
        return None;
    }
    Some(Finding {
        id: FindingId::ComputeBound,
        title: format!(
            "Compute-bound: the model takes {:.0}% of each step; the input pipeline keeps up",
            100.0 * p.share
        ),
        severity: Severity::Low,
        explains_frac: p.share,
        evidence: vec![
            phase_share_text(f, p),
            format!(
                "the trainer waited for batches {:.0}% of the steps' time",
                100.0 * f.anatomy.batch_wait_share()
            ),
        ],
        fix: "Leave the DataLoader as it is; a faster step comes from the model (mixed precision, \
              a GPU, a smaller or fused model)."
            .into(),
        changes: Vec::new(),
        expect: "Nothing in the loader will shorten steps.".into(),
        phase: Some(Phase::Compute),
        step_ms: f.model.map(|m| m.step_ms),
        predicted_step_ms: None,
        see: Some("tprof flamegraph REC --phase steady --role trainer".into()),
    })
}

/// The step measured without the workers' starts (paid once, or at
/// every epoch: another finding's), in ms.
fn steady_step_ms(f: &Facts, m: &StepModel) -> f64 {
    (m.step_ms - mean_ms(f, Phase::WorkerStart)).max(0.0)
}

/// Of the waits per step, the share in the slowest quarter of the steps
/// (sorts `waits`, largest first): near a quarter when every step waits
/// alike, near one when a few steps hold the waits.
fn concentration(waits: &mut [u64]) -> f64 {
    waits.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = waits.iter().sum();
    let quarter: u64 = waits.iter().take(waits.len().div_ceil(4)).sum();
    quarter as f64 / total.max(1) as f64
}

/// The batch waits of each step no worker start held up.
fn steady_batch_waits(f: &Facts) -> Vec<u64> {
    f.anatomy
        .steps
        .iter()
        .filter(|s| s.get(Phase::WorkerStart) == 0)
        .map(|s| {
            s.nonzero()
                .filter(|(p, _)| p.is_batch_wait())
                .map(|(_, ns)| ns)
                .sum()
        })
        .collect()
}

/// The trainer's waits for a batch its worker was making (on a CPU,
/// waiting for one, in block IO, asleep, sending it), largest first: what
/// more workers, each a batch ahead, would shorten.
fn making_waits<'a>(f: &'a Facts) -> Vec<&'a PhaseStats> {
    batch_waits(f)
        .into_iter()
        .filter(|p| {
            p.share > 0.0
                && matches!(
                    p.phase,
                    Phase::WorkerBusy
                        | Phase::WorkerCpuWait
                        | Phase::WorkerIo
                        | Phase::WorkerSleep
                        | Phase::Sending
                )
        })
        .collect()
}

/// The trainer's waits for batches (and workers' starts), largest first.
fn batch_waits<'a>(f: &'a Facts) -> Vec<&'a PhaseStats> {
    let mut waits: Vec<&PhaseStats> = f
        .anatomy
        .phases
        .iter()
        .filter(|p| p.phase.is_batch_wait() || p.phase == Phase::WorkerStart)
        .collect();
    waits.sort_by(|a, b| b.share.total_cmp(&a.share));
    waits
}

fn waits_text(waits: &[&PhaseStats]) -> Vec<String> {
    waits
        .iter()
        .take(3)
        .map(|p| {
            format!(
                "{}: {:.0}% of the steps ({})",
                p.phase.title(),
                100.0 * p.share,
                tops(p, 2)
            )
        })
        .collect()
}

/// The trainer waited for batches and no finding above names a setting:
/// say whether the cores are the limit ([`cpu_saturated`]) and otherwise
/// name what the critical path ran, instead of saying nothing.
pub(super) fn input_limit(f: &Facts) -> Option<Finding> {
    let wait = f.steady_wait();
    if wait < STARVED {
        return None;
    }
    cpu_saturated(f, wait).or_else(|| input_wait(f, wait))
}

/// The trainer waits for batches because the cores are full: the job's
/// CPU work per step, spread over the usable cores, is most of the step,
/// so no setting that runs the same work elsewhere or earlier helps. The
/// way out is less work per batch, or more cores.
fn cpu_saturated(f: &Facts, wait: f64) -> Option<Finding> {
    let m = f.model?;
    let step = steady_step_ms(f, &m);
    if m.workers == 0 || !m.cores_full(step) {
        return None;
    }
    let worker_cpu = m.steady_cpu_ms() - m.trainer_cpu_ms;
    let busy = f.anatomy.phase(Phase::WorkerBusy);
    let what = busy
        .and_then(|p| p.top.first())
        .map_or("the workers' code", |(l, _)| l.as_str());
    let bound = m.steady_cpu_bound_ms();
    let more = (m.cores * 2.0).round();
    let (n, with_more) = m.with_cores(more);
    let mut evidence = waits_text(&batch_waits(f));
    evidence.push(format!(
        "the job's CPU work is {:.1} ms a step ({:.1} ms the trainer's process, {worker_cpu:.1} ms \
         the workers' making and sending batches); on {:.1} usable cores that is at least \
         {bound:.1} ms a step, {:.0}% of the {step:.1} ms measured (worker starts left out); \
         with what other processes ran ({:.2} CPUs, tprof among them) the cores were {:.0}% busy",
        m.steady_cpu_ms(),
        m.trainer_cpu_ms,
        m.cores,
        100.0 * bound / step.max(f64::MIN_POSITIVE),
        m.other_cpus,
        100.0 * m.busy_share(step)
    ));
    if let Some(p) = busy {
        evidence.push(phase_share_text(f, p));
    }
    evidence.push(format!(
        "on {more:.0} usable cores with num_workers={n} the step model gives {with_more:.1} ms a step"
    ));
    Some(Finding {
        id: FindingId::CpuSaturated,
        title: format!(
            "Input-bound at the cores' capacity: the trainer waits for batches {:.0}% of each step \
             while the job's work fills the {:.1} usable cores; no DataLoader setting shortens the step",
            100.0 * wait,
            m.cores
        ),
        severity: severity(wait),
        explains_frac: wait,
        evidence,
        fix: format!(
            "Make each batch cheaper to make: {what} is the workers' largest cost (smaller or \
             pre-decoded images, lighter augmentation, decoding on the GPU such as DALI or \
             torchvision.io.decode_jpeg on the device), or run on more cores. More workers or a \
             deeper prefetch only move the same work in time."
        ),
        changes: Vec::new(),
        expect: "With cheaper batches the workers' CPU per step falls and the waits with it."
            .into(),
        phase: Some(Phase::WorkerBusy),
        step_ms: Some(m.step_ms),
        predicted_step_ms: None,
        see: Some("tprof flamegraph REC --phase steady --role data_worker".into()),
    })
}

/// The trainer waited for batches, the cores had room, and no setting
/// matches: the critical path's top phases and functions.
fn input_wait(f: &Facts, wait: f64) -> Option<Finding> {
    let waits = batch_waits(f);
    let lines = waits_text(&waits);
    let lead = waits.first()?;
    Some(Finding {
        id: FindingId::InputWait,
        title: format!(
            "The trainer waits for batches {:.0}% of each step, mostly {}: {}",
            100.0 * wait,
            lead.phase.title(),
            lead.top.first().map_or("-", |(l, _)| l.as_str())
        ),
        severity: severity(wait),
        explains_frac: wait,
        evidence: lines,
        fix: format!(
            "No DataLoader setting matches this wait: make {} cheaper, or open its flamegraph.",
            lead.top
                .first()
                .map_or("the workers' code", |(l, _)| l.as_str())
        ),
        changes: Vec::new(),
        expect: "The trainer's waits for batches shrink.".into(),
        phase: Some(lead.phase),
        step_ms: f.model.map(|m| m.step_ms),
        predicted_step_ms: None,
        see: Some("tprof flamegraph REC --kind wall --phase steady --role data_worker".into()),
    })
}

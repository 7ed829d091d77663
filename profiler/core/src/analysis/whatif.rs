//! What a change would buy: a model of the steady state's step time,
//! measured from the recording, in which a setting can be changed and the
//! step recomputed (the cheap version of Daydream's replay: the recorded
//! steps with one phase removed or moved, bounded by what the cores can
//! run).
//!
//! Per step, the trainer thread needs its own time, `serial`: everything
//! it does that is not waiting for a batch, a worker's start or a CPU
//! (compute, loading on the training thread, receiving, copies, the
//! GIL, the rest). A worker needs `batch` to make one batch (on a CPU, in
//! block IO, or otherwise blocked while making it, but not waiting for a
//! CPU), so `n` workers deliver one every `batch / n`. And all of it has
//! to fit in the cores: `cpu / cores`, where `cpu` is the job's CPU work
//! per step (the trainer's process and the workers', pools spinning for
//! work left out). A step takes at least each of these:
//!
//! ```text
//!     step(n) = max(serial, batch / n, cpu / cores)
//! ```
//!
//! With the workers as recorded, `batch` is the slowest worker's: the
//! DataLoader hands batches out in turn and takes them back in order, so a
//! worker that draws the costly ones (every 8th batch is always the same
//! worker's of two) sets the pace whatever the others do.
//!
//! A setting changes one term: `num_workers` changes `n` (and, from 0,
//! moves the trainer's loading into `batch`); `persistent_workers` removes
//! the worker starts; OpenMP's thread count removes the pools' spinning
//! from `cpu`; the GIL, copies and receiving come off `serial`. The model
//! assumes a batch costs the same whatever the configuration and that IO
//! latency does not grow with more readers; the zoo bench
//! (`cargo xtask bench zoo`, docs/benchmarks.md) measures how far that
//! holds.

use serde::Serialize;

use super::anatomy::{Anatomy, Phase};
use super::pipeline::Pipeline;
use crate::recording::SystemSample;

/// Other processes' load that counts: below half a core the job has the
/// cores to itself (the report warns from the same figure).
const OTHER_LOAD_CPUS: f64 = 0.5;

/// The share of the cores that, kept busy through the steps, makes the
/// cores the limit. A pipeline of dependent threads never keeps every
/// core busy all the time; see [`StepModel::busy_share`] and
/// docs/diagnosis.md for the zoo's figures.
pub const CORES_FULL: f64 = 0.85;

/// The most workers the model will advise per usable core: past it more
/// processes only add memory and contention, whatever the IO.
const MAX_WORKERS_PER_CORE: f64 = 4.0;

/// The steady state's terms, per step, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepModel {
    pub steps: usize,
    /// The measured mean step (steps over their summed time).
    pub step_ms: f64,
    /// The trainer's own time per step (see the module).
    pub serial_ms: f64,
    /// Waiting for batches and for workers to start, per step.
    pub wait_ms: f64,
    /// The trainer waiting for a CPU, per step.
    pub cpu_wait_ms: f64,
    /// Worker time to make one batch, waits for a CPU left out.
    pub batch_ms: f64,
    /// Of which block IO.
    pub batch_io_ms: f64,
    /// The slowest worker's time per batch it made: batches go out
    /// round-robin and come back in order, so with the recorded workers a
    /// batch arrives no faster than every `slowest_batch_ms / workers`.
    /// As `batch_ms` where the workers start again each epoch (each set
    /// makes a few batches) or with no workers.
    pub slowest_batch_ms: f64,
    /// Workers at a time.
    pub workers: usize,
    /// CPU work per step: the trainer's process, the workers.
    pub trainer_cpu_ms: f64,
    pub worker_cpu_ms: f64,
    /// Of the workers', what their starts took (workers restarted in the
    /// steady state).
    pub start_cpu_ms: f64,
    /// Of the workers', what sending batches took (pickling, writing).
    pub sending_cpu_ms: f64,
    /// Whether the workers' starts recur (a new set each epoch): false
    /// when the only starts are the first set's, a one-off cost the steady
    /// rate after them does not pay, so the CPU term leaves it out.
    pub starts_recur: bool,
    /// The cores the job could use, less what other processes kept busy
    /// in the steady state when that was half a core or more.
    pub cores: f64,
    /// CPUs other processes kept busy in the steady state.
    pub other_cpus: f64,
}

impl StepModel {
    pub fn of(
        anatomy: &Anatomy,
        pipeline: &Pipeline,
        cores: f64,
        system: &[SystemSample],
        machine_cores: u32,
    ) -> Option<StepModel> {
        let steps = anatomy.steps.len();
        if steps == 0 {
            return None;
        }
        let n = steps as f64;
        let per_step = |ns: u64| ns as f64 / 1e6 / n;
        let total: u64 = anatomy
            .steps
            .iter()
            .map(super::anatomy::PhaseTimes::total)
            .sum();
        let sum = |keep: &dyn Fn(Phase) -> bool| -> u64 {
            anatomy
                .steps
                .iter()
                .flat_map(super::anatomy::PhaseTimes::nonzero)
                .filter(|&(p, _)| keep(p))
                .map(|(_, ns)| ns)
                .sum()
        };
        let wait = sum(&|p| p.is_batch_wait() || p == Phase::WorkerStart);
        let cpu_wait = sum(&|p| p == Phase::CpuWait);
        let serial = total.saturating_sub(wait + cpu_wait);
        let w = &anatomy.workers;
        let cpu = &pipeline.cpu;
        let starts_recur = pipeline.workers.restarts > 0;
        let other_cpus = other_load(system, machine_cores, pipeline);
        let cores = if other_cpus >= OTHER_LOAD_CPUS {
            (cores - other_cpus).max(0.5)
        } else {
            cores
        };
        Some(StepModel {
            steps,
            step_ms: per_step(total),
            serial_ms: per_step(serial),
            wait_ms: per_step(wait),
            cpu_wait_ms: per_step(cpu_wait),
            batch_ms: per_step(w.making_ns()),
            batch_io_ms: per_step(w.io_ns),
            slowest_batch_ms: if starts_recur {
                per_step(w.making_ns())
            } else {
                per_step(w.slowest_making_ns * pipeline.workers.at_a_time as u64)
            },
            workers: pipeline.workers.at_a_time,
            trainer_cpu_ms: (cpu.trainer_s + cpu.trainer_side_s) * 1e3 / n,
            worker_cpu_ms: cpu.workers_s * 1e3 / n,
            start_cpu_ms: per_step(w.start_cpu_ns),
            sending_cpu_ms: per_step(w.sending_cpu_ns),
            starts_recur,
            cores,
            other_cpus,
        })
    }

    /// The CPU bound: the job's CPU work per step spread over the cores,
    /// the workers' starts in it when they recur.
    pub fn cpu_bound_ms(&self) -> f64 {
        self.cpu_ms() / self.cores.max(0.1)
    }

    /// The CPU work per step the model counts: the trainer's process and
    /// the workers', their starts only when they recur.
    pub fn cpu_ms(&self) -> f64 {
        if self.starts_recur {
            self.trainer_cpu_ms + self.worker_cpu_ms
        } else {
            self.steady_cpu_ms()
        }
    }

    /// The CPU work per step without the workers' starts.
    pub fn steady_cpu_ms(&self) -> f64 {
        self.trainer_cpu_ms + (self.worker_cpu_ms - self.start_cpu_ms).max(0.0)
    }

    /// The CPU bound without the workers' starts: what the steps' own work
    /// (the trainer's process, the workers making and sending batches)
    /// needs of the cores.
    pub fn steady_cpu_bound_ms(&self) -> f64 {
        self.steady_cpu_ms() / self.cores.max(0.1)
    }

    /// Whether the cores are the limit: over a step of `step_ms` (measured
    /// without the workers' starts), the steps' own CPU work and what other
    /// processes ran (tprof among them) kept at least [`CORES_FULL`] of the
    /// cores busy. No setting that runs the same work at another time (more
    /// workers, a deeper prefetch) shortens such a step.
    pub fn cores_full(&self, step_ms: f64) -> bool {
        self.busy_share(step_ms) >= CORES_FULL
    }

    /// The share of the cores the job's steps and other processes kept
    /// busy over a step of `step_ms`.
    pub fn busy_share(&self, step_ms: f64) -> f64 {
        let cores = if self.other_cpus >= OTHER_LOAD_CPUS {
            self.cores + self.other_cpus
        } else {
            self.cores
        };
        (self.steady_cpu_ms() / step_ms.max(f64::MIN_POSITIVE) + self.other_cpus) / cores.max(0.1)
    }

    /// The fewest workers that keep up on `cores` usable cores, and the
    /// step then: what more cores would buy a job whose cores are full.
    pub fn with_cores(&self, cores: f64) -> (usize, f64) {
        let cpu = self.steady_cpu_bound_ms() * self.cores.max(0.1) / cores.max(0.1);
        let floor = self.serial_ms.max(cpu);
        enough(self.batch_ms, floor, cores)
    }

    /// The step with workers that start once: their starts' CPU gone from
    /// the CPU term, the rest as measured.
    pub fn without_restarts(&self) -> f64 {
        step(
            self.serial_ms,
            self.batch_for(self.workers),
            self.workers.max(1),
            self.steady_cpu_bound_ms(),
        )
    }

    /// Batches `factor` times smaller to pass: the trainer's receiving
    /// (`receiving_ms` a step, on its own path and CPU) and the workers'
    /// sending CPU shrink with their bytes.
    pub fn with_smaller_batches(&self, receiving_ms: f64, factor: f64) -> f64 {
        let saved = 1.0 - 1.0 / factor.max(1.0);
        let serial = (self.serial_ms - saved * receiving_ms).max(0.0);
        let trainer_cpu = (self.trainer_cpu_ms - saved * receiving_ms).max(0.0);
        let worker_cpu = (self.worker_cpu_ms - saved * self.sending_cpu_ms).max(0.0);
        let cpu = (trainer_cpu + worker_cpu) / self.cores.max(0.1);
        step(
            serial,
            self.batch_for(self.workers),
            self.workers.max(1),
            cpu,
        )
    }

    /// The step with `workers` workers and everything else as measured.
    pub fn with_workers(&self, workers: usize) -> f64 {
        step(
            self.serial_ms,
            self.batch_for(workers),
            workers,
            self.cpu_bound_ms(),
        )
    }

    /// What the model says of the run as recorded (to weigh it against
    /// the measured step).
    pub fn as_recorded(&self) -> f64 {
        self.with_workers(self.workers)
    }

    /// A batch's time to make as it sets the pace with `workers` workers:
    /// the slowest worker's with the recorded count (batches go out
    /// round-robin and come back in order), the average with another
    /// count (which hands the costly batches out differently).
    pub fn batch_for(&self, workers: usize) -> f64 {
        if workers == self.workers {
            self.slowest_batch_ms.max(self.batch_ms)
        } else {
            self.batch_ms
        }
    }

    /// The fewest workers that keep up, and the step they give: a batch
    /// every `batch / n` no slower than the rest of the step allows.
    pub fn enough_workers(&self) -> (usize, f64) {
        let floor = self.serial_ms.max(self.cpu_bound_ms());
        enough(self.batch_ms, floor, self.cores)
    }

    /// `num_workers` from 0: the trainer's loading moves to workers, where
    /// it overlaps with the rest of the step.
    pub fn loading_moved(&self, loading_ms: f64) -> (usize, f64) {
        let serial = (self.serial_ms - loading_ms).max(0.0);
        let floor = serial.max(self.cpu_bound_ms());
        let (n, _) = enough(loading_ms, floor, self.cores);
        (n, step(serial, loading_ms, n, self.cpu_bound_ms()))
    }

    /// Without `ms` of the trainer's own path (the GIL, copies, receiving),
    /// with everything else as measured: the measured step less `ms`, but
    /// no shorter than the model's step without it. Not the model's step
    /// alone, which leaves out the waits it does not explain (bursts a
    /// deeper prefetch would hide, say), and those stay: GIL waits of
    /// 2.0 ms a step were predicted to take a bursty job from 16.2 to
    /// 7.0 ms a step, where the model said 9.1 ms as recorded.
    pub fn without_serial(&self, ms: f64) -> f64 {
        let serial = (self.serial_ms - ms).max(0.0);
        let floor = step(
            serial,
            self.batch_for(self.workers),
            self.workers.max(1),
            self.cpu_bound_ms(),
        )
        .max(if self.workers == 0 { serial } else { 0.0 });
        (self.step_ms - ms.max(0.0)).max(floor).min(self.step_ms)
    }
}

/// CPUs busy machine-wide over the pipeline's phase, less the job's.
fn other_load(system: &[SystemSample], machine_cores: u32, pipeline: &Pipeline) -> f64 {
    let first = system.iter().rev().find(|s| s.ts_ns <= pipeline.start_ns);
    let last = system.iter().find(|s| s.ts_ns >= pipeline.end_ns);
    let (Some(a), Some(b)) = (first.or(system.first()), last.or(system.last())) else {
        return 0.0;
    };
    let total = b.total_ticks.saturating_sub(a.total_ticks);
    if total == 0 {
        return 0.0;
    }
    let busy = b.busy_ticks.saturating_sub(a.busy_ticks) as f64 / total as f64;
    (busy * f64::from(machine_cores) - pipeline.cpu.job_on_cpu).max(0.0)
}

fn step(serial: f64, batch: f64, workers: usize, cpu_bound: f64) -> f64 {
    let supply = if workers == 0 {
        0.0
    } else {
        batch / workers as f64
    };
    serial.max(supply).max(cpu_bound)
}

/// The fewest workers making a batch every `floor` ms or faster, and the
/// step then.
fn enough(batch: f64, floor: f64, cores: f64) -> (usize, f64) {
    let cap = ((cores * MAX_WORKERS_PER_CORE).ceil() as usize).max(1);
    let n = if floor > 0.0 {
        ((batch / floor).ceil() as usize).clamp(1, cap)
    } else {
        cap
    };
    (n, floor.max(batch / n as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> StepModel {
        StepModel {
            steps: 10,
            step_ms: 100.0,
            serial_ms: 40.0,
            wait_ms: 60.0,
            cpu_wait_ms: 0.0,
            batch_ms: 120.0,
            batch_io_ms: 0.0,
            slowest_batch_ms: 120.0,
            workers: 1,
            trainer_cpu_ms: 40.0,
            worker_cpu_ms: 60.0,
            start_cpu_ms: 0.0,
            sending_cpu_ms: 0.0,
            starts_recur: false,
            cores: 2.0,
            other_cpus: 0.0,
        }
    }

    /// A serial phase comes off the measured step, down to the model's step
    /// without it: waits the model does not explain stay.
    #[test]
    fn a_serial_phase_comes_off_the_measured_step() {
        let m = StepModel {
            step_ms: 160.0,
            serial_ms: 90.0,
            batch_ms: 50.0,
            slowest_batch_ms: 50.0,
            workers: 2,
            trainer_cpu_ms: 90.0,
            worker_cpu_ms: 30.0,
            ..model()
        };
        // 20 ms off 160; the model's floor after is max(70, 25, 60) = 70.
        assert_eq!(m.without_serial(20.0), 140.0);
        // 150 ms off 160 would be 10: the cores' bound (60 ms) stays.
        assert_eq!(m.without_serial(150.0), 60.0);
        assert_eq!(m.without_serial(0.0), 160.0);
        // A step the model puts above the measured one gains nothing.
        let slow = StepModel { step_ms: 50.0, ..m };
        assert_eq!(slow.without_serial(20.0), 50.0);
    }

    #[test]
    fn workers_until_the_trainer_or_the_cores_bind() {
        let m = model();
        assert_eq!(m.as_recorded(), 120.0);
        // 120 ms a batch; the cores allow (40 + 60) / 2 = 50 ms a step.
        assert_eq!(m.enough_workers(), (3, 50.0));
        assert_eq!(m.with_workers(2), 60.0);
    }

    #[test]
    fn a_first_start_is_left_out_and_a_recurring_one_kept() {
        let first = StepModel {
            start_cpu_ms: 20.0,
            ..model()
        };
        // (40 + 60 - 20) / 2 cores: the steady rate does not pay the start.
        assert_eq!(first.cpu_bound_ms(), 40.0);
        let every_epoch = StepModel {
            starts_recur: true,
            ..first
        };
        assert_eq!(every_epoch.cpu_bound_ms(), 50.0);
        assert_eq!(every_epoch.without_restarts(), first.with_workers(1));
    }

    #[test]
    fn the_cores_are_full_when_the_work_and_others_keep_them_busy() {
        let m = model();
        // 100 ms of CPU a step on 2 cores: a 50 ms step is all busy, a
        // 100 ms one half.
        assert_eq!(m.busy_share(50.0), 1.0);
        assert!(m.cores_full(55.0));
        assert!(!m.cores_full(100.0));
        // Other processes' 0.4 CPUs fill the rest of a 62.5 ms step.
        let shared = StepModel {
            other_cpus: 0.4,
            ..m
        };
        assert!((shared.busy_share(62.5) - 1.0).abs() < 1e-9);
        // Twice the cores: a 25 ms CPU bound, so the trainer's own 40 ms
        // binds, and 120 ms batches need 3 workers to keep up with it.
        assert_eq!(m.with_cores(4.0), (3, 40.0));
    }

    #[test]
    fn the_slowest_worker_sets_the_pace_of_the_recorded_workers() {
        // Two workers, one drawing every costly batch: 240 ms a batch to
        // the other's 0, 120 on average.
        let m = StepModel {
            workers: 2,
            slowest_batch_ms: 240.0,
            ..model()
        };
        assert_eq!(m.as_recorded(), 120.0);
        // Another count hands the costly batches out differently: the
        // average is all the model knows of it.
        assert_eq!(m.with_workers(3), 50.0);
    }

    #[test]
    fn loading_moved_off_the_trainer() {
        let m = StepModel {
            serial_ms: 100.0,
            batch_ms: 0.0,
            workers: 0,
            trainer_cpu_ms: 100.0,
            worker_cpu_ms: 0.0,
            ..model()
        };
        // 60 of the trainer's 100 ms were loading: 40 ms left on the
        // trainer, 100 ms of CPU on 2 cores: 50 ms, 2 workers.
        assert_eq!(m.loading_moved(60.0), (2, 50.0));
    }
}

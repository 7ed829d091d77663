//! Statistics over the model: per thread, per process, and the machine-wide
//! picture. Pure functions; the renderers only format what is computed here.
//!
//! [`summarize`] makes the [`Summary`]: `ThreadStats` (state and reason
//! times, IO bytes, switches), `ProcessStats`, the job's average threads on
//! a CPU and waiting for one, `MachineStats` from the /proc/stat samples,
//! the usable cores (`CpuLimit::effective`: machine, cpuset or cgroup
//! quota), then each module below (roles, devices, futexes, GPUs, steps,
//! pipeline, CUDA, stack and Python coverage); `diagnosis::diagnose` runs
//! last, on the finished `Summary`.

pub mod anatomy;
pub mod cross_node;
pub mod cuda;
mod devices;
pub mod diagnosis;
pub mod flame;
mod futexes;
pub mod gpu;
pub mod pipeline;
pub mod python;
pub mod roles;
pub mod select;
pub mod stacks;
pub mod steps;
pub mod timeline;
pub mod whatif;

use std::collections::HashMap;

use serde::Serialize;

pub use devices::{DeviceStats, DeviceUser, IoStat, device_stats, iostat};
pub use futexes::{FutexStats, Waker, futex_stats};

use crate::model::{IoOp, Model, Thread, ThreadState};

const NS: f64 = 1e9;

/// Where one thread's time went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadStats {
    /// Who it is (a reused tid is another thread).
    #[serde(skip)]
    pub key: crate::model::ThreadKey,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Fork generations below a target process (0: a target).
    pub depth: usize,
    pub lifetime_s: f64,
    pub on_cpu_s: f64,
    pub runnable_s: f64,
    pub blocked_s: f64,
    pub blocked_interruptible_s: f64,
    pub blocked_uninterruptible_s: f64,
    /// Blocked time split by reason: waiting for its own block IO, in a
    /// futex wait, any other sleep. With on-CPU and runnable, these sum to
    /// the lifetime.
    pub io_s: f64,
    pub futex_s: f64,
    pub sleep_s: f64,
    /// Bytes of block IO it submitted (reads and writes that reached a disk).
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub exited: bool,
}

impl ThreadStats {
    fn of(thread: &Thread, depth: usize, io_bytes: (u64, u64)) -> ThreadStats {
        // One pass over what may be millions of intervals.
        let life = thread.breakdown(thread.start_ns, thread.end_ns);
        let disk_ns = thread.time_in(ThreadState::DiskSleep);
        let secs = |ns: u64| ns as f64 / NS;
        let sleeping = secs(life.blocked().saturating_sub(disk_ns));
        let disk = secs(disk_ns);
        ThreadStats {
            key: thread.key(),
            io_s: secs(life.io),
            futex_s: secs(life.futex),
            sleep_s: secs(life.sleep),
            read_bytes: io_bytes.0,
            write_bytes: io_bytes.1,
            pid: thread.pid,
            tid: thread.tid,
            comm: thread.comm.clone(),
            depth,
            lifetime_s: thread.lifetime_ns() as f64 / NS,
            on_cpu_s: secs(life.on_cpu),
            runnable_s: secs(life.runnable),
            blocked_s: sleeping + disk,
            blocked_interruptible_s: sleeping,
            blocked_uninterruptible_s: disk,
            voluntary_switches: thread.voluntary_switches,
            involuntary_switches: thread.involuntary_switches,
            exited: thread.exited,
        }
    }

    /// Time wanting a CPU: the sort key of every table.
    pub fn demand_s(&self) -> f64 {
        self.on_cpu_s + self.runnable_s
    }
}

/// A process and the sum of its threads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessStats {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub cmdline: Vec<String>,
    pub depth: usize,
    /// What the process is to the pipeline: `trainer` (it holds the
    /// trainer thread), `data_worker`, `helper` or `other`.
    pub role: roles::Role,
    pub threads: usize,
    pub on_cpu_s: f64,
    pub runnable_s: f64,
    pub blocked_s: f64,
    pub exited: bool,
}

/// The machine around the job, from /proc/stat samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MachineStats {
    /// Mean of procs_running: threads running or waiting for a CPU, all of
    /// the machine.
    pub mean_runnable_threads: f64,
    /// Share of all CPUs' time that was busy, in percent.
    pub cpu_busy_pct: f64,
    /// CPUs other processes kept busy on average: the machine's busy CPUs
    /// less the job's threads on a CPU (the rest of the machine's work,
    /// interrupts and kernel threads included).
    pub other_cpus: f64,
}

/// Everything the report shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// CLOCK_MONOTONIC ns of the window's start, for relative times.
    pub window_start_ns: u64,
    pub duration_s: f64,
    pub cores: u32,
    /// The CPUs the job could use: the tightest of the machine, its cpuset
    /// and its cgroup quota; `cores_source` says which.
    pub cores_effective: f64,
    pub cores_source: &'static str,
    /// Ranked causes, largest share of the trainer's time first.
    pub findings: Vec<diagnosis::Finding>,
    pub events: u64,
    /// Events written so late that the reader delivered them out of order.
    pub late_events: u64,
    /// Records and events of kinds this tprof does not know, skipped.
    pub unknown_records: u64,
    pub unknown_events: u64,
    /// Threads seen leaving a CPU whose arrival was never seen.
    pub untraced_switch_ins: u64,
    /// Of those, the ones placed by the kernel's account of their run.
    pub untraced_placed_by_kernel: u64,
    pub lost_events: u64,
    pub lost: crate::recording::LostCounts,
    pub cut_short: bool,
    pub stop_reason: Option<String>,
    /// How the command `record --` launched ended, when recorded.
    pub command_exit: Option<crate::recording::CommandExit>,
    /// The job's average number of threads on a CPU.
    pub job_on_cpu: f64,
    /// The job's average number of threads waiting for a CPU.
    pub job_runnable: f64,
    pub machine: Option<MachineStats>,
    /// Sorted by on-CPU + runnable time, largest first.
    pub threads: Vec<ThreadStats>,
    pub processes: Vec<ProcessStats>,
    pub devices: Vec<DeviceStats>,
    pub futexes: Vec<FutexStats>,
    pub gpus: Vec<gpu::GpuStats>,
    /// Why there is no GPU data; None when there is.
    pub gpu_status: Option<String>,
    pub roles: roles::Roles,
    pub steps: steps::StepStats,
    /// Each step's time split into phases on the trainer's critical path.
    #[serde(skip)]
    pub anatomy: anatomy::Anatomy,
    /// The steady state's step as a model a setting can be changed in.
    pub step_model: Option<whatif::StepModel>,
    /// The input pipeline over the training phase, and the settings its
    /// measured CPU calls for.
    pub pipeline: pipeline::Pipeline,
    /// CUDA runtime calls: copies, syncs, and their findings.
    pub cuda: cuda::CudaStats,
    /// How whole the on-CPU samples' user stacks are; None without stacks.
    pub stacks: Option<stacks::StackQuality>,
    /// How much the Python frames cover; None without any.
    pub python: Option<python::PythonStats>,
}

pub fn summarize(model: &Model) -> Summary {
    let (mut summary, gpu_idle) = live(model);
    summary.anatomy = anatomy::anatomy(model, &summary.roles, &summary.steps, &gpu_idle);
    summary.pipeline = pipeline::pipeline(
        model,
        &summary.roles,
        &summary.steps,
        summary.cores_effective,
    );
    summary.step_model = whatif::StepModel::of(
        &summary.anatomy,
        &summary.pipeline,
        summary.cores_effective,
        &model.system,
        model.cores,
    );
    summary.findings = diagnosis::diagnose(&summary);
    summary
}

/// The summary without what explains the steps: no anatomy, pipeline,
/// step model or findings (left empty). What `tprof top` reads of each
/// interval, every interval, while the whole analysis ([`summarize`], which
/// is this and the rest) runs on the window less often: the anatomy and
/// the diagnosis are half of a frame's CPU.
pub fn summarize_live(model: &Model) -> Summary {
    live(model).0
}

/// The live summary, and the GPUs' idle stretches the steps were read
/// with (the anatomy reads them too).
fn live(model: &Model) -> (Summary, Vec<(u64, u64)>) {
    let io_bytes = io_bytes_by_thread(model);
    let mut threads: Vec<ThreadStats> = model
        .threads
        .iter()
        .map(|t| {
            let bytes = io_bytes.get(&(t.tid, t.pid)).copied().unwrap_or_default();
            ThreadStats::of(t, model.depth(t.pid), bytes)
        })
        .collect();
    // Before sorting: `threads` is in the order of `model.threads`.
    let roles = roles::classify(model);
    let processes = process_stats(model, &threads, &roles);
    threads.sort_by(|a, b| {
        b.demand_s()
            .total_cmp(&a.demand_s())
            .then(a.tid.cmp(&b.tid))
    });
    let duration_s = model.duration_ns() as f64 / NS;
    let gpus = gpu::stats(model);
    let per_s = |total: f64| {
        if duration_s > 0.0 {
            total / duration_s
        } else {
            0.0
        }
    };
    let (cores_effective, cores_source) = model
        .cpu_limit
        .map_or((f64::from(model.cores), "machine"), |l| l.effective());
    let gpu_idle = gpu_idle_ns(model, &gpus);
    let steps = steps::steps(model, &roles, &gpu_idle);
    let summary = Summary {
        window_start_ns: model.window_start_ns,
        duration_s,
        cores: model.cores,
        cores_effective,
        cores_source,
        findings: Vec::new(),
        events: model.events,
        late_events: model.late_events,
        unknown_records: model.unknown_records,
        unknown_events: model.unknown_events,
        untraced_switch_ins: model.untraced_switch_ins,
        untraced_placed_by_kernel: model.untraced_placed_by_kernel,
        lost_events: model.lost.total(),
        lost: model.lost.clone(),
        cut_short: model.cut_short,
        stop_reason: model.stop_reason.clone(),
        command_exit: model.command_exit.clone(),
        job_on_cpu: per_s(threads.iter().map(|t| t.on_cpu_s).sum()),
        job_runnable: per_s(threads.iter().map(|t| t.runnable_s).sum()),
        machine: machine_stats(model, per_s(threads.iter().map(|t| t.on_cpu_s).sum())),
        processes,
        threads,
        devices: device_stats(model),
        futexes: futex_stats(model),
        pipeline: pipeline::Pipeline::default(),
        steps,
        anatomy: anatomy::Anatomy::default(),
        step_model: None,
        roles,
        gpus,
        gpu_status: model.gpus.status.clone(),
        cuda: cuda::stats(model),
        stacks: stacks::quality(model),
        python: python::stats(model),
    };
    (summary, gpu_idle)
}

impl Summary {
    /// Puts the recording's path into the commands the findings name
    /// (`see`), where the analysis wrote `REC`.
    pub fn name_recording(&mut self, path: &str) {
        let quoted = if path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c))
        {
            path.to_string()
        } else {
            format!("'{}'", path.replace('\'', r"'\''"))
        };
        for f in &mut self.findings {
            if let Some(see) = &mut f.see {
                *see = see.replace("REC", &quoted);
            }
        }
    }
}

/// Every GPU's idle intervals, in CLOCK_MONOTONIC nanoseconds.
fn gpu_idle_ns(model: &Model, gpus: &[gpu::GpuStats]) -> Vec<(u64, u64)> {
    let at = |s: f64| model.window_start_ns + (s * NS) as u64;
    gpus.iter()
        .flat_map(|g| g.idle_intervals.iter().map(|&(a, b)| (at(a), at(b))))
        .collect()
}

/// (read, write) bytes each tracked thread submitted.
fn io_bytes_by_thread(model: &Model) -> HashMap<(u32, u32), (u64, u64)> {
    let mut out: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    for io in model.ios.iter().filter(|io| io.tid != 0) {
        let entry = out.entry((io.tid, io.tgid)).or_default();
        match io.op {
            IoOp::Read => entry.0 += io.bytes,
            IoOp::Write => entry.1 += io.bytes,
            _ => {}
        }
    }
    out
}

/// Per-process sums; `threads` are the stats of `model.threads`, in order.
fn process_stats(
    model: &Model,
    threads: &[ThreadStats],
    roles: &roles::Roles,
) -> Vec<ProcessStats> {
    // Which holder of its pid each thread belongs to (pids can be reused).
    let owner: Vec<Option<(u32, u64)>> = model
        .threads
        .iter()
        .map(|t| {
            model
                .process_of(t.pid, t.start_ns)
                .map(|p| (p.pid, p.start_ns))
        })
        .collect();
    let mut out: Vec<ProcessStats> = model
        .all_processes()
        .map(|p| {
            let mine = threads
                .iter()
                .zip(&owner)
                .filter(|(_, owner)| **owner == Some((p.pid, p.start_ns)))
                .map(|(t, _)| t);
            let (mut n, mut on, mut run, mut blocked) = (0, 0.0, 0.0, 0.0);
            let mut role = roles::Role::Other;
            for t in mine {
                n += 1;
                on += t.on_cpu_s;
                run += t.runnable_s;
                blocked += t.blocked_s;
                role = role.max_for_process(roles.of_key(t.key));
            }
            ProcessStats {
                pid: p.pid,
                ppid: p.ppid,
                comm: p.comm.clone(),
                cmdline: p.cmdline.clone(),
                depth: model.depth(p.pid),
                role,
                threads: n,
                on_cpu_s: on,
                runnable_s: run,
                blocked_s: blocked,
                exited: p.exit_ns.is_some(),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        let demand = |p: &ProcessStats| p.on_cpu_s + p.runnable_s;
        demand(b).total_cmp(&demand(a)).then(a.pid.cmp(&b.pid))
    });
    out
}

fn machine_stats(model: &Model, job_on_cpu: f64) -> Option<MachineStats> {
    let (first, last) = (model.system.first()?, model.system.last()?);
    let mean_runnable_threads = model
        .system
        .iter()
        .map(|s| f64::from(s.procs_running))
        .sum::<f64>()
        / model.system.len() as f64;
    let total = last.total_ticks.saturating_sub(first.total_ticks);
    let busy = last.busy_ticks.saturating_sub(first.busy_ticks);
    let cpu_busy_pct = if total > 0 {
        100.0 * busy as f64 / total as f64
    } else {
        0.0
    };
    Some(MachineStats {
        mean_runnable_threads,
        cpu_busy_pct,
        other_cpus: (cpu_busy_pct / 100.0 * f64::from(model.cores) - job_on_cpu).max(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Interval;

    fn thread(tid: u32, running: u64, runnable: u64, sleeping: u64) -> Thread {
        let mut intervals = Vec::new();
        let mut t = 0;
        for (len, state) in [
            (running, ThreadState::Running),
            (runnable, ThreadState::Runnable),
            (sleeping, ThreadState::Sleeping),
        ] {
            intervals.push(Interval::new(t, t + len, state));
            t += len;
        }
        Thread {
            tid,
            pid: 1,
            comm: format!("t{tid}"),
            renamed_from: vec![],
            start_ns: 0,
            end_ns: t,
            exited: false,
            intervals: intervals.into(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        }
    }

    #[test]
    fn sorts_by_demand_and_sums_states() {
        let model = Model {
            window_start_ns: 0,
            window_end_ns: 2_000_000_000,
            cores: 2,
            threads: vec![
                thread(1, 100_000_000, 0, 1_900_000_000),
                thread(2, 1_000_000_000, 500_000_000, 500_000_000),
            ],
            ..Default::default()
        };
        let s = summarize(&model);
        assert_eq!(s.threads[0].tid, 2);
        assert!((s.threads[0].on_cpu_s - 1.0).abs() < 1e-9);
        assert!((s.threads[0].runnable_s - 0.5).abs() < 1e-9);
        assert!((s.threads[1].blocked_interruptible_s - 1.9).abs() < 1e-9);
        assert!((s.job_on_cpu - 0.55).abs() < 1e-9);
        assert!((s.job_runnable - 0.25).abs() < 1e-9);
    }
}

//! `tprof report --json`: the stable contract scripts rely on, documented in
//! docs/json.md. These structs are the contract, kept apart from the analysis
//! types so an internal rename cannot silently rename a field. Adding a field
//! is fine; renaming or removing one needs a JSON_VERSION bump.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::{
    DeviceUser, IoStat, Summary, Waker,
    cuda::{CudaFinding, CudaStats, Trainer},
    diagnosis::Finding as Verdict,
    gpu::GpuStats,
    pipeline::{Advice, Helper, PoolGroup, Workers},
    stacks::StackQuality,
    steps::{Blame, GpuIdleAlignment, Phase, StepSource},
};
use crate::recording::UserStacks;
use crate::render::exporter::{Exporter, Reads};

/// `tprof report --json`.
pub static JSON: Exporter = Exporter {
    name: "json",
    about: "The report as JSON (the contract in docs/json.md)",
    extensions: &["json"],
    opens_in: "scripts",
    reads: Reads::Summary(|summary, out| out.write_all(render(summary).as_bytes())),
};

/// Version of the JSON contract (not of the recording format).
pub const JSON_VERSION: u32 = 4;

#[derive(Serialize)]
struct Report<'a> {
    json_version: u32,
    /// Ranked causes, largest `explains_frac` first.
    findings: &'a [Verdict],
    /// Where the window begins on CLOCK_MONOTONIC (ns): the `_s` times
    /// below are relative to it.
    start_monotonic_ns: u64,
    duration_s: f64,
    cores: u32,
    cores_effective: f64,
    cores_source: &'a str,
    events: u64,
    late_events: u64,
    unknown_records: u64,
    unknown_events: u64,
    untraced_switch_ins: u64,
    lost_events: u64,
    lost: &'a crate::recording::LostCounts,
    cut_short: bool,
    stop_reason: Option<&'a str>,
    /// How the command `record --` launched ended; null for `-p` recordings.
    command_exit: Option<CommandExit>,
    /// Average threads of the job on a CPU / waiting for one.
    job_on_cpu: f64,
    job_runnable: f64,
    machine: Option<Machine>,
    processes: Vec<Process<'a>>,
    threads: Vec<Thread<'a>>,
    devices: Vec<Device<'a>>,
    futexes: Vec<Futex<'a>>,
    /// tid (as a string key) → trainer | pin_memory | data_worker | pool | helper | other.
    roles: BTreeMap<String, &'static str>,
    steps: Steps<'a>,
    /// Each phase of the steady state's steps (docs/json.md, "anatomy").
    anatomy: Anatomy<'a>,
    pipeline: Pipeline<'a>,
    gpus: Vec<Gpu<'a>>,
    /// Why there is no GPU data; null when there is.
    gpu_status: Option<&'a str>,
    cuda: Cuda<'a>,
    /// Python coverage (docs/json.md, "python"); absent without Python.
    #[serde(skip_serializing_if = "Option::is_none")]
    python: Option<&'a crate::analysis::python::PythonStats>,
    /// How whole the on-CPU samples' user stacks are; null without stacks.
    stacks: Option<Stacks>,
}

/// The on-CPU samples' user stacks (docs/json.md, "stacks").
#[derive(Serialize)]
struct Stacks {
    /// "dwarf" (copied and unwound with CFI) or "frame_pointers"; null for
    /// recordings that do not say (frame pointers).
    mode: Option<&'static str>,
    /// Bytes of stack copied, in dwarf mode.
    copy_bytes: Option<u32>,
    samples: u64,
    /// Samples whose user stack reaches its thread's root (dwarf mode only).
    rooted: Option<u64>,
    truncated: u64,
    lost: u64,
}

/// docs/json.md, "command_exit".
#[derive(Serialize)]
struct CommandExit {
    pid: u32,
    code: Option<i32>,
    signal: Option<String>,
    stop_signal: Option<String>,
    killed: bool,
}

impl CommandExit {
    fn new(exit: &crate::recording::CommandExit) -> CommandExit {
        let name = |n: i32| {
            crate::recording::signal_name(n).map_or_else(|| format!("signal {n}"), str::to_string)
        };
        CommandExit {
            pid: exit.pid,
            code: exit.code,
            signal: exit.signal.map(name),
            stop_signal: exit.stop_signal.map(name),
            killed: exit.killed,
        }
    }
}

/// CUDA runtime calls (docs/json.md, "cuda").
#[derive(Serialize)]
struct Cuda<'a> {
    /// A libcudart was found in the job and probed.
    visible: bool,
    /// Why calls were not visible; null when they were.
    status: Option<&'a str>,
    /// The first library probed; null when none.
    library: Option<&'a str>,
    libraries: &'a [String],
    /// Functions that could not be probed, and why.
    missing: &'a [String],
    /// Function name → calls in the window (cudaLaunchKernel: over the
    /// whole recording, counted in the kernel).
    calls: &'a BTreeMap<String, u64>,
    failed_calls: u64,
    launches_per_s: f64,
    h2d_copies: H2dCopies,
    /// The thread that made the most host-to-device copies.
    trainer: Option<CudaTrainer<'a>>,
    findings: Vec<Finding<'a>>,
}

#[derive(Serialize)]
struct CudaTrainer<'a> {
    pid: u32,
    tid: u32,
    comm: &'a str,
    /// Time in CUDA stream/device/event syncs, and how many.
    sync_s: f64,
    syncs: u64,
    /// Blocked outside CUDA calls (waiting for data).
    data_wait_s: f64,
    /// NVML idle time during those syncs and waits; null without GPU data.
    gpu_idle_during_syncs_s: Option<f64>,
    gpu_idle_during_data_waits_s: Option<f64>,
}

/// A diagnosis with its evidence and the fix to try.
#[derive(Serialize)]
struct Finding<'a> {
    /// "pageable_copies" or "sync_copies".
    id: &'a str,
    /// "high" or "medium".
    severity: &'a str,
    evidence: &'a str,
    fix: &'a str,
    copies: u64,
    bytes: u64,
    blocked_s: f64,
}

#[derive(Serialize)]
struct H2dCopies {
    count: u64,
    bytes: u64,
    pageable: u64,
    pinned: u64,
    /// cudaMemcpy, or cudaMemcpyAsync followed at once by a blocking sync.
    followed_by_sync: u64,
    /// Time the copies and those syncs blocked the calling threads.
    blocked_s: f64,
}

/// iostat -x columns of a device over the window; `series` has them per second.
#[derive(Serialize)]
struct Device<'a> {
    name: &'a str,
    #[serde(flatten)]
    window: &'a IoStat,
    series: &'a [IoStat],
    users: &'a [DeviceUser],
}

#[derive(Serialize)]
struct Futex<'a> {
    pid: u32,
    /// Hex, as the program would print the pointer.
    uaddr: String,
    waiters: usize,
    waits: usize,
    wait_s: f64,
    wakers: &'a [Waker],
    unwoken: usize,
}

#[derive(Serialize)]
struct Gpu<'a> {
    index: u32,
    name: &'a str,
    /// Null without a utilization series.
    util_mean_pct: Option<f64>,
    /// Share of the sampled time at or below IDLE_UTIL_PCT (5 %).
    idle_frac: Option<f64>,
    /// `[start_s, end_s]` relative to the recording start, in time order.
    idle_intervals: &'a [(f64, f64)],
    mem_peak_bytes: Option<u64>,
    memory_total_bytes: Option<u64>,
    pcie_rx_bytes_per_s: Option<f64>,
    pcie_tx_bytes_per_s: Option<f64>,
    sm_clock_mhz: Option<f64>,
    power_w: Option<f64>,
    utilization_source: &'a str,
    /// Series this GPU or NVML library could not give, and why.
    missing: &'a [String],
    processes: Vec<GpuProcess<'a>>,
}

#[derive(Serialize)]
struct GpuProcess<'a> {
    pid: u32,
    comm: &'a str,
    sm_util_mean_pct: f64,
}

#[derive(Serialize)]
struct Machine {
    mean_runnable_threads: f64,
    cpu_busy_pct: f64,
    other_cpus: f64,
}

#[derive(Serialize)]
struct Process<'a> {
    pid: u32,
    ppid: u32,
    comm: &'a str,
    cmdline: &'a [String],
    depth: usize,
    /// trainer | data_worker | helper | other.
    role: &'static str,
    threads: usize,
    on_cpu_s: f64,
    runnable_s: f64,
    blocked_s: f64,
    exited: bool,
}

#[derive(Serialize)]
struct Thread<'a> {
    pid: u32,
    ppid: u32,
    tid: u32,
    comm: &'a str,
    role: &'static str,
    start_s: f64,
    lifetime_s: f64,
    on_cpu_s: f64,
    runnable_s: f64,
    blocked_s: f64,
    blocked_interruptible_s: f64,
    blocked_uninterruptible_s: f64,
    io_s: f64,
    futex_s: f64,
    sleep_s: f64,
    read_bytes: u64,
    write_bytes: u64,
    voluntary_switches: u64,
    involuntary_switches: u64,
    exited: bool,
}

fn stacks(q: &StackQuality) -> Stacks {
    let (mode, copy_bytes) = match q.mode {
        Some(UserStacks::Dwarf { copy_bytes }) => (Some("dwarf"), Some(copy_bytes)),
        Some(UserStacks::FramePointers) => (Some("frame_pointers"), None),
        None => (None, None),
    };
    Stacks {
        mode,
        copy_bytes,
        samples: q.samples,
        rooted: q.rooted,
        truncated: q.truncated,
        lost: q.lost,
    }
}

/// The JSON document for `summary`, pretty-printed.
pub fn render(summary: &Summary) -> String {
    let ppids: BTreeMap<u32, u32> = summary.processes.iter().map(|p| (p.pid, p.ppid)).collect();
    let report = Report {
        json_version: JSON_VERSION,
        findings: &summary.findings,
        cores_effective: summary.cores_effective,
        cores_source: summary.cores_source,
        start_monotonic_ns: summary.window_start_ns,
        duration_s: summary.duration_s,
        cores: summary.cores,
        events: summary.events,
        late_events: summary.late_events,
        unknown_records: summary.unknown_records,
        unknown_events: summary.unknown_events,
        untraced_switch_ins: summary.untraced_switch_ins,
        lost_events: summary.lost_events,
        lost: &summary.lost,
        cut_short: summary.cut_short,
        stop_reason: summary.stop_reason.as_deref(),
        command_exit: summary.command_exit.as_ref().map(CommandExit::new),
        job_on_cpu: summary.job_on_cpu,
        job_runnable: summary.job_runnable,
        machine: summary.machine.map(|m| Machine {
            mean_runnable_threads: m.mean_runnable_threads,
            cpu_busy_pct: m.cpu_busy_pct,
            other_cpus: m.other_cpus,
        }),
        processes: summary
            .processes
            .iter()
            .map(|p| Process {
                pid: p.pid,
                ppid: p.ppid,
                comm: &p.comm,
                cmdline: &p.cmdline,
                depth: p.depth,
                role: p.role.name(),
                threads: p.threads,
                on_cpu_s: p.on_cpu_s,
                runnable_s: p.runnable_s,
                blocked_s: p.blocked_s,
                exited: p.exited,
            })
            .collect(),
        threads: summary
            .threads
            .iter()
            .map(|t| Thread {
                pid: t.pid,
                ppid: ppids.get(&t.pid).copied().unwrap_or(0),
                tid: t.tid,
                comm: &t.comm,
                role: summary.roles.of_key(t.key).name(),
                start_s: t.key.start_ns.saturating_sub(summary.window_start_ns) as f64 / 1e9,
                lifetime_s: t.lifetime_s,
                on_cpu_s: t.on_cpu_s,
                runnable_s: t.runnable_s,
                blocked_s: t.blocked_s,
                blocked_interruptible_s: t.blocked_interruptible_s,
                blocked_uninterruptible_s: t.blocked_uninterruptible_s,
                io_s: t.io_s,
                futex_s: t.futex_s,
                sleep_s: t.sleep_s,
                read_bytes: t.read_bytes,
                write_bytes: t.write_bytes,
                voluntary_switches: t.voluntary_switches,
                involuntary_switches: t.involuntary_switches,
                exited: t.exited,
            })
            .collect(),
        devices: summary
            .devices
            .iter()
            .map(|d| Device {
                name: &d.name,
                window: &d.window,
                series: &d.series,
                users: &d.users,
            })
            .collect(),
        futexes: summary
            .futexes
            .iter()
            .map(|f| Futex {
                pid: f.pid,
                uaddr: format!("{:#x}", f.uaddr),
                waiters: f.waiters,
                waits: f.waits,
                wait_s: f.wait_s,
                wakers: &f.wakers,
                unwoken: f.unwoken,
            })
            .collect(),
        // By tid, as the contract has it: a reused tid shows its latest
        // holder's role (threads[] lists each holder).
        roles: summary
            .roles
            .by_thread
            .iter()
            .map(|(key, role)| (key.tid.to_string(), role.name()))
            .collect(),
        steps: steps(summary),
        anatomy: anatomy(summary),
        pipeline: pipeline(summary),
        gpus: summary.gpus.iter().map(gpu).collect(),
        gpu_status: summary.gpu_status.as_deref(),
        cuda: cuda(&summary.cuda),
        stacks: summary.stacks.as_ref().map(stacks),
        python: summary.python.as_ref(),
    };
    let mut out = serde_json::to_string_pretty(&report).expect("plain data serializes");
    out.push('\n');
    out
}

/// The input pipeline over the training phase (docs/json.md, "pipeline").
#[derive(Serialize)]
struct Pipeline<'a> {
    /// The training phase, in seconds from the window start.
    start_s: f64,
    end_s: f64,
    duration_s: f64,
    /// No batches bounded the phase: it is the whole window.
    whole_window: bool,
    data_wait_frac: f64,
    data_workers: &'a Workers,
    pin_memory_tids: &'a [u32],
    helpers: &'a [Helper],
    pools: &'a [PoolGroup],
    cpu: PhaseCpu,
    advice: Option<&'a Advice>,
}

#[derive(Serialize)]
struct PhaseCpu {
    trainer_s: f64,
    trainer_side_s: f64,
    workers_s: f64,
    pool_spin_s: f64,
    job_on_cpu: f64,
    job_runnable: f64,
}

fn pipeline(summary: &Summary) -> Pipeline<'_> {
    let p = &summary.pipeline;
    let from_start = |ns: u64| ns.saturating_sub(summary.window_start_ns) as f64 / 1e9;
    Pipeline {
        start_s: from_start(p.start_ns),
        end_s: from_start(p.end_ns),
        duration_s: p.cpu.duration_s,
        whole_window: p.whole_window,
        data_wait_frac: p.data_wait_frac,
        data_workers: &p.workers,
        pin_memory_tids: &p.pin_memory_tids,
        helpers: &p.helpers,
        pools: &p.pools,
        cpu: PhaseCpu {
            trainer_s: p.cpu.trainer_s,
            trainer_side_s: p.cpu.trainer_side_s,
            workers_s: p.cpu.workers_s,
            pool_spin_s: p.cpu.pool_spin_s,
            job_on_cpu: p.cpu.job_on_cpu,
            job_runnable: p.cpu.job_runnable,
        },
        advice: p.advice.as_ref(),
    }
}

/// The training iterations, and who the trainer waited on.
#[derive(Serialize)]
struct Steps<'a> {
    trainer_tid: Option<u32>,
    source: &'a StepSource,
    count: usize,
    p50_s: f64,
    p90_s: f64,
    p99_s: f64,
    startup: Option<Span>,
    teardown: Option<Span>,
    steady_s: f64,
    deliveries: usize,
    data_wait_frac: f64,
    data_wait_s: f64,
    blame: &'a Blame,
    worker_top_functions: Vec<TopFunction<'a>>,
    gpu_idle: Option<&'a GpuIdleAlignment>,
    items: Vec<StepItem>,
    slowest: Vec<Slowest>,
}

#[derive(Serialize)]
struct Span {
    start_s: f64,
    end_s: f64,
    duration_s: f64,
}

#[derive(Serialize)]
struct TopFunction<'a> {
    function: &'a str,
    share: f64,
}

#[derive(Serialize)]
struct StepItem {
    start_s: f64,
    end_s: f64,
    duration_s: f64,
    end_estimated: bool,
    data_wait_s: f64,
    on_cpu_s: f64,
    runnable_s: f64,
    io_s: f64,
    futex_s: f64,
    sleep_s: f64,
    /// The trainer's time in CUDA syncs and synchronous copies in the step.
    cuda_sync_s: f64,
    worker_pid: Option<u32>,
    cause: &'static str,
    /// Seconds of the step in each phase of its anatomy (only those with
    /// time); they sum to `duration_s`.
    phases: BTreeMap<&'static str, f64>,
    /// When the trainer had its batch (from the window start): the end of
    /// the DataLoader's `__next__`; null without an anatomy.
    batch_s: Option<f64>,
}

#[derive(Serialize)]
struct Slowest {
    /// 1-based, as the report and the timeline number steps.
    step: usize,
    duration_s: f64,
    cause: &'static str,
    cause_s: f64,
}

/// docs/json.md, "anatomy".
#[derive(Serialize)]
struct Anatomy<'a> {
    steps: usize,
    basis: &'a crate::analysis::anatomy::Basis,
    /// `steps.items[].batch_s` came from libtorch's end-of-`__next__` mark.
    batch_marked: bool,
    /// The GPUs' idle time over the steps; null without GPU samples.
    gpu_idle_s: Option<f64>,
    /// Largest first.
    phases: Vec<AnatomyPhase<'a>>,
    /// The step model the findings predict with (analysis::whatif).
    model: Option<&'a crate::analysis::whatif::StepModel>,
    workers: &'a crate::analysis::anatomy::WorkerLoad,
    worker_starts: Vec<WorkerStart>,
}

#[derive(Serialize)]
struct AnatomyPhase<'a> {
    phase: &'static str,
    /// A wait for a batch (the report groups these).
    batch_wait: bool,
    total_s: f64,
    share: f64,
    mean_ms: f64,
    p50_ms: f64,
    steps: usize,
    top: Vec<TopLabel<'a>>,
    gpu_idle_s: Option<f64>,
}

#[derive(Serialize)]
struct TopLabel<'a> {
    label: &'a str,
    share: f64,
}

#[derive(Serialize)]
struct WorkerStart {
    pid: u32,
    start_s: f64,
    ready_s: Option<f64>,
}

fn anatomy(summary: &Summary) -> Anatomy<'_> {
    let a = &summary.anatomy;
    let rel = |ns: u64| ns.saturating_sub(summary.window_start_ns) as f64 / 1e9;
    Anatomy {
        steps: a.steps.len(),
        basis: &a.basis,
        batch_marked: a.batch_marked,
        gpu_idle_s: a.gpu_idle_s,
        phases: a
            .phases
            .iter()
            .map(|p| AnatomyPhase {
                phase: p.phase.name(),
                batch_wait: p.phase.is_batch_wait(),
                total_s: p.total_s,
                share: p.share,
                mean_ms: p.mean_ms,
                p50_ms: p.p50_ms,
                steps: p.steps,
                top: p
                    .top
                    .iter()
                    .map(|(label, share)| TopLabel {
                        label,
                        share: *share,
                    })
                    .collect(),
                gpu_idle_s: p.gpu_idle_s,
            })
            .collect(),
        model: summary.step_model.as_ref(),
        workers: &a.workers,
        worker_starts: a
            .worker_starts
            .iter()
            .map(|w| WorkerStart {
                pid: w.pid,
                start_s: rel(w.start_ns),
                ready_s: w.ready_ns.map(rel),
            })
            .collect(),
    }
}

fn steps(summary: &Summary) -> Steps<'_> {
    let s = &summary.steps;
    let rel = |ns: u64| ns.saturating_sub(summary.window_start_ns) as f64 / 1e9;
    let secs = |ns: u64| ns as f64 / 1e9;
    let span = |p: &Phase| Span {
        start_s: rel(p.start_ns),
        end_s: rel(p.end_ns),
        duration_s: p.duration_s(),
    };
    Steps {
        trainer_tid: s.trainer_tid,
        source: &s.source,
        count: s.count,
        p50_s: s.p50_s,
        p90_s: s.p90_s,
        p99_s: s.p99_s,
        startup: s.startup.as_ref().map(span),
        teardown: s.teardown.as_ref().map(span),
        steady_s: s.steady().map_or(0.0, |(a, b)| secs(b - a)),
        deliveries: s.deliveries.len(),
        data_wait_frac: s.data_wait_frac,
        data_wait_s: s.data_wait_s,
        blame: &s.blame,
        worker_top_functions: s
            .worker_top_functions
            .iter()
            .map(|(function, share)| TopFunction {
                function,
                share: *share,
            })
            .collect(),
        gpu_idle: s.gpu_idle.as_ref(),
        items: s
            .steps
            .iter()
            .enumerate()
            .map(|(i, st)| StepItem {
                start_s: rel(st.start_ns),
                end_s: rel(st.end_ns),
                duration_s: secs(st.duration_ns()),
                end_estimated: st.end_estimated,
                data_wait_s: secs(st.data_wait_ns),
                on_cpu_s: secs(st.trainer.on_cpu),
                runnable_s: secs(st.trainer.runnable),
                io_s: secs(st.trainer.io),
                futex_s: secs(st.trainer.futex),
                sleep_s: secs(st.trainer.sleep),
                cuda_sync_s: secs(st.cuda_sync_ns),
                worker_pid: (st.worker_pid != 0).then_some(st.worker_pid),
                cause: st.cause().0,
                phases: summary
                    .anatomy
                    .steps
                    .get(i)
                    .map(|p| p.nonzero().map(|(ph, ns)| (ph.name(), secs(ns))).collect())
                    .unwrap_or_default(),
                batch_s: summary.anatomy.batch_ns.get(i).map(|&ns| rel(ns)),
            })
            .collect(),
        slowest: s
            .slowest
            .iter()
            .map(|&i| {
                let st = &s.steps[i];
                let (cause, ns) = st.cause();
                Slowest {
                    step: i + 1,
                    duration_s: secs(st.duration_ns()),
                    cause,
                    cause_s: secs(ns),
                }
            })
            .collect(),
    }
}

fn cuda(c: &CudaStats) -> Cuda<'_> {
    Cuda {
        visible: c.visible,
        status: c.status.as_deref(),
        library: c.library.as_deref(),
        libraries: &c.libraries,
        missing: &c.missing,
        calls: &c.calls,
        failed_calls: c.failed_calls,
        launches_per_s: c.launches_per_s,
        h2d_copies: H2dCopies {
            count: c.h2d.count,
            bytes: c.h2d.bytes,
            pageable: c.h2d.pageable,
            pinned: c.h2d.pinned,
            followed_by_sync: c.h2d.followed_by_sync,
            blocked_s: c.h2d.blocked_s,
        },
        trainer: c.trainer.as_ref().map(trainer),
        findings: c.findings.iter().map(finding).collect(),
    }
}

fn trainer(t: &Trainer) -> CudaTrainer<'_> {
    CudaTrainer {
        pid: t.pid,
        tid: t.tid,
        comm: &t.comm,
        sync_s: t.sync_s,
        syncs: t.syncs,
        data_wait_s: t.data_wait_s,
        gpu_idle_during_syncs_s: t.gpu_idle_during_syncs_s,
        gpu_idle_during_data_waits_s: t.gpu_idle_during_data_waits_s,
    }
}

fn finding(f: &CudaFinding) -> Finding<'_> {
    Finding {
        id: f.id.name(),
        severity: f.severity.name(),
        evidence: &f.evidence,
        fix: &f.fix,
        copies: f.copies,
        bytes: f.bytes,
        blocked_s: f.blocked_s,
    }
}

fn gpu(g: &GpuStats) -> Gpu<'_> {
    Gpu {
        index: g.index,
        name: &g.name,
        util_mean_pct: g.util_mean_pct,
        idle_frac: g.idle_frac,
        idle_intervals: &g.idle_intervals,
        mem_peak_bytes: g.mem_peak_bytes,
        memory_total_bytes: g.memory_total_bytes,
        pcie_rx_bytes_per_s: g.pcie_rx_bytes_per_s,
        pcie_tx_bytes_per_s: g.pcie_tx_bytes_per_s,
        sm_clock_mhz: g.sm_clock_mhz,
        power_w: g.power_w,
        utilization_source: &g.utilization_source,
        missing: &g.missing,
        processes: g
            .processes
            .iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                comm: &p.comm,
                sm_util_mean_pct: p.sm_util_mean_pct,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::summarize;
    use crate::model::{Gpu, Gpus, Model};
    use crate::recording::GpuMetric;

    const S: u64 = 1_000_000_000;

    /// One GPU busy for 1 s, idle for 1 s, busy for 1 s, sampled each 0.5 s.
    fn model() -> Model {
        let util = [95, 95, 0, 0, 95, 95];
        let points = util
            .iter()
            .enumerate()
            .map(|(i, &u)| ((i as u64 + 1) * S / 2, u))
            .collect();
        let gpu = Gpu {
            index: 0,
            name: "GPU".into(),
            series: [
                ((GpuMetric::GpuUtilPct, None), points),
                ((GpuMetric::MemUsedBytes, None), vec![(S, 7), (2 * S, 9)]),
            ]
            .into(),
            ..Default::default()
        };
        Model {
            window_start_ns: 0,
            window_end_ns: 3 * S,
            gpus: Gpus {
                status: None,
                devices: vec![gpu],
            },
            ..Default::default()
        }
    }

    #[test]
    fn gpus_have_the_documented_fields() {
        let json: serde_json::Value = serde_json::from_str(&render(&summarize(&model()))).unwrap();
        let gpu = &json["gpus"][0];
        assert_eq!(gpu["index"], 0);
        assert_eq!(gpu["name"], "GPU");
        assert_eq!(gpu["idle_intervals"], serde_json::json!([[1.0, 2.0]]));
        assert!((gpu["idle_frac"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert!((gpu["util_mean_pct"].as_f64().unwrap() - 95.0 * 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(gpu["mem_peak_bytes"], 9);
        assert!(json["gpu_status"].is_null());
    }

    #[test]
    fn no_gpu_data_says_why() {
        let mut model = model();
        model.gpus = Gpus {
            status: Some("no GPU visible to NVML".into()),
            devices: Vec::new(),
        };
        let summary = summarize(&model);
        let json: serde_json::Value = serde_json::from_str(&render(&summary)).unwrap();
        assert_eq!(json["gpus"], serde_json::json!([]));
        assert_eq!(json["gpu_status"], "no GPU visible to NVML");
        let text = crate::render::report::render(&summary);
        assert!(
            text.contains("no GPU data: no GPU visible to NVML"),
            "{text}"
        );
    }

    #[test]
    fn cuda_not_visible_is_said_in_both_outputs() {
        let mut model = model();
        model.cuda.looked_for = true;
        let summary = summarize(&model);
        let json: serde_json::Value = serde_json::from_str(&render(&summary)).unwrap();
        assert_eq!(json["cuda"]["visible"], false);
        assert!(json["cuda"]["library"].is_null());
        assert_eq!(json["cuda"]["h2d_copies"]["count"], 0);
        assert_eq!(json["cuda"]["findings"], serde_json::json!([]));
        let text = crate::render::report::render(&summary);
        assert!(
            text.contains("CUDA calls not visible: no libcudart mapped by the job"),
            "{text}"
        );
    }
}

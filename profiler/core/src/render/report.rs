//! The terminal report: a header with what the recording lost (events by
//! kind, stacks, cut short), the verdict, the headline (how much CPU the
//! job wants against the cores it has), the input pipeline and its steps,
//! then the evidence: processes, threads, Python coverage, devices,
//! futexes, GPUs, CUDA and stack quality.

use std::fmt::Write as _;

use crate::analysis::{
    ProcessStats, Summary, ThreadStats,
    cuda::CudaStats,
    diagnosis::{Change, SettingValue},
    gpu::{GpuStats, IDLE_UTIL_PCT},
    roles::{PoolLibrary, Role},
    stacks::StackQuality,
};
use crate::recording::{LostCounts, UserStacks};
use crate::render::exporter::{Exporter, Reads};

/// `tprof report`.
pub static REPORT: Exporter = Exporter {
    name: "report",
    about: "The terminal report",
    extensions: &["txt"],
    opens_in: "a terminal",
    reads: Reads::Summary(|summary, out| out.write_all(render(summary).as_bytes())),
};

/// Threads shown in the table; the rest are summed in one line.
const MAX_THREAD_ROWS: usize = 40;
/// Idle stretches listed per GPU, longest first.
const MAX_IDLE_ROWS: usize = 5;
/// CPUs other processes kept busy that earn a warning: half a core.
const OTHER_LOAD_CPUS: f64 = 0.5;

/// The report of `s`, as text.
pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    header(&mut out, s);
    verdict(&mut out, s);
    headline(&mut out, s);
    pipeline(&mut out, s);
    steps(&mut out, s);
    anatomy(&mut out, s);
    processes(&mut out, s);
    threads(&mut out, s);
    python(&mut out, s);
    devices(&mut out, s);
    futexes(&mut out, s);
    gpus(&mut out, s);
    cuda(&mut out, &s.cuda);
    if let Some(q) = &s.stacks {
        stacks(&mut out, q, &s.lost);
    }
    out
}

fn header(out: &mut String, s: &Summary) {
    let _ = writeln!(
        out,
        "tprof report: {:.2} s, {} cores, {} events, {} lost",
        s.duration_s, s.cores, s.events, s.lost_events
    );
    if s.lost_events > 0 {
        let kinds: Vec<String> = s
            .lost
            .ring_buffer_full
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "warning: {} events lost (ring buffer full: {}; untracked new tasks: {}; \
             skipped while another BPF program ran on the CPU: {}); \
             times of the affected threads are approximate",
            s.lost_events,
            if kinds.is_empty() {
                "none".into()
            } else {
                kinds.join(", ")
            },
            s.lost.tracking_full,
            super::skipped_text(&s.lost)
        );
    }
    if s.lost.stack_lost() > 0 {
        let _ = writeln!(
            out,
            "warning: stack sampling lost {} stack(s) to stack-map collisions, {} to other \
             stack errors, {} user stack copies, {} sample(s) to a full aggregate and {} \
             off-CPU interval(s); flamegraphs show [user stack lost] there",
            s.lost.stack_collisions,
            s.lost.stack_failed,
            s.lost.stack_copy_lost,
            s.lost.stack_aggregate_full,
            s.lost.offcpu_full
        );
    }
    if s.lost.in_flight_lost() > 0 {
        let _ = writeln!(
            out,
            "warning: the kernel lost track of {} block request(s), bio(s) or CUDA call(s) in \
             flight ({}); device statistics, IO waits and CUDA calls are approximate there",
            s.lost.in_flight_lost(),
            super::in_flight_causes(&s.lost).join("; ")
        );
    }
    if s.late_events > 0 {
        let _ = writeln!(
            out,
            "warning: {} event(s) were written more than {} ms after later ones and were \
             used out of order; the states of their threads may be off by that much",
            s.late_events,
            crate::recording::reader::REORDER_WINDOW_NS / 1_000_000
        );
    }
    if s.unknown_records > 0 || s.unknown_events > 0 {
        let _ = writeln!(
            out,
            "note: {} record(s) and {} event(s) of kinds this tprof does not know were \
             skipped (the recording was made by a newer tprof; update this one to see them)",
            s.unknown_records, s.unknown_events
        );
    }
    if s.untraced_switch_ins > 0 {
        // Recordings before 2026-12-05 have no arrival events: every one
        // was placed by the events alone.
        let placed = if s.untraced_placed_by_kernel == 0 {
            "tprof placed each when that CPU left the traced threads".to_string()
        } else {
            format!(
                "tprof placed {} by the run time the kernel charged the thread, the rest when \
                 that CPU left the traced threads",
                s.untraced_placed_by_kernel
            )
        };
        let _ = writeln!(
            out,
            "note: {} switch(es) of a thread onto a CPU went untraced (the kernel skips \
             switches away from some tasks, or an event was lost); {placed}",
            s.untraced_switch_ins
        );
    }
    if let Some(m) = s.machine.filter(|m| m.other_cpus >= OTHER_LOAD_CPUS) {
        let _ = writeln!(
            out,
            "warning: other processes kept {:.1} of the {} cores busy on average while recording: \
             the job's waits for a CPU are partly theirs, and the advice assumes the job has the cores \
             to itself",
            m.other_cpus, s.cores
        );
    }
    if s.cut_short {
        let _ = writeln!(
            out,
            "warning: the recording was cut short (tprof was killed or its disk filled); \
             this report covers what was saved"
        );
    }
    if let Some(exit) = &s.command_exit {
        let _ = writeln!(out, "The command (pid {}) {}.", exit.pid, exit.describe());
    }
}

/// One line a tired engineer can act on: is the job asking for more CPU
/// than it has?
fn headline(out: &mut String, s: &Summary) {
    let (running, waiting) = (round1(s.job_on_cpu), round1(s.job_runnable));
    let _ = writeln!(
        out,
        "\nThe job wanted {:.1} CPUs on average over the whole recording ({running:.1} running + {waiting:.1} waiting for a CPU) on {} cores.",
        running + waiting,
        s.cores
    );
    if let Some(m) = s.machine {
        let _ = writeln!(
            out,
            "Machine-wide: {:.1} runnable threads on average, CPUs {:.0}% busy; other processes kept {:.1} of the {} cores busy.",
            m.mean_runnable_threads, m.cpu_busy_pct, m.other_cpus, s.cores
        );
    }
    if s.job_runnable > 0.25 * f64::from(s.cores) {
        let _ = writeln!(
            out,
            "CPU contention: the job's threads spent {:.1} CPU-seconds per second waiting for a CPU.",
            s.job_runnable
        );
    }
}

/// The input pipeline over the training phase: how many workers, the
/// pin-memory thread, the pools, the helpers, and where the CPU went.
fn pipeline(out: &mut String, s: &Summary) {
    let p = &s.pipeline;
    if s.roles.trainer.is_none() {
        return;
    }
    let from_start = |ns: u64| ns.saturating_sub(s.window_start_ns) as f64 / 1e9;
    let c = &p.cpu;
    let (running, waiting) = (round1(c.job_on_cpu), round1(c.job_runnable));
    let _ = writeln!(
        out,
        "\nTraining: {:.1} s, {}; the job wanted {:.1} CPUs there ({running:.1} running + {waiting:.1} waiting for a CPU).",
        c.duration_s,
        if p.whole_window {
            "the whole recording (no steps, and the trainer waited for fewer than two batches)"
                .to_string()
        } else {
            let bounds = if s.steps.steady() == Some((p.start_ns, p.end_ns)) {
                "the first step's start to the last one's end"
            } else {
                "the first batch the trainer waited for to the last"
            };
            format!(
                "from {:.1} s to {:.1} s ({bounds})",
                from_start(p.start_ns),
                from_start(p.end_ns)
            )
        },
        running + waiting
    );
    let w = &p.workers;
    let mut loading = match w.at_a_time {
        0 => "no data-worker processes (num_workers=0: the trainer loads its own batches)"
            .to_string(),
        n => format!(
            "{n} data-worker process{} at a time",
            if n == 1 { "" } else { "es" }
        ),
    };
    if w.restarts > 0 {
        loading.push_str(&format!(
            " ({} in all: a new set started {} time{} after the first, as at each epoch without persistent_workers)",
            w.pids.len(),
            w.restarts,
            if w.restarts == 1 { "" } else { "s" }
        ));
    }
    let tids: Vec<String> = p.pin_memory_tids.iter().map(u32::to_string).collect();
    match tids.len() {
        0 => loading.push_str("; no pin-memory thread"),
        1 => loading.push_str(&format!("; pin-memory thread tid {}", tids[0])),
        n => loading.push_str(&format!(
            "; {n} pin-memory threads, one per set of workers (tids {})",
            tids.join(", ")
        )),
    }
    let _ = writeln!(out, "Data loading: {loading}.");
    let pools = pool_summary(p);
    if !pools.is_empty() {
        let _ = writeln!(out, "Pool threads: {pools}.");
    }
    if !p.helpers.is_empty() {
        let names: Vec<String> = p
            .helpers
            .iter()
            .map(|h| format!("{} (pid {})", h.comm, h.pid))
            .collect();
        let _ = writeln!(
            out,
            "Helpers the job ran (not workers, not blamed): {}.",
            names.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "CPU in training: data workers {:.2} CPU-s of work, the trainer thread {:.2}, the rest of its process {:.2}; \
         spinning for pool work (in OpenMP runtimes and sched_yield loops) {:.2}.",
        c.workers_s, c.trainer_s, c.trainer_side_s, c.pool_spin_s
    );
}

/// "1 OpenMP, 1 OpenBLAS in the trainer's process; 8 in workers (8
/// spinning on sched_yield)".
fn pool_summary(p: &crate::analysis::pipeline::Pipeline) -> String {
    let mut parts = Vec::new();
    for in_worker in [false, true] {
        let groups: Vec<_> = p
            .pools
            .iter()
            .filter(|g| g.in_worker == in_worker)
            .collect();
        let total: usize = groups.iter().map(|g| g.threads).sum();
        if total == 0 {
            continue;
        }
        let mut by_library: std::collections::BTreeMap<PoolLibrary, usize> = Default::default();
        for g in &groups {
            *by_library.entry(g.library).or_default() += g.threads;
        }
        let kinds: Vec<String> = by_library
            .iter()
            .map(|(lib, n)| match lib {
                PoolLibrary::Unknown => format!("{n} spinning on sched_yield"),
                lib => format!("{n} {}", lib.name()),
            })
            .collect();
        let place = if in_worker {
            "in data workers"
        } else {
            "in the trainer's and other processes"
        };
        parts.push(format!("{total} {place} ({})", kinds.join(", ")));
    }
    parts.join("; ")
}

/// Rounds to the one decimal the report prints, so printed sums add up.
fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The findings, ranked: what to fix first, with its evidence.
fn verdict(out: &mut String, s: &Summary) {
    let _ = writeln!(
        out,
        "Cores: {:.1} usable ({}; the machine has {}).",
        s.cores_effective, s.cores_source, s.cores
    );
    if s.findings.is_empty() {
        let _ = writeln!(out, "\nVerdict: {}", no_finding(s));
        cuda_visibility(out, s);
        return;
    }
    let _ = writeln!(
        out,
        "\nVerdict (the fix predicted to save the most first, then what explains most of the trainer's time)"
    );
    for (i, f) in s.findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. [{:?}] {} (explains {:.0}% of the trainer's time)",
            i + 1,
            f.severity,
            f.title,
            100.0 * f.explains_frac
        );
        for e in &f.evidence {
            let _ = writeln!(out, "       - {e}");
        }
        let _ = writeln!(out, "     Fix: {}", f.fix);
        if !f.changes.is_empty() {
            let changes: Vec<String> = f.changes.iter().map(change_text).collect();
            let _ = writeln!(out, "     Settings: {}", changes.join(", "));
        }
        let _ = writeln!(out, "     Expect: {}", f.expect);
        if let (Some(now), Some(after)) = (f.step_ms, f.predicted_step_ms) {
            let _ = writeln!(
                out,
                "     Predicted: a step {now:.1} ms → {after:.1} ms ({:.2}× the throughput; the step model, \
                 see \"Where the steps went\")",
                now / after.max(f64::MIN_POSITIVE)
            );
        }
        if let Some(see) = &f.see {
            let _ = writeln!(out, "     See: {see}");
        }
    }
    cuda_visibility(out, s);
}

/// `num_workers 8 → 2`, `OMP_NUM_THREADS → 1`.
fn change_text(c: &Change) -> String {
    let value = |v: &SettingValue| match v {
        SettingValue::Count(n) => n.to_string(),
        SettingValue::Flag(b) => if *b { "True" } else { "False" }.to_string(),
        SettingValue::Text(t) => (*t).to_string(),
    };
    match &c.from {
        Some(from) => format!("{} {} → {}", c.setting, value(from), value(&c.to)),
        None => format!("{} → {}", c.setting, value(&c.to)),
    }
}

/// Synchronous copies and GPU syncs can only be judged with the CUDA
/// runtime's calls; say so when the recording has none.
fn cuda_visibility(out: &mut String, s: &Summary) {
    if let Some(reason) = s.cuda.status.as_deref().filter(|_| !s.cuda.visible) {
        let _ = writeln!(
            out,
            "  (Synchronous copies and GPU syncs: this recording cannot tell: {reason}.)"
        );
    }
}

fn no_finding(s: &Summary) -> String {
    match s.steps.trainer_tid {
        None => "nothing to diagnose: no trainer thread was found.".into(),
        Some(_) if s.steps.data_wait_frac < crate::analysis::diagnosis::STARVED => format!(
            "no input-pipeline bottleneck: the trainer waited only {:.0}% of its time for data.",
            100.0 * s.steps.data_wait_frac
        ),
        Some(_) => format!(
            "the trainer waited {:.0}% of its time for data, but no rule matched the workers' \
             state (see the blame below and the off-CPU flamegraph).",
            100.0 * s.steps.data_wait_frac
        ),
    }
}

/// Steps, data waits, and what the workers were doing meanwhile.
fn steps(out: &mut String, s: &Summary) {
    let st = &s.steps;
    if st.count == 0 {
        let _ = writeln!(out, "\nSteps: none: {}.", st.source.why);
        if st.deliveries.is_empty() || st.trainer_tid.is_none() {
            return;
        }
    }
    let Some(trainer) = st.trainer_tid else {
        return;
    };
    let ms = |secs: f64| secs * 1e3;
    if st.count > 0 {
        let what = match st.source.detector {
            "torch_marks" if st.source.confidence == Some("high") => "training iterations",
            "waited_batches" => "batches waited for",
            _ => "batches",
        };
        let _ = writeln!(
            out,
            "\nSteps: {} {what} of the trainer (tid {trainer}), from {} (confidence {}); step time \
             p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms.",
            st.count,
            st.source.detector,
            st.source.confidence.unwrap_or("none"),
            ms(st.p50_s),
            ms(st.p90_s),
            ms(st.p99_s)
        );
        let _ = writeln!(out, "  How: {}.", st.source.why);
        if let (Some(up), Some(down), Some((a, b))) = (&st.startup, &st.teardown, st.steady()) {
            let _ = writeln!(
                out,
                "  Startup {:.2} s (until the first step), steady state {:.2} s, teardown {:.2} s; \
                 the verdict's shares are of the steady state.",
                up.duration_s(),
                (b - a) as f64 / 1e9,
                down.duration_s()
            );
        }
        let slow: Vec<String> = st
            .slowest
            .iter()
            .take(3)
            .map(|&i| {
                let step = &st.steps[i];
                let (cause, ns) = step.cause();
                format!(
                    "step {} {:.1} ms ({} {:.1} ms)",
                    i + 1,
                    step.duration_ns() as f64 / 1e6,
                    cause.replace('_', " "),
                    ns as f64 / 1e6
                )
            })
            .collect();
        if !slow.is_empty() {
            let _ = writeln!(out, "  Slowest: {}.", slow.join("; "));
        }
    }
    if st.deliveries.is_empty() {
        let _ = writeln!(
            out,
            "The trainer never waited for a batch: every one was ready when it asked."
        );
        return;
    }
    let b = &st.blame;
    let pct = |x: f64| 100.0 * x;
    let top: Vec<String> = st
        .worker_top_functions
        .iter()
        .map(|(f, share)| format!("{f} {:.0}%", pct(*share)))
        .collect();
    let on_cpu_detail = if top.is_empty() {
        String::new()
    } else {
        format!(" (in {})", top.join(", "))
    };
    let _ = writeln!(
        out,
        "The trainer waited {:.0}% of the steady state for data ({:.0}% of the training phase). During those \
         waits the delivering workers were {:.0}% waiting for a CPU, {:.0}% on-CPU{on_cpu_detail}, {:.0}% in \
         block IO, {:.0}% in futex waits, {:.0}% in other sleep.",
        pct(st.data_wait_frac),
        pct(s.pipeline.data_wait_frac),
        pct(b.runnable),
        pct(b.on_cpu),
        pct(b.io),
        pct(b.futex),
        pct(b.sleep)
    );
    if let Some(g) = &st.gpu_idle {
        let _ = writeln!(
            out,
            "While the GPUs idled ({:.2} s): the trainer waited for data {:.2} s, ran {:.2} s, \
             waited for a CPU {:.2} s, was blocked otherwise {:.2} s.",
            g.gpu_idle_s,
            g.trainer_data_wait_s,
            g.trainer_on_cpu_s,
            g.trainer_runnable_s,
            g.trainer_other_blocked_s
        );
    }
}

/// "Where the steps went": each phase's share of the steps, its time per
/// step and what most of it went to; the waits for a batch grouped under
/// one line that sums them.
fn anatomy(out: &mut String, s: &Summary) {
    let a = &s.anatomy;
    if a.phases.is_empty() {
        return;
    }
    let gpu = a.gpu_idle_s.is_some();
    let _ = writeln!(
        out,
        "\nWhere the steps went ({} steps{}; each phase's share of the steps' time, its time per step, and where it went)",
        a.steps.len(),
        a.gpu_idle_s
            .map(|g| format!(", the GPUs idle {g:.2} s of them"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>6} {:>9} {:>9} {:>7}{}  TOP",
        "PHASE",
        "SHARE",
        "P50/STEP",
        "MEAN",
        "STEPS",
        if gpu { "  GPU IDLE" } else { "" }
    );
    let row = |out: &mut String, name: &str, p: &crate::analysis::anatomy::PhaseStats| {
        let top: Vec<String> = p
            .top
            .iter()
            .take(2)
            .map(|(l, share)| format!("{l} {:.0}%", 100.0 * share))
            .collect();
        let idle = p
            .gpu_idle_s
            .map(|g| format!("  {g:>7.2}s"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {name:<34} {:>5.0}% {:>6.1} ms {:>6.1} ms {:>7}{idle}  {}",
            100.0 * p.share,
            p.p50_ms,
            p.mean_ms,
            format!("{}/{}", p.steps, a.steps.len()),
            top.join(", ")
        );
    };
    let waits: Vec<&crate::analysis::anatomy::PhaseStats> = a
        .phases
        .iter()
        .filter(|p| p.phase.is_batch_wait())
        .collect();
    let mut wait_shown = false;
    for p in &a.phases {
        if !p.phase.is_batch_wait() {
            row(out, p.phase.title(), p);
            continue;
        }
        if wait_shown {
            continue;
        }
        wait_shown = true;
        let share: f64 = waits.iter().map(|w| w.share).sum();
        let mean: f64 = waits.iter().map(|w| w.mean_ms).sum();
        let _ = writeln!(
            out,
            "  {:<34} {:>5.0}% {:>9} {:>6.1} ms",
            "waiting for a batch",
            100.0 * share,
            "",
            mean
        );
        for w in &waits {
            row(out, &format!("  {}", w.phase.title()), w);
        }
    }
    if let Some(m) = &s.step_model {
        step_model(out, m);
    }
}

/// The step model's terms, and what it makes of the run as recorded.
fn step_model(out: &mut String, m: &crate::analysis::whatif::StepModel) {
    let cores = if m.other_cpus >= 0.5 {
        format!(
            "{:.1} cores (other processes kept {:.1} busy)",
            m.cores, m.other_cpus
        )
    } else {
        format!("{:.1} cores", m.cores)
    };
    let workers = if m.workers == 0 {
        "no workers".to_string()
    } else {
        format!(
            "a worker makes a batch in {:.1} ms ({} at a time: one every {:.1} ms)",
            m.batch_ms,
            m.workers,
            m.batch_ms / m.workers as f64
        )
    };
    // The first workers' start is a one-off the steady rate does not pay.
    let starts = if !m.starts_recur && m.start_cpu_ms >= 0.05 {
        format!(
            " (the first workers' start, {:.1} ms a step, left out)",
            m.start_cpu_ms
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  Step model: the trainer's own {:.1} ms a step; {workers}; {:.1} ms of CPU work a step{starts} on \
         {cores}: {:.1} ms a step as recorded, {:.1} ms measured.",
        m.serial_ms,
        m.cpu_ms(),
        m.as_recorded(),
        m.step_ms
    );
}

fn processes(out: &mut String, s: &Summary) {
    let _ = writeln!(out, "\nProcesses (by on-CPU + runnable)");
    let _ = writeln!(
        out,
        "  {:>7} {:>7} {:<10} {:>4} {:>9} {:>9} {:>9}  COMMAND",
        "PID", "PPID", "ROLE", "THR", "ON-CPU", "RUNNABLE", "BLOCKED"
    );
    for p in &s.processes {
        let _ = writeln!(
            out,
            "  {:>7} {:>7} {:<10} {:>4} {:>8.2}s {:>8.2}s {:>8.2}s  {}",
            p.pid,
            p.ppid,
            role(p),
            p.threads,
            p.on_cpu_s,
            p.runnable_s,
            p.blocked_s,
            command(p)
        );
    }
}

/// What the process is to the pipeline; a process that is neither trainer,
/// worker nor helper says how far below a target it is.
fn role(p: &ProcessStats) -> String {
    match (p.role, p.depth) {
        (Role::Trainer, _) => "trainer".into(),
        (Role::DataWorker, _) => "worker".into(),
        (Role::Helper, _) => "helper".into(),
        (_, 0) => "target".into(),
        (_, 1) => "child".into(),
        (_, n) => format!("desc+{n}"),
    }
}

fn command(p: &ProcessStats) -> String {
    let mut cmd = if p.cmdline.is_empty() {
        format!("[{}]", p.comm)
    } else {
        p.cmdline.join(" ")
    };
    if cmd.len() > 60 {
        let mut cut = 57;
        while !cmd.is_char_boundary(cut) {
            cut -= 1;
        }
        cmd.truncate(cut);
        cmd.push_str("...");
    }
    if p.exited {
        cmd.push_str(" (exited)");
    }
    cmd
}

fn threads(out: &mut String, s: &Summary) {
    let _ = writeln!(
        out,
        "\nThreads (by on-CPU + runnable; % of each thread's lifetime in the window)"
    );
    let _ = writeln!(
        out,
        "  {:>7} {:>7} {:<16} {:>13} {:>13} {:>13} {:>13} {:>13} {:>9} {:>6} {:>6} {:>8}",
        "PID",
        "TID",
        "NAME",
        "ON-CPU",
        "RUNNABLE",
        "BLOCK IO",
        "FUTEX",
        "SLEEP",
        "READ",
        "VCSW",
        "IVCSW",
        "LIFETIME"
    );
    for t in s.threads.iter().take(MAX_THREAD_ROWS) {
        thread_row(out, t);
    }
    if s.threads.len() > MAX_THREAD_ROWS {
        let rest = &s.threads[MAX_THREAD_ROWS..];
        let on: f64 = rest.iter().map(|t| t.on_cpu_s).sum();
        let run: f64 = rest.iter().map(|t| t.runnable_s).sum();
        let _ = writeln!(
            out,
            "  … {} more threads: {on:.2}s on-CPU, {run:.2}s runnable (see --json)",
            rest.len()
        );
    }
}

fn thread_row(out: &mut String, t: &ThreadStats) {
    let cell = |secs: f64| {
        let pct = if t.lifetime_s > 0.0 {
            100.0 * secs / t.lifetime_s
        } else {
            0.0
        };
        format!("{secs:.3}s {pct:>3.0}%")
    };
    let name = if t.exited {
        format!("{}*", t.comm)
    } else {
        t.comm.clone()
    };
    let _ = writeln!(
        out,
        "  {:>7} {:>7} {:<16} {:>13} {:>13} {:>13} {:>13} {:>13} {:>9} {:>6} {:>6} {:>7.2}s",
        t.pid,
        t.tid,
        name,
        cell(t.on_cpu_s),
        cell(t.runnable_s),
        cell(t.io_s),
        cell(t.futex_s),
        cell(t.sleep_s),
        bytes(t.read_bytes),
        t.voluntary_switches,
        t.involuntary_switches,
        t.lifetime_s
    );
}

/// `12.3M`-style byte counts.
/// What share of the Python processes' samples the Python frames cover,
/// and the walks that fell short, by marker.
fn python(out: &mut String, s: &Summary) {
    let Some(p) = &s.python else {
        return;
    };
    let pct = if p.samples > 0 {
        100.0 * p.samples_with_python as f64 / p.samples as f64
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "\nPython: {} of the {} on-CPU samples with a user stack in {} Python process{} \
         ({pct:.0}%) carry Python frames; the others ran no Python code (threads without a \
         Python thread state, such as OpenMP pools, or the interpreter starting or exiting).",
        p.samples_with_python,
        p.samples,
        p.processes,
        if p.processes == 1 { "" } else { "es" },
    );
    if !p.markers.is_empty() {
        let parts: Vec<String> = p
            .markers
            .iter()
            .map(|m| {
                format!(
                    "{} in {} samples and {:.2} s off CPU",
                    m.marker, m.samples, m.offcpu_s
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "Python walks tprof could not complete: {} (see docs/recording-format.md, \
             \"Python frames\").",
            parts.join("; ")
        );
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n}B")
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

fn devices(out: &mut String, s: &Summary) {
    if s.devices.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nBlock devices (iostat -x over the window; machine-wide)"
    );
    let _ = writeln!(
        out,
        "  {:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6}  BUSIEST SECOND  TRACKED THREADS",
        "DEVICE", "r/s", "w/s", "rMB/s", "wMB/s", "r_await", "w_await", "aqu-sz", "%util"
    );
    for d in &s.devices {
        let w = &d.window;
        let busiest = d.series.iter().map(|p| p.util_pct).fold(0.0, f64::max);
        let users: Vec<String> = d
            .users
            .iter()
            .take(3)
            .map(|u| {
                format!(
                    "{} ({})",
                    thread_name(s, u.tid),
                    bytes(u.read_bytes + u.write_bytes)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "  {:<10} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>7.2}ms {:>6.2}ms {:>7.2} {:>5.1}%  {:>6.1}% util    {}",
            d.name,
            w.r_s,
            w.w_s,
            w.rmb_s,
            w.wmb_s,
            w.r_await_ms,
            w.w_await_ms,
            w.aqu_sz,
            w.util_pct,
            busiest,
            if users.is_empty() {
                "-".to_string()
            } else {
                users.join(", ")
            }
        );
    }
}

fn thread_name(s: &Summary, tid: u32) -> String {
    s.threads
        .iter()
        .find(|t| t.tid == tid)
        .map_or_else(|| tid.to_string(), |t| format!("{}/{}", t.comm, tid))
}

/// Futexes shown; the JSON has all.
const MAX_FUTEX_ROWS: usize = 10;

fn futexes(out: &mut String, s: &Summary) {
    if s.futexes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nMost contended futexes (locks, condition variables, pool barriers)"
    );
    let _ = writeln!(
        out,
        "  {:>7} {:<18} {:>7} {:>6} {:>9}  WOKEN BY",
        "PID", "ADDRESS", "WAITERS", "WAITS", "WAIT"
    );
    for f in s.futexes.iter().take(MAX_FUTEX_ROWS) {
        let mut wakers: Vec<String> = f
            .wakers
            .iter()
            .take(3)
            .map(|w| format!("{} ×{}", thread_name(s, w.tid), w.wakes))
            .collect();
        if f.unwoken > 0 {
            wakers.push(format!("timeout/other ×{}", f.unwoken));
        }
        let _ = writeln!(
            out,
            "  {:>7} {:<18} {:>7} {:>6} {:>8.3}s  {}",
            f.pid,
            format!("{:#x}", f.uaddr),
            f.waiters,
            f.waits,
            f.wait_s,
            wakers.join(", ")
        );
    }
}

fn gpus(out: &mut String, s: &Summary) {
    let _ = writeln!(out, "\nGPU");
    if let Some(reason) = &s.gpu_status {
        let _ = writeln!(out, "  no GPU data: {reason}");
        return;
    }
    for g in &s.gpus {
        gpu(out, g);
    }
}

fn gpu(out: &mut String, g: &GpuStats) {
    let _ = writeln!(out, "  GPU {} ({}):", g.index, g.name);
    match (g.util_mean_pct, g.idle_frac) {
        (Some(util), Some(idle)) => {
            let _ = writeln!(
                out,
                "    utilization {util:.0}% on average, idle (<= {IDLE_UTIL_PCT}%) {:.0}% of the time ({})",
                100.0 * idle,
                g.utilization_source
            );
        }
        _ => {
            let _ = writeln!(out, "    no utilization samples");
        }
    }
    for (start, end) in g.longest_idle().into_iter().take(MAX_IDLE_ROWS) {
        let _ = writeln!(
            out,
            "    idle {:.2} s from {start:.2} s to {end:.2} s",
            end - start
        );
    }
    if let Some(peak) = g.mem_peak_bytes {
        let total = g
            .memory_total_bytes
            .map(|t| format!(" of {}", gib(t)))
            .unwrap_or_default();
        let _ = writeln!(out, "    memory peak {}{total}", gib(peak));
    }
    gpu_extras(out, g);
    for p in &g.processes {
        let _ = writeln!(
            out,
            "    process {} ({}): {:.0}% SM utilization on average",
            p.pid, p.comm, p.sm_util_mean_pct
        );
    }
    for m in &g.missing {
        let _ = writeln!(out, "    missing: {m}");
    }
}

/// PCIe, clock and power on one line, whichever were sampled.
fn gpu_extras(out: &mut String, g: &GpuStats) {
    let mut parts = Vec::new();
    if let Some(rx) = g.pcie_rx_bytes_per_s {
        parts.push(format!("PCIe rx {:.0} MB/s", rx / 1e6));
    }
    if let Some(tx) = g.pcie_tx_bytes_per_s {
        parts.push(format!("tx {:.0} MB/s", tx / 1e6));
    }
    if let Some(mhz) = g.sm_clock_mhz {
        parts.push(format!("SM clock {mhz:.0} MHz"));
    }
    if let Some(w) = g.power_w {
        parts.push(format!("power {w:.0} W"));
    }
    if !parts.is_empty() {
        let _ = writeln!(out, "    {} (means)", parts.join(", "));
    }
}

/// How whole the flamegraphs' user stacks are, and how they were taken.
fn stacks(out: &mut String, q: &StackQuality, lost: &LostCounts) {
    let _ = writeln!(out, "\nStacks");
    match q.mode {
        Some(UserStacks::Dwarf { copy_bytes }) => {
            let _ = writeln!(
                out,
                "  user stacks: {} KiB copied at each sample and new off-CPU site, \
                 unwound with the binaries' CFI",
                copy_bytes / 1024
            );
        }
        Some(UserStacks::FramePointers) | None => {
            let why = match q.mode {
                Some(_) => "this kernel cannot copy them: no BTF, or before Linux 5.15",
                None => "recorded by a tprof that did not copy them",
            };
            let _ = writeln!(
                out,
                "  user stacks: walked by frame pointers in the kernel ({why}); frames \
                 of code built without frame pointers (most of libc, libpython, wheels) \
                 are missing or wrong"
            );
        }
    }
    let pct = |n: u64| 100.0 * n as f64 / q.samples.max(1) as f64;
    if let Some(rooted) = q.rooted {
        let _ = writeln!(
            out,
            "  on-CPU samples: {} of {} ({:.1}%) reach their thread's root, {} stop \
             short under [truncated], {} lost",
            rooted,
            q.samples,
            pct(rooted),
            q.truncated,
            q.lost
        );
    }
    if lost.stack_truncated + lost.stack_copy_short > 0 {
        let _ = writeln!(
            out,
            "  {} unwound stack(s) went deeper than the bytes copied or 512 frames ({} \
             where a page could not be read): --stack-size raises the first limit",
            lost.stack_truncated + lost.stack_copy_short,
            lost.stack_copy_short
        );
    }
    if lost.stack_cut + lost.stack_copy_failed > 0 {
        let _ = writeln!(
            out,
            "  {} unwound stack(s) stopped at an address that is not code or a stack \
             that did not unwind (code without CFI, or a process gone before its mappings \
             were read), {} had no readable stack",
            lost.stack_cut, lost.stack_copy_failed
        );
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn cuda(out: &mut String, c: &CudaStats) {
    let _ = writeln!(out, "\nCUDA");
    if !c.visible {
        let reason = c
            .status
            .as_deref()
            .unwrap_or("no libcudart mapped by the job");
        let _ = writeln!(out, "  CUDA calls not visible: {reason}");
        return;
    }
    let _ = writeln!(out, "  runtime: {}", c.libraries.join(", "));
    let calls: Vec<String> = c.calls.iter().map(|(f, n)| format!("{f} {n}")).collect();
    let _ = writeln!(
        out,
        "  calls: {}{}",
        if calls.is_empty() {
            "none".to_string()
        } else {
            calls.join(", ")
        },
        if c.failed_calls > 0 {
            format!(" ({} returned an error)", c.failed_calls)
        } else {
            String::new()
        }
    );
    if c.launches_per_s > 0.0 {
        let _ = writeln!(out, "  kernel launches: {:.0}/s", c.launches_per_s);
    }
    let h = &c.h2d;
    let _ = writeln!(
        out,
        "  host-to-device copies: {} ({}): {} from pageable memory, {} from pinned; \
         {} followed by a blocking sync; {:.3} s blocking the caller",
        h.count,
        bytes(h.bytes),
        h.pageable,
        h.pinned,
        h.followed_by_sync,
        h.blocked_s
    );
    if let Some(t) = &c.trainer {
        let _ = writeln!(
            out,
            "  trainer {}/{}: {:.3} s in {} CUDA syncs, {:.3} s waiting for data",
            t.comm, t.tid, t.sync_s, t.syncs, t.data_wait_s
        );
        if let (Some(syncs), Some(waits)) =
            (t.gpu_idle_during_syncs_s, t.gpu_idle_during_data_waits_s)
        {
            let _ = writeln!(
                out,
                "  GPU idle while the trainer synced: {syncs:.3} s; while it waited for data: {waits:.3} s"
            );
        }
    }
    for m in &c.missing {
        let _ = writeln!(out, "  not probed: {m}");
    }
    for f in &c.findings {
        let _ = writeln!(out, "  [{}] {}: {}", f.severity, f.id, f.evidence);
        let _ = writeln!(out, "    fix: {}", f.fix);
    }
}

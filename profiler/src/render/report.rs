//! The terminal report: the headline first (how much CPU the job wants
//! against the cores it has), then processes, then threads.

use std::fmt::Write as _;

use crate::analysis::{ProcessStats, Summary, ThreadStats};

/// Threads shown in the table; the rest are summed in one line.
const MAX_THREAD_ROWS: usize = 40;

pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    header(&mut out, s);
    headline(&mut out, s);
    processes(&mut out, s);
    threads(&mut out, s);
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
            "warning: {} events lost (ring buffer full: {}; untracked new tasks: {}); \
             times of the affected threads are approximate",
            s.lost_events,
            if kinds.is_empty() {
                "none".into()
            } else {
                kinds.join(", ")
            },
            s.lost.tracking_full
        );
    }
    if s.lost.stack_lost() > 0 {
        let _ = writeln!(
            out,
            "warning: stack sampling lost {} stack(s) to stack-map collisions, {} to other \
             stack errors, {} sample(s) to a full aggregate and {} off-CPU interval(s); \
             flamegraphs are thinner there",
            s.lost.stack_collisions,
            s.lost.stack_failed,
            s.lost.stack_aggregate_full,
            s.lost.offcpu_full
        );
    }
    if s.cut_short {
        let _ = writeln!(
            out,
            "warning: the recording was cut short (tprof was killed or its disk filled); \
             this report covers what was saved"
        );
    }
}

/// One line a tired engineer can act on: is the job asking for more CPU
/// than it has?
fn headline(out: &mut String, s: &Summary) {
    let demand = s.job_on_cpu + s.job_runnable;
    let _ = writeln!(
        out,
        "\nThe job wanted {demand:.1} CPUs on average ({:.1} running + {:.1} waiting for a CPU) on {} cores.",
        s.job_on_cpu, s.job_runnable, s.cores
    );
    if let Some(m) = s.machine {
        let _ = writeln!(
            out,
            "Machine-wide: {:.1} runnable threads on average, CPUs {:.0}% busy.",
            m.mean_runnable_threads, m.cpu_busy_pct
        );
    }
    if s.job_runnable > 0.25 * s.cores as f64 {
        let _ = writeln!(
            out,
            "CPU contention: the job's threads spent {:.1} CPU-seconds per second waiting for a CPU.",
            s.job_runnable
        );
    }
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

fn role(p: &ProcessStats) -> String {
    match p.depth {
        0 => "target".into(),
        1 => "child".into(),
        n => format!("desc+{n}"),
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
        "  {:>7} {:>7} {:<16} {:>14} {:>14} {:>14} {:>14} {:>7} {:>7} {:>8}",
        "PID",
        "TID",
        "NAME",
        "ON-CPU",
        "RUNNABLE",
        "SLEEP (S)",
        "DISK (D)",
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
        "  {:>7} {:>7} {:<16} {:>14} {:>14} {:>14} {:>14} {:>7} {:>7} {:>7.2}s",
        t.pid,
        t.tid,
        name,
        cell(t.on_cpu_s),
        cell(t.runnable_s),
        cell(t.blocked_interruptible_s),
        cell(t.blocked_uninterruptible_s),
        t.voluntary_switches,
        t.involuntary_switches,
        t.lifetime_s
    );
}

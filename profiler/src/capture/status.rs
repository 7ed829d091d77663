//! What tprof says on stderr while it records: the line a script can wait
//! for once tracking has begun, the progress line (redrawn once a second
//! on a terminal, printed every ten seconds otherwise), what stopping
//! does, and the totals at the end. Formatting is apart from printing, so
//! the lines are tested.

use std::{
    io::{IsTerminal as _, Write as _},
    time::Duration,
};

use tprof_core::recording::GpuInfo;

use super::options::{Destination, RecordOutcome, StopReason};
use super::signals::FINISHING;
use super::stacks::StackCounts;

/// The one line a script waiting for tprof to attach can look for, and
/// whether the GPUs are sampled.
pub(super) fn announce(processes: usize, threads: usize, to: &Destination, gpu: &GpuInfo) {
    eprintln!("{}", announce_line(processes, threads, to));
    match &gpu.status {
        Some(reason) => eprintln!("tprof: no GPU data: {reason}"),
        None => eprintln!("tprof: sampling {} GPU(s)", gpu.devices.len()),
    }
}

/// `recording … to PATH` for a file, `watching …` for the live view.
fn announce_line(processes: usize, threads: usize, to: &Destination) -> String {
    match to {
        Destination::File(path) => format!(
            "tprof: recording {processes} process(es), {threads} thread(s) to {} (Ctrl-C to stop)",
            path.display()
        ),
        Destination::Live => {
            format!(
                "tprof: watching {processes} process(es), {threads} thread(s) (q or Ctrl-C to stop)"
            )
        }
    }
}

/// What the progress line shows.
pub(super) struct Progress<'a> {
    pub elapsed: Duration,
    pub events: u64,
    pub lost: u64,
    pub processes: usize,
    /// The pipeline is too far behind to take a drain.
    pub lagging: bool,
    /// While stopping: what tprof waits for.
    pub stopping: Option<&'a str>,
}

impl Progress<'_> {
    pub(super) fn line(&self) -> String {
        let lagging = if self.lagging {
            " (writing behind: events wait in the ring buffer)"
        } else {
            ""
        };
        let mut line = format!(
            "tprof: {:.0} s, {} events, {} lost, {} processes{lagging}",
            self.elapsed.as_secs_f64(),
            self.events,
            self.lost,
            self.processes
        );
        if let Some(stopping) = self.stopping {
            line = format!("{line}; {stopping}; {FINISHING}");
        }
        line
    }

    /// Redraws the line on a terminal; elsewhere (a log) prints it on
    /// every tenth second.
    pub(super) fn show(&self) {
        if std::io::stderr().is_terminal() {
            eprint!("\r\x1b[K{}", self.line());
            let _ = std::io::stderr().flush();
        } else if self.elapsed.as_secs().is_multiple_of(10) {
            eprintln!("{}", self.line());
        }
    }
}

/// Ends the progress line on a terminal, before what follows.
pub(super) fn end_progress() {
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
}

/// What stopping does, on one line (a script can wait for "finishing").
pub(super) fn announce_stop(reason: StopReason, command: Option<u32>, kill_after: Duration) {
    if let Some(line) = stop_line(reason, command, kill_after) {
        eprintln!("{line}");
    }
}

fn stop_line(reason: StopReason, command: Option<u32>, kill_after: Duration) -> Option<String> {
    let what = match (reason, command) {
        (StopReason::TargetsExited, _) => return None,
        (_, Some(pid)) => {
            let sig = match reason {
                StopReason::Interrupted | StopReason::Quit => "SIGINT",
                StopReason::HungUp => "SIGHUP",
                _ => "SIGTERM",
            };
            format!(
                "stopping the command: {sig} to its process group {pid}, SIGKILL after {} s",
                kill_after.as_secs_f64()
            )
        }
        (_, None) => "detaching; the targets keep running".to_string(),
    };
    let hint = if reason.is_signal() {
        FINISHING
    } else {
        "finishing…"
    };
    Some(format!("tprof: {} ({what}); {hint}", reason.as_str()))
}

/// The totals of a finished recording, and how the command ended.
pub(super) fn stopped(outcome: &RecordOutcome) {
    if let Some(exit) = &outcome.command_exit {
        eprintln!("tprof: the command (pid {}) {}", exit.pid, exit.describe());
    }
    eprintln!("{}", stopped_line(outcome));
}

fn stopped_line(outcome: &RecordOutcome) -> String {
    let stacks_lost = match outcome.lost.stack_lost() {
        0 => String::new(),
        n => format!(", {n} stacks lost"),
    };
    let in_flight_lost = match outcome.lost.in_flight_lost() {
        0 => String::new(),
        n => format!(", {n} requests, bios or CUDA calls lost in flight"),
    };
    format!(
        "tprof: stopped ({}), {} events, {} lost{stacks_lost}{in_flight_lost}, written to {}",
        outcome.stop_reason.as_str(),
        outcome.events,
        outcome.lost.total(),
        outcome.path.display()
    )
}

/// The line `TPROF_STACK_COPY_STATS=1` prints: `tprof: stack copies: N
/// drained, B bytes in S s (R bytes/s)`, B counting whole ring-buffer
/// records (header, registers and the stack bytes), then the resolve
/// stage's CPU time resolving stacks, in all and per copy, naming frames,
/// and how many unwinds finished with their thread's last walk.
pub(super) fn copy_stats_line(
    (copies, bytes): (u64, u64),
    secs: f64,
    counts: &StackCounts,
) -> String {
    let resolve_ns = counts.resolve_cpu_ns as f64;
    format!(
        "tprof: stack copies: {copies} drained, {bytes} bytes in {secs:.2} s ({:.0} bytes/s); \
         resolving stacks took {:.1} ms of CPU ({:.1} us a copy), naming frames {:.1} ms; \
         {} unwinds finished with the thread's last",
        bytes as f64 / secs.max(1e-9),
        resolve_ns / 1e6,
        resolve_ns / 1e3 / copies.max(1) as f64,
        counts.naming_cpu_ns as f64 / 1e6,
        counts.finished_with_last,
    )
}

/// The line `TPROF_SWITCH_PROFILE=1` prints: each part of the switch
/// program (`profiler_ebpf::switch_part`) as `name: runs × ns/run`.
pub(super) fn switch_profile_line(parts: &[(&str, u64, u64)]) -> String {
    let parts: Vec<String> = parts
        .iter()
        .map(|&(name, ns, runs)| {
            format!("{name}: {runs} x {:.0} ns", ns as f64 / runs.max(1) as f64)
        })
        .collect();
    format!("tprof: switch profile: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tprof_core::recording::LostCounts;

    #[test]
    fn switch_profile_line_gives_runs_and_ns_per_run() {
        assert_eq!(
            switch_profile_line(&[("tracked switch", 4000, 10), ("kernel walk", 0, 0)]),
            "tprof: switch profile: tracked switch: 10 x 400 ns; kernel walk: 0 x 0 ns"
        );
    }

    #[test]
    fn copy_stats_line_gives_bytes_per_second_and_cpu_per_copy() {
        let counts = StackCounts {
            resolve_cpu_ns: 6_600_000,
            naming_cpu_ns: 1_250_000,
            finished_with_last: 2,
            ..StackCounts::default()
        };
        assert_eq!(
            copy_stats_line((3, 3000), 2.0, &counts),
            "tprof: stack copies: 3 drained, 3000 bytes in 2.00 s (1500 bytes/s); \
             resolving stacks took 6.6 ms of CPU (2200.0 us a copy), naming frames 1.2 ms; \
             2 unwinds finished with the thread's last"
        );
        // No time elapsed, no copies: no division by zero.
        let empty = copy_stats_line((0, 0), 0.0, &StackCounts::default());
        assert!(empty.contains("(0 bytes/s)") && empty.contains("(0.0 us a copy)"));
    }

    #[test]
    fn progress_line_says_when_writing_is_behind_and_what_stopping_waits_for() {
        let progress = Progress {
            elapsed: Duration::from_millis(12_400),
            events: 5,
            lost: 1,
            processes: 3,
            lagging: false,
            stopping: None,
        };
        assert_eq!(
            progress.line(),
            "tprof: 12 s, 5 events, 1 lost, 3 processes"
        );
        let behind = Progress {
            lagging: true,
            stopping: Some("waiting for the command"),
            ..progress
        };
        assert_eq!(
            behind.line(),
            format!(
                "tprof: 12 s, 5 events, 1 lost, 3 processes (writing behind: events wait in \
                 the ring buffer); waiting for the command; {FINISHING}"
            )
        );
    }

    #[test]
    fn stopping_says_what_becomes_of_the_targets() {
        let kill_after = Duration::from_secs(10);
        assert_eq!(
            stop_line(StopReason::Interrupted, Some(42), kill_after).unwrap(),
            format!(
                "tprof: interrupted (stopping the command: SIGINT to its process group 42, \
                 SIGKILL after 10 s); {FINISHING}"
            )
        );
        assert_eq!(
            stop_line(StopReason::Duration, None, kill_after).unwrap(),
            "tprof: duration (detaching; the targets keep running); finishing…"
        );
        assert_eq!(stop_line(StopReason::TargetsExited, None, kill_after), None);
    }

    #[test]
    fn announce_names_the_file_or_says_it_watches() {
        let file = Destination::File("/tmp/x.tprof".into());
        assert_eq!(
            announce_line(2, 5, &file),
            "tprof: recording 2 process(es), 5 thread(s) to /tmp/x.tprof (Ctrl-C to stop)"
        );
        assert_eq!(
            announce_line(2, 5, &Destination::Live),
            "tprof: watching 2 process(es), 5 thread(s) (q or Ctrl-C to stop)"
        );
    }

    #[test]
    fn stopped_line_names_stack_and_in_flight_losses_only_when_some() {
        let outcome = RecordOutcome {
            path: "/tmp/x.tprof".into(),
            stop_reason: StopReason::Duration,
            events: 10,
            lost: LostCounts::default(),
            command_exit: None,
        };
        assert_eq!(
            stopped_line(&outcome),
            "tprof: stopped (duration), 10 events, 0 lost, written to /tmp/x.tprof"
        );
    }
}

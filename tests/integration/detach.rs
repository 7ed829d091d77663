//! No eBPF program outlives tprof: not when the command ends, not when
//! tprof is interrupted, hung up, interrupted twice or killed with -9 (and
//! then the recording so far still reads, as cut short). While tprof records, the tests note the programs
//! it holds (all named `tprof_*`), and check afterwards that none of them
//! is still loaded. Going by program id rather than by name keeps the tests
//! right while another tprof runs on the machine.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use tprof_tests::{
    Running, assert_programs_unloaded, bpf_program_ids_held_by, bpf_programs, build_workload,
    record_command, report_json, require_root,
};

#[test]
fn no_programs_left_after_exit() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let tprof = record_sleeper(&recording, "1");
    let ours = programs_of(&tprof);
    let finished = tprof.wait(Duration::from_secs(30));
    assert!(
        finished.status.success(),
        "tprof record failed: {finished:#?}"
    );
    assert_unloaded(&ours);
    assert_readable(&recording);
}

#[test]
fn no_programs_left_after_sigint() {
    stop_with_signal(libc::SIGINT);
}

#[test]
fn no_programs_left_after_sigterm() {
    stop_with_signal(libc::SIGTERM);
}

#[test]
fn no_programs_left_after_sighup() {
    stop_with_signal(libc::SIGHUP);
}

/// A second Ctrl-C while tprof is finishing stops it at once: exit 130,
/// one error line, programs gone, and the file a readable prefix. To give
/// finishing real work, tprof is stopped (SIGSTOP) while a ping-pong
/// workload floods the ring buffer, and the first SIGINT is queued before it
/// resumes: its final drain then has a full ring buffer to write, and the
/// second SIGINT (repeated, as an impatient user would) lands during it.
#[test]
fn second_sigint_stops_at_once() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let mut tprof = record_flood(&recording);
    let ours = programs_of(&tprof);
    tprof.signal(libc::SIGSTOP);
    thread::sleep(Duration::from_secs(1));
    tprof.signal(libc::SIGINT);
    tprof.signal(libc::SIGCONT);
    tprof.wait_for_stderr("Ctrl-C again", Duration::from_secs(10));
    let pid = tprof.pid();
    for _ in 0..100 {
        // SAFETY: kill has no memory-safety preconditions; ESRCH once
        // tprof is gone ends the loop.
        if unsafe { libc::kill(pid, libc::SIGINT) } != 0 {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let finished = tprof.wait(Duration::from_secs(30));
    assert!(
        !finished.stderr.contains("panicked"),
        "tprof panicked: {finished:#?}"
    );
    assert!(
        finished.stderr.contains("stopped at once"),
        "tprof finished normally before the second SIGINT: {finished:#?}"
    );
    assert_eq!(finished.status.code(), Some(130), "{finished:#?}");
    let errors: Vec<&str> = finished
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{finished:#?}");
    assert!(errors[0].contains("cut short"), "{finished:#?}");
    assert_unloaded(&ours);
    let report = report_json(&recording);
    assert_eq!(report["cut_short"], true, "{report:#}");
    assert!(report["events"].as_u64().unwrap_or(0) > 0, "{report:#}");
}

/// kill -9 gives tprof no chance to clean up: the kernel must free the
/// programs with tprof's last fds, and what was flushed must read as a
/// recording cut short, stacks included.
#[test]
fn kill_9_leaves_readable_prefix_and_no_programs() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let tprof = record_flood(&recording);
    let ours = programs_of(&tprof);
    tprof.signal(libc::SIGKILL);
    let finished = tprof.wait(Duration::from_secs(10));
    assert_eq!(
        finished.status.signal(),
        Some(libc::SIGKILL),
        "{finished:#?}"
    );
    assert_unloaded(&ours);
    let report = report_json(&recording);
    assert_eq!(report["cut_short"], true, "{report:#}");
    assert!(report["events"].as_u64().unwrap_or(0) > 0, "{report:#}");
    let text = tprof_tests::tprof()
        .arg("report")
        .arg(&recording)
        .output()
        .expect("run tprof report");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("cut short"),
        "{}",
        tprof_tests::show(&text)
    );
    // Stacks are streamed with the events (format 4): the ones sampled
    // before the kill are in the prefix, each stack defined before use.
    let wall = tprof_tests::flamegraph_folded(&recording, &["--kind", "wall"]);
    let named = wall
        .iter()
        .filter(|(stack, _)| stack.contains(";main;"))
        .count();
    assert!(named > 0, "no stacks kept after kill -9: {wall:#?}");
}

/// `tprof record -- flood 60`, a second after it says it is recording:
/// by then events have been flushed to the file.
fn record_flood(recording: &Path) -> Running {
    let flood = build_workload("flood");
    let cmd = [flood.to_str().unwrap(), "60"];
    let mut tprof = Running::spawn(&mut record_command(recording, &["--no-report"], &cmd));
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
    thread::sleep(Duration::from_secs(1));
    tprof
}

/// Interrupts a recording of a 5 s sleeper: tprof must stop promptly on its
/// own (not die from the signal), unload everything, and leave a readable
/// recording.
fn stop_with_signal(sig: i32) {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let tprof = record_sleeper(&recording, "5");
    let ours = programs_of(&tprof);
    let signalled = Instant::now();
    tprof.signal(sig);
    let finished = tprof.wait(Duration::from_secs(10));
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "tprof took {took:?} to stop: {finished:#?}"
    );
    assert!(
        finished.status.signal().is_none(),
        "tprof died from signal {sig} instead of stopping cleanly: {finished:#?}"
    );
    assert_unloaded(&ours);
    assert_readable(&recording);
}

/// `tprof record -- sleeper SECONDS`, once it says it is recording.
fn record_sleeper(recording: &Path, seconds: &str) -> Running {
    let sleeper = build_workload("sleeper");
    let cmd = [sleeper.to_str().unwrap(), seconds];
    let mut tprof = Running::spawn(&mut record_command(recording, &[], &cmd));
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
    tprof
}

/// The ids of the programs this tprof loaded; they must be ours by name.
fn programs_of(tprof: &Running) -> Vec<u32> {
    let ids = bpf_program_ids_held_by(tprof.pid());
    assert!(!ids.is_empty(), "a recording tprof holds no BPF programs");
    for (id, name) in bpf_programs().iter().filter(|(id, _)| ids.contains(id)) {
        assert!(
            name.starts_with("tprof_"),
            "program {id} {name:?} is not named tprof_*"
        );
    }
    ids
}

fn assert_unloaded(ours: &[u32]) {
    assert_programs_unloaded(ours);
}

fn assert_readable(recording: &Path) {
    assert!(
        recording.is_file(),
        "no recording at {}",
        recording.display()
    );
    report_json(recording);
}

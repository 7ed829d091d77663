//! No eBPF program outlives tprof: not when the command ends, not when
//! tprof is interrupted, hung up, interrupted twice a second apart or killed with -9 (and
//! then the recording so far still reads, as cut short). While tprof records, the tests note the programs
//! it holds (all named `tprof_*`), and check afterwards that none of them
//! is still loaded. Going by program id rather than by name keeps the tests
//! right while another tprof runs on the machine. The kernel's last part
//! of detaching runs in tprof's release helper, after tprof has exited
//! (`the_kernels_release_is_left_to_a_helper`): the programs are gone a
//! moment later.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use tprof_tests::{
    Running, assert_programs_unloaded, bpf_program_ids_held_by, bpf_programs, build_workload,
    group_members, record_command, release_helpers, report_json, require_root,
    wait_for_release_helpers,
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

/// tprof leaves the kernel's part of detaching (a grace period per link,
/// seconds on a busy machine) to its release helper and exits without
/// waiting for it. Held here for 5 s by `TPROF_RELEASE_HOLD_MS`, the helper
/// (`tprof __release-links`, in a process group of its own) still holds
/// the links when tprof has exited, then lets them go, and ends.
#[test]
fn the_kernels_release_is_left_to_a_helper() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let sleeper = build_workload("sleeper");
    let quiet = ["--no-report", "--no-flamegraphs", "--no-timeline"];
    let mut command = record_command(&recording, &quiet, &[sleeper.to_str().unwrap(), "1"]);
    command.env("TPROF_RELEASE_HOLD_MS", "5000");
    let mut tprof = Running::spawn(&mut command);
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
    let ours = programs_of(&tprof);
    let finished = tprof.wait(Duration::from_secs(30));
    assert!(finished.status.success(), "{finished:#?}");
    let helpers = release_helpers();
    let held: Vec<u32> = helpers
        .iter()
        .flat_map(|&pid| bpf_program_ids_held_by(pid))
        .filter(|id| ours.contains(id))
        .collect();
    assert!(
        !held.is_empty(),
        "tprof exited and no release helper holds its programs (helpers {helpers:?}): {finished:#?}"
    );
    for &helper in &helpers {
        assert_eq!(
            tprof_tests::pgid(helper),
            Some(helper),
            "the helper leads its own group"
        );
    }
    assert_unloaded(&ours);
    wait_for_release_helpers();
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

/// A second Ctrl-C a second or more after the first, while tprof is
/// stopping, stops it at once: exit 130, one error line, the command's
/// process group killed, programs gone, and the file a readable prefix.
/// To keep tprof stopping, the command ignores SIGINT and has a minute's
/// grace (`--kill-after`). (A second one sooner is a duplicate:
/// `stopping::two_sigints_50ms_apart_finish_the_recording`.)
#[test]
fn second_sigint_a_second_later_stops_at_once() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let family = build_workload("family");
    let cmd = [family.to_str().unwrap(), "60", "stubborn"];
    let extra = ["--no-report", "--kill-after", "60s"];
    let mut tprof = Running::spawn(&mut record_command(&recording, &extra, &cmd));
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
    thread::sleep(Duration::from_millis(500));
    let ours = programs_of(&tprof);
    tprof.signal(libc::SIGINT);
    tprof.wait_for_stderr("Ctrl-C again", Duration::from_secs(10));
    let group = command_group(&tprof);
    thread::sleep(Duration::from_millis(1200));
    tprof.signal(libc::SIGINT);
    let finished = tprof.wait(Duration::from_secs(30));
    assert!(
        !finished.stderr.contains("panicked"),
        "tprof panicked: {finished:#?}"
    );
    assert!(
        finished.stderr.contains("stopped at once"),
        "tprof did not stop at once: {finished:#?}"
    );
    assert_eq!(finished.status.code(), Some(130), "{finished:#?}");
    let errors: Vec<&str> = finished
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{finished:#?}");
    assert!(errors[0].contains("cut short"), "{finished:#?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !group_members(group).is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let left = group_members(group);
    assert!(
        left.is_empty(),
        "the command's group outlived tprof: {left:?}"
    );
    assert_unloaded(&ours);
    let report = report_json(&recording);
    assert_eq!(report["cut_short"], true, "{report:#}");
    assert!(report["events"].as_u64().unwrap_or(0) > 0, "{report:#}");
}

/// The launched command's process group, which tprof's child leads.
fn command_group(tprof: &Running) -> i32 {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", tprof.pid()))
        .expect("read tprof's children");
    let child: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("tprof has launched a command");
    assert_eq!(
        tprof_tests::pgid(child),
        Some(child),
        "the command leads its group"
    );
    child
}

/// kill -9 gives tprof no chance to clean up: the kernel must free the
/// programs with tprof's last fds, and what was flushed must read as a
/// recording cut short, stacks included.
#[test]
fn kill_9_leaves_readable_prefix_and_no_programs() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let mut tprof = record_flood(&recording);
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

/// Interrupts a recording of a 30 s sleeper: tprof must stop on the signal
/// (not at the sleeper's end, and not die from it), unload everything, and
/// leave a complete recording that says which signal stopped it.
fn stop_with_signal(sig: i32) {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let mut tprof = record_sleeper(&recording, "30");
    let ours = programs_of(&tprof);
    tprof.signal(sig);
    let finished = tprof.wait(Duration::from_secs(25));
    assert!(
        finished.status.success(),
        "tprof did not stop cleanly on signal {sig}: {finished:#?}"
    );
    assert_unloaded(&ours);
    let report = report_json(&recording);
    let reason = match sig {
        libc::SIGINT => "interrupted",
        libc::SIGTERM => "terminated",
        _ => "hung up",
    };
    assert_eq!(report["stop_reason"], reason, "{report:#}");
    assert_eq!(report["cut_short"], false, "{report:#}");
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

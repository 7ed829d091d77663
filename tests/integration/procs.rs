//! What gets traced: every process and thread the command creates, an
//! already running process given with `-p`, and no longer than needed.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tprof_tests::{
    Report, Running, build_workload, parse_json_lines, record_cmd, record_command, report_json,
    require_root, show, trace_workload,
};

/// A fork of a traced process is traced from its first instruction, down
/// to grandchildren, with threads under the right process and the process
/// tree intact.
#[test]
fn child_and_grandchild_are_traced() {
    require_root();
    let traced = trace_workload("forker", &["0.3"]);
    let truth = &traced.truth;
    let report = &traced.report;
    for role in ["child", "child-worker", "grandchild"] {
        let truth = find(truth, "role", role);
        let thread = report.thread(int(truth, "tid"));
        assert_eq!(thread.comm, role, "{thread:#?}");
        assert_eq!(thread.pid, int(truth, "pid"), "{thread:#?}");
        assert_eq!(thread.ppid, int(truth, "ppid"), "{thread:#?}");
    }
    let parent = int(find(truth, "role", "parent"), "pid");
    let child = int(find(truth, "role", "child"), "pid");
    assert_eq!(
        report.process(child).ppid,
        parent,
        "{:#?}",
        report.processes
    );
    let grandchild = int(find(truth, "role", "grandchild"), "pid");
    assert_eq!(
        report.process(grandchild).ppid,
        child,
        "{:#?}",
        report.processes
    );
}

/// `-p PID` attaches to a process that is already running, with threads
/// created before tprof started.
#[test]
fn attach_to_running_process() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let start_file = dir.path().join("start");
    let mut target = Running::spawn(Command::new(build_workload("idle_target")).arg(&start_file));
    let first = parse_json_lines(&target.next_stdout_line(Duration::from_secs(10)));
    let pid = int(&first[0], "pid");

    let recording = dir.path().join("recording.tprof");
    let pid_arg = pid.to_string();
    let args = ["-p", pid_arg.as_str(), "-d", "1.5s"];
    let mut tprof = Running::spawn(&mut record_command(&recording, &args, &[]));
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
    std::fs::write(&start_file, "").expect("create start file");
    let record = tprof.wait(Duration::from_secs(30));
    assert!(
        record.status.success(),
        "tprof record -p failed: {record:#?}"
    );

    target.signal(libc::SIGTERM);
    let truth = parse_json_lines(&target.wait(Duration::from_secs(10)).stdout);
    let report = Report::from_json(report_json(&recording));
    check_attached_threads(&report, &truth, pid);
}

/// The target's windows (start file to SIGTERM) and tprof's differ, so
/// only loose checks: both threads present under their names, and the
/// spinning thread on a CPU for most of the recording but never longer.
fn check_attached_threads(report: &Report, truth: &[Value], pid: i64) {
    for name in ["idle-busy", "idle-sleep"] {
        let thread = report.thread(int(find(truth, "name", name), "tid"));
        assert_eq!(thread.comm, name, "{thread:#?}");
        assert_eq!(thread.pid, pid, "{thread:#?}");
    }
    let busy = report.thread(int(find(truth, "name", "idle-busy"), "tid"));
    let duration = report.duration_s;
    assert!(
        busy.on_cpu_s >= 0.5 * duration && busy.on_cpu_s <= duration * 1.02 + 0.01,
        "the spinning thread should run for most of the {duration} s recording: {busy:#?}"
    );
}

/// `record -- CMD` stops when CMD exits instead of waiting for a duration.
#[test]
fn exits_when_command_exits() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let sleeper = build_workload("sleeper");
    let started = Instant::now();
    let out = record_cmd(
        &dir.path().join("recording.tprof"),
        &[],
        &[sleeper.to_str().unwrap(), "0.2"],
    );
    let took = started.elapsed();
    assert!(out.status.success(), "tprof record failed: {}", show(&out));
    assert!(
        took < Duration::from_secs(10),
        "tprof took {took:?} for a 0.2 s command"
    );
}

fn int(truth: &Value, key: &str) -> i64 {
    truth[key]
        .as_i64()
        .unwrap_or_else(|| panic!("ground truth lacks {key}: {truth}"))
}

/// The ground-truth line whose `key` is `value`.
fn find<'a>(truth: &'a [Value], key: &str, value: &str) -> &'a Value {
    truth
        .iter()
        .find(|t| t[key] == value)
        .unwrap_or_else(|| panic!("no ground truth with {key} = {value:?}: {truth:#?}"))
}

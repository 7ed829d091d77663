//! Targets and loads at the edges: thousands of threads, a fork bomb that
//! fills the tracked set, a flooded ring buffer, a full disk, a target that
//! exits while tprof attaches, and a pid reused during the recording. Each
//! ends in a recording that says what it lost, or in one clear error; never
//! a crash.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tprof_tests::{
    Report, Running, assert_programs_unloaded, bpf_program_ids_held_by, build_workload, data_file,
    parse_json_lines, record_cmd, record_command, report_json, require_root, show, trace_workload,
    trace_workload_with,
};

const STARTUP: Duration = Duration::from_secs(30);

/// Starts a workload that prints a JSON line with its `pid` first, and
/// returns it with that line.
fn start_workload(name: &str, args: &[&str]) -> (Running, Value) {
    let mut workload = Running::spawn(Command::new(build_workload(name)).args(args));
    let line = workload.next_stdout_line(STARTUP);
    let first = parse_json_lines(&line)
        .pop()
        .unwrap_or_else(|| panic!("{name} printed no JSON first: {line:?}"));
    (workload, first)
}

fn int(value: &Value, key: &str) -> i64 {
    value[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {key:?} in {value}"))
}

/// `tprof record -p PID` of a process with 3000 threads: every thread is
/// tracked and listed, nothing is lost to a full tracked set.
#[test]
fn thousands_of_threads() {
    require_root();
    let (workload, first) = start_workload("many_threads", &["3000", "60"]);
    let pid = int(&first, "pid");
    let report = record_pid(pid, &[]);
    let threads = report.threads.iter().filter(|t| t.pid == pid).count();
    assert_eq!(threads, 3001, "3000 idle threads and the main thread");
    for k in [0, 1499, 2999] {
        assert_eq!(
            report.threads_named(&format!("idle-{k}")).len(),
            1,
            "idle-{k} missing; {}",
            report.summary()
        );
    }
    // Nothing lost to a full tracked set or ring buffer. (Runs the kernel
    // skipped may be counted: each of the 3000 inserts into the tracked
    // map, a syscall, holds off every BPF program on its CPU for its
    // moment, and scheduler events of other tasks fall there.)
    let lost = &report.lost;
    let why = format!("{lost:?}; {} runs skipped", lost.recursion_misses);
    assert_eq!(lost.tracking_full, 0, "{why}");
    assert_eq!(lost.ring_buffer_full.values().sum::<u64>(), 0, "{why}");
    assert_eq!(lost.undecodable, 0, "{why}");
    drop(workload);
}

/// The same process with room for 1000 threads: tprof records the ones
/// that fit, counts the rest in tracking_full, and says so in the report.
#[test]
fn attach_past_the_tracked_set_counts_the_rest() {
    require_root();
    let (workload, first) = start_workload("many_threads", &["3000", "60"]);
    let pid = int(&first, "pid");
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let pid_arg = pid.to_string();
    let args = [
        "-p",
        pid_arg.as_str(),
        "-d",
        "1s",
        "--no-stacks",
        "--max-tracked-threads",
        "1000",
    ];
    let out = record_cmd(&recording, &args, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let json = report_json(&recording);
    let report = Report::from_json(json.clone());
    let listed = report.threads.iter().filter(|t| t.pid == pid).count();
    assert_eq!(listed, 1000, "{}", report.summary());
    assert_eq!(json["lost"]["tracking_full"], 3001 - 1000, "{json:#}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("untracked new tasks: 2001"),
        "{}",
        show(&out)
    );
    drop(workload);
}

/// A fork bomb the test bounds (200 children alive at once) against a
/// tracked set of 32: the kernel tracks the first 31 children and counts
/// every other one, once; the recording completes.
#[test]
fn fork_bomb_fills_the_tracked_set() {
    require_root();
    let traced = trace_workload_with(
        "fork_bomb",
        &["--no-stacks", "--max-tracked-threads", "32"],
        &["200", "2"],
    );
    let children = int(&traced.truth[0], "children");
    assert_eq!(children, 200, "{:?}", traced.truth);
    let json = report_json(&traced.recording);
    // The launched process takes one slot of each map.
    assert_eq!(json["lost"]["tracking_full"], children - 31, "{json:#}");
    assert!(
        traced.record.stdout.contains("untracked new tasks: 169"),
        "{:#?}",
        traced.record
    );
}

/// A ring buffer of one page under a ping-pong flood: drops are counted
/// per event kind, in the JSON `lost` object, in the report's header and
/// under the flamegraphs' titles.
#[test]
fn ring_buffer_overload_is_counted_per_kind() {
    require_root();
    let traced = trace_workload_with("flood", &["--ring-buffer-size", "4096"], &["1"]);
    let json = report_json(&traced.recording);
    let by_kind = json["lost"]["ring_buffer_full"]
        .as_object()
        .expect("lost.ring_buffer_full is an object");
    for kind in ["switch", "wakeup"] {
        assert!(
            by_kind[kind].as_u64().unwrap_or(0) > 0,
            "no {kind} drops: {json:#}"
        );
    }
    let dropped: u64 = by_kind.values().filter_map(Value::as_u64).sum();
    let other = ["tracking_full", "undecodable", "recursion_misses"]
        .iter()
        .map(|k| json["lost"][k].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert_eq!(json["lost_events"], dropped + other, "{json:#}");
    let header = traced
        .record
        .stdout
        .lines()
        .find(|l| l.starts_with("warning:") && l.contains("ring buffer full"))
        .unwrap_or_else(|| panic!("no lost-events warning: {:#?}", traced.record));
    let switch = by_kind["switch"].as_u64().unwrap();
    assert!(header.contains(&format!("switch {switch}")), "{header}");
    let mut wall = traced.recording.clone().into_os_string();
    wall.push(".wall.svg");
    let svg = std::fs::read_to_string(&wall).expect("read the wall flamegraph");
    assert!(
        svg.contains("events lost (ring buffer full: ")
            && svg.contains(&format!("switch {switch}")),
        "no loss note under the flamegraph's title"
    );
}

/// The kernel's maps of block requests and tracked bios in flight, shrunk
/// to one entry: 8 MiB O_DIRECT reads, each split into several requests
/// submitted together, overflow both. Every refusal is counted, in the
/// JSON and in a report warning whose figures add up; with the maps at
/// their size the same reads lose nothing.
#[test]
fn full_block_maps_are_counted() {
    require_root();
    let file = data_file(64);
    let args = [file.path_str(), "8192"];
    let full = trace_workload_with("direct_reader", &["--max-in-flight", "1"], &args);
    let lost = &report_json(&full.recording)["lost"];
    for key in ["requests_full", "bio_owners_full"] {
        assert!(lost[key].as_u64().unwrap_or(0) > 0, "no {key}: {lost:#}");
    }
    let in_flight: u64 = IN_FLIGHT_KEYS
        .iter()
        .map(|k| lost[k].as_u64().unwrap_or(0))
        .sum();
    let warning = full
        .record
        .stdout
        .lines()
        .find(|l| l.contains("lost track of"))
        .unwrap_or_else(|| panic!("no in-flight warning: {:#?}", full.record));
    assert!(
        warning.contains(&format!("lost track of {in_flight} block request")),
        "{warning}\n{lost:#}"
    );
    let requests_full = lost["requests_full"].as_u64().unwrap();
    assert!(
        warning.contains(&format!("block request times, map full: {requests_full}")),
        "{warning}"
    );

    let roomy = trace_workload("direct_reader", &args);
    let lost = &report_json(&roomy.recording)["lost"];
    for key in IN_FLIGHT_KEYS {
        assert_eq!(lost[key], 0, "{key}: {lost:#}");
    }
}

/// Requests and bios in flight longer than `--expire-in-flight-after` are
/// dropped and counted. With a 1 ms age, O_DIRECT reads of 8 MiB (each in
/// flight for milliseconds) kept up for several of capture's once-a-second
/// checks leave some behind. Kept up for 4 s, not a number of passes: on
/// a fast disk six passes over 64 MiB took 0.22 s, before the first
/// check (a clean-clone run failed so).
#[test]
fn expired_requests_are_counted() {
    require_root();
    let file = data_file(64);
    // Pass after pass over 64 MiB for 4 s.
    let args = [file.path_str(), "8192", "0", "0", "4s"];
    let traced = trace_workload_with("direct_reader", &["--expire-in-flight-after", "1ms"], &args);
    let lost = &report_json(&traced.recording)["lost"];
    assert!(
        lost["requests_expired"].as_u64().unwrap_or(0) > 0,
        "no request expired: {lost:#}\n{:#?}",
        traced.record
    );
}

/// The `lost` fields of the maps of things in flight.
const IN_FLIGHT_KEYS: [&str; 7] = [
    "requests_full",
    "requests_expired",
    "bio_owners_full",
    "bio_owners_expired",
    "cuda_calls_full",
    "cuda_calls_unreturned",
    "cuda_launches_full",
];

/// A tmpfs mounted for the test; unmounted when dropped.
struct SmallDisk {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let parent = tempfile::tempdir().expect("create temp dir");
        let dir = parent.path().join("disk");
        std::fs::create_dir(&dir).expect("create mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount tmpfs failed: {status}");
        SmallDisk {
            dir,
            _parent: parent,
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// The disk fills mid-recording: tprof stops with one error line that
/// names the problem and the fix, exits non-zero, unloads its programs, and
/// what it wrote reads as a recording cut short.
#[test]
fn disk_full_stops_cleanly_and_keeps_the_prefix() {
    require_root();
    let disk = SmallDisk::mount("16m");
    let recording = disk.dir.join("recording.tprof");
    let flood = build_workload("flood");
    let mut tprof = Running::spawn(&mut record_command(
        &recording,
        &["--no-report"],
        &[flood.to_str().unwrap(), "60"],
    ));
    tprof.wait_for_stderr("recording", STARTUP);
    let ours = bpf_program_ids_held_by(tprof.pid());
    let finished = tprof.wait(Duration::from_mins(1));
    assert_eq!(finished.status.code(), Some(1), "{finished:#?}");
    assert!(!finished.stderr.contains("panicked"), "{finished:#?}");
    let errors: Vec<&str> = finished
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{finished:#?}");
    for needle in ["No space left on device", "kept", "cut short", "-o"] {
        assert!(errors[0].contains(needle), "{needle:?} in {}", errors[0]);
    }
    assert_programs_unloaded(&ours);
    let json = report_json(&recording);
    assert_eq!(json["cut_short"], true, "{json:#}");
    assert!(json["events"].as_u64().unwrap_or(0) > 0, "{json:#}");
}

/// A target that exits while tprof starts: depending on when, tprof says it
/// is gone (no such process, or a zombie its parent has not reaped, or it
/// exited while tprof attached), or it attaches and stops at once because
/// the target exited. Never a crash,
/// never a recording that cannot be read. The targets' lives are spread
/// over tprof's start-up so some exits land between its checks and attach.
#[test]
fn target_exits_during_attach() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    for (i, life) in ["0.05", "0.1", "0.2", "0.3", "0.4", "0.6", "0.8", "1.0"]
        .iter()
        .enumerate()
    {
        let (target, first) = start_workload("sleeper", &[life]);
        let pid = int(&first, "pid").to_string();
        let recording = dir.path().join(format!("recording-{i}.tprof"));
        let out = record_cmd(&recording, &["-p", &pid, "--no-report"], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{}", show(&out));
        if out.status.success() {
            assert!(err.contains("targets exited"), "{}", show(&out));
            report_json(&recording);
        } else {
            let error = err
                .lines()
                .find(|l| l.starts_with("error: "))
                .unwrap_or_else(|| panic!("no error line: {}", show(&out)));
            assert!(
                error.contains("no such process")
                    || error.contains("zombie")
                    || error.contains(&format!("process {pid} exited while tprof was attaching")),
                "{error}"
            );
            assert!(!recording.exists(), "a failed start left {recording:?}");
        }
        drop(target);
    }
}

/// A pid used by two processes in turn during one recording (the workload
/// steers the kernel's pid allocator with ns_last_pid): the report keeps
/// them apart, each with its own thread, name and parent.
#[test]
fn reused_pid_is_two_processes() {
    require_root();
    let traced = trace_workload("pid_reuse", &[]);
    let reused = traced.truth.iter().any(|v| v["reused"] == true);
    assert!(
        reused,
        "the workload could not reuse a pid: {:?}",
        traced.truth
    );
    let first = traced
        .truth
        .iter()
        .find(|v| v["role"] == "first")
        .expect("first's line");
    let pid = int(first, "pid");
    let report = &traced.report;
    let mut threads: Vec<&str> = report
        .threads
        .iter()
        .filter(|t| t.tid == pid)
        .map(|t| t.comm.as_str())
        .collect();
    threads.sort_unstable();
    assert_eq!(threads, ["first", "second"], "{}", report.summary());
    let processes: Vec<_> = report.processes.iter().filter(|p| p.pid == pid).collect();
    assert_eq!(processes.len(), 2, "{:#?}", report.processes);
    let json = report_json(&traced.recording);
    let threads_of: Vec<u64> = json["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["pid"] == pid)
        .map(|p| p["threads"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(threads_of, [1, 1], "each holder has its own one thread");
}

fn record_pid(pid: i64, extra: &[&str]) -> Report {
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let pid_arg = pid.to_string();
    let mut args = vec!["-p", pid_arg.as_str(), "-d", "1s", "--no-stacks"];
    args.extend_from_slice(extra);
    let out = record_cmd(&recording, &args, &[]);
    assert!(out.status.success(), "{}", show(&out));
    Report::from_json(report_json(&recording))
}

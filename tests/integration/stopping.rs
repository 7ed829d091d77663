//! How a recording stops, and what happens to the job. The command
//! `record --` launched never outlives tprof: a stop signal to tprof alone,
//! to its process group, twice 50 ms apart or from `timeout` is passed on
//! to the command's process group once, tprof waits for the whole group
//! (SIGKILL after `--kill-after`) while it keeps recording, and the
//! recording ends complete with the command's exit in its footer. `-p`
//! targets are left running. The job is tests/workloads/family.c: a parent,
//! two workers and a worker's helper, each announcing its pid and group.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;
use tprof_tests::{
    Finished, Running, build_workload, parse_json_lines, record_command, report_json, require_root,
    signal,
};

/// tprof's options in these tests: nothing it writes after the recording.
const QUIET: &[&str] = &["--no-report", "--no-timeline", "--no-stacks"];

#[test]
fn sigint_to_tprof_alone_stops_the_command_and_its_children() {
    let mut job = Job::record("default", &[]);
    let parent = job.parent();
    job.tprof.signal(libc::SIGINT);
    let ended = job.finish();
    assert_complete(&ended.finished, &ended.report, "interrupted");
    let exit = &ended.report["command_exit"];
    assert_eq!(exit["signal"], "SIGINT", "{exit:#}");
    assert_eq!(exit["stop_signal"], "SIGINT", "{exit:#}");
    assert_eq!(exit["killed"], false, "{exit:#}");
    assert_eq!(exit["pid"], parent, "{exit:#}");
}

/// A job that catches SIGTERM and shuts down: tprof waits for it and
/// records the status it chose.
#[test]
fn sigterm_to_tprof_alone_lets_the_command_shut_down() {
    let mut job = Job::record("graceful", &[]);
    job.tprof.signal(libc::SIGTERM);
    let ended = job.finish();
    assert_complete(&ended.finished, &ended.report, "terminated");
    let exit = &ended.report["command_exit"];
    assert_eq!(exit["code"], 3, "{exit:#}");
    assert_eq!(exit["stop_signal"], "SIGTERM", "{exit:#}");
    assert_eq!(ended.signals, Some(1), "stop signals that reached the job");
}

/// A signal to tprof's process group (a terminal's Ctrl-C, `kill -INT
/// -PGID`) reaches tprof, not the job, which runs in a group of its own:
/// the job gets the one tprof passes on.
#[test]
fn sigint_to_the_process_group_reaches_the_job_once() {
    let mut job = Job::record("graceful", &[]);
    let tprof_group = job.tprof.pid();
    assert_ne!(job.group(), tprof_group, "the job shares tprof's group");
    assert_eq!(job.group(), job.parent(), "the job leads its own group");
    job.tprof.note_child_groups();
    signal(-tprof_group, libc::SIGINT);
    let ended = job.finish();
    assert_complete(&ended.finished, &ended.report, "interrupted");
    assert_eq!(
        ended.report["command_exit"]["code"], 3,
        "{:#}",
        ended.report
    );
    assert_eq!(ended.signals, Some(1), "stop signals that reached the job");
}

/// Two SIGINTs 50 ms apart are one request delivered twice: the recording
/// finishes (no "stopped at once", exit 0, a footer) and the job is told
/// once.
#[test]
fn two_sigints_50ms_apart_finish_the_recording() {
    let mut job = Job::record("graceful", &[]);
    job.tprof.signal(libc::SIGINT);
    thread::sleep(Duration::from_millis(50));
    job.tprof.signal(libc::SIGINT);
    let ended = job.finish();
    assert_complete(&ended.finished, &ended.report, "interrupted");
    assert_eq!(
        ended.report["command_exit"]["code"], 3,
        "{:#}",
        ended.report
    );
    assert_eq!(ended.signals, Some(1), "stop signals that reached the job");
}

/// `timeout -s INT` signals tprof, then its own process group (tprof again)
/// at once.
#[test]
fn timeout_s_int_stops_tprof_and_the_command() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let truth = dir.path().join("truth.jsonl");
    let family = build_workload("family");
    let record = record_command(
        &recording,
        QUIET,
        &[family.to_str().unwrap(), "60", "graceful"],
    );
    let mut timeout = Command::new("timeout");
    timeout
        .args(["-s", "INT", "--preserve-status", "4"])
        .arg(record.get_program())
        .args(record.get_args())
        .env("TPROF_TRUTH_FILE", &truth);
    let mut running = Running::spawn(&mut timeout);
    running.wait_for_stderr("recording", Duration::from_secs(30));
    let pids = KillOnDrop(wait_for_family(&truth));
    let finished = running.wait(Duration::from_mins(1));
    let report = report_json(&recording);
    assert_complete(&finished, &report, "interrupted");
    assert_eq!(report["command_exit"]["code"], 3, "{report:#}");
    assert_eq!(signals_got(&truth), 1);
    assert_gone(&pids.0);
}

/// A job that ignores SIGINT is killed once `--kill-after` has passed, and
/// the recording still ends complete.
#[test]
fn stubborn_command_is_killed_after_the_grace_period() {
    let mut job = Job::record("stubborn", &["--kill-after", "1s"]);
    job.tprof.signal(libc::SIGINT);
    job.tprof
        .wait_for_stderr("SIGKILL after 1 s", Duration::from_secs(10));
    let ended = job.finish();
    assert_complete(&ended.finished, &ended.report, "interrupted");
    let exit = &ended.report["command_exit"];
    assert_eq!(exit["signal"], "SIGKILL", "{exit:#}");
    assert_eq!(exit["killed"], true, "{exit:#}");
    assert!(
        ended
            .text
            .contains("ended by SIGKILL (tprof sent SIGINT to stop it, then SIGKILL"),
        "{}",
        ended.text
    );
}

/// `--duration` stops a launched command too (SIGTERM).
#[test]
fn duration_stops_the_command() {
    let job = Job::record("default", &["-d", "2s"]);
    let ended = job.finish();
    assert_complete(&ended.finished, &ended.report, "duration");
    assert_eq!(
        ended.report["command_exit"]["signal"], "SIGTERM",
        "{:#}",
        ended.report
    );
}

/// `-p`: tprof detaches and the target keeps running.
#[test]
fn attached_targets_are_left_running() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let truth = dir.path().join("truth.jsonl");
    let family = build_workload("family");
    let mut target = Command::new(&family);
    target
        .args(["60", "default"])
        .env("TPROF_TRUTH_FILE", &truth);
    let target = Running::spawn(&mut target);
    let pids = KillOnDrop(wait_for_family(&truth));
    let recording = dir.path().join("recording.tprof");
    let parent = target.pid().to_string();
    let mut args = vec!["-p", parent.as_str()];
    args.extend_from_slice(QUIET);
    let mut tprof = Running::spawn(&mut record_command(&recording, &args, &[]));
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
    tprof.signal(libc::SIGINT);
    let finished = tprof.wait(Duration::from_mins(1));
    let report = report_json(&recording);
    assert_complete(&finished, &report, "interrupted");
    assert_eq!(report["command_exit"], Value::Null, "{report:#}");
    for &pid in &pids.0 {
        assert!(alive(pid), "tprof stopped target process {pid}");
    }
    drop(target);
}

/// `kill -9` gives tprof no chance to stop the command; the kernel sends it
/// SIGKILL (PR_SET_PDEATHSIG). Its children are not signalled: a real
/// DataLoader's workers see their parent gone and exit by themselves, this
/// job's do not, and the test kills them.
#[test]
fn kill_9_takes_the_command_with_it() {
    let mut job = Job::record("default", &[]);
    job.tprof.signal(libc::SIGKILL);
    let parent = job.parent();
    let finished = job.tprof.wait(Duration::from_secs(10));
    assert_eq!(
        finished.status.signal(),
        Some(libc::SIGKILL),
        "{finished:#?}"
    );
    assert_gone(&[parent]);
}

/// `tprof record -o REC QUIET EXTRA -- family 60 MODE`, recording, with
/// the family's pids known.
struct Job {
    tprof: Running,
    recording: PathBuf,
    truth: PathBuf,
    /// The family's processes: parent, workers, helper.
    pids: KillOnDrop,
    /// The family's ground truth lines.
    lines: Vec<Value>,
    _dir: TempDir,
}

impl Job {
    fn record(mode: &str, extra: &[&str]) -> Job {
        require_root();
        let dir = tempfile::tempdir().expect("create temp dir");
        let recording = dir.path().join("recording.tprof");
        let truth = dir.path().join("truth.jsonl");
        let family = build_workload("family");
        let mut args = QUIET.to_vec();
        args.extend_from_slice(extra);
        let mut command =
            record_command(&recording, &args, &[family.to_str().unwrap(), "60", mode]);
        command.env("TPROF_TRUTH_FILE", &truth);
        let mut tprof = Running::spawn(&mut command);
        tprof.wait_for_stderr("recording", Duration::from_secs(30));
        let pids = wait_for_family(&truth);
        let lines = read_lines(&truth);
        Job {
            tprof,
            recording,
            truth,
            pids: KillOnDrop(pids),
            lines,
            _dir: dir,
        }
    }

    fn parent(&self) -> i32 {
        role_pid(&self.lines, "parent")
    }

    fn group(&self) -> i32 {
        let parent = self.lines.iter().find(|l| l["role"] == "parent");
        parent
            .and_then(|l| l["pgid"].as_i64())
            .expect("parent's pgid") as i32
    }

    /// Waits for tprof to exit; checks the whole family is gone.
    fn finish(self) -> Ended {
        let finished = self.tprof.wait(Duration::from_mins(1));
        let report = report_json(&self.recording);
        let text = tprof_tests::tprof()
            .arg("report")
            .arg(&self.recording)
            .output()
            .expect("run tprof report");
        assert_gone(&self.pids.0);
        let signals = read_lines(&self.truth)
            .iter()
            .find(|l| l["role"] == "exit")
            .and_then(|l| l["signals"].as_i64());
        Ended {
            finished,
            report,
            text: String::from_utf8_lossy(&text.stdout).into_owned(),
            signals,
        }
    }
}

/// How a [`Job`] ended.
struct Ended {
    finished: Finished,
    /// `tprof report --json`.
    report: Value,
    /// `tprof report`.
    text: String,
    /// The stop signals the graceful job counted (None in other modes).
    signals: Option<i64>,
}

/// Kills these processes when dropped: whatever a failed test (or tprof's
/// `kill -9`) left running.
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Exit 0, not stopped at once, the recording complete with this reason.
fn assert_complete(finished: &Finished, report: &Value, stop_reason: &str) {
    assert!(
        finished.status.success(),
        "tprof did not exit 0: {finished:#?}"
    );
    assert!(
        !finished.stderr.contains("stopped at once") && !finished.stderr.contains("panicked"),
        "{finished:#?}"
    );
    assert_eq!(report["cut_short"], false, "{report:#}");
    assert_eq!(report["stop_reason"], stop_reason, "{report:#}");
}

/// The pids of the family once all four have announced themselves.
fn wait_for_family(truth: &Path) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines = read_lines(truth);
        let pids: Vec<i32> = lines
            .iter()
            .filter(|l| l["role"] != "exit")
            .filter_map(|l| l["pid"].as_i64())
            .map(|p| p as i32)
            .collect();
        if pids.len() == 4 {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "the family did not announce all four processes: {lines:#?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn read_lines(truth: &Path) -> Vec<Value> {
    std::fs::read_to_string(truth)
        .map(|text| parse_json_lines(&text))
        .unwrap_or_default()
}

fn role_pid(lines: &[Value], role: &str) -> i32 {
    lines
        .iter()
        .find(|l| l["role"] == role)
        .and_then(|l| l["pid"].as_i64())
        .unwrap_or_else(|| panic!("no {role} in {lines:#?}")) as i32
}

/// The stop signals the graceful parent counted, from its exit line.
fn signals_got(truth: &Path) -> i64 {
    let lines = read_lines(truth);
    lines
        .iter()
        .find(|l| l["role"] == "exit")
        .and_then(|l| l["signals"].as_i64())
        .unwrap_or_else(|| panic!("the job printed no exit line: {lines:#?}"))
}

/// Each process is gone (or a zombie nobody reaped yet) within 5 s.
fn assert_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
    assert!(
        left.is_empty(),
        "processes of the job outlived tprof: {left:?}"
    );
}

/// Running or sleeping, not exited (a zombie has exited).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

//! Failures a user will meet: each must end in a non-zero exit and a
//! one-line "error: ..." on stderr, never a panic or a backtrace.

use std::os::unix::process::CommandExt as _;
use std::process::Output;
use std::time::Duration;

use tprof_tests::{Running, build_workload, record_cmd, record_command, require_root, show, tprof};

/// The overflow user and group on Debian.
const NOBODY: u32 = 65534;

#[test]
fn no_such_pid() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let out = record_cmd(
        &dir.path().join("recording.tprof"),
        &["-p", "999999999", "-d", "1s"],
        &[],
    );
    assert_clean_error(&out);
    assert!(
        stderr(&out).contains("999999999"),
        "the error should name the pid: {}",
        show(&out)
    );
}

/// Without root tprof cannot load its programs; it must say root is needed
/// rather than pass on the kernel's EPERM.
#[test]
fn not_root() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let sleeper = build_workload("sleeper");
    let mut cmd = record_command(
        &dir.path().join("recording.tprof"),
        &[],
        &[sleeper.to_str().unwrap(), "0.1"],
    );
    cmd.uid(NOBODY).gid(NOBODY);
    let out = Running::spawn(&mut cmd)
        .wait(Duration::from_secs(30))
        .into_output();
    assert_clean_error(&out);
    assert!(
        stderr(&out).to_lowercase().contains("root"),
        "the error should say root is needed: {}",
        show(&out)
    );
}

#[test]
fn report_missing_file() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let missing = dir.path().join("no-such-recording.tprof");
    let out = tprof()
        .arg("report")
        .arg(&missing)
        .output()
        .expect("run tprof");
    assert_clean_error(&out);
    assert!(
        stderr(&out).contains("no-such-recording.tprof"),
        "the error should name the file: {}",
        show(&out)
    );
}

#[test]
fn report_corrupt_file() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let corrupt = dir.path().join("corrupt.tprof");
    std::fs::write(&corrupt, noise(64 * 1024)).expect("write corrupt file");
    let out = tprof()
        .arg("report")
        .arg(&corrupt)
        .output()
        .expect("run tprof");
    assert_clean_error(&out);
}

/// A recording cut off mid-write (tprof killed, disk full) still reports
/// what it holds, and says it was cut short.
#[test]
fn report_truncated_recording() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let busy = build_workload("busy_threads");
    let out = record_cmd(&recording, &[], &[busy.to_str().unwrap(), "4", "0.5"]);
    assert!(out.status.success(), "tprof record failed: {}", show(&out));
    truncate_to_half(&recording);

    let out = tprof()
        .arg("report")
        .arg(&recording)
        .output()
        .expect("run tprof");
    assert!(
        out.status.success(),
        "report of a truncated recording failed: {}",
        show(&out)
    );
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out)).to_lowercase();
    assert!(
        text.contains("cut short") || text.contains("truncated"),
        "the report should say the recording was cut short: {}",
        show(&out)
    );
}

fn truncate_to_half(path: &std::path::Path) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open recording");
    let len = file.metadata().expect("stat recording").len();
    file.set_len(len / 2).expect("truncate recording");
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Non-zero exit, an "error: " line, and no panic.
fn assert_clean_error(out: &Output) {
    let err = stderr(out);
    assert!(!out.status.success(), "expected a failure: {}", show(out));
    assert!(
        err.lines().any(|l| l.starts_with("error: ")),
        "expected a line starting with \"error: \" on stderr: {}",
        show(out)
    );
    assert!(!err.contains("panicked"), "tprof panicked: {}", show(out));
}

/// Deterministic pseudo-random bytes (xorshift64), so a failure reproduces.
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

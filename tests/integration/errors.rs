//! Failures a user will meet: each must end in a non-zero exit and a
//! one-line "error: ..." on stderr, never a panic or a backtrace. Targets
//! tprof cannot trace, missing privileges, and a system without tracefs or a
//! tracepoint (made for real in a private mount namespace, so the machine
//! itself is untouched).

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tprof_tests::{
    Running, build_workload, record_cmd, record_command, report_json, require_root, show, tprof,
    tprof_bin,
};

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

#[test]
fn kernel_thread() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    // kthreadd is pid 2 on every Linux.
    let out = record_cmd(&recording, &["-p", "2", "-d", "1s"], &[]);
    assert_clean_error(&out);
    assert!(stderr(&out).contains("kernel thread"), "{}", show(&out));
    assert!(!recording.exists(), "a refused target left a file");
}

/// A path that is not UTF-8 (Linux allows any bytes but `/` and NUL) is
/// an argument like any other: a missing file, one clean error line.
#[test]
fn a_path_that_is_not_utf8_is_no_panic() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().expect("create temp dir");
    let path = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"run-\xff.tprof"));
    let out = tprof()
        .arg("report")
        .arg(&path)
        .output()
        .expect("run tprof report");
    assert_clean_error(&out);
}

/// `-p` with tprof's own pid: a shell execs tprof with its own `$$`.
#[test]
fn tprof_itself() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let script = format!(
        "exec '{}' record -p $$ -d 1s -o '{}'",
        tprof_bin().display(),
        recording.display()
    );
    let out = Running::spawn(Command::new("sh").args(["-c", &script]))
        .wait(Duration::from_secs(30))
        .into_output();
    assert_clean_error(&out);
    assert!(stderr(&out).contains("tprof itself"), "{}", show(&out));
}

/// A process that has exited but was not reaped yet: the test spawns one
/// and does not wait for it.
#[test]
fn zombie() {
    require_root();
    let mut child = Command::new("true").spawn().expect("run true");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of(pid) != Some('Z') {
        assert!(Instant::now() < deadline, "{pid} never became a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
    let dir = tempfile::tempdir().expect("create temp dir");
    let out = record_cmd(
        &dir.path().join("recording.tprof"),
        &["-p", &pid.to_string(), "-d", "1s"],
        &[],
    );
    child.wait().expect("reap the zombie");
    assert_clean_error(&out);
    assert!(stderr(&out).contains("zombie"), "{}", show(&out));
}

/// A target that exits while tprof attaches (on a busy machine the kernel
/// can hold an attach for seconds; `TPROF_ATTACH_DELAY_MS` plays that):
/// one error naming it and the slow attach, no recording left, and
/// `tprof top` the same, not an empty recording or an empty view.
#[test]
fn target_that_exits_while_attaching() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let delay = [("TPROF_ATTACH_DELAY_MS", "2500")];
    let runs: [(&str, &[&str]); 2] = [
        (
            "record",
            &["-o", recording.to_str().expect("utf-8"), "-d", "5s"],
        ),
        ("top", &["--batch", "-n", "3"]),
    ];
    for (verb, args) in runs {
        let mut target = Command::new("sleep").arg("1").spawn().expect("run sleep");
        let pid = target.id().to_string();
        let mut command = tprof();
        command.arg(verb).args(["-p", &pid]).args(args).envs(delay);
        let out = Running::spawn(&mut command)
            .wait(Duration::from_mins(1))
            .into_output();
        target.wait().expect("reap sleep");
        assert_clean_error(&out);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("process {pid} exited while tprof was attaching"))
                && err.contains("attaching took 2."),
            "tprof {verb}: {}",
            show(&out)
        );
        assert!(!recording.exists(), "tprof {verb} left {recording:?}");
    }
}

fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A command that cannot run: one error line, and no empty recording left
/// to make the next run's -o refuse the path.
#[test]
fn command_not_found_leaves_no_file() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let out = record_cmd(&recording, &[], &["no-such-command-tprof-test"]);
    assert_clean_error(&out);
    assert!(stderr(&out).contains("command not found"), "{}", show(&out));
    assert!(!recording.exists(), "a failed start left {recording:?}");
}

/// Root whose capabilities were dropped (as in a container): the error
/// names the capabilities, not the kernel's EPERM.
#[test]
fn root_without_capabilities() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let mut cmd = Command::new("setpriv");
    cmd.arg("--bounding-set=-all")
        .arg(tprof_bin())
        .args(["record", "-o"])
        .arg(&recording)
        .args(["--", "true"]);
    let out = Running::spawn(&mut cmd)
        .wait(Duration::from_secs(30))
        .into_output();
    assert_clean_error(&out);
    assert!(stderr(&out).contains("CAP_BPF"), "{}", show(&out));
}

/// Runs `SETUP` then tprof record in a private mount namespace (unshare
/// -m makes its mounts private), so whatever the setup hides or mounts is
/// gone with the namespace.
fn record_in_namespace(setup: &str, recording: &Path) -> Output {
    let sleeper = build_workload("sleeper");
    let script = format!(
        "{setup} && exec '{}' record --no-report -o '{}' -- '{}' 0.2",
        tprof_bin().display(),
        recording.display(),
        sleeper.display()
    );
    Running::spawn(Command::new("unshare").args(["-m", "sh", "-c", &script]))
        .wait(Duration::from_mins(1))
        .into_output()
}

/// tracefs not mounted (a fresh machine): tprof mounts it and records.
#[test]
fn tracefs_not_mounted_is_mounted() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let setup = "(umount /sys/kernel/tracing 2>/dev/null; true) && \
                 ! test -d /sys/kernel/tracing/events";
    let out = record_in_namespace(setup, &recording);
    assert!(out.status.success(), "{}", show(&out));
    report_json(&recording);
}

/// No place to mount tracefs (/sys/kernel hidden under an empty,
/// read-only tmpfs): one line naming tracefs and the mount command.
#[test]
fn tracefs_unavailable() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let out = record_in_namespace("mount -t tmpfs -o ro none /sys/kernel", &recording);
    assert_clean_error(&out);
    let err = stderr(&out);
    assert!(err.contains("tracefs"), "{}", show(&out));
    assert!(err.contains("mount -t tracefs"), "{}", show(&out));
}

/// A kernel without a tracepoint tprof needs (its tracefs directory
/// hidden): the error names the tracepoint.
#[test]
fn missing_tracepoint() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let out = record_in_namespace(
        "mount -t tmpfs none /sys/kernel/tracing/events/sched",
        &recording,
    );
    assert_clean_error(&out);
    assert!(
        stderr(&out).contains("sched/sched_switch"),
        "{}",
        show(&out)
    );
}

/// Without kernel BTF tprof still records: the scheduler programs and the
/// block completion's fall back from raw tracepoints (task_struct and
/// request offsets from BTF) to classic ones, and every other program is a classic tracepoint, a perf event or a uprobe
/// with offsets read from tracefs, so none needs BTF.
#[test]
fn no_btf_is_fine() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let out = record_in_namespace(
        "mount -t tmpfs none /sys/kernel/btf && ! test -e /sys/kernel/btf/vmlinux",
        &recording,
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(report_json(&recording)["events"].as_u64().unwrap_or(0) > 0);
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

/// A device is not a recording: reading /dev/zero would never end.
#[test]
fn report_of_a_device() {
    require_root();
    let out = Running::spawn(tprof().args(["report", "/dev/zero"]))
        .wait(Duration::from_secs(30))
        .into_output();
    assert_clean_error(&out);
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        show(&out)
    );
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

//! Running the `tprof` binary under test.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::process::{Finished, Running, pids, wait_until_none};
use crate::report::Report;
use crate::workload::{build_workload, read_truth_file, workspace_root};

/// Far beyond any test workload's run time; only a hung tprof reaches it.
const RECORD_TIMEOUT: Duration = Duration::from_mins(2);

/// `$TPROF_BIN` (set by `cargo xtask test`), else target/debug/tprof;
/// returned once the release helpers of earlier runs have exited: each
/// holds its tprof's links (uprobes included: a probed function keeps its
/// breakpoint) until the kernel has detached them, and a test's ground
/// truth must be its own tprof's doing (`cuda_copies` waits for the
/// breakpoints its tprof sets).
pub fn tprof_bin() -> PathBuf {
    wait_for_release_helpers();
    let path = std::env::var_os("TPROF_BIN").map_or_else(
        || workspace_root().join("target/debug/tprof"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "tprof binary not found at {}: build it first: cargo build -p profiler",
        path.display()
    );
    path
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "integration tests need root (they load eBPF programs); run `sudo cargo xtask test`"
    );
}

pub fn tprof() -> Command {
    Command::new(tprof_bin())
}

/// How long an earlier tprof's release helper may take: the kernel's grace
/// periods, seconds on a busy machine.
const HELPER_GRACE: Duration = Duration::from_secs(30);

/// Waits until no `tprof __release-links` runs. Called before a test's
/// job loads a library that tprof probes, too (`fake_cudart`,
/// `real_cudart`): a job that waits for its functions' breakpoints must
/// not find an earlier tprof's still there.
pub fn wait_for_release_helpers() {
    wait_until_none(HELPER_GRACE, "release helpers still run", release_helpers);
}

/// Running `tprof __release-links` processes (which init reaps).
pub fn release_helpers() -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(b"__release-links"))
        })
        .collect()
}

/// `tprof record -o OUT [EXTRA...] -- CMD...` (no `--` when CMD is empty,
/// for `-p PID` recordings).
pub fn record_command(out: &Path, extra_args: &[&str], cmd: &[&str]) -> Command {
    let mut command = tprof();
    command.arg("record").arg("-o").arg(out).args(extra_args);
    if !cmd.is_empty() {
        command.arg("--").args(cmd);
    }
    command
}

pub fn record_cmd(out: &Path, extra_args: &[&str], cmd: &[&str]) -> Output {
    Running::spawn(&mut record_command(out, extra_args, cmd))
        .wait(RECORD_TIMEOUT)
        .into_output()
}

/// `tprof report PATH --json`, which must succeed and print one JSON value.
pub fn report_json(path: &Path) -> Value {
    let out = tprof()
        .arg("report")
        .arg(path)
        .arg("--json")
        .output()
        .expect("run tprof report");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tprof report --json failed ({}):\n{stderr}",
        out.status
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        let stdout = String::from_utf8_lossy(&out.stdout);
        panic!("tprof report --json printed invalid JSON ({e}):\n{stdout}\nstderr:\n{stderr}")
    })
}

/// A workload recorded by tprof from start to finish, with its report and
/// the ground truth it wrote.
pub struct Traced {
    pub record: Finished,
    pub report: Report,
    pub truth: Vec<Value>,
    pub recording: PathBuf,
    /// Holds the recording and truth file until the test ends.
    pub dir: TempDir,
}

/// Builds workload `name`, runs `tprof record -- name ARGS...` with the
/// workload writing its ground truth to a file, and reads the report.
pub fn trace_workload(name: &str, args: &[&str]) -> Traced {
    trace_workload_with(name, &[], args)
}

/// [`trace_workload`] with extra `tprof record` options (`--hz 199`).
pub fn trace_workload_with(name: &str, record_args: &[&str], args: &[&str]) -> Traced {
    trace_workload_env(name, record_args, args, &[])
}

/// [`trace_workload_with`] with extra environment for tprof and the
/// workload it launches.
pub fn trace_workload_env(
    name: &str,
    record_args: &[&str],
    args: &[&str],
    env: &[(&str, &OsStr)],
) -> Traced {
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let truth_file = dir.path().join("truth.jsonl");
    let binary = build_workload(name);
    let mut cmd: Vec<&str> = vec![binary.to_str().expect("utf-8 path")];
    cmd.extend_from_slice(args);
    let mut command = record_command(&recording, record_args, &cmd);
    command.env("TPROF_TRUTH_FILE", &truth_file);
    command.envs(env.iter().copied());
    let record = Running::spawn(&mut command).wait(RECORD_TIMEOUT);
    assert!(record.status.success(), "tprof record failed: {record:#?}");
    let report = Report::from_json(report_json(&recording));
    let truth = read_truth_file(&truth_file);
    Traced {
        record,
        report,
        truth,
        recording,
        dir,
    }
}

/// `tprof flamegraph PATH --folded EXTRA...`, which must succeed: the
/// folded stacks as (stack, count) pairs. Of the whole recording, which is
/// what the tests' ground truth covers, unless EXTRA chooses a part
/// (`--phase`, `--steps`, `--slowest`): a recording with steps defaults to
/// their steady state.
pub fn flamegraph_folded(path: &Path, extra_args: &[&str]) -> Vec<(String, u64)> {
    let chooses = extra_args
        .iter()
        .any(|a| matches!(*a, "--phase" | "--steps" | "--slowest"));
    let out = tprof()
        .arg("flamegraph")
        .arg(path)
        .arg("--folded")
        .args(extra_args)
        .args(if chooses {
            &[][..]
        } else {
            &["--phase", "all"][..]
        })
        .output()
        .expect("run tprof flamegraph");
    assert!(
        out.status.success(),
        "tprof flamegraph --folded failed: {}",
        crate::show(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let (stack, count) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("folded line without a count: {line:?}"));
            let count = count
                .parse()
                .unwrap_or_else(|_| panic!("folded line with a bad count: {line:?}"));
            (stack.to_string(), count)
        })
        .collect()
}

/// Every loaded BPF program as (id, name). bpftool takes full names from
/// BTF; the kernel's own copy keeps the first 15 bytes, prefix intact.
pub fn bpf_programs() -> Vec<(u32, String)> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("run bpftool (install it with `cargo xtask setup`)");
    assert!(out.status.success(), "bpftool prog show failed: {out:?}");
    let progs: Vec<Value> = serde_json::from_slice(&out.stdout).expect("bpftool -j prints JSON");
    progs
        .iter()
        .filter_map(|p| {
            let id = p["id"].as_u64()? as u32;
            Some((id, p["name"].as_str().unwrap_or_default().to_owned()))
        })
        .collect()
}

/// Closing the last fd of a program frees it, but the kernel may finish
/// that a moment after the process is gone; and tprof leaves closing its
/// links to its release helper, which outlives it by the kernel's grace
/// periods (a second or two on a busy machine; the 5 s a test holds it).
const UNLOAD_GRACE: Duration = Duration::from_secs(10);

/// Panics unless every program in `ids` is unloaded (within a short grace).
pub fn assert_programs_unloaded(ids: &[u32]) {
    wait_until_none(UNLOAD_GRACE, "BPF programs left loaded", || {
        bpf_programs()
            .into_iter()
            .filter(|(id, _)| ids.contains(id))
            .collect()
    });
}

/// Ids of the BPF programs process `pid` holds through program or link
/// file descriptors (from /proc/PID/fdinfo), so a test can check exactly
/// its own tprof's programs even while another tprof runs.
pub fn bpf_program_ids_held_by(pid: i32) -> Vec<u32> {
    let dir = format!("/proc/{pid}/fdinfo");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {dir}: {e}"));
    let mut ids: Vec<u32> = entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|info| info.lines().filter_map(prog_id).collect::<Vec<_>>())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn prog_id(fdinfo_line: &str) -> Option<u32> {
    fdinfo_line.strip_prefix("prog_id:")?.trim().parse().ok()
}

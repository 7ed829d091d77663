//! No eBPF program outlives tprof: not when the command ends, not when
//! tprof is interrupted. Our kernel programs are all named `tprof_*` (the
//! kernel keeps the first 15 bytes of a name, which keeps the prefix).
//!
//! These tests assume no other tprof runs on the machine meanwhile.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use tprof_tests::{
    Running, bpf_program_names, build_workload, record_cmd, record_command, report_json,
    require_root, show,
};

/// Closing the last fd of a program frees it, but the kernel may finish
/// that a moment after the process is gone.
const UNLOAD_GRACE: Duration = Duration::from_secs(2);

#[test]
fn no_programs_left_after_exit() {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let sleeper = build_workload("sleeper");
    let out = record_cmd(&recording, &[], &[sleeper.to_str().unwrap(), "0.2"]);
    assert!(out.status.success(), "tprof record failed: {}", show(&out));
    assert_no_programs_left();
    report_json(&recording);
}

#[test]
fn no_programs_left_after_sigint() {
    stop_with_signal(libc::SIGINT);
}

#[test]
fn no_programs_left_after_sigterm() {
    stop_with_signal(libc::SIGTERM);
}

/// Interrupts a recording of a 5 s sleeper: tprof must stop promptly on its
/// own (not die from the signal), unload everything, and leave a readable
/// recording.
fn stop_with_signal(sig: i32) {
    require_root();
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let sleeper = build_workload("sleeper");
    let mut tprof = Running::spawn(&mut record_command(
        &recording,
        &[],
        &[sleeper.to_str().unwrap(), "5"],
    ));
    tprof.wait_for_stderr("recording", Duration::from_secs(30));
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
    assert_no_programs_left();
    assert_readable(&recording);
}

fn assert_readable(recording: &Path) {
    assert!(
        recording.is_file(),
        "no recording at {}",
        recording.display()
    );
    report_json(recording);
}

fn assert_no_programs_left() {
    let deadline = Instant::now() + UNLOAD_GRACE;
    loop {
        let left: Vec<String> = bpf_program_names()
            .into_iter()
            .filter(|name| name.starts_with("tprof_"))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "BPF programs left loaded: {left:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

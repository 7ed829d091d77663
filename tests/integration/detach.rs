//! No eBPF program outlives tprof: not when the command ends, not when
//! tprof is interrupted. While tprof records, the tests note the programs
//! it holds (all named `tprof_*`), and check afterwards that none of them
//! is still loaded. Going by program id rather than by name keeps the tests
//! right while another tprof runs on the machine.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use tprof_tests::{
    Running, bpf_program_ids_held_by, bpf_programs, build_workload, record_command, report_json,
    require_root,
};

/// Closing the last fd of a program frees it, but the kernel may finish
/// that a moment after the process is gone.
const UNLOAD_GRACE: Duration = Duration::from_secs(2);

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
    let deadline = Instant::now() + UNLOAD_GRACE;
    loop {
        let left: Vec<(u32, String)> = bpf_programs()
            .into_iter()
            .filter(|(id, _)| ours.contains(id))
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

fn assert_readable(recording: &Path) {
    assert!(
        recording.is_file(),
        "no recording at {}",
        recording.display()
    );
    report_json(recording);
}

//! Scheduler accounting: tprof's per-thread on-CPU, runnable and blocked
//! times against the kernel's schedstat for the same threads.

use std::ffi::OsStr;

use serde_json::Value;
use tprof_tests::{Thread, Traced, close_to, require_root, trace_workload, trace_workload_env};

/// Twice as many spinning threads as cores: each should spend about half
/// its life on a CPU and half runnable, and tprof's split must match the
/// kernel's.
#[test]
fn busy_threads_split_cpu_and_runnable() {
    require_root();
    let traced = trace_busy_threads(&[]);
    assert!(
        !traced.record.stderr.contains("classic scheduler"),
        "no raw scheduler program should be refused here: {}",
        traced.record.stderr
    );
    assert_busy_threads_split(&traced);
}

/// The classic sched_switch/sched_waking programs (kernels without BTF or
/// before 5.18) account the same times as the raw ones.
#[test]
fn classic_sched_programs_match_schedstat() {
    require_root();
    let traced = trace_busy_threads(&[("TPROF_CLASSIC_SCHED", OsStr::new("1"))]);
    assert_busy_threads_split(&traced);
}

/// A verifier that refuses one raw scheduler program (here the second,
/// after the first has loaded) gets the classic set instead, says so, and
/// the recording is as right as ever.
#[test]
fn refused_raw_program_falls_back_to_classic() {
    require_root();
    let traced = trace_busy_threads(&[("TPROF_REFUSE_RAW_SCHED", OsStr::new("tprof_waking_r"))]);
    let stderr = &traced.record.stderr;
    assert!(
        stderr.contains("tprof_waking_r") && stderr.contains("classic scheduler tracepoints"),
        "the fallback should be reported: {stderr}"
    );
    assert_busy_threads_split(&traced);
}

/// Twice as many spinning threads as cores.
fn busy_thread_count() -> usize {
    2 * std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
}

/// busy_threads with [`busy_thread_count`] threads, for 1.5 s.
fn trace_busy_threads(env: &[(&str, &OsStr)]) -> Traced {
    let threads = busy_thread_count().to_string();
    trace_workload_env("busy_threads", &[], &[&threads, "1.5"], env)
}

fn assert_busy_threads_split(traced: &Traced) {
    let threads = busy_thread_count();
    assert_eq!(
        traced.truth.len(),
        threads,
        "ground truth: {:#?}",
        traced.truth
    );
    for truth in &traced.truth {
        let thread = traced.report.thread(tid(truth));
        assert_eq!(thread.comm, truth["name"].as_str().unwrap(), "{thread:#?}");
        assert_matches_schedstat(thread, truth);
        assert_accounts_for_lifetime(thread);
        assert_competed(thread);
    }
}

/// A thread that sleeps 1 s is blocked, interruptibly, nearly all its life.
#[test]
fn sleeper_is_blocked() {
    require_root();
    let traced = trace_workload("sleeper", &["1"]);
    let truth = traced
        .truth
        .iter()
        .find(|t| t["name"] == "sleeper")
        .expect("the sleeper reports its tid");
    let thread = traced.report.thread(tid(truth));
    assert_eq!(thread.comm, "sleeper", "{thread:#?}");
    assert!(
        thread.blocked_interruptible_s / thread.lifetime_s > 0.97,
        "the sleeper should be blocked (interruptible) over 97% of its life: {thread:#?}"
    );
    assert!(
        thread.on_cpu_s < 0.01,
        "the sleeper barely runs: {thread:#?}"
    );
    assert_accounts_for_lifetime(thread);
}

fn tid(truth: &Value) -> i64 {
    truth["tid"].as_i64().expect("ground truth has a tid")
}

fn secs(truth: &Value, key: &str) -> f64 {
    let ns = truth[key]
        .as_u64()
        .unwrap_or_else(|| panic!("ground truth lacks {key}: {truth}"));
    ns as f64 / 1e9
}

/// Sharing the cores evenly puts each thread near 50/50; the bounds leave
/// room for tprof's own CPU use and uneven scheduling (but not for another
/// CPU-heavy job on the machine, such as a parallel build).
fn assert_competed(thread: &Thread) {
    let life = thread.lifetime_s;
    for (what, value) in [
        ("on_cpu_s", thread.on_cpu_s),
        ("runnable_s", thread.runnable_s),
    ] {
        assert!(
            (0.30 * life..=0.70 * life).contains(&value),
            "{what} should be 30-70% of the lifetime with threads competing: {thread:#?}"
        );
    }
}

/// Compares with the ABSOLUTE schedstat values read at the thread's end:
/// the thread was created inside the recording window, so its whole life,
/// from the fork on, is covered and schedstat started from zero. (Only the
/// JSON line the thread writes after its last read is missing, well within
/// the 5 ms floor.)
fn assert_matches_schedstat(thread: &Thread, truth: &Value) {
    let on_cpu = secs(truth, "end_on_cpu_ns");
    let run_delay = secs(truth, "end_run_delay_ns");
    assert!(
        close_to(thread.on_cpu_s, on_cpu, 0.03, 0.005),
        "on_cpu_s {} vs schedstat {on_cpu}: {thread:#?}\n{truth}",
        thread.on_cpu_s
    );
    assert!(
        close_to(thread.runnable_s, run_delay, 0.03, 0.005),
        "runnable_s {} vs schedstat run delay {run_delay}: {thread:#?}\n{truth}",
        thread.runnable_s
    );
}

/// Every moment of a thread's life is in exactly one state.
fn assert_accounts_for_lifetime(thread: &Thread) {
    let sum = thread.on_cpu_s + thread.runnable_s + thread.blocked_s;
    assert!(
        close_to(sum, thread.lifetime_s, 0.01, 0.0),
        "on-CPU + runnable + blocked = {sum}, lifetime {}: {thread:#?}",
        thread.lifetime_s
    );
}

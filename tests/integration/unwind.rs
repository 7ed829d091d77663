//! Whole user stacks of code built as distributions and wheels build it
//! (`-O2 -fomit-frame-pointer`): `tests/workloads/unwind_chains.c`, whose
//! call chains are known by construction, recorded with the kernel copying
//! stacks and tprof unwinding them with the binaries' CFI; and, as the
//! negative control, with frame-pointer walks, which miss the same frames.

use std::ffi::OsStr;

use serde_json::Value;
use tprof_tests::{
    Traced, close_to, flamegraph_folded, require_root, trace_workload_env, trace_workload_with,
};

/// Every on-CPU chain is whole, from the thread's root to the hot leaf;
/// the sleep is under its chain; the rbp sentinel is never a frame; the
/// 300-deep recursion is marked truncated; and the report says so.
#[test]
fn whole_chains_without_frame_pointers() {
    require_root();
    let traced = trace_workload_with("unwind_chains", &["--hz", "999"], &["5"]);
    let done = truth(&traced);
    let cpu = flamegraph_folded(&traced.recording, &["--kind", "cpu"]);

    let main_root = |frames: &[&str]| frames.first() == Some(&"_start");
    for (leaf, chain, root) in [
        ("cpu_leaf", &["main", "cpu_mid", "cpu_leaf"][..], Root::Main),
        (
            "clobber_leaf",
            &["main", "clobber_mid", "clobber_leaf"],
            Root::Main,
        ),
        (
            "worker_leaf",
            &["worker_main", "worker_mid", "worker_leaf"],
            Root::Thread,
        ),
    ] {
        let (whole, total) = whole_share(&cpu, leaf, chain, root);
        eprintln!("{leaf}: {whole} of {total} samples carry the whole chain");
        assert!(
            total >= 100,
            "too few samples in {leaf} ({total}): {cpu:#?}"
        );
        assert!(
            whole * 100 >= total * 99,
            "{leaf}: only {whole} of {total} samples have the chain {chain:?} to the \
             thread's root: {cpu:#?}"
        );
    }

    // The sentinel rbp held inside clobber_leaf is data, never a frame.
    let off = flamegraph_folded(&traced.recording, &["--kind", "offcpu"]);
    for (stack, _) in cpu.iter().chain(&off) {
        assert!(
            !stack.to_ascii_lowercase().contains("5ec0ffee"),
            "the rbp sentinel became a frame: {stack}"
        );
    }

    // 301 frames of deep(), 256 bytes each: past the largest copy, so cut,
    // and marked at the outer end.
    let in_deep = weight_where(&cpu, |s| has_frame(s, "deep_leaf"));
    let marked = weight_where(&cpu, |s| {
        has_frame(s, "deep_leaf") && user_frames(s).first() == Some(&"[truncated]")
    });
    eprintln!("deep_leaf: {marked} of {in_deep} samples under [truncated]");
    assert!(in_deep >= 80, "too few samples in deep_leaf: {cpu:#?}");
    assert!(marked * 100 >= in_deep * 99, "{cpu:#?}");

    // The main thread's sleep: nap's nanosleep, under its whole chain.
    let tid = done["tid"].as_u64().unwrap().to_string();
    let off = flamegraph_folded(&traced.recording, &["--kind", "offcpu", "--tid", &tid]);
    let slept = |keep: &dyn Fn(&str) -> bool| {
        weight_where(&off, |s| {
            s.ends_with(";[sleep]") && has_frame(s, "clock_nanosleep") && keep(s)
        })
    };
    let in_sleep = slept(&|_| true);
    let under_chain = slept(&|s| {
        let frames = user_frames(s);
        main_root(&frames) && follows(&frames, &["main", "wait_for_batch", "nap", "nanosleep"])
    });
    let truth_us = done["slept_ns"].as_f64().unwrap() / 1e3;
    eprintln!(
        "sleep: {under_chain} of {in_sleep} µs under main;wait_for_batch;nap \
         (the workload measured {truth_us:.0} µs)"
    );
    assert!(under_chain * 100 >= in_sleep * 99, "{off:#?}");
    assert!(
        close_to(under_chain as f64, truth_us, 0.05, 0.0),
        "sleep under its chain {under_chain} µs vs measured {truth_us:.0} µs: {off:#?}"
    );

    let stacks = traced.report.stacks.as_ref().expect("a stacks summary");
    assert_eq!(stacks.mode.as_deref(), Some("dwarf"));
    assert_eq!(stacks.copy_bytes, Some(64 << 10));
    let rooted = stacks
        .rooted
        .expect("dwarf mode knows which stacks are rooted");
    assert_eq!(rooted + stacks.truncated + stacks.lost, stacks.samples);
    assert!(stacks.truncated >= in_deep, "{stacks:?}");
}

/// The same workload with the kernel walking frame pointers, as on a
/// kernel without BTF: the report says which mode ran, and the chains the
/// test above finds whole are not (the test above can fail).
#[test]
fn frame_pointer_mode_is_reported_and_loses_frames() {
    require_root();
    let env = [("TPROF_FRAME_POINTER_STACKS", OsStr::new("1"))];
    let traced = trace_workload_env("unwind_chains", &["--hz", "999"], &["2"], &env);
    let stacks = traced.report.stacks.as_ref().expect("a stacks summary");
    assert_eq!(stacks.mode.as_deref(), Some("frame_pointers"));
    assert_eq!(stacks.rooted, None);
    let cpu = flamegraph_folded(&traced.recording, &["--kind", "cpu"]);
    let (whole, total) = whole_share(
        &cpu,
        "cpu_leaf",
        &["main", "cpu_mid", "cpu_leaf"],
        Root::Main,
    );
    eprintln!("frame pointers: {whole} of {total} cpu_leaf samples whole");
    assert!(total > 0, "{cpu:#?}");
    assert!(
        whole * 2 < total,
        "frame-pointer walks found the chain: {cpu:#?}"
    );
}

/// Whose root a chain hangs from.
#[derive(Clone, Copy)]
enum Root {
    /// The main thread: `_start` (then glibc's start-up) before `main`.
    Main,
    /// A pthread: glibc's `clone3` and `start_thread` (which Debian's libc
    /// names in no symbol table) before the thread function.
    Thread,
}

/// (samples whose user stack is `root ... chain` up to the leaf, samples
/// in `leaf`).
fn whole_share(lines: &[(String, u64)], leaf: &str, chain: &[&str], root: Root) -> (u64, u64) {
    let total = weight_where(lines, |s| has_frame(s, leaf));
    let whole = weight_where(lines, |s| {
        let frames = user_frames(s);
        let Some(at) = frames.iter().position(|f| *f == chain[0]) else {
            return false;
        };
        let rooted = match root {
            Root::Main => frames.first() == Some(&"_start"),
            Root::Thread => at > 0 && frames[..at].iter().all(|f| is_libc(f)),
        };
        rooted && frames[at..].starts_with(chain)
    });
    (whole, total)
}

fn is_libc(frame: &str) -> bool {
    frame.starts_with("libc.so.6+") || ["start_thread", "clone3", "__clone3"].contains(&frame)
}

/// True when `frames` holds `chain` in order, one after the other.
fn follows(frames: &[&str], chain: &[&str]) -> bool {
    frames.windows(chain.len()).any(|w| w == chain)
}

/// The user frames of a folded line: after the process and thread, before
/// the kernel frames and the off-CPU reason.
fn user_frames(stack: &str) -> Vec<&str> {
    stack
        .split(';')
        .skip(2)
        .take_while(|f| !f.ends_with("_[k]") && !is_reason(f))
        .collect()
}

fn is_reason(frame: &str) -> bool {
    [
        "[runnable]",
        "[disk wait (D)]",
        "[sleep]",
        "[other wait]",
        "[block io]",
        "[futex]",
    ]
    .contains(&frame)
}

fn has_frame(stack: &str, frame: &str) -> bool {
    stack.split(';').any(|f| f == frame)
}

fn weight_where(lines: &[(String, u64)], keep: impl Fn(&str) -> bool) -> u64 {
    lines.iter().filter(|(s, _)| keep(s)).map(|(_, c)| c).sum()
}

fn truth(traced: &Traced) -> &Value {
    traced
        .truth
        .iter()
        .find(|t| t["role"] == "done")
        .unwrap_or_else(|| panic!("no done line in the ground truth: {:#?}", traced.truth))
}

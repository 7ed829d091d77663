//! Stacks and flamegraphs: tprof's on-CPU samples and off-CPU times against
//! workloads whose split is known by construction, symbols for a worker
//! that exited before the recording ended, and well-formed SVGs.

use std::path::Path;

use serde_json::Value;
use tprof_tests::{
    Traced, build_workload, close_to, flamegraph_folded, require_root, show, tprof,
    trace_workload_with,
};

/// The same thread on CPUs that two untraced spinners keep busy: it waits
/// for a CPU about a third of the time, preempted wherever it runs, and
/// its runnable time must split between burn_a and burn_b as the thread's
/// own schedstat run_delay, read around each, splits it. A preempted
/// thread's stacks are taken about once per sampling period in each
/// stretch it runs (the kernel's `recent_preemption`), so the split is a
/// sample's: at 199 Hz over 5 s, within 7 points (runs measured within
/// 0.2–6.3 points over 3 s). Before, preemptions were matched to earlier
/// copies by their registers, which cannot tell the two functions' calls
/// of `clock_gettime` apart, and 84–98% of the runnable time went to
/// burn_a where its run delay was 74–77%.
#[test]
fn runnable_time_splits_as_the_cpu_time() {
    require_root();
    let mut spinners = std::process::Command::new(build_workload("busy_threads"))
        .args(["2", "8"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start busy_threads");
    let traced = trace_workload_with("two_functions", &["--hz", "199"], &["5"]);
    spinners.kill().ok();
    spinners.wait().ok();
    let lines = flamegraph_folded(&traced.recording, &["--kind", "offcpu"]);
    let runnable = |function: &str| {
        weight_where(&lines, |s| {
            has_frame(s, function) && s.split(';').any(|f| f == "[runnable]")
        })
    };
    let (in_a, in_b) = (runnable("burn_a"), runnable("burn_b"));
    let total = in_a + in_b;
    let tid = truth(&traced, "done")["tid"].as_u64().expect("tid");
    let thread = (traced.report.threads.iter())
        .find(|t| t.tid as u64 == tid)
        .expect("the burning thread in the report");
    // The off-CPU flamegraph weighs in microseconds.
    assert!(
        total as f64 >= 0.8e6 * thread.runnable_s,
        "burn_a and burn_b hold {total} µs of {:.3} s runnable: {lines:#?}",
        thread.runnable_s
    );
    assert!(
        thread.runnable_s >= 0.5,
        "the spinners left the thread runnable only {:.3} s",
        thread.runnable_s
    );
    let share_a = in_a as f64 / total as f64;
    let done = truth(&traced, "done");
    let delay = |key: &str| done[key].as_f64().expect("run delay");
    let truth_a = delay("a_delay_ns") / (delay("a_delay_ns") + delay("b_delay_ns"));
    eprintln!(
        "runnable in burn_a {in_a} µs, burn_b {in_b} µs: share of burn_a {share_a:.3} \
         (its run delay: {truth_a:.3})"
    );
    assert!(
        (share_a - truth_a).abs() <= 0.07,
        "burn_a's share of the runnable time {share_a:.3} is not {truth_a:.3} ± 0.07: {lines:#?}"
    );
}

/// A thread that sleeps through one `nap()` from two callers stands at the
/// same registers (instruction, stack and frame pointers) at each
/// nanosleep, whichever called: a switch-out that reuses an earlier copy
/// by its registers alone gave all the sleep to the first caller seen
/// (100% to sleep_a, three runs, where the truth is half). Its off-CPU time
/// must split between sleep_a and sleep_b as the time the workload measured
/// in each, within 5 points: the kernel checks a reused copy's return
/// addresses against the stack. A copy that passed a check is trusted for
/// about a sampling period, so sleep_b's naps go to sleep_a's copy until a
/// check first lands on one of them (a check lands on whichever nap comes
/// first once the trust runs out; sleep_b's about one time in six): 1.6–1.8
/// points in 3 s runs, measured. Before userspace has unwound a copy there
/// is nothing to check it against either: the workload naps once and waits
/// 0.5 s before its rounds, so that a busy machine's slow first drain does
/// not add to that.
#[test]
fn sleep_time_splits_between_callers_of_one_site() {
    require_root();
    let traced = trace_workload_with("two_sleepers", &[], &["3"]);
    // The rounds' time; the settling nap (1 ms under sleep_a) is not in it.
    let done = truth(&traced, "done");
    let tid = done["tid"].as_u64().expect("tid").to_string();
    let lines = flamegraph_folded(&traced.recording, &["--kind", "offcpu", "--tid", &tid]);
    let asleep = |function: &str| {
        weight_where(&lines, |s| {
            has_frame(s, function) && has_frame(s, "nap") && s.ends_with(";[sleep]")
        })
    };
    let (in_a, in_b) = (asleep("sleep_a"), asleep("sleep_b"));
    let (a_ns, b_ns) = (
        done["a_ns"].as_f64().expect("a_ns"),
        done["b_ns"].as_f64().expect("b_ns"),
    );
    let total = in_a + in_b;
    // The off-CPU flamegraph weighs in microseconds.
    assert!(
        total as f64 >= 0.9 * (a_ns + b_ns) / 1e3,
        "sleep_a and sleep_b hold {total} µs of the {:.0} µs the workload slept: {lines:#?}",
        (a_ns + b_ns) / 1e3
    );
    let share_a = in_a as f64 / total as f64;
    let truth_a = a_ns / (a_ns + b_ns);
    eprintln!(
        "asleep in sleep_a {in_a} µs, sleep_b {in_b} µs: share of sleep_a {share_a:.3} \
         (measured: {truth_a:.3})"
    );
    assert!(
        (share_a - truth_a).abs() <= 0.05,
        "sleep_a's share of the sleep {share_a:.3} is not {truth_a:.3} ± 0.05: {lines:#?}"
    );
}

/// burn_a burns three times burn_b's CPU time, so their on-CPU samples
/// split 3:1; tprof must agree within 5 points.
#[test]
fn cpu_samples_split_3_to_1() {
    require_root();
    let traced = trace_workload_with("two_functions", &["--hz", "199"], &["2"]);
    let lines = flamegraph_folded(&traced.recording, &["--kind", "cpu"]);
    let in_a = weight_where(&lines, |s| has_frame(s, "burn_a"));
    let in_b = weight_where(&lines, |s| has_frame(s, "burn_b"));
    let total = in_a + in_b;
    assert!(
        total > 200,
        "too few samples in burn_a/burn_b ({total}): {lines:#?}"
    );
    let share_a = in_a as f64 / total as f64;
    let done = truth(&traced, "done");
    let (a_ns, b_ns) = (
        done["a_ns"].as_f64().unwrap(),
        done["b_ns"].as_f64().unwrap(),
    );
    let truth_a = a_ns / (a_ns + b_ns);
    eprintln!(
        "burn_a {in_a}, burn_b {in_b} samples: share of burn_a {share_a:.3} \
         (measured CPU time: {truth_a:.3})"
    );
    for expected in [0.75, truth_a] {
        assert!(
            (share_a - expected).abs() <= 0.05,
            "burn_a's share {share_a:.3} is not {expected:.3} ± 0.05: {lines:#?}"
        );
    }
    // Rooted in the process, then the thread, and under main: gcc gives
    // the leaf burn_a no frame of its own, so a frame-pointer walk skipped
    // main; the unwound copies do not.
    assert!(
        lines
            .iter()
            .all(|(s, _)| s.starts_with("two_functions;two_functions;")),
        "{lines:#?}"
    );
    let under_main = weight_where(&lines, |s| {
        s.contains(";main;burn_a") || s.contains(";main;burn_b")
    });
    assert!(under_main * 100 >= total * 99, "{lines:#?}");
    for kind in ["cpu", "wall"] {
        assert_svg(&svg_beside(&traced, kind));
    }
}

/// The napper's off-CPU time in its sleep stack matches the sleep it
/// measured; the worker that exited 0.7 s before the end still has names.
#[test]
fn sleep_time_and_exited_worker() {
    require_root();
    let traced = trace_workload_with("nap_and_fork", &[], &["1"]);
    let napper = truth(&traced, "napper");
    let worker = truth(&traced, "worker");
    let tid = napper["tid"].as_u64().unwrap().to_string();

    let off = flamegraph_folded(&traced.recording, &["--kind", "offcpu", "--tid", &tid]);
    let slept_us = weight_where(&off, |s| s.contains("nanosleep") && s.ends_with(";[sleep]"));
    let truth_us = napper["slept_ns"].as_f64().unwrap() / 1e3;
    eprintln!("napper off-CPU in nanosleep: {slept_us} µs, measured sleep {truth_us:.0} µs");
    assert!(
        close_to(slept_us as f64, truth_us, 0.05, 0.0),
        "off-CPU sleep {slept_us} µs vs measured {truth_us:.0} µs: {off:#?}"
    );
    assert!(
        off.iter()
            .all(|(s, _)| s.starts_with("nap_and_fork;napper;")),
        "--tid keeps only the napper: {off:#?}"
    );

    let pid = worker["pid"].as_u64().unwrap().to_string();
    let cpu = flamegraph_folded(&traced.recording, &["--kind", "cpu", "--pid", &pid]);
    let named = weight_where(&cpu, |s| has_frame(s, "worker_burn"));
    let total: u64 = cpu.iter().map(|(_, c)| c).sum();
    eprintln!("exited worker: {named} of {total} samples in worker_burn");
    assert!(
        named > 10 && named * 10 >= total * 9,
        "worker samples unnamed: {cpu:#?}"
    );
    assert!(
        cpu.iter()
            .all(|(s, _)| s.starts_with("worker (child);worker;")),
        "the worker is rooted under its role and thread: {cpu:#?}"
    );

    let svg = traced.dir.path().join("offcpu.svg");
    let out = tprof()
        .args(["flamegraph", "--kind", "offcpu", "-o"])
        .arg(&svg)
        .arg(&traced.recording)
        .output()
        .expect("run tprof flamegraph");
    assert!(out.status.success(), "{}", show(&out));
    assert_svg(&svg);
}

/// Code in anonymous memory is named from the /tmp/perf-<pid>.map file the
/// JIT wrote, read after the process exited.
#[test]
fn jit_frames_named_from_perf_map() {
    require_root();
    let traced = trace_workload_with("jit_spin", &[], &["0.5"]);
    let done = truth(&traced, "done");
    let _ = std::fs::remove_file(done["map"].as_str().unwrap());
    let lines = flamegraph_folded(&traced.recording, &["--kind", "cpu"]);
    let jitted = weight_where(&lines, |s| s.ends_with(";jit_spin_loop"));
    let total: u64 = lines.iter().map(|(_, c)| c).sum();
    eprintln!("{jitted} of {total} samples in jit_spin_loop");
    assert!(jitted * 10 >= total * 8, "JIT frames unnamed: {lines:#?}");
}

/// `--diff BEFORE AFTER` draws inferno's differential graph.
#[test]
fn differential_flamegraph() {
    require_root();
    let before = trace_workload_with("two_functions", &[], &["0.5"]);
    let after = trace_workload_with("nap_and_fork", &[], &["0.6"]);
    let svg = before.dir.path().join("diff.svg");
    let out = tprof()
        .args(["flamegraph", "--diff"])
        .arg(&before.recording)
        .arg(&after.recording)
        .arg("-o")
        .arg(&svg)
        .output()
        .expect("run tprof flamegraph --diff");
    assert!(out.status.success(), "{}", show(&out));
    assert_svg(&svg);
}

fn truth<'a>(traced: &'a Traced, role: &str) -> &'a Value {
    traced
        .truth
        .iter()
        .find(|t| t["role"] == role)
        .unwrap_or_else(|| panic!("no {role} in the ground truth: {:#?}", traced.truth))
}

fn has_frame(stack: &str, frame: &str) -> bool {
    stack.split(';').any(|f| f == frame)
}

fn weight_where(lines: &[(String, u64)], keep: impl Fn(&str) -> bool) -> u64 {
    lines.iter().filter(|(s, _)| keep(s)).map(|(_, c)| c).sum()
}

/// `tprof record` writes REC.KIND.svg next to the recording REC.
fn svg_beside(traced: &Traced, kind: &str) -> std::path::PathBuf {
    let mut name = traced.recording.as_os_str().to_owned();
    name.push(format!(".{kind}.svg"));
    name.into()
}

/// Well-formed XML whose root is an <svg> element.
fn assert_svg(path: &Path) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let doc = roxmltree::Document::parse_with_options(
        &text,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(
        doc.root_element().tag_name().name(),
        "svg",
        "{}",
        path.display()
    );
}

//! CUDA runtime tracing: uprobes on the libcudart the job maps. The timing
//! semantics come from the fake libcudart in tests/fake_cudart (sleeps stand
//! in for transfers) driven by tests/workloads/cuda_copies.c in three
//! patterns, each with its own finding; the probe path itself is checked on
//! the real libcudart of the nvidia-cuda-runtime wheel, whose calls fail
//! without a GPU but are made, with arguments the workload writes down.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use profiler_ebpf::cuda_fn;
use serde_json::Value;
use tprof_core::recording::{self, Event};
use tprof_tests::{
    Report, Running, Traced, build_workload, close_to, fake_cudart, real_cudart, record_command,
    report_json, require_root, show, trace_workload_env,
};

/// Steps of the training loop: 2 copies, 20 launches and a loss read each.
const STEPS: u64 = 30;

/// Traces `cuda_copies MODE ARGS...` against `library` (with extra
/// environment for the workload).
fn trace(library: &Path, mode: &str, args: &[&str], env: &[(&str, &str)]) -> (Traced, Value) {
    trace_with(library, &[], mode, args, env)
}

/// [`trace`] with extra `tprof record` options.
fn trace_with(
    library: &Path,
    record_args: &[&str],
    mode: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Traced, Value) {
    require_root();
    let mut all_args = vec![mode];
    all_args.extend_from_slice(args);
    let mut all_env: Vec<(&str, &OsStr)> = vec![("TPROF_CUDART", library.as_os_str())];
    all_env.extend(env.iter().map(|&(k, v)| (k, OsStr::new(v))));
    let mut all_record_args = vec!["--no-stacks"];
    all_record_args.extend_from_slice(record_args);
    let traced = trace_workload_env("cuda_copies", &all_record_args, &all_args, &all_env);
    let probed = traced.truth.iter().find(|v| v.get("probed").is_some());
    assert_eq!(
        probed.and_then(|v| v["probed"].as_bool()),
        Some(true),
        "the workload never saw tprof's uprobe in place:\n{}",
        traced.record.stderr
    );
    let truth = traced
        .truth
        .iter()
        .find(|v| v.get("mode").is_some())
        .unwrap_or_else(|| {
            panic!(
                "no ground truth: {:?}\n{}",
                traced.truth, traced.record.stderr
            )
        })
        .clone();
    (traced, truth)
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing from {v}"))
}

/// What every training-loop run must show, whatever the pattern.
fn check_training_run(report: &Report, truth: &Value) {
    let cuda = &report.cuda;
    assert!(cuda.visible, "CUDA calls not visible: {:?}", cuda.status);
    assert!(
        cuda.library
            .as_deref()
            .is_some_and(|l| l.ends_with("libcudart-fake.so")),
        "{:?}",
        cuda.library
    );
    let h = &cuda.h2d_copies;
    assert_eq!(h.count, u(truth, "h2d_copies"), "{cuda:#?}");
    assert_eq!(h.bytes, u(truth, "h2d_bytes"), "{cuda:#?}");
    assert_eq!(cuda.calls_of("cudaLaunchKernel"), u(truth, "launches"));
    assert_eq!(
        cuda.calls_of("cudaStreamSynchronize"),
        u(truth, "stream_syncs")
    );
    // Two H2D copies and one D2H copy per step.
    assert_eq!(cuda.calls_of("cudaMemcpyAsync"), 3 * u(truth, "steps"));
    assert_eq!(cuda.failed_calls, 0);
    // The workload timed the same calls (and syncs) around them.
    let truth_blocked = truth["blocked_s"].as_f64().expect("blocked_s");
    assert!(
        close_to(h.blocked_s, truth_blocked, 0.1, 0.005),
        "blocked {} s, the workload measured {truth_blocked} s",
        h.blocked_s
    );
    let trainer = cuda.trainer.as_ref().expect("a trainer thread");
    assert_eq!(trainer.tid, truth["tid"].as_i64().unwrap());
    assert_eq!(trainer.syncs, u(truth, "stream_syncs"));
}

#[test]
fn pageable_copies_with_syncs_are_a_pin_memory_finding() {
    let (traced, truth) = trace(&fake_cudart(), "pageable", &[&STEPS.to_string()], &[]);
    let cuda = &traced.report.cuda;
    check_training_run(&traced.report, &truth);
    let h = &cuda.h2d_copies;
    assert_eq!((h.pageable, h.pinned), (h.count, 0), "{h:?}");
    assert_eq!(h.followed_by_sync, h.count);
    assert_eq!(cuda.finding_ids(), vec!["pageable_copies"], "{cuda:#?}");
    let f = &cuda.findings[0];
    assert_eq!((f.copies, f.bytes), (h.count, h.bytes));
    assert!(f.fix.contains("pin_memory"), "{}", f.fix);
}

#[test]
fn pinned_copies_with_syncs_are_a_non_blocking_finding() {
    let (traced, truth) = trace(&fake_cudart(), "pinned-sync", &[&STEPS.to_string()], &[]);
    let cuda = &traced.report.cuda;
    check_training_run(&traced.report, &truth);
    let h = &cuda.h2d_copies;
    assert_eq!((h.pinned, h.pageable), (h.count, 0), "{h:?}");
    assert_eq!(h.followed_by_sync, h.count);
    for f in [
        "cudaMallocHost",
        "cudaHostRegister",
        "cudaFreeHost",
        "cudaHostUnregister",
    ] {
        assert_eq!(cuda.calls_of(f), 1, "{f}: {:?}", cuda.calls);
    }
    assert_eq!(cuda.finding_ids(), vec!["sync_copies"], "{cuda:#?}");
    assert!(cuda.findings[0].fix.contains("non_blocking=True"));
    assert_eq!(cuda.findings[0].copies, h.count);
}

#[test]
fn pinned_async_copies_have_no_finding() {
    let (traced, truth) = trace(&fake_cudart(), "pinned-async", &[&STEPS.to_string()], &[]);
    let cuda = &traced.report.cuda;
    check_training_run(&traced.report, &truth);
    let h = &cuda.h2d_copies;
    assert_eq!((h.pinned, h.followed_by_sync), (h.count, 0), "{h:?}");
    assert!(cuda.findings.is_empty(), "{:#?}", cuda.findings);
}

/// The library appears in a forked child after tracing began: found by
/// the rescan, probed, and the child is the trainer.
#[test]
fn a_worker_that_loads_the_runtime_later_is_traced() {
    let (traced, truth) = trace(
        &fake_cudart(),
        "pinned-async",
        &["10"],
        &[("CUDA_FORK", "1")],
    );
    check_training_run(&traced.report, &truth);
    let trainer = traced.report.cuda.trainer.as_ref().unwrap();
    assert_eq!(
        trainer.pid,
        truth["tid"].as_i64().unwrap(),
        "the child process"
    );
}

#[test]
fn no_runtime_no_cuda_calls() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("r.tprof");
    let out = Running::spawn(&mut record_command(
        &recording,
        &["--no-stacks"],
        &["sleep", "0.3"],
    ))
    .wait(Duration::from_mins(1))
    .into_output();
    assert!(out.status.success(), "{}", show(&out));
    let report = Report::from_json(report_json(&recording));
    assert!(!report.cuda.visible);
    assert_eq!(
        report.cuda.status.as_deref(),
        Some("no libcudart mapped by the job")
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("CUDA calls not visible: no libcudart mapped by the job"),
        "{text}"
    );
}

/// `record -p` on a job that already has the runtime mapped: probed at
/// attach.
#[test]
fn attach_to_a_job_with_the_runtime_loaded() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("r.tprof");
    let mut job = Command::new(build_workload("cuda_copies"));
    job.args(["pinned-sync", "100"])
        .env("TPROF_CUDART", fake_cudart());
    // The job loads the library, then waits for the probes before its
    // first call.
    let job = Running::spawn(&mut job);
    let pid = job.pid().to_string();
    let tprof = Running::spawn(&mut record_command(
        &recording,
        &["-p", &pid, "-d", "20s", "--no-stacks"],
        &[],
    ))
    .wait(Duration::from_mins(1));
    assert!(tprof.status.success(), "{tprof:#?}");
    let out = job.wait(Duration::from_secs(10));
    let lines = tprof_tests::parse_json_lines(&out.stdout);
    assert!(lines.iter().any(|v| v["probed"] == true), "{lines:?}");
    let truth = lines
        .iter()
        .find(|v| v.get("mode").is_some())
        .expect("truth");
    let report = Report::from_json(report_json(&recording));
    check_training_run(&report, truth);
    assert_eq!(report.cuda.finding_ids(), vec!["sync_copies"]);
}

/// `--no-cuda`: a job with the runtime loaded, and nothing probed.
#[test]
fn no_cuda_probes_nothing() {
    require_root();
    let lib = fake_cudart();
    let env = [
        ("TPROF_CUDART", lib.as_os_str()),
        ("WAIT_FOR_PROBES", OsStr::new("0")),
    ];
    let traced = trace_workload_env(
        "cuda_copies",
        &["--no-stacks", "--no-cuda"],
        &["pinned-sync", "5"],
        &env,
    );
    let cuda = &traced.report.cuda;
    assert!(!cuda.visible);
    assert_eq!(
        cuda.status.as_deref(),
        Some("CUDA tracing was off (--no-cuda)")
    );
    assert!(cuda.calls.is_empty(), "{:?}", cuda.calls);
    assert!(!traced.record.stderr.contains("tracing CUDA runtime calls"));
}

/// Four threads in cudaMemcpy at once against a map of calls in progress
/// shrunk to one entry: every call is recorded or counted as lost, none
/// vanishes; with the map at its size all are recorded.
#[test]
fn a_full_map_of_calls_in_progress_is_counted() {
    let (traced, truth) = trace_with(
        &fake_cudart(),
        &["--max-in-flight", "1"],
        "overlap",
        &["4"],
        &[],
    );
    let made = u(&truth, "memcpy_calls");
    let recorded = traced.report.cuda.calls_of("cudaMemcpy");
    let lost = &report_json(&traced.recording)["lost"];
    let full = u(lost, "cuda_calls_full");
    assert!(full > 0, "no call was refused: {lost:#}");
    assert_eq!(recorded + full, made, "recorded {recorded}, lost {lost:#}");

    let (traced, truth) = trace(&fake_cudart(), "overlap", &["4"], &[]);
    let lost = &report_json(&traced.recording)["lost"];
    assert_eq!(
        traced.report.cuda.calls_of("cudaMemcpy"),
        u(&truth, "memcpy_calls")
    );
    assert_eq!(lost["cuda_calls_full"], 0, "{lost:#}");
}

/// A thread that dies inside a call never returns from it: the call is
/// counted as lost (`cuda_calls_unreturned`), not silently dropped.
#[test]
fn a_call_whose_thread_dies_is_counted() {
    let (traced, truth) = trace(&fake_cudart(), "abandon", &[], &[]);
    let lost = &report_json(&traced.recording)["lost"];
    assert_eq!(
        lost["cuda_calls_unreturned"], truth["unreturned"],
        "{lost:#}"
    );
    let cuda = &traced.report.cuda;
    assert_eq!(cuda.calls_of("cudaLaunchKernel"), 1, "{cuda:#?}");
    assert_eq!(cuda.calls_of("cudaStreamSynchronize"), 0, "{cuda:#?}");
    assert!(
        traced
            .record
            .stdout
            .contains("CUDA calls whose thread exited in them: 1"),
        "{:#?}",
        traced.record
    );
}

fn hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

/// The real libcudart.so.12: each probed function's call is recorded once
/// with its arguments and its return code as the workload saw them.
#[test]
fn the_real_runtime_calls_are_recorded_with_their_arguments() {
    let lib = real_cudart();
    let (traced, truth) = trace(&lib, "real", &[], &[]);
    let cuda = &traced.report.cuda;
    assert!(cuda.visible, "{:?}", cuda.status);
    // tprof names the library as the kernel mapped it: its real path (a
    // checkout whose target/ is a symlink differs from `lib`).
    let real = lib.canonicalize().expect("the runtime's path");
    assert_eq!(cuda.library.as_deref(), real.to_str());
    let rec = recording::read(&traced.recording).expect("read the recording");
    let tid = truth["tid"].as_u64().unwrap() as u32;
    let calls: Vec<(u32, [u64; 5], i32, u64)> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            Event::CudaCall(c) if c.tid == tid => Some((c.func, c.args, c.ret, c.out_ptr)),
            _ => None,
        })
        .collect();
    let one = |func: u32| {
        let name = cuda_fn::name(func);
        let found: Vec<_> = calls.iter().filter(|c| c.0 == func).collect();
        assert_eq!(found.len(), 1, "{name}: {calls:x?}");
        let (_, args, ret, out_ptr) = *found[0];
        let want = truth["ret"][name].as_i64().unwrap() as i32;
        assert_eq!(ret, want, "{name} returned {want} to the workload");
        (args, out_ptr)
    };
    let (src, dst, stream) = (
        hex(&truth["src"]),
        hex(&truth["dst"]),
        hex(&truth["stream"]),
    );
    let (args, _) = one(cuda_fn::MEMCPY);
    assert_eq!(
        args[..4],
        [dst, src, 12345, 1],
        "cudaMemcpy(dst, src, 12345, H2D)"
    );
    let (args, _) = one(cuda_fn::MEMCPY_ASYNC);
    assert_eq!(
        args,
        [dst, src, 54321, 2, stream],
        "cudaMemcpyAsync(.., D2H, stream)"
    );
    assert_eq!(one(cuda_fn::STREAM_SYNCHRONIZE).0[0], stream);
    one(cuda_fn::DEVICE_SYNCHRONIZE);
    assert_eq!(one(cuda_fn::EVENT_SYNCHRONIZE).0[0], 0);
    let (args, out_ptr) = one(cuda_fn::MALLOC_HOST);
    assert_eq!(args[1], 1 << 20);
    // Read through the void** at return: the failed call left it alone.
    assert_eq!(out_ptr, hex(&truth["host_after"]));
    let (args, out_ptr) = one(cuda_fn::HOST_ALLOC);
    assert_eq!(args[1..3], [1 << 21, 0]);
    assert_eq!(out_ptr, hex(&truth["host2_after"]));
    assert_eq!(one(cuda_fn::HOST_REGISTER).0[..2], [src, 1 << 16]);
    assert_eq!(one(cuda_fn::HOST_UNREGISTER).0[0], src);
    assert_eq!(one(cuda_fn::FREE_HOST).0[0], 0);
    // Counted in the kernel, never streamed.
    assert!(calls.iter().all(|c| c.0 != cuda_fn::LAUNCH_KERNEL));
    assert_eq!(cuda.calls_of("cudaLaunchKernel"), 1, "{:?}", cuda.calls);
    assert_eq!(
        cuda.failed_calls, 10,
        "all but the launch fail without a GPU"
    );
    assert_eq!(cuda.h2d_copies.count, 0, "failed copies copy nothing");
}

/// The per-call cost of the probes: cudaLaunchKernel (entry probe and a
/// per-CPU counter) and cudaStreamSynchronize (entry and return probes and
/// a ring-buffer event) on an idle fake, untraced and traced. Printed, not
/// asserted (no timing assertions); the counts are.
#[test]
fn probe_cost_per_call() {
    require_root();
    const CALLS: u64 = 20_000;
    let lib = fake_cudart();
    let binary = build_workload("cuda_copies");
    let calls = CALLS.to_string();
    let untraced = std::process::Command::new(&binary)
        .args(["bench", &calls])
        .env("TPROF_CUDART", &lib)
        .env("WAIT_FOR_PROBES", "0")
        .env("FAKE_CUDART_KERNEL_US", "0")
        .output()
        .expect("run the bench untraced");
    assert!(untraced.status.success(), "{}", show(&untraced));
    let base = tprof_tests::parse_json_lines(&String::from_utf8_lossy(&untraced.stdout))
        .into_iter()
        .find(|v| v.get("mode").is_some())
        .expect("bench result");
    let (traced, result) = trace(&lib, "bench", &[&calls], &[("FAKE_CUDART_KERNEL_US", "0")]);
    let cuda = &traced.report.cuda;
    assert_eq!(cuda.calls_of("cudaLaunchKernel"), CALLS);
    assert_eq!(cuda.calls_of("cudaStreamSynchronize"), CALLS);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    println!(
        "probe cost per call: cudaLaunchKernel {:.0} ns -> {:.0} ns (+{:.0}), \
         cudaStreamSynchronize {:.0} ns -> {:.0} ns (+{:.0})",
        f(&base, "launch_ns"),
        f(&result, "launch_ns"),
        f(&result, "launch_ns") - f(&base, "launch_ns"),
        f(&base, "stream_sync_ns"),
        f(&result, "stream_sync_ns"),
        f(&result, "stream_sync_ns") - f(&base, "stream_sync_ns"),
    );
}

//! GPU sampling through tprof's real NVML path (nvml-wrapper loading a
//! library given with --nvml-lib), against the fake libnvidia-ml.so in
//! tests/fake_nvml. The fake replays 2 s at 95 % then 1 s idle, repeated
//! from the moment tprof initializes it, and writes that moment down, so
//! the test knows where every idle stretch truly begins and ends.

use std::path::Path;
use std::time::Duration;

use tprof_tests::{
    FakeNvml, Gpu, Report, Running, record_cmd, record_command, recording_start_realtime_ns,
    report_json, require_root, show,
};

/// Far beyond the run time; only a hung tprof reaches it.
const RECORD_TIMEOUT: Duration = Duration::from_mins(1);

/// (utilization %, seconds) of one cycle of the script.
const SCRIPT: [(u32, f64); 2] = [(95, 2.0), (0, 1.0)];
const SCRIPT_ENV: &str = "busy:95:2.0,idle:0:1.0";
/// How long the traced command runs: two whole idle stretches.
const RUN_S: &str = "7";
/// The fake's memory in use at 95 %: 1 GiB + 95 × 64 MiB.
const BUSY_MEM_BYTES: u64 = (1 << 30) + 95 * (64 << 20);
/// Boundaries from the driver's sample buffer (20 ms grid in the fake).
const SAMPLED_TOLERANCE_S: f64 = 0.05;
/// Boundaries from polled utilization rates: a boundary is known to one
/// poll period (50 ms at the default 20 Hz), plus the poll's jitter.
const POLLED_TOLERANCE_S: f64 = 0.1;

/// A recording of `sleep RUN_S` with GPU sampling through `library`.
struct GpuRun {
    report: Report,
    /// The terminal report tprof printed after recording.
    text: String,
    /// Where the fake's script started, in seconds from the window start.
    script_offset_s: f64,
}

fn record_with(library: &Path) -> GpuRun {
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let t0_file = dir.path().join("t0");
    let lib = library.to_str().expect("utf-8 path");
    let mut command = record_command(&recording, &["--nvml-lib", lib], &["sleep", RUN_S]);
    command
        .env("FAKE_NVML_SCRIPT", SCRIPT_ENV)
        .env("FAKE_NVML_T0_FILE", &t0_file);
    let out = Running::spawn(&mut command)
        .wait(RECORD_TIMEOUT)
        .into_output();
    assert!(out.status.success(), "tprof record failed: {}", show(&out));
    let t0_ns: u64 = std::fs::read_to_string(&t0_file)
        .expect("the fake NVML library writes its start time")
        .trim()
        .parse()
        .expect("a number of ns");
    let start_ns = recording_start_realtime_ns(&recording);
    GpuRun {
        report: Report::from_json(report_json(&recording)),
        text: String::from_utf8_lossy(&out.stdout).into_owned(),
        script_offset_s: (t0_ns as f64 - start_ns as f64) / 1e9,
    }
}

impl GpuRun {
    fn only_gpu(&self) -> &Gpu {
        assert_eq!(
            self.report.gpu_status, None,
            "GPU data expected:\n{}",
            self.text
        );
        assert_eq!(self.report.gpus.len(), 1, "{:#?}", self.report.gpus);
        &self.report.gpus[0]
    }

    /// The script's idle stretches within the window, in window seconds.
    fn expected_idle(&self) -> Vec<(f64, f64)> {
        let (end, mut t) = (self.report.duration_s, self.script_offset_s);
        let mut out = Vec::new();
        while t < end {
            for (util, len) in SCRIPT {
                if util <= 5 {
                    out.push((t.max(0.0), (t + len).min(end)));
                }
                t += len;
            }
        }
        out.retain(|(s, e)| e > s);
        out
    }

    fn expected_idle_frac(&self) -> f64 {
        let idle: f64 = self.expected_idle().iter().map(|(s, e)| e - s).sum();
        idle / self.report.duration_s
    }
}

/// Intervals away from the window's edges, where sampling starts late or
/// ends early by up to a poll: those are compared boundary by boundary.
fn inner(intervals: &[(f64, f64)], duration_s: f64) -> Vec<(f64, f64)> {
    intervals
        .iter()
        .copied()
        .filter(|&(s, e)| s > 0.2 && e < duration_s - 0.2)
        .collect()
}

fn assert_idle_matches(run: &GpuRun, tolerance_s: f64) {
    let gpu = run.only_gpu();
    let expected = inner(&run.expected_idle(), run.report.duration_s);
    let found = inner(&gpu.idle_intervals, run.report.duration_s);
    assert!(!expected.is_empty(), "the run should span an idle stretch");
    assert_eq!(
        found.len(),
        expected.len(),
        "idle intervals {found:?}, script says {expected:?}\n{}",
        run.text
    );
    for (f, e) in found.iter().zip(&expected) {
        assert!(
            (f.0 - e.0).abs() <= tolerance_s && (f.1 - e.1).abs() <= tolerance_s,
            "idle interval {f:?} should be {e:?} within {tolerance_s} s\n{}",
            run.text
        );
    }
    let frac = gpu.idle_frac.expect("an idle fraction");
    let want = run.expected_idle_frac();
    assert!(
        (frac - want).abs() <= 0.02,
        "idle fraction {frac:.4}, script says {want:.4}\n{}",
        run.text
    );
    let util = gpu.util_mean_pct.expect("a mean utilization");
    let want_util = 95.0 * (1.0 - want);
    assert!(
        (util - want_util).abs() <= 2.0,
        "mean utilization {util:.1} %, script says {want_util:.1} %\n{}",
        run.text
    );
}

#[test]
fn idle_intervals_follow_the_script() {
    require_root();
    let run = record_with(&FakeNvml::Full.build());
    let gpu = run.only_gpu();
    assert_eq!(gpu.name, "Fake GPU 0");
    assert!(gpu.missing.is_empty(), "{:?}", gpu.missing);
    assert_eq!(gpu.utilization_source, "driver samples");
    assert_idle_matches(&run, SAMPLED_TOLERANCE_S);
    assert_eq!(gpu.mem_peak_bytes, Some(BUSY_MEM_BYTES));
    let sleep = gpu
        .processes
        .iter()
        .find(|p| p.comm == "sleep")
        .unwrap_or_else(|| panic!("the traced command's GPU use: {:#?}", gpu.processes));
    assert!(
        sleep.sm_util_mean_pct > 40.0 && sleep.sm_util_mean_pct < 80.0,
        "{sleep:?}"
    );
    assert!(run.text.contains("\nGPU\n"), "{}", run.text);
}

/// Without the driver's sample buffer, utilization rates are polled.
#[test]
fn library_without_samples_polls_utilization() {
    require_root();
    let run = record_with(&FakeNvml::NoSamples.build());
    let gpu = run.only_gpu();
    assert!(
        gpu.utilization_source.contains("polled"),
        "{}",
        gpu.utilization_source
    );
    assert_named_missing(&run, gpu, "nvmlDeviceGetSamples");
    assert_idle_matches(&run, POLLED_TOLERANCE_S);
    assert!(!gpu.processes.is_empty(), "{gpu:#?}");
}

#[test]
fn library_without_process_utilization_keeps_the_rest() {
    require_root();
    let run = record_with(&FakeNvml::NoProcessUtil.build());
    let gpu = run.only_gpu();
    assert_named_missing(&run, gpu, "nvmlDeviceGetProcessUtilization");
    assert!(gpu.processes.is_empty(), "{:#?}", gpu.processes);
    assert_idle_matches(&run, SAMPLED_TOLERANCE_S);
    assert_eq!(gpu.mem_peak_bytes, Some(BUSY_MEM_BYTES));
}

fn assert_named_missing(run: &GpuRun, gpu: &Gpu, function: &str) {
    assert!(
        gpu.missing.iter().any(|m| m.contains(function)),
        "missing should name {function}: {:?}",
        gpu.missing
    );
    assert!(
        run.text.contains(function),
        "the report should name {function}:\n{}",
        run.text
    );
}

/// No NVML at all: everything else is recorded, and the report says why
/// there is no GPU data.
#[test]
fn no_nvml_library_still_records() {
    require_root();
    let run = record_no_gpu(&["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    assert!(
        run.1.contains("no GPU data: NVML library not found"),
        "{}",
        run.1
    );
}

#[test]
fn no_gpu_turns_sampling_off() {
    require_root();
    let run = record_no_gpu(&["--no-gpu"]);
    assert!(
        run.1.contains("no GPU data: GPU sampling turned off"),
        "{}",
        run.1
    );
}

/// Records `sleep 1` with `args`; expects no GPU data and the reason in
/// the JSON report. Returns the report and the terminal report's text.
fn record_no_gpu(args: &[&str]) -> (Report, String) {
    let dir = tempfile::tempdir().expect("create temp dir");
    let recording = dir.path().join("recording.tprof");
    let out = record_cmd(&recording, args, &["sleep", "1"]);
    assert!(out.status.success(), "tprof record failed: {}", show(&out));
    let report = Report::from_json(report_json(&recording));
    assert!(report.gpus.is_empty(), "{:#?}", report.gpus);
    let status = report.gpu_status.clone().expect("gpu_status says why");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains(&format!("no GPU data: {status}")), "{text}");
    assert!(!report.processes.is_empty(), "the rest is still recorded");
    (report, text)
}

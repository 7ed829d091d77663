//! Support for tprof's integration tests (tests/integration): finding and
//! running the `tprof` binary, building the C workloads in tests/workloads,
//! running the real PyTorch job there under tprof (`RealJob`),
//! the fake NVML library in tests/fake_nvml and the CUDA runtimes
//! (tests/fake_cudart, and the real wheel's), reading their ground truth,
//! decoding `tprof report --json`, loading pages in headless Chromium, and
//! checking exports with Perfetto's definitions and `go tool pprof`, and
//! for `tprof top`, schedstat sampled live and a tmux terminal.
//!
//! The tests load real eBPF programs, so they need root; helpers panic with
//! a clear message rather than returning errors, so a failure reads as the
//! reason it failed.
//!
//! The iostat comparison reads a loop device over RAM (`LoopDevice`) that
//! nothing else touches: iostat's window and tprof's never quite coincide,
//! and on the shared disk other processes' small reads in the gap moved the
//! request count by a fifth.

mod browser;
mod cuda;
mod fake_nvml;
mod perfetto;
mod process;
mod real_job;
mod report;
mod top;
mod tprof;
mod workload;

pub use browser::{PageLoad, chromium_screenshot};
pub use cuda::{fake_cudart, real_cudart};
pub use fake_nvml::{FakeNvml, recording_start_realtime_ns};
pub use perfetto::{go_pprof, perfetto_summary};
pub use process::{Finished, Running, group_members, pgid, signal};
pub use real_job::{HeldJob, Iteration, JobConfig, JobTruth, RealJob, RealRun, Threads};
pub use report::{
    Advice, Blame, Change, Cuda, CudaFinding, CudaTrainer, Device, Finding, Futex, Gpu, GpuProcess,
    H2dCopies, Pipeline, Process, Report, Stacks, Steps, Thread, Waker,
};
pub use top::{HANGUP_GRACE, SchedSampler, Tmux, alive_as, monotonic_ns, start_time};
pub use tprof::{
    Traced, assert_programs_unloaded, bpf_program_ids_held_by, bpf_programs, flamegraph_folded,
    record_cmd, record_command, release_helpers, report_json, require_root, tprof, tprof_bin,
    trace_workload, trace_workload_env, trace_workload_with, wait_for_release_helpers,
};
pub use workload::{
    DataFile, LoopDevice, build_shared_lib, build_workload, data_file, parse_json_lines,
    read_truth_file, workspace_root,
};

/// True when `actual` is within `rel` (a fraction) or `abs` of `expected`,
/// whichever is larger.
pub fn close_to(actual: f64, expected: f64, rel: f64, abs: f64) -> bool {
    (actual - expected).abs() <= (expected.abs() * rel).max(abs)
}

/// A command's exit status and output as text, for failure messages.
pub fn show(out: &std::process::Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

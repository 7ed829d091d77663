//! tprof's integration tests: the real `tprof` binary loads its real eBPF
//! programs and traces the C workloads in tests/workloads, whose ground
//! truth comes from the kernel's own accounting (/proc/<tid>/schedstat).
//! They need root; run them all with `sudo cargo xtask test`, which builds
//! tprof, sets TPROF_BIN and runs them one at a time (they share the
//! machine's cores, and scheduler numbers skew when tests overlap).
//!
//! One binary, one module per area:

// Per-thread on-CPU / runnable / blocked time against schedstat.
mod sched;
// Which processes and threads are traced: children, grandchildren, `-p`
// attach, and stopping when the command exits.
mod procs;
// Failures: a non-zero exit and one "error: ..." line, never a panic.
mod errors;
// No eBPF program outlives tprof, however it stops.
mod detach;
// Stopping: a signal to tprof alone, to its group, twice, from `timeout`;
// the command tprof launched stopped with it, `-p` targets left running.
mod stopping;
// Edges: thousands of threads, a fork bomb past the tracked set, a flooded
// ring buffer, a full disk, targets exiting during attach, reused pids.
mod limits;
// Root's writes: owned by the sudo user, never through a planted link,
// FIFO or directory, never over an existing file without --force.
mod privileges;
// Why threads wait: block IO (against /proc/<pid>/io and iostat), futex
// waits and their wakers, other sleep.
mod waits;
// GPU sampling through NVML, against a fake libnvidia-ml.so.
mod gpu;
// Stacks and flamegraphs: on-CPU shares, off-CPU time by reason, exited
// workers symbolized, SVGs well-formed.
mod stacks;
// Whole user stacks of code built without frame pointers: copied by the
// kernel, unwound with the binaries' CFI, against chains known by
// construction.
mod unwind;
// Roles, steps and stall attribution on a synthetic data-loading pipeline.
mod steps;
// The ranked verdict on scenario pipelines, one cause each, and none on a
// healthy one.
mod diagnosis;
// CUDA runtime calls through uprobes: copies, syncs and their findings,
// against a fake libcudart and the real one of the nvidia-cuda-runtime wheel.
mod cuda;
// Timelines: trace event JSON valid and true to the report, the HTML page
// drawn by headless Chromium.
mod timeline;
// A real PyTorch + OpenCV training job (tests/workloads/train_job.py, in the
// venv `cargo xtask setup` makes), recorded from its start and attached:
// roles against its own ground truth, advice in the right direction, a
// report whose sentences add up.
mod real_job;
// The zoo of input-pipeline pathologies on the real job: the finding that
// names each, its setting, and the step's anatomy against the job's own
// timestamps.
mod zoo;
// Exports for other tools and multi-node merges: Perfetto traces against
// Perfetto's own definitions, pprof profiles through `go tool pprof`, the
// straggler of two concurrent ranks and a moved clock anchor.
mod export;
// `tprof top` on the real job: JSON frames and the tmux screen against
// schedstat over each frame's interval, the job's steps and roles; `r`
// and `q`; plain-text frames, a launched command, NO_COLOR.
mod top;
// Python frames on every installed CPython: shares, sleeps, native code
// under Python, threads and workers, marker frames.
mod python;

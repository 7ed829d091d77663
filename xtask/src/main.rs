//! Developer tasks for tprof, run as `cargo xtask <task>` (alias in
//! .cargo/config.toml). Each task lives in its own module; add a variant to
//! [`Task`] and a module to add a task.

mod bench;
mod bench_python;
mod cmd;
mod demo;
mod fixtures;
mod fuzz;
mod job_env;
mod protos;
mod setup;
mod test;
mod workloads;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    about = "tprof's developer tasks",
    after_help = "Examples:
  sudo cargo xtask setup
  sudo cargo xtask test
  sudo cargo xtask demo
  sudo cargo xtask demo --healthy
  sudo cargo xtask bench
  sudo cargo xtask bench real
  sudo cargo xtask bench stacks
  sudo cargo xtask bench-python
  sudo cargo xtask fixtures
  cargo xtask fuzz --seconds 300
  cargo xtask protos"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need (apt packages, nightly
    /// rust-src, bpf-linker, the CUDA runtime wheel, the real training
    /// job's torch + OpenCV venv under /var/cache/tprof/venvs) and mount
    /// tracefs; quick when all is present.
    Setup,
    /// Lint, build, and run every test, including the root-only
    /// integration tests that load the eBPF programs.
    Test(test::Args),
    /// Build tprof in release mode, record the bundled demo training
    /// pipeline (CPU-oversubscribed and data-starved; --healthy for a
    /// pipeline that keeps up) and show where the outputs are.
    Demo(demo::Args),
    /// Measure tprof's overhead on a context-switch-heavy job against
    /// libbpf-tools and perf sched, its capacity, recording size and report
    /// speed; writes target/bench/results.md. `bench real`: whether tprof's
    /// advice on a real PyTorch job lands near its best configuration.
    /// `bench stacks`: what copied user stacks cost, and their weights next
    /// to perf's DWARF unwinding.
    Bench(bench::Args),
    /// Compare tprof's Python frames with py-spy --native on a job with
    /// known shares, on every installed CPython, and measure what the
    /// Python walk costs; writes target/bench/python.md.
    BenchPython(bench_python::Args),
    /// Record the committed fixture recordings of the current format
    /// version (profiler/core/tests/fixtures/) from the test workloads; then
    /// re-bless their goldens with TPROF_BLESS=1.
    Fixtures(fixtures::Args),
    /// Fuzz the recording reader (and everything after it) for a fixed
    /// time with cargo-fuzz; needs nightly and `cargo install cargo-fuzz`.
    Fuzz(fuzz::Args),
    /// Regenerate tprof-core's protobuf code (Perfetto traces, pprof
    /// profiles) from profiler/core/proto/; --check fails if it is stale.
    Protos(protos::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::run().map(|_| ()),
        Task::Test(args) => test::run(&args),
        Task::Demo(args) => demo::run(&args),
        Task::Bench(args) => bench::run(&args),
        Task::BenchPython(args) => bench_python::run(&args),
        Task::Fixtures(args) => fixtures::run(&args),
        Task::Fuzz(args) => fuzz::run(&args),
        Task::Protos(args) => protos::run_task(&args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}

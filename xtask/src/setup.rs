//! `cargo xtask setup`: check each prerequisite first and install only what
//! is missing, so the command is fast (well under a second) on a machine that
//! already has everything, and safe to run from every other task. The one
//! large piece, the real training job's Python environment (torch, OpenCV,
//! numpy), lives outside the clone: see crate::job_env.
//!
//! In order: apt packages (LLVM 22, gcc, sysstat, bpftool, libbpf-tools,
//! linux-perf, python3-pip, the venv packages, chromium for the HTML
//! timeline test, golang-go for `go tool pprof`, tmux for the `tprof top`
//! screen tests), nightly `rust-src`,
//! bpf-linker 0.13.0, cargo-fuzz, the `nvidia-cuda-runtime-cu12` wheel into
//! target/cuda-runtime/ (a real libcudart for the tests; no GPU needed),
//! Perfetto's Python package in target/perfetto-venv/ (its proto definitions
//! check the Perfetto exports), py-spy 0.4.3 into /var/cache/tprof/ (for
//! `bench-python`), the real job's venv, and a tracefs mount.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command, probe, run as run_cmd};
use crate::job_env;

/// Debian packages: LLVM 22 for bpf-linker (same major as rustc's LLVM),
/// sysstat/bpftool/libbpf-tools as test oracles and peers, gcc for the C
/// workloads, python3-pip for the CUDA runtime wheel, python3.11-venv for
/// the train-job venv, python3-venv for the Perfetto checker's environment,
/// chromium to load the HTML timeline headless, golang-go for `go tool
/// pprof`, which checks pprof exports, tmux to run `tprof top` on a
/// terminal the tests can type into and read (send-keys, capture-pane).
const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "sysstat",
    "bpftool",
    "libbpf-tools",
    "gcc",
    // `perf sched record`, compared against in `cargo xtask bench`.
    "linux-perf",
    "python3-pip",
    // Debian's python3.11 can make the train-job venv only with this
    // (job_env.rs uses pyenv's 3.11 first, when there is one).
    "python3.11-venv",
    "python3-venv",
    "chromium",
    "golang-go",
    "tmux",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
/// cargo-fuzz for `cargo xtask fuzz`, which `cargo xtask test` runs: pinned,
/// like bpf-linker, so every machine fuzzes with the same driver.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
const TRACEFS: &str = "/sys/kernel/tracing";
/// The real CUDA runtime the CUDA tests probe (no GPU needed: its calls fail
/// without a driver, but they are made and traced). The wheel PyTorch
/// depends on, pinned so the tests see the same library everywhere.
const CUDA_RUNTIME_WHEEL: &str = "nvidia-cuda-runtime-cu12==12.9.79";
/// Where it is installed (pip --target), and the library in it; the tests
/// (tests/support/cuda.rs) look there.
const CUDA_RUNTIME_DIR: &str = "target/cuda-runtime/site";
const CUDA_RUNTIME_LIB: &str = "nvidia/cuda_runtime/lib/libcudart.so.12";
/// Perfetto's Python package: it ships the trace format's proto definitions
/// (perfetto_trace_pb2), with which the export tests decode tprof's traces
/// (its trace_processor binary is downloaded on first use, which these
/// machines cannot do, and is not used). Pinned with the protobuf runtime
/// it was tested with.
const PERFETTO_PACKAGES: &[&str] = &["perfetto==0.59.1", "protobuf==7.36.2"];
/// The virtual environment it is installed into; tests/support/perfetto.rs
/// looks there.
const PERFETTO_VENV: &str = "target/perfetto-venv";
const PERFETTO_CHECK: &str = "import perfetto.protos.perfetto.trace.perfetto_trace_pb2";

/// py-spy, which `cargo xtask bench-python` compares Python stacks with
/// (its wheel ships the binary), pinned; installed with pip --target
/// outside the clone, shared by every worktree.
const PY_SPY_WHEEL: &str = "py-spy==0.4.3";
pub(crate) const PY_SPY_DIR: &str = "/var/cache/tprof/py-spy-0.4.3";

/// What setup made that later tasks need to find.
pub(crate) struct Installed {
    /// The interpreter of the train-job venv (crate::job_env).
    pub job_python: PathBuf,
}

pub(crate) fn run() -> Result<Installed> {
    apt_packages()?;
    rust_src()?;
    bpf_linker()?;
    cargo_fuzz()?;
    cuda_runtime()?;
    perfetto_protos()?;
    py_spy()?;
    let job_python = job_env::ensure()?;
    tracefs()?;
    Ok(Installed { job_python })
}

/// The py-spy binary.
pub(crate) fn py_spy_bin() -> std::path::PathBuf {
    Path::new(PY_SPY_DIR).join("bin/py-spy")
}

fn py_spy() -> Result<()> {
    if py_spy_bin().is_file() {
        println!("py-spy: ok");
        return Ok(());
    }
    run_cmd(command("python3").args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--root-user-action=ignore",
        "--no-deps",
        "--target",
        PY_SPY_DIR,
        PY_SPY_WHEEL,
    ]))
    .context(
        "installing py-spy failed; the Python bench needs PyPI (pip install py-spy) reachable",
    )?;
    if !py_spy_bin().is_file() {
        bail!("the {PY_SPY_WHEEL} wheel installed no bin/py-spy under {PY_SPY_DIR}");
    }
    println!("py-spy: installed {PY_SPY_WHEEL}");
    Ok(())
}

fn apt_packages() -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| !apt_installed(p))
        .collect();
    if missing.is_empty() {
        println!("apt packages: ok");
        return Ok(());
    }
    if !cmd::is_root() {
        bail!(
            "apt packages missing ({}); run `sudo cargo xtask setup` to install them",
            missing.join(" ")
        );
    }
    run_cmd(command("apt-get").arg("update"))?;
    run_cmd(
        command("apt-get")
            .args(["install", "-y"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    println!("apt packages: installed {}", missing.join(" "));
    Ok(())
}

fn apt_installed(package: &str) -> bool {
    probe(command("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|s| s.trim() == "install ok installed")
}

/// The eBPF crate builds `core` from source for bpfel-unknown-none.
fn rust_src() -> Result<()> {
    let installed = probe(command("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]));
    if installed.is_some_and(|list| list.lines().any(|l| l.starts_with("rust-src"))) {
        println!("nightly rust-src: ok");
        return Ok(());
    }
    run_cmd(command("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    println!("nightly rust-src: installed");
    Ok(())
}

/// bpf-linker must link against the same LLVM major as rustc (22), hence
/// the pinned version and feature.
fn bpf_linker() -> Result<()> {
    let version = probe(command("bpf-linker").arg("--version")).unwrap_or_default();
    if version.contains(BPF_LINKER_VERSION) {
        println!("bpf-linker {BPF_LINKER_VERSION}: ok");
        return Ok(());
    }
    run_cmd(
        cmd::cargo()
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
            .args(["--no-default-features", "--features", "llvm-22"])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22"),
    )?;
    println!("bpf-linker {BPF_LINKER_VERSION}: installed");
    Ok(())
}

/// cargo-fuzz runs the libFuzzer target with the nightly toolchain the
/// eBPF build already needs.
fn cargo_fuzz() -> Result<()> {
    let version = probe(command("cargo").args(["+nightly", "fuzz", "--version"]));
    if version.is_some_and(|v| v.contains(CARGO_FUZZ_VERSION)) {
        println!("cargo-fuzz {CARGO_FUZZ_VERSION}: ok");
        return Ok(());
    }
    run_cmd(cmd::cargo().args([
        "install",
        "cargo-fuzz",
        "--locked",
        "--version",
        CARGO_FUZZ_VERSION,
    ]))?;
    println!("cargo-fuzz {CARGO_FUZZ_VERSION}: installed");
    Ok(())
}

/// The nvidia-cuda-runtime wheel, installed into target/ with pip (no
/// virtual environment or system site-packages is touched).
fn cuda_runtime() -> Result<()> {
    let dir = cmd::root().join(CUDA_RUNTIME_DIR);
    if dir.join(CUDA_RUNTIME_LIB).is_file() {
        println!("CUDA runtime wheel: ok");
        return Ok(());
    }
    run_cmd(
        command("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--root-user-action=ignore")
            .args(["--no-deps", "--target"])
            .arg(&dir)
            .arg(CUDA_RUNTIME_WHEEL),
    )
    .context(
        "installing the CUDA runtime wheel failed; the CUDA tests need PyPI \
         (pip install nvidia-cuda-runtime-cu12) reachable",
    )?;
    if !dir.join(CUDA_RUNTIME_LIB).is_file() {
        bail!(
            "the {CUDA_RUNTIME_WHEEL} wheel installed no {CUDA_RUNTIME_LIB} under {}",
            dir.display()
        );
    }
    println!("CUDA runtime wheel: installed {CUDA_RUNTIME_WHEEL}");
    Ok(())
}

/// Perfetto's Python package in a virtual environment under target/.
fn perfetto_protos() -> Result<()> {
    let venv = cmd::root().join(PERFETTO_VENV);
    let python = venv.join("bin/python");
    if probe(command(python.to_str().expect("utf-8 path")).args(["-c", PERFETTO_CHECK])).is_some() {
        println!("perfetto Python package: ok");
        return Ok(());
    }
    run_cmd(command("python3").args(["-m", "venv"]).arg(&venv))
        .context("creating a Python virtual environment failed (Debian package python3-venv)")?;
    run_cmd(
        command(python.to_str().expect("utf-8 path"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PERFETTO_PACKAGES),
    )
    .context(
        "installing the perfetto Python package failed; the export tests need PyPI reachable",
    )?;
    println!(
        "perfetto Python package: installed {}",
        PERFETTO_PACKAGES.join(" ")
    );
    Ok(())
}

/// aya finds tracepoints through tracefs, which a fresh VM does not mount.
fn tracefs() -> Result<()> {
    if Path::new(TRACEFS).join("events").is_dir() {
        println!("tracefs: ok");
        return Ok(());
    }
    if !cmd::is_root() {
        bail!("tracefs is not mounted at {TRACEFS}; run `sudo cargo xtask setup` to mount it");
    }
    run_cmd(command("mount").args(["-t", "tracefs", "nodev", TRACEFS]))?;
    println!("tracefs: mounted at {TRACEFS}");
    Ok(())
}

//! `cargo xtask setup`: check each prerequisite first and install only what
//! is missing, so the command is fast (well under a second) on a machine that
//! already has everything, and safe to run from every other task.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command, probe, run as run_cmd};

/// Debian packages: LLVM 22 for bpf-linker (same major as rustc's LLVM),
/// sysstat/bpftool/libbpf-tools as test oracles and peers, gcc for the C
/// workloads, python3-pip for the CUDA runtime wheel, chromium to load the
/// HTML timeline headless.
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
    "chromium",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
const TRACEFS: &str = "/sys/kernel/tracing";
/// The real CUDA runtime the CUDA tests probe (no GPU needed: its calls fail
/// without a driver, but they are made and traced). The wheel PyTorch
/// depends on, pinned so the tests see the same library everywhere.
const CUDA_RUNTIME_WHEEL: &str = "nvidia-cuda-runtime-cu12==12.9.79";
/// Where it is installed (pip --target), and the library in it; the tests
/// (tests/support/cuda.rs) look there.
const CUDA_RUNTIME_DIR: &str = "target/cuda-runtime/site";
const CUDA_RUNTIME_LIB: &str = "nvidia/cuda_runtime/lib/libcudart.so.12";

/// py-spy, which `cargo xtask bench-python` compares Python stacks with
/// (its wheel ships the binary), pinned; installed with pip --target
/// outside the clone, shared by every worktree.
const PY_SPY_WHEEL: &str = "py-spy==0.4.3";
pub const PY_SPY_DIR: &str = "/var/cache/tprof/py-spy-0.4.3";

pub fn run() -> Result<()> {
    apt_packages()?;
    rust_src()?;
    bpf_linker()?;
    cuda_runtime()?;
    py_spy()?;
    tracefs()
}

/// The py-spy binary.
pub fn py_spy_bin() -> std::path::PathBuf {
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

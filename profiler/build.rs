//! Compiles the kernel programs (profiler-ebpf's binary) for the BPF target
//! with nightly and build-std; the object lands in OUT_DIR and `capture`
//! embeds it. `cargo xtask setup` installs what this needs.
//!
//! Without bpf-linker (a laptop with only stable Rust, where someone wants
//! `tprof report` on a recording copied off a cluster) the binary is built
//! without the programs: everything but `tprof record` works, and `record`
//! says how to get them. `TPROF_REQUIRE_EBPF=1` (set by `cargo xtask`)
//! turns that fallback into an error, so a test or release build never
//! ships without them.

use std::{env, path::Path};

use anyhow::{Context as _, bail};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    println!("cargo::rustc-check-cfg=cfg(tprof_no_ebpf)");
    println!("cargo::rerun-if-env-changed=TPROF_REQUIRE_EBPF");
    println!("cargo::rerun-if-env-changed=PATH");
    if !on_path("bpf-linker") {
        if env::var_os("TPROF_REQUIRE_EBPF").is_some_and(|v| v == "1") {
            bail!("bpf-linker is not installed; run `cargo xtask setup`");
        }
        println!(
            "cargo::warning=bpf-linker not found: building tprof without its eBPF programs \
             (report, flamegraph and timeline work; record does not). \
             `cargo xtask setup` installs the toolchain."
        );
        println!("cargo::rustc-cfg=tprof_no_ebpf");
        return Ok(());
    }
    let ebpf = Package {
        name: "profiler-ebpf",
        root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../profiler-ebpf"),
        ..Default::default()
    };
    aya_build::build_ebpf([ebpf], Toolchain::default()).context(
        "building the eBPF programs failed; run `cargo xtask setup` (bpf-linker, nightly rust-src)",
    )
}

/// Whether `program` is an executable file in a `PATH` directory.
fn on_path(program: &str) -> bool {
    let Some(path) = env::var_os("PATH") else {
        return false;
    };
    env::split_paths(&path).any(|dir| is_executable(&dir.join(program)))
}

fn is_executable(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    file.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

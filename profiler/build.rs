//! Compiles the kernel programs (profiler-ebpf's binary) for the BPF target
//! with nightly and build-std; the object lands in OUT_DIR and `capture`
//! embeds it. `cargo xtask setup` installs what this needs.

use anyhow::Context as _;
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let ebpf = Package {
        name: "profiler-ebpf",
        root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../profiler-ebpf"),
        ..Default::default()
    };
    aya_build::build_ebpf([ebpf], Toolchain::default()).context(
        "building the eBPF programs failed; run `cargo xtask setup` (bpf-linker, nightly rust-src)",
    )
}

//! `cargo xtask fuzz --seconds N`: runs the libFuzzer target over the
//! recording reader (fuzz/fuzz_targets/parse.rs) for a fixed time, seeded
//! with the committed fixture recordings (profiler/core/tests/fixtures/). Needs nightly and cargo-fuzz
//! (`cargo install cargo-fuzz`). A crash leaves its input under
//! fuzz/artifacts/parse/; it belongs in profiler/core/tests/hostile_recordings.rs
//! as a regression test.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command, probe, run as run_cmd};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// How long to fuzz.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// libFuzzer's memory limit per input, in MiB: an input that makes the
    /// reader allocate more is a finding.
    #[arg(long, default_value_t = RSS_LIMIT_MB)]
    rss_limit_mb: u64,
}

const TARGET: &str = "parse";

pub(crate) fn run(args: &Args) -> Result<()> {
    fuzz(args.seconds, args.rss_limit_mb)
}

/// libFuzzer's memory limit per input for `cargo xtask test`'s run.
pub(crate) const RSS_LIMIT_MB: u64 = 2048;

/// Fuzzes the reader for `seconds`; an error when the fuzzer found a crash,
/// a leak or an input that makes the reader allocate past `rss_limit_mb`.
pub(crate) fn fuzz(seconds: u64, rss_limit_mb: u64) -> Result<()> {
    if probe(command("cargo").args(["+nightly", "fuzz", "--version"])).is_none() {
        bail!(
            "cargo-fuzz (with the nightly toolchain) is needed: run `cargo install cargo-fuzz` \
             and `rustup toolchain install nightly`"
        );
    }
    let fuzz_dir = cmd::root().join("fuzz");
    let corpus = fuzz_dir.join("corpus").join(TARGET);
    write_seeds(&corpus)?;
    run_cmd(
        command("cargo")
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", TARGET])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-rss_limit_mb={rss_limit_mb}"))
            .arg("-max_len=65536"),
    )
    .with_context(|| {
        format!(
            "the fuzzer found a crash; its input is under {}; add it to \
             profiler/core/tests/hostile_recordings.rs as a regression test",
            fuzz_dir.join("artifacts").join(TARGET).display()
        )
    })
}

/// Where the committed fixture recordings are, one directory per format
/// version (written by `cargo xtask fixtures`).
const FIXTURES: &str = "profiler/core/tests/fixtures";

/// The seeds: every committed fixture recording, of every format version,
/// as `fixture-vN-NAME.tprof`. Real recordings reach every record kind the
/// writer makes (stacks, CUDA, GPU samples, lost counts, footer) in the
/// writer's own encoding. libFuzzer reads at most `-max_len` bytes of a
/// seed, so a larger fixture seeds as its first 64 KiB: a recording cut
/// short, which the reader must take too.
fn write_seeds(corpus: &Path) -> Result<()> {
    fs::create_dir_all(corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
    let fixtures = cmd::root().join(FIXTURES);
    let mut seeds = 0;
    for version in sorted_entries(&fixtures)? {
        if !version.is_dir() {
            continue;
        }
        for file in sorted_entries(&version)? {
            if file.extension().is_none_or(|e| e != "tprof") {
                continue;
            }
            let name = format!(
                "fixture-{}-{}",
                version.file_name().unwrap_or_default().to_string_lossy(),
                file.file_name().unwrap_or_default().to_string_lossy()
            );
            fs::copy(&file, corpus.join(&name))
                .with_context(|| format!("cannot copy {} into the corpus", file.display()))?;
            seeds += 1;
        }
    }
    if seeds == 0 {
        bail!(
            "no fixture recordings under {} to seed the fuzzer with",
            fixtures.display()
        );
    }
    Ok(())
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    paths.sort();
    Ok(paths)
}

//! `cargo xtask fuzz --seconds N`: runs the libFuzzer target over the
//! recording reader (fuzz/fuzz_targets/parse.rs) for a fixed time, from a
//! seed corpus of small valid recordings. Needs nightly and cargo-fuzz
//! (`cargo install cargo-fuzz`). A crash leaves its input under
//! fuzz/artifacts/parse/; it belongs in profiler/core/tests/hostile_recordings.rs
//! as a regression test.

use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command, probe, run as run_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// How long to fuzz.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// libFuzzer's memory limit per input, in MiB: an input that makes the
    /// reader allocate more is a finding.
    #[arg(long, default_value_t = RSS_LIMIT_MB)]
    rss_limit_mb: u64,
}

const TARGET: &str = "parse";

pub fn run(args: &Args) -> Result<()> {
    fuzz(args.seconds, args.rss_limit_mb)
}

/// libFuzzer's memory limit per input for `cargo xtask test`'s run.
pub const RSS_LIMIT_MB: u64 = 2048;

/// Fuzzes the reader for `seconds`; an error when the fuzzer found a crash,
/// a leak or an input that makes the reader allocate past `rss_limit_mb`.
pub fn fuzz(seconds: u64, rss_limit_mb: u64) -> Result<()> {
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

/// Small valid recordings for libFuzzer to mutate: the preamble, a header,
/// a few events and process records, with and without a footer.
fn write_seeds(corpus: &Path) -> Result<()> {
    fs::create_dir_all(corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
    let header = br#"{"tool_version":"0.1.0","kernel_release":"6.18","hostname":"h","cores":2,"start":{"monotonic_ns":1000,"realtime_ns":5000},"targets":[7],"command":null,"block_devices":{"264241152":"vda"}}"#;
    let process = br#"{"pid":7,"ppid":1,"comm":"train","cmdline":["python","train.py"],"origin":"attached","seen_ns":1000}"#;
    let thread = br#"{"tid":7,"pid":7,"comm":"train","state":"S"}"#;
    let stacks = br#"{"sample_hz":99,"frames":[{"module":"m","offset":1,"symbol":"f","kernel":false}],"stacks":[[0]],"samples":[{"pid":7,"tid":7,"kind":"on_cpu","stack":0,"weight":3}]}"#;
    let footer = br#"{"end":{"monotonic_ns":9000,"realtime_ns":13000},"stop_reason":"duration"}"#;
    let mut events = Vec::new();
    // A switch (kind 1: prev_state as two words, prev tid and tgid, next
    // tid and tgid) and an exit (kind 5: tid, tgid, group_dead, padding).
    events.extend(event(2000, 1, &[1, 0, 7, 7, 8, 0]));
    events.extend(event(3000, 5, &[7, 7, 1, 0]));
    let mut base = preamble();
    record(&mut base, 1, header);
    record(&mut base, 2, process);
    record(&mut base, 3, thread);
    record(&mut base, 4, &events);
    fs::write(corpus.join("seed-cut-short"), &base)?;
    let mut full = base.clone();
    record(&mut full, 10, stacks);
    record(&mut full, 7, footer);
    fs::write(corpus.join("seed-complete"), &full)?;
    Ok(())
}

fn preamble() -> Vec<u8> {
    let mut bytes = b"TPROFREC".to_vec();
    bytes.extend(2u32.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes
}

fn record(out: &mut Vec<u8>, kind: u32, payload: &[u8]) {
    out.extend(kind.to_le_bytes());
    out.extend((payload.len() as u32).to_le_bytes());
    out.extend(payload);
}

/// An event: the 16-byte header (ts, kind, cpu, padding), then `words`.
fn event(ts: u64, kind: u16, words: &[u32]) -> Vec<u8> {
    let mut bytes = ts.to_le_bytes().to_vec();
    bytes.extend(kind.to_le_bytes());
    bytes.extend(0u16.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    for w in words {
        bytes.extend(w.to_le_bytes());
    }
    bytes
}

//! Checkers for tprof's exports that are other projects' own tools:
//! Perfetto's proto definitions (the Python `perfetto` package, in the
//! virtual environment `cargo xtask setup` makes) and `go tool pprof`
//! (Debian's golang-go).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::workload::workspace_root;

/// The virtual environment's Python, as xtask/src/setup.rs installs it.
fn perfetto_python() -> PathBuf {
    let python = workspace_root().join("target/perfetto-venv/bin/python");
    assert!(
        python.is_file(),
        "the perfetto Python package is missing at {}: run `cargo xtask setup`",
        python.display()
    );
    python
}

/// The trace at `path` decoded with Perfetto's definitions and summarized
/// by tests/support/perfetto_summary.py: `threads` (each thread track's
/// machine, pid, tid, name, `state_slices` and `state_ns`), `counters`
/// (name and `values`), `machines`, `flows`, `unknown_fields` (any field
/// Perfetto does not define), `unclosed_slices`.
pub fn perfetto_summary(path: &Path) -> Value {
    let script = workspace_root().join("tests/support/perfetto_summary.py");
    let out = Command::new(perfetto_python())
        .arg(&script)
        .arg(path)
        .output()
        .expect("run the Perfetto checker");
    assert!(
        out.status.success(),
        "Perfetto's definitions could not decode {}: {}",
        path.display(),
        crate::show(&out)
    );
    serde_json::from_slice(&out.stdout).expect("the checker prints JSON")
}

/// `go tool pprof ARGS... PROFILE`, which must succeed: its stdout.
pub fn go_pprof(args: &[&str], profile: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run `go tool pprof` (Debian package golang-go: `cargo xtask setup`)");
    assert!(
        out.status.success(),
        "go tool pprof {args:?} {} failed: {}",
        profile.display(),
        crate::show(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

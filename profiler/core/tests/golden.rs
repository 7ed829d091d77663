//! Golden outputs of the committed fixture recordings.
//!
//! Every recording under tests/fixtures/vN/ (real recordings of the test
//! workloads; tests/fixtures/README.md says how each was made) is read and
//! rendered by every exporter of the list the commands use
//! (`tprof_core::outputs::EXPORTERS`) but those of [`NOT_GOLDEN`]: the
//! terminal report, `--json`, folded cpu, offcpu and wall stacks, and the
//! timeline as trace event JSON and as HTML. A format added to the list
//! has golden files from its first bless. Each output must equal, byte
//! for byte, its file in tests/golden/vN/NAME/ (an output the command
//! refuses, such as folded stacks of a recording without stacks, is its
//! error message, in `OUTPUT.error`).
//!
//! A change that alters an output on purpose re-blesses them:
//!
//! ```text
//! TPROF_BLESS=1 cargo test -p tprof-core --test golden
//! ```
//!
//! and the diff of tests/golden/ shows, and the commit says, what changed.

use std::fs;
use std::path::{Path, PathBuf};

use tprof_core::analysis::{
    self,
    flame::{Filter, FlameKind},
};
use tprof_core::outputs::{self, Exporter, Input, Reads};
use tprof_core::recording::{FORMAT_VERSION, MAGIC, OLDEST_READABLE_VERSION};

/// Relative to the package root, where cargo runs integration tests: the
/// paths the outputs name (titles, errors) are these, whoever checks out
/// the repository where.
const FIXTURES: &str = "tests/fixtures";
const GOLDEN: &str = "tests/golden";

/// Set (to anything but 0) to rewrite the golden files instead of checking.
const BLESS_VAR: &str = "TPROF_BLESS";

/// One output: its bytes, or the error the command would print.
type Output = Result<Vec<u8>, String>;

/// The exporters without golden files, by name: the SVGs (inferno draws
/// them from the folded stacks, which have golden files; a new inferno
/// would change every byte), and pprof's and Perfetto's protobufs, which
/// tests/exports.rs decodes and checks field by field.
const NOT_GOLDEN: [&str; 4] = ["flamegraph", "flamegraph-diff", "pprof", "perfetto"];

/// Every golden output of the recording at `path`, as `tprof report`,
/// `tprof report --json`, `tprof flamegraph --folded --kind K` and `tprof
/// timeline -o FILE.json|FILE.html` would write them, each with its file
/// name.
fn render(path: &Path) -> Vec<(String, Output)> {
    let model = outputs::load_model(path)
        .unwrap_or_else(|e| panic!("{} does not read: {e:#}", path.display()));
    let mut input = Input::new(&model, path);
    let mut outputs = Vec::new();
    for exporter in outputs::EXPORTERS {
        if NOT_GOLDEN.contains(&exporter.name) {
            continue;
        }
        let kinds: &[FlameKind] = if exporter.shows_stacks() {
            &FlameKind::ALL
        } else {
            &[FlameKind::Cpu]
        };
        for &kind in kinds {
            input.kind = kind;
            let mut bytes = Vec::new();
            let output = outputs::write(exporter, &input, &mut bytes)
                .map(|()| bytes)
                .map_err(|e| format!("{e:#}"));
            outputs.push((file_name_of(exporter, kind), output));
        }
    }
    outputs
}

/// Every exporter the goldens leave out is one of the list, and no two
/// golden outputs share a file.
#[test]
fn golden_files_are_told_apart() {
    for name in NOT_GOLDEN {
        assert!(outputs::exporter(name).is_some(), "no exporter {name}");
    }
    let (_, _, path) = fixtures().into_iter().next().expect("a fixture");
    let names: Vec<String> = render(&path).into_iter().map(|(name, _)| name).collect();
    for (n, name) in names.iter().enumerate() {
        assert!(!names[..n].contains(name), "two outputs write {name}");
    }
}

/// The golden file of an exporter's output: KIND.EXT for stacks,
/// report.EXT for the analysis, timeline.EXT for a timeline.
fn file_name_of(exporter: &Exporter, kind: FlameKind) -> String {
    let what = match exporter.reads {
        Reads::Stacks(_) | Reads::TwoRecordings(_) => kind.name(),
        Reads::Summary(_) => "report",
        Reads::Timeline { .. } => "timeline",
    };
    format!("{what}.{}", exporter.extension())
}

/// Every fixture, as (format version directory, name, path), sorted.
fn fixtures() -> Vec<(String, String, PathBuf)> {
    let root = Path::new(FIXTURES);
    assert!(
        root.is_dir(),
        "{FIXTURES} not found from {}: cargo runs integration tests in the package root",
        std::env::current_dir().unwrap_or_default().display()
    );
    let mut out = Vec::new();
    for version in sorted_dir(root).into_iter().filter(|p| p.is_dir()) {
        let version_name = file_name(&version);
        for path in sorted_dir(&version) {
            if path.extension().is_some_and(|e| e == "tprof") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                out.push((version_name.clone(), name, path));
            }
        }
    }
    out
}

fn sorted_dir(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    paths.sort();
    paths
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

fn blessing() -> bool {
    std::env::var_os(BLESS_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The golden file of an output: NAME, or NAME.error for an error.
fn golden_file(dir: &Path, name: &str, output: &Output) -> PathBuf {
    match output {
        Ok(_) => dir.join(name),
        Err(_) => dir.join(format!("{name}.error")),
    }
}

fn golden_bytes(output: &Output) -> Vec<u8> {
    match output {
        Ok(bytes) => bytes.clone(),
        Err(message) => format!("{message}\n").into_bytes(),
    }
}

/// Where two outputs first differ, for the failure message: the line
/// number and both lines (cut short; the HTML page is one long line).
fn first_difference(expected: &[u8], actual: &[u8]) -> String {
    let at = expected
        .iter()
        .zip(actual)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(actual.len()));
    let line = expected[..at].split(|&b| b == b'\n').count();
    let excerpt = |bytes: &[u8]| {
        let start = bytes[..at.min(bytes.len())]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
            .max(at.saturating_sub(80));
        let end = bytes[at.min(bytes.len())..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| at + i)
            .min(at + 80);
        String::from_utf8_lossy(&bytes[start..end]).into_owned()
    };
    format!(
        "first difference at byte {at} (line {line}):\n      golden: {:?}\n      now:    {:?}",
        excerpt(expected),
        excerpt(actual)
    )
}

/// Writes a fixture's golden files and removes any it no longer makes.
fn bless(dir: &Path, outputs: &[(String, Output)]) {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let mut kept = Vec::new();
    for (name, output) in outputs {
        let file = golden_file(dir, name, output);
        fs::write(&file, golden_bytes(output))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
        kept.push(file);
    }
    for stale in sorted_dir(dir).into_iter().filter(|p| !kept.contains(p)) {
        fs::remove_file(&stale)
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", stale.display()));
    }
}

/// What differs between a fixture's outputs and its golden files.
fn check(dir: &Path, outputs: &[(String, Output)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expected_files = Vec::new();
    for (name, output) in outputs {
        let file = golden_file(dir, name, output);
        expected_files.push(file.clone());
        let Ok(golden) = fs::read(&file) else {
            problems.push(format!("{}: no golden file", file.display()));
            continue;
        };
        let now = golden_bytes(output);
        if golden != now {
            problems.push(format!(
                "{}: differs; {}",
                file.display(),
                first_difference(&golden, &now)
            ));
        }
    }
    if dir.is_dir() {
        for stale in sorted_dir(dir)
            .into_iter()
            .filter(|p| !expected_files.contains(p))
        {
            problems.push(format!("{}: no output makes it any more", stale.display()));
        }
    }
    problems
}

/// The outputs of every fixture equal their golden files; also, rendering a
/// fixture twice gives the same bytes (a HashMap's random order leaking into
/// an output would show here rather than as a flaky golden).
#[test]
fn fixtures_render_as_blessed() {
    let fixtures = fixtures();
    assert!(!fixtures.is_empty(), "no fixtures under {FIXTURES}");
    let mut problems = Vec::new();
    for (version, name, path) in &fixtures {
        let outputs = render(path);
        for ((output, first), (_, second)) in outputs.iter().zip(render(path)) {
            assert!(
                *first == second,
                "{output} of {} differs between two renderings: something in it is not \
                 deterministic",
                path.display()
            );
        }
        let dir = Path::new(GOLDEN).join(version).join(name);
        if blessing() {
            bless(&dir, &outputs);
        } else {
            problems.extend(check(&dir, &outputs));
        }
    }
    problems.extend(stale_golden_dirs(&fixtures));
    assert!(
        problems.is_empty(),
        "outputs differ from their golden files:\n  - {}\n\nIf the change is intended, re-bless \
         with `{BLESS_VAR}=1 cargo test -p tprof-core --test golden`, review the diff of {GOLDEN}/ \
         and say in the commit what changed and why.",
        problems.join("\n  - ")
    );
}

/// Golden directories whose fixture is gone (removed when blessing).
fn stale_golden_dirs(fixtures: &[(String, String, PathBuf)]) -> Vec<String> {
    let wanted: Vec<PathBuf> = fixtures
        .iter()
        .map(|(version, name, _)| Path::new(GOLDEN).join(version).join(name))
        .collect();
    let mut problems = Vec::new();
    for version in sorted_dir(Path::new(GOLDEN))
        .into_iter()
        .filter(|p| p.is_dir())
    {
        for dir in sorted_dir(&version)
            .into_iter()
            .filter(|p| !wanted.contains(p))
        {
            if blessing() {
                fs::remove_dir_all(&dir)
                    .unwrap_or_else(|e| panic!("cannot remove {}: {e}", dir.display()));
            } else {
                problems.push(format!("{}: its fixture is gone", dir.display()));
            }
        }
    }
    problems
}

/// The format version in a fixture's preamble.
fn version_of(path: &Path) -> u32 {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_eq!(bytes[..8], MAGIC, "{} is not a recording", path.display());
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

/// A fixture of every format version this reader reads is committed, in
/// the directory of its version, and is a recording of that version.
#[test]
fn a_fixture_of_every_readable_version() {
    let fixtures = fixtures();
    for version in OLDEST_READABLE_VERSION..=FORMAT_VERSION {
        let dir = format!("v{version}");
        let of_version: Vec<&PathBuf> = fixtures
            .iter()
            .filter(|(v, _, _)| *v == dir)
            .map(|(_, _, p)| p)
            .collect();
        assert!(
            !of_version.is_empty(),
            "no fixture of format version {version} under {FIXTURES}/{dir}"
        );
        for path in of_version {
            assert_eq!(version_of(path), version, "{}", path.display());
        }
    }
}

/// Recordings of the older versions still read and render: a v1 file as
/// one without stacks or CUDA, a v2 file as one with stacks and no CUDA.
/// (Their exact outputs are in the goldens; this says what they must mean.)
#[test]
fn old_versions_read_and_render() {
    let fixtures = fixtures();
    for (version, has_stacks) in [("v1", false), ("v2", true)] {
        let of_version: Vec<&PathBuf> = fixtures
            .iter()
            .filter(|(v, _, _)| v == version)
            .map(|(_, _, p)| p)
            .collect();
        assert!(!of_version.is_empty(), "no {version} fixture");
        for path in of_version {
            let model = outputs::load_model(path).unwrap();
            let summary = analysis::summarize(&model);
            assert!(
                summary.events > 0 && !summary.threads.is_empty() && summary.steps.count > 0,
                "{} reads as an empty job: {} events, {} threads, {} steps",
                path.display(),
                summary.events,
                summary.threads.len(),
                summary.steps.count
            );
            assert!(
                !summary.findings.is_empty(),
                "{}: no finding",
                path.display()
            );
            assert!(!summary.cuda.visible, "{}: CUDA before v3", path.display());
            let stacks = outputs::folded(&model, path, FlameKind::Cpu, &Filter::default());
            if has_stacks {
                let lines = stacks.unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                assert!(!lines.is_empty(), "{}", path.display());
            } else {
                let err = stacks.expect_err("a v1 recording has no stacks");
                assert!(format!("{err}").contains("has no stacks"), "{err}");
            }
        }
    }
}

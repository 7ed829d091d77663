//! Exports and merges, checked with other projects' own tools: a Perfetto
//! trace of a real recording decodes with Perfetto's proto definitions and
//! holds every thread the model has, with its slices and their time; a
//! pprof profile of a workload with known function shares shows them in
//! `go tool pprof`; a merge of two concurrent "ranks", one with a starved
//! input pipeline, names it the straggler; and a recording whose wall
//! clock anchor was moved by a known amount is reported that far off.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tprof_core::model::Model;
use tprof_core::outputs::load_model;
use tprof_core::recording::{self, record};
use tprof_tests::{
    FakeNvml, Running, Traced, build_workload, data_file, flamegraph_folded, go_pprof,
    perfetto_summary, record_command, require_root, show, tprof, trace_workload_env,
    trace_workload_with,
};

const RECORD_TIMEOUT: Duration = Duration::from_mins(2);

/// `tprof ARGS...`, which must succeed: its stdout.
fn run_tprof(args: &[&OsStr]) -> String {
    let out = tprof().args(args).output().expect("run tprof");
    assert!(
        out.status.success(),
        "tprof {args:?} failed: {}",
        show(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pipeline reading its batches with O_DIRECT (block IO, so a disk
/// queue counter), with the fake NVML library's GPU (utilization counters).
fn trace_pipeline_with_disk_and_gpu() -> Traced {
    let file = data_file(32);
    let nvml = FakeNvml::Full.build();
    let args = ["2", "40", "256", "1", "io", file.path_str()];
    trace_workload_env(
        "pipeline",
        &["--nvml-lib", nvml.to_str().expect("utf-8 path")],
        &args,
        &[("FAKE_NVML_SCRIPT", OsStr::new("busy:80:0.3,idle:0:0.2"))],
    )
}

#[test]
fn perfetto_export_decodes_with_perfettos_definitions() {
    require_root();
    let traced = trace_pipeline_with_disk_and_gpu();
    let trace = traced.dir.path().join("x.pftrace");
    run_tprof(&[
        "export".as_ref(),
        traced.recording.as_os_str(),
        "--format".as_ref(),
        "perfetto".as_ref(),
        "-o".as_ref(),
        trace.as_os_str(),
    ]);
    let summary = perfetto_summary(&trace);
    assert_eq!(summary["unknown_fields"], Value::Array(vec![]), "{summary}");
    assert_eq!(summary["unclosed_slices"], 0, "{summary}");
    let model = load_model(&traced.recording).expect("the recording reads");
    let tracks = summary["threads"].as_array().expect("threads");
    assert_eq!(
        tracks.len(),
        model.threads.len(),
        "one track per thread: {summary}"
    );
    for t in &model.threads {
        let track = tracks
            .iter()
            .find(|k| k["pid"] == t.pid && k["tid"] == t.tid && k["state_ns"] == t.lifetime_ns())
            .unwrap_or_else(|| panic!("no track for thread {} ({}): {summary}", t.tid, t.comm));
        assert_eq!(
            track["state_slices"].as_u64(),
            Some(t.intervals.len() as u64),
            "thread {} ({})",
            t.tid,
            t.comm
        );
    }
    let counter = |name: &str| {
        summary["counters"]
            .as_array()
            .expect("counters")
            .iter()
            .filter(|c| c["name"] == name)
            .map(|c| c["values"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    assert!(counter("GPU utilization %") > 0, "{summary}");
    assert!(counter("in flight") > 0, "{summary}");
    assert!(
        summary["flows_ended"].as_u64() > Some(0),
        "deliveries: {summary}"
    );
    eprintln!(
        "{} packets, {} thread tracks, {} GPU and {} disk counter values, {} flows",
        summary["packets"],
        tracks.len(),
        counter("GPU utilization %"),
        counter("in flight"),
        summary["flows"]
    );
    checker_sees_unknown_fields(&trace);
}

/// The checker is not blind: a packet with a field Perfetto does not
/// define, appended to a good trace, is reported.
fn checker_sees_unknown_fields(trace: &Path) {
    let mut bytes = std::fs::read(trace).expect("read the trace");
    // Trace.packet (field 1, length 6) holding field 2^29 - 1 = 1.
    bytes.extend([0x0a, 0x06, 0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01]);
    let bad = trace.with_extension("bad.pftrace");
    std::fs::write(&bad, bytes).expect("write");
    let summary = perfetto_summary(&bad);
    let unknown = summary["unknown_fields"].as_array().expect("a list");
    assert_eq!(unknown.len(), 1, "{summary}");
}

/// Each function's flat share in `go tool pprof -top`, in percent.
fn pprof_flat_percent(top: &str, function: &str) -> f64 {
    top.lines()
        .find(|l| l.split_whitespace().last() == Some(function))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|p| p.trim_end_matches('%').parse().ok())
        .unwrap_or(0.0)
}

/// Each leaf function's share of tprof's own folded stacks, in percent.
fn folded_leaf_percent(lines: &[(String, u64)], function: &str) -> f64 {
    let total: u64 = lines.iter().map(|(_, w)| w).sum();
    let leaf: u64 = lines
        .iter()
        .filter(|(s, _)| s.rsplit(';').next() == Some(function))
        .map(|(_, w)| w)
        .sum();
    100.0 * leaf as f64 / total as f64
}

#[test]
fn pprof_export_shows_the_folded_shares_in_go_tool_pprof() {
    require_root();
    let traced = trace_workload_with("two_functions", &["--hz", "199"], &["2"]);
    let profile = traced.dir.path().join("cpu.pb.gz");
    run_tprof(&[
        "export".as_ref(),
        traced.recording.as_os_str(),
        "--format".as_ref(),
        "pprof".as_ref(),
        "-o".as_ref(),
        profile.as_os_str(),
    ]);
    let top = go_pprof(&["-top", "-nodecount=1000"], &profile);
    let folded = flamegraph_folded(&traced.recording, &["--kind", "cpu"]);
    for function in ["burn_a", "burn_b"] {
        let (pprof, tprof) = (
            pprof_flat_percent(&top, function),
            folded_leaf_percent(&folded, function),
        );
        eprintln!("{function}: go tool pprof -top {pprof:.2}%, tprof folded {tprof:.2}%");
        assert!(tprof > 10.0, "{function} barely sampled: {folded:#?}");
        assert!(
            (pprof - tprof).abs() <= 2.0,
            "{function}: {pprof}% in go tool pprof, {tprof}% in tprof's folded stacks:\n{top}"
        );
    }
    // The raw dump has the samples' labels and the locations' mappings.
    let raw = go_pprof(&["-raw"], &profile);
    for needle in [
        "role:[trainer]",
        "thread:[two_functions]",
        "burn_a",
        "Mappings",
    ] {
        assert!(raw.contains(needle), "{needle} missing from -raw:\n{raw}");
    }
}

/// `tprof record -- pipeline ARGS` started in the background, as rank
/// `rank` of a two-rank job.
fn record_rank(dir: &Path, rank: u32, args: &[&str]) -> (Running, PathBuf) {
    let recording = dir.join(format!("rank{rank}.tprof"));
    let binary = build_workload("pipeline");
    let mut cmd: Vec<&str> = vec![binary.to_str().expect("utf-8 path")];
    cmd.extend_from_slice(args);
    let mut command = record_command(
        &recording,
        &["--no-report", "--no-timeline", "--no-flamegraphs"],
        &cmd,
    );
    command
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "2")
        .env("TPROF_TRUTH_FILE", dir.join(format!("truth{rank}")));
    (Running::spawn(&mut command), recording)
}

/// `tprof merge PATHS... -o OUT --json`: the report.
fn merge_json(paths: &[&Path], out: &Path) -> Value {
    let mut args: Vec<&OsStr> = vec!["merge".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    args.extend(["-o".as_ref(), out.as_os_str(), "--json".as_ref()]);
    let stdout = run_tprof(&args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("merge --json: {e}\n{stdout}"))
}

#[test]
fn merge_names_the_starved_rank_and_reports_a_moved_clock() {
    require_root();
    let dir = tempfile::tempdir().expect("temp dir");
    // Rank 0 is fed: two workers, 10 ms of CPU per batch, 1 ms of training
    // (its trainer still waits a little for each batch, so its steps can
    // be timed). Rank 1 is starved: one worker, 40 ms per batch.
    // 160 batches: long enough (about 1.5 s) to overlap most of rank 1's
    // (80 ran 0.76 s, and overlapped rank 1's steps by under 0.5 s once).
    let (r0, rank0) = record_rank(dir.path(), 0, &["2", "160", "10", "1", "cpu"]);
    let (r1, rank1) = record_rank(dir.path(), 1, &["1", "40", "40", "1", "cpu"]);
    for (run, rank) in [(r0, 0), (r1, 1)] {
        let done = run.wait(RECORD_TIMEOUT);
        assert!(
            done.status.success(),
            "rank {rank}'s tprof failed: {done:#?}"
        );
    }
    let job = dir.path().join("job.pftrace");
    let report = merge_json(&[&rank0, &rank1], &job);
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    let host = load_model(&rank0).unwrap().hostname;
    let ranks = report["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2);
    assert_eq!(ranks[1]["node"], format!("{host}:1"));
    assert_eq!(
        (ranks[0]["rank"].as_u64(), ranks[1]["world_size"].as_u64()),
        (Some(0), Some(2))
    );
    let s = &report["straggler"];
    assert_eq!(s["rank"], 1, "the starved rank is the straggler: {report}");
    assert_eq!(s["file"], rank1.display().to_string());
    assert_eq!(s["basis"], "step_time", "{report}");
    assert_eq!(s["cause"], "data_wait", "{report}");
    assert!(s["ratio_to_others"].as_f64() > Some(1.5), "{report}");
    // Rank 0 ran at the same time: its trainer's time over rank 1's steps.
    let other = &s["others"][0];
    assert_eq!(other["rank"], 0);
    assert!(other["overlap_s"].as_f64() > Some(0.5), "{report}");
    assert!(other["blocked_s"].as_f64() <= other["overlap_s"].as_f64());
    assert_eq!(
        report["clocks"]["offsets"],
        Value::Array(vec![]),
        "{report}"
    );
    // Each recording is a machine of its own in the trace.
    let trace = perfetto_summary(&job);
    assert_eq!(trace["unknown_fields"], Value::Array(vec![]));
    assert_eq!(trace["machines"]["1"], format!("{host}:0"));
    assert_eq!(trace["machines"]["2"], format!("{host}:1"));
    let machines: Vec<u64> = trace["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["machine"].as_u64().unwrap())
        .collect();
    assert!(machines.contains(&1) && machines.contains(&2), "{trace}");

    // Rank 1 again, its wall-clock anchors moved 7 s later.
    const MOVED_NS: i64 = 7_000_000_000;
    let moved = dir.path().join("rank1-moved.tprof");
    move_wall_clock(&rank1, &moved, MOVED_NS);
    let report = merge_json(&[&rank0, &moved], &dir.path().join("moved.pftrace"));
    let offsets = report["clocks"]["offsets"].as_array().expect("offsets");
    eprintln!(
        "{}",
        serde_json::to_string_pretty(&report["clocks"]).unwrap()
    );
    assert_eq!(offsets.len(), 1, "{report}");
    let o = &offsets[0];
    assert_eq!(o["file"], moved.display().to_string());
    assert_eq!(o["against"], rank0.display().to_string());
    let offset = o["offset_ns"].as_i64().unwrap();
    let uncertainty = o["uncertainty_ns"].as_i64().unwrap();
    // The two recordings' own anchors agree to their uncertainty (same
    // boot), so what is left is the move.
    assert!(
        (offset - MOVED_NS).abs() <= uncertainty + 1_000,
        "offset {offset} ns, moved {MOVED_NS} ns, uncertainty {uncertainty} ns"
    );
    // Reported, not applied: the moved rank no longer overlaps rank 0.
    assert!(
        report["straggler"]["others"][0]["overlap_s"].as_f64() < Some(0.5),
        "{report}"
    );
}

/// Copies the recording at `from` to `to` with its header's start anchor
/// and its footer's end anchor `by_ns` later on the wall clock: a machine
/// whose wall clock is that far off. Every other record is copied as is.
fn move_wall_clock(from: &Path, to: &Path, by_ns: i64) {
    let bytes = std::fs::read(from).expect("read the recording");
    let mut out = bytes[..recording::PREAMBLE_LEN].to_vec();
    let mut offset = recording::PREAMBLE_LEN;
    let mut moved = 0;
    while offset + 8 <= bytes.len() {
        let kind = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap()) as usize;
        let payload = &bytes[offset + 8..offset + 8 + len];
        let anchor = match kind {
            record::HEADER => Some("start"),
            record::FOOTER => Some("end"),
            _ => None,
        };
        let payload = match anchor {
            Some(field) => {
                let mut json: Value = serde_json::from_slice(payload).expect("JSON");
                let real = json[field]["realtime_ns"].as_i64().expect("an anchor");
                json[field]["realtime_ns"] = (real + by_ns).into();
                moved += 1;
                serde_json::to_vec(&json).unwrap()
            }
            None => payload.to_vec(),
        };
        out.extend(kind.to_le_bytes());
        out.extend((payload.len() as u32).to_le_bytes());
        out.extend(payload);
        offset += 8 + len;
    }
    assert_eq!(moved, 2, "a header and a footer");
    std::fs::write(to, out).expect("write the moved recording");
    // The copy reads, with the anchors moved and nothing else.
    let (a, b): (Model, Model) = (load_model(from).unwrap(), load_model(to).unwrap());
    assert_eq!(
        b.start_anchor.realtime_ns as i64 - a.start_anchor.realtime_ns as i64,
        by_ns
    );
    assert_eq!(a.events, b.events);
}

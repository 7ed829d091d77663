//! Timelines: `tprof record` of the data-loading pipeline (a trainer
//! process and four worker processes of one `pt_data_worker` and three
//! `omp_worker` threads each, by construction) writes REC.timeline.json and
//! REC.timeline.html. The JSON must be a valid trace event file with a
//! track per thread whose state slices add up to what the report says; the
//! page must load in headless Chromium without a console error and draw.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tprof_tests::{Traced, chromium_screenshot, require_root, show, tprof, trace_workload_env};

const WORKERS: usize = 4;
const POOL: usize = 3;

/// Four CPU-bound workers with three pool threads each on two cores: 80
/// batches of 20 ms of CPU, 2 ms of training each.
fn trace_pipeline() -> Traced {
    trace_workload_env(
        "pipeline",
        &[],
        &["4", "80", "20", "2", "cpu"],
        &[("PIPELINE_POOL", OsStr::new("3"))],
    )
}

/// One thread's track in a trace: its name and its complete slices as
/// (name, ts µs, dur µs).
#[derive(Debug, Default)]
struct Track {
    name: Option<String>,
    slices: Vec<(String, f64, f64)>,
}

/// Where a flow arrow ends: (pid, tid, ts µs).
type FlowEnd = (u64, u64, f64);

/// A trace checked against the trace event format.
struct Trace {
    processes: HashMap<u64, String>,
    tracks: BTreeMap<(u64, u64), Track>,
    /// Flow id → (start (pid, tid, ts), end (pid, tid, ts)).
    flows: BTreeMap<u64, (FlowEnd, FlowEnd)>,
    min_slice_us: f64,
}

/// Parses a trace event JSON file and checks what viewers rely on: every
/// event has the fields of its phase, every thread with slices is named,
/// slices on one thread nest or follow each other, and flows pair up with
/// both ends inside a slice of their thread.
fn read_trace(path: &Path) -> Trace {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let events = json["traceEvents"].as_array().expect("traceEvents array");
    let mut trace = Trace {
        processes: HashMap::new(),
        tracks: BTreeMap::new(),
        flows: BTreeMap::new(),
        min_slice_us: json["otherData"]["min_slice_us"]
            .as_f64()
            .expect("min_slice_us"),
    };
    let mut flow_starts = HashMap::new();
    let mut flow_ends = HashMap::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        let pid = e["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {e}"));
        let tid = || e["tid"].as_u64().unwrap_or_else(|| panic!("no tid: {e}"));
        let ts = || {
            let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("no ts: {e}"));
            assert!(ts >= 0.0, "negative ts: {e}");
            ts
        };
        match ph {
            "M" => {
                let name = e["args"]["name"].as_str().map(String::from);
                match e["name"].as_str() {
                    Some("process_name") => {
                        trace.processes.insert(pid, name.expect("process name"));
                    }
                    Some("thread_name") => {
                        trace.tracks.entry((pid, tid())).or_default().name = name;
                    }
                    Some("process_sort_index" | "thread_sort_index") => {
                        assert!(e["args"]["sort_index"].is_i64(), "{e}");
                    }
                    _ => panic!("unknown metadata event: {e}"),
                }
            }
            "X" => {
                let dur = e["dur"].as_f64().unwrap_or_else(|| panic!("no dur: {e}"));
                assert!(dur >= 0.0, "negative dur: {e}");
                let name = e["name"].as_str().unwrap_or_else(|| panic!("no name: {e}"));
                let track = trace.tracks.entry((pid, tid())).or_default();
                track.slices.push((name.to_string(), ts(), dur));
            }
            "C" => {
                ts();
                let args = e["args"]
                    .as_object()
                    .unwrap_or_else(|| panic!("no args: {e}"));
                assert!(args.values().all(Value::is_number), "{e}");
            }
            "s" => {
                let id = e["id"].as_u64().expect("flow id");
                assert!(flow_starts.insert(id, (pid, tid(), ts())).is_none(), "{e}");
            }
            "f" => {
                let id = e["id"].as_u64().expect("flow id");
                assert!(flow_ends.insert(id, (pid, tid(), ts())).is_none(), "{e}");
            }
            _ => panic!("unexpected phase: {e}"),
        }
    }
    for ((pid, tid), track) in &mut trace.tracks {
        assert!(track.name.is_some(), "thread {pid}/{tid} has no name");
        assert!(
            trace.processes.contains_key(pid),
            "process {pid} has no name"
        );
        track.slices.sort_by(|a, b| a.1.total_cmp(&b.1));
        // Each slice ends before the next begins, or contains it.
        let mut open: Vec<f64> = Vec::new();
        for (name, ts, dur) in &track.slices {
            while open.last().is_some_and(|&end| end <= ts + 1e-3) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(
                    ts + dur <= end + 1e-3,
                    "{name} at {ts} overlaps its parent on {pid}/{tid}"
                );
            }
            open.push(ts + dur);
        }
    }
    assert_eq!(flow_starts.len(), flow_ends.len(), "unpaired flows");
    for (id, start) in flow_starts {
        let end = flow_ends
            .remove(&id)
            .unwrap_or_else(|| panic!("flow {id} has no end"));
        for (pid, tid, ts) in [start, end] {
            let inside = trace.tracks.get(&(pid, tid)).is_some_and(|t| {
                t.slices
                    .iter()
                    .any(|(_, s, d)| *s <= ts + 1e-3 && ts <= s + d + 1e-3)
            });
            assert!(
                inside,
                "flow {id} end at {ts} is in no slice of {pid}/{tid}"
            );
        }
        trace.flows.insert(id, (start, end));
    }
    trace
}

/// `REC.timeline.EXT`, which `tprof record` writes next to REC.
fn beside(traced: &Traced, ext: &str) -> PathBuf {
    let mut name = traced.recording.as_os_str().to_owned();
    name.push(format!(".timeline.{ext}"));
    name.into()
}

/// The state slices of the tracks named `name`, by tid.
fn tracks_named<'a>(trace: &'a Trace, name: &str) -> Vec<(u64, u64, &'a Track)> {
    trace
        .tracks
        .iter()
        .filter(|(_, t)| t.name.as_deref() == Some(name))
        .map(|(&(pid, tid), t)| (pid, tid, t))
        .collect()
}

fn time_in(track: &Track, states: &[&str]) -> f64 {
    let us: f64 = track
        .slices
        .iter()
        .filter(|(name, _, _)| states.contains(&name.as_str()))
        .map(|(_, _, dur)| dur)
        .sum();
    us / 1e6
}

/// Every thread of the pipeline has a named track in its process, with
/// state slices that cover its life without gaps; flows go from a worker to
/// the trainer, one per batch the report says it waited for, and a step
/// per batch read. Unmerged (`--min-slice 1ns`), the time in each state is the
/// report's to the µs.
#[test]
fn json_has_a_track_per_thread() {
    require_root();
    let traced = trace_pipeline();
    let trace = read_trace(&beside(&traced, "json"));

    let trainers = tracks_named(&trace, "trainer");
    let workers = tracks_named(&trace, "pt_data_worker");
    let pools = tracks_named(&trace, "omp_worker");
    assert_eq!(trainers.len(), 1, "{:?}", trace.processes);
    assert_eq!(workers.len(), WORKERS);
    assert_eq!(pools.len(), WORKERS * POOL);
    let (trainer_pid, trainer_tid, _) = trainers[0];
    // Named by role, then the process' name (which a worker's rename of its
    // main thread may change before tprof reads it).
    assert!(trace.processes[&trainer_pid].starts_with("trainer: "));
    for &(pid, _, _) in &workers {
        assert!(trace.processes[&pid].starts_with("data worker: "));
        let in_pid = pools.iter().filter(|p| p.0 == pid).count();
        assert_eq!(in_pid, POOL, "pool threads of worker {pid}");
    }
    for (pid, tid, track) in trainers.iter().chain(&workers).chain(&pools) {
        let thread = traced.report.thread(*tid as i64);
        assert_eq!(thread.pid, *pid as i64);
        let slices = &track.slices;
        assert!(!slices.is_empty(), "no slices for {tid}");
        for pair in slices.windows(2) {
            let end = pair[0].1 + pair[0].2;
            assert!((end - pair[1].1).abs() < 1e-3, "gap on {tid}: {pair:?}");
        }
        let covered: f64 = slices.iter().map(|s| s.2).sum::<f64>() / 1e6;
        assert!(
            (covered - thread.lifetime_s).abs() < 1e-5,
            "{tid}: slices cover {covered} s of a {} s life",
            thread.lifetime_s
        );
    }
    assert_eq!(trace.min_slice_us, 50.0);

    // The trainer reads batches from a pipe the workers fill: it waits on
    // them, and each wait ends with a worker's wakeup.
    let waited = traced.report.steps.deliveries as usize;
    assert!(waited > 0, "the trainer never waited for a batch");
    assert_eq!(trace.flows.len(), waited, "a delivery per batch waited for");
    let worker_tids: Vec<u64> = workers.iter().map(|w| w.1).collect();
    for (start, end) in trace.flows.values() {
        assert!(worker_tids.contains(&start.1), "delivery from {start:?}");
        assert_eq!((end.0, end.1), (trainer_pid, trainer_tid));
    }
    // A step per batch the trainer read, waited for or ready.
    let steps = tracks_named(&trace, "steps");
    let step_slices: usize = steps.iter().map(|s| s.2.slices.len()).sum();
    assert_eq!(
        step_slices, traced.report.steps.count as usize,
        "a slice per step"
    );
    assert!(
        steps.iter().all(|s| s.0 == trainer_pid),
        "in the trainer's process"
    );

    let unmerged = traced.dir.path().join("unmerged.json");
    let out = tprof()
        .arg("timeline")
        .arg(&traced.recording)
        .args(["--min-slice", "1ns", "-o"])
        .arg(&unmerged)
        .output()
        .expect("run tprof timeline");
    assert!(out.status.success(), "{}", show(&out));
    let trace = read_trace(&unmerged);
    assert_eq!(trace.min_slice_us, 0.001);
    check_thread_states(&traced, &trace);

    // The default output is the page record already wrote: not clobbered
    // without --force. An unknown extension names the ones there are.
    for (args, says) in [
        (&[][..], "already exists"),
        (&["-o", "timeline.svg"], "FILE.json"),
    ] {
        let out = tprof()
            .arg("timeline")
            .arg(&traced.recording)
            .args(args)
            .current_dir(traced.dir.path())
            .output()
            .expect("run tprof timeline");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}", show(&out));
        assert!(
            stderr.starts_with("error: ") && stderr.lines().count() == 1 && stderr.contains(says),
            "{}",
            show(&out)
        );
    }
}

/// Each thread's time in each state, in the timeline and in the report.
fn check_thread_states(traced: &Traced, trace: &Trace) {
    for ((_, tid), track) in &trace.tracks {
        let Some(thread) = traced.report.threads.iter().find(|t| t.tid == *tid as i64) else {
            continue; // steps, stalls, disk queue slots
        };
        for (states, expected) in [
            (&["running"][..], thread.on_cpu_s),
            (&["runnable"], thread.runnable_s),
            (&["IO"], thread.io_s),
            (&["futex"], thread.futex_s),
            (&["sleep", "sleep (D)"], thread.sleep_s),
        ] {
            let got = time_in(track, states);
            assert!(
                (got - expected).abs() < 1e-5,
                "{tid} {states:?}: {got} s in the timeline, {expected} s in the report"
            );
        }
    }
}

/// The page loads in headless Chromium, logs that it drew every lane and
/// nothing else, and the screenshot shows running and runnable time in the
/// state colors, well beyond the legend's swatches.
#[test]
fn html_draws_in_headless_chromium() {
    require_root();
    let traced = trace_pipeline();
    let page = beside(&traced, "html");
    let html = std::fs::read_to_string(&page).expect("record writes REC.timeline.html");
    let lanes = embedded_data(&html)["lanes"]
        .as_array()
        .expect("lanes")
        .len();
    let png = traced.dir.path().join("timeline.png");
    let load = chromium_screenshot(&page, "", &png, (1400, 900));
    assert_eq!(
        load.console,
        vec![format!("tprof-timeline: drawn {lanes} tracks")],
        "console messages other than the page's own (stderr:\n{})",
        load.stderr
    );
    let pixels = color_counts(&png);
    // Sixteen CPU-bound threads on two cores: most of the picture is
    // threads running or waiting for a CPU.
    for (state, rgb) in [
        ("running", [0x2f, 0x9e, 0x44]),
        ("runnable", [0xf0, 0x8c, 0x00]),
    ] {
        let n = pixels.get(&rgb).copied().unwrap_or(0);
        eprintln!("{state}: {n} pixels");
        // A legend swatch is 10×10.
        assert!(n > 1000, "{state} is hardly drawn ({n} pixels)");
    }
    // Zoomed to 20 ms, the page still draws without an error.
    let zoomed = chromium_screenshot(&page, "#zoom=1000000,1020000", &png, (1400, 900));
    assert_eq!(zoomed.console.len(), 1, "{:?}", zoomed.console);
}

/// The JSON inside the page's data script element.
fn embedded_data(html: &str) -> Value {
    let start = html.find("id=\"tprof-data\"").expect("data element");
    let rest = &html[start..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    let end = rest.find("</script>").expect("end of data");
    serde_json::from_str(&rest[..end]).expect("embedded JSON")
}

/// Pixels of each RGB color in a PNG.
fn color_counts(path: &Path) -> HashMap<[u8; 3], usize> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("a PNG screenshot");
    let mut buf = vec![0; reader.output_buffer_size().expect("image size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = info.color_type.samples();
    assert!(
        channels >= 3,
        "unexpected PNG color type {:?}",
        info.color_type
    );
    let mut counts = HashMap::new();
    for px in buf[..info.buffer_size()].chunks(channels) {
        *counts.entry([px[0], px[1], px[2]]).or_insert(0) += 1;
    }
    counts
}

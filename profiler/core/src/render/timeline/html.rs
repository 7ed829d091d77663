//! The timeline as one self-contained HTML page: no network, no library.
//! The page (timeline.html, timeline.js beside this file) draws lanes on a
//! canvas from the data embedded as JSON: GPU utilization on top, then each
//! process — the trainer's steps and stalls, the trainer, pin and worker
//! threads as state lanes, and the rest of its threads (thread pools)
//! folded into one busy/runnable count — and the disks last.
//!
//! Times in the data are whole µs since the recording started; counts are
//! in hundredths, to keep the page small.

use crate::analysis::anatomy::Phase;
use crate::analysis::timeline::PhaseSlice;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{self, Write};

use serde::Serialize;

use super::{
    Role, SliceKind, TimelineInput, bin_ns, fit_slices, folded, role_label, spread,
    tracks::period_starts,
};
use crate::model::{IoRequest, Thread, ThreadState};
use crate::recording::GpuMetric;

const TEMPLATE: &str = include_str!("timeline.html");
const SCRIPT: &str = include_str!("timeline.js");

/// Deliveries beyond this many are left out of the page (the JSON has all).
const MAX_DELIVERIES: usize = 50_000;
/// Stalls the page annotates.
const MAX_STALLS: usize = 20;

#[derive(Serialize)]
struct Page<'a> {
    title: &'a str,
    duration_us: u64,
    min_slice_us: f64,
    /// Slice kind names by code.
    states: Vec<&'static str>,
    lanes: Vec<Lane>,
    /// [start, end] of every step, flattened.
    steps: Vec<u64>,
    step_labels: Vec<String>,
    step_info: Vec<String>,
    stalls: Vec<StallOut>,
    /// [ts, from tid, to tid] of every delivery, flattened.
    deliveries: Vec<u64>,
    gpu_status: Option<&'a str>,
    /// Phase names by code, for the "phases" lanes.
    phases: Vec<&'static str>,
    /// What each phase slice went to, by index.
    phase_texts: Vec<String>,
}

#[derive(Serialize)]
struct StallOut {
    tid: u32,
    start: u64,
    end: u64,
    text: String,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Lane {
    /// A process' header row.
    Group { label: String },
    /// A row with only text.
    Note { label: String, text: String },
    /// A sampled value: [start, end, value] per sample, flattened.
    Level {
        label: String,
        sub: String,
        unit: String,
        max: u64,
        s: Vec<u64>,
    },
    /// One thread: [start, duration, code] per slice, flattened; code is
    /// the kind plus 8 × the intervals merged into it when more than one.
    States {
        label: String,
        sub: String,
        tid: u32,
        s: Vec<u64>,
    },
    /// Values per bin, in hundredths; stacked when more than one.
    Counter {
        label: String,
        sub: String,
        unit: String,
        bin_us: u64,
        max: f64,
        series: Vec<Series>,
    },
    /// The steps of the thread below it.
    Steps { label: String, tid: u32 },
    /// The phases of its steps: [start, duration, phase code, text index]
    /// per slice, flattened.
    Phases {
        label: String,
        tid: u32,
        s: Vec<u64>,
    },
    /// The stalls of a thread, with their blame.
    Stalls { label: String, tid: u32 },
}

#[derive(Serialize)]
struct Series {
    name: &'static str,
    v: Vec<u32>,
}

/// Writes the HTML page of `input`.
pub fn write(input: &TimelineInput, mut out: impl Write) -> io::Result<()> {
    let data = serde_json::to_string(&page(input))?;
    // Inside <script>, "</script>" in a thread name would end the element;
    // "<" occurs in JSON only inside strings, where \u003c means the same.
    let data = data.replace('<', "\\u003c");
    let (head, rest) = TEMPLATE.split_once("__TITLE__").expect("template title");
    let (middle, rest) = rest.split_once("__DATA__").expect("template data");
    let (before_script, tail) = rest.split_once("__SCRIPT__").expect("template script");
    out.write_all(head.as_bytes())?;
    out.write_all(escape_html(&input.title).as_bytes())?;
    out.write_all(middle.as_bytes())?;
    out.write_all(data.as_bytes())?;
    out.write_all(before_script.as_bytes())?;
    out.write_all(SCRIPT.as_bytes())?;
    out.write_all(tail.as_bytes())?;
    out.flush()
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn page<'a>(input: &'a TimelineInput) -> Page<'a> {
    let model = input.model;
    let origin = model.window_start_ns;
    let us = |ns: u64| ns.saturating_sub(origin).saturating_add(500) / 1000;
    let bin_ns = bin_ns(model.duration_ns());

    let order = input.process_order();
    let lane_threads: Vec<&Thread> = order
        .iter()
        .flat_map(|&pid| input.threads_of(pid))
        .filter(|t| !folded(input.role(t)))
        .collect();
    let (min_slice_ns, slices) = fit_slices(&lane_threads, input.limits);
    let slices_of: HashMap<(u32, u64), &Vec<super::Slice>> = lane_threads
        .iter()
        .zip(&slices)
        .map(|(t, s)| ((t.tid, t.start_ns), s))
        .collect();
    let stalled: Vec<u32> = input.stalls.iter().map(|s| s.tid).collect();

    let mut lanes = gpu_lanes(input, &us);
    let mut phase_texts: Vec<String> = Vec::new();
    for &pid in &order {
        lanes.push(Lane::Group {
            label: format!("{} (pid {pid})", input.process_label(pid)),
        });
        let threads = input.threads_of(pid);
        for thread in threads.iter().filter(|t| !folded(input.role(t))) {
            if input.steps.iter().any(|s| s.tid == thread.tid) {
                lanes.push(Lane::Steps {
                    label: "steps".into(),
                    tid: thread.tid,
                });
            }
            let phases: Vec<&PhaseSlice> = input
                .phases
                .iter()
                .filter(|p| p.tid == thread.tid)
                .collect();
            if !phases.is_empty() {
                let mut s = Vec::with_capacity(phases.len() * 4);
                for p in phases {
                    let text = format!("{}: {}", p.phase.title(), p.label);
                    let index = phase_texts
                        .iter()
                        .position(|t| *t == text)
                        .unwrap_or_else(|| {
                            phase_texts.push(text);
                            phase_texts.len() - 1
                        });
                    let code = Phase::ALL.iter().position(|&x| x == p.phase).unwrap_or(0);
                    let (start, end) = (us(p.start_ns), us(p.end_ns));
                    s.extend([start, end - start, code as u64, index as u64]);
                }
                lanes.push(Lane::Phases {
                    label: "phases".into(),
                    tid: thread.tid,
                    s,
                });
            }
            let slices = slices_of[&(thread.tid, thread.start_ns)];
            let mut s = Vec::with_capacity(slices.len() * 3);
            for slice in slices {
                let (start, end) = (us(slice.start_ns), us(slice.end_ns));
                let merged = if slice.parts > 1 {
                    u64::from(slice.parts)
                } else {
                    0
                };
                s.extend([start, end - start, slice.kind() as u64 + 8 * merged]);
            }
            lanes.push(Lane::States {
                label: input.thread_label(thread),
                sub: format!("tid {}, {}", thread.tid, role_label(input.role(thread))),
                tid: thread.tid,
                s,
            });
            if stalled.contains(&thread.tid) {
                lanes.push(Lane::Stalls {
                    label: "stalls".into(),
                    tid: thread.tid,
                });
            }
        }
        let pooled: Vec<&Thread> = threads
            .into_iter()
            .filter(|t| folded(input.role(t)))
            .collect();
        if !pooled.is_empty() {
            lanes.push(pool_lane(input, &pooled, bin_ns));
        }
    }
    lanes.extend(disk_lanes(input, bin_ns));

    let mut steps = Vec::with_capacity(input.steps.len() * 2);
    for step in input.steps {
        steps.extend([us(step.start_ns), us(step.end_ns)]);
    }
    let step_info = input
        .steps
        .iter()
        .map(|step| {
            let mut text = String::new();
            for (key, value) in &step.args {
                let _ = writeln!(text, "{key}: {value}");
            }
            text
        })
        .collect();
    let mut deliveries = Vec::new();
    for d in input.deliveries.iter().take(MAX_DELIVERIES) {
        deliveries.extend([us(d.ts), u64::from(d.from_tid), u64::from(d.to_tid)]);
    }
    Page {
        title: &input.title,
        duration_us: us(model.window_end_ns),
        min_slice_us: min_slice_ns as f64 / 1e3,
        states: SliceKind::ALL.iter().map(|k| k.name()).collect(),
        lanes,
        steps,
        step_labels: input.steps.iter().map(|s| s.label.clone()).collect(),
        step_info,
        stalls: input
            .stalls
            .iter()
            .take(MAX_STALLS)
            .map(|s| StallOut {
                tid: s.tid,
                start: us(s.start_ns),
                end: us(s.end_ns),
                text: s.annotation.clone(),
            })
            .collect(),
        deliveries,
        gpu_status: model.gpus.status.as_deref(),
        phases: Phase::ALL.iter().map(|p| p.name()).collect(),
        phase_texts,
    }
}

fn gpu_lanes(input: &TimelineInput, us: &dyn Fn(u64) -> u64) -> Vec<Lane> {
    let gpus = &input.model.gpus;
    if gpus.devices.is_empty() {
        let reason = gpus.status.as_deref().unwrap_or("no GPU was found");
        return vec![Lane::Note {
            label: "GPU".into(),
            text: format!("no GPU data: {reason}"),
        }];
    }
    let mut lanes = Vec::new();
    for gpu in &gpus.devices {
        let points = gpu.series(GpuMetric::GpuUtilPct);
        let mut s = Vec::with_capacity(points.len() * 3);
        for ((start, value), &(end, _)) in period_starts(points).into_iter().zip(points) {
            s.extend([us(start), us(end), value]);
        }
        lanes.push(Lane::Level {
            label: format!("GPU {}", gpu.index),
            sub: format!("{}: utilization", gpu.name),
            unit: "%".into(),
            max: 100,
            s,
        });
    }
    lanes
}

/// A process' folded threads as mean numbers running and runnable per bin.
fn pool_lane(input: &TimelineInput, threads: &[&Thread], bin_ns: u64) -> Lane {
    let model = input.model;
    let bins = model.duration_ns().div_ceil(bin_ns).max(1) as usize;
    let mut busy = vec![0u64; bins];
    let mut runnable = vec![0u64; bins];
    for thread in threads {
        for iv in thread.intervals.iter() {
            let into = match iv.state {
                ThreadState::Running => &mut busy,
                ThreadState::Runnable => &mut runnable,
                _ => continue,
            };
            spread(into, iv.start_ns, iv.end_ns, model.window_start_ns, bin_ns);
        }
    }
    let hundredths = |ns: Vec<u64>| -> Vec<u32> {
        ns.into_iter()
            .map(|v| ((v * 100 + bin_ns / 2) / bin_ns) as u32)
            .collect()
    };
    let roles: Vec<Role> = threads.iter().map(|t| input.role(t)).collect();
    let what = if roles.iter().all(|&r| r == Role::Pool) {
        "pool threads"
    } else {
        "other threads"
    };
    let mut names: Vec<&str> = threads.iter().map(|t| t.comm.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    Lane::Counter {
        label: format!("{} {what}", threads.len()),
        sub: names.join(", "),
        unit: "threads".into(),
        bin_us: bin_ns / 1000,
        max: peak_threads(threads) as f64,
        series: vec![
            Series {
                name: "running",
                v: hundredths(busy),
            },
            Series {
                name: "runnable",
                v: hundredths(runnable),
            },
        ],
    }
}

/// Most threads alive at once.
fn peak_threads(threads: &[&Thread]) -> usize {
    let mut changes: Vec<(u64, i64)> = threads
        .iter()
        .flat_map(|t| [(t.start_ns, 1), (t.end_ns, -1)])
        .collect();
    changes.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, delta) in changes {
        now += delta;
        peak = peak.max(now);
    }
    peak.max(1) as usize
}

/// Each device's %util per bin: the share of the bin with a request in
/// flight, as iostat counts it.
fn disk_lanes(input: &TimelineInput, bin_ns: u64) -> Vec<Lane> {
    let model = input.model;
    let mut by_dev: BTreeMap<u32, Vec<&IoRequest>> = BTreeMap::new();
    for io in &model.ios {
        by_dev.entry(io.dev).or_default().push(io);
    }
    if by_dev.is_empty() {
        return Vec::new();
    }
    let bins = model.duration_ns().div_ceil(bin_ns).max(1) as usize;
    let mut lanes = vec![Lane::Group {
        label: "block devices".into(),
    }];
    for (dev, mut ios) in by_dev {
        ios.sort_by_key(|io| io.start_ns);
        let mut busy = vec![0u64; bins];
        // The union of the requests' spans.
        let mut span: Option<(u64, u64)> = None;
        for io in &ios {
            match &mut span {
                Some((_, end)) if io.start_ns <= *end => *end = (*end).max(io.end_ns),
                _ => {
                    if let Some((s, e)) = span {
                        spread(&mut busy, s, e, model.window_start_ns, bin_ns);
                    }
                    span = Some((io.start_ns, io.end_ns));
                }
            }
        }
        if let Some((s, e)) = span {
            spread(&mut busy, s, e, model.window_start_ns, bin_ns);
        }
        let name = model
            .devices
            .get(&dev)
            .cloned()
            .unwrap_or_else(|| format!("{}:{}", dev >> 20, dev & 0xfffff));
        let bytes: u64 = ios.iter().map(|io| io.bytes).sum();
        lanes.push(Lane::Counter {
            label: name,
            sub: format!(
                "{} requests, {:.1} MiB",
                ios.len(),
                bytes as f64 / 1048576.0
            ),
            unit: "% util".into(),
            bin_us: bin_ns / 1000,
            max: 100.0,
            series: vec![Series {
                name: "util",
                v: busy
                    .into_iter()
                    .map(|ns| ((ns * 10_000 + bin_ns / 2) / bin_ns) as u32)
                    .collect(),
            }],
        });
    }
    lanes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::super::tests::{iv, process, thread};
    use super::super::{Delivery, Limits, Roles, Stall};
    use super::*;
    use crate::model::{Model, ThreadState::*};

    fn model() -> Model {
        Model {
            window_start_ns: 0,
            window_end_ns: 4_000_000,
            targets: vec![1],
            processes: BTreeMap::from([(1, process(1, 0, "python")), (2, process(2, 1, "python"))]),
            threads: vec![
                thread(1, 1, "python", vec![iv(0, 4_000_000, Sleeping)]),
                thread(2, 2, "pt_data_worker", vec![iv(0, 4_000_000, Sleeping)]),
                // Two pool threads: both running for 1 ms, then one runnable.
                thread(
                    3,
                    2,
                    "omp",
                    vec![
                        iv(0, 1_000_000, Running),
                        iv(1_000_000, 4_000_000, Sleeping),
                    ],
                ),
                thread(
                    4,
                    2,
                    "omp",
                    vec![
                        iv(0, 1_000_000, Running),
                        iv(1_000_000, 2_000_000, Runnable),
                        iv(2_000_000, 4_000_000, Sleeping),
                    ],
                ),
            ],
            gpus: crate::model::Gpus {
                status: Some("NVML library not found".into()),
                devices: vec![],
            },
            ..Default::default()
        }
    }

    fn render(model: &Model, title: &str) -> String {
        let roles = Roles::from_tids(
            [
                (1, Role::Trainer),
                (2, Role::DataWorker),
                (3, Role::Pool),
                (4, Role::Pool),
            ],
            Some(1),
        );
        let stalls = [Stall {
            tid: 1,
            start_ns: 0,
            end_ns: 2_000_000,
            annotation: "waiting for pt_data_worker 2".into(),
        }];
        let deliveries = [Delivery {
            ts: 2_000_000,
            from_tid: 2,
            to_tid: 1,
        }];
        let input = TimelineInput {
            model,
            roles: &roles,
            steps: &[],
            deliveries: &deliveries,
            stalls: &stalls,
            phases: &[],
            title: title.into(),
            limits: Limits::default(),
        };
        let mut out = Vec::new();
        write(&input, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The JSON embedded in the page.
    fn data(html: &str) -> Value {
        let start = html.find("type=\"application/json\">").unwrap();
        let rest = &html[start..];
        let rest = &rest[rest.find('>').unwrap() + 1..];
        let end = rest.find("</script>").unwrap();
        serde_json::from_str(&rest[..end]).unwrap()
    }

    #[test]
    fn page_is_self_contained() {
        let html = render(&model(), "t");
        assert!(html.starts_with("<!DOCTYPE html>"));
        for remote in ["http://", "https://", "src=", "@import"] {
            assert!(!html.contains(remote), "page refers to {remote}");
        }
        assert!(html.contains("tprof-timeline: drawn"));
    }

    #[test]
    fn lanes_fold_pool_threads_into_counts() {
        let d = data(&render(&model(), "t"));
        let kinds: Vec<(&str, &str)> = d["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["kind"].as_str().unwrap(), l["label"].as_str().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("note", "GPU"),
                ("group", "trainer: python (pid 1)"),
                ("states", "python (trainer)"),
                ("stalls", "stalls"),
                ("group", "data worker: pt_data_worker (pid 2)"),
                ("states", "pt_data_worker"),
                ("counter", "2 pool threads"),
            ]
        );
        let pool = &d["lanes"][6];
        assert_eq!(pool["bin_us"], 1000);
        assert_eq!(pool["max"], 2.0);
        // Bins of 1 ms: two running in the first, one runnable in the second.
        assert_eq!(pool["series"][0]["v"], serde_json::json!([200, 0, 0, 0]));
        assert_eq!(pool["series"][1]["v"], serde_json::json!([0, 100, 0, 0]));
        assert_eq!(d["lanes"][0]["text"], "no GPU data: NVML library not found");
        assert_eq!(d["deliveries"], serde_json::json!([2000, 2, 1]));
        assert_eq!(d["stalls"][0]["end"], 2000);
    }

    #[test]
    fn names_cannot_break_out_of_the_page() {
        let mut model = model();
        model.threads[0].comm = "</script><b>".into();
        let html = render(&model, "a <title> & more");
        assert!(html.contains("a &lt;title&gt; &amp; more"));
        assert_eq!(html.matches("</script>").count(), 2, "only the page's own");
        let d = data(&html);
        assert_eq!(d["lanes"][2]["label"], "</script><b> (trainer)");
    }

    #[test]
    fn spreads_time_over_bins() {
        let mut bins = vec![0; 3];
        spread(&mut bins, 1_500, 3_500, 1_000, 1_000);
        assert_eq!(bins, vec![500, 1000, 500]);
        spread(&mut bins, 3_000, 9_000, 0, 1_000);
        assert_eq!(bins, vec![500, 1000, 500], "past the end: ignored");
        assert_eq!(bin_ns(5_000_000_000), 1_000_000);
        assert_eq!(bin_ns(60_000_000_000), 6_000_000);
    }
}

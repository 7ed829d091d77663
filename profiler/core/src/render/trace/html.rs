//! The timeline as one self-contained HTML page: no network, no library.
//! The page (timeline.html, timeline.js beside this file) draws lanes on a
//! canvas from the data embedded as JSON: GPU utilization on top, then each
//! process — the trainer's steps and stalls, the trainer, pin and worker
//! threads as state lanes, and the rest of its threads (thread pools)
//! folded into one busy/runnable count — and the disks last.
//!
//! [`HtmlSink`] is fed by the timeline layout
//! ([`crate::render::timeline::tracks`]) like the other formats, with
//! [`SlicePolicy::FitLanes`](crate::render::timeline::tracks::SlicePolicy):
//! the processes, threads, their order and names, the state slices, steps,
//! phases, stalls and deliveries are the layout's. What the page shows its
//! own way it reads from what a track is of ([`TrackOf`]): a folded
//! thread's states are binned into its process' count, a GPU's utilization
//! is drawn as levels over each sample's period, a disk is its %util per
//! bin from every request (its queue slots hold only some). The page is
//! written at [`TraceSink::finish`], once all of it is known.
//!
//! Times in the data are whole µs since the recording started; counts are
//! in hundredths, to keep the page small.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Write};

use serde::Serialize;

use super::{
    CounterTrack, CounterValue, Lane as TrackLane, NodeInfo, SliceEvent, SliceOf, TraceSink, Track,
    TrackId, TrackKind, TrackOf,
};
use crate::analysis::anatomy::Phase;
use crate::model::{Gpu, IoRequest, Thread};
use crate::recording::GpuMetric;
use crate::render::exporter::{Exporter, Reads};
use crate::render::timeline::tracks::SlicePolicy;
use crate::render::timeline::{
    Role, SliceKind, bin_ns, folded, role_label, spread, tracks::period_starts,
};

/// `tprof timeline -o FILE.html`: the threads with lanes of their own
/// merged to fit its limits, the others folded into counts.
pub static HTML: Exporter = Exporter {
    name: "html",
    about: "The timeline as one self-contained page, merged to fit",
    extensions: &["html", "htm"],
    opens_in: "any browser",
    reads: Reads::Timeline {
        slices: SlicePolicy::FitLanes,
        sink: |out| Box::new(HtmlSink::new(out)),
    },
};

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

/// The page being gathered from the layout, written at [`TraceSink::finish`].
pub struct HtmlSink<W: Write> {
    out: W,
    /// The recording: set by [`TraceSink::node`].
    node: Option<Node>,
    data: Gathered,
}

/// What the page shows, as the layout hands it over.
#[derive(Default)]
struct Gathered {
    /// GPU utilization levels, in the layout's order.
    gpus: Vec<Lane>,
    /// Each process track, in the layout's order, with its threads.
    processes: Vec<Process>,
    process_of: HashMap<TrackId, usize>,
    /// Where each thread track is drawn.
    threads: HashMap<TrackId, Drawn>,
    /// Each steps, phases or stalls lane: which, and its thread.
    lanes: HashMap<TrackId, (TrackLane, Tid)>,
    /// Threads with a steps lane, and with a stalls lane.
    stepped: HashSet<Tid>,
    stalled: HashSet<Tid>,
    /// Each thread's phases: (start, end, phase code, text).
    phases: HashMap<Tid, Vec<(u64, u64, u64, String)>>,
    steps: Vec<u64>,
    step_labels: Vec<String>,
    step_info: Vec<String>,
    stalls: Vec<StallOut>,
    deliveries: Vec<u64>,
    disks: Vec<Lane>,
}

/// A thread as a lane's data names it: (pid, tid).
type Tid = (u32, u32);

/// What the page needs of the node.
struct Node {
    info: NodeInfo,
    bin_ns: u64,
    bins: usize,
}

impl Node {
    /// ns on the recording's clock as whole µs since the window start.
    fn us(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.info.window_start_ns)
            .saturating_add(500)
            / 1000
    }
}

/// A process' header, its threads' lanes and its folded threads' count.
struct Process {
    label: String,
    threads: Vec<ThreadLane>,
    pool: Pool,
}

/// One thread's state lane.
struct ThreadLane {
    tid: Tid,
    label: String,
    sub: String,
    /// [start, duration, code] per slice.
    s: Vec<u64>,
}

/// The threads of a process folded into one count per bin.
#[derive(Default)]
struct Pool {
    roles: Vec<Role>,
    names: Vec<String>,
    /// Each thread's life, for the most alive at once.
    lives: Vec<(u64, u64)>,
    /// ns running and runnable per bin, all threads summed.
    running: Vec<u64>,
    runnable: Vec<u64>,
}

/// Where a thread track's slices go.
#[derive(Clone, Copy)]
enum Drawn {
    /// Its own lane: process, and lane within it.
    Lane(usize, usize),
    /// Folded into its process' count.
    Folded(usize),
}

impl<W: Write> HtmlSink<W> {
    pub fn new(out: W) -> HtmlSink<W> {
        HtmlSink {
            out,
            node: None,
            data: Gathered::default(),
        }
    }

    fn started(&self) -> io::Result<&Node> {
        self.node.as_ref().ok_or_else(no_node)
    }

    fn thread(&mut self, track: &Track, thread: &Thread, role: Role) {
        let (TrackKind::Thread { pid, tid }, Some(parent)) = (track.kind, track.parent) else {
            return;
        };
        let Some(&p) = self.data.process_of.get(&parent) else {
            return;
        };
        let process = &mut self.data.processes[p];
        if folded(role) {
            let pool = &mut process.pool;
            pool.roles.push(role);
            pool.names.push(thread.comm.clone());
            pool.lives.push((thread.start_ns, thread.end_ns));
            self.data.threads.insert(track.id, Drawn::Folded(p));
            return;
        }
        let lane = process.threads.len();
        process.threads.push(ThreadLane {
            tid: (pid, tid),
            label: track.name.to_string(),
            sub: format!("tid {tid}, {}", role_label(role)),
            s: Vec::new(),
        });
        self.data.threads.insert(track.id, Drawn::Lane(p, lane));
    }

    /// A state slice of a thread track: on its lane, or binned.
    fn state(&mut self, drawn: Drawn, slice: &crate::render::timeline::Slice) -> io::Result<()> {
        let node = self.started()?;
        match drawn {
            Drawn::Lane(p, lane) => {
                let (start, end) = (node.us(slice.start_ns), node.us(slice.end_ns));
                let merged = if slice.parts > 1 {
                    u64::from(slice.parts)
                } else {
                    0
                };
                let code = slice.kind() as u64 + 8 * merged;
                let s = &mut self.data.processes[p].threads[lane].s;
                s.extend([start, end - start, code]);
            }
            Drawn::Folded(p) => {
                let (origin, bin_ns, bins) = (node.info.window_start_ns, node.bin_ns, node.bins);
                let pool = &mut self.data.processes[p].pool;
                let into = match slice.kind() {
                    SliceKind::Running => &mut pool.running,
                    SliceKind::Runnable => &mut pool.runnable,
                    _ => return Ok(()),
                };
                into.resize(bins, 0);
                spread(into, slice.start_ns, slice.end_ns, origin, bin_ns);
            }
        }
        Ok(())
    }

    /// A slice on a steps, phases or stalls lane.
    fn lane_slice(&mut self, lane: TrackLane, tid: Tid, slice: &SliceEvent) -> io::Result<()> {
        let node = self.started()?;
        let (start, end) = (node.us(slice.start_ns), node.us(slice.end_ns));
        match (lane, slice.of) {
            (TrackLane::Steps, _) => {
                self.data.steps.extend([start, end]);
                self.data.step_labels.push(slice.name.to_string());
                self.data.step_info.push(step_info(slice.args.as_ref()));
            }
            (TrackLane::Phases, SliceOf::Phase(p)) => {
                let code = Phase::ALL.iter().position(|&x| x == p.phase).unwrap_or(0);
                let text = format!("{}: {}", p.phase.title(), p.label);
                let phases = self.data.phases.entry(tid).or_default();
                phases.push((start, end, code as u64, text));
            }
            (TrackLane::Stalls, _) if self.data.stalls.len() < MAX_STALLS => {
                self.data.stalls.push(StallOut {
                    tid: tid.1,
                    start,
                    end,
                    text: slice.name.to_string(),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// The page's lanes, in the layout's order.
    fn lanes(&mut self, node: &Node) -> (Vec<Lane>, Vec<String>) {
        let mut lanes = std::mem::take(&mut self.data.gpus);
        if lanes.is_empty() {
            let reason = node.info.gpu_status.as_deref();
            lanes.push(Lane::Note {
                label: "GPU".into(),
                text: format!("no GPU data: {}", reason.unwrap_or("no GPU was found")),
            });
        }
        let mut phase_texts: Vec<String> = Vec::new();
        for process in std::mem::take(&mut self.data.processes) {
            lanes.push(Lane::Group {
                label: process.label,
            });
            for thread in process.threads {
                self.thread_lanes(thread, &mut lanes, &mut phase_texts);
            }
            if !process.pool.roles.is_empty() {
                lanes.push(pool_lane(process.pool, node));
            }
        }
        if !self.data.disks.is_empty() {
            lanes.push(Lane::Group {
                label: "block devices".into(),
            });
            lanes.append(&mut self.data.disks);
        }
        (lanes, phase_texts)
    }

    /// A thread's lanes: its steps and phases above its states, its stalls
    /// below.
    fn thread_lanes(
        &self,
        thread: ThreadLane,
        lanes: &mut Vec<Lane>,
        phase_texts: &mut Vec<String>,
    ) {
        let tid = thread.tid.1;
        if self.data.stepped.contains(&thread.tid) {
            lanes.push(Lane::Steps {
                label: "steps".into(),
                tid,
            });
        }
        if let Some(phases) = self.data.phases.get(&thread.tid) {
            let mut s = Vec::with_capacity(phases.len() * 4);
            for (start, end, code, text) in phases {
                let index = phase_texts
                    .iter()
                    .position(|t| t == text)
                    .unwrap_or_else(|| {
                        phase_texts.push(text.clone());
                        phase_texts.len() - 1
                    });
                s.extend([*start, end - start, *code, index as u64]);
            }
            lanes.push(Lane::Phases {
                label: "phases".into(),
                tid,
                s,
            });
        }
        lanes.push(Lane::States {
            label: thread.label,
            sub: thread.sub,
            tid,
            s: thread.s,
        });
        if self.data.stalled.contains(&thread.tid) {
            lanes.push(Lane::Stalls {
                label: "stalls".into(),
                tid,
            });
        }
    }
}

impl<W: Write> TraceSink for HtmlSink<W> {
    fn node(&mut self, node: &NodeInfo) -> io::Result<()> {
        if self.node.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "an HTML timeline holds one recording; merge recordings into a Perfetto trace",
            ));
        }
        let bin_ns = bin_ns(node.duration_ns);
        self.node = Some(Node {
            info: node.clone(),
            bin_ns,
            bins: node.duration_ns.div_ceil(bin_ns).max(1) as usize,
        });
        Ok(())
    }

    fn track(&mut self, track: &Track) -> io::Result<()> {
        self.started()?;
        match (track.kind, track.of) {
            (TrackKind::Process { pid }, _) => {
                self.data
                    .process_of
                    .insert(track.id, self.data.processes.len());
                self.data.processes.push(Process {
                    label: format!("{} (pid {pid})", track.name),
                    threads: Vec::new(),
                    pool: Pool::default(),
                });
            }
            (_, TrackOf::Thread { thread, role }) => self.thread(track, thread, role),
            (TrackKind::Lane { pid, tid, lane }, _) => {
                self.data.lanes.insert(track.id, (lane, (pid, tid)));
                match lane {
                    TrackLane::Steps => self.data.stepped.insert((pid, tid)),
                    TrackLane::Stalls => self.data.stalled.insert((pid, tid)),
                    TrackLane::Phases | TrackLane::Cuda => false,
                };
            }
            (_, TrackOf::Gpu(gpu)) => {
                let lane = gpu_lane(gpu, self.started()?);
                self.data.gpus.push(lane);
            }
            (_, TrackOf::Disk { name, requests }) => {
                let lane = disk_lane(name, requests, self.started()?);
                self.data.disks.push(lane);
            }
            _ => {}
        }
        Ok(())
    }

    /// Counters are the page's own (levels and bins, from what a track is
    /// of).
    fn counter_track(&mut self, _: &CounterTrack) -> io::Result<()> {
        Ok(())
    }

    fn slice(&mut self, track: TrackId, slice: &SliceEvent) -> io::Result<()> {
        if let (Some(&drawn), SliceOf::State(state)) = (self.data.threads.get(&track), slice.of) {
            return self.state(drawn, state);
        }
        match self.data.lanes.get(&track) {
            Some(&(lane, tid)) => self.lane_slice(lane, tid, slice),
            None => Ok(()),
        }
    }

    fn counter(&mut self, _: TrackId, _: u64, _: CounterValue) -> io::Result<()> {
        Ok(())
    }

    /// A delivery between two threads with tracks of their own; the page
    /// names them by tid.
    fn flow(&mut self, _: u64, from: TrackId, to: TrackId, ts_ns: u64) -> io::Result<()> {
        if self.data.deliveries.len() >= 3 * MAX_DELIVERIES {
            return Ok(());
        }
        let tid = |track: &TrackId| match self.data.threads.get(track) {
            Some(Drawn::Lane(p, lane)) => Some(self.data.processes[*p].threads[*lane].tid.1),
            _ => None,
        };
        let (Some(from), Some(to)) = (tid(&from), tid(&to)) else {
            return Ok(());
        };
        let ts = self.started()?.us(ts_ns);
        self.data
            .deliveries
            .extend([ts, u64::from(from), u64::from(to)]);
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        let node = self.node.take().ok_or_else(no_node)?;
        let (lanes, phase_texts) = self.lanes(&node);
        let page = Page {
            title: &node.info.title,
            duration_us: node.us(node.info.window_start_ns + node.info.duration_ns),
            min_slice_us: node.info.min_slice_ns as f64 / 1e3,
            states: SliceKind::ALL.iter().map(|k| k.name()).collect(),
            lanes,
            steps: std::mem::take(&mut self.data.steps),
            step_labels: std::mem::take(&mut self.data.step_labels),
            step_info: std::mem::take(&mut self.data.step_info),
            stalls: std::mem::take(&mut self.data.stalls),
            deliveries: std::mem::take(&mut self.data.deliveries),
            gpu_status: node.info.gpu_status.as_deref(),
            phases: Phase::ALL.iter().map(|p| p.name()).collect(),
            phase_texts,
        };
        write_page(&page, &mut self.out)
    }
}

fn no_node() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "an HTML timeline needs a node before its tracks",
    )
}

/// A step's breakdown, one `key: value` line each.
fn step_info(args: Option<&serde_json::Value>) -> String {
    let mut text = String::new();
    if let Some(serde_json::Value::Object(args)) = args {
        for (key, value) in args {
            let _ = writeln!(text, "{key}: {value}");
        }
    }
    text
}

/// Writes `page` into the template.
fn write_page(page: &Page, mut out: impl Write) -> io::Result<()> {
    let data = serde_json::to_string(page)?;
    // Inside <script>, "</script>" in a thread name would end the element;
    // "<" occurs in JSON only inside strings, where \u003c means the same.
    let data = data.replace('<', "\\u003c");
    let (head, rest) = TEMPLATE.split_once("__TITLE__").expect("template title");
    let (middle, rest) = rest.split_once("__DATA__").expect("template data");
    let (before_script, tail) = rest.split_once("__SCRIPT__").expect("template script");
    out.write_all(head.as_bytes())?;
    out.write_all(escape_html(page.title).as_bytes())?;
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

/// A GPU's utilization: each sample over the period it averages.
fn gpu_lane(gpu: &Gpu, node: &Node) -> Lane {
    let points = gpu.series(GpuMetric::GpuUtilPct);
    let mut s = Vec::with_capacity(points.len() * 3);
    for ((start, value), &(end, _)) in period_starts(points).into_iter().zip(points) {
        s.extend([node.us(start), node.us(end), value]);
    }
    Lane::Level {
        label: format!("GPU {}", gpu.index),
        sub: format!("{}: utilization", gpu.name),
        unit: "%".into(),
        max: 100,
        s,
    }
}

/// A process' folded threads as mean numbers running and runnable per bin.
fn pool_lane(mut pool: Pool, node: &Node) -> Lane {
    let bin_ns = node.bin_ns;
    let hundredths = |mut ns: Vec<u64>| -> Vec<u32> {
        ns.resize(node.bins, 0);
        ns.into_iter()
            .map(|v| ((v * 100 + bin_ns / 2) / bin_ns) as u32)
            .collect()
    };
    let what = if pool.roles.iter().all(|&r| r == Role::Pool) {
        "pool threads"
    } else {
        "other threads"
    };
    let count = pool.roles.len();
    pool.names.sort_unstable();
    pool.names.dedup();
    Lane::Counter {
        label: format!("{count} {what}"),
        sub: pool.names.join(", "),
        unit: "threads".into(),
        bin_us: bin_ns / 1000,
        max: peak(&pool.lives) as f64,
        series: vec![
            Series {
                name: "running",
                v: hundredths(pool.running),
            },
            Series {
                name: "runnable",
                v: hundredths(pool.runnable),
            },
        ],
    }
}

/// Most of these lives at once.
fn peak(lives: &[(u64, u64)]) -> usize {
    let mut changes: Vec<(u64, i64)> = lives
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    changes.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, delta) in changes {
        now += delta;
        peak = peak.max(now);
    }
    peak.max(1) as usize
}

/// A device's %util per bin: the share of the bin with a request in
/// flight, as iostat counts it. `requests` are in order of their start.
fn disk_lane(name: &str, requests: &[&IoRequest], node: &Node) -> Lane {
    let (origin, bin_ns) = (node.info.window_start_ns, node.bin_ns);
    let mut busy = vec![0u64; node.bins];
    // The union of the requests' spans.
    let mut span: Option<(u64, u64)> = None;
    for io in requests {
        match &mut span {
            Some((_, end)) if io.start_ns <= *end => *end = (*end).max(io.end_ns),
            _ => {
                if let Some((s, e)) = span {
                    spread(&mut busy, s, e, origin, bin_ns);
                }
                span = Some((io.start_ns, io.end_ns));
            }
        }
    }
    if let Some((s, e)) = span {
        spread(&mut busy, s, e, origin, bin_ns);
    }
    let bytes: u64 = requests.iter().map(|io| io.bytes).sum();
    Lane::Counter {
        label: name.to_string(),
        sub: format!(
            "{} requests, {:.1} MiB",
            requests.len(),
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
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::*;
    use crate::model::{Model, ThreadState::*};
    use crate::render::timeline::tests::{iv, process, thread};
    use crate::render::timeline::tracks::{Placement, lay_out};
    use crate::render::timeline::{Delivery, Limits, Roles, Stall, TimelineInput};

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
        let mut sink = HtmlSink::new(&mut out);
        let placement = Placement::default();
        lay_out(&input, SlicePolicy::FitLanes, placement, &mut sink).unwrap();
        sink.finish().unwrap();
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
}

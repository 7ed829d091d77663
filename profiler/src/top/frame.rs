//! What one frame of the view shows, as plain data ([`Frame`]): the
//! screen, the batch text and the JSON lines are all drawn from it, so
//! they cannot disagree.
//!
//! It is read off two models, with the same analysis as `tprof report`:
//! the whole window's (`analysis::summarize`, as a [`WindowView`]), for the
//! leading finding and the roles, which need a stretch of several steps;
//! and the recent stretch's (the last few intervals,
//! `analysis::summarize_live`), for what `top -H` and `iostat -x 1` show
//! of the last interval: each thread's time split by state
//! (`Thread::breakdown`, so a thread that was already blocked when the
//! interval began is known to be), the steps that ended in it, the disks
//! (`analysis::device_stats` over the interval's requests), and the GPUs'
//! samples. The window's analysis is the costly half and runs less often
//! (`analyst.rs` says when); the recent stretch's runs every interval.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use tprof_core::analysis::{
    self, DeviceStats, IoStat, Summary,
    diagnosis::Finding,
    flame::frame_label,
    roles::{Role, Roles},
};
use tprof_core::model::{Breakdown, Model, Thread, ThreadKey};
use tprof_core::recording::{FrameKind, GpuMetric, StackTable};

/// The JSON lines' contract version (docs/json.md, "tprof top --json").
pub(super) const TOP_JSON_VERSION: u32 = 1;

const NS: f64 = 1e9;

/// One frame: the last interval, and the window it is read in.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Frame {
    pub top_json_version: u32,
    /// 1 for the first frame.
    pub seq: u64,
    /// The stretch the per-thread, step and disk figures are of.
    pub interval: Span,
    /// The stretch the finding and the roles were found in: the window as
    /// of its last analysis.
    pub window: Span,
    /// The processes watched (`-p`, or the command's).
    pub targets: Vec<u32>,
    pub command: Option<Vec<String>>,
    pub cores: Cores,
    pub cpu_demand: Demand,
    pub steps: Steps,
    pub gpus: Vec<GpuNow>,
    /// Why there is no GPU data; None when there is.
    pub gpu_status: Option<String>,
    /// Events lost since tprof top started (every kind of loss).
    pub lost_events: u64,
    /// The leading finding of the window, with its `changes`.
    pub finding: Option<Finding>,
    /// The threads' roles, each summed: trainer first.
    pub roles: Vec<RoleGroup>,
    /// Every thread alive in the interval, busiest first.
    pub threads: Vec<ThreadRow>,
    pub devices: Vec<DeviceRow>,
    /// The recording file `r` is writing, if any.
    pub recording: Option<String>,
    /// Intervals since the previous frame that got none (the analysis is
    /// held to a share of a CPU, or the machine was too busy for it).
    pub skipped: u64,
    /// CPU seconds this frame took to compute (the model and its analysis).
    pub analysis_cpu_s: f64,
}

/// A stretch of CLOCK_MONOTONIC time.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
    pub seconds: f64,
}

impl Span {
    pub(super) fn new(start_ns: u64, end_ns: u64) -> Span {
        Span {
            start_ns,
            end_ns,
            seconds: end_ns.saturating_sub(start_ns) as f64 / NS,
        }
    }
}

/// The CPUs the job may use, and which limit says so.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Cores {
    pub usable: f64,
    /// `machine`, `cpuset` or `cgroup CPU quota`.
    pub limit: &'static str,
    pub machine: u32,
}

/// The job's threads on a CPU and waiting for one, on average over the
/// interval (in CPUs).
#[derive(Debug, Clone, Serialize)]
pub(super) struct Demand {
    pub running: f64,
    pub runnable: f64,
}

/// The training steps that ended in the interval.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Steps {
    pub count: usize,
    pub per_s: f64,
    /// Median step time of those steps; None without any.
    pub p50_ms: Option<f64>,
    /// Share of those steps' time the trainer waited for a batch.
    pub data_wait_frac: Option<f64>,
    /// How the window's steps were found (`torch_marks`, `pipe_reads`,
    /// `waited_batches`, `none`).
    pub source: &'static str,
}

/// A GPU over the interval.
#[derive(Debug, Clone, Serialize)]
pub(super) struct GpuNow {
    pub index: u32,
    pub name: String,
    /// Mean of its utilization samples in the interval.
    pub util_pct: Option<f64>,
    /// The last memory reading.
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
}

/// The threads of one role, summed.
#[derive(Debug, Clone, Serialize)]
pub(super) struct RoleGroup {
    pub role: Role,
    pub processes: usize,
    pub threads: usize,
    pub share: Shares,
}

/// Where a thread's (or a group's, summed) interval went, in percent of
/// the interval: one CPU busy all along is 100.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct Shares {
    pub on_cpu_pct: f64,
    pub runnable_pct: f64,
    pub io_pct: f64,
    pub futex_pct: f64,
    pub sleep_pct: f64,
}

impl Shares {
    fn of(b: &Breakdown, interval_ns: u64) -> Shares {
        let pct = |ns: u64| 100.0 * ns as f64 / interval_ns.max(1) as f64;
        Shares {
            on_cpu_pct: pct(b.on_cpu),
            runnable_pct: pct(b.runnable),
            io_pct: pct(b.io),
            futex_pct: pct(b.futex),
            sleep_pct: pct(b.sleep),
        }
    }

    fn add(&mut self, other: &Shares) {
        self.on_cpu_pct += other.on_cpu_pct;
        self.runnable_pct += other.runnable_pct;
        self.io_pct += other.io_pct;
        self.futex_pct += other.futex_pct;
        self.sleep_pct += other.sleep_pct;
    }
}

/// One thread over the interval.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ThreadRow {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    /// Its process's name.
    pub process: String,
    pub role: Role,
    #[serde(flatten)]
    pub share: Shares,
    /// Its most sampled function on a CPU (the innermost Python function
    /// where the stack has one, else the leaf); None when never sampled.
    pub function: Option<String>,
    /// Where it waited longest off the CPU, the same way, when it was
    /// never sampled on one.
    pub waiting_in: Option<String>,
    /// It exited during the interval.
    pub exited: bool,
}

/// A disk over the interval, in `iostat -x` columns.
#[derive(Debug, Clone, Serialize)]
pub(super) struct DeviceRow {
    pub name: String,
    #[serde(flatten)]
    pub io: IoStat,
    /// The tracked thread that read the most from it in the interval.
    pub busiest_reader: Option<Reader>,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct Reader {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub read_bytes: u64,
}

/// What the last analysis of the whole window found.
#[derive(Debug, Clone)]
pub(super) struct WindowView {
    pub span: Span,
    /// Its leading finding, without `see` (it names the recording's path,
    /// and there is none).
    pub finding: Option<Finding>,
    pub roles: Roles,
    /// The longest step it found: how far back a frame's model must reach
    /// to see whole the steps that end in its interval.
    pub longest_step_ns: Option<u64>,
}

impl WindowView {
    pub(super) fn of(model: &Model, summary: Summary) -> WindowView {
        let longest_step_ns = summary
            .steps
            .steps
            .iter()
            .map(analysis::steps::Step::duration_ns)
            .max();
        WindowView {
            span: Span::new(model.window_start_ns, model.window_end_ns),
            longest_step_ns,
            finding: summary.findings.into_iter().next().map(|mut f| {
                f.see = None;
                f
            }),
            roles: summary.roles,
        }
    }

    /// A thread of the recent stretch's model (which began at
    /// `recent_start`) by its role: the window's, whose analysis saw more of
    /// each thread; for a thread born since that analysis (a reused tid
    /// too) or one it never saw, the recent stretch's. A thread alive when
    /// the recent stretch began starts there in its model, so the window
    /// knows it by the holder of its tid at that time.
    fn role_of(&self, recent: &Roles, recent_start: u64, t: &Thread) -> Role {
        let born_since = t.start_ns > recent_start && t.start_ns >= self.span.end_ns;
        let key = |start_ns| ThreadKey {
            tid: t.tid,
            start_ns,
        };
        let known = !born_since
            && self
                .roles
                .by_thread
                .range(key(0)..=key(t.start_ns))
                .next()
                .is_some();
        if known {
            self.roles.of_thread(t)
        } else {
            recent.of_thread(t)
        }
    }
}

/// Reads the frame of `interval` off the recent stretch's model and its
/// live summary, and the window's last analysis; `counted` holds the
/// starts of the steps earlier frames counted, and gets this one's.
pub(super) fn frame(
    model: &Model,
    summary: &Summary,
    window: &WindowView,
    interval: Span,
    seq: u64,
    counted: &mut BTreeSet<u64>,
) -> Frame {
    let threads = thread_rows(model, summary, window, interval);
    Frame {
        top_json_version: TOP_JSON_VERSION,
        seq,
        interval,
        window: window.span,
        targets: model.targets.clone(),
        command: None,
        cores: Cores {
            usable: summary.cores_effective,
            limit: summary.cores_source,
            machine: summary.cores,
        },
        cpu_demand: demand(&threads),
        steps: steps(summary, interval, counted),
        gpus: gpus(model, interval),
        gpu_status: summary.gpu_status.clone(),
        lost_events: summary.lost_events,
        finding: window.finding.clone(),
        roles: role_groups(&threads),
        threads,
        devices: devices(model, interval),
        recording: None,
        skipped: 0,
        analysis_cpu_s: 0.0,
    }
}

fn demand(threads: &[ThreadRow]) -> Demand {
    Demand {
        running: threads.iter().map(|t| t.share.on_cpu_pct).sum::<f64>() / 100.0,
        runnable: threads.iter().map(|t| t.share.runnable_pct).sum::<f64>() / 100.0,
    }
}

fn overlaps(thread: &Thread, span: Span) -> bool {
    thread.start_ns < span.end_ns && thread.end_ns > span.start_ns
}

/// Every thread alive in the interval, busiest (on a CPU or waiting for
/// one) first.
fn thread_rows(
    model: &Model,
    summary: &Summary,
    window: &WindowView,
    span: Span,
) -> Vec<ThreadRow> {
    let len = span.end_ns - span.start_ns;
    let mut rows: Vec<ThreadRow> = model
        .threads
        .iter()
        .filter(|t| overlaps(t, span))
        .map(|t| {
            let share = Shares::of(&t.breakdown(span.start_ns, span.end_ns), len);
            let stacks = model.stacks.as_ref();
            let function = stacks.and_then(|s| on_cpu_function(s, t.tid, span));
            let waiting_in = match function {
                Some(_) => None,
                None => stacks.and_then(|s| waiting_function(s, t.tid, span)),
            };
            ThreadRow {
                tid: t.tid,
                pid: t.pid,
                comm: t.comm.clone(),
                process: model
                    .process_of(t.pid, t.start_ns)
                    .map_or_else(String::new, |p| p.comm.clone()),
                role: window.role_of(&summary.roles, model.window_start_ns, t),
                share,
                function,
                waiting_in,
                exited: t.exited && t.end_ns <= span.end_ns,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let demand = |r: &ThreadRow| r.share.on_cpu_pct + r.share.runnable_pct;
        demand(b).total_cmp(&demand(a)).then(a.tid.cmp(&b.tid))
    });
    rows
}

/// How a stack reads in one cell: its innermost Python function (what the
/// job's author wrote), else its leaf outside the kernel, as the report's
/// top functions read.
fn stack_label(table: &StackTable, stack: u32) -> String {
    let frames: Vec<_> = table
        .stacks
        .get(stack as usize)
        .map(|ids| {
            ids.iter()
                .filter_map(|&f| table.frames.get(f as usize))
                .collect()
        })
        .unwrap_or_default();
    let python = frames.iter().rev().find(|f| f.kind == FrameKind::Python);
    python
        .or_else(|| frames.iter().rev().find(|f| !f.is_kernel()))
        .map_or_else(|| "[kernel]".to_string(), |f| frame_label(f))
}

/// The label most of `tid`'s on-CPU samples in the interval carry.
fn on_cpu_function(table: &StackTable, tid: u32, span: Span) -> Option<String> {
    let mut by_label: HashMap<String, u64> = HashMap::new();
    for t in table.timed_of(tid) {
        if t.kind.is_on_cpu() && t.start_ns >= span.start_ns && t.start_ns < span.end_ns {
            *by_label.entry(stack_label(table, t.stack)).or_default() += 1;
        }
    }
    heaviest(by_label)
}

/// The label of the off-CPU stacks `tid` spent most of the interval in.
fn waiting_function(table: &StackTable, tid: u32, span: Span) -> Option<String> {
    let mut by_label: HashMap<String, u64> = HashMap::new();
    for t in table.timed_of(tid) {
        let inside = t
            .end_ns
            .min(span.end_ns)
            .saturating_sub(t.start_ns.max(span.start_ns));
        if !t.kind.is_on_cpu() && inside > 0 {
            *by_label.entry(stack_label(table, t.stack)).or_default() += inside;
        }
    }
    heaviest(by_label)
}

fn heaviest(by_label: HashMap<String, u64>) -> Option<String> {
    by_label
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(label, _)| label)
}

/// The roles present, in the order the view shows them, each summed.
fn role_groups(threads: &[ThreadRow]) -> Vec<RoleGroup> {
    ROLE_ORDER
        .iter()
        .filter_map(|&role| {
            let mine: Vec<&ThreadRow> = threads.iter().filter(|t| t.role == role).collect();
            if mine.is_empty() {
                return None;
            }
            let mut share = Shares::default();
            for t in &mine {
                share.add(&t.share);
            }
            let processes: BTreeSet<u32> = mine.iter().map(|t| t.pid).collect();
            Some(RoleGroup {
                role,
                processes: processes.len(),
                threads: mine.len(),
                share,
            })
        })
        .collect()
}

/// The roles in the order the view groups threads.
pub(super) const ROLE_ORDER: [Role; 6] = [
    Role::Trainer,
    Role::DataWorker,
    Role::PinMemory,
    Role::Pool,
    Role::Helper,
    Role::Other,
];

/// The steps that ended in the interval: how many, their median, their
/// data wait. Each frame's analysis finds the steps again, and the window's
/// last one ends where the analysis estimates (nothing marks it yet): a step
/// is counted once, in the first frame it ends in, known by its start
/// (`counted`, which gets the starts counted now).
fn steps(summary: &Summary, span: Span, counted: &mut BTreeSet<u64>) -> Steps {
    let ended: Vec<_> = summary
        .steps
        .steps
        .iter()
        .filter(|s| s.end_ns > span.start_ns && s.end_ns <= span.end_ns)
        .filter(|s| !counted.contains(&s.start_ns))
        .collect();
    counted.extend(ended.iter().map(|s| s.start_ns));
    let mut durations: Vec<u64> = ended.iter().map(|s| s.duration_ns()).collect();
    durations.sort_unstable();
    let total: u64 = durations.iter().sum();
    let waited: u64 = ended.iter().map(|s| s.data_wait_ns).sum();
    Steps {
        count: ended.len(),
        per_s: ended.len() as f64 / span.seconds.max(1e-9),
        p50_ms: (!durations.is_empty()).then(|| durations[(durations.len() - 1) / 2] as f64 / 1e6),
        data_wait_frac: (total > 0).then(|| waited as f64 / total as f64),
        source: summary.steps.source.detector,
    }
}

/// Each GPU's mean utilization over the interval and its last memory
/// reading.
fn gpus(model: &Model, span: Span) -> Vec<GpuNow> {
    let inside = |ts: u64| ts > span.start_ns && ts <= span.end_ns;
    model
        .gpus
        .devices
        .iter()
        .map(|gpu| {
            let util: Vec<u64> = gpu
                .series(GpuMetric::GpuUtilPct)
                .iter()
                .filter(|(ts, _)| inside(*ts))
                .map(|&(_, v)| v)
                .collect();
            let mem = gpu
                .series(GpuMetric::MemUsedBytes)
                .iter()
                .rfind(|(ts, _)| *ts <= span.end_ns)
                .map(|&(_, v)| v);
            GpuNow {
                index: gpu.index,
                name: gpu.name.clone(),
                util_pct: (!util.is_empty())
                    .then(|| util.iter().sum::<u64>() as f64 / util.len() as f64),
                mem_used_bytes: mem,
                mem_total_bytes: gpu.memory_total_bytes,
            }
        })
        .collect()
}

/// The disks over the interval, as `analysis::device_stats` gives them
/// for a model of the interval's requests alone.
fn devices(model: &Model, span: Span) -> Vec<DeviceRow> {
    let requests = Model {
        window_start_ns: span.start_ns,
        window_end_ns: span.end_ns,
        ios: model
            .ios
            .iter()
            .filter(|io| io.end_ns > span.start_ns && io.start_ns < span.end_ns)
            .copied()
            .collect(),
        devices: model.devices.clone(),
        ..Model::default()
    };
    analysis::device_stats(&requests)
        .into_iter()
        .map(|d| device_row(model, d))
        .collect()
}

fn device_row(model: &Model, d: DeviceStats) -> DeviceRow {
    let reader = d
        .users
        .iter()
        .filter(|u| u.read_bytes > 0)
        .max_by_key(|u| u.read_bytes)
        .map(|u| Reader {
            pid: u.pid,
            tid: u.tid,
            comm: model
                .threads
                .iter()
                .rfind(|t| t.tid == u.tid)
                .map_or_else(String::new, |t| t.comm.clone()),
            read_bytes: u.read_bytes,
        });
    DeviceRow {
        name: d.name,
        io: d.window,
        busiest_reader: reader,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tprof_core::model::{Interval, ThreadState};

    const S: u64 = 1_000_000_000;

    fn thread(tid: u32, spans: &[(u64, u64, ThreadState)]) -> Thread {
        Thread {
            tid,
            pid: 1,
            comm: format!("t{tid}"),
            renamed_from: vec![],
            start_ns: spans[0].0,
            end_ns: spans.last().unwrap().1,
            exited: false,
            intervals: spans
                .iter()
                .map(|&(a, b, s)| Interval::new(a, b, s))
                .collect::<Vec<_>>()
                .into(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        }
    }

    /// A thread the window's last analysis saw keeps the window's role;
    /// one it had not seen takes the recent stretch's.
    #[test]
    fn roles_from_the_window_else_the_recent_stretch() {
        let roles = |pairs: &[(u32, Role)]| Roles {
            by_thread: pairs
                .iter()
                .map(|&(tid, r)| (ThreadKey { tid, start_ns: 0 }, r))
                .collect(),
            ..Roles::default()
        };
        let window = WindowView {
            span: Span::new(0, S),
            finding: None,
            roles: roles(&[(1, Role::Trainer), (2, Role::Pool)]),
            longest_step_ns: None,
        };
        let recent = roles(&[(1, Role::Other), (2, Role::Other), (3, Role::DataWorker)]);
        let t = |tid| thread(tid, &[(0, S, ThreadState::Running)]);
        assert_eq!(window.role_of(&recent, 0, &t(1)), Role::Trainer);
        assert_eq!(window.role_of(&recent, 0, &t(2)), Role::Pool);
        assert_eq!(window.role_of(&recent, 0, &t(3)), Role::DataWorker);
        // Tid 2 reused by a thread born after the window's analysis ended
        // (at S): the recent stretch's role, not the old holder's.
        let mut recent = recent;
        let reborn = ThreadKey {
            tid: 2,
            start_ns: 2 * S,
        };
        recent.by_thread.insert(reborn, Role::DataWorker);
        let t2 = thread(2, &[(2 * S, 3 * S, ThreadState::Running)]);
        assert_eq!(window.role_of(&recent, 0, &t2), Role::DataWorker);
        // The old holder, alive when a later recent stretch began (its
        // model starts it there): still the window's.
        let old = thread(2, &[(2 * S, 3 * S, ThreadState::Running)]);
        assert_eq!(window.role_of(&recent, 2 * S, &old), Role::Pool);
    }

    /// The shares are of the interval, from the window's intervals: a
    /// thread blocked since before the interval is blocked all along it.
    #[test]
    fn shares_are_of_the_interval() {
        use ThreadState::*;
        let model = Model {
            window_start_ns: 0,
            window_end_ns: 4 * S,
            cores: 2,
            threads: vec![
                thread(1, &[(0, 3 * S, Running), (3 * S, 4 * S, Runnable)]),
                thread(2, &[(0, S, Running), (S, 4 * S, Sleeping)]),
            ],
            ..Model::default()
        };
        let summary = analysis::summarize_live(&model);
        let window = WindowView::of(&model, analysis::summarize(&model));
        let f = frame(
            &model,
            &summary,
            &window,
            Span::new(2 * S, 4 * S),
            1,
            &mut BTreeSet::new(),
        );
        assert_eq!(f.threads[0].tid, 1);
        assert_eq!(f.threads[0].share.on_cpu_pct, 50.0);
        assert_eq!(f.threads[0].share.runnable_pct, 50.0);
        assert_eq!(f.threads[1].share.sleep_pct, 100.0);
        assert_eq!((f.cpu_demand.running, f.cpu_demand.runnable), (0.5, 0.5));
        assert_eq!(f.window.seconds, 4.0);
        let other = &f.roles[f.roles.len() - 1];
        assert_eq!((other.threads, other.processes), (2, 1));
    }
}

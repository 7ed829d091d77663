//! The timeline laid out as tracks, for any [`TraceSink`]: one process
//! track per tracked process and one thread track per tracked thread, with
//! its state slices (running, runnable, IO, futex, sleep); the trainer's
//! process gets a "steps" and a "stalls" lane; a thread that calls the CUDA
//! runtime a "cuda" lane; each GPU is a track with counters; each block
//! device is a track whose queue slots hold its requests, with an in-flight
//! counter. Deliveries are flows from the producer's thread to the
//! consumer's.
//!
//! The layout decides what is shown and in which order, for every format:
//! Chrome JSON, Perfetto and the HTML page are sinks of this one layout,
//! which differ only in how thread states become slices ([`SlicePolicy`]).
//! It knows no format and invents no numbers: tracks are named by what they
//! are, with ids from [`NodeKey`].

use std::collections::{BTreeMap, HashMap};
use std::io;

use serde_json::{Map, Value, json};

use super::{Role, Slice, Stall, TimelineInput, bin_ns, fit_slices, folded, merge_slices, spread};
use crate::model::{Gpu, IoOp, IoRequest, Thread};
use crate::recording::GpuMetric;
use crate::render::trace::{
    CounterTrack, CounterValue, Lane, NodeClock, NodeInfo, NodeKey, SliceEvent, SliceOf, TraceSink,
    Track, TrackId, TrackKind, TrackOf,
};

/// Requests in flight beyond this many are only in the device's counter.
const MAX_DISK_SLOTS: usize = 16;
/// A device with more requests than this shows its mean number in flight
/// per bin instead of each request (a busy disk does thousands a second).
pub const MAX_DISK_REQUESTS: usize = 50_000;

/// How thread states become slices, within the input's [`Limits`].
///
/// [`Limits`]: super::Limits
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlicePolicy {
    /// Merge slices shorter than `limits.min_slice_ns`, raising the
    /// threshold until the whole timeline fits `limits.max_slices` (for
    /// viewers that load everything at once: Chrome JSON).
    Fit,
    /// The same for the threads that get a lane of their own; the others
    /// (pool and other threads, [`folded`]) are handed their states as
    /// recorded and count for nothing, since a format that folds them
    /// draws their time per bin, not per slice (the HTML page).
    FitLanes,
    /// Merge slices shorter than `limits.min_slice_ns` (1: none), however
    /// many remain; each thread's are made as it is written, so memory does
    /// not grow with the output (Perfetto).
    Uncapped,
}

/// Where one recording goes in a trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// 0 for a trace of one recording; 1, 2, … in a merge.
    pub index: u32,
    /// Added to the recording's CLOCK_MONOTONIC times (a merge puts each
    /// recording on its wall clock).
    pub clock_offset_ns: i128,
    /// The machine's name in the trace [default: `host` or `host:rank`].
    pub name: Option<String>,
}

/// Lays out `input` into `sink` (which the caller finishes).
pub fn lay_out<S: TraceSink + ?Sized>(
    input: &TimelineInput,
    policy: SlicePolicy,
    placement: Placement,
    sink: &mut S,
) -> io::Result<()> {
    let model = input.model;
    let order = input.process_order();
    let threads: Vec<&Thread> = order
        .iter()
        .flat_map(|&pid| input.threads_of(pid))
        .collect();
    let fits = |thread: &Thread| match policy {
        SlicePolicy::Fit => true,
        SlicePolicy::FitLanes => !folded(input.role(thread)),
        SlicePolicy::Uncapped => false,
    };
    let fitting: Vec<&Thread> = threads.iter().copied().filter(|t| fits(t)).collect();
    let (min_slice_ns, fitted) = match policy {
        SlicePolicy::Uncapped => (input.limits.min_slice_ns.max(1), Vec::new()),
        SlicePolicy::Fit | SlicePolicy::FitLanes => fit_slices(&fitting, input.limits),
    };
    let key = match placement.index {
        0 => NodeKey::of(model),
        n => NodeKey::of(model).salted(n),
    };
    let mut layout = Layout {
        input,
        key,
        sink,
        process_ids: HashMap::new(),
    };
    layout.sink.node(&NodeInfo {
        index: placement.index,
        name: placement.name.clone().unwrap_or_else(|| node_name(model)),
        kernel_release: model.kernel_release.clone(),
        cores: model.cores,
        clock: NodeClock {
            offset_ns: placement.clock_offset_ns,
        },
        title: input.title.clone(),
        window_start_ns: model.window_start_ns,
        duration_ns: model.duration_ns(),
        min_slice_ns,
        gpu_status: model.gpus.status.clone(),
        key: layout.key,
    })?;
    layout.gpus(&model.gpus.devices)?;
    for (rank, &pid) in order.iter().enumerate() {
        layout.process(pid, rank as i64)?;
    }
    let mut fitted = fitted.into_iter();
    for thread in threads {
        let slices = if fits(thread) { fitted.next() } else { None };
        match slices {
            Some(slices) => layout.thread(thread, slices.into_iter())?,
            None if policy == SlicePolicy::Uncapped => layout.unfitted(thread, min_slice_ns)?,
            None => layout.unfitted(thread, 1)?,
        }
    }
    layout.steps_and_stalls()?;
    layout.cuda_calls()?;
    layout.deliveries()?;
    layout.disks(order.len() as i64)
}

/// `host`, or `host:rank` when the job named its rank.
pub fn node_name(model: &crate::model::Model) -> String {
    let host = if model.hostname.is_empty() {
        "?"
    } else {
        &model.hostname
    };
    match model
        .node
        .as_ref()
        .and_then(|n| n.rank.as_ref())
        .and_then(|r| r.rank)
    {
        Some(rank) => format!("{host}:{rank}"),
        None => host.to_string(),
    }
}

struct Layout<'a, 'i, S: ?Sized> {
    input: &'a TimelineInput<'i>,
    key: NodeKey,
    sink: &'a mut S,
    /// Each process track declared, by pid.
    process_ids: HashMap<u32, TrackId>,
}

impl<S: TraceSink + ?Sized> Layout<'_, '_, S> {
    /// The track of process `pid`: its latest holder's (a reused pid keeps
    /// one track, as the kernel's numbering does).
    fn process_id(&self, pid: u32) -> TrackId {
        let start = self
            .input
            .model
            .processes
            .get(&pid)
            .map_or(self.input.model.window_start_ns, |p| p.start_ns);
        self.key.track(TrackKind::Process { pid }, start)
    }

    fn thread_id(&self, thread: &Thread) -> TrackId {
        let kind = TrackKind::Thread {
            pid: thread.pid,
            tid: thread.tid,
        };
        self.key.track(kind, thread.start_ns)
    }

    /// Declares a track that shows nothing of the model beyond its kind.
    fn declare(
        &mut self,
        id: TrackId,
        parent: Option<TrackId>,
        kind: TrackKind,
        name: &str,
        sort_index: i64,
        start_ns: u64,
    ) -> io::Result<()> {
        self.sink.track(&Track {
            id,
            parent,
            kind,
            name,
            sort_index,
            start_ns,
            of: TrackOf::Nothing,
        })
    }

    fn process(&mut self, pid: u32, rank: i64) -> io::Result<()> {
        let id = self.process_id(pid);
        let start = self
            .input
            .model
            .processes
            .get(&pid)
            .map_or(self.input.model.window_start_ns, |p| p.start_ns);
        let label = self.input.process_label(pid);
        self.declare(id, None, TrackKind::Process { pid }, &label, rank, start)?;
        self.process_ids.insert(pid, id);
        Ok(())
    }

    /// The process track of `pid`, declared now if it was not (a step or
    /// call of a thread whose process the model does not list).
    fn parent(&mut self, pid: u32) -> TrackId {
        if let Some(&id) = self.process_ids.get(&pid) {
            return id;
        }
        let id = self.process_id(pid);
        self.process_ids.insert(pid, id);
        id
    }

    fn thread(&mut self, thread: &Thread, slices: impl Iterator<Item = Slice>) -> io::Result<()> {
        let role = self.input.role(thread);
        let sort = match role {
            Role::Trainer => 0,
            Role::PinMemory => 1,
            Role::DataWorker => 2,
            Role::Other => 10,
            Role::Helper => 15,
            Role::Pool => 20,
        };
        let id = self.thread_id(thread);
        let parent = self.parent(thread.pid);
        let kind = TrackKind::Thread {
            pid: thread.pid,
            tid: thread.tid,
        };
        let label = self.input.thread_label(thread);
        let of = TrackOf::Thread { thread, role };
        self.sink.track(&Track {
            id,
            parent: Some(parent),
            kind,
            name: &label,
            sort_index: sort,
            start_ns: thread.start_ns,
            of,
        })?;
        for slice in slices {
            let args =
                (slice.parts > 1).then(|| json!({ "merged": slice.parts, "mix": slice.mix() }));
            self.sink.slice(
                id,
                &SliceEvent {
                    category: "state",
                    name: slice.kind().name(),
                    start_ns: slice.start_ns,
                    end_ns: slice.end_ns,
                    args,
                    of: SliceOf::State(&slice),
                },
            )?;
        }
        Ok(())
    }

    /// A thread whose slices are not fitted to the limits: its intervals
    /// as recorded when `min_ns` is 1, else merged below `min_ns`.
    fn unfitted(&mut self, thread: &Thread, min_ns: u64) -> io::Result<()> {
        if min_ns <= 1 {
            return self.thread(thread, thread.intervals.iter().map(|iv| Slice::of(&iv)));
        }
        let merged = merge_slices(thread.intervals.iter(), min_ns);
        self.thread(thread, merged.into_iter())
    }

    /// The lane `lane` of thread `tid` (in process `pid`), declared on
    /// first use.
    fn lane(
        &mut self,
        declared: &mut Vec<TrackId>,
        (pid, tid): (u32, u32),
        lane: Lane,
        (name, sort): (&str, i64),
    ) -> io::Result<TrackId> {
        let kind = TrackKind::Lane { pid, tid, lane };
        let start = self.latest_thread(tid).map_or(0, |t| t.start_ns);
        let id = self.key.track(kind, start);
        if !declared.contains(&id) {
            let parent = self.parent(pid);
            self.declare(id, Some(parent), kind, name, sort, start)?;
            declared.push(id);
        }
        Ok(id)
    }

    /// The latest thread with this tid (analysis keys steps and stalls by
    /// tid alone).
    fn latest_thread(&self, tid: u32) -> Option<&Thread> {
        self.input.model.threads.iter().rev().find(|t| t.tid == tid)
    }

    /// Steps and stalls on lanes of the process of the thread they belong
    /// to, next to it.
    fn steps_and_stalls(&mut self) -> io::Result<()> {
        let pid_of: HashMap<u32, u32> = self
            .input
            .model
            .threads
            .iter()
            .map(|t| (t.tid, t.pid))
            .collect();
        let mut declared = Vec::new();
        let input = self.input;
        for step in input.steps {
            let pid = pid_of.get(&step.tid).copied().unwrap_or(step.tid);
            let lane = (pid, step.tid);
            let id = self.lane(&mut declared, lane, Lane::Steps, ("steps", -2))?;
            let slice = SliceEvent {
                category: "step",
                name: &step.label,
                start_ns: step.start_ns,
                end_ns: step.end_ns,
                args: Some(Value::Object(step.args.clone())),
                of: SliceOf::Nothing,
            };
            self.sink.slice(id, &slice)?;
        }
        for phase in input.phases {
            let pid = pid_of.get(&phase.tid).copied().unwrap_or(phase.tid);
            let lane = (pid, phase.tid);
            let id = self.lane(&mut declared, lane, Lane::Phases, ("phases", -3))?;
            let slice = SliceEvent {
                category: "phase",
                name: phase.phase.name(),
                start_ns: phase.start_ns,
                end_ns: phase.end_ns,
                args: Some(json!({ "phase": phase.phase.title(), "top": phase.label })),
                of: SliceOf::Phase(phase),
            };
            self.sink.slice(id, &slice)?;
        }
        for (rank, stall) in kept_stalls(input.stalls) {
            let pid = pid_of.get(&stall.tid).copied().unwrap_or(stall.tid);
            let lane = (pid, stall.tid);
            let id = self.lane(&mut declared, lane, Lane::Stalls, ("stalls", -1))?;
            let slice = SliceEvent {
                category: "stall",
                name: &stall.annotation,
                start_ns: stall.start_ns,
                end_ns: stall.end_ns,
                args: Some(json!({ "rank": rank + 1, "blame": stall.annotation })),
                of: SliceOf::Nothing,
            };
            self.sink.slice(id, &slice)?;
        }
        Ok(())
    }

    /// CUDA runtime calls (copies, syncs, pinned allocations) as slices on
    /// a "cuda" lane beside each calling thread: a blocking cudaMemcpy or
    /// stream sync in the trainer shows where the GPU made it wait. Calls
    /// of one thread never overlap except a traced call inside another;
    /// those nest.
    fn cuda_calls(&mut self) -> io::Result<()> {
        let mut declared = Vec::new();
        let input = self.input;
        for call in &input.model.cuda.calls {
            let lane = (call.tgid, call.tid);
            let id = self.lane(&mut declared, lane, Lane::Cuda, ("cuda", 0))?;
            let args = json!({
                "duration_us": call.duration_ns() as f64 / 1e3,
                "returned": call.ret,
            });
            let slice = SliceEvent {
                category: "cuda",
                name: call.name(),
                start_ns: call.start_ns,
                end_ns: call.end_ns,
                args: Some(args),
                of: SliceOf::Nothing,
            };
            self.sink.slice(id, &slice)?;
        }
        Ok(())
    }

    /// Flow arrows from producer to consumer, each between the threads
    /// alive at the time.
    fn deliveries(&mut self) -> io::Result<()> {
        let mut by_tid: HashMap<u32, Vec<&Thread>> = HashMap::new();
        for t in &self.input.model.threads {
            by_tid.entry(t.tid).or_default().push(t);
        }
        let alive = |tid: u32, ts: u64| {
            by_tid
                .get(&tid)?
                .iter()
                .rev()
                .find(|t| t.start_ns <= ts && ts < t.end_ns)
                .copied()
        };
        for (n, d) in self.input.deliveries.iter().enumerate() {
            let (Some(from), Some(to)) = (alive(d.from_tid, d.ts), alive(d.to_tid, d.ts)) else {
                continue;
            };
            let (from, to) = (self.thread_id(from), self.thread_id(to));
            self.sink.flow(n as u64 + 1, from, to, d.ts)?;
        }
        Ok(())
    }

    /// Utilization and memory of each GPU as counters. A utilization
    /// sample is the driver's average over the period since the previous
    /// one, so it is drawn from the previous sample on.
    fn gpus(&mut self, gpus: &[Gpu]) -> io::Result<()> {
        for (n, gpu) in gpus.iter().enumerate() {
            let kind = TrackKind::Gpu { index: gpu.index };
            let id = self.key.track(kind, 0);
            let name = format!("GPU {} {}", gpu.index, gpu.name);
            self.sink.track(&Track {
                id,
                parent: None,
                kind,
                name: &name,
                sort_index: -100 + n as i64,
                start_ns: 0,
                of: TrackOf::Gpu(gpu),
            })?;
            for (metric, name, unit) in [
                (GpuMetric::GpuUtilPct, "GPU utilization %", "util"),
                (GpuMetric::MemUtilPct, "memory bandwidth %", "util"),
            ] {
                let counter = self.counter(id, name, unit)?;
                for (ts, value) in period_starts(gpu.series(metric)) {
                    self.sink.counter(counter, ts, CounterValue::Uint(value))?;
                }
            }
            let counter = self.counter(id, "memory used MiB", "MiB")?;
            for &(ts, bytes) in gpu.series(GpuMetric::MemUsedBytes) {
                let mib = bytes as f64 / (1024.0 * 1024.0);
                self.sink.counter(counter, ts, CounterValue::Float(mib))?;
            }
        }
        Ok(())
    }

    fn counter(&mut self, parent: TrackId, name: &str, unit: &str) -> io::Result<TrackId> {
        let id = self.key.counter(parent, name);
        self.sink.counter_track(&CounterTrack {
            id,
            parent,
            name,
            unit,
        })?;
        Ok(id)
    }

    /// Each device with its requests laid into queue slots, and how many
    /// were in flight.
    fn disks(&mut self, rank: i64) -> io::Result<()> {
        let model = self.input.model;
        let mut by_dev: BTreeMap<u32, Vec<&IoRequest>> = BTreeMap::new();
        for io in &model.ios {
            by_dev.entry(io.dev).or_default().push(io);
        }
        for (n, (dev, mut ios)) in by_dev.into_iter().enumerate() {
            let kind = TrackKind::Disk { ordinal: n as u32 };
            let id = self.key.track(kind, 0);
            let name = model
                .devices
                .get(&dev)
                .cloned()
                .unwrap_or_else(|| format!("{}:{}", dev >> 20, dev & 0xfffff));
            ios.sort_by_key(|io| (io.start_ns, io.end_ns));
            self.sink.track(&Track {
                id,
                parent: None,
                kind,
                name: &format!("disk {name}"),
                sort_index: rank + n as i64,
                start_ns: 0,
                of: TrackOf::Disk {
                    name: &name,
                    requests: &ios,
                },
            })?;
            if ios.len() > MAX_DISK_REQUESTS {
                self.mean_in_flight(id, &ios)?;
            } else {
                self.requests(id, n as u32, &ios)?;
            }
        }
        Ok(())
    }

    /// Each request in the first free queue slot, and the exact number in
    /// flight.
    fn requests(&mut self, disk: TrackId, ordinal: u32, ios: &[&IoRequest]) -> io::Result<()> {
        let mut slots: Vec<(TrackId, u64)> = Vec::new();
        for io in ios {
            let slot = match slots.iter().position(|&(_, free)| free <= io.start_ns) {
                Some(slot) => slot,
                None if slots.len() < MAX_DISK_SLOTS => {
                    let slot = slots.len();
                    let kind = TrackKind::QueueSlot {
                        disk: ordinal,
                        slot: slot as u32,
                    };
                    let id = self.key.track(kind, 0);
                    let name = format!("queue slot {slot}");
                    self.declare(id, Some(disk), kind, &name, slot as i64, 0)?;
                    slots.push((id, 0));
                    slot
                }
                None => continue,
            };
            slots[slot].1 = io.end_ns;
            let mut args = Map::new();
            args.insert("bytes".into(), io.bytes.into());
            args.insert("tid".into(), io.tid.into());
            args.insert("pid".into(), io.tgid.into());
            if io.error != 0 {
                args.insert("error".into(), io.error.into());
            }
            let slice = SliceEvent {
                category: "io",
                name: op_name(io.op),
                start_ns: io.start_ns,
                end_ns: io.end_ns,
                args: Some(Value::Object(args)),
                of: SliceOf::Nothing,
            };
            self.sink.slice(slots[slot].0, &slice)?;
        }
        // +1 at each start, -1 at each end, one sample per distinct time.
        let mut changes: BTreeMap<u64, i64> = BTreeMap::new();
        for io in ios {
            *changes.entry(io.start_ns).or_default() += 1;
            *changes.entry(io.end_ns).or_default() -= 1;
        }
        let counter = self.counter(disk, "in flight", "requests")?;
        let mut in_flight = 0;
        for (ts, delta) in changes {
            in_flight += delta;
            self.sink
                .counter(counter, ts, CounterValue::Int(in_flight))?;
        }
        Ok(())
    }

    /// The mean number of requests in flight per bin (iostat's aqu-sz).
    fn mean_in_flight(&mut self, disk: TrackId, ios: &[&IoRequest]) -> io::Result<()> {
        let model = self.input.model;
        let bin_ns = bin_ns(model.duration_ns());
        let mut bins = vec![0u64; model.duration_ns().div_ceil(bin_ns).max(1) as usize];
        for io in ios {
            spread(
                &mut bins,
                io.start_ns,
                io.end_ns,
                model.window_start_ns,
                bin_ns,
            );
        }
        let name = format!("in flight (mean per {} ms)", bin_ns / 1_000_000);
        let counter = self.counter(disk, &name, "requests")?;
        for (i, ns) in bins.into_iter().enumerate() {
            let ts = model.window_start_ns + i as u64 * bin_ns;
            let mean = (ns as f64 / bin_ns as f64 * 100.0).round() / 100.0;
            self.sink.counter(counter, ts, CounterValue::Float(mean))?;
        }
        Ok(())
    }
}

/// Stalls may overlap (a stall inside a longer one); on one track a slice
/// must nest or follow, so keep those that do not overlap, worst first,
/// each with its rank among all stalls.
fn kept_stalls(stalls: &[Stall]) -> Vec<(usize, &Stall)> {
    let mut kept: BTreeMap<(u32, u64), &Stall> = BTreeMap::new();
    for stall in stalls {
        let overlaps = kept
            .values()
            .any(|k| k.tid == stall.tid && k.start_ns < stall.end_ns && stall.start_ns < k.end_ns);
        if !overlaps {
            kept.insert((stall.tid, stall.start_ns), stall);
        }
    }
    stalls
        .iter()
        .enumerate()
        .filter(|(_, stall)| kept.get(&(stall.tid, stall.start_ns)) == Some(stall))
        .collect()
}

/// Each value moved to the start of the period it averages (the previous
/// sample; the first one's period is taken to be as long as the second's).
pub(crate) fn period_starts(points: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(points.len());
    for (i, &(ts, value)) in points.iter().enumerate() {
        let start = match i {
            0 => match points.get(1) {
                Some(&(next, _)) => ts.saturating_sub(next - ts),
                None => ts,
            },
            _ => points[i - 1].0,
        };
        out.push((start, value));
    }
    out
}

fn op_name(op: IoOp) -> &'static str {
    match op {
        IoOp::Read => "read",
        IoOp::Write => "write",
        IoOp::Discard => "discard",
        IoOp::Flush => "flush",
        IoOp::Other => "other",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use super::super::tests::{iv, process, thread};
    use super::super::{Delivery, Limits, Roles, Stall, TimelineStep};
    use super::*;
    use crate::model::{Gpus, Model, ThreadState::*};
    use crate::render::trace::memory::{MemorySink, MemoryTrack};

    /// A trainer (pid 1) and one worker process (pid 2) with a pool thread,
    /// a GPU and a disk.
    fn model() -> Model {
        let mut gpu = Gpu {
            index: 0,
            name: "Fake".into(),
            ..Default::default()
        };
        gpu.series.insert(
            (GpuMetric::GpuUtilPct, None),
            vec![(1_000_000, 10), (2_000_000, 90)],
        );
        Model {
            window_start_ns: 1_000_000,
            window_end_ns: 3_000_000,
            targets: vec![1],
            processes: BTreeMap::from([(1, process(1, 0, "python")), (2, process(2, 1, "python"))]),
            threads: vec![
                thread(
                    1,
                    1,
                    "python",
                    vec![
                        iv(1_000_000, 1_500_000, Sleeping),
                        iv(1_500_000, 1_600_000, Runnable),
                        iv(1_600_000, 3_000_000, Running),
                    ],
                ),
                thread(
                    2,
                    2,
                    "pt_data_worker",
                    vec![
                        iv(1_000_000, 1_500_000, Running),
                        iv(1_500_000, 3_000_000, Sleeping),
                    ],
                ),
                thread(3, 2, "omp", vec![iv(1_000_000, 3_000_000, Running)]),
            ],
            ios: vec![
                IoRequest {
                    dev: 8 << 20,
                    start_ns: 1_100_000,
                    end_ns: 1_300_000,
                    bytes: 4096,
                    op: IoOp::Read,
                    tid: 2,
                    tgid: 2,
                    error: 0,
                },
                IoRequest {
                    dev: 8 << 20,
                    start_ns: 1_200_000,
                    end_ns: 1_400_000,
                    bytes: 8192,
                    op: IoOp::Read,
                    tid: 2,
                    tgid: 2,
                    error: 0,
                },
            ],
            devices: BTreeMap::from([(8 << 20, "vda".to_string())]),
            gpus: Gpus {
                status: None,
                devices: vec![gpu],
            },
            ..Default::default()
        }
    }

    fn roles() -> Roles {
        Roles::from_tids(
            [(1, Role::Trainer), (2, Role::DataWorker), (3, Role::Pool)],
            Some(1),
        )
    }

    /// The layout of `model`, as the Chrome trace gets it, kept as values.
    fn lay_out_of(model: &Model, steps: &[TimelineStep], stalls: &[Stall]) -> MemorySink {
        let roles = roles();
        let deliveries = [Delivery {
            ts: 1_500_000,
            from_tid: 2,
            to_tid: 1,
        }];
        let input = TimelineInput {
            model,
            roles: &roles,
            steps,
            deliveries: &deliveries,
            stalls,
            phases: &[],
            title: "t".into(),
            limits: Limits::default(),
        };
        let mut sink = MemorySink::new();
        lay_out(&input, SlicePolicy::Fit, Placement::default(), &mut sink).expect("the layout");
        sink
    }

    fn thread_track(sink: &MemorySink, tid: u32) -> &MemoryTrack {
        sink.thread_tracks()
            .into_iter()
            .find(|t| matches!(t.kind, TrackKind::Thread { tid: t, .. } if t == tid))
            .unwrap_or_else(|| panic!("no track of thread {tid}"))
    }

    #[test]
    fn names_processes_and_threads() {
        let sink = lay_out_of(&model(), &[], &[]);
        let name = |tid| thread_track(&sink, tid).name.as_str();
        assert_eq!(name(1), "python (trainer)");
        assert_eq!(name(2), "pt_data_worker");
        assert_eq!(name(3), "omp");
        let process = |pid| sink.tracks_of(TrackKind::Process { pid })[0];
        assert_eq!(process(1).name, "trainer: python");
        // Named after its main thread, as renamed after the fork.
        assert_eq!(process(2).name, "data worker: pt_data_worker");
        // Each thread sits in its process.
        assert_eq!(thread_track(&sink, 3).parent, Some(process(2).id));
        let gpu = sink.tracks_of(TrackKind::Gpu { index: 0 })[0];
        assert_eq!(gpu.name, "GPU 0 Fake");
        let disk = sink.tracks_of(TrackKind::Disk { ordinal: 0 })[0];
        assert_eq!(disk.name, "disk vda");
        // The trainer's process sorts before the worker's, GPUs before both.
        assert!(gpu.sort_index < process(1).sort_index);
        assert!(process(1).sort_index < process(2).sort_index);
        assert_eq!(sink.nodes.len(), 1);
        assert_eq!(sink.nodes[0].title, "t");
    }

    #[test]
    fn state_slices_cover_each_thread_in_time() {
        let sink = lay_out_of(&model(), &[], &[]);
        let trainer = thread_track(&sink, 1);
        let got: Vec<(&str, &str, u64, u64)> = sink
            .slices_on(trainer.id)
            .iter()
            .map(|s| (s.category, s.name.as_str(), s.start_ns, s.end_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                ("state", "sleep", 1_000_000, 1_500_000),
                ("state", "runnable", 1_500_000, 1_600_000),
                ("state", "running", 1_600_000, 3_000_000),
            ]
        );
    }

    #[test]
    fn gpu_utilization_and_disk_in_flight_are_counters() {
        let sink = lay_out_of(&model(), &[], &[]);
        // 90% averaged over (1 ms, 2 ms] is drawn from 1 ms.
        assert_eq!(
            sink.counter_values("GPU utilization %"),
            vec![
                (0, CounterValue::Uint(10)),
                (1_000_000, CounterValue::Uint(90))
            ]
        );
        let flight: Vec<CounterValue> = sink
            .counter_values("in flight")
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let ints = [1, 2, 1, 0].map(CounterValue::Int);
        assert_eq!(flight, ints);
        // Overlapping requests sit in different queue slots of the disk.
        let slots: HashSet<TrackId> = sink.slices_of("io").iter().map(|s| s.track).collect();
        assert_eq!(slots.len(), 2);
        let disk = sink.tracks_of(TrackKind::Disk { ordinal: 0 })[0].id;
        assert!(
            slots
                .iter()
                .all(|&s| sink.by_id(s).unwrap().parent == Some(disk))
        );
    }

    #[test]
    fn deliveries_are_flows_between_the_threads() {
        let sink = lay_out_of(&model(), &[], &[]);
        let (worker, trainer) = (thread_track(&sink, 2).id, thread_track(&sink, 1).id);
        assert_eq!(sink.flows.len(), 1);
        let flow = sink.flows[0];
        assert_eq!(
            (flow.from, flow.to, flow.ts_ns),
            (worker, trainer, 1_500_000)
        );
    }

    #[test]
    fn steps_and_stalls_have_tracks_of_their_own() {
        let mut args = Map::new();
        args.insert("data_wait_ms".into(), json!(0.5));
        let steps = [TimelineStep {
            tid: 1,
            start_ns: 1_000_000,
            end_ns: 2_000_000,
            label: "step 1".into(),
            args,
        }];
        let stalls = [
            Stall {
                tid: 1,
                start_ns: 1_000_000,
                end_ns: 1_500_000,
                annotation: "waiting for pt_data_worker 2".into(),
            },
            // Overlaps the first: left out of the track.
            Stall {
                tid: 1,
                start_ns: 1_200_000,
                end_ns: 1_300_000,
                annotation: "inner".into(),
            },
        ];
        let sink = lay_out_of(&model(), &steps, &stalls);
        let lane = |lane| {
            let kind = TrackKind::Lane {
                pid: 1,
                tid: 1,
                lane,
            };
            sink.tracks_of(kind)[0].clone()
        };
        let steps_lane = lane(Lane::Steps);
        assert_eq!(steps_lane.name, "steps");
        let step = sink.slices_on(steps_lane.id)[0];
        assert_eq!((step.category, step.name.as_str()), ("step", "step 1"));
        assert_eq!(step.args.as_ref().unwrap()["data_wait_ms"], 0.5);
        let stalls = sink.slices_on(lane(Lane::Stalls).id);
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].name, "waiting for pt_data_worker 2");
        assert_eq!(stalls[0].end_ns - stalls[0].start_ns, 500_000);
        assert_eq!(stalls[0].args.as_ref().unwrap()["rank"], 1);
    }

    #[test]
    fn a_busy_disk_shows_its_mean_queue_instead_of_each_request() {
        let mut model = model();
        let io = model.ios[0];
        // 2 ms window, 1 ms bins: requests back to back in the first half,
        // two at a time.
        model.ios = (0..MAX_DISK_REQUESTS as u64 + 2)
            .map(|i| IoRequest {
                start_ns: 1_000_000 + (i / 2) * 19,
                end_ns: 1_000_000 + (i / 2 + 1) * 19,
                ..io
            })
            .collect();
        let sink = lay_out_of(&model, &[], &[]);
        assert!(sink.slices_of("io").is_empty());
        // 25001 pairs × 19 ns = 475 µs of two in flight: a mean of 0.95.
        assert_eq!(
            sink.counter_values("in flight (mean per 1 ms)"),
            vec![
                (1_000_000, CounterValue::Float(0.95)),
                (2_000_000, CounterValue::Float(0.0))
            ]
        );
    }

    #[test]
    fn cuda_calls_are_slices_beside_their_thread() {
        use crate::model::cuda::{CudaCall, CudaOp};
        let mut model = model();
        model.cuda.calls = vec![CudaCall {
            tid: 1,
            tgid: 1,
            start_ns: 1_700_000,
            end_ns: 1_900_000,
            func: profiler_ebpf::cuda_fn::STREAM_SYNCHRONIZE,
            ret: 0,
            op: CudaOp::Sync { stream: Some(0) },
        }];
        let sink = lay_out_of(&model, &[], &[]);
        let kind = TrackKind::Lane {
            pid: 1,
            tid: 1,
            lane: Lane::Cuda,
        };
        let lane = sink.tracks_of(kind)[0];
        assert_eq!(lane.name, "cuda");
        let calls = sink.slices_on(lane.id);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "cudaStreamSynchronize");
        assert_eq!((calls[0].start_ns, calls[0].end_ns), (1_700_000, 1_900_000));
    }

    #[test]
    fn merged_slices_say_what_they_hold() {
        let mut model = model();
        // 10 µs runnable blips in the pool thread's running.
        let mut ivs = Vec::new();
        let mut t = 1_000_000;
        while t < 3_000_000 {
            ivs.push(iv(t, t + 190_000, Running));
            ivs.push(iv(t + 190_000, t + 200_000, Runnable));
            t += 200_000;
        }
        model.threads[2] = thread(3, 2, "omp", ivs);
        let sink = lay_out_of(&model, &[], &[]);
        let slices = sink.slices_on(thread_track(&sink, 3).id);
        assert_eq!(slices.len(), 1, "{slices:?}");
        assert_eq!(slices[0].name, "running");
        let args = slices[0].args.as_ref().expect("a merged slice's args");
        assert_eq!(args["merged"], 20);
        assert_eq!(args["mix"], "running 95%, runnable 5%");
        assert_eq!(sink.nodes[0].min_slice_ns, 50_000);
    }
}

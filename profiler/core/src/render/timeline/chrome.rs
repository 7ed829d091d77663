//! The timeline as Chrome trace event JSON (the "JSON Object Format" of the
//! Trace Event Format document), which Perfetto UI and chrome://tracing
//! open.
//!
//! Tracks: one process per tracked process and one thread per tracked
//! thread, with its state slices (`X` events named running, runnable, IO,
//! futex, sleep); the trainer's process gets a "steps" and a "stalls"
//! thread of its own; each GPU is a process with counter tracks; each block
//! device is a process whose threads are queue slots holding its requests,
//! with an in-flight counter. Deliveries are flow arrows (`s` on the
//! producer's slice, `f` on the consumer's).
//!
//! Timestamps are µs since the recording started; the tracks that are not
//! threads of the job get pids and tids above any the kernel hands out
//! (pid_max is at most 2^22).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Role, Slice, TimelineInput, bin_ns, fit_slices, spread, us};
use crate::model::{Gpu, IoOp, IoRequest, Thread};
use crate::recording::GpuMetric;

/// Pseudo-thread of a trainer's steps: this plus its tid.
const STEPS_TID: u32 = 1_000_000_000;
/// Pseudo-thread of a thread's stalls: this plus its tid.
const STALLS_TID: u32 = 1_100_000_000;
/// Pseudo-thread of a thread's CUDA runtime calls: this plus its tid.
const CUDA_TID: u32 = 1_200_000_000;
/// The pseudo-thread (or pseudo-process) `base` + `id`. Real tids stay
/// below pid_max (at most 2^22), GPU indexes and device counts small, far
/// under the gaps between bases; an id from a damaged recording wraps
/// rather than overflow.
fn pseudo_tid(base: u32, id: u32) -> u32 {
    base.wrapping_add(id)
}

/// Pseudo-process of GPU n: this plus n.
const GPU_PID: u32 = 2_000_000_000;
/// Pseudo-process of the nth block device: this plus n.
const DISK_PID: u32 = 2_010_000_000;
/// Queue slot k of the nth device: this plus n × 100 plus k.
const DISK_SLOT_TID: u32 = 2_020_000_000;
/// Requests in flight beyond this many are only in the device's counter.
const MAX_DISK_SLOTS: usize = 16;
/// A device with more requests than this shows its mean number in flight
/// per bin instead of each request (a busy disk does thousands a second).
const MAX_DISK_REQUESTS: usize = 50_000;

/// One trace event; absent fields are left out.
#[derive(Serialize)]
struct Event<'a> {
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    /// Flow end binding: "e" binds to the enclosing slice.
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Value>,
}

impl<'a> Event<'a> {
    fn new(ph: &'static str, pid: u32) -> Event<'a> {
        Event {
            ph,
            name: None,
            cat: None,
            pid,
            tid: None,
            ts: None,
            dur: None,
            id: None,
            bp: None,
            args: None,
        }
    }

    fn name(mut self, name: impl Into<Cow<'a, str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    fn tid(mut self, tid: u32) -> Self {
        self.tid = Some(tid);
        self
    }

    fn args(mut self, args: Value) -> Self {
        self.args = Some(args);
        self
    }
}

/// Writes events as the elements of one JSON array.
struct Events<W: Write> {
    out: W,
    origin: u64,
    first: bool,
}

impl<W: Write> Events<W> {
    fn push(&mut self, event: &Event) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut self.out, event).map_err(io::Error::from)
    }

    fn ts(&self, ns: u64) -> Option<f64> {
        Some(us(ns, self.origin))
    }

    fn process_meta(&mut self, pid: u32, name: &str, sort_index: i64) -> io::Result<()> {
        self.push(
            &Event::new("M", pid)
                .name("process_name")
                .args(json!({ "name": name })),
        )?;
        self.push(
            &Event::new("M", pid)
                .name("process_sort_index")
                .args(json!({ "sort_index": sort_index })),
        )
    }

    fn thread_meta(&mut self, pid: u32, tid: u32, name: &str, sort_index: i64) -> io::Result<()> {
        self.push(
            &Event::new("M", pid)
                .tid(tid)
                .name("thread_name")
                .args(json!({ "name": name })),
        )?;
        self.push(
            &Event::new("M", pid)
                .tid(tid)
                .name("thread_sort_index")
                .args(json!({ "sort_index": sort_index })),
        )
    }

    /// A complete slice over `span` (start, end ns).
    fn slice(
        &mut self,
        pid: u32,
        tid: u32,
        cat: &'static str,
        name: &str,
        (start_ns, end_ns): (u64, u64),
        args: Option<Value>,
    ) -> io::Result<()> {
        let mut e = Event::new("X", pid).tid(tid).name(name);
        e.cat = Some(cat);
        e.ts = self.ts(start_ns);
        e.dur = Some(end_ns.saturating_sub(start_ns) as f64 / 1e3);
        e.args = args;
        self.push(&e)
    }

    fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, args: Value) -> io::Result<()> {
        let mut e = Event::new("C", pid).name(name).args(args);
        e.ts = self.ts(ts_ns);
        self.push(&e)
    }
}

/// Writes the trace event JSON of `input`.
pub fn write(input: &TimelineInput, out: impl Write) -> io::Result<()> {
    let model = input.model;
    let mut events = Events {
        out,
        origin: model.window_start_ns,
        first: true,
    };
    let order = input.process_order();
    let threads: Vec<&Thread> = order
        .iter()
        .flat_map(|&pid| input.threads_of(pid))
        .collect();
    let (min_slice_ns, slices) = fit_slices(&threads, input.limits);

    let other = json!({
        "tool": "tprof",
        "title": input.title,
        "clock": "CLOCK_MONOTONIC, ts 0 = recording start",
        "recording_start_monotonic_ns": model.window_start_ns,
        "duration_s": model.duration_ns() as f64 / 1e9,
        "min_slice_us": min_slice_ns as f64 / 1e3,
        "merged": "slices shorter than min_slice_us are merged with their neighbours; \
                   a merged slice is named after its dominant state and its args say what it held",
    });
    write!(
        events.out,
        "{{\"displayTimeUnit\":\"ms\",\"otherData\":{other},\"traceEvents\":["
    )?;

    gpus(&mut events, &model.gpus.devices)?;
    for (rank, &pid) in order.iter().enumerate() {
        events.process_meta(pid, &input.process_label(pid), rank as i64)?;
    }
    for (thread, slices) in threads.iter().zip(&slices) {
        thread_track(&mut events, input, thread, slices)?;
    }
    steps_and_stalls(&mut events, input)?;
    cuda_calls(&mut events, input)?;
    deliveries(&mut events, input)?;
    disks(&mut events, input, order.len() as i64)?;

    events.out.write_all(b"\n]}\n")?;
    events.out.flush()
}

fn thread_track<W: Write>(
    events: &mut Events<W>,
    input: &TimelineInput,
    thread: &Thread,
    slices: &[Slice],
) -> io::Result<()> {
    let sort = match input.role(thread.tid) {
        Role::Trainer => 0,
        Role::PinMemory => 1,
        Role::DataWorker => 2,
        Role::Other => 10,
        Role::Pool => 20,
    };
    let label = input.thread_label(thread);
    events.thread_meta(thread.pid, thread.tid, &label, sort)?;
    for slice in slices {
        let args = (slice.parts > 1).then(|| json!({ "merged": slice.parts, "mix": slice.mix() }));
        events.slice(
            thread.pid,
            thread.tid,
            "state",
            slice.kind().name(),
            (slice.start_ns, slice.end_ns),
            args,
        )?;
    }
    Ok(())
}

/// Steps and stalls on pseudo-threads of the process of the thread they
/// belong to, next to it.
fn steps_and_stalls<W: Write>(events: &mut Events<W>, input: &TimelineInput) -> io::Result<()> {
    let pid_of: HashMap<u32, u32> = input.model.threads.iter().map(|t| (t.tid, t.pid)).collect();
    let mut named = Vec::new();
    for step in input.steps {
        let pid = pid_of.get(&step.tid).copied().unwrap_or(step.tid);
        let tid = pseudo_tid(STEPS_TID, step.tid);
        if !named.contains(&tid) {
            events.thread_meta(pid, tid, "steps", -2)?;
            named.push(tid);
        }
        let args = Value::Object(step.args.clone());
        events.slice(
            pid,
            tid,
            "step",
            &step.label,
            (step.start_ns, step.end_ns),
            Some(args),
        )?;
    }
    // Stalls may overlap (a stall inside a longer one); on one track a
    // slice must nest or follow, so keep those that do not overlap, in time
    // order, worst first.
    let mut kept: BTreeMap<(u32, u64), &super::Stall> = BTreeMap::new();
    for stall in input.stalls {
        let overlaps = kept
            .values()
            .any(|k| k.tid == stall.tid && k.start_ns < stall.end_ns && stall.start_ns < k.end_ns);
        if !overlaps {
            kept.insert((stall.tid, stall.start_ns), stall);
        }
    }
    for (rank, stall) in input.stalls.iter().enumerate() {
        if kept.get(&(stall.tid, stall.start_ns)) != Some(&stall) {
            continue;
        }
        let pid = pid_of.get(&stall.tid).copied().unwrap_or(stall.tid);
        let tid = pseudo_tid(STALLS_TID, stall.tid);
        if !named.contains(&tid) {
            events.thread_meta(pid, tid, "stalls", -1)?;
            named.push(tid);
        }
        let args = json!({ "rank": rank + 1, "blame": stall.annotation });
        events.slice(
            pid,
            tid,
            "stall",
            &stall.annotation,
            (stall.start_ns, stall.end_ns),
            Some(args),
        )?;
    }
    Ok(())
}

/// Flow arrows from producer to consumer, each end bound to the slice
/// around it on its thread.
/// CUDA runtime calls (copies, syncs, pinned allocations) as slices on a
/// "cuda" track beside each calling thread: a blocking cudaMemcpy or stream
/// sync in the trainer shows where the GPU made it wait. Calls of one thread
/// never overlap except a traced call inside another; those nest.
fn cuda_calls<W: Write>(events: &mut Events<W>, input: &TimelineInput) -> io::Result<()> {
    let mut named = Vec::new();
    for call in &input.model.cuda.calls {
        let tid = pseudo_tid(CUDA_TID, call.tid);
        if !named.contains(&tid) {
            events.thread_meta(call.tgid, tid, "cuda", 0)?;
            named.push(tid);
        }
        let args = json!({
            "duration_us": call.duration_ns() as f64 / 1e3,
            "returned": call.ret,
        });
        events.slice(
            call.tgid,
            tid,
            "cuda",
            call.name(),
            (call.start_ns, call.end_ns),
            Some(args),
        )?;
    }
    Ok(())
}

fn deliveries<W: Write>(events: &mut Events<W>, input: &TimelineInput) -> io::Result<()> {
    let threads: HashMap<u32, &Thread> = input.model.threads.iter().map(|t| (t.tid, t)).collect();
    let alive = |tid: u32, ts: u64| {
        threads
            .get(&tid)
            .is_some_and(|t| t.start_ns <= ts && ts < t.end_ns)
    };
    for (n, d) in input.deliveries.iter().enumerate() {
        if !(alive(d.from_tid, d.ts) && alive(d.to_tid, d.ts)) {
            continue;
        }
        let id = n as u64 + 1;
        for (ph, tid) in [("s", d.from_tid), ("f", d.to_tid)] {
            let mut e = Event::new(ph, threads[&tid].pid).tid(tid).name("delivery");
            e.cat = Some("delivery");
            e.ts = events.ts(d.ts);
            e.id = Some(id);
            if ph == "f" {
                e.bp = Some("e");
            }
            events.push(&e)?;
        }
    }
    Ok(())
}

/// Utilization and memory of each GPU as counters. A utilization sample
/// is the driver's average over the period since the previous one, so it is
/// drawn from the previous sample on.
fn gpus<W: Write>(events: &mut Events<W>, gpus: &[Gpu]) -> io::Result<()> {
    for (n, gpu) in gpus.iter().enumerate() {
        let pid = pseudo_tid(GPU_PID, gpu.index);
        events.process_meta(
            pid,
            &format!("GPU {} {}", gpu.index, gpu.name),
            -100 + n as i64,
        )?;
        for (metric, name, key) in [
            (GpuMetric::GpuUtilPct, "GPU utilization %", "util"),
            (GpuMetric::MemUtilPct, "memory bandwidth %", "util"),
        ] {
            for (ts, value) in period_starts(gpu.series(metric)) {
                events.counter(pid, name, ts, json!({ key: value }))?;
            }
        }
        for &(ts, bytes) in gpu.series(GpuMetric::MemUsedBytes) {
            let mib = bytes as f64 / (1024.0 * 1024.0);
            events.counter(pid, "memory used MiB", ts, json!({ "MiB": mib }))?;
        }
    }
    Ok(())
}

/// Each value moved to the start of the period it averages (the previous
/// sample; the first one's period is taken to be as long as the second's).
pub(super) fn period_starts(points: &[(u64, u64)]) -> Vec<(u64, u64)> {
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

/// Each device with its requests laid into queue slots, and how many were
/// in flight.
fn disks<W: Write>(events: &mut Events<W>, input: &TimelineInput, rank: i64) -> io::Result<()> {
    let model = input.model;
    let mut by_dev: BTreeMap<u32, Vec<&IoRequest>> = BTreeMap::new();
    for io in &model.ios {
        by_dev.entry(io.dev).or_default().push(io);
    }
    for (n, (dev, mut ios)) in by_dev.into_iter().enumerate() {
        let pid = pseudo_tid(DISK_PID, n as u32);
        let name = model
            .devices
            .get(&dev)
            .cloned()
            .unwrap_or_else(|| format!("{}:{}", dev >> 20, dev & 0xfffff));
        events.process_meta(pid, &format!("disk {name}"), rank + n as i64)?;
        ios.sort_by_key(|io| (io.start_ns, io.end_ns));
        if ios.len() > MAX_DISK_REQUESTS {
            mean_in_flight(events, input, pid, &ios)?;
        } else {
            requests(events, pid, n as u32, &ios)?;
        }
    }
    Ok(())
}

/// Each request in the first free queue slot, and the exact number in
/// flight.
fn requests<W: Write>(
    events: &mut Events<W>,
    pid: u32,
    device: u32,
    ios: &[&IoRequest],
) -> io::Result<()> {
    let slot_tid = |slot: usize| pseudo_tid(DISK_SLOT_TID, device * 100 + slot as u32);
    let mut slot_free_at: Vec<u64> = Vec::new();
    for io in ios {
        let slot = match slot_free_at.iter().position(|&free| free <= io.start_ns) {
            Some(slot) => slot,
            None if slot_free_at.len() < MAX_DISK_SLOTS => {
                slot_free_at.push(0);
                let slot = slot_free_at.len() - 1;
                events.thread_meta(
                    pid,
                    slot_tid(slot),
                    &format!("queue slot {slot}"),
                    slot as i64,
                )?;
                slot
            }
            None => continue,
        };
        slot_free_at[slot] = io.end_ns;
        let mut args = Map::new();
        args.insert("bytes".into(), io.bytes.into());
        args.insert("tid".into(), io.tid.into());
        args.insert("pid".into(), io.tgid.into());
        if io.error != 0 {
            args.insert("error".into(), io.error.into());
        }
        events.slice(
            pid,
            slot_tid(slot),
            "io",
            op_name(io.op),
            (io.start_ns, io.end_ns),
            Some(Value::Object(args)),
        )?;
    }
    // +1 at each start, -1 at each end, one sample per distinct time.
    let mut changes: BTreeMap<u64, i64> = BTreeMap::new();
    for io in ios {
        *changes.entry(io.start_ns).or_default() += 1;
        *changes.entry(io.end_ns).or_default() -= 1;
    }
    let mut in_flight = 0;
    for (ts, delta) in changes {
        in_flight += delta;
        events.counter(pid, "in flight", ts, json!({ "requests": in_flight }))?;
    }
    Ok(())
}

/// The mean number of requests in flight per bin (iostat's aqu-sz).
fn mean_in_flight<W: Write>(
    events: &mut Events<W>,
    input: &TimelineInput,
    pid: u32,
    ios: &[&IoRequest],
) -> io::Result<()> {
    let model = input.model;
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
    for (i, ns) in bins.into_iter().enumerate() {
        let ts = model.window_start_ns + i as u64 * bin_ns;
        let mean = (ns as f64 / bin_ns as f64 * 100.0).round() / 100.0;
        events.counter(pid, &name, ts, json!({ "requests": mean }))?;
    }
    Ok(())
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
        Roles {
            by_tid: BTreeMap::from([(1, Role::Trainer), (2, Role::DataWorker), (3, Role::Pool)]),
            trainer: Some(1),
        }
    }

    fn render(model: &Model, steps: &[TimelineStep], stalls: &[Stall]) -> Value {
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
            title: "t".into(),
            limits: Limits::default(),
        };
        let mut out = Vec::new();
        write(&input, &mut out).unwrap();
        serde_json::from_slice(&out).expect("valid JSON")
    }

    fn events(trace: &Value) -> &Vec<Value> {
        trace["traceEvents"].as_array().unwrap()
    }

    fn meta<'a>(trace: &'a Value, name: &str, pid: u64, tid: Option<u64>) -> Option<&'a Value> {
        events(trace).iter().find(|e| {
            e["ph"] == "M"
                && e["name"] == name
                && e["pid"] == pid
                && tid.is_none_or(|t| e["tid"] == t)
        })
    }

    #[test]
    fn every_event_has_the_fields_its_phase_needs() {
        let trace = render(&model(), &[], &[]);
        assert_eq!(trace["displayTimeUnit"], "ms");
        for e in events(&trace) {
            let ph = e["ph"].as_str().expect("ph");
            assert!(e["pid"].is_u64(), "{e}");
            match ph {
                "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_i64()),
                "X" => {
                    assert!(e["tid"].is_u64() && e["name"].is_string(), "{e}");
                    assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
                    assert!(e["dur"].as_f64().unwrap() > 0.0, "{e}");
                }
                "C" => assert!(e["ts"].is_number() && e["args"].is_object(), "{e}"),
                "s" | "f" => assert!(e["id"].is_u64() && e["tid"].is_u64(), "{e}"),
                other => panic!("unexpected phase {other}: {e}"),
            }
        }
    }

    #[test]
    fn names_processes_and_threads() {
        let trace = render(&model(), &[], &[]);
        let name =
            |pid, tid| meta(&trace, "thread_name", pid, tid).unwrap()["args"]["name"].clone();
        assert_eq!(name(1, Some(1)), "python (trainer)");
        assert_eq!(name(2, Some(2)), "pt_data_worker");
        assert_eq!(name(2, Some(3)), "omp");
        let process =
            |pid| meta(&trace, "process_name", pid, None).unwrap()["args"]["name"].clone();
        assert_eq!(process(1), "trainer: python");
        // Named after its main thread, as renamed after the fork.
        assert_eq!(process(2), "data worker: pt_data_worker");
        assert_eq!(process(u64::from(GPU_PID)), "GPU 0 Fake");
        assert_eq!(process(u64::from(DISK_PID)), "disk vda");
        // The trainer's process sorts before the worker's, GPUs before both.
        let sort = |pid: u64| {
            meta(&trace, "process_sort_index", pid, None).unwrap()["args"]["sort_index"]
                .as_i64()
                .unwrap()
        };
        assert!(sort(u64::from(GPU_PID)) < sort(1) && sort(1) < sort(2));
    }

    #[test]
    fn state_slices_cover_each_thread_in_time() {
        let trace = render(&model(), &[], &[]);
        let slices: Vec<&Value> = events(&trace)
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == 1)
            .collect();
        let got: Vec<(&str, f64, f64)> = slices
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("sleep", 0.0, 500.0),
                ("runnable", 500.0, 100.0),
                ("running", 600.0, 1400.0)
            ]
        );
        assert!(slices.iter().all(|e| e["cat"] == "state" && e["pid"] == 1));
    }

    #[test]
    fn gpu_utilization_and_disk_in_flight_are_counters() {
        let trace = render(&model(), &[], &[]);
        let counters = |name: &str| -> Vec<(f64, Value)> {
            events(&trace)
                .iter()
                .filter(|e| e["ph"] == "C" && e["name"] == name)
                .map(|e| (e["ts"].as_f64().unwrap(), e["args"].clone()))
                .collect()
        };
        // 90% averaged over (1 ms, 2 ms] is drawn from 1 ms: ts 0 µs.
        let util = counters("GPU utilization %");
        assert_eq!(util.len(), 2);
        assert_eq!(util[1], (0.0, json!({"util": 90})));
        let flight: Vec<i64> = counters("in flight")
            .iter()
            .map(|(_, a)| a["requests"].as_i64().unwrap())
            .collect();
        assert_eq!(flight, vec![1, 2, 1, 0]);
        // Overlapping requests sit in different queue slots.
        let io_tids: HashSet<u64> = events(&trace)
            .iter()
            .filter(|e| e["cat"] == "io")
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert_eq!(io_tids.len(), 2);
    }

    #[test]
    fn deliveries_are_flows_with_matching_ids() {
        let trace = render(&model(), &[], &[]);
        let flow: Vec<&Value> = events(&trace)
            .iter()
            .filter(|e| e["cat"] == "delivery")
            .collect();
        assert_eq!(flow.len(), 2);
        let (start, end) = (flow[0], flow[1]);
        assert_eq!(
            (start["ph"].as_str(), end["ph"].as_str()),
            (Some("s"), Some("f"))
        );
        assert_eq!(start["id"], end["id"]);
        assert_eq!(
            (start["tid"].as_u64(), end["tid"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(
            (start["pid"].as_u64(), end["pid"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(start["ts"], end["ts"]);
        assert_eq!(end["bp"], "e");
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
        let trace = render(&model(), &steps, &stalls);
        let step_tid = u64::from(STEPS_TID + 1);
        let name = meta(&trace, "thread_name", 1, Some(step_tid)).expect("steps thread");
        assert_eq!(name["args"]["name"], "steps");
        let step = events(&trace)
            .iter()
            .find(|e| e["cat"] == "step")
            .expect("step slice");
        assert_eq!(step["tid"], step_tid);
        assert_eq!(step["args"]["data_wait_ms"], 0.5);
        let stalls: Vec<&Value> = events(&trace)
            .iter()
            .filter(|e| e["cat"] == "stall")
            .collect();
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0]["name"], "waiting for pt_data_worker 2");
        assert_eq!(stalls[0]["dur"], 500.0);
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
        let trace = render(&model, &[], &[]);
        assert!(!events(&trace).iter().any(|e| e["cat"] == "io"));
        let means: Vec<f64> = events(&trace)
            .iter()
            .filter(|e| e["name"] == "in flight (mean per 1 ms)")
            .map(|e| e["args"]["requests"].as_f64().unwrap())
            .collect();
        // 25001 pairs × 19 ns = 475 µs of two in flight: a mean of 0.95.
        assert_eq!(means, vec![0.95, 0.0]);
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
        let trace = render(&model, &[], &[]);
        let tid = u64::from(CUDA_TID + 1);
        let name = meta(&trace, "thread_name", 1, Some(tid)).expect("cuda track");
        assert_eq!(name["args"]["name"], "cuda");
        let call = events(&trace)
            .iter()
            .find(|e| e["ph"] == "X" && e["tid"] == tid)
            .expect("a cuda slice");
        assert_eq!(call["name"], "cudaStreamSynchronize");
        assert_eq!(call["ts"], 700.0);
        assert_eq!(call["dur"], 200.0);
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
        let trace = render(&model, &[], &[]);
        let slices: Vec<&Value> = events(&trace)
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == 3)
            .collect();
        assert_eq!(slices.len(), 1, "{slices:?}");
        assert_eq!(slices[0]["name"], "running");
        assert_eq!(slices[0]["args"]["merged"], 20);
        assert_eq!(slices[0]["args"]["mix"], "running 95%, runnable 5%");
        assert_eq!(trace["otherData"]["min_slice_us"], 50.0);
    }
}

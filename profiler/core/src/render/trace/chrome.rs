//! Chrome trace event JSON (the "JSON Object Format" of the Trace Event
//! Format document), which chrome://tracing and Perfetto UI open: one
//! recording per file, its timestamps µs since the recording started.
//!
//! The format knows only processes and threads, by number, so the tracks
//! that are neither get numbers above any the kernel hands out (pid_max is
//! at most 2^22): a thread's steps, stalls and CUDA lanes are threads
//! 1.0e9, 1.1e9 and 1.2e9 + its tid in its process; GPU n is process
//! 2.00e9 + n, the nth disk process 2.01e9 + n with its queue slots as
//! threads 2.02e9 + 100 n + slot. These numbers exist only in this file.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;
use serde_json::{Value, json};

use super::{
    CounterTrack, CounterValue, Lane, NodeInfo, SliceEvent, TraceSink, Track, TrackId, TrackKind,
};
use crate::render::exporter::{Exporter, Reads};
use crate::render::timeline::tracks::SlicePolicy;

/// `tprof timeline -o FILE.json`: merged to fit its limits.
pub static CHROME: Exporter = Exporter {
    name: "chrome",
    about: "The timeline as Chrome trace event JSON, merged to fit",
    extensions: &["json"],
    opens_in: "chrome://tracing, Perfetto UI",
    reads: Reads::Timeline {
        slices: SlicePolicy::Fit,
        sink: |out| Box::new(ChromeSink::new(out)),
    },
};

/// Thread of a thread's steps: this plus its tid.
pub const STEPS_TID: u32 = 1_000_000_000;
/// Thread of a thread's stalls: this plus its tid.
pub const STALLS_TID: u32 = 1_100_000_000;
/// Thread of a thread's CUDA runtime calls: this plus its tid.
pub const CUDA_TID: u32 = 1_200_000_000;
/// Chrome's thread id of a thread's "phases" lane: PHASES_TID + its tid.
pub const PHASES_TID: u32 = 1_300_000_000;
/// Process of GPU n: this plus n.
pub const GPU_PID: u32 = 2_000_000_000;
/// Process of the nth block device: this plus n.
pub const DISK_PID: u32 = 2_010_000_000;
/// Queue slot k of the nth device: this plus n × 100 plus k.
pub const DISK_SLOT_TID: u32 = 2_020_000_000;

/// The number `base` + `id`. Real tids stay below pid_max, GPU indexes and
/// device counts small, far under the gaps between bases; an id from a
/// damaged recording wraps rather than overflow.
fn above(base: u32, id: u32) -> u32 {
    base.wrapping_add(id)
}

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

/// A Chrome trace being written: events as the elements of one JSON array.
pub struct ChromeSink<W: Write> {
    out: W,
    /// The window's start: ts 0.
    origin: u64,
    started: bool,
    first: bool,
    /// Each track's (pid, tid).
    places: HashMap<TrackId, (u32, Option<u32>)>,
    /// Each counter's (pid, name, series name).
    counters: HashMap<TrackId, (u32, String, String)>,
}

impl<W: Write> ChromeSink<W> {
    pub fn new(out: W) -> ChromeSink<W> {
        ChromeSink {
            out,
            origin: 0,
            started: false,
            first: true,
            places: HashMap::new(),
            counters: HashMap::new(),
        }
    }

    fn push(&mut self, event: &Event) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut self.out, event).map_err(io::Error::from)
    }

    /// ns since the window start as µs (Chrome's trace unit), to the ns.
    fn ts(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.origin) as f64 / 1e3
    }

    fn place(&self, track: TrackId) -> io::Result<(u32, Option<u32>)> {
        self.places
            .get(&track)
            .copied()
            .ok_or_else(|| undeclared(track))
    }

    /// The (pid, tid) Chrome's format gives a track.
    fn number(kind: TrackKind) -> (u32, Option<u32>) {
        match kind {
            TrackKind::Process { pid } => (pid, None),
            TrackKind::Thread { pid, tid } => (pid, Some(tid)),
            TrackKind::Lane { pid, tid, lane } => {
                let base = match lane {
                    Lane::Steps => STEPS_TID,
                    Lane::Stalls => STALLS_TID,
                    Lane::Cuda => CUDA_TID,
                    Lane::Phases => PHASES_TID,
                };
                (pid, Some(above(base, tid)))
            }
            TrackKind::Gpu { index } => (above(GPU_PID, index), None),
            TrackKind::Disk { ordinal } => (above(DISK_PID, ordinal), None),
            TrackKind::QueueSlot { disk, slot } => (
                above(DISK_PID, disk),
                Some(above(
                    DISK_SLOT_TID,
                    disk.wrapping_mul(100).wrapping_add(slot),
                )),
            ),
        }
    }
}

fn undeclared(track: TrackId) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("track {:#x} used before it was declared", track.0),
    )
}

impl<W: Write> TraceSink for ChromeSink<W> {
    fn node(&mut self, node: &NodeInfo) -> io::Result<()> {
        if self.started {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a Chrome trace holds one recording; merge recordings into a Perfetto trace",
            ));
        }
        self.started = true;
        self.origin = node.window_start_ns;
        let other = json!({
            "tool": "tprof",
            "title": node.title,
            "clock": "CLOCK_MONOTONIC, ts 0 = recording start",
            "recording_start_monotonic_ns": node.window_start_ns,
            "duration_s": node.duration_ns as f64 / 1e9,
            "min_slice_us": node.min_slice_ns as f64 / 1e3,
            "merged": "slices shorter than min_slice_us are merged with their neighbours; \
                       a merged slice is named after its dominant state and its args say what it held",
        });
        write!(
            self.out,
            "{{\"displayTimeUnit\":\"ms\",\"otherData\":{other},\"traceEvents\":["
        )
    }

    fn track(&mut self, track: &Track) -> io::Result<()> {
        let (pid, tid) = Self::number(track.kind);
        self.places.insert(track.id, (pid, tid));
        let (name_key, sort_key) = match tid {
            None => ("process_name", "process_sort_index"),
            Some(_) => ("thread_name", "thread_sort_index"),
        };
        let meta = |name: &'static str, args: Value| {
            let e = Event::new("M", pid).name(name).args(args);
            match tid {
                Some(tid) => e.tid(tid),
                None => e,
            }
        };
        self.push(&meta(name_key, json!({ "name": track.name })))?;
        self.push(&meta(sort_key, json!({ "sort_index": track.sort_index })))
    }

    fn counter_track(&mut self, counter: &CounterTrack) -> io::Result<()> {
        let (pid, _) = self.place(counter.parent)?;
        self.counters.insert(
            counter.id,
            (pid, counter.name.to_string(), counter.unit.to_string()),
        );
        Ok(())
    }

    fn slice(&mut self, track: TrackId, slice: &SliceEvent) -> io::Result<()> {
        let (pid, tid) = self.place(track)?;
        let mut e = Event::new("X", pid).name(slice.name);
        e.tid = tid;
        e.cat = Some(slice.category);
        e.ts = Some(self.ts(slice.start_ns));
        e.dur = Some(slice.end_ns.saturating_sub(slice.start_ns) as f64 / 1e3);
        e.args.clone_from(&slice.args);
        self.push(&e)
    }

    fn counter(&mut self, track: TrackId, ts_ns: u64, value: CounterValue) -> io::Result<()> {
        let (pid, name, unit) = self.counters.get(&track).ok_or_else(|| undeclared(track))?;
        let value = match value {
            CounterValue::Uint(v) => Value::from(v),
            CounterValue::Int(v) => Value::from(v),
            CounterValue::Float(v) => Value::from(v),
        };
        let mut args = serde_json::Map::new();
        args.insert(unit.clone(), value);
        let mut e = Event::new("C", *pid)
            .name(name.clone())
            .args(Value::Object(args));
        e.ts = Some(self.ts(ts_ns));
        self.push(&e)
    }

    fn flow(&mut self, id: u64, from: TrackId, to: TrackId, ts_ns: u64) -> io::Result<()> {
        for (ph, track) in [("s", from), ("f", to)] {
            let (pid, tid) = self.place(track)?;
            let mut e = Event::new(ph, pid).name("delivery");
            e.tid = tid;
            e.cat = Some("delivery");
            e.ts = Some(self.ts(ts_ns));
            e.id = Some(id);
            if ph == "f" {
                e.bp = Some("e");
            }
            self.push(&e)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NodeClock, NodeKey, SliceOf, TrackOf};
    use super::*;

    fn node() -> NodeInfo {
        NodeInfo {
            index: 0,
            name: "host".into(),
            kernel_release: String::new(),
            cores: 2,
            clock: NodeClock { offset_ns: 0 },
            title: "t".into(),
            window_start_ns: 1_000_000,
            duration_ns: 2_000_000,
            min_slice_ns: 50_000,
            gpu_status: None,
            key: NodeKey(1),
        }
    }

    fn track(id: u64, parent: Option<u64>, kind: TrackKind, name: &str) -> Track<'_> {
        Track {
            id: TrackId(id),
            parent: parent.map(TrackId),
            kind,
            name,
            sort_index: id as i64,
            start_ns: 1_000_000,
            of: TrackOf::Nothing,
        }
    }

    /// A process with a thread, the thread's steps lane, a GPU with a
    /// counter and a disk's queue slot, a slice on each and a flow between
    /// the thread and its lane, as Chrome trace event JSON.
    fn trace() -> Value {
        let mut out = Vec::new();
        let mut sink = ChromeSink::new(&mut out);
        sink.node(&node()).unwrap();
        let steps = Lane::Steps;
        for t in [
            track(1, None, TrackKind::Process { pid: 7 }, "trainer: python"),
            track(2, Some(1), TrackKind::Thread { pid: 7, tid: 8 }, "python"),
            track(
                3,
                Some(1),
                TrackKind::Lane {
                    pid: 7,
                    tid: 8,
                    lane: steps,
                },
                "steps",
            ),
            track(4, None, TrackKind::Gpu { index: 1 }, "GPU 1 Fake"),
            track(5, None, TrackKind::Disk { ordinal: 2 }, "disk vda"),
            track(
                6,
                Some(5),
                TrackKind::QueueSlot { disk: 2, slot: 3 },
                "queue slot 3",
            ),
        ] {
            sink.track(&t).unwrap();
        }
        let counter = CounterTrack {
            id: TrackId(9),
            parent: TrackId(4),
            name: "GPU utilization %",
            unit: "util",
        };
        sink.counter_track(&counter).unwrap();
        sink.counter(TrackId(9), 1_500_000, CounterValue::Uint(90))
            .unwrap();
        for track in [2, 3, 6] {
            let slice = SliceEvent {
                category: "state",
                name: "running",
                start_ns: 1_250_000,
                end_ns: 1_750_000,
                args: Some(json!({ "merged": 2 })),
                of: SliceOf::Nothing,
            };
            sink.slice(TrackId(track), &slice).unwrap();
        }
        sink.flow(1, TrackId(2), TrackId(3), 2_000_000).unwrap();
        sink.finish().unwrap();
        serde_json::from_slice(&out).expect("valid JSON")
    }

    fn events(trace: &Value) -> &Vec<Value> {
        trace["traceEvents"].as_array().unwrap()
    }

    #[test]
    fn every_event_has_the_fields_its_phase_needs() {
        let trace = trace();
        assert_eq!(trace["displayTimeUnit"], "ms");
        assert_eq!(trace["otherData"]["min_slice_us"], 50.0);
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
    fn tracks_that_are_not_threads_get_numbers_of_their_own() {
        let trace = trace();
        let places: Vec<(u64, Option<u64>)> = events(&trace)
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64()))
            .collect();
        let (steps, disk, slot) = (STEPS_TID + 8, DISK_PID + 2, DISK_SLOT_TID + 203);
        assert_eq!(
            places,
            [(7, Some(8)), (7, Some(steps)), (disk, Some(slot))]
                .map(|(p, t)| (u64::from(p), t.map(u64::from)))
        );
        let gpu = events(&trace)
            .iter()
            .find(|e| e["ph"] == "M" && e["args"]["name"] == "GPU 1 Fake")
            .expect("the GPU's process");
        assert_eq!(gpu["pid"], GPU_PID + 1);
    }

    #[test]
    fn times_are_us_from_the_window_start() {
        let trace = trace();
        let slice = events(&trace).iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!(
            (slice["ts"].as_f64(), slice["dur"].as_f64()),
            (Some(250.0), Some(500.0))
        );
        assert_eq!(slice["args"]["merged"], 2);
        let counter = events(&trace).iter().find(|e| e["ph"] == "C").unwrap();
        assert_eq!(counter["ts"], 500.0);
        assert_eq!(counter["args"], json!({ "util": 90 }));
    }

    #[test]
    fn a_flow_binds_its_end_to_the_enclosing_slice() {
        let trace = trace();
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
            (Some(8), Some(u64::from(STEPS_TID + 8)))
        );
        assert_eq!(start["ts"], end["ts"]);
        assert_eq!(end["bp"], "e");
    }

    #[test]
    fn a_track_used_before_it_is_declared_is_an_error() {
        let mut sink = ChromeSink::new(Vec::new());
        sink.node(&node()).unwrap();
        let slice = SliceEvent {
            category: "state",
            name: "running",
            start_ns: 0,
            end_ns: 1,
            args: None,
            of: SliceOf::Nothing,
        };
        assert!(sink.slice(TrackId(5), &slice).is_err());
        assert!(
            sink.node(&node()).is_err(),
            "one recording per Chrome trace"
        );
    }
}

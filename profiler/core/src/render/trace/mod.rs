//! One seam for every trace format: the timeline layout
//! ([`crate::render::timeline::tracks`]) says which tracks there are and
//! what happens on them; a [`TraceSink`] writes that in its format. Chrome
//! trace event JSON ([`chrome`]), Perfetto's protobuf ([`perfetto`]) and a
//! self-contained HTML page ([`html`]) are the formats; [`memory`] keeps it
//! as values, for tests. `tprof merge` feeds several recordings, one node
//! each, into one Perfetto sink.
//!
//! A format draws what happens on each track, from the kind, name and args
//! the layout gives it; a format that summarizes instead (the [`html`] page
//! folds pool threads into counts and bins a disk's requests into %util)
//! reads the model's object a track or slice is of ([`TrackOf`],
//! [`SliceOf`]). Either way the layout decides which tracks there are, in
//! which order, under which names: there is one layout for every format.
//!
//! Tracks are named by what they are ([`TrackKind`]) and by a [`TrackId`]
//! that is stable (the same recording gives the same ids) and unique across
//! the recordings of a merge: it hashes the node, the process or thread id
//! and its start time, so a reused pid, or the same pid on two machines, is
//! a different track. A format with only pids and tids (Chrome's) maps the
//! kinds onto numbers itself.
//!
//! Times handed to a sink are the recording's CLOCK_MONOTONIC ns; the sink
//! places them with the node's [`NodeClock`].

pub mod chrome;
pub mod html;
pub mod memory;
pub mod perfetto;
pub mod perfetto_proto;

use std::io;

use serde_json::Value;

use crate::analysis::roles::Role;
use crate::analysis::timeline::PhaseSlice;
use crate::model::{Gpu, IoRequest, Model, Thread};
use crate::render::timeline::Slice;

/// A track's identity in a trace (never 0: Perfetto reserves it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrackId(pub u64);

/// A lane of its own beside a thread, for what is not the thread's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The trainer's steps.
    Steps,
    /// Its worst stalls.
    Stalls,
    /// CUDA runtime calls.
    Cuda,
    /// The phases of the trainer's steps (analysis::anatomy).
    Phases,
}

/// What a track is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackKind {
    /// A process of the job.
    Process { pid: u32 },
    /// A thread of the job, its state over time.
    Thread { pid: u32, tid: u32 },
    /// A lane of thread `tid`, in its process `pid`.
    Lane { pid: u32, tid: u32, lane: Lane },
    /// A GPU (NVML's index), holding its counters.
    Gpu { index: u32 },
    /// The `ordinal`th block device with requests, holding its queue.
    Disk { ordinal: u32 },
    /// One queue slot of a disk: requests in flight side by side.
    QueueSlot { disk: u32, slot: u32 },
}

/// A track to declare before anything happens on it.
#[derive(Debug, Clone, Copy)]
pub struct Track<'a> {
    pub id: TrackId,
    /// The process (or GPU, or disk) it belongs to.
    pub parent: Option<TrackId>,
    pub kind: TrackKind,
    pub name: &'a str,
    /// Smaller first among its siblings.
    pub sort_index: i64,
    /// When it began (ns, recording clock): a process' or thread's start.
    pub start_ns: u64,
    /// What in the model it shows.
    pub of: TrackOf<'a>,
}

/// What in the model a track shows, for a format that draws the track its
/// own way rather than by what happens on it.
#[derive(Debug, Clone, Copy)]
pub enum TrackOf<'a> {
    /// A thread of the job, in its role.
    Thread {
        thread: &'a Thread,
        role: Role,
    },
    Gpu(&'a Gpu),
    /// A block device and every request it served: its queue slots hold
    /// only those that fit, and none when there are too many.
    Disk {
        name: &'a str,
        requests: &'a [&'a IoRequest],
    },
    /// Nothing beyond its kind and name (a process, a lane, a queue slot).
    Nothing,
}

/// A counter: a series of values over time on a track of its own.
#[derive(Debug, Clone, Copy)]
pub struct CounterTrack<'a> {
    pub id: TrackId,
    pub parent: TrackId,
    pub name: &'a str,
    /// What a value counts ("util" %, "MiB", "requests"); Chrome's name
    /// for the series.
    pub unit: &'a str,
}

/// A counter's value, as precise as it was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    Uint(u64),
    Int(i64),
    Float(f64),
}

/// Something that took time on a track.
#[derive(Debug, Clone)]
pub struct SliceEvent<'a> {
    /// Which kind of slice: "state", "step", "stall", "cuda", "io".
    pub category: &'static str,
    pub name: &'a str,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Details, a JSON object.
    pub args: Option<Value>,
    /// What in the model it shows.
    pub of: SliceOf<'a>,
}

/// What in the model a slice shows, for a format with a form of its own
/// for it (the HTML page packs states and phases into numbers).
#[derive(Debug, Clone, Copy)]
pub enum SliceOf<'a> {
    /// A thread's state, or a run of states merged.
    State(&'a Slice),
    /// A phase of the trainer's step.
    Phase(&'a PhaseSlice),
    /// Nothing beyond its name and args.
    Nothing,
}

/// How a node's clock maps onto the trace's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeClock {
    /// Added to the recording's CLOCK_MONOTONIC ns: 0 keeps them as they
    /// are; a merge adds each recording's realtime offset, so all are on
    /// the wall clock.
    pub offset_ns: i128,
}

impl NodeClock {
    pub fn place(&self, ts_ns: u64) -> u64 {
        (i128::from(ts_ns) + self.offset_ns).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// One recording's place in a trace: its machine, its clock, and what the
/// trace says about it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// 1, 2, … in a merge (Perfetto's machine id); 0 for a trace of one
    /// recording.
    pub index: u32,
    /// `host` or `host:rank`.
    pub name: String,
    pub kernel_release: String,
    pub cores: u32,
    pub clock: NodeClock,
    pub title: String,
    pub window_start_ns: u64,
    pub duration_ns: u64,
    /// Slices shorter than this were merged with their neighbours (1: none).
    pub min_slice_ns: u64,
    /// Why the node has no GPU tracks, when it has none and the recording
    /// says.
    pub gpu_status: Option<String>,
    /// What the ids of this node's tracks hash.
    pub key: NodeKey,
}

/// What tells one recording's machine and rank from another's: the ids of
/// its tracks derive from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeKey(pub u64);

impl NodeKey {
    /// The machine (machine id, else host name), boot, rank and the
    /// opening of the window on the wall clock.
    pub fn of(model: &Model) -> NodeKey {
        let node = model.node.as_ref();
        let mut h = Fnv::new();
        h.str(
            node.and_then(|n| n.machine_id.as_deref())
                .unwrap_or(&model.hostname),
        );
        h.str(node.and_then(|n| n.boot_id.as_deref()).unwrap_or(""));
        h.u64(
            node.and_then(|n| n.rank.as_ref())
                .and_then(|r| r.rank)
                .map_or(u64::MAX, u64::from),
        );
        h.u64(model.start_anchor.realtime_ns);
        NodeKey(h.finish())
    }

    /// This key made unique to the `n`th recording of a merge (the same
    /// file merged twice still gets tracks of its own).
    #[must_use]
    pub fn salted(self, n: u32) -> NodeKey {
        let mut h = Fnv::new();
        h.words(&[self.0, 8, n.into()]);
        NodeKey(h.finish())
    }

    /// A track's id: this node, what the track is, and when its process or
    /// thread began (pids and tids are reused).
    pub fn track(self, kind: TrackKind, start_ns: u64) -> TrackId {
        let mut h = Fnv::new();
        h.u64(self.0);
        match kind {
            TrackKind::Process { pid } => h.words(&[1, pid.into(), start_ns]),
            TrackKind::Thread { pid, tid } => h.words(&[2, pid.into(), tid.into(), start_ns]),
            TrackKind::Lane { pid, tid, lane } => {
                h.words(&[3, pid.into(), tid.into(), lane as u64, start_ns]);
            }
            TrackKind::Gpu { index } => h.words(&[4, index.into()]),
            TrackKind::Disk { ordinal } => h.words(&[5, ordinal.into()]),
            TrackKind::QueueSlot { disk, slot } => h.words(&[6, disk.into(), slot.into()]),
        }
        TrackId(h.finish().max(1))
    }

    /// The id of counter `name` on `parent`.
    pub fn counter(self, parent: TrackId, name: &str) -> TrackId {
        let mut h = Fnv::new();
        h.words(&[self.0, 7, parent.0]);
        h.str(name);
        TrackId(h.finish().max(1))
    }
}

/// FNV-1a, 64 bits: ids must be the same from one run, build or version of
/// tprof to the next, which std's hasher does not promise.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn words(&mut self, words: &[u64]) {
        for &w in words {
            self.u64(w);
        }
    }

    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where a timeline goes: tracks declared once, then what happens on them.
/// Every method may be called in any order a layout likes, except that a
/// track is declared before it is used and [`TraceSink::node`] comes before
/// the node's tracks.
pub trait TraceSink {
    /// Starts one recording's part of the trace.
    fn node(&mut self, node: &NodeInfo) -> io::Result<()>;
    fn track(&mut self, track: &Track) -> io::Result<()>;
    fn counter_track(&mut self, counter: &CounterTrack) -> io::Result<()>;
    fn slice(&mut self, track: TrackId, slice: &SliceEvent) -> io::Result<()>;
    fn counter(&mut self, track: TrackId, ts_ns: u64, value: CounterValue) -> io::Result<()>;
    /// An arrow from `from` to `to` at `ts_ns` (a batch handed over);
    /// `id` is unique in the node.
    fn flow(&mut self, id: u64, from: TrackId, to: TrackId, ts_ns: u64) -> io::Result<()>;
    /// Ends the trace and flushes it.
    fn finish(&mut self) -> io::Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_tell_nodes_and_starts_apart() {
        let a = NodeKey(1);
        let b = NodeKey(2);
        let thread = TrackKind::Thread { pid: 10, tid: 11 };
        assert_eq!(a.track(thread, 5), a.track(thread, 5));
        // The same tid on another node, or reused later, is another track.
        assert_ne!(a.track(thread, 5), b.track(thread, 5));
        assert_ne!(a.track(thread, 5), a.track(thread, 6));
        // FNV-1a: the same on every build (a change breaks saved traces'
        // ids and should be deliberate).
        assert_eq!(a.track(thread, 5).0, 0x6efd_a260_9e75_d502);
    }

    #[test]
    fn clocks_place_times_without_wrapping() {
        let clock = NodeClock { offset_ns: -10 };
        assert_eq!(clock.place(25), 15);
        assert_eq!(clock.place(5), 0);
        let wall = NodeClock { offset_ns: 1 << 62 };
        assert_eq!(wall.place(1), (1 << 62) + 1);
    }
}

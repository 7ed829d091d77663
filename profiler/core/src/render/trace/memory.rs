//! A trace kept as plain Rust values: every node, track, slice, counter
//! value and flow the layout hands it, in the order it handed them. Tests
//! read what the layout decided here instead of decoding a format's bytes,
//! and a tool that wants the layout without a file can too.
//!
//! It holds the layout to the [`TraceSink`] contract the formats rely on:
//! a track used before it was declared, or a node's tracks before its
//! node, is an error, as in the Chrome and Perfetto sinks.

use std::collections::HashMap;
use std::io;

use serde_json::Value;

use super::{
    CounterTrack, CounterValue, NodeInfo, SliceEvent, TraceSink, Track, TrackId, TrackKind, TrackOf,
};
use crate::analysis::roles::Role;

/// A declared track.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryTrack {
    pub id: TrackId,
    pub parent: Option<TrackId>,
    pub kind: TrackKind,
    pub name: String,
    pub sort_index: i64,
    pub start_ns: u64,
    /// A thread's role.
    pub role: Option<Role>,
}

/// A declared counter track.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryCounterTrack {
    pub id: TrackId,
    pub parent: TrackId,
    pub name: String,
    pub unit: String,
}

/// Something that took time, on `track`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySlice {
    pub track: TrackId,
    pub category: &'static str,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub args: Option<Value>,
}

/// A counter's value at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterPoint {
    pub track: TrackId,
    pub ts_ns: u64,
    pub value: CounterValue,
}

/// An arrow between two tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub id: u64,
    pub from: TrackId,
    pub to: TrackId,
    pub ts_ns: u64,
}

/// Everything a layout wrote, as values.
#[derive(Debug, Default)]
pub struct MemorySink {
    pub nodes: Vec<NodeInfo>,
    pub tracks: Vec<MemoryTrack>,
    pub counter_tracks: Vec<MemoryCounterTrack>,
    pub slices: Vec<MemorySlice>,
    pub counters: Vec<CounterPoint>,
    pub flows: Vec<Flow>,
    pub finished: bool,
    /// Index of each track in `tracks`, by id.
    index: HashMap<TrackId, usize>,
    /// Index of each counter track in `counter_tracks`, by id.
    counter_index: HashMap<TrackId, usize>,
}

impl MemorySink {
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// The track with this id.
    pub fn by_id(&self, id: TrackId) -> Option<&MemoryTrack> {
        self.index.get(&id).map(|&i| &self.tracks[i])
    }

    /// The tracks of this kind, in the order they were declared (a reused
    /// tid is two thread tracks of one kind).
    pub fn tracks_of(&self, kind: TrackKind) -> Vec<&MemoryTrack> {
        self.tracks.iter().filter(|t| t.kind == kind).collect()
    }

    /// The thread tracks, in the order they were declared.
    pub fn thread_tracks(&self) -> Vec<&MemoryTrack> {
        self.tracks
            .iter()
            .filter(|t| matches!(t.kind, TrackKind::Thread { .. }))
            .collect()
    }

    /// The first track named `name`.
    pub fn named(&self, name: &str) -> Option<&MemoryTrack> {
        self.tracks.iter().find(|t| t.name == name)
    }

    /// The slices on track `id`, in the order they were written.
    pub fn slices_on(&self, id: TrackId) -> Vec<&MemorySlice> {
        self.slices.iter().filter(|s| s.track == id).collect()
    }

    /// The slices of one category, on any track.
    pub fn slices_of(&self, category: &str) -> Vec<&MemorySlice> {
        self.slices
            .iter()
            .filter(|s| s.category == category)
            .collect()
    }

    /// The values of the counters named `name`, on any track, in order.
    pub fn counter_values(&self, name: &str) -> Vec<(u64, CounterValue)> {
        self.counters
            .iter()
            .filter(|p| self.counter_tracks[self.counter_index[&p.track]].name == name)
            .map(|p| (p.ts_ns, p.value))
            .collect()
    }

    fn declared(&self, id: TrackId) -> io::Result<()> {
        if self.index.contains_key(&id) {
            return Ok(());
        }
        Err(invalid(format!(
            "track {:#x} used before it was declared",
            id.0
        )))
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

impl TraceSink for MemorySink {
    fn node(&mut self, node: &NodeInfo) -> io::Result<()> {
        self.nodes.push(node.clone());
        Ok(())
    }

    fn track(&mut self, track: &Track) -> io::Result<()> {
        if self.nodes.is_empty() {
            return Err(invalid("a track before its node".into()));
        }
        if let Some(parent) = track.parent {
            self.declared(parent)?;
        }
        self.index.insert(track.id, self.tracks.len());
        self.tracks.push(MemoryTrack {
            id: track.id,
            parent: track.parent,
            kind: track.kind,
            name: track.name.to_string(),
            sort_index: track.sort_index,
            start_ns: track.start_ns,
            role: match track.of {
                TrackOf::Thread { role, .. } => Some(role),
                _ => None,
            },
        });
        Ok(())
    }

    fn counter_track(&mut self, counter: &CounterTrack) -> io::Result<()> {
        self.declared(counter.parent)?;
        self.counter_index
            .insert(counter.id, self.counter_tracks.len());
        self.counter_tracks.push(MemoryCounterTrack {
            id: counter.id,
            parent: counter.parent,
            name: counter.name.to_string(),
            unit: counter.unit.to_string(),
        });
        Ok(())
    }

    fn slice(&mut self, track: TrackId, slice: &SliceEvent) -> io::Result<()> {
        self.declared(track)?;
        self.slices.push(MemorySlice {
            track,
            category: slice.category,
            name: slice.name.to_string(),
            start_ns: slice.start_ns,
            end_ns: slice.end_ns,
            args: slice.args.clone(),
        });
        Ok(())
    }

    fn counter(&mut self, track: TrackId, ts_ns: u64, value: CounterValue) -> io::Result<()> {
        if !self.counter_index.contains_key(&track) {
            return Err(invalid(format!(
                "counter {:#x} used before it was declared",
                track.0
            )));
        }
        self.counters.push(CounterPoint {
            track,
            ts_ns,
            value,
        });
        Ok(())
    }

    fn flow(&mut self, id: u64, from: TrackId, to: TrackId, ts_ns: u64) -> io::Result<()> {
        self.declared(from)?;
        self.declared(to)?;
        self.flows.push(Flow {
            id,
            from,
            to,
            ts_ns,
        });
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.finished = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NodeClock, NodeKey, SliceOf, TrackOf};
    use super::*;

    #[test]
    fn holds_the_layout_to_the_sink_contract() {
        let mut sink = MemorySink::new();
        let thread = Track {
            id: TrackId(2),
            parent: None,
            kind: TrackKind::Thread { pid: 1, tid: 2 },
            name: "t",
            sort_index: 0,
            start_ns: 0,
            of: TrackOf::Nothing,
        };
        assert!(sink.track(&thread).is_err(), "a track before its node");
        sink.node(&NodeInfo {
            index: 0,
            name: "host".into(),
            kernel_release: String::new(),
            cores: 1,
            clock: NodeClock { offset_ns: 0 },
            title: "t".into(),
            window_start_ns: 0,
            duration_ns: 1,
            min_slice_ns: 1,
            gpu_status: None,
            key: NodeKey(1),
        })
        .unwrap();
        sink.track(&thread).unwrap();
        let slice = SliceEvent {
            category: "state",
            name: "running",
            start_ns: 0,
            end_ns: 1,
            args: None,
            of: SliceOf::Nothing,
        };
        sink.slice(TrackId(2), &slice).unwrap();
        assert!(sink.slice(TrackId(3), &slice).is_err(), "undeclared");
        assert!(sink.flow(1, TrackId(2), TrackId(3), 0).is_err());
        assert!(sink.counter(TrackId(2), 0, CounterValue::Int(1)).is_err());
        assert_eq!(sink.slices_on(TrackId(2)).len(), 1);
        assert_eq!(sink.thread_tracks()[0].name, "t");
    }
}

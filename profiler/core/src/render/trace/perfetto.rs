//! Perfetto's native trace format: a protobuf `Trace`, written one
//! `TracePacket` at a time as the layout produces them, so a trace of any
//! length is written in memory that does not grow with it (names are
//! interned per sequence; nothing else is kept).
//!
//! Processes and threads get Perfetto's process and thread track
//! descriptors (real pids and tids), the other tracks plain ones under
//! their process, GPU or disk; counters are counter tracks; slices are
//! begin/end pairs; a delivery is an instant on each of the two threads,
//! tied by a flow. Each recording of a merge is a machine of its own
//! (`TracePacket.machine_id`, named by a SystemInfo packet) on a sequence
//! of its own.

use std::collections::HashMap;
use std::io::{self, Write};

use prost::Message as _;
use serde_json::Value;

use super::perfetto_proto::{
    self as pb, DebugAnnotation, DebugAnnotationName, EventCategory, EventName, InternedData,
    TracePacket, debug_annotation, trace_packet, track_descriptor, track_event,
};
use super::{
    CounterTrack, CounterValue, NodeClock, NodeInfo, NodeKey, SliceEvent, TraceSink, Track,
    TrackId, TrackKind,
};
use crate::render::exporter::{Exporter, Reads};
use crate::render::timeline::tracks::SlicePolicy;

/// `tprof timeline -o FILE.pftrace` and `tprof export --format perfetto`:
/// slices shorter than the limits' `min_slice_ns` merged (1 ns: none),
/// however many there are.
pub static PERFETTO: Exporter = Exporter {
    name: "perfetto",
    about: "Perfetto's protobuf trace: every thread's states, steps, stalls, CUDA calls, \
            GPU and disk counters, deliveries as flows",
    extensions: &["pftrace", "perfetto-trace"],
    opens_in: "Perfetto UI, trace_processor",
    reads: Reads::Timeline {
        slices: SlicePolicy::Uncapped,
        sink: |out| Box::new(PerfettoSink::new(out)),
    },
};

/// The field number of `Trace.packet`, wire type 2 (length-delimited).
const PACKET_TAG: u8 = (1 << 3) | 2;

/// A Perfetto trace being written.
pub struct PerfettoSink<W: Write> {
    out: W,
    buf: Vec<u8>,
    /// The node being written; None before the first.
    node: Option<NodeState>,
}

/// What one node's packets share.
struct NodeState {
    /// `TracePacket.machine_id`: None for a trace of one recording.
    machine: Option<u32>,
    sequence: u32,
    clock: NodeClock,
    key: NodeKey,
    start_ns: u64,
    /// Interned strings of this sequence: names, categories, annotation
    /// names, each with its iid.
    names: HashMap<String, u64>,
    categories: HashMap<&'static str, u64>,
    arg_names: HashMap<String, u64>,
    /// Strings first used by the packet being built.
    fresh: InternedData,
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W) -> PerfettoSink<W> {
        PerfettoSink {
            out,
            buf: Vec::new(),
            node: None,
        }
    }

    fn state(&mut self) -> io::Result<&mut NodeState> {
        self.node.as_mut().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a Perfetto trace needs a node before its tracks",
            )
        })
    }

    /// Writes `packet` as one `Trace.packet` field, on the node's sequence.
    fn write(&mut self, mut packet: TracePacket) -> io::Result<()> {
        let state = self.state()?;
        packet.machine_id = state.machine;
        packet.optional_trusted_packet_sequence_id = Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(state.sequence),
        );
        let fresh = std::mem::take(&mut state.fresh);
        if fresh != InternedData::default() {
            packet.interned_data = Some(fresh);
        }
        if packet.sequence_flags.is_none() {
            packet.sequence_flags =
                Some(trace_packet::SequenceFlags::SeqNeedsIncrementalState as u32);
        }
        self.buf.clear();
        packet
            .encode(&mut self.buf)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut head = Vec::with_capacity(11);
        head.push(PACKET_TAG);
        prost::encoding::encode_varint(self.buf.len() as u64, &mut head);
        self.out.write_all(&head)?;
        self.out.write_all(&self.buf)
    }

    /// A packet at `ts_ns` (recording clock) holding `event`.
    fn event(&mut self, ts_ns: u64, event: pb::TrackEvent) -> io::Result<()> {
        let ts = self.state()?.clock.place(ts_ns);
        self.write(TracePacket {
            timestamp: Some(ts),
            data: Some(trace_packet::Data::TrackEvent(event)),
            ..TracePacket::default()
        })
    }

    fn descriptor(&mut self, descriptor: pb::TrackDescriptor) -> io::Result<()> {
        let state = self.state()?;
        let ts = state.clock.place(state.start_ns);
        self.write(TracePacket {
            timestamp: Some(ts),
            data: Some(trace_packet::Data::TrackDescriptor(descriptor)),
            ..TracePacket::default()
        })
    }
}

impl NodeState {
    fn name(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.names.get(name) {
            return iid;
        }
        let iid = self.names.len() as u64 + 1;
        self.names.insert(name.to_string(), iid);
        self.fresh.event_names.push(EventName {
            iid: Some(iid),
            name: Some(name.to_string()),
        });
        iid
    }

    fn category(&mut self, category: &'static str) -> u64 {
        if let Some(&iid) = self.categories.get(category) {
            return iid;
        }
        let iid = self.categories.len() as u64 + 1;
        self.categories.insert(category, iid);
        self.fresh.event_categories.push(EventCategory {
            iid: Some(iid),
            name: Some(category.to_string()),
        });
        iid
    }

    fn arg_name(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.arg_names.get(name) {
            return iid;
        }
        let iid = self.arg_names.len() as u64 + 1;
        self.arg_names.insert(name.to_string(), iid);
        self.fresh.debug_annotation_names.push(DebugAnnotationName {
            iid: Some(iid),
            name: Some(name.to_string()),
        });
        iid
    }

    /// A slice's JSON args as debug annotations, the top level's names
    /// interned.
    fn annotations(&mut self, args: Option<&Value>) -> Vec<DebugAnnotation> {
        let Some(Value::Object(map)) = args else {
            return Vec::new();
        };
        map.iter()
            .map(|(name, value)| {
                let mut a = annotation(value);
                a.name_field = Some(debug_annotation::NameField::NameIid(self.arg_name(name)));
                a
            })
            .collect()
    }

    /// A flow id unique across the nodes of a trace.
    fn flow_id(&self, id: u64) -> u64 {
        self.key.counter(TrackId(id), "flow").0
    }
}

/// A JSON value as a debug annotation (without its name).
fn annotation(value: &Value) -> DebugAnnotation {
    use debug_annotation::Value as V;
    let mut a = DebugAnnotation::default();
    match value {
        Value::Null => a.value = Some(V::StringValue("null".into())),
        Value::Bool(b) => a.value = Some(V::BoolValue(*b)),
        Value::Number(n) => {
            a.value = Some(match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => V::UintValue(u),
                (None, Some(i)) => V::IntValue(i),
                _ => V::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
            });
        }
        Value::String(s) => a.value = Some(V::StringValue(s.clone())),
        Value::Array(items) => a.array_values = items.iter().map(annotation).collect(),
        Value::Object(map) => {
            a.dict_entries = map
                .iter()
                .map(|(k, v)| {
                    let mut e = annotation(v);
                    e.name_field = Some(debug_annotation::NameField::Name(k.clone()));
                    e
                })
                .collect();
        }
    }
    a
}

fn named(name: &str) -> track_descriptor::StaticOrDynamicName {
    track_descriptor::StaticOrDynamicName::Name(name.to_string())
}

impl<W: Write> TraceSink for PerfettoSink<W> {
    fn node(&mut self, node: &NodeInfo) -> io::Result<()> {
        let machine = (node.index > 0).then_some(node.index);
        self.node = Some(NodeState {
            machine,
            sequence: node.index + 1,
            clock: node.clock,
            key: node.key,
            start_ns: node.window_start_ns,
            names: HashMap::new(),
            categories: HashMap::new(),
            arg_names: HashMap::new(),
            fresh: InternedData::default(),
        });
        let ts = node.clock.place(node.window_start_ns);
        // The first packet of the sequence: it starts its interning.
        self.write(TracePacket {
            timestamp: Some(ts),
            data: Some(trace_packet::Data::SystemInfo(pb::SystemInfo {
                utsname: Some(pb::Utsname {
                    sysname: Some("Linux".into()),
                    release: (!node.kernel_release.is_empty()).then(|| node.kernel_release.clone()),
                    ..Default::default()
                }),
                num_cpus: Some(node.cores),
                machine_name: Some(node.name.clone()),
            })),
            sequence_flags: Some(trace_packet::SequenceFlags::SeqIncrementalStateCleared as u32),
            first_packet_on_sequence: Some(true),
            ..TracePacket::default()
        })
    }

    fn track(&mut self, track: &Track) -> io::Result<()> {
        let mut d = pb::TrackDescriptor {
            uuid: Some(track.id.0),
            sibling_order_rank: i32::try_from(track.sort_index).ok(),
            ..Default::default()
        };
        match track.kind {
            TrackKind::Process { pid } => {
                let start = self.state()?.clock.place(track.start_ns);
                d.process = Some(pb::ProcessDescriptor {
                    pid: i32::try_from(pid).ok(),
                    process_name: Some(track.name.to_string()),
                    start_timestamp_ns: i64::try_from(start).ok(),
                    ..Default::default()
                });
            }
            TrackKind::Thread { pid, tid } => {
                d.thread = Some(pb::ThreadDescriptor {
                    pid: i32::try_from(pid).ok(),
                    tid: Some(i64::from(tid)),
                    thread_name: Some(track.name.to_string()),
                });
            }
            TrackKind::Lane { .. }
            | TrackKind::QueueSlot { .. }
            | TrackKind::Gpu { .. }
            | TrackKind::Disk { .. } => {
                d.parent_uuid = track.parent.map(|p| p.0);
                d.static_or_dynamic_name = Some(named(track.name));
            }
        }
        self.descriptor(d)
    }

    fn counter_track(&mut self, counter: &CounterTrack) -> io::Result<()> {
        let unit = match counter.unit {
            "util" => "%",
            other => other,
        };
        self.descriptor(pb::TrackDescriptor {
            uuid: Some(counter.id.0),
            parent_uuid: Some(counter.parent.0),
            static_or_dynamic_name: Some(named(counter.name)),
            counter: Some(pb::CounterDescriptor {
                unit: None,
                unit_name: Some(unit.to_string()),
            }),
            ..Default::default()
        })
    }

    fn slice(&mut self, track: TrackId, slice: &SliceEvent) -> io::Result<()> {
        let state = self.state()?;
        let begin = pb::TrackEvent {
            r#type: Some(track_event::Type::SliceBegin as i32),
            track_uuid: Some(track.0),
            category_iids: vec![state.category(slice.category)],
            name_field: Some(track_event::NameField::NameIid(state.name(slice.name))),
            debug_annotations: state.annotations(slice.args.as_ref()),
            ..Default::default()
        };
        self.event(slice.start_ns, begin)?;
        let end = pb::TrackEvent {
            r#type: Some(track_event::Type::SliceEnd as i32),
            track_uuid: Some(track.0),
            ..Default::default()
        };
        self.event(slice.end_ns.max(slice.start_ns), end)
    }

    fn counter(&mut self, track: TrackId, ts_ns: u64, value: CounterValue) -> io::Result<()> {
        use track_event::CounterValueField as C;
        let value = match value {
            CounterValue::Uint(v) => C::CounterValue(i64::try_from(v).unwrap_or(i64::MAX)),
            CounterValue::Int(v) => C::CounterValue(v),
            CounterValue::Float(v) => C::DoubleCounterValue(v),
        };
        let event = pb::TrackEvent {
            r#type: Some(track_event::Type::Counter as i32),
            track_uuid: Some(track.0),
            counter_value_field: Some(value),
            ..Default::default()
        };
        self.event(ts_ns, event)
    }

    fn flow(&mut self, id: u64, from: TrackId, to: TrackId, ts_ns: u64) -> io::Result<()> {
        let state = self.state()?;
        let flow = state.flow_id(id);
        let category = state.category("delivery");
        let name = state.name("delivery");
        let instant = |track: TrackId| pb::TrackEvent {
            r#type: Some(track_event::Type::Instant as i32),
            track_uuid: Some(track.0),
            category_iids: vec![category],
            name_field: Some(track_event::NameField::NameIid(name)),
            ..Default::default()
        };
        let mut start = instant(from);
        start.flow_ids = vec![flow];
        self.event(ts_ns, start)?;
        let mut end = instant(to);
        end.terminating_flow_ids = vec![flow];
        self.event(ts_ns, end)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

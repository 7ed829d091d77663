//! pprof profiles (profile.proto, gzipped): what `go tool pprof`,
//! Pyroscope, Parca and Grafana read. Built from the recording's interned
//! stacks, not from folded text: each frame is a location in a mapping of
//! its module, at its file offset, so a backend can symbolize again; each
//! sample carries labels for its process, thread, role, node and rank.
//!
//! The kinds are the flamegraphs': `cpu` (on-CPU samples, as a count and
//! as CPU time), `offcpu` (time off CPU, the reason as the leaf frame) and
//! `wall` (both, in time).
//!
//! A location's address is the mapping's own range plus the file offset, a
//! mapping per module; the protobuf code (`pprof_proto.rs`, like the
//! Perfetto one) is generated from profiler/core/proto/ by `cargo xtask
//! protos` and committed, so building tprof needs no protobuf compiler.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::{Compression, write::GzEncoder};
use prost::Message as _;

use super::pprof_proto as pb;
use crate::analysis::flame::{self, Filter, FlameKind};
use crate::analysis::roles::Roles;
use crate::model::Model;
use crate::recording::{Frame, FrameKind, StackTable};
use crate::render::exporter::{Exporter, Reads};
use crate::render::timeline::{node_name, role_label};

/// `tprof export --format pprof`.
pub static PPROF: Exporter = Exporter {
    name: "pprof",
    about: "A pprof profile (profile.proto, gzipped) of one kind of stacks",
    extensions: &["pb.gz"],
    opens_in: "go tool pprof, Pyroscope, Parca",
    reads: Reads::Stacks(|stacks, out| {
        stacks.any()?;
        let (kind, path) = (stacks.kind, stacks.recording.display());
        let title = format!("tprof {} profile — {path}", kind.name());
        match write(
            stacks.model,
            stacks.roles,
            kind,
            &stacks.filter,
            &title,
            out,
        )? {
            Some(()) => Ok(()),
            None => Err(stacks.none_chosen()),
        }
    }),
};

/// Each mapping gets an address range of its own this wide, so that ranges
/// never overlap; an address is its range's start plus the frame's file
/// offset (and `file_offset` 0), which a symbolizer maps back to the offset.
const MAPPING_SPAN: u64 = 1 << 40;
/// The kernel's mapping: kernel frames keep their addresses, which lie in
/// the top half of the address space, above every module's range.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// The profile of `model`'s stacks of `kind`, filtered, gzipped into `out`.
/// None when there is no sample of that kind (nothing is written).
pub fn write(
    model: &Model,
    roles: &Roles,
    kind: FlameKind,
    filter: &Filter,
    title: &str,
    out: impl Write,
) -> io::Result<Option<()>> {
    let Some(profile) = profile(model, roles, kind, filter, title) else {
        return Ok(None);
    };
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()?;
    Ok(Some(()))
}

/// The profile, or None without samples of `kind`.
pub fn profile(
    model: &Model,
    roles: &Roles,
    kind: FlameKind,
    filter: &Filter,
    title: &str,
) -> Option<pb::Profile> {
    let table = model.stacks.as_ref()?;
    let mut b = Builder::new(table);
    // Mappings in the order of the frames, the kernel's last: viewers take
    // the first mapping for the profile's main file.
    for frame in table.frames.iter().filter(|f| f.kind == FrameKind::Native) {
        if !frame.module.is_empty() {
            b.mapping(&frame.module, false);
        }
    }
    let hz = table.sample_hz.max(1);
    let period_ns = 1_000_000_000 / hz as i64;
    let (types, period_type) = match kind {
        FlameKind::Cpu => (
            vec![("samples", "count"), ("cpu", "nanoseconds")],
            Some(("cpu", "nanoseconds")),
        ),
        FlameKind::OffCpu => (vec![("offcpu", "nanoseconds")], None),
        FlameKind::Wall => (vec![("wall", "nanoseconds")], None),
    };
    b.profile.sample_type = types.iter().map(|&(t, u)| b.value_type(t, u)).collect();
    b.profile.default_sample_type = b.string(types[types.len() - 1].0);
    if let Some((t, u)) = period_type {
        b.profile.period_type = Some(b.value_type(t, u));
        b.profile.period = period_ns;
    }
    let node = node_name(model);
    let rank = model
        .node
        .as_ref()
        .and_then(|n| n.rank.as_ref())
        .and_then(|r| r.rank);
    let kept = flame::samples(table, filter);
    let weigher = flame::Weigher::new(model, table, &kept, filter, kind);
    for sample in kept.iter() {
        let Some(weight) = weigher.weight(sample) else {
            continue;
        };
        if weight == 0 {
            continue;
        }
        let weight = i64::try_from(weight).unwrap_or(i64::MAX);
        let value = match kind {
            FlameKind::Cpu => vec![weight, weight.saturating_mul(period_ns)],
            FlameKind::OffCpu | FlameKind::Wall => vec![weight],
        };
        // Leaf first: the reason off CPU, then the stack from its top.
        let mut location_id = Vec::new();
        if let Some(reason) = flame::reason_label(sample.kind) {
            location_id.push(b.marker(reason));
        }
        if let Some(stack) = table.stacks.get(sample.stack as usize) {
            let shown = flame::shown_frames(table, stack, filter);
            location_id.extend(shown.iter().rev().map(|&f| b.location(f)));
        }
        let thread = flame::thread_name(model, sample);
        let who = Whose {
            pid: sample.pid,
            tid: sample.tid,
            thread_ns: sample.thread_ns,
            thread: &thread,
        };
        let label = b.labels(model, roles, &who, &node, rank);
        b.profile.sample.push(pb::Sample {
            location_id,
            value,
            label,
        });
    }
    // A wall profile sums to each thread's time in the selection, its
    // on-CPU time that no sample caught included, as the folded stacks do.
    for (t, ns) in weigher.unsampled(model, filter) {
        let who = Whose {
            pid: t.pid,
            tid: t.tid,
            thread_ns: t.start_ns,
            thread: &t.comm,
        };
        let label = b.labels(model, roles, &who, &node, rank);
        let location_id = vec![b.marker(flame::UNSAMPLED)];
        b.profile.sample.push(pb::Sample {
            location_id,
            value: vec![i64::try_from(ns).unwrap_or(i64::MAX)],
            label,
        });
    }
    if b.profile.sample.is_empty() {
        return None;
    }
    b.profile.time_nanos = i64::try_from(model.start_anchor.realtime_ns).unwrap_or(0);
    b.profile.duration_nanos = i64::try_from(model.duration_ns()).unwrap_or(i64::MAX);
    let comment = b.string(title);
    b.profile.comment = vec![comment];
    Some(b.profile)
}

/// The thread a sample is of.
struct Whose<'a> {
    pid: u32,
    tid: u32,
    /// Its start (0 in formats 2 and 3, which kept none).
    thread_ns: u64,
    thread: &'a str,
}

/// The tables of a profile being built: strings, functions, locations and
/// mappings, each interned once.
struct Builder<'a> {
    table: &'a StackTable,
    profile: pb::Profile,
    strings: HashMap<String, i64>,
    /// Location id of each frame id.
    locations: HashMap<u32, u64>,
    /// Location id of each marker frame (`[futex]`, …).
    markers: HashMap<String, u64>,
    /// Function id by (name, module).
    functions: HashMap<(String, String), u64>,
    /// Mapping id by module.
    mappings: HashMap<String, u64>,
}

impl<'a> Builder<'a> {
    fn new(table: &'a StackTable) -> Builder<'a> {
        let mut b = Builder {
            table,
            profile: pb::Profile::default(),
            strings: HashMap::new(),
            locations: HashMap::new(),
            markers: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
        };
        b.string("");
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn value_type(&mut self, r#type: &str, unit: &str) -> pb::ValueType {
        pb::ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    fn str_label(&mut self, key: &str, value: &str) -> pb::Label {
        pb::Label {
            key: self.string(key),
            str: self.string(value),
            ..Default::default()
        }
    }

    fn num_label(&mut self, key: &str, value: i64) -> pb::Label {
        pb::Label {
            key: self.string(key),
            num: value,
            ..Default::default()
        }
    }

    /// Whose a sample is: pid, tid, thread, process, role, node, rank.
    fn labels(
        &mut self,
        model: &Model,
        roles: &Roles,
        who: &Whose,
        node: &str,
        rank: Option<u32>,
    ) -> Vec<pb::Label> {
        let key = crate::model::ThreadKey {
            tid: who.tid,
            start_ns: who.thread_ns,
        };
        let role = role_label(if who.thread_ns == 0 {
            roles.of(who.tid)
        } else {
            roles.of_key(key)
        });
        let process = flame::process_role(model, who.pid, who.thread_ns);
        let mut label = vec![
            self.num_label("pid", who.pid.into()),
            self.num_label("tid", who.tid.into()),
            self.str_label("thread", who.thread),
            self.str_label("process", &process),
            self.str_label("role", role),
            self.str_label("node", node),
        ];
        if let Some(rank) = rank {
            label.push(self.num_label("rank", rank.into()));
        }
        label
    }

    fn function(&mut self, name: &str, module: &str) -> u64 {
        let key = (name.to_string(), module.to_string());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let (name, filename) = (self.string(name), self.string(module));
        self.profile.function.push(pb::Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    /// The mapping of a module, with the address range of its own.
    fn mapping(&mut self, module: &str, kernel: bool) -> u64 {
        if let Some(&id) = self.mappings.get(module) {
            return id;
        }
        let id = self.profile.mapping.len() as u64 + 1;
        let filename = self.string(if kernel { "[kernel.kallsyms]" } else { module });
        let (memory_start, memory_limit) = if kernel {
            (KERNEL_START, u64::MAX)
        } else {
            // Saturating: a hostile file may name millions of modules.
            (
                id.saturating_mul(MAPPING_SPAN),
                (id + 1).saturating_mul(MAPPING_SPAN),
            )
        };
        self.profile.mapping.push(pb::Mapping {
            id,
            memory_start,
            memory_limit,
            file_offset: 0,
            filename,
            build_id: 0,
            has_functions: true,
            ..Default::default()
        });
        self.mappings.insert(module.to_string(), id);
        id
    }

    /// The location of frame `id` (one per frame, in a mapping when the
    /// frame is code in a module).
    fn location(&mut self, frame_id: u32) -> u64 {
        if let Some(&id) = self.locations.get(&frame_id) {
            return id;
        }
        let fallback = Frame::marker("[unknown frame]");
        let frame = self
            .table
            .frames
            .get(frame_id as usize)
            .unwrap_or(&fallback)
            .clone();
        let id = self.profile.location.len() as u64 + 1;
        let name = match frame.kind {
            // The kernel suffix is for flamegraph palettes; pprof keeps
            // the mapping instead.
            FrameKind::Kernel => frame
                .symbol
                .clone()
                .unwrap_or_else(|| flame::frame_label(&frame)),
            _ => flame::frame_label(&frame),
        };
        let in_module =
            matches!(frame.kind, FrameKind::Native | FrameKind::Kernel) && !frame.module.is_empty();
        let (mapping_id, address) = match (in_module, frame.is_kernel()) {
            (false, _) => (0, 0),
            (true, true) => (self.mapping(&frame.module, true), frame.offset),
            (true, false) => {
                let mapping = self.mapping(&frame.module, false);
                let offset = frame.offset.min(MAPPING_SPAN - 1);
                (
                    mapping,
                    mapping.saturating_mul(MAPPING_SPAN).saturating_add(offset),
                )
            }
        };
        let function_id = self.function(&name, &frame.module);
        self.profile.location.push(pb::Location {
            id,
            mapping_id,
            address,
            line: vec![pb::Line {
                function_id,
                line: 0,
            }],
            is_folded: false,
        });
        self.locations.insert(frame_id, id);
        id
    }

    /// A location that is no code, only a name.
    fn marker(&mut self, text: &str) -> u64 {
        if let Some(&id) = self.markers.get(text) {
            return id;
        }
        let id = self.profile.location.len() as u64 + 1;
        let function_id = self.function(text, "");
        self.profile.location.push(pb::Location {
            id,
            line: vec![pb::Line {
                function_id,
                line: 0,
            }],
            ..Default::default()
        });
        self.markers.insert(text.to_string(), id);
        id
    }
}

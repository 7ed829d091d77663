//! Exports of the committed fixture recordings, decoded again: the
//! Perfetto trace (`tprof export --format perfetto`) with the messages
//! tprof writes it with, and the pprof profile (`tprof export --format
//! pprof`) against tprof's own folded stacks. (tests/integration/export.rs
//! decodes real recordings with Perfetto's own definitions and checks
//! profiles with `go tool pprof`; these need neither.)

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use prost::Message as _;
use tprof_core::analysis::flame::{self, Filter, FlameKind};
use tprof_core::model::Model;
use tprof_core::outputs::{self, Input};
use tprof_core::render::pprof::PPROF;
use tprof_core::render::pprof_proto::Profile;
use tprof_core::render::trace::perfetto::PERFETTO;
use tprof_core::render::trace::perfetto_proto::{
    Trace, TracePacket, trace_packet::Data, track_event,
};

fn fixtures() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir("tests/fixtures/v4")
        .expect("the v4 fixtures")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tprof"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 5, "{paths:?}");
    paths
}

/// `tprof export --format perfetto` of the recording at `path`.
fn perfetto(model: &Model, path: &Path) -> Vec<TracePacket> {
    let mut input = Input::new(model, path);
    input.limits.min_slice_ns = 1;
    let mut bytes = Vec::new();
    outputs::write(&PERFETTO, &input, &mut bytes).unwrap();
    Trace::decode(bytes.as_slice())
        .unwrap_or_else(|e| panic!("{}: not a Trace: {e}", path.display()))
        .packet
}

/// A thread track's slices: (count, total ns) of those of category
/// "state", by (pid, tid, name).
#[derive(Debug, Default)]
struct ThreadSlices {
    count: usize,
    total_ns: u64,
}

#[test]
fn perfetto_trace_has_every_thread_and_its_time() {
    for path in fixtures() {
        let model = outputs::load_model(&path).unwrap();
        let packets = perfetto(&model, &path);
        // Tracks: thread uuid → (pid, tid); counters by uuid.
        let mut threads: HashMap<u64, (i32, i64)> = HashMap::new();
        let mut counters: HashMap<u64, String> = HashMap::new();
        let mut category_of: HashMap<u64, String> = HashMap::new();
        let mut slices: HashMap<u64, ThreadSlices> = HashMap::new();
        let mut open: HashMap<u64, Vec<(u64, bool)>> = HashMap::new();
        let mut counter_values = 0;
        let mut sequence = None;
        for p in &packets {
            if let Some(interned) = &p.interned_data {
                for c in &interned.event_categories {
                    category_of.insert(c.iid(), c.name().to_string());
                }
            }
            let seq = p.optional_trusted_packet_sequence_id;
            assert!(seq.is_some(), "every packet is on a sequence");
            assert!(
                sequence.is_none_or(|s| s == seq),
                "one recording, one sequence"
            );
            sequence = Some(seq);
            match &p.data {
                Some(Data::TrackDescriptor(d)) => {
                    if let Some(t) = &d.thread {
                        threads.insert(d.uuid(), (t.pid(), t.tid()));
                    }
                    if d.counter.is_some() {
                        counters.insert(d.uuid(), format!("{:?}", d.static_or_dynamic_name));
                    }
                }
                Some(Data::TrackEvent(e)) => {
                    let ts = p.timestamp.expect("events have times");
                    let uuid = e.track_uuid();
                    match e.r#type() {
                        track_event::Type::SliceBegin => {
                            let state = e
                                .category_iids
                                .iter()
                                .any(|iid| category_of.get(iid).is_some_and(|c| c == "state"));
                            open.entry(uuid).or_default().push((ts, state));
                        }
                        track_event::Type::SliceEnd => {
                            let (begin, state) = open
                                .get_mut(&uuid)
                                .and_then(Vec::pop)
                                .expect("an end closes a begin on its track");
                            assert!(ts >= begin);
                            if state {
                                let s = slices.entry(uuid).or_default();
                                s.count += 1;
                                s.total_ns += ts - begin;
                            }
                        }
                        track_event::Type::Counter => {
                            assert!(counters.contains_key(&uuid), "counter on a counter track");
                            counter_values += 1;
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        assert!(open.values().all(Vec::is_empty), "every slice ends");
        // Every thread of the model has a track, with as many state slices
        // as intervals, over its whole life.
        let by_thread: BTreeMap<(i32, i64, u64), &ThreadSlices> = threads
            .iter()
            .map(|(uuid, &(pid, tid))| {
                let s = slices.get(uuid).expect("a thread track with slices");
                ((pid, tid, s.total_ns), s)
            })
            .collect();
        assert_eq!(threads.len(), model.threads.len(), "{}", path.display());
        for t in &model.threads {
            let key = (t.pid as i32, i64::from(t.tid), t.lifetime_ns());
            let s = by_thread
                .get(&key)
                .unwrap_or_else(|| panic!("{}: no track for {t:?}", path.display()));
            assert_eq!(
                s.count,
                t.intervals.len(),
                "{}: tid {}",
                path.display(),
                t.tid
            );
        }
        // GPU and disk series are counters.
        let series = model.gpus.devices.len() + usize::from(!model.ios.is_empty());
        if series > 0 {
            assert!(counter_values > 0, "{}: no counter values", path.display());
        }
    }
}

/// Each function's share of the pprof profile's samples, leaf ("flat")
/// and anywhere on the stack ("cum"), as `go tool pprof -top` shows them.
fn pprof_flat_shares(profile: &Profile, value: usize) -> HashMap<String, f64> {
    let name = |id: u64| -> String {
        let loc = &profile.location[id as usize - 1];
        let function = &profile.function[loc.line[0].function_id as usize - 1];
        profile.string_table[function.name as usize].clone()
    };
    let mut flat: HashMap<String, f64> = HashMap::new();
    let mut total = 0.0;
    for s in &profile.sample {
        let v = s.value[value] as f64;
        total += v;
        *flat.entry(name(s.location_id[0])).or_default() += v;
    }
    for v in flat.values_mut() {
        *v /= total;
    }
    flat
}

/// The same from tprof's folded stacks: the leaf frame of each line.
fn folded_flat_shares(model: &Model, kind: FlameKind) -> HashMap<String, f64> {
    let lines = flame::fold(model, kind, &Filter::default());
    let total: u64 = lines.iter().map(|(_, w)| w).sum();
    let mut flat: HashMap<String, f64> = HashMap::new();
    for (stack, weight) in &lines {
        let leaf = stack.rsplit(';').next().unwrap();
        let leaf = leaf.strip_suffix("_[k]").unwrap_or(leaf);
        *flat.entry(leaf.to_string()).or_default() += *weight as f64 / total as f64;
    }
    flat
}

#[test]
fn pprof_profile_has_the_folded_stacks_shares() {
    for path in fixtures() {
        let model = outputs::load_model(&path).unwrap();
        if model.stacks.is_none() {
            continue;
        }
        let mut input = Input::new(&model, &path);
        // The whole recording, as the folded stacks below are.
        input.selection.stretch = Some(tprof_core::analysis::select::Stretch::All);
        for kind in FlameKind::ALL {
            input.kind = kind;
            let mut gz = Vec::new();
            if outputs::write(&PPROF, &input, &mut gz).is_err() {
                assert!(flame::fold(&model, kind, &Filter::default()).is_empty());
                continue;
            }
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(gz.as_slice())
                .read_to_end(&mut raw)
                .unwrap();
            let profile = Profile::decode(raw.as_slice()).unwrap();
            assert_eq!(profile.string_table[0], "");
            let value = profile.sample_type.len() - 1;
            let got = pprof_flat_shares(&profile, value);
            let want = folded_flat_shares(&model, kind);
            for (function, share) in &want {
                let g = got.get(function).copied().unwrap_or(0.0);
                // Folded weights are rounded to µs per line; shares agree
                // to well under a tenth of a point.
                assert!(
                    (g - share).abs() < 1e-3,
                    "{} {kind:?}: {function} {g} vs folded {share}",
                    path.display()
                );
            }
            // Every sample says whose it is.
            let key = |k: &str| profile.string_table.iter().position(|s| s == k).unwrap() as i64;
            for s in &profile.sample {
                let keys: Vec<i64> = s.label.iter().map(|l| l.key).collect();
                for k in ["pid", "tid", "thread", "role", "node"] {
                    assert!(keys.contains(&key(k)), "{k} label missing");
                }
            }
        }
    }
}

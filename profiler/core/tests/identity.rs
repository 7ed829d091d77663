//! A pid and tid held by two processes in turn, in a real recording
//! (tests/fixtures/v4/pid_reuse.tprof: tests/workloads/pid_reuse.c forks a
//! worker, reaps it, steers the kernel's allocator back to its pid with
//! ns_last_pid, and forks a helper that execs a shell). Threads and
//! processes are keyed by id *and* start (model/identity.rs): each holder
//! keeps its own role, its own CPU in the pipeline, its own stacks in the
//! folded output and the pprof profile, and its own timeline track.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::Path;

use prost::Message as _;
use tprof_core::analysis::flame::{self, Filter, FlameKind};
use tprof_core::analysis::roles::Role;
use tprof_core::analysis::{self, Summary};
use tprof_core::model::{Model, Thread};
use tprof_core::outputs::{self, Input};
use tprof_core::render::pprof::PPROF;
use tprof_core::render::pprof_proto::Profile;
use tprof_core::render::trace::perfetto::PERFETTO;
use tprof_core::render::trace::perfetto_proto::{Trace, trace_packet::Data};

const FIXTURE: &str = "tests/fixtures/v4/pid_reuse.tprof";

fn load() -> (Model, Summary) {
    let model = outputs::load_model(Path::new(FIXTURE)).expect("the fixture reads");
    let summary = analysis::summarize(&model);
    (model, summary)
}

/// The two holders of the reused tid, in the order they lived.
fn holders(model: &Model) -> (&Thread, &Thread) {
    let mut by_tid: BTreeMap<u32, Vec<&Thread>> = BTreeMap::new();
    for t in &model.threads {
        by_tid.entry(t.tid).or_default().push(t);
    }
    let reused: Vec<&Vec<&Thread>> = by_tid.values().filter(|v| v.len() > 1).collect();
    assert_eq!(reused.len(), 1, "one reused tid: {by_tid:?}");
    let mut pair = reused[0].clone();
    pair.sort_by_key(|t| t.start_ns);
    assert_eq!(pair.len(), 2);
    assert!(pair[0].end_ns <= pair[1].start_ns, "one after the other");
    (pair[0], pair[1])
}

#[test]
fn each_holder_is_its_own_thread_process_and_role() {
    let (model, summary) = load();
    let (worker, helper) = holders(&model);
    assert_ne!(worker.key(), helper.key());
    assert_eq!(
        (worker.comm.as_str(), helper.comm.as_str()),
        ("first", "sh")
    );
    // The processes, likewise: each its own name and start.
    let processes: Vec<_> = model
        .all_processes()
        .filter(|p| p.pid == worker.pid)
        .collect();
    assert_eq!(processes.len(), 2);
    assert_eq!(model.process_key(worker), processes[0].key());
    assert_eq!(model.process_key(helper), processes[1].key());
    // A forked worker, then a program it execs: a helper.
    assert_eq!(summary.roles.of_thread(worker), Role::DataWorker);
    assert_eq!(summary.roles.of_thread(helper), Role::Helper);
    assert_eq!(
        summary.roles.of_at(worker.tid, worker.start_ns + 1),
        Role::DataWorker
    );
    assert_eq!(summary.roles.of_at(helper.tid, helper.end_ns), Role::Helper);
    // The pipeline counts one worker process and one helper, each with its
    // own CPU: the helper's shell loop is not the worker's work.
    let p = &summary.pipeline;
    assert_eq!(p.workers.pids, [worker.pid]);
    assert_eq!(p.workers.restarts, 0);
    assert_eq!(p.helpers.len(), 1);
    assert_eq!(p.helpers[0].comm, "sh");
    let on_cpu = |t: &Thread| t.breakdown(t.start_ns, t.end_ns).on_cpu as f64 / 1e9;
    assert!((p.helpers[0].on_cpu_s - on_cpu(helper)).abs() < 1e-9);
    let worker_cpu: f64 = p
        .threads
        .iter()
        .filter(|t| t.in_worker)
        .map(|t| t.time.on_cpu as f64 / 1e9)
        .sum();
    assert!(
        worker_cpu <= on_cpu(worker) + 1e-9,
        "{worker_cpu} vs {}",
        on_cpu(worker)
    );
    let helper_in_worker = p
        .threads
        .iter()
        .any(|t| t.key == helper.key() && t.in_worker);
    assert!(!helper_in_worker, "the helper counted as a worker's thread");
}

/// The folded stacks under each holder's name: the worker's `child`
/// function, the helper's shell, never one under the other's.
#[test]
fn each_holder_keeps_its_stacks() {
    let (model, _) = load();
    let (worker, helper) = holders(&model);
    let lines = flame::fold(&model, FlameKind::Cpu, &Filter::default());
    let of = |root: &str| -> Vec<&str> {
        lines
            .iter()
            .map(|(l, _)| l.as_str())
            .filter(|l| l.starts_with(root))
            .collect()
    };
    let worker_lines = of("first (child);first;");
    let helper_lines = of("sh (child);sh;");
    assert!(
        !worker_lines.is_empty() && !helper_lines.is_empty(),
        "{lines:#?}"
    );
    assert!(
        worker_lines.iter().all(|l| !l.contains("dash")),
        "{worker_lines:#?}"
    );
    assert!(
        worker_lines.iter().any(|l| l.ends_with(";child")),
        "{worker_lines:#?}"
    );
    assert!(
        helper_lines.iter().all(|l| !l.contains(";child")),
        "{helper_lines:#?}"
    );
    assert!(
        helper_lines.iter().any(|l| l.contains("dash")),
        "{helper_lines:#?}"
    );
    // Choosing one holder (as `--role` does) keeps only its stacks.
    let only = |key| Filter {
        role_threads: Some(BTreeSet::from([key])),
        ..Filter::default()
    };
    let worker_only = flame::fold(&model, FlameKind::Cpu, &only(worker.key()));
    let helper_only = flame::fold(&model, FlameKind::Cpu, &only(helper.key()));
    assert!(
        worker_only
            .iter()
            .all(|(l, _)| l.starts_with("first (child);"))
    );
    assert!(
        helper_only
            .iter()
            .all(|(l, _)| l.starts_with("sh (child);"))
    );
    let total = |v: &[(String, u64)]| v.iter().map(|(_, w)| w).sum::<u64>();
    assert_eq!(
        total(&worker_only),
        worker_lines.iter().map(|l| weight(&lines, l)).sum::<u64>()
    );
    assert_eq!(
        total(&helper_only),
        helper_lines.iter().map(|l| weight(&lines, l)).sum::<u64>()
    );
}

fn weight(lines: &[(String, u64)], line: &str) -> u64 {
    lines.iter().find(|(l, _)| l == line).map_or(0, |(_, w)| *w)
}

/// The pprof profile labels each sample with its own holder's thread,
/// process and role.
#[test]
fn pprof_labels_each_holder() {
    let (model, _) = load();
    let (worker, _) = holders(&model);
    let path = Path::new(FIXTURE);
    let mut input = Input::new(&model, path);
    input.selection.stretch = Some(tprof_core::analysis::select::Stretch::All);
    let mut gz = Vec::new();
    input.kind = FlameKind::Cpu;
    outputs::write(&PPROF, &input, &mut gz).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut raw)
        .unwrap();
    let profile = Profile::decode(raw.as_slice()).unwrap();
    let text = |i: i64| profile.string_table[i as usize].as_str();
    let mut seen: BTreeSet<(String, String, String)> = BTreeSet::new();
    for s in &profile.sample {
        let label = |k: &str| s.label.iter().find(|l| text(l.key) == k);
        if label("tid").map(|l| l.num) != Some(i64::from(worker.tid)) {
            continue;
        }
        let str_of = |k: &str| label(k).map_or(String::new(), |l| text(l.str).to_string());
        seen.insert((str_of("thread"), str_of("process"), str_of("role")));
    }
    let want: BTreeSet<(String, String, String)> = [
        ("first", "first (child)", "data worker"),
        ("sh", "sh (child)", "helper"),
    ]
    .iter()
    .map(|&(a, b, c)| (a.into(), b.into(), c.into()))
    .collect();
    assert_eq!(seen, want);
}

/// Each holder has a Perfetto thread track of its own, named for it.
#[test]
fn perfetto_gives_each_holder_a_track() {
    let (model, _) = load();
    let (worker, helper) = holders(&model);
    let mut input = Input::new(&model, Path::new(FIXTURE));
    input.limits.min_slice_ns = 1;
    let mut bytes = Vec::new();
    outputs::write(&PERFETTO, &input, &mut bytes).unwrap();
    let trace = Trace::decode(bytes.as_slice()).unwrap();
    let tracks: BTreeMap<u64, String> = trace
        .packet
        .iter()
        .filter_map(|p| match &p.data {
            Some(Data::TrackDescriptor(d))
                if d.thread
                    .as_ref()
                    .is_some_and(|t| t.tid() == i64::from(worker.tid)) =>
            {
                Some((d.uuid(), d.thread.as_ref()?.thread_name().to_string()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(tracks.len(), 2, "{tracks:#?}");
    let names: Vec<&String> = tracks.values().collect();
    assert!(names.iter().any(|n| n.contains(&worker.comm)), "{names:?}");
    assert!(names.iter().any(|n| n.contains(&helper.comm)), "{names:?}");
}

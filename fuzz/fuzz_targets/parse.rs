//! Any bytes through everything `tprof report` and `tprof flamegraph` do
//! with a file: parse, then (when it parses) model, analysis and every
//! renderer. A crash, a panic or an out-of-memory is a finding; add the
//! input to profiler/tests/hostile_recordings.rs as a regression test.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler::analysis::{self, flame};
use profiler::model::Model;
use profiler::recording::reader::parse;
use profiler::render;

fuzz_target!(|data: &[u8]| {
    let Ok(rec) = parse(data) else {
        return;
    };
    let model = Model::build(&rec);
    let summary = analysis::summarize(&model);
    let _ = render::report::render(&summary);
    let _ = render::json::render(&summary);
    for kind in [
        flame::FlameKind::Cpu,
        flame::FlameKind::OffCpu,
        flame::FlameKind::Wall,
    ] {
        let lines = flame::fold(&model, kind, &flame::Filter::default());
        let note = render::loss_note(&model.lost, model.cut_short);
        let _ = render::flamegraph::svg(&lines, kind, "fuzz", note.as_deref(), std::io::sink());
    }
});

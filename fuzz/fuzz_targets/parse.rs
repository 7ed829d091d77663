//! Any bytes through everything tprof does with a file: parse, then (when
//! it parses) `render::every_output` — model, analysis, report, JSON,
//! flamegraphs and timelines. A crash, a panic or an out-of-memory is a finding; add the
//! input to profiler/core/tests/hostile_recordings.rs as a regression test.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tprof_core::recording::reader::parse;
use tprof_core::render;

fuzz_target!(|data: &[u8]| {
    if let Ok(rec) = parse(data) {
        let _ = render::every_output(&rec);
    }
});

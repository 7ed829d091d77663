//! Any bytes through everything tprof does with a file: parse, then (when
//! it parses) `outputs::every_output` — model, analysis and every exporter
//! of the list (report, JSON, flamegraphs, timelines, profiles).
//! A crash, a panic or an out-of-memory is a finding; add the
//! input to profiler/core/tests/hostile_recordings.rs as a regression test.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tprof_core::recording::reader::parse;
use tprof_core::outputs;

fuzz_target!(|data: &[u8]| {
    if let Ok(rec) = parse(data) {
        outputs::every_output(&rec);
    }
});

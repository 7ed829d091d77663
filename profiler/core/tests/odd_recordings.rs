//! Recordings that parse but make little sense (events out of order, exits
//! without forks, unknown pids, reused tids, zero-length or inverted
//! windows, stacks pointing nowhere, GPU samples outside the window) go
//! through model, analysis and every renderer without a panic. They are
//! generated from a fixed seed, so a failure reproduces; the seed and case
//! number are in the panic message.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use profiler_ebpf::{COMM_LEN, event_size, kind};
use tprof_core::model::{Assembly, Model};
use tprof_core::outputs;
use tprof_core::recording::{
    ClockAnchor, CommandExit, FORMAT_VERSION, Footer, Frame, FrameBatch, FrameKind, GpuDevice,
    GpuInfo, GpuMetric, GpuSeries, Header, LostCounts, Origin, ProcessInfo, Recording, StackBatch,
    StackDictionary, StackKind, StackSample, StackTable, SystemSample, ThreadInfo, Writer, events,
    reader, record,
};

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    /// Mostly small values (so pids, tids and times collide), sometimes
    /// extremes.
    fn value(&mut self) -> u64 {
        match self.below(20) {
            0 => u64::MAX,
            1 => u64::from(u32::MAX),
            2 => self.next(),
            _ => self.below(8),
        }
    }
}

/// Raw events of random kinds whose every field is a small number (so they
/// refer to each other), times from a small range and out of order.
fn random_events(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..n {
        // A kind a recording holds (a stack copy, variable, never does;
        // nor does an exec mapping, kind 15, or any ring-buffer-only kind
        // after it).
        let (kind, size) = loop {
            let kind = 1 + rng.below(u64::from(kind::EXEC_MAP - 1)) as u16;
            if let Some(size) = event_size(kind) {
                break (kind, size);
            }
        };
        let mut event = vec![0u8; size];
        let ts = match rng.below(10) {
            0 => u64::MAX - rng.below(3),
            1 => rng.value(),
            _ => 1_000 + rng.below(1_000) * 1_000,
        };
        event[..8].copy_from_slice(&ts.to_le_bytes());
        event[8..10].copy_from_slice(&kind.to_le_bytes());
        event[10..12].copy_from_slice(&(rng.below(4) as u16).to_le_bytes());
        event[12..16].copy_from_slice(&(size as u32).to_le_bytes());
        for word in event[16..].chunks_mut(4) {
            let v = rng.value() as u32;
            let le = v.to_le_bytes();
            word.copy_from_slice(&le[..word.len()]);
        }
        if rng.chance(4) {
            // A comm of invalid UTF-8 where the event has one.
            let end = event.len();
            if end >= 16 + COMM_LEN {
                event[end - COMM_LEN..end].fill(0xff);
            }
        }
        bytes.extend(event);
    }
    bytes
}

fn random_recording(rng: &mut Rng) -> Recording {
    random_recording_and_events(rng).0
}

/// A random recording, and its events as the kernel would have written them.
fn random_recording_and_events(rng: &mut Rng) -> (Recording, Vec<u8>) {
    let start = match rng.below(10) {
        0 => u64::MAX - rng.below(1_000),
        1 => 0,
        _ => 1_000 + rng.below(2_000_000),
    };
    let mut events = Vec::new();
    let n = rng.below(300) as usize;
    let raw_events = random_events(rng, n);
    events::decode_all(&raw_events, events::Framing::Length, &mut events)
        .expect("well-formed events");
    let pid = |rng: &mut Rng| rng.value() as u32;
    let processes = (0..rng.below(6))
        .map(|_| ProcessInfo {
            pid: pid(rng),
            ppid: pid(rng),
            comm: "p".repeat(rng.below(40) as usize),
            cmdline: vec![String::new(); rng.below(3) as usize],
            origin: [Origin::Attached, Origin::Launched, Origin::Forked][rng.below(3) as usize],
            seen_ns: rng.value(),
        })
        .collect();
    let threads = (0..rng.below(6))
        .map(|_| ThreadInfo {
            tid: pid(rng),
            pid: pid(rng),
            comm: String::new(),
            state: ['R', 'S', 'D', 'Z', '?'][rng.below(5) as usize],
        })
        .collect();
    let system = (0..rng.below(5))
        .map(|_| SystemSample {
            ts_ns: rng.value(),
            procs_running: rng.value() as u32,
            procs_blocked: rng.value() as u32,
            busy_ticks: rng.value(),
            total_ticks: rng.value(),
        })
        .collect();
    let frames: Vec<Frame> = (0..rng.below(4))
        .map(|i| Frame {
            module: format!("m{i}"),
            offset: rng.value(),
            symbol: rng.chance(2).then(|| format!("f{i}")),
            kind: [FrameKind::Native, FrameKind::Kernel, FrameKind::Marker][rng.below(3) as usize],
        })
        .collect();
    let stacks: Vec<Vec<u32>> = (0..rng.below(4))
        .map(|_| (0..rng.below(5)).map(|_| rng.value() as u32).collect())
        .collect();
    // Half the recordings store stacks as formats 2 and 3 did (one table at
    // the end), half as format 4 does (a dictionary, weighed from events).
    let streamed = rng.chance(2);
    let samples = (0..rng.below(8))
        .map(|_| StackSample {
            pid: pid(rng),
            tid: pid(rng),
            thread_ns: rng.value(),
            kind: StackKind::from_abi(rng.value() as u32),
            stack: rng.value() as u32,
            weight: rng.value(),
        })
        .collect();
    let gpu_series = (0..rng.below(4))
        .map(|_| GpuSeries {
            gpu: rng.value() as u32,
            metric: [
                GpuMetric::GpuUtilPct,
                GpuMetric::MemUsedBytes,
                GpuMetric::ProcessSmUtilPct,
            ][rng.below(3) as usize],
            pid: rng.chance(2).then(|| pid(rng)),
            points: (0..rng.below(5))
                .map(|_| (rng.value(), rng.value()))
                .collect(),
        })
        .collect();
    let end = match rng.below(4) {
        0 => start,                     // zero-length window
        1 => start.saturating_sub(500), // ends before it starts
        _ => start.saturating_add(rng.below(2_000_000)),
    };
    let rec = Recording {
        header: Header {
            cores: rng.value() as u32,
            start: ClockAnchor {
                monotonic_ns: start,
                realtime_ns: rng.value(),
                ..Default::default()
            },
            targets: (0..rng.below(3)).map(|_| pid(rng)).collect(),
            block_devices: BTreeMap::from([(rng.value() as u32, "vda".into())]),
            sample_hz: streamed.then(|| rng.value()),
            ..Default::default()
        },
        version: FORMAT_VERSION,
        processes,
        threads,
        events,
        system,
        lost: LostCounts {
            ring_buffer_full: BTreeMap::from([("switch".into(), rng.value())]),
            tracking_full: rng.value(),
            ..Default::default()
        },
        gpu: rng.chance(2).then(|| GpuInfo {
            status: None,
            library: None,
            devices: vec![GpuDevice {
                index: rng.value() as u32,
                ..Default::default()
            }],
        }),
        gpu_series,
        cuda: None,
        step_probes: rng.chance(2).then(|| tprof_core::recording::StepProbes {
            pipes: rng.chance(2),
            ..Default::default()
        }),
        dictionary: if streamed {
            StackDictionary {
                frames: frames.clone(),
                stacks: stacks.clone(),
            }
        } else {
            StackDictionary::default()
        },
        stacks: (!streamed && rng.chance(2)).then(|| StackTable {
            sample_hz: rng.value(),
            frames,
            stacks,
            samples,
            ..StackTable::default()
        }),
        footer: rng.chance(2).then(|| Footer {
            end: ClockAnchor {
                monotonic_ns: end,
                realtime_ns: 0,
                ..Default::default()
            },
            stop_reason: "duration".into(),
            // Any values, the signal numbers past the known names too.
            command_exit: rng.chance(2).then(|| CommandExit {
                pid: rng.below(1 << 22) as u32,
                code: rng.chance(2).then(|| rng.below(256) as i32),
                signal: rng.chance(2).then(|| rng.below(70) as i32 - 2),
                stop_signal: rng.chance(2).then(|| rng.below(70) as i32 - 2),
                killed: rng.chance(2),
            }),
            clock_sync: None,
        }),
        truncated: rng.chance(3),
        unknown_records: 0,
        unknown_events: 0,
    };
    (rec, raw_events)
}

/// The file `tprof record` would have written for `rec`, its events split
/// over several EVENTS records.
fn recording_file(rec: &Recording, raw_events: &[u8]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write_json(record::HEADER, &rec.header).unwrap();
    for p in &rec.processes {
        w.write_json(record::PROCESS, p).unwrap();
    }
    for t in &rec.threads {
        w.write_json(record::THREAD, t).unwrap();
    }
    if !rec.dictionary.frames.is_empty() {
        let batch = FrameBatch {
            first: 0,
            frames: rec.dictionary.frames.clone(),
        };
        w.write_json(record::FRAMES, &batch).unwrap();
    }
    if !rec.dictionary.stacks.is_empty() {
        let batch = StackBatch {
            first: 0,
            stacks: rec.dictionary.stacks.clone(),
        };
        w.write_json(record::STACK_DEFS, &batch).unwrap();
    }
    let mut rest = raw_events;
    while !rest.is_empty() {
        let size = u32::from_le_bytes(rest[12..16].try_into().unwrap()) as usize;
        w.push_event(&rest[..size]).unwrap();
        rest = &rest[size..];
        if rest.len().is_multiple_of(7) {
            w.flush().unwrap(); // end this EVENTS record
        }
    }
    w.flush().unwrap();
    for s in &rec.system {
        w.write_json(record::SYSTEM, s).unwrap();
    }
    w.write_json(record::LOST, &rec.lost).unwrap();
    if let Some(gpu) = &rec.gpu {
        w.write_json(record::GPU_INFO, gpu).unwrap();
    }
    for series in &rec.gpu_series {
        w.write_json(record::GPU_SAMPLES, series).unwrap();
    }
    if let Some(stacks) = &rec.stacks {
        w.write_json(record::STACKS, stacks).unwrap();
    }
    if let Some(footer) = &rec.footer {
        w.write_json(record::FOOTER, footer).unwrap();
    }
    let mut bytes = w.finish().unwrap();
    if rec.truncated {
        bytes.extend([record::SYSTEM as u8, 0, 0, 0, 200]); // a record cut off
    }
    bytes
}

/// Every output tprof makes of a recording (the list of exporters of
/// `tprof_core::outputs`: report, JSON, flamegraphs, timelines, profiles);
/// a refusal is fine, a panic is not.
fn every_output(rec: &Recording) {
    outputs::every_output(rec);
}

/// 600 cases by default; `ODD_RECORDINGS_CASES` and `ODD_RECORDINGS_SEED`
/// run more, or others, locally. (It was 2000 while a recording without
/// stacks skipped the timelines, the costliest outputs: now every output
/// runs on every case, and 600 take about as long as 2000 did.)
#[test]
fn odd_recordings_render_without_panics() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let seed = env("ODD_RECORDINGS_SEED", 0x7470_726f_6620_6f64);
    let cases = env("ODD_RECORDINGS_CASES", 600);
    let mut rng = Rng(seed);
    for case in 0..cases {
        let rec = random_recording(&mut rng);
        let outcome = catch_unwind(AssertUnwindSafe(|| every_output(&rec)));
        assert!(
            outcome.is_ok(),
            "case {case} of seed {seed:#x} panicked; recording: {rec:#?}"
        );
    }
}

/// `tprof report` streams a recording's events from the file through a
/// reorder buffer instead of reading them all and sorting: the model must
/// be the same as the one built from the recording held in memory.
#[test]
fn streamed_model_is_the_model_in_memory() {
    let mut rng = Rng(0x7374_7265_616d);
    let dir = std::env::temp_dir().join(format!("tprof-streamed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("case.tprof");
    for case in 0..300 {
        let (rec, raw_events) = random_recording_and_events(&mut rng);
        let bytes = recording_file(&rec, &raw_events);
        std::fs::write(&path, &bytes).unwrap();
        let in_memory = Model::build(&reader::parse(&bytes).unwrap());
        let opened = reader::open(&path).unwrap();
        let mut assembly = Assembly::new(&opened.meta, opened.last_event_ns);
        let stats = opened.events_in_order(|e| assembly.apply(e)).unwrap();
        let streamed = assembly.finish(stats);
        assert_eq!(stats.events as usize, rec.events.len(), "case {case}");
        let (streamed, in_memory) = (format!("{streamed:#?}"), format!("{in_memory:#?}"));
        if let Some((line, (a, b))) = streamed
            .lines()
            .zip(in_memory.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
        {
            panic!("case {case}: models differ at line {line}: streamed {a:?}, in memory {b:?}");
        }
        assert_eq!(streamed, in_memory, "case {case}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The recording of a real-looking job with no events at all (the window
/// opened and closed at once) still reports.
#[test]
fn empty_recording_reports() {
    let rec = Recording {
        footer: Some(Footer {
            end: ClockAnchor::default(),
            stop_reason: "duration".into(),
            command_exit: None,
            clock_sync: None,
        }),
        ..Default::default()
    };
    every_output(&rec);
}

// Regressions: each crash the generator above found, as the smallest
// recording that showed it.

fn event<T: bytemuck::Pod>(event: &T) -> tprof_core::recording::Event {
    let (event, _) =
        events::decode(&events::encode(event), events::Framing::Length).expect("decodes");
    event.expect("a known kind")
}

fn header(kind: u16, ts_ns: u64) -> profiler_ebpf::EventHeader {
    profiler_ebpf::EventHeader {
        ts_ns,
        kind,
        cpu: 0,
        len: event_size(kind).expect("a known kind") as u32,
    }
}

/// Lost counts near u64::MAX overflowed their sum (debug builds panicked).
#[test]
fn huge_lost_counts_saturate() {
    let rec = Recording {
        lost: LostCounts {
            ring_buffer_full: BTreeMap::from([("switch".into(), u64::MAX)]),
            tracking_full: u64::MAX,
            stack_failed: u64::MAX,
            offcpu_full: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(rec.lost.total(), u64::MAX);
    assert_eq!(rec.lost.stack_lost(), u64::MAX);
    every_output(&rec);
}

/// A cut-short recording whose last event has a wild timestamp stretched
/// the window to centuries, and the per-second device series allocated
/// one entry per second of it (out of memory).
#[test]
fn wild_timestamp_does_not_stretch_the_window() {
    let io = profiler_ebpf::BlockIoEvent {
        hdr: header(kind::BLOCK_IO, u64::MAX - 1),
        start_ns: 5,
        issue_ns: 6,
        sector: 0,
        dev: 1,
        nr_sector: 8,
        tid: 0,
        tgid: 0,
        error: 0,
        rwbs: *b"R\0\0\0\0\0\0\0",
        ..zeroed()
    };
    let rec = Recording {
        header: Header {
            start: ClockAnchor {
                monotonic_ns: 1_000,
                realtime_ns: 0,
                ..Default::default()
            },
            ..Default::default()
        },
        events: vec![event(&io)],
        ..Default::default()
    };
    let model = Model::build(&rec);
    assert!(model.duration_ns() <= tprof_core::model::MAX_WINDOW_NS);
    every_output(&rec);
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the kernel ABI structs, plain integers and byte
    // arrays for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Stack weights near u64::MAX overflowed the folded sums, the wall-time
/// conversion, and inferno's totals and diff colours.
#[test]
fn huge_stack_weights_fold_and_draw() {
    let sample = |kind, weight| StackSample {
        pid: 1,
        tid: 1,
        thread_ns: 0,
        kind,
        stack: 0,
        weight,
    };
    let rec = Recording {
        stacks: Some(StackTable {
            sample_hz: 1,
            frames: vec![Frame::default()],
            stacks: vec![vec![0]],
            samples: vec![
                sample(StackKind::OnCpu, u64::MAX),
                sample(StackKind::Sleep, u64::MAX),
                sample(StackKind::Futex, u64::MAX - 1),
            ],
            ..StackTable::default()
        }),
        ..Default::default()
    };
    every_output(&rec);
}

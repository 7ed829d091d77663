//! Corrupt, truncated, wrong-version and hostile recordings: the reader
//! answers each with a value or a clear error, never a panic, and never
//! allocates much more than the input's size (a length field cannot make it
//! reserve gigabytes). A counting allocator measures the peak; this file is
//! its own test binary so the allocator sees only these tests, which run one
//! at a time under a lock.
//!
//! `cargo xtask fuzz` runs the same parser under libFuzzer (fuzz/); inputs
//! it finds crashing belong in [`regressions`] below.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use profiler_ebpf::{AbiEvent as _, ExitEvent};
use tprof_core::recording::reader::{ReadError, parse};
use tprof_core::recording::{
    ClockAnchor, FORMAT_VERSION, Footer, Header, MAX_RECORD_LEN, PREAMBLE_LEN, Writer, events,
    record,
};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: ptr came from System.alloc with this layout, above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One test at a time, so the peak is one parse's.
static SERIAL: Mutex<()> = Mutex::new(());

/// Parses `bytes`; panics if it allocated more than 64 times the input plus
/// 1 MiB at its peak (a decoded event is a few times its bytes; JSON values
/// likewise).
fn parse_bounded(bytes: &[u8]) -> Result<tprof_core::recording::Recording, ReadError> {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = parse(bytes);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let bound = 64 * bytes.len() + (1 << 20);
    assert!(
        peak <= bound,
        "parsing {} bytes allocated {peak} bytes at its peak (bound {bound})",
        bytes.len()
    );
    result
}

fn preamble(version: u32) -> Vec<u8> {
    let mut bytes = b"TPROFREC".to_vec();
    bytes.extend(version.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes
}

fn push_record(bytes: &mut Vec<u8>, kind: u32, payload: &[u8]) {
    bytes.extend(kind.to_le_bytes());
    bytes.extend((payload.len() as u32).to_le_bytes());
    bytes.extend(payload);
}

fn with_header() -> Vec<u8> {
    let mut bytes = preamble(FORMAT_VERSION);
    let header = serde_json::to_vec(&Header::default()).unwrap();
    push_record(&mut bytes, record::HEADER, &header);
    bytes
}

/// A small recording as the writer makes it: header, events, footer.
fn sample() -> Vec<u8> {
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write_json(record::HEADER, &Header::default()).unwrap();
    for ts in 0..20 {
        let exit = ExitEvent {
            hdr: ExitEvent::header(ts, 0),
            tid: 7,
            tgid: 7,
            group_dead: 1,
            _pad: 0,
        };
        w.push_event(&events::encode(&exit)).unwrap();
    }
    w.flush().unwrap();
    let footer = Footer {
        end: ClockAnchor::default(),
        stop_reason: "duration".into(),
        command_exit: None,
        clock_sync: None,
    };
    w.write_json(record::FOOTER, &footer).unwrap();
    w.finish().unwrap()
}

#[test]
fn wrong_versions_are_refused() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for version in [0, FORMAT_VERSION + 1, 999, u32::MAX] {
        let mut bytes = sample();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        let err = parse_bounded(&bytes).unwrap_err();
        assert!(
            matches!(err, ReadError::UnsupportedVersion { found } if found == version),
            "{err}"
        );
        assert!(err.to_string().contains("use the tprof that made it"));
    }
}

/// Every prefix of a recording reads as a recording cut short, or as
/// "not a recording" / "no header" when too little is left.
#[test]
fn truncated_at_every_byte() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let bytes = sample();
    for len in 0..bytes.len() {
        match parse_bounded(&bytes[..len]) {
            Ok(rec) => assert!(rec.cut_short(), "prefix of {len} bytes read as complete"),
            Err(ReadError::NotARecording | ReadError::NoHeader) => {}
            Err(e) => panic!("prefix of {len} bytes: {e}"),
        }
    }
}

/// Record lengths up to u32::MAX with little behind them: a length is
/// never trusted to size an allocation.
#[test]
fn huge_lengths_allocate_nothing_big() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for len in [
        MAX_RECORD_LEN - 1,
        MAX_RECORD_LEN,
        MAX_RECORD_LEN + 1,
        u32::MAX,
    ] {
        for kind in [record::EVENTS, record::HEADER, record::STACKS, 99] {
            let mut bytes = with_header();
            bytes.extend(kind.to_le_bytes());
            bytes.extend(len.to_le_bytes());
            bytes.extend([0u8; 64]);
            match parse_bounded(&bytes) {
                Ok(rec) => assert!(rec.truncated, "len {len} kind {kind}"),
                Err(ReadError::Corrupt { offset, .. }) => {
                    assert_eq!(offset, bytes.len() - 72, "len {len} kind {kind}");
                }
                Err(e) => panic!("len {len} kind {kind}: {e}"),
            }
        }
    }
}

/// A million empty records: linear, no per-record blow-up.
#[test]
fn many_records() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut bytes = with_header();
    for _ in 0..1_000_000 {
        push_record(&mut bytes, record::EVENTS, &[]);
    }
    let rec = parse_bounded(&bytes).expect("empty event records are valid");
    assert!(rec.events.is_empty());
}

/// JSON nested a hundred thousand deep, bad UTF-8, wrong types, trailing
/// garbage, numbers out of range: each a "corrupt recording" error.
#[test]
fn hostile_json() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let deep_object = "{\"a\":".repeat(50_000) + "1" + &"}".repeat(50_000);
    let payloads: Vec<Vec<u8>> = vec![
        deep.into_bytes(),
        deep_object.into_bytes(),
        b"{\"tool_version\":\"\xff\xfe\"}".to_vec(),
        b"{\"cores\":\"two\"}".to_vec(),
        b"{\"cores\":99999999999999999999}".to_vec(),
        b"{} trailing".to_vec(),
        b"".to_vec(),
        b"null".to_vec(),
        vec![0xff; 4096],
    ];
    for kind in [
        record::HEADER,
        record::PROCESS,
        record::THREAD,
        record::LOST,
        record::GPU_SAMPLES,
        record::STACKS,
        record::FOOTER,
    ] {
        for payload in &payloads {
            let mut bytes = if kind == record::HEADER {
                preamble(FORMAT_VERSION)
            } else {
                with_header()
            };
            push_record(&mut bytes, kind, payload);
            match parse_bounded(&bytes) {
                Err(ReadError::Corrupt { what, .. }) => assert!(what.contains("bad metadata")),
                other => panic!("kind {kind}: {:?}", other.map(|_| "a recording")),
            }
        }
    }
}

/// Events of unknown kinds, cut off, or all zeros.
#[test]
fn hostile_events() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut unknown = vec![0u8; 64];
    unknown[8] = 200;
    for payload in [unknown, vec![0u8; 64], vec![1u8; 7], vec![0xffu8; 1024]] {
        let mut bytes = with_header();
        push_record(&mut bytes, record::EVENTS, &payload);
        match parse_bounded(&bytes) {
            Err(ReadError::Corrupt { what, .. }) => assert!(what.contains("bad event")),
            other => panic!("{:?}", other.map(|_| "a recording")),
        }
    }
}

/// Deterministic mutations of a real-shaped recording (flipped bytes,
/// overwritten lengths, cut tails, spliced copies): never a panic, never an
/// unbounded allocation. A cheap, always-on cousin of the fuzz target.
#[test]
fn mutated_recordings() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let original = sample();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut bytes = original.clone();
        for _ in 0..=(next() % 4) {
            if bytes.len() <= PREAMBLE_LEN {
                break;
            }
            let at = PREAMBLE_LEN + (next() as usize) % (bytes.len() - PREAMBLE_LEN);
            match next() % 5 {
                0 => bytes[at] ^= 1 << (next() % 8),
                1 => bytes[at] = next() as u8,
                2 => {
                    let end = (at + 4).min(bytes.len());
                    bytes[at..end].copy_from_slice(&u32::MAX.to_le_bytes()[..end - at]);
                }
                3 => bytes.truncate(at),
                _ => {
                    let copy = bytes[at..].to_vec();
                    bytes.extend(copy);
                }
            }
        }
        let _ = parse_bounded(&bytes);
    }
}

/// Inputs that once crashed the reader or the fuzz target. Empty so far:
/// neither `cargo xtask fuzz` runs nor the tests above have found one in
/// the reader itself (the overflows they found were downstream, in
/// analysis; see tests/odd_recordings.rs).
mod regressions {}

//! Reads a recording back: bytes in, [`Recording`] out, no I/O in [`parse`].
//! Tolerates a file cut off mid-record (a killed recording) and rejects
//! anything else malformed with a [`ReadError`] that says what and where.
//!
//! Two ways in. [`parse`] takes bytes and holds every event in memory
//! ([`read`] adds reading the file): tests and fuzzing. [`open`] is the
//! commands' way, in two passes: the first reads the metadata records and
//! seeks over the EVENTS records, noting where they are (and, without a
//! footer, scans their timestamps for the window's end); the second,
//! [`Opened::events_in_order`], decodes one EVENTS record at a time and hands
//! the events on in timestamp order through a reorder buffer that holds back
//! only [`REORDER_WINDOW_NS`] (100 ms) of events; any that arrive later than
//! that are counted as `late` and still delivered. So a report never holds
//! every event. Both refuse anything but a regular file (`/dev/zero`, a
//! FIFO) and say, for corruption, at which byte.

use std::fs::File;
use std::io::{self, BufReader, Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::de::DeserializeOwned;

use super::{
    CudaInfo, FORMAT_VERSION, Footer, GpuInfo, GpuSeries, Header, LostCounts, MAGIC,
    MAX_RECORD_LEN, OLDEST_READABLE_VERSION, PREAMBLE_LEN, ProcessInfo, StackDictionary,
    StackTable, StepProbes, SystemSample, ThreadInfo,
    events::{self, Framing},
    record,
};
use crate::recording::Event;

/// A whole recording in memory.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// The format version the file was written in.
    pub version: u32,
    pub header: Header,
    /// Process snapshots in file order; later ones of a pid supersede earlier.
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadInfo>,
    pub events: Vec<Event>,
    pub system: Vec<SystemSample>,
    pub lost: LostCounts,
    /// GPU sampling's setup; None in a recording cut off before it.
    pub gpu: Option<GpuInfo>,
    /// GPU sample batches in file order.
    pub gpu_series: Vec<GpuSeries>,
    /// Sampled stacks of versions 2 and 3, aggregated; absent when recorded
    /// with --no-stacks or cut short.
    pub stacks: Option<StackTable>,
    /// The frames and stacks a version 4 recording interned as it went.
    pub dictionary: StackDictionary,
    /// CUDA tracing's latest state; None before v3 (or cut off before it).
    pub cuda: Option<CudaInfo>,
    /// What step detection could see; None in recordings made before it
    /// was written.
    pub step_probes: Option<StepProbes>,
    /// Present when recording ended normally.
    pub footer: Option<Footer>,
    /// The file ends inside a record: the recording was killed mid-write.
    pub truncated: bool,
    /// Records of kinds this reader does not know (from a newer tprof),
    /// skipped.
    pub unknown_records: u64,
    /// Events of kinds this reader does not know, skipped (in memory
    /// parses; streaming counts them in [`StreamStats`]).
    pub unknown_events: u64,
}

impl Recording {
    /// How this recording's events are framed.
    pub fn framing(&self) -> Framing {
        Framing::of_version(self.version)
    }

    /// True when the recording did not end normally (killed, crashed, disk
    /// full): what is here is a prefix.
    pub fn cut_short(&self) -> bool {
        self.footer.is_none() || self.truncated
    }

    /// Files one metadata record (any kind but EVENTS; an unknown kind is
    /// counted) as the readers do: for a live view, which gets a
    /// recording's records one at a time rather than from a file.
    pub fn apply_metadata(&mut self, kind: u32, payload: &[u8]) -> Result<(), String> {
        apply_metadata(self, kind, payload)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("not a tprof recording (bad magic bytes)")]
    NotARecording,
    #[error(
        "recording format version {found} is not supported by this tprof (it reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}); use the tprof that made it"
    )]
    UnsupportedVersion { found: u32 },
    #[error("corrupt recording at byte {offset}: {what}")]
    Corrupt { offset: usize, what: String },
    #[error("recording has no header record (it was cut off before the header was written)")]
    NoHeader,
}

/// Reads and parses the recording at `path`, events and all, into memory.
/// The commands stream instead ([`open`]); this is for tests and tools.
pub fn read(path: &Path) -> anyhow::Result<Recording> {
    check_regular_file(path)?;
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read recording {}", path.display()))?;
    parse(&bytes).with_context(|| format!("cannot use recording {}", path.display()))
}

/// A device or FIFO (`tprof report /dev/zero`) would be read forever.
fn check_regular_file(path: &Path) -> anyhow::Result<()> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read recording {}", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!(
            "{} is not a recording: not a regular file; give the path of a file `tprof record` wrote",
            path.display()
        );
    }
    Ok(())
}

/// Parses a whole recording from its bytes.
pub fn parse(bytes: &[u8]) -> Result<Recording, ReadError> {
    let version = check_preamble(bytes)?;
    let mut rec = Recording {
        version,
        ..Recording::default()
    };
    let mut have_header = false;
    let mut offset = PREAMBLE_LEN;
    while offset < bytes.len() {
        let Some((kind, payload)) = next_record(bytes, offset)? else {
            rec.truncated = true;
            break;
        };
        if kind == record::EVENTS {
            rec.unknown_events += events::decode_all(payload, rec.framing(), &mut rec.events)
                .map_err(|e| bad_event(offset, e))?;
        } else {
            have_header |= kind == record::HEADER;
            apply_metadata(&mut rec, kind, payload)
                .map_err(|what| ReadError::Corrupt { offset, what })?;
        }
        offset += 8 + payload.len();
    }
    if !have_header {
        return Err(ReadError::NoHeader);
    }
    Ok(rec)
}

/// A recording opened for streaming. [`open`] reads everything but the
/// events (pass one, seeking over them); [`Opened::events_in_order`] then
/// reads the events one record at a time (pass two). A report so never
/// holds the file or every decoded event at once: events are most of a
/// recording, and a decoded event is twice the size of its bytes.
#[derive(Debug)]
pub struct Opened {
    /// Everything but the events (its `events` is empty).
    pub meta: Recording,
    /// The last event's timestamp, found only when there is no footer to
    /// bound the recording's window (a recording cut short).
    pub last_event_ns: Option<u64>,
    path: PathBuf,
    /// (file offset of the record, payload length) of each EVENTS record.
    chunks: Vec<(u64, u32)>,
}

/// What streaming the events saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    pub events: u64,
    /// Events that came more than [`REORDER_WINDOW_NS`] after later ones
    /// and so were delivered out of timestamp order.
    pub late: u64,
    /// Events of kinds this reader does not know (from a newer tprof),
    /// skipped.
    pub unknown: u64,
}

/// How far behind the newest event an event may be written and still be
/// delivered in order. The ring buffer is ordered by commit, and a program
/// can be preempted between reading the clock and committing (syscall and
/// uprobe programs run preemptible). The worst seen in a 5.9 M-event
/// recording of 800,000 switches/s on a busy 2-CPU machine was 94 µs; a
/// window a thousand times that bounds streaming's memory to a tenth of a
/// second of events.
pub const REORDER_WINDOW_NS: u64 = 100_000_000;

/// Opens the recording at `path` for streaming: reads and checks its
/// metadata records and locates its event records.
pub fn open(path: &Path) -> anyhow::Result<Opened> {
    check_regular_file(path)?;
    let context = || format!("cannot use recording {}", path.display());
    let file =
        File::open(path).with_context(|| format!("cannot read recording {}", path.display()))?;
    let len = file.metadata().with_context(context)?.len();
    let mut opened = Opened {
        meta: Recording::default(),
        last_event_ns: None,
        path: path.to_path_buf(),
        chunks: Vec::new(),
    };
    let mut reader = BufReader::with_capacity(1 << 16, file);
    opened
        .scan_records(&mut reader, len)
        .with_context(context)?;
    if opened.meta.footer.is_none() {
        opened.last_event_ns = opened.last_timestamp(&mut reader).with_context(context)?;
    }
    Ok(opened)
}

impl Opened {
    /// Pass one: metadata into `meta`, event records into `chunks`.
    fn scan_records(&mut self, reader: &mut BufReader<File>, len: u64) -> anyhow::Result<()> {
        let mut preamble = [0u8; PREAMBLE_LEN];
        if reader.read_exact(&mut preamble).is_err() {
            return Err(ReadError::NotARecording.into());
        }
        self.meta.version = check_preamble(&preamble)?;
        let mut have_header = false;
        let mut offset = PREAMBLE_LEN as u64;
        let mut payload = Vec::new();
        while offset < len {
            let Some((kind, size)) = record_head(reader, offset, len)? else {
                self.meta.truncated = true;
                break;
            };
            if kind == record::EVENTS {
                self.chunks.push((offset, size));
                reader.seek_relative(i64::from(size))?;
            } else {
                payload.resize(size as usize, 0);
                reader.read_exact(&mut payload)?;
                have_header |= kind == record::HEADER;
                apply_metadata(&mut self.meta, kind, &payload).map_err(|what| {
                    ReadError::Corrupt {
                        offset: offset as usize,
                        what,
                    }
                })?;
            }
            offset += 8 + u64::from(size);
        }
        if !have_header {
            return Err(ReadError::NoHeader.into());
        }
        Ok(())
    }

    /// The latest event timestamp (None without events), checking every
    /// event record decodes.
    fn last_timestamp(&self, reader: &mut BufReader<File>) -> anyhow::Result<Option<u64>> {
        let mut last = None;
        let mut buf = Vec::new();
        for &(offset, size) in &self.chunks {
            read_chunk(reader, offset, size, &mut buf)?;
            events::for_each_timestamp(&buf, self.meta.framing(), |ts| last = last.max(Some(ts)))
                .map_err(|e| bad_event(offset as usize, e))?;
        }
        Ok(last)
    }

    /// Pass two: every event, in timestamp order, to `deliver`. Events
    /// are decoded a record at a time and held back only as long as the
    /// reorder window needs.
    pub fn events_in_order(&self, mut deliver: impl FnMut(&Event)) -> anyhow::Result<StreamStats> {
        let file = File::open(&self.path)
            .with_context(|| format!("cannot read recording {}", self.path.display()))?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut order = Reorder {
            framing: self.meta.framing(),
            ..Reorder::default()
        };
        let mut buf = Vec::new();
        for &(offset, size) in &self.chunks {
            read_chunk(&mut reader, offset, size, &mut buf)
                .with_context(|| format!("{} changed while being read", self.path.display()))?;
            order
                .add(&buf, &mut deliver)
                .map_err(|e| bad_event(offset as usize, e))
                .with_context(|| format!("cannot use recording {}", self.path.display()))?;
        }
        Ok(order.finish(&mut deliver))
    }
}

/// Reads the payload of the record at `offset` into `buf`.
fn read_chunk(
    reader: &mut BufReader<File>,
    offset: u64,
    size: u32,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    reader.seek(SeekFrom::Start(offset + 8))?;
    buf.resize(size as usize, 0);
    reader.read_exact(buf)
}

/// The kind and payload length of the record at `offset`, or None when the
/// file ends inside it.
fn record_head(
    reader: &mut BufReader<File>,
    offset: u64,
    len: u64,
) -> Result<Option<(u32, u32)>, ReadError> {
    let mut head = [0u8; 8];
    if offset + 8 > len || reader.read_exact(&mut head).is_err() {
        return Ok(None);
    }
    let (kind, size) = split_head(head);
    check_len(size, offset as usize)?;
    Ok((offset + 8 + u64::from(size) <= len).then_some((kind, size)))
}

/// Puts events in timestamp order with bounded memory: decoded events wait
/// in `pending` until the newest is [`REORDER_WINDOW_NS`] past them.
#[derive(Default)]
struct Reorder {
    framing: Framing,
    pending: Vec<Event>,
    /// The newest timestamp delivered so far.
    delivered_ns: u64,
    /// How many events stayed pending after the last release.
    kept: usize,
    stats: StreamStats,
}

/// Pending events worth sorting and delivering at once.
const REORDER_BATCH: usize = 1 << 16;

impl Reorder {
    fn add(
        &mut self,
        bytes: &[u8],
        deliver: &mut impl FnMut(&Event),
    ) -> Result<(), events::DecodeError> {
        let before = self.pending.len();
        self.stats.unknown += events::decode_all(bytes, self.framing, &mut self.pending)?;
        let added = &self.pending[before..];
        self.stats.events += added.len() as u64;
        self.stats.late += added.iter().filter(|e| e.ts() < self.delivered_ns).count() as u64;
        // Sorting touches everything pending: wait until the new events
        // outnumber those kept back, so each event is sorted about twice.
        if self.pending.len() >= REORDER_BATCH.max(2 * self.kept) {
            self.release(deliver, false);
        }
        Ok(())
    }

    /// Delivers the pending events older than the window (all, at the end).
    fn release(&mut self, deliver: &mut impl FnMut(&Event), all: bool) {
        // Stable, and nearly sorted already: runs make this close to linear.
        self.pending.sort_by_key(Event::ts);
        let newest = self.pending.last().map_or(0, Event::ts);
        let upto = if all {
            self.pending.len()
        } else {
            let horizon = newest.saturating_sub(REORDER_WINDOW_NS);
            self.pending.partition_point(|e| e.ts() <= horizon)
        };
        for event in self.pending.drain(..upto) {
            self.delivered_ns = self.delivered_ns.max(event.ts());
            deliver(&event);
        }
        self.kept = self.pending.len();
    }

    fn finish(mut self, deliver: &mut impl FnMut(&Event)) -> StreamStats {
        self.release(deliver, true);
        self.stats
    }
}

/// The version of a recording that starts with `bytes`, if this reader
/// reads it.
fn check_preamble(bytes: &[u8]) -> Result<u32, ReadError> {
    if bytes.len() < PREAMBLE_LEN || bytes[..8] != MAGIC {
        return Err(ReadError::NotARecording);
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(ReadError::UnsupportedVersion { found: version });
    }
    Ok(version)
}

/// The record at `offset`, or None when the file ends inside it.
fn next_record(bytes: &[u8], offset: usize) -> Result<Option<(u32, &[u8])>, ReadError> {
    let Some(head) = bytes.get(offset..offset + 8) else {
        return Ok(None);
    };
    let (kind, len) = split_head(head.try_into().expect("8 bytes"));
    check_len(len, offset)?;
    let start = offset + 8;
    Ok(bytes
        .get(start..start + len as usize)
        .map(|payload| (kind, payload)))
}

/// A record head: (kind, payload length).
fn split_head(head: [u8; 8]) -> (u32, u32) {
    let kind = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    (kind, len)
}

fn check_len(len: u32, offset: usize) -> Result<(), ReadError> {
    if len > MAX_RECORD_LEN {
        return Err(ReadError::Corrupt {
            offset,
            what: format!("record length {len} exceeds the {MAX_RECORD_LEN}-byte limit"),
        });
    }
    Ok(())
}

fn bad_event(offset: usize, e: events::DecodeError) -> ReadError {
    ReadError::Corrupt {
        offset,
        what: format!("bad event: {e}"),
    }
}

/// Files one metadata record (any kind but EVENTS) into `rec`.
fn apply_metadata(rec: &mut Recording, kind: u32, payload: &[u8]) -> Result<(), String> {
    match kind {
        record::HEADER => rec.header = json(payload)?,
        record::PROCESS => rec.processes.push(json(payload)?),
        record::THREAD => rec.threads.push(json(payload)?),
        record::SYSTEM => rec.system.push(json(payload)?),
        record::LOST => rec.lost = json(payload)?,
        record::GPU_INFO => rec.gpu = Some(json(payload)?),
        record::GPU_SAMPLES => rec.gpu_series.push(json(payload)?),
        record::STACKS => rec.stacks = Some(json(payload)?),
        record::CUDA => rec.cuda = Some(json(payload)?),
        record::STEP_PROBES => rec.step_probes = Some(json(payload)?),
        record::FOOTER => rec.footer = Some(json::<Footer>(payload)?),
        record::FRAMES => rec.dictionary.add_frames(json(payload)?)?,
        record::STACK_DEFS => rec.dictionary.add_stacks(json(payload)?)?,
        // A kind from a newer tprof: what this reader knows still reads.
        _ => rec.unknown_records += 1,
    }
    Ok(())
}

fn json<T: DeserializeOwned>(payload: &[u8]) -> Result<T, String> {
    serde_json::from_slice(payload).map_err(|e| format!("bad metadata: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{ClockAnchor, GpuDevice, GpuMetric, Writer};
    use profiler_ebpf::{AbiEvent as _, ExitEvent};

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        let header = Header {
            cores: 2,
            targets: vec![7],
            ..Default::default()
        };
        w.write_json(record::HEADER, &header).unwrap();
        let exit = ExitEvent {
            hdr: ExitEvent::header(5, 0),
            tid: 7,
            tgid: 7,
            group_dead: 1,
            _pad: 0,
        };
        w.push_event(&events::encode(&exit)).unwrap();
        w.flush().unwrap();
        let gpu = GpuInfo {
            devices: vec![GpuDevice {
                index: 0,
                name: "GPU".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        w.write_json(record::GPU_INFO, &gpu).unwrap();
        let series = GpuSeries {
            gpu: 0,
            metric: GpuMetric::GpuUtilPct,
            pid: None,
            points: vec![(5, 95), (6, 0)],
        };
        w.write_json(record::GPU_SAMPLES, &series).unwrap();
        let cuda = CudaInfo {
            launches: [(7, 3)].into(),
            ..Default::default()
        };
        w.write_json(record::CUDA, &cuda).unwrap();
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
    fn reads_what_the_writer_wrote() {
        let rec = parse(&sample()).unwrap();
        assert_eq!(rec.header.cores, 2);
        assert_eq!(rec.events.len(), 1);
        assert_eq!(rec.gpu.as_ref().unwrap().devices[0].name, "GPU");
        assert_eq!(rec.gpu_series[0].points, vec![(5, 95), (6, 0)]);
        assert_eq!(rec.cuda.as_ref().unwrap().launches[&7], 3);
        assert!(!rec.cut_short());
    }

    #[test]
    fn every_prefix_is_a_prefix_or_a_clear_error() {
        let bytes = sample();
        for len in 0..bytes.len() {
            match parse(&bytes[..len]) {
                Ok(rec) => assert!(rec.cut_short(), "prefix {len} read as complete"),
                Err(ReadError::NotARecording | ReadError::NoHeader) => {}
                Err(e) => panic!("prefix {len}: unexpected {e}"),
            }
        }
    }

    /// A file of `bytes` in a fresh temporary directory.
    fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tprof-reader-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rec.tprof");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn exit_at(ts: u64, tid: u32) -> Vec<u8> {
        events::encode(&ExitEvent {
            hdr: ExitEvent::header(ts, 0),
            tid,
            tgid: 7,
            group_dead: 0,
            _pad: 0,
        })
    }

    /// A recording whose events come in `batches` (one EVENTS record each).
    fn with_batches(batches: &[Vec<(u64, u32)>], footer: bool) -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.write_json(record::HEADER, &Header::default()).unwrap();
        for batch in batches {
            for &(ts, tid) in batch {
                w.push_event(&exit_at(ts, tid)).unwrap();
            }
            w.flush().unwrap();
        }
        if footer {
            let footer = Footer {
                end: ClockAnchor::default(),
                stop_reason: "duration".into(),
                command_exit: None,
                clock_sync: None,
            };
            w.write_json(record::FOOTER, &footer).unwrap();
        }
        w.finish().unwrap()
    }

    fn streamed(path: &Path) -> (Vec<(u64, u32)>, StreamStats) {
        let opened = open(path).unwrap();
        let mut out = Vec::new();
        let stats = opened
            .events_in_order(|e| match *e {
                Event::Exit { ts, tid, .. } => out.push((ts, tid)),
                _ => unreachable!(),
            })
            .unwrap();
        (out, stats)
    }

    #[test]
    fn streaming_delivers_what_parse_holds_in_timestamp_order() {
        // Out of order within and across records, ties kept in file order.
        let batches = vec![
            vec![(30, 1), (10, 2), (20, 3)],
            vec![(15, 4), (30, 5), (5, 6)],
        ];
        let bytes = with_batches(&batches, true);
        let path = temp_file("order", &bytes);
        let (got, stats) = streamed(&path);
        let mut want: Vec<(u64, u32)> = batches.concat();
        want.sort_by_key(|&(ts, _)| ts);
        assert_eq!(got, want);
        assert_eq!(
            stats,
            StreamStats {
                events: 6,
                late: 0,
                unknown: 0
            }
        );
        let opened = open(&path).unwrap();
        assert!(opened.meta.events.is_empty() && !opened.meta.cut_short());
        assert_eq!(opened.last_event_ns, None, "a footer bounds the window");
    }

    #[test]
    fn streaming_counts_events_later_than_the_window() {
        // Enough events, 1 ms apart, to release a batch, then one far
        // older than those released.
        let far = 10 * REORDER_WINDOW_NS;
        let mut first: Vec<(u64, u32)> = (0..REORDER_BATCH as u64)
            .map(|i| (far + i * 1_000_000, 1))
            .collect();
        first[0] = (1, 2); // old, but in the batch before the release
        let batches = vec![first, vec![(2, 3)]];
        let path = temp_file("late", &with_batches(&batches, true));
        let (got, stats) = streamed(&path);
        assert_eq!(stats.late, 1);
        assert_eq!(got.len(), REORDER_BATCH + 1);
        assert_eq!(got[0], (1, 2));
        assert!(got.contains(&(2, 3)), "a late event is still delivered");
    }

    #[test]
    fn open_reads_every_prefix_as_parse_does() {
        let bytes = with_batches(&[vec![(30, 1), (10, 2)], vec![(20, 3)]], true);
        for len in 0..bytes.len() {
            let path = temp_file("prefix", &bytes[..len]);
            match (parse(&bytes[..len]), open(&path)) {
                (Ok(rec), Ok(opened)) => {
                    assert!(opened.meta.cut_short() || len == bytes.len());
                    let mut n = 0;
                    opened.events_in_order(|_| n += 1).unwrap();
                    assert_eq!(n, rec.events.len(), "prefix {len}");
                    let last = rec.events.iter().map(Event::ts).max();
                    assert_eq!(opened.last_event_ns, last, "prefix {len}");
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.root_cause().to_string()),
                (a, b) => panic!("prefix {len}: parse {a:?} but open {b:?}"),
            }
        }
    }

    #[test]
    fn open_rejects_a_bad_event_of_a_cut_short_recording() {
        let mut bytes = with_batches(&[vec![(30, 1)]], false);
        let events_at = bytes.len() - (8 + 32); // the last record: one exit event
        bytes[events_at + 8 + 12] = 3; // the event's length
        let path = temp_file("bad", &bytes);
        let err = open(&path).unwrap_err();
        assert!(
            format!("{err:#}").contains("bad event: event of kind 5 with impossible length 3"),
            "{err:#}"
        );
    }

    /// Kinds from a newer tprof are skipped and counted, in memory and
    /// streamed, and everything this reader knows still reads.
    #[test]
    fn skips_and_counts_unknown_records_and_events() {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.write_json(record::HEADER, &Header::default()).unwrap();
        w.write_json(99, &"from the future").unwrap();
        let mut unknown = ExitEvent::header(4, 0);
        unknown.kind = 77;
        unknown.len = 24;
        let mut event = events::encode(&unknown);
        event.extend([0u8; 8]);
        w.push_event(&event).unwrap();
        w.push_event(&exit_at(5, 9)).unwrap();
        let footer = Footer {
            end: ClockAnchor::default(),
            stop_reason: "duration".into(),
            command_exit: None,
            clock_sync: None,
        };
        w.write_json(record::FOOTER, &footer).unwrap();
        let bytes = w.finish().unwrap();
        let rec = parse(&bytes).unwrap();
        assert_eq!((rec.unknown_records, rec.unknown_events), (1, 1));
        assert_eq!(rec.events.len(), 1);
        let path = temp_file("unknown", &bytes);
        let opened = open(&path).unwrap();
        assert_eq!(opened.meta.unknown_records, 1);
        let mut n = 0;
        let stats = opened.events_in_order(|_| n += 1).unwrap();
        assert_eq!((n, stats.unknown), (1, 1));
    }

    #[test]
    fn rejects_other_versions_and_garbage() {
        let mut bytes = sample();
        bytes[8] = 99;
        assert!(matches!(
            parse(&bytes),
            Err(ReadError::UnsupportedVersion { found: 99 })
        ));
        let mut bytes = sample();
        bytes[8] = 1; // version 1: the same records, no STACKS
        assert!(parse(&bytes).unwrap().stacks.is_none());
        let mut bytes = sample();
        bytes[8] = 2; // version 2: the same records but CUDA, which it lacks
        assert!(parse(&bytes).is_ok());
        assert!(matches!(
            parse(b"hello world, not a recording"),
            Err(ReadError::NotARecording)
        ));
        let mut bytes = sample();
        bytes[PREAMBLE_LEN + 4..PREAMBLE_LEN + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            parse(&bytes),
            Err(ReadError::Corrupt { offset: 16, .. })
        ));
    }
}

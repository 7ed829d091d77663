//! Reads a recording back: bytes in, [`Recording`] out, no I/O in [`parse`].
//! Tolerates a file cut off mid-record (a killed recording) and rejects
//! anything else malformed with a [`ReadError`] that says what and where.

use std::path::Path;

use anyhow::Context as _;
use serde::de::DeserializeOwned;

use super::{
    CudaInfo, FORMAT_VERSION, Footer, GpuInfo, GpuSeries, Header, LostCounts, MAGIC,
    MAX_RECORD_LEN, OLDEST_READABLE_VERSION, PREAMBLE_LEN, ProcessInfo, StackTable, SystemSample,
    ThreadInfo, events, record,
};
use crate::recording::Event;

/// A whole recording in memory.
#[derive(Debug, Clone, Default)]
pub struct Recording {
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
    /// Sampled stacks; absent when recorded with --no-stacks or cut short.
    pub stacks: Option<StackTable>,
    /// CUDA tracing's latest state; None before v3 (or cut off before it).
    pub cuda: Option<CudaInfo>,
    /// Present when recording ended normally.
    pub footer: Option<Footer>,
    /// The file ends inside a record: the recording was killed mid-write.
    pub truncated: bool,
}

impl Recording {
    /// True when the recording did not end normally (killed, crashed, disk
    /// full): what is here is a prefix.
    pub fn cut_short(&self) -> bool {
        self.footer.is_none() || self.truncated
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

/// Reads and parses the recording at `path`.
pub fn read(path: &Path) -> anyhow::Result<Recording> {
    // A device or FIFO (`tprof report /dev/zero`) would be read forever.
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read recording {}", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!(
            "{} is not a recording: not a regular file; give the path of a file `tprof record` wrote",
            path.display()
        );
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read recording {}", path.display()))?;
    parse(&bytes).with_context(|| format!("cannot use recording {}", path.display()))
}

/// Parses a whole recording from its bytes.
pub fn parse(bytes: &[u8]) -> Result<Recording, ReadError> {
    check_preamble(bytes)?;
    let mut rec = Recording::default();
    let mut have_header = false;
    let mut offset = PREAMBLE_LEN;
    while offset < bytes.len() {
        let Some((kind, payload)) = next_record(bytes, offset)? else {
            rec.truncated = true;
            break;
        };
        let corrupt = |what: String| ReadError::Corrupt { offset, what };
        match kind {
            record::HEADER => {
                rec.header = json(payload).map_err(corrupt)?;
                have_header = true;
            }
            record::PROCESS => rec.processes.push(json(payload).map_err(corrupt)?),
            record::THREAD => rec.threads.push(json(payload).map_err(corrupt)?),
            record::SYSTEM => rec.system.push(json(payload).map_err(corrupt)?),
            record::LOST => rec.lost = json(payload).map_err(corrupt)?,
            record::GPU_INFO => rec.gpu = Some(json(payload).map_err(corrupt)?),
            record::GPU_SAMPLES => rec.gpu_series.push(json(payload).map_err(corrupt)?),
            record::STACKS => rec.stacks = Some(json(payload).map_err(corrupt)?),
            record::CUDA => rec.cuda = Some(json(payload).map_err(corrupt)?),
            record::FOOTER => rec.footer = Some(json::<Footer>(payload).map_err(corrupt)?),
            record::EVENTS => events::decode_all(payload, &mut rec.events)
                .map_err(|e| corrupt(format!("bad event: {e}")))?,
            other => return Err(corrupt(format!("unknown record kind {other}"))),
        }
        offset += 8 + payload.len();
    }
    if !have_header {
        return Err(ReadError::NoHeader);
    }
    Ok(rec)
}

fn check_preamble(bytes: &[u8]) -> Result<(), ReadError> {
    if bytes.len() < PREAMBLE_LEN || bytes[..8] != MAGIC {
        return Err(ReadError::NotARecording);
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(ReadError::UnsupportedVersion { found: version });
    }
    Ok(())
}

/// The record at `offset`, or None when the file ends inside it.
fn next_record(bytes: &[u8], offset: usize) -> Result<Option<(u32, &[u8])>, ReadError> {
    let Some(head) = bytes.get(offset..offset + 8) else {
        return Ok(None);
    };
    let kind = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    if len > MAX_RECORD_LEN {
        return Err(ReadError::Corrupt {
            offset,
            what: format!("record length {len} exceeds the {MAX_RECORD_LEN}-byte limit"),
        });
    }
    let start = offset + 8;
    Ok(bytes
        .get(start..start + len as usize)
        .map(|payload| (kind, payload)))
}

fn json<T: DeserializeOwned>(payload: &[u8]) -> Result<T, String> {
    serde_json::from_slice(payload).map_err(|e| format!("bad metadata: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{ClockAnchor, GpuDevice, GpuMetric, Writer};
    use profiler_ebpf::{EventHeader, ExitEvent, kind};

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        let header = Header {
            cores: 2,
            targets: vec![7],
            ..Default::default()
        };
        w.write_json(record::HEADER, &header).unwrap();
        let exit = ExitEvent {
            hdr: EventHeader {
                ts_ns: 5,
                kind: kind::EXIT,
                cpu: 0,
                _pad: 0,
            },
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
        bytes[PREAMBLE_LEN] = 42; // first record's kind
        assert!(matches!(
            parse(&bytes),
            Err(ReadError::Corrupt { offset: 16, .. })
        ));
    }
}

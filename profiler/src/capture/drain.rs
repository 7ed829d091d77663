//! One drain of the event shards: their records gathered and put in
//! timestamp order, and what the session reads in them (how many, and
//! which processes appeared or exec'd).
//!
//! [`DrainBatch`] merges the records of every shard by timestamp, a stack
//! copy before the events of its timestamp, so the recording keeps the order
//! one ring buffer would have given. It sees no aya type:
//! `KernelPrograms::drain_events` hands it byte slices, event shards first,
//! then copy shards, so every event it reads has its copy (committed before
//! it) in the same drain or an earlier one.

use profiler_ebpf::kind;

use super::clock::monotonic_ns;
use tprof_core::recording::{
    Event,
    events::{Framing, decode},
};

/// The events of one drain, gathered from every ring-buffer shard and put
/// in timestamp order, so the recording keeps the order one shared buffer
/// gave: each shard is in order, and everything reserved before the drain
/// began is read in it. A stack copy goes before the events of its
/// timestamp: the sample or switch that uses it was stamped with the same
/// clock reading.
#[derive(Default)]
pub(super) struct DrainBatch {
    bytes: Vec<u8>,
    /// (timestamp × 2, + 1 unless a stack copy; offset in `bytes`; length)
    /// of each event: 16 bytes, since sorting them is a twentieth of
    /// tprof's time on a busy job.
    order: Vec<(u64, u32, u32)>,
    /// CLOCK_MONOTONIC when the drain began: the batches up to this one
    /// hold every event stamped before then (a live view's watermark).
    drained_ns: u64,
    /// Its events and copies, counted as they came.
    counts: Drained,
    /// It holds a fork, exec or executable mapping, which the session
    /// reads in order ([`DrainBatch::has_process_records`]).
    process_records: bool,
}

impl DrainBatch {
    /// Empties the batch, then takes every record `drain` hands over (each
    /// shard's in its order) and sorts them by timestamp.
    pub(super) fn gather(&mut self, drain: impl FnOnce(&mut dyn FnMut(&[u8]))) {
        self.bytes.clear();
        self.order.clear();
        self.drained_ns = monotonic_ns();
        self.counts = Drained::default();
        self.process_records = false;
        drain(&mut |bytes| {
            let ts = bytes
                .get(..8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            let kind = record_kind(bytes);
            let copy = kind == kind::STACK_COPY;
            // Counted here, where the record was just read, rather than in
            // a pass over the sorted batch, which jumps about its memory.
            self.process_records |= matches!(kind, kind::FORK | kind::EXEC | kind::EXEC_MAP);
            self.counts.count(kind, bytes.len());
            // Boot-time nanoseconds: 2^63 of them is 292 years.
            let key = (ts << 1) | u64::from(!copy);
            // A drain holds at most what the shards hold: under 2 GiB of
            // events (the largest ring buffer size) and the copy shards.
            self.order
                .push((key, self.bytes.len() as u32, bytes.len() as u32));
            self.bytes.extend_from_slice(bytes);
        });
        // Stable: events of one timestamp keep their shard's order.
        self.order.sort_by_key(|&(key, _, _)| key);
    }

    /// Hands `keep` each record in order to change in place, and drops
    /// from the batch those it returns false for.
    pub(super) fn rewrite(&mut self, mut keep: impl FnMut(&mut [u8]) -> bool) {
        let bytes = &mut self.bytes;
        self.order
            .retain(|&(_, start, len)| keep(&mut bytes[start as usize..(start + len) as usize]));
    }

    /// When the drain began (see the field).
    pub(super) fn drained_ns(&self) -> u64 {
        self.drained_ns
    }

    /// Its events and stack copies (executable mappings, which the
    /// session uses up, left out).
    pub(super) fn counts(&self) -> Drained {
        self.counts
    }

    /// Whether it holds a record the session must read in order: a fork,
    /// an exec or an executable mapping (in a busy job's steady state,
    /// seldom).
    pub(super) fn has_process_records(&self) -> bool {
        self.process_records
    }

    pub(super) fn in_order(&self) -> impl Iterator<Item = &[u8]> {
        self.order
            .iter()
            .map(|&(_, start, len)| &self.bytes[start as usize..(start + len) as usize])
    }
}

/// What the drains took so far: the events, and the user stack copies
/// with their bytes (ring-buffer records, headers included): what stacks
/// cost the ring buffer (`TPROF_STACK_COPY_STATS`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Drained {
    pub events: u64,
    pub copies: u64,
    pub copy_bytes: u64,
}

impl Drained {
    pub(super) fn add(&mut self, other: Drained) {
        self.events += other.events;
        self.copies += other.copies;
        self.copy_bytes += other.copy_bytes;
    }

    /// Counts a record of `kind`, `len` bytes long. A stack copy is
    /// unwound by the resolve stage, not written, so not an event of the
    /// recording; an executable mapping is used up by the session.
    pub(super) fn count(&mut self, kind: u16, len: usize) {
        match kind {
            kind::STACK_COPY => {
                self.copies += 1;
                self.copy_bytes += len as u64;
            }
            kind::EXEC_MAP => {}
            _ => self.events += 1,
        }
    }
}

/// A record's kind (after its 8-byte timestamp); 0 for one too short.
fn record_kind(record: &[u8]) -> u16 {
    record
        .get(8..10)
        .map_or(0, |b| u16::from_le_bytes(b.try_into().expect("2 bytes")))
}

/// A process a drained event says was created or exec'd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcessChange {
    pub pid: u32,
    /// Its parent, when it was created.
    pub parent: Option<u32>,
    pub ts: u64,
}

/// The process that mapped executable memory, when the record says one
/// did ([`kind::EXEC_MAP`]): capture reads its maps again and drops the
/// record.
pub(super) fn exec_mapped(record: &[u8]) -> Option<u32> {
    if record.get(8..10)? != kind::EXEC_MAP.to_le_bytes() {
        return None;
    }
    let at = std::mem::offset_of!(profiler_ebpf::ExecMapEvent, tgid);
    Some(u32::from_le_bytes(record.get(at..at + 4)?.try_into().ok()?))
}

/// The process a raw event says was created (with its parent) or exec'd.
pub(super) fn process_change(record: &[u8]) -> Option<ProcessChange> {
    let ts = u64::from_le_bytes(record.get(0..8)?.try_into().ok()?);
    let kind = u16::from_le_bytes(record.get(8..10)?.try_into().ok()?);
    if kind != kind::FORK && kind != kind::EXEC {
        return None;
    }
    let (pid, parent) = match decode(record, Framing::Length).ok()?.0? {
        Event::Fork {
            parent_tgid,
            child_tgid,
            ..
        } if child_tgid != parent_tgid => (child_tgid, Some(parent_tgid)),
        Event::Exec { tgid, .. } => (tgid, None),
        _ => return None,
    };
    Some(ProcessChange { pid, parent, ts })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record: its timestamp, then a tag byte to tell records apart.
    fn record(ts: u64, tag: u8) -> Vec<u8> {
        let mut bytes = ts.to_le_bytes().to_vec();
        bytes.push(tag);
        bytes
    }

    #[test]
    fn merges_shards_by_timestamp_keeping_ties_in_shard_order() {
        let shards = [
            vec![record(10, b'a'), record(30, b'b'), record(30, b'c')],
            vec![record(20, b'x'), record(30, b'y')],
        ];
        let mut batch = DrainBatch::default();
        for _ in 0..2 {
            // The second round reuses the buffers of the first.
            batch.gather(|push| {
                for shard in &shards {
                    for r in shard {
                        push(r);
                    }
                }
            });
            let tags: Vec<u8> = batch.in_order().map(|r| r[8]).collect();
            assert_eq!(tags, b"axbcy");
        }
    }

    /// What `rewrite` changes stays changed, and what it drops is gone,
    /// the rest keeping their order.
    #[test]
    fn rewrite_changes_in_place_and_drops() {
        let mut batch = DrainBatch::default();
        batch.gather(|push| {
            for r in [record(30, b'c'), record(10, b'a'), record(20, b'b')] {
                push(&r);
            }
        });
        batch.rewrite(|r| {
            r[8] = r[8].to_ascii_uppercase();
            r[8] != b'B'
        });
        let tags: Vec<u8> = batch.in_order().map(|r| r[8]).collect();
        assert_eq!(tags, b"AC");
    }

    #[test]
    fn an_exec_mapping_names_its_process() {
        let event = profiler_ebpf::ExecMapEvent {
            hdr: <profiler_ebpf::ExecMapEvent as profiler_ebpf::AbiEvent>::header(7, 0),
            addr: 0x7f00_0000_0000,
            len: 4096,
            tid: 43,
            tgid: 42,
        };
        assert_eq!(exec_mapped(bytemuck::bytes_of(&event)), Some(42));
        let mut fork = 7u64.to_le_bytes().to_vec();
        fork.extend_from_slice(&kind::FORK.to_le_bytes());
        fork.resize(56, 0);
        assert_eq!(exec_mapped(&fork), None);
    }

    #[test]
    fn a_stack_copy_is_told_from_an_event_by_its_kind() {
        let mut copy = 7u64.to_le_bytes().to_vec();
        copy.extend_from_slice(&kind::STACK_COPY.to_le_bytes());
        assert_eq!(record_kind(&copy), kind::STACK_COPY);
        let mut fork = 7u64.to_le_bytes().to_vec();
        fork.extend_from_slice(&kind::FORK.to_le_bytes());
        assert_ne!(record_kind(&fork), kind::STACK_COPY);
        let mut drained = Drained::default();
        drained.count(record_kind(&copy), copy.len());
        drained.count(record_kind(&fork), fork.len());
        assert_eq!(
            (drained.events, drained.copies, drained.copy_bytes),
            (1, 1, 10)
        );
    }

    /// A record of `kind` at `ts`, `len` bytes long.
    fn of_kind(ts: u64, kind: u16, len: usize) -> Vec<u8> {
        let mut bytes = ts.to_le_bytes().to_vec();
        bytes.extend_from_slice(&kind.to_le_bytes());
        bytes.resize(len, 0);
        bytes
    }

    /// The counts are taken as the records come, executable mappings left
    /// out, and a batch says whether it holds a record about processes.
    #[test]
    fn counts_records_and_tells_of_process_records() {
        let mut batch = DrainBatch::default();
        let plain = of_kind(10, kind::SWITCH, 40);
        batch.gather(|push| {
            push(&plain);
            push(&of_kind(11, kind::STACK_COPY, 100));
            push(&of_kind(12, kind::FORK, 56));
            push(&of_kind(13, kind::EXEC_MAP, 40));
        });
        let counts = batch.counts();
        assert_eq!(
            (counts.events, counts.copies, counts.copy_bytes),
            (2, 1, 100)
        );
        assert!(batch.has_process_records());
        batch.gather(|push| push(&plain));
        assert_eq!(batch.counts().events, 1);
        assert!(!batch.has_process_records());
    }

    /// A stack copy drained after the events goes before the event of its
    /// timestamp that uses it.
    #[test]
    fn a_copy_goes_before_the_events_of_its_timestamp() {
        let mut copy = record(20, b'c');
        copy.splice(8..8, kind::STACK_COPY.to_le_bytes());
        let mut batch = DrainBatch::default();
        batch.gather(|push| {
            for r in [record(10, b'a'), record(20, b'e'), record(30, b'z'), copy] {
                push(&r);
            }
        });
        let tags: Vec<u8> = batch.in_order().map(|r| *r.last().unwrap()).collect();
        assert_eq!(tags, b"acez");
    }
}

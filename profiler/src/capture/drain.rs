//! One drain of the event shards: their records gathered and put in
//! timestamp order.
//!
//! [`DrainBatch`] merges the records of every shard by timestamp, a stack
//! copy before the events of its timestamp, so the recording keeps the order
//! one ring buffer would have given. It sees no aya type:
//! `KernelPrograms::drain_events` hands it byte slices, event shards first,
//! then copy shards, so every event it reads has its copy (committed before
//! it) in the same drain or an earlier one.

use profiler_ebpf::kind;

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
}

impl DrainBatch {
    /// Empties the batch, then takes every record `drain` hands over (each
    /// shard's in its order) and sorts them by timestamp.
    pub(super) fn gather(&mut self, drain: impl FnOnce(&mut dyn FnMut(&[u8]))) {
        self.bytes.clear();
        self.order.clear();
        drain(&mut |bytes| {
            let ts = bytes
                .get(..8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            let copy = bytes.get(8..10) == Some(&kind::STACK_COPY.to_le_bytes()[..]);
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

    pub(super) fn in_order(&self) -> impl Iterator<Item = &[u8]> {
        self.order
            .iter()
            .map(|&(_, start, len)| &self.bytes[start as usize..(start + len) as usize])
    }
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

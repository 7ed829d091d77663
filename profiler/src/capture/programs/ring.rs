//! A BPF ring buffer read in place: each drain hands over every record
//! committed since the last one, in order, then gives their space back to
//! the kernel with one store.
//!
//! aya's `RingBuf` hands out one record at a time and publishes the
//! consumer position after each; at 200,000 records a second that loop
//! was a tenth of tprof's own CPU on a busy job, and every store moved the
//! cache line every producing CPU reads at each reservation. The kernel
//! programs submit with `BPF_RB_NO_WAKEUP` and userspace drains on a timer,
//! so the wakeup handshake aya's reader also does is not needed here.
//!
//! The layout (kernel/bpf/ringbuf.c): one page holding the consumer
//! position (mapped read-write), one holding the producer position, then
//! the data pages mapped twice in a row (read-only), so a record that
//! wraps around the end reads as one slice. Each record starts with an
//! 8-byte header: its length, with a busy bit while it is reserved but not
//! yet committed and a discard bit if its program dropped it; records are
//! 8-byte aligned.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
};

use anyhow::{Context as _, Result};
use aya::maps::MapData;

use crate::capture::procfs;
use memmap2::{MmapOptions, MmapRaw};

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HEADER_BYTES: usize = 8;

/// One ring buffer map, mapped for reading in place.
pub(super) struct Ring {
    /// The consumer position's page.
    consumer: MmapRaw,
    /// The producer position's page, then the data pages twice.
    producer: MmapRaw,
    page: usize,
    /// The data's size (a power of two), less one.
    mask: usize,
    /// Where the next record starts (the consumer position as published,
    /// between drains).
    pos: usize,
    /// Holds the map's fd open for as long as it is mapped.
    _map: MapData,
}

impl Ring {
    pub(super) fn new(name: &str, map: MapData) -> Result<Ring> {
        let failed = || format!("cannot map ring buffer {name}");
        let size = map.info().with_context(failed)?.max_entries() as usize;
        let page = procfs::page_size() as usize;
        let fd = map.fd().as_fd().as_raw_fd();
        let consumer = MmapOptions::new()
            .len(page)
            .map_raw(fd)
            .with_context(failed)?;
        let producer = MmapOptions::new()
            .offset(page as u64)
            .len(page + 2 * size)
            .map_raw_read_only(fd)
            .with_context(failed)?;
        let mut ring = Ring {
            consumer,
            producer,
            page,
            mask: size - 1,
            pos: 0,
            _map: map,
        };
        ring.pos = ring.consumer_pos().load(Ordering::Acquire);
        Ok(ring)
    }

    /// Hands `each` every record committed since the last drain, in order,
    /// stopping at the first one still being written (the next drain
    /// starts there), then releases their space.
    pub(super) fn drain(&mut self, each: &mut dyn FnMut(&[u8])) {
        // Acquire: the records up to it are written (their headers are
        // read with Acquire too, as a record can be committed out of order).
        let end = self.producer_pos().load(Ordering::Acquire);
        let data_len = 2 * (self.mask + 1);
        // SAFETY: the mapping holds the producer page and then the data
        // pages twice, so `page..page + data_len` is inside it; the kernel
        // writes only records past the consumer position, which `walk`
        // reads only once committed.
        let data =
            unsafe { std::slice::from_raw_parts(self.producer.as_ptr().add(self.page), data_len) };
        let pos = walk(data, self.mask, self.pos, end, each);
        if pos != self.pos {
            // Release: the kernel may reuse the space once it sees this.
            self.consumer_pos().store(pos, Ordering::Release);
            self.pos = pos;
        }
    }

    #[expect(clippy::cast_ptr_alignment, reason = "a mapping is page-aligned")]
    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the page starts with the kernel's `unsigned long
        // consumer_pos`, page-aligned, and lives as long as `self`.
        unsafe { &*self.consumer.as_ptr().cast::<AtomicUsize>() }
    }

    #[expect(clippy::cast_ptr_alignment, reason = "a mapping is page-aligned")]
    fn producer_pos(&self) -> &AtomicUsize {
        // SAFETY: as for the consumer position, in the producer's page.
        unsafe { &*self.producer.as_ptr().cast::<AtomicUsize>() }
    }
}

/// Hands `each` the committed records from `pos` up to `end` (positions
/// grow without wrapping; `mask` maps them into `data`, which holds the
/// data pages twice) and returns where it stopped: `end`, or the first
/// record still busy.
#[expect(
    clippy::cast_ptr_alignment,
    reason = "records are 8-byte aligned in a page-aligned mapping"
)]
fn walk(
    data: &[u8],
    mask: usize,
    mut pos: usize,
    end: usize,
    each: &mut dyn FnMut(&[u8]),
) -> usize {
    while pos < end {
        let at = pos & mask;
        let Some(header) = data.get(at..at + HEADER_BYTES) else {
            break;
        };
        // SAFETY: 4 bytes inside `data`, 8-byte aligned (records are, and
        // the mapping is page-aligned); the kernel writes the header
        // atomically.
        let header = unsafe { &*header.as_ptr().cast::<AtomicU32>() }.load(Ordering::Acquire);
        if header & BUSY_BIT != 0 {
            break;
        }
        let len = (header & !(BUSY_BIT | DISCARD_BIT)) as usize;
        if header & DISCARD_BIT == 0 {
            let start = at + HEADER_BYTES;
            match data.get(start..start + len) {
                Some(record) => each(record),
                None => break,
            }
        }
        pos += (HEADER_BYTES + len).next_multiple_of(8);
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring's data (`size` bytes) mapped twice, as the kernel maps it,
    /// with records written from position `from`.
    struct Fake {
        data: Vec<u64>,
        size: usize,
        end: usize,
    }

    impl Fake {
        fn new(size: usize, from: usize) -> Fake {
            Fake {
                data: vec![0; 2 * size / 8],
                size,
                end: from,
            }
        }

        fn push(&mut self, flags: u32, payload: &[u8]) {
            let header = (payload.len() as u32 | flags).to_le_bytes();
            let mut record = header.to_vec();
            record.extend_from_slice(&[0; 4]);
            record.extend_from_slice(payload);
            record.resize(record.len().next_multiple_of(8), 0);
            for (i, &byte) in record.iter().enumerate() {
                let at = (self.end + i) % self.size;
                for copy in [at, at + self.size] {
                    bytemuck::cast_slice_mut::<u64, u8>(&mut self.data)[copy] = byte;
                }
            }
            self.end += record.len();
        }

        fn walk(&self, from: usize) -> (Vec<Vec<u8>>, usize) {
            let mut seen = Vec::new();
            let bytes = bytemuck::cast_slice::<u64, u8>(&self.data);
            let pos = walk(bytes, self.size - 1, from, self.end, &mut |r| {
                seen.push(r.to_vec());
            });
            (seen, pos)
        }
    }

    #[test]
    fn hands_over_committed_records_and_skips_discarded_ones() {
        let mut ring = Fake::new(64, 0);
        ring.push(0, b"one");
        ring.push(DISCARD_BIT, b"dropped");
        ring.push(0, b"two-two");
        let (seen, pos) = ring.walk(0);
        assert_eq!(seen, [b"one".to_vec(), b"two-two".to_vec()]);
        assert_eq!(pos, ring.end);
    }

    /// A record still being written stops the drain there, so the next
    /// drain hands over it and what follows, in order.
    #[test]
    fn stops_at_a_record_still_being_written() {
        let mut ring = Fake::new(64, 0);
        ring.push(0, b"a");
        let busy_at = ring.end;
        ring.push(BUSY_BIT, b"bb");
        ring.push(0, b"c");
        let (seen, pos) = ring.walk(0);
        assert_eq!((seen, pos), (vec![b"a".to_vec()], busy_at));
    }

    /// A record that wraps past the end of the data reads whole from the
    /// second mapping.
    #[test]
    fn reads_a_record_that_wraps_around_whole() {
        let mut ring = Fake::new(64, 48);
        ring.push(0, b"wrapping-around");
        ring.push(0, b"next");
        let (seen, pos) = ring.walk(48);
        assert_eq!(seen, [b"wrapping-around".to_vec(), b"next".to_vec()]);
        assert_eq!(pos, 48 + 24 + 16);
    }
}

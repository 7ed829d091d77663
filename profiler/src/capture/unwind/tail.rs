//! A thread's last walk, for its next walk to finish with.
//!
//! Two copies of one thread's stack taken a few milliseconds apart differ
//! near the leaf and agree below it: the interpreter's frames, the worker
//! loop, `main`, `_start`. A walk step is a function of the frame's
//! registers (ip, sp, bp), whether it is the leaf, the words it reads from
//! the stack and the process's mappings (their [`AddressSpaces::stamp`]).
//! So where a walk stands at a frame whose registers a frame of the
//! thread's last walk had, and every word the last walk read from that
//! frame on holds the same value in this copy (or is again past its end),
//! the rest of this walk is the rest of that one: its frames, where it
//! read their return addresses, and how it ended. On the real job that is
//! most of each stack, and the rule lookups framehop would do for it
//! (a quarter of the writer thread's time) are not done.
//!
//! [`AddressSpaces::stamp`]: super::AddressSpaces::stamp

use super::End;

/// One frame's registers as a walk stood at it: ip, sp, bp.
pub(super) type FrameRegs = [u64; 3];

/// A walk as it goes, kept as its thread's last once it ends.
#[derive(Debug, Default)]
pub(super) struct Trail {
    /// The stamp of the process's mappings it was walked with.
    pub(super) stamp: u64,
    /// Each frame's registers, one per address (ordered by sp, which each
    /// step grows).
    pub(super) regs: Vec<FrameRegs>,
    /// The leaf's instruction pointer, then each caller's return address.
    pub(super) addrs: Vec<u64>,
    /// Where each caller's return address was read (`addrs[1..]`).
    pub(super) slots: Vec<u64>,
    /// Every word the walk read, in order: (address, the value, or None
    /// where it could not be read).
    pub(super) reads: Vec<(u64, Option<u64>)>,
    /// Where in `reads` the step from each frame began (one per frame).
    pub(super) starts: Vec<usize>,
    pub(super) end: Option<End>,
    /// The last step found a return address in no known mapping.
    pub(super) end_unknown: bool,
}

impl Trail {
    /// Starts a walk from the leaf `regs`, under mappings `stamp`, in this
    /// trail's vectors, which keep their capacity (every field named, so
    /// that a new one cannot be left over from the last walk).
    pub(super) fn restart(&mut self, stamp: u64, leaf: FrameRegs) {
        let Trail {
            stamp: at,
            regs,
            addrs,
            slots,
            reads,
            starts,
            end,
            end_unknown,
        } = self;
        *at = stamp;
        regs.clear();
        regs.push(leaf);
        addrs.clear();
        addrs.push(leaf[0]);
        slots.clear();
        reads.clear();
        starts.clear();
        *end = None;
        *end_unknown = false;
    }

    /// A step to a caller at `ra`, whose return address lay at `slot`,
    /// leaving the walk at registers `regs`.
    pub(super) fn push(&mut self, ra: u64, slot: u64, regs: FrameRegs) {
        self.addrs.push(ra);
        self.slots.push(slot);
        self.regs.push(regs);
    }

    /// Where the words this walk read begin to be the same in another
    /// copy (`read`): every read from the index returned on finds the
    /// value it found. Scanned from the outermost frame in, once per walk.
    pub(super) fn same_reads_from(&self, read: impl Fn(u64) -> Option<u64>) -> usize {
        let differs = self
            .reads
            .iter()
            .rposition(|&(addr, value)| read(addr) != value);
        differs.map_or(0, |i| i + 1)
    }

    /// The frame of this (ended) walk the walk standing at `at` can finish
    /// with: one at the same registers, a leaf if and only if `at` is,
    /// from whose step on every word this walk read is the same in the
    /// other copy (`same_from`, from [`Trail::same_reads_from`]); None when
    /// there is none, or this walk's end depended on its depth.
    pub(super) fn meeting(&self, at: FrameRegs, leaf: bool, same_from: usize) -> Option<usize> {
        if self.end == Some(End::TooDeep) || self.end.is_none() {
            return None;
        }
        let j = self.regs.partition_point(|r| r[1] < at[1]);
        let same = self.regs.get(j) == Some(&at) && (j == 0) == leaf;
        (same && *self.starts.get(j)? >= same_from).then_some(j)
    }

    /// Finishes this walk, standing at its last frame, with `last`'s from
    /// its frame `j` (the same registers) on.
    pub(super) fn finish_with(&mut self, last: &Trail, j: usize) {
        let base = self.reads.len();
        let from = last.starts[j];
        self.starts
            .extend(last.starts[j..].iter().map(|s| s - from + base));
        self.reads.extend_from_slice(&last.reads[from..]);
        self.addrs.extend_from_slice(&last.addrs[j + 1..]);
        self.slots.extend_from_slice(&last.slots[j..]);
        self.regs.extend_from_slice(&last.regs[j + 1..]);
        self.end = last.end;
        self.end_unknown = last.end_unknown;
    }
}

//! What the recording lost, counted from every place a loss happens: the
//! kernel's `LOST` slots (full ring buffers and maps, lost and cut stacks,
//! recursion misses), the targets' tasks the full tracked maps refused at
//! attach (the tracker's count), the stacks the resolve stage could not
//! read or unwind whole ([`StackCounts`]), and the entries of things in
//! flight dropped because their end will not come ([`Expired`]).
//!
//! The LOST record is written when the sum changes (once a second at
//! most) and once more at the end, with the kernel's counts read right
//! after the last drain: programs skipped after it (tprof's own map reads
//! and detach threads make the kernel skip some) lose nothing of the
//! recording.

use std::time::Duration;

use anyhow::Result;
use tprof_core::recording::{LostCounts, record};

use super::pipeline::Pipeline;
use super::programs::{Expired, KernelPrograms};
use super::stacks::StackCounts;

/// The counts that are not the kernel's, and the last LOST record written.
pub(super) struct Losses {
    /// Entries of the maps of things in flight dropped so far because
    /// their end will not come.
    expired: Expired,
    /// How old a request, bio or CUDA call in flight may get
    /// (`MapLimits`).
    expiry: Duration,
    /// What the last LOST record said.
    written: LostCounts,
}

impl Losses {
    pub(super) fn new(expiry: Duration) -> Losses {
        Losses {
            expired: Expired::default(),
            expiry,
            written: LostCounts::default(),
        }
    }

    /// What the last LOST record said (the status line's count).
    pub(super) fn written(&self) -> &LostCounts {
        &self.written
    }

    /// Drops (and counts) the entries of requests, bios and CUDA calls
    /// whose end will not come.
    pub(super) fn expire(&mut self, programs: &mut KernelPrograms) {
        let expired = programs.expire_in_flight(self.expiry);
        self.expired.add(expired);
    }

    /// The kernel's counts plus the others: what a LOST record says (the
    /// last one with the kernel's counts of the last drain).
    pub(super) fn total(
        &self,
        mut kernel: LostCounts,
        untracked: u64,
        stacks: StackCounts,
    ) -> LostCounts {
        kernel.tracking_full += untracked;
        stacks.add_to(&mut kernel);
        self.expired.count_in(&mut kernel);
        kernel
    }

    /// At the stop: also the block requests of threads that have exited,
    /// whose completion will not come now.
    pub(super) fn expire_at_stop(&mut self, programs: &mut KernelPrograms) {
        self.expire(programs);
        let orphaned = programs.orphaned_requests();
        self.expired.add(orphaned);
    }

    /// Writes the LOST record if the counts changed since the last one.
    pub(super) fn refresh(
        &mut self,
        programs: &KernelPrograms,
        untracked: u64,
        out: &mut Pipeline,
    ) -> Result<()> {
        let lost = self.total(programs.lost_counts()?, untracked, out.stack_counts());
        if lost != self.written {
            out.write_json(record::LOST, &lost)?;
            self.written = lost;
        }
        Ok(())
    }
}

//! Block IO: every request's queue and service time on every device (device
//! statistics are machine-wide, as iostat's are), and the tracked thread
//! that submitted it.
//!
//! A request is keyed by (device, first sector) from insert/issue to
//! completion. The submitter is seen at block_bio_queue, in its own context,
//! and keyed by sector alone: a bio's sector is the request's first sector
//! when the request starts with it, which is the case for the reads and
//! writes a thread waits on (block_split carries the owner over to the
//! second half of a split bio). Both maps are LRU, so requests that merge away
//! or began before tracing cannot fill them.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, tracepoint},
    maps::LruHashMap,
    programs::TracePointContext,
};
use profiler_ebpf::{
    BlockIoEvent, MAX_BIO_OWNERS, MAX_REQUESTS, RWBS_LEN, RequestKey, RequestTimes,
};

use super::{emit, header, is_tracked_process, offsets};

/// Requests in flight: (dev, sector) → times.
#[map]
static REQUESTS: LruHashMap<RequestKey, RequestTimes> =
    LruHashMap::with_max_entries(MAX_REQUESTS, 0);

/// Submitter of a tracked bio: sector → bpf_get_current_pid_tgid().
#[map]
static BIO_OWNERS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(MAX_BIO_OWNERS, 0);

#[tracepoint]
pub fn tprof_bio_queue(ctx: TracePointContext) -> u32 {
    let _ = try_bio_queue(&ctx);
    0
}

fn try_bio_queue(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_tracked_process((pid_tgid >> 32) as u32) {
        return Ok(());
    }
    let sector = unsafe { ctx.read_at::<u64>(offsets().bio_sector as usize)? };
    BIO_OWNERS.insert(&sector, &pid_tgid, 0)
}

/// A tracked bio split in two: the second part, resubmitted without a
/// block_bio_queue, has the same submitter.
#[tracepoint]
pub fn tprof_bio_split(ctx: TracePointContext) -> u32 {
    let _ = try_bio_split(&ctx);
    0
}

fn try_bio_split(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let sector = unsafe { ctx.read_at::<u64>(off.split_sector as usize)? };
    let Some(owner) = (unsafe { BIO_OWNERS.get(&sector) }).copied() else {
        return Ok(());
    };
    let new_sector = unsafe { ctx.read_at::<u64>(off.split_new_sector as usize)? };
    BIO_OWNERS.insert(&new_sector, &owner, 0)
}

fn request_key(ctx: &TracePointContext, dev_off: u16, sector_off: u16) -> Result<RequestKey, i32> {
    Ok(RequestKey {
        sector: unsafe { ctx.read_at::<u64>(sector_off as usize)? },
        dev: unsafe { ctx.read_at::<u32>(dev_off as usize)? },
        _pad: 0,
    })
}

/// The request joined a scheduler queue: its wait starts here.
#[tracepoint]
pub fn tprof_rq_insert(ctx: TracePointContext) -> u32 {
    let _ = try_rq_insert(&ctx);
    0
}

/// A request inserted from a tracked thread's context (a plug flush in the
/// submitter), or issued directly without an insert, belongs to that thread
/// when no bio said so: the backstop for bios whose queueing or splitting
/// the tracepoints missed. An issue after an insert proves nothing: a
/// thread that runs the queue dispatches other processes' requests too.
fn claim_for_current(sector: u64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_tracked_process((pid_tgid >> 32) as u32) && unsafe { BIO_OWNERS.get(&sector) }.is_none() {
        let _ = BIO_OWNERS.insert(&sector, &pid_tgid, 0);
    }
}

fn try_rq_insert(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let key = request_key(ctx, off.rq_dev, off.rq_sector)?;
    claim_for_current(key.sector);
    let times = RequestTimes {
        start_ns: unsafe { bpf_ktime_get_ns() },
        issue_ns: 0,
    };
    REQUESTS.insert(&key, &times, 0)
}

/// The driver got the request (with no scheduler queue, this is its start).
#[tracepoint]
pub fn tprof_rq_issue(ctx: TracePointContext) -> u32 {
    let _ = try_rq_issue(&ctx);
    0
}

fn try_rq_issue(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let key = request_key(ctx, off.rq_dev, off.rq_sector)?;
    let now = unsafe { bpf_ktime_get_ns() };
    match REQUESTS.get_ptr_mut(&key) {
        Some(times) => unsafe { (*times).issue_ns = now },
        None => {
            claim_for_current(key.sector);
            let times = RequestTimes {
                start_ns: now,
                issue_ns: now,
            };
            REQUESTS.insert(&key, &times, 0)?;
        }
    }
    Ok(())
}

#[tracepoint]
pub fn tprof_rq_complete(ctx: TracePointContext) -> u32 {
    let _ = try_rq_complete(&ctx);
    0
}

fn try_rq_complete(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let key = request_key(ctx, off.complete_dev, off.complete_sector)?;
    let times = unsafe { REQUESTS.get(&key) }.copied().unwrap_or_default();
    let _ = REQUESTS.remove(&key);
    let owner = unsafe { BIO_OWNERS.get(&key.sector) }.copied().unwrap_or(0);
    if owner != 0 {
        let _ = BIO_OWNERS.remove(&key.sector);
    }
    emit(BlockIoEvent {
        hdr: header::<BlockIoEvent>(),
        start_ns: times.start_ns,
        issue_ns: times.issue_ns,
        sector: key.sector,
        dev: key.dev,
        nr_sector: unsafe { ctx.read_at::<u32>(off.complete_nr_sector as usize)? },
        tid: owner as u32,
        tgid: (owner >> 32) as u32,
        error: unsafe { ctx.read_at::<i32>(off.complete_error as usize)? },
        _pad: 0,
        rwbs: unsafe { ctx.read_at::<[u8; RWBS_LEN]>(off.complete_rwbs as usize)? },
    });
    Ok(())
}

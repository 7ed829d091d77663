//! Block IO: every request's queue and service time on every device (device
//! statistics are machine-wide, as iostat's are), and the tracked thread
//! that submitted it.
//!
//! A request is keyed by (device, first sector) from insert/issue to
//! completion in `REQUESTS`. The submitter is seen at block_bio_queue, in
//! its own context, and kept in `BIO_OWNERS` under the bio's (device,
//! sector) until the request the bio starts is created: then the request
//! takes the owner with it (block_split carries the owner over to the
//! second half of a split bio). A bio merged onto the back of a request
//! starts none, so its entry goes at the merge; one merged onto the front
//! becomes the request's first sector, so the request's entries move to it.
//!
//! Both maps are plain preallocated hashes, not LRU maps: an LRU map
//! evicts its oldest entry when full and says nothing, so a lost start or
//! owner would go uncounted. Here a full map refuses the entry and the
//! refusal is counted (`lost_map`); entries whose completion never comes
//! (a stacked device's upper bio, a request whose completion the kernel did
//! not trace) are expired by userspace after a minute, and counted too.
//!
//! Programs: `tprof_bio_queue` (tracked process: records the owner),
//! `tprof_bio_split` (owner known: copies it to the second half's sector),
//! `tprof_bio_backmerge` (tracked process: drops the bio's owner),
//! `tprof_bio_frontmerge` (every device: moves the request's entries to the
//! new first sector), `tprof_rq_insert` and `tprof_rq_issue` (every device:
//! time the request with the owner from `BIO_OWNERS`; an insert, or an issue
//! without an insert, from a tracked thread claims an unowned request) and
//! `tprof_rqdone_r` (every device: a `BlockIoEvent` for every completion,
//! with its owner if any; a raw tracepoint, where the kernel's BTF gives the
//! request's offsets, else the classic `tprof_rq_complete`).

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{map, raw_tracepoint, tracepoint},
    maps::HashMap,
    programs::{RawTracePointContext, TracePointContext},
};
use profiler_ebpf::{
    BioOwner, BlockIoEvent, MAX_BIO_OWNERS, MAX_REQUESTS, RWBS_LEN, RequestKey, RequestOffsets,
    RequestTimes, errno, lost_map,
};

use super::{count_lost, emit, header, is_tracked_process, offsets};

/// Requests in flight: (dev, sector) → times and owner.
#[map]
static REQUESTS: HashMap<RequestKey, RequestTimes> = HashMap::with_max_entries(MAX_REQUESTS, 0);

/// Submitters of tracked bios not yet in a request: (dev, sector) → owner.
#[map]
static BIO_OWNERS: HashMap<RequestKey, BioOwner> = HashMap::with_max_entries(MAX_BIO_OWNERS, 0);

#[inline(always)]
fn key(dev: u32, sector: u64) -> RequestKey {
    RequestKey {
        sector,
        dev,
        _pad: 0,
    }
}

/// Keeps the owner of a bio, counting a full map.
#[inline(always)]
fn set_owner(key: &RequestKey, owner: &BioOwner) {
    if BIO_OWNERS.insert(key, owner, 0).is_err() {
        count_lost(lost_map::BIO_OWNERS_FULL);
    }
}

/// Keeps a request's times, counting a full map.
#[inline(always)]
fn set_request(key: &RequestKey, times: &RequestTimes) {
    if REQUESTS.insert(key, times, 0).is_err() {
        count_lost(lost_map::REQUESTS_FULL);
    }
}

#[tracepoint]
pub(crate) fn tprof_bio_queue(ctx: TracePointContext) -> u32 {
    let _ = try_bio_queue(&ctx);
    0
}

fn try_bio_queue(ctx: &TracePointContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_tracked_process((pid_tgid >> 32) as u32) {
        return Ok(());
    }
    let off = offsets();
    let key = key(
        unsafe { ctx.read_at::<u32>(off.bio_dev as usize)? },
        unsafe { ctx.read_at::<u64>(off.bio_sector as usize)? },
    );
    let owner = BioOwner {
        pid_tgid,
        ts_ns: unsafe { bpf_ktime_get_ns() },
    };
    set_owner(&key, &owner);
    Ok(())
}

/// A tracked bio split in two: the second part, resubmitted without a
/// block_bio_queue, has the same submitter.
#[tracepoint]
pub(crate) fn tprof_bio_split(ctx: TracePointContext) -> u32 {
    let _ = try_bio_split(&ctx);
    0
}

fn try_bio_split(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let dev = unsafe { ctx.read_at::<u32>(off.split_dev as usize)? };
    let sector = unsafe { ctx.read_at::<u64>(off.split_sector as usize)? };
    let Some(owner) = (unsafe { BIO_OWNERS.get(&key(dev, sector)) }).copied() else {
        return Ok(());
    };
    let new_sector = unsafe { ctx.read_at::<u64>(off.split_new_sector as usize)? };
    set_owner(&key(dev, new_sector), &owner);
    Ok(())
}

/// A tracked bio merged onto the back of a request: it starts no request,
/// so nothing will claim its owner entry. Runs in the submitter's context.
#[tracepoint]
pub(crate) fn tprof_bio_backmerge(ctx: TracePointContext) -> u32 {
    let _ = try_bio_backmerge(&ctx);
    0
}

fn try_bio_backmerge(ctx: &TracePointContext) -> Result<(), i32> {
    if !is_tracked_process((bpf_get_current_pid_tgid() >> 32) as u32) {
        return Ok(());
    }
    let off = offsets();
    let dev = unsafe { ctx.read_at::<u32>(off.bio_dev as usize)? };
    let sector = unsafe { ctx.read_at::<u64>(off.bio_sector as usize)? };
    let _ = BIO_OWNERS.remove(&key(dev, sector));
    Ok(())
}

/// Any bio merged onto the front of a request: the request now starts at
/// the bio's sector, which its completion will carry, so what is kept
/// under its old first sector (the end of the bio) moves there: its times
/// if it was already inserted, else its first bio's owner. Every device, as
/// `REQUESTS` is; front merges are rare.
#[tracepoint]
pub(crate) fn tprof_bio_frontmerge(ctx: TracePointContext) -> u32 {
    let _ = try_bio_frontmerge(&ctx);
    0
}

fn try_bio_frontmerge(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let dev = unsafe { ctx.read_at::<u32>(off.bio_dev as usize)? };
    let sector = unsafe { ctx.read_at::<u64>(off.bio_sector as usize)? };
    let nr_sector = unsafe { ctx.read_at::<u32>(off.bio_nr_sector as usize)? };
    let old = key(dev, sector + u64::from(nr_sector));
    let new = key(dev, sector);
    if let Some(times) = (unsafe { REQUESTS.get(&old) }).copied() {
        let _ = REQUESTS.remove(&old);
        set_request(&new, &times);
    } else if let Some(owner) = (unsafe { BIO_OWNERS.get(&old) }).copied() {
        let _ = BIO_OWNERS.remove(&old);
        // The merged bio's own owner, if tracked, is already there.
        if unsafe { BIO_OWNERS.get(&new) }.is_none() {
            set_owner(&new, &owner);
        }
    }
    Ok(())
}

fn request_key(ctx: &TracePointContext, dev_off: u16, sector_off: u16) -> Result<RequestKey, i32> {
    Ok(key(
        unsafe { ctx.read_at::<u32>(dev_off as usize)? },
        unsafe { ctx.read_at::<u64>(sector_off as usize)? },
    ))
}

/// The owner of a request being created: the submitter of the bio it
/// starts (its entry is taken), else, as a backstop for bios whose queueing
/// or splitting the tracepoints missed, the current thread when it is
/// tracked and the request is created in its context (a plug flush, or an
/// issue without an insert). An issue after an insert proves nothing: a
/// thread that runs the queue dispatches other processes' requests too.
#[inline(always)]
fn claim_owner(key: &RequestKey) -> u64 {
    if let Some(owner) = (unsafe { BIO_OWNERS.get(key) }).copied() {
        let _ = BIO_OWNERS.remove(key);
        return owner.pid_tgid;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_tracked_process((pid_tgid >> 32) as u32) {
        pid_tgid
    } else {
        0
    }
}

/// The request joined a scheduler queue: its wait starts here.
#[tracepoint]
pub(crate) fn tprof_rq_insert(ctx: TracePointContext) -> u32 {
    let _ = try_rq_insert(&ctx);
    0
}

fn try_rq_insert(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let key = request_key(ctx, off.rq_dev, off.rq_sector)?;
    let times = RequestTimes {
        start_ns: unsafe { bpf_ktime_get_ns() },
        issue_ns: 0,
        owner: claim_owner(&key),
    };
    set_request(&key, &times);
    Ok(())
}

/// The driver got the request (with no scheduler queue, this is its start).
#[tracepoint]
pub(crate) fn tprof_rq_issue(ctx: TracePointContext) -> u32 {
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
            let times = RequestTimes {
                start_ns: now,
                issue_ns: now,
                owner: claim_owner(&key),
            };
            set_request(&key, &times);
        }
    }
    Ok(())
}

/// Classic `block/block_rq_complete`: used where the raw program below
/// cannot be (no BTF).
#[tracepoint]
pub(crate) fn tprof_rq_complete(ctx: TracePointContext) -> u32 {
    let _ = try_rq_complete(&ctx);
    0
}

fn try_rq_complete(ctx: &TracePointContext) -> Result<(), i32> {
    let off = offsets();
    let key = request_key(ctx, off.complete_dev, off.complete_sector)?;
    complete(
        key,
        unsafe { ctx.read_at::<u32>(off.complete_nr_sector as usize)? },
        unsafe { ctx.read_at::<i32>(off.complete_error as usize)? },
        unsafe { ctx.read_at::<[u8; RWBS_LEN]>(off.complete_rwbs as usize)? },
    );
    Ok(())
}

/// Raw `block_rq_complete(struct request *rq, blk_status_t error,
/// unsigned int nr_bytes)`. A completion runs in an interrupt on top of
/// whatever the CPU was doing; the classic tracepoint's program is skipped
/// when that was another BPF program of a classic tracepoint or kprobe (the
/// kernel's per-CPU `bpf_prog_active`, counted as a recursion miss), and,
/// on the development VMs' kernel, without a count when it was the
/// sandbox's own process (its perf record buffer refused): one to four of
/// 64 one-MiB reads in a run. A raw tracepoint guards only against itself.
#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub(crate) fn tprof_rqdone_r(ctx: RawTracePointContext) -> u32 {
    let _ = try_rq_complete_raw(&ctx);
    0
}

fn try_rq_complete_raw(ctx: &RawTracePointContext) -> Result<(), i32> {
    let off = request_offsets();
    let rq: u64 = ctx.arg(0);
    let status: u64 = ctx.arg(1);
    let nr_bytes: u64 = ctx.arg(2);
    let q: u64 = read(rq + u64::from(off.rq_q))?;
    let disk: u64 = read(q + u64::from(off.q_disk))?;
    // dev_t as the tracepoint records it: major << 20 | minor.
    let dev = if disk == 0 {
        0
    } else {
        let major: i32 = read(disk + u64::from(off.disk_major))?;
        let minor: i32 = read(disk + u64::from(off.disk_first_minor))?;
        ((major as u32) << 20) | minor as u32
    };
    let sector: u64 = read(rq + u64::from(off.rq_sector))?;
    let flags: u32 = read(rq + u64::from(off.rq_cmd_flags))?;
    // blk_status_t's numbering changed between kernels: a failure is
    // recorded as EIO, not as the errno the classic tracepoint maps it to.
    let error = if status as u8 == 0 { 0 } else { -errno::EIO };
    complete(
        key(dev, sector),
        (nr_bytes >> 9) as u32,
        error,
        rwbs_of(flags),
    );
    Ok(())
}

#[inline(always)]
fn read<T>(addr: u64) -> Result<T, i32> {
    unsafe { bpf_probe_read_kernel(addr as *const T) }.map_err(|e| e as i32)
}

/// The operation's letters as the kernel's `blk_fill_rwbs` writes them
/// first (`REQ_OP_*`, the low 8 bits of `cmd_flags`, numbered alike since
/// Linux 4.10); the flags after them (S, M, A, and a preflush's leading F)
/// are left out: the recording reads only the operation.
#[inline(always)]
fn rwbs_of(flags: u32) -> [u8; RWBS_LEN] {
    let mut rwbs = [0u8; RWBS_LEN];
    match flags & 0xff {
        0 => rwbs[0] = b'R',
        1 => rwbs[0] = b'W',
        2 => rwbs[0] = b'F',
        3 => rwbs[0] = b'D',
        5 => (rwbs[0], rwbs[1]) = (b'D', b'E'),
        _ => rwbs[0] = b'N',
    }
    rwbs
}

/// Both completion programs, once they have the request's fields: its
/// times and owner from `REQUESTS`, and its record.
#[inline(always)]
fn complete(key: RequestKey, nr_sector: u32, error: i32, rwbs: [u8; RWBS_LEN]) {
    let times = match unsafe { REQUESTS.get(&key) }.copied() {
        Some(times) => {
            let _ = REQUESTS.remove(&key);
            times
        }
        // Begun before tracing, or its entry was refused or expired: no
        // times, and the owner only if a bio of it is still waiting.
        None => RequestTimes {
            owner: match unsafe { BIO_OWNERS.get(&key) }.copied() {
                Some(owner) => {
                    let _ = BIO_OWNERS.remove(&key);
                    owner.pid_tgid
                }
                None => 0,
            },
            ..RequestTimes::default()
        },
    };
    emit(BlockIoEvent {
        hdr: header::<BlockIoEvent>(),
        start_ns: times.start_ns,
        issue_ns: times.issue_ns,
        sector: key.sector,
        dev: key.dev,
        nr_sector,
        tid: times.owner as u32,
        tgid: (times.owner >> 32) as u32,
        error,
        _pad: 0,
        rwbs,
    });
}

/// Where the raw completion program finds a request's fields; all zero
/// until userspace sets it from the kernel's BTF (and then only the raw
/// program, which reads it, is loaded).
#[unsafe(no_mangle)]
static REQUEST_OFFSETS: RequestOffsets = RequestOffsets {
    rq_q: 0,
    rq_sector: 0,
    rq_cmd_flags: 0,
    q_disk: 0,
    disk_major: 0,
    disk_first_minor: 0,
    _pad: [0; 2],
};

#[inline(always)]
fn request_offsets() -> RequestOffsets {
    unsafe { core::ptr::read_volatile(&REQUEST_OFFSETS) }
}

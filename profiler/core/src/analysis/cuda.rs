//! CUDA runtime statistics and diagnosis: how host-to-device copies were
//! made (from pinned or pageable memory, with or without a blocking sync
//! right after), how long they and the syncs held the trainer, and what the
//! GPU did meanwhile.
//!
//! A copy is *followed by a sync* when the next traced call of the same
//! thread is cudaStreamSynchronize on the copy's stream or
//! cudaDeviceSynchronize, starting within [`FOLLOW_WINDOW_NS`] of the
//! copy's return: PyTorch's `.to(device)` without `non_blocking=True` is
//! exactly cudaMemcpyAsync then cudaStreamSynchronize. cudaMemcpy is
//! synchronous by itself and counts as followed. A copy's *blocked* time is
//! its own call plus that sync.

use std::collections::BTreeMap;

use serde::Serialize;

use super::diagnosis::{FindingId, Severity};
use super::gpu::{IDLE_UTIL_PCT, periods};
use crate::model::{
    CudaCall, Model, ThreadState,
    cuda::{Direction, HostMemory},
};
use crate::recording::GpuMetric;
use profiler_ebpf::cuda_fn;

const NS: f64 = 1e9;

/// Longest gap between a copy's return and the start of a sync that still
/// makes the sync part of the copy (`.to(device)` issues both back to back;
/// a sync a millisecond later belongs to other work).
pub const FOLLOW_WINDOW_NS: u64 = 1_000_000;

/// A class of copies must be at least this share of the host-to-device
/// bytes for its finding: a stray scalar copy is not a pipeline problem.
const FINDING_MIN_BYTES_SHARE: f64 = 0.1;
/// A finding whose copies blocked the trainer for at least this share of its
/// life is `high`, else `medium`.
const HIGH_BLOCKED_SHARE: f64 = 0.05;

/// Host-to-device copies that succeeded.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct H2dCopies {
    pub count: u64,
    pub bytes: u64,
    /// From pageable memory (the driver stages these synchronously).
    pub pageable: u64,
    pub pageable_bytes: u64,
    /// From pinned memory.
    pub pinned: u64,
    pub pinned_bytes: u64,
    /// cudaMemcpy, or cudaMemcpyAsync followed by a blocking sync.
    pub followed_by_sync: u64,
    /// Pinned copies followed by a blocking sync: non_blocking=False.
    pub pinned_followed_by_sync: u64,
    /// Time the copies (and the syncs that followed them) blocked the
    /// calling threads.
    pub blocked_s: f64,
    pub pageable_blocked_s: f64,
    pub pinned_sync_blocked_s: f64,
}

/// The thread that made the host-to-device copies (the most of them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trainer {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Time in cudaStreamSynchronize / cudaDeviceSynchronize /
    /// cudaEventSynchronize, and how many.
    pub sync_s: f64,
    pub syncs: u64,
    /// Time blocked off CPU outside CUDA calls: waiting for data.
    pub data_wait_s: f64,
    /// GPU idle (NVML utilization <= 5 %) while the trainer sat in a sync,
    /// and while it waited for data; None without GPU utilization samples.
    pub gpu_idle_during_syncs_s: Option<f64>,
    pub gpu_idle_during_data_waits_s: Option<f64>,
}

/// A diagnosis about the CUDA copies, with its evidence and the fix to try.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CudaFinding {
    /// PageableCopies or SyncCopies.
    pub id: FindingId,
    /// High or Medium.
    pub severity: Severity,
    pub evidence: String,
    pub fix: String,
    /// The copies, bytes and blocked time behind it.
    pub copies: u64,
    pub bytes: u64,
    pub blocked_s: f64,
}

/// Everything the report says about CUDA.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CudaStats {
    /// A CUDA runtime library was found and probed.
    pub visible: bool,
    /// Why calls were not visible; None when they were.
    pub status: Option<String>,
    /// The first library probed.
    pub library: Option<String>,
    pub libraries: Vec<String>,
    /// Functions a probed library lacked, "library: function: why".
    pub missing: Vec<String>,
    /// Calls per function name (cudaLaunchKernel from the kernel's count).
    pub calls: BTreeMap<String, u64>,
    /// Calls that returned an error.
    pub failed_calls: u64,
    /// cudaLaunchKernel calls per second of the window.
    pub launches_per_s: f64,
    pub h2d: H2dCopies,
    pub trainer: Option<Trainer>,
    pub findings: Vec<CudaFinding>,
}

pub fn stats(model: &Model) -> CudaStats {
    let cuda = &model.cuda;
    if !cuda.visible() {
        let status = if let Some(status) = &cuda.status {
            status.clone()
        } else if !cuda.looked_for {
            "the recording holds no CUDA information (made by a tprof without CUDA tracing, \
             or cut short before any was written)"
                .to_string()
        } else if cuda.libraries.is_empty() {
            "no libcudart mapped by the job".to_string()
        } else {
            "libcudart found but none of its functions could be probed".to_string()
        };
        return CudaStats {
            status: Some(status),
            missing: missing(model),
            libraries: cuda.libraries.iter().map(|l| l.path.clone()).collect(),
            ..Default::default()
        };
    }
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for c in &cuda.calls {
        *calls.entry(c.name().to_string()).or_default() += 1;
    }
    let launches: u64 = cuda.launches.values().sum();
    if launches > 0 {
        calls.insert(cuda_fn::name(cuda_fn::LAUNCH_KERNEL).to_string(), launches);
    }
    let duration_s = model.duration_ns() as f64 / NS;
    let h2d = h2d_copies(&cuda.calls);
    let trainer = trainer(model);
    let findings = findings(&h2d, trainer.as_ref().map(|t| t.tid), model);
    CudaStats {
        visible: true,
        status: None,
        library: cuda
            .libraries
            .iter()
            .find(|l| !l.probed.is_empty())
            .map(|l| l.path.clone()),
        libraries: cuda.libraries.iter().map(|l| l.path.clone()).collect(),
        missing: missing(model),
        calls,
        failed_calls: cuda.calls.iter().filter(|c| !c.ok()).count() as u64,
        launches_per_s: if duration_s > 0.0 {
            launches as f64 / duration_s
        } else {
            0.0
        },
        h2d,
        trainer,
        findings,
    }
}

fn missing(model: &Model) -> Vec<String> {
    model
        .cuda
        .libraries
        .iter()
        .flat_map(|l| l.missing.iter().map(move |m| format!("{}: {m}", l.path)))
        .collect()
}

/// For each call, the sync that follows it in the same thread (see the
/// module's rule), if any; indexes into `calls`.
pub fn following_syncs(calls: &[CudaCall]) -> Vec<Option<usize>> {
    let mut next_of_thread: BTreeMap<u32, usize> = BTreeMap::new();
    let mut out = vec![None; calls.len()];
    // Walk backwards so each call meets its thread's next call.
    for (i, call) in calls.iter().enumerate().rev() {
        if let Some(&j) = next_of_thread.get(&call.tid) {
            let next = &calls[j];
            let stream = call.copy().and_then(|c| c.stream);
            let syncs_it = match next.op {
                crate::model::CudaOp::Sync { stream: Some(s) } => {
                    next.func == cuda_fn::STREAM_SYNCHRONIZE && Some(s) == stream
                }
                crate::model::CudaOp::Sync { stream: None } => {
                    next.func == cuda_fn::DEVICE_SYNCHRONIZE
                }
                _ => false,
            };
            if syncs_it && next.start_ns.saturating_sub(call.end_ns) <= FOLLOW_WINDOW_NS {
                out[i] = Some(j);
            }
        }
        next_of_thread.insert(call.tid, i);
    }
    out
}

fn h2d_copies(calls: &[CudaCall]) -> H2dCopies {
    let follows = following_syncs(calls);
    let mut h = H2dCopies::default();
    let mut blocked_ns = 0u64;
    let mut pageable_ns = 0u64;
    let mut pinned_sync_ns = 0u64;
    for (i, call) in calls.iter().enumerate() {
        let Some(copy) = call.copy() else { continue };
        if copy.direction != Direction::HostToDevice {
            continue;
        }
        let sync = follows[i].map(|j| &calls[j]);
        let followed = copy.stream.is_none() || sync.is_some();
        let blocked = call.duration_ns() + sync.map_or(0, CudaCall::duration_ns);
        h.count += 1;
        h.bytes += copy.bytes;
        blocked_ns += blocked;
        if followed {
            h.followed_by_sync += 1;
        }
        if let Some(HostMemory::Pinned) = copy.host {
            h.pinned += 1;
            h.pinned_bytes += copy.bytes;
            if followed {
                h.pinned_followed_by_sync += 1;
                pinned_sync_ns += blocked;
            }
        } else {
            h.pageable += 1;
            h.pageable_bytes += copy.bytes;
            pageable_ns += blocked;
        }
    }
    h.blocked_s = blocked_ns as f64 / NS;
    h.pageable_blocked_s = pageable_ns as f64 / NS;
    h.pinned_sync_blocked_s = pinned_sync_ns as f64 / NS;
    h
}

/// The thread with the most host-to-device copies (ties: the most time in
/// CUDA calls).
fn trainer(model: &Model) -> Option<Trainer> {
    let mut per_thread: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for c in &model.cuda.calls {
        let entry = per_thread.entry(c.tid).or_default();
        if c.copy()
            .is_some_and(|c| c.direction == Direction::HostToDevice)
        {
            entry.0 += 1;
        }
        entry.1 += c.duration_ns();
    }
    let (&tid, _) = per_thread
        .iter()
        .max_by_key(|(tid, v)| (**v, u32::MAX - **tid))?;
    let mine: Vec<&CudaCall> = model.cuda.calls.iter().filter(|c| c.tid == tid).collect();
    let syncs: Vec<(u64, u64)> = mine
        .iter()
        .filter(|c| c.is_sync())
        .map(|c| (c.start_ns, c.end_ns))
        .collect();
    let thread = model.threads.iter().rev().find(|t| t.tid == tid);
    // Blocked time outside any CUDA call: waiting for the next batch.
    let in_cuda: Vec<(u64, u64)> = mine.iter().map(|c| (c.start_ns, c.end_ns)).collect();
    let blocked: Vec<(u64, u64)> = thread
        .map(|t| {
            t.intervals
                .iter()
                .filter(|i| matches!(i.state, ThreadState::Sleeping | ThreadState::DiskSleep))
                .map(|i| (i.start_ns, i.end_ns))
                .collect()
        })
        .unwrap_or_default();
    let data_waits = subtract(&blocked, &in_cuda);
    let idle = gpu_idle(model);
    Some(Trainer {
        pid: mine.first().map_or(0, |c| c.tgid),
        tid,
        comm: thread.map(|t| t.comm.clone()).unwrap_or_default(),
        sync_s: total(&syncs) as f64 / NS,
        syncs: syncs.len() as u64,
        data_wait_s: total(&data_waits) as f64 / NS,
        gpu_idle_during_syncs_s: idle.as_ref().map(|idle| overlap(&syncs, idle) as f64 / NS),
        gpu_idle_during_data_waits_s: idle
            .as_ref()
            .map(|idle| overlap(&data_waits, idle) as f64 / NS),
    })
}

/// Stretches when every GPU with utilization samples was idle; None when
/// none has samples.
fn gpu_idle(model: &Model) -> Option<Vec<(u64, u64)>> {
    let window = (model.window_start_ns, model.window_end_ns);
    let mut result: Option<Vec<(u64, u64)>> = None;
    for gpu in &model.gpus.devices {
        let p = periods(gpu.series(GpuMetric::GpuUtilPct), window);
        if p.is_empty() {
            continue;
        }
        let idle = super::gpu::idle_intervals(&p, IDLE_UTIL_PCT);
        result = Some(match result {
            None => idle,
            Some(prev) => intersect(&prev, &idle),
        });
    }
    result
}

fn total(intervals: &[(u64, u64)]) -> u64 {
    intervals.iter().map(|(s, e)| e.saturating_sub(*s)).sum()
}

/// Sorted, non-overlapping copy of `intervals`.
fn normalize(intervals: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = intervals.iter().copied().filter(|(s, e)| e > s).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (a, b) = (normalize(a), normalize(b));
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s < e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    total(&intersect(a, b))
}

/// `a` minus `b`.
fn subtract(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let b = normalize(b);
    let mut out = Vec::new();
    for (mut s, e) in normalize(a) {
        for &(bs, be) in &b {
            if be <= s || bs >= e {
                continue;
            }
            if bs > s {
                out.push((s, bs));
            }
            s = s.max(be);
        }
        if s < e {
            out.push((s, e));
        }
    }
    out
}

fn findings(h: &H2dCopies, trainer_tid: Option<u32>, model: &Model) -> Vec<CudaFinding> {
    let mut out = Vec::new();
    if h.bytes == 0 {
        return out;
    }
    let lifetime_s = trainer_tid
        .and_then(|tid| model.threads.iter().rev().find(|t| t.tid == tid))
        .map_or(model.duration_ns(), crate::model::Thread::lifetime_ns) as f64
        / NS;
    let severity = |blocked_s: f64| {
        if lifetime_s > 0.0 && blocked_s / lifetime_s >= HIGH_BLOCKED_SHARE {
            Severity::High
        } else {
            Severity::Medium
        }
    };
    let share = |bytes: u64| bytes as f64 / h.bytes as f64;
    if h.pageable > 0 && share(h.pageable_bytes) >= FINDING_MIN_BYTES_SHARE {
        out.push(CudaFinding {
            id: FindingId::PageableCopies,
            severity: severity(h.pageable_blocked_s),
            evidence: format!(
                "{} of {} host-to-device copies ({} of {}) came from pageable memory; \
                 the driver stages them synchronously, so they blocked the caller for {:.3} s",
                h.pageable,
                h.count,
                human_bytes(h.pageable_bytes),
                human_bytes(h.bytes),
                h.pageable_blocked_s
            ),
            fix: "copies from pageable memory: pin_memory is off or ineffective. Set \
                  pin_memory=True in the DataLoader and copy the batch it pinned (a tensor \
                  made or changed after pinning is pageable again), with \
                  .to(device, non_blocking=True)"
                .to_string(),
            copies: h.pageable,
            bytes: h.pageable_bytes,
            blocked_s: h.pageable_blocked_s,
        });
    }
    if h.pinned_followed_by_sync > 0 && share(h.pinned_bytes) >= FINDING_MIN_BYTES_SHARE {
        out.push(CudaFinding {
            id: FindingId::SyncCopies,
            severity: severity(h.pinned_sync_blocked_s),
            evidence: format!(
                "{} of {} host-to-device copies from pinned memory were each followed by a \
                 blocking sync, which held the caller for {:.3} s",
                h.pinned_followed_by_sync, h.pinned, h.pinned_sync_blocked_s
            ),
            fix: "pinned copies followed by a blocking sync: add non_blocking=True to \
                  .to(device), so the copy overlaps the GPU's work instead of waiting for it"
                .to_string(),
            copies: h.pinned_followed_by_sync,
            bytes: h.pinned_bytes,
            blocked_s: h.pinned_sync_blocked_s,
        });
    }
    out
}

fn human_bytes(n: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if n as f64 >= MIB {
        format!("{:.1} MiB", n as f64 / MIB)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Cuda, Interval, Thread,
        cuda::{RawCall, build, memcpy_kind},
    };
    use crate::recording::{CudaInfo, CudaLibrary};

    const MS: u64 = 1_000_000;
    const STREAM: u64 = 2;

    /// Builds calls of thread 7 from (start_ms, end_ms, func, args, out_ptr).
    fn model(calls: &[(u64, u64, u32, [u64; 5], u64)], launches: u64) -> Model {
        let raw = calls
            .iter()
            .map(|&(s, e, func, args, out_ptr)| RawCall {
                tid: 7,
                tgid: 7,
                start_ns: s * MS,
                end_ns: e * MS,
                func,
                args,
                ret: 0,
                out_ptr,
            })
            .collect();
        let info = CudaInfo {
            libraries: vec![CudaLibrary {
                path: "/lib/libcudart.so.12".into(),
                probed: vec!["cudaMemcpyAsync".into()],
                ..Default::default()
            }],
            launches: [(7, launches)].into(),
            status: None,
        };
        let end = calls.iter().map(|c| c.1).max().unwrap_or(0) * MS + MS;
        Model {
            window_start_ns: 0,
            window_end_ns: end,
            threads: vec![Thread {
                tid: 7,
                pid: 7,
                comm: "python".into(),
                renamed_from: vec![],
                start_ns: 0,
                end_ns: end,
                exited: false,
                intervals: vec![Interval::new(0, end, ThreadState::Sleeping)].into(),
                voluntary_switches: 0,
                involuntary_switches: 0,
            }],
            cuda: build(Some(&info), raw),
            ..Default::default()
        }
    }

    fn h2d(s: u64, e: u64, src: u64) -> (u64, u64, u32, [u64; 5], u64) {
        (
            s,
            e,
            cuda_fn::MEMCPY_ASYNC,
            [0xd000, src, 1 << 20, memcpy_kind::HOST_TO_DEVICE, STREAM],
            0,
        )
    }

    fn sync(s: u64, e: u64, stream: u64) -> (u64, u64, u32, [u64; 5], u64) {
        (s, e, cuda_fn::STREAM_SYNCHRONIZE, [stream, 0, 0, 0, 0], 0)
    }

    const PIN: (u64, u64, u32, [u64; 5], u64) =
        (0, 1, cuda_fn::MALLOC_HOST, [0x10, 1 << 22, 0, 0, 0], 0x1000);

    fn ids(s: &CudaStats) -> Vec<&str> {
        s.findings.iter().map(|f| f.id.name()).collect()
    }

    #[test]
    fn pageable_copies_with_syncs_are_the_pageable_finding_only() {
        let m = model(&[h2d(10, 14, 0x9000), sync(14, 15, STREAM)], 20);
        let s = stats(&m);
        assert!(s.visible);
        assert_eq!(s.h2d.count, 1);
        assert_eq!(
            (s.h2d.pageable, s.h2d.pinned, s.h2d.followed_by_sync),
            (1, 0, 1)
        );
        assert!((s.h2d.blocked_s - 0.005).abs() < 1e-9);
        assert_eq!(ids(&s), vec!["pageable_copies"]);
        assert_eq!(s.calls["cudaLaunchKernel"], 20);
        assert_eq!(s.calls["cudaMemcpyAsync"], 1);
    }

    #[test]
    fn pinned_copies_with_syncs_are_the_sync_finding() {
        let m = model(&[PIN, h2d(10, 11, 0x1000), sync(11, 15, STREAM)], 0);
        let s = stats(&m);
        assert_eq!((s.h2d.pinned, s.h2d.pinned_followed_by_sync), (1, 1));
        assert!((s.h2d.blocked_s - 0.005).abs() < 1e-9);
        assert_eq!(ids(&s), vec!["sync_copies"]);
        let t = s.trainer.unwrap();
        assert_eq!((t.tid, t.syncs), (7, 1));
        assert!((t.sync_s - 0.004).abs() < 1e-9);
    }

    #[test]
    fn pinned_async_copies_need_no_finding() {
        // The sync comes later (after the forward pass): not the copy's.
        let m = model(&[PIN, h2d(10, 11, 0x1000), sync(30, 35, STREAM)], 0);
        let s = stats(&m);
        assert_eq!((s.h2d.pinned, s.h2d.followed_by_sync), (1, 0));
        assert!(s.findings.is_empty(), "{:?}", s.findings);
    }

    #[test]
    fn a_sync_of_another_stream_does_not_follow_a_copy() {
        let m = model(&[PIN, h2d(10, 11, 0x1000), sync(11, 15, 9)], 0);
        assert_eq!(stats(&m).h2d.followed_by_sync, 0);
    }

    #[test]
    fn trainer_data_waits_exclude_cuda_time() {
        let m = model(&[h2d(10, 14, 0x9000), sync(14, 15, STREAM)], 0);
        let t = stats(&m).trainer.unwrap();
        // Blocked all 16 ms; 5 of them inside CUDA calls.
        assert!((t.data_wait_s - 0.011).abs() < 1e-9, "{}", t.data_wait_s);
        assert_eq!(t.gpu_idle_during_syncs_s, None);
    }

    #[test]
    fn no_library_says_so() {
        let m = Model {
            cuda: Cuda {
                looked_for: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let s = stats(&m);
        assert!(!s.visible);
        assert_eq!(s.status.as_deref(), Some("no libcudart mapped by the job"));
    }

    #[test]
    fn tracing_off_says_so() {
        let info = CudaInfo {
            status: Some("CUDA tracing was off (--no-cuda)".into()),
            ..Default::default()
        };
        let m = Model {
            cuda: build(Some(&info), vec![]),
            ..Default::default()
        };
        let s = stats(&m);
        assert!(!s.visible);
        assert_eq!(
            s.status.as_deref(),
            Some("CUDA tracing was off (--no-cuda)")
        );
    }

    #[test]
    fn gpu_idle_is_split_between_syncs_and_data_waits() {
        use crate::model::{Gpu, Gpus};
        // Sync 10-15 ms, data wait (blocked outside CUDA) elsewhere; the GPU
        // is idle in 0-12 ms (samples each 2 ms: value for (t-2, t]).
        let mut m = model(&[h2d(10, 11, 0x9000), sync(11, 15, STREAM)], 0);
        let points = (1..=10)
            .map(|k| (2 * k * MS, if 2 * k <= 12 { 0 } else { 90 }))
            .collect();
        m.gpus = Gpus {
            status: None,
            devices: vec![Gpu {
                series: [((GpuMetric::GpuUtilPct, None), points)].into(),
                ..Default::default()
            }],
        };
        let t = stats(&m).trainer.unwrap();
        // Idle 0-12 ms: 1 ms of the 11-15 ms sync, and 10 ms of data waits.
        assert!((t.gpu_idle_during_syncs_s.unwrap() - 0.001).abs() < 1e-9);
        assert!((t.gpu_idle_during_data_waits_s.unwrap() - 0.010).abs() < 1e-9);
    }

    #[test]
    fn interval_arithmetic() {
        assert_eq!(
            subtract(&[(0, 10)], &[(2, 3), (5, 7)]),
            vec![(0, 2), (3, 5), (7, 10)]
        );
        assert_eq!(
            intersect(&[(0, 10), (20, 30)], &[(5, 25)]),
            vec![(5, 10), (20, 25)]
        );
        assert_eq!(overlap(&[(0, 10)], &[(10, 20)]), 0);
    }
}

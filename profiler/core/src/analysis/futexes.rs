//! The most contended futexes: waits grouped by process and address, with
//! the threads that woke the waiters.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::Model;

const NS: f64 = 1e9;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FutexStats {
    pub pid: u32,
    /// The futex word's address in the process.
    pub uaddr: u64,
    /// Distinct threads that waited on it.
    pub waiters: usize,
    pub waits: usize,
    pub wait_s: f64,
    /// Threads whose wakeups ended the waits, with how many each.
    pub wakers: Vec<Waker>,
    /// Waits that ended by timeout, signal or a changed value, not a wakeup.
    pub unwoken: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waker {
    pub pid: u32,
    pub tid: u32,
    pub wakes: usize,
}

/// Futexes by total wait, largest first.
pub fn futex_stats(model: &Model) -> Vec<FutexStats> {
    #[derive(Default)]
    struct Acc {
        waiters: BTreeSet<u32>,
        waits: usize,
        wait_ns: u64,
        wakers: BTreeMap<(u32, u32), usize>,
        unwoken: usize,
    }
    let mut by_addr: BTreeMap<(u32, u64), Acc> = BTreeMap::new();
    for w in &model.futex_waits {
        let acc = by_addr.entry((w.tgid, w.uaddr)).or_default();
        acc.waiters.insert(w.tid);
        acc.waits += 1;
        acc.wait_ns = acc.wait_ns.saturating_add(w.end_ns - w.start_ns);
        match w.waker {
            Some((tid, pid)) => *acc.wakers.entry((pid, tid)).or_default() += 1,
            None => acc.unwoken += 1,
        }
    }
    let mut out: Vec<FutexStats> = by_addr
        .into_iter()
        .map(|((pid, uaddr), acc)| {
            let mut wakers: Vec<Waker> = acc
                .wakers
                .into_iter()
                .map(|((pid, tid), wakes)| Waker { pid, tid, wakes })
                .collect();
            wakers.sort_by_key(|w| std::cmp::Reverse(w.wakes));
            FutexStats {
                pid,
                uaddr,
                waiters: acc.waiters.len(),
                waits: acc.waits,
                wait_s: acc.wait_ns as f64 / NS,
                wakers,
                unwoken: acc.unwoken,
            }
        })
        .collect();
    out.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s));
    out
}

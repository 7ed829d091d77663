//! The maps of things in flight: block requests (`REQUESTS`), tracked bios
//! waiting for their request (`BIO_OWNERS`) and CUDA calls in progress
//! (`CUDA_CALLS`). The kernel removes an entry when the thing ends; one
//! whose end never comes (a completion the kernel did not trace, a stacked
//! device's upper bio, a thread that died inside a call) would stay for
//! good and, over a long recording, fill the map. Userspace drops those
//! here, and counts them.

use std::time::Duration;

use anyhow::Result;
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use profiler_ebpf::{BioOwner, CudaEnter, RequestKey, RequestTimes, names::map};
use tprof_core::recording::LostCounts;

use super::object::take_map;
use crate::capture::{clock::monotonic_ns, procfs};

/// Entries dropped by one [`InFlight::expire`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub requests: u64,
    pub bio_owners: u64,
    /// CUDA calls whose thread is gone.
    pub cuda_calls: u64,
    /// Requests whose submitting thread had exited by the stop.
    pub orphaned_requests: u64,
}

impl Expired {
    pub fn add(&mut self, more: Expired) {
        self.requests += more.requests;
        self.bio_owners += more.bio_owners;
        self.cuda_calls += more.cuda_calls;
        self.orphaned_requests += more.orphaned_requests;
    }

    /// Counts these as lost: things in flight whose end never came.
    pub fn count_in(&self, lost: &mut LostCounts) {
        lost.requests_expired += self.requests;
        lost.bio_owners_expired += self.bio_owners;
        lost.cuda_calls_unreturned += self.cuda_calls;
        lost.requests_orphaned += self.orphaned_requests;
    }
}

pub(super) struct InFlight {
    requests: HashMap<MapData, RequestKey, RequestTimes>,
    bio_owners: HashMap<MapData, RequestKey, BioOwner>,
    /// (tid << 32 | function id) → the call's entry.
    cuda_calls: HashMap<MapData, u64, CudaEnter>,
}

impl InFlight {
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<InFlight> {
        Ok(InFlight {
            requests: HashMap::try_from(take_map(ebpf, map::REQUESTS)?)?,
            bio_owners: HashMap::try_from(take_map(ebpf, map::BIO_OWNERS)?)?,
            cuda_calls: HashMap::try_from(take_map(ebpf, map::CUDA_CALLS)?)?,
        })
    }

    /// Drops requests and bios in flight for longer than `expiry`, and the
    /// calls of CUDA threads that are gone. (A CUDA call can rightly block
    /// for minutes, in cudaDeviceSynchronize, so its age proves nothing.)
    pub(super) fn expire(&mut self, expiry: Duration) -> Expired {
        let before = monotonic_ns().saturating_sub(expiry.as_nanos() as u64);
        Expired {
            requests: drop_where(&mut self.requests, |_, times| times.start_ns < before),
            bio_owners: drop_where(&mut self.bio_owners, |_, owner| owner.ts_ns < before),
            cuda_calls: drop_where(&mut self.cuda_calls, |key, _| {
                !procfs::exists((key >> 32) as u32)
            }),
            orphaned_requests: 0,
        }
    }

    /// At the stop, after the programs are detached: drops the requests
    /// whose submitting thread has exited. A thread's synchronous read
    /// completes before the thread goes on, so such an entry is a
    /// completion the kernel ran no program for (the development VMs'
    /// kernel drops some without a count: 1 to 4 of the O_DIRECT test's
    /// 128 requests in 1 run in 8, docs/diagnosis.md), or, rarely, an
    /// asynchronous read (readahead) still in flight when its thread
    /// exited and the recording stopped. Either way its bytes and wait are
    /// missing from the recording, which says so.
    pub(super) fn orphaned_requests(&mut self) -> Expired {
        Expired {
            orphaned_requests: drop_where(&mut self.requests, |_, times| {
                times.owner != 0 && thread_gone(times.owner)
            }),
            ..Expired::default()
        }
    }
}

/// Removes the entries `drop` picks; how many went. A removal that fails
/// lost a race with the kernel, which removed the entry at the thing's
/// end: not counted.
fn drop_where<K: aya::Pod, V: aya::Pod>(
    map: &mut HashMap<MapData, K, V>,
    drop: impl Fn(&K, &V) -> bool,
) -> u64 {
    let keys: Vec<K> = entries(map)
        .filter(|(key, value)| drop(key, value))
        .map(|(key, _)| key)
        .collect();
    keys.iter().filter(|key| map.remove(key).is_ok()).count() as u64
}

/// Whether the thread of a `bpf_get_current_pid_tgid()` value has exited
/// (a zombie's threads included: they will run no more).
fn thread_gone(pid_tgid: u64) -> bool {
    procfs::task_stat((pid_tgid >> 32) as u32, pid_tgid as u32).is_none_or(|s| s.is_dead())
}

/// Every entry of a map. An entry the kernel removes between the listing
/// of its key and the read of its value reads as an error: skipped, it is
/// gone anyway.
fn entries<K: aya::Pod, V: aya::Pod>(
    map: &HashMap<MapData, K, V>,
) -> impl Iterator<Item = (K, V)> + '_ {
    map.iter().filter_map(Result::ok)
}

//! Who is who in the job: the trainer that consumes batches, the data
//! workers that produce them, the pin-memory thread between them, and the
//! thread pools inside all of them.
//!
//! The rules rest on what any framework leaves in the kernel's view: the
//! process tree (workers are descendants of the trainer's process), wakeup
//! edges (the trainer is the thread workers wake), and the libraries the
//! stacks run in (libgomp, libmkl, …). PyTorch's thread names
//! (`pt_data_worker`, `pt_data_pin`) only sharpen them.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::model::{Model, Thread};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The thread that consumes batches (normally the root process's main thread).
    Trainer,
    /// Moves batches from the workers into pinned memory for the trainer.
    PinMemory,
    /// A thread of a data-loading worker process.
    DataWorker,
    /// A thread of an OpenMP / MKL / OpenBLAS / OpenCV / TBB pool.
    Pool,
    Other,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Trainer => "trainer",
            Role::PinMemory => "pin_memory",
            Role::DataWorker => "data_worker",
            Role::Pool => "pool",
            Role::Other => "other",
        }
    }
}

/// Thread-name prefixes of well-known pools (lower case). Pool threads
/// often keep their creator's name, so stacks are checked too.
const POOL_NAME_PREFIXES: &[&str] = &["omp", "gomp", "openblas", "mkl", "tbb", "cv::", "opencv"];
/// Library basename prefixes whose code pool threads run.
const POOL_LIBRARIES: &[&str] = &[
    "libgomp",
    "libiomp",
    "libomp",
    "libmkl",
    "libopenblas",
    "libopencv",
    "libtbb",
];
/// Share of a thread's on-CPU samples in pool libraries that makes it a pool thread.
const POOL_SAMPLE_SHARE: f64 = 0.5;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Roles {
    pub by_tid: BTreeMap<u32, Role>,
    pub trainer: Option<u32>,
}

impl Roles {
    pub fn of(&self, tid: u32) -> Role {
        self.by_tid.get(&tid).copied().unwrap_or(Role::Other)
    }
}

pub fn classify(model: &Model) -> Roles {
    let pool_share = pool_sample_share(model);
    let mut by_tid = BTreeMap::new();
    for t in &model.threads {
        let role = if is_pool(t, &pool_share) {
            Role::Pool
        } else if t.comm == "pt_data_pin" {
            Role::PinMemory
        } else if t.comm == "pt_data_worker" || model.depth(t.pid) > 0 {
            Role::DataWorker
        } else {
            Role::Other
        };
        by_tid.insert(t.tid, role);
    }
    let trainer = find_trainer(model, &by_tid);
    if let Some(tid) = trainer {
        by_tid.insert(tid, Role::Trainer);
    }
    Roles { by_tid, trainer }
}

fn is_pool(t: &Thread, pool_share: &HashMap<u32, f64>) -> bool {
    let name = t.comm.to_ascii_lowercase();
    POOL_NAME_PREFIXES.iter().any(|p| name.starts_with(p))
        || pool_share
            .get(&t.tid)
            .is_some_and(|&s| s >= POOL_SAMPLE_SHARE)
}

/// Per tid, the share of its on-CPU samples whose leaf runs in a pool library.
fn pool_sample_share(model: &Model) -> HashMap<u32, f64> {
    let Some(table) = &model.stacks else {
        return HashMap::new();
    };
    let mut counts: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in table.samples.iter().filter(|s| s.kind.is_on_cpu()) {
        let leaf_in_pool = table
            .stacks
            .get(s.stack as usize)
            .and_then(|frames| frames.iter().rev().find(|&&f| !is_kernel(table, f)))
            .and_then(|&f| table.frames.get(f as usize))
            .is_some_and(|frame| {
                let base = frame.module.rsplit('/').next().unwrap_or_default();
                POOL_LIBRARIES.iter().any(|lib| base.starts_with(lib))
            });
        let entry = counts.entry(s.tid).or_default();
        // Weights come from the file: saturate rather than trust them.
        entry.1 = entry.1.saturating_add(s.weight);
        if leaf_in_pool {
            entry.0 = entry.0.saturating_add(s.weight);
        }
    }
    counts
        .into_iter()
        .filter(|(_, (_, total))| *total > 0)
        .map(|(tid, (pool, total))| (tid, pool as f64 / total as f64))
        .collect()
}

fn is_kernel(table: &crate::recording::StackTable, frame: u32) -> bool {
    table
        .frames
        .get(frame as usize)
        .is_some_and(crate::recording::Frame::is_kernel)
}

/// The thread of a target process that workers (or the pin thread) wake
/// most often while it waits; else the first target's main thread.
fn find_trainer(model: &Model, roles: &BTreeMap<u32, Role>) -> Option<u32> {
    let pid_of: HashMap<u32, u32> = model.threads.iter().map(|t| (t.tid, t.pid)).collect();
    let mut woken: HashMap<u32, usize> = HashMap::new();
    for w in &model.wakeups {
        let Some(&pid) = pid_of.get(&w.tid) else {
            continue;
        };
        let candidate = model.depth(pid) == 0
            && matches!(roles.get(&w.tid), Some(Role::Other))
            && matches!(
                roles.get(&w.waker_tid),
                Some(Role::DataWorker | Role::PinMemory)
            );
        if candidate {
            *woken.entry(w.tid).or_default() += 1;
        }
    }
    let most_woken = woken
        .into_iter()
        .max_by_key(|&(tid, n)| (n, std::cmp::Reverse(tid)))
        .map(|(tid, _)| tid);
    most_woken.or_else(|| {
        model
            .targets
            .iter()
            .find(|&&pid| model.threads.iter().any(|t| t.tid == pid))
            .copied()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Process, WakeEdge};
    use crate::recording::Origin;

    fn thread(tid: u32, pid: u32, comm: &str) -> Thread {
        Thread {
            tid,
            pid,
            comm: comm.into(),
            renamed_from: vec![],
            start_ns: 0,
            end_ns: 100,
            exited: false,
            intervals: Default::default(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        }
    }

    fn process(pid: u32, ppid: u32) -> Process {
        Process {
            pid,
            ppid,
            comm: "python".into(),
            cmdline: vec![],
            origin: Origin::Attached,
            start_ns: 0,
            exit_ns: None,
        }
    }

    fn wake(tid: u32, waker: u32) -> WakeEdge {
        WakeEdge {
            ts: 1,
            tid,
            waker_tid: waker,
            waker_tgid: 0,
            flags: 0,
        }
    }

    #[test]
    fn pytorch_shaped_job() {
        let model = Model {
            targets: vec![10],
            processes: [(10, process(10, 1)), (20, process(20, 10))].into(),
            threads: vec![
                thread(10, 10, "python"),
                thread(11, 10, "pt_data_pin"),
                thread(12, 10, "python"),
                thread(20, 20, "pt_data_worker"),
                thread(21, 20, "python"),
                thread(22, 20, "omp_worker"),
            ],
            // The pin thread wakes the main thread; a worker wakes the pin thread.
            wakeups: vec![wake(10, 11), wake(10, 11), wake(11, 21), wake(12, 10)],
            ..Default::default()
        };
        let roles = classify(&model);
        assert_eq!(roles.trainer, Some(10));
        assert_eq!(roles.of(10), Role::Trainer);
        assert_eq!(roles.of(11), Role::PinMemory);
        assert_eq!(roles.of(12), Role::Other);
        assert_eq!(roles.of(20), Role::DataWorker);
        assert_eq!(roles.of(21), Role::DataWorker);
        assert_eq!(roles.of(22), Role::Pool);
    }

    #[test]
    fn without_wakeups_the_target_main_thread_trains() {
        let model = Model {
            targets: vec![10],
            processes: [(10, process(10, 1))].into(),
            threads: vec![thread(10, 10, "train"), thread(11, 10, "helper")],
            ..Default::default()
        };
        assert_eq!(classify(&model).trainer, Some(10));
    }
}

//! Who is who in the job: the trainer that consumes batches, the data
//! workers that produce them, the pin-memory thread between them, the
//! thread pools inside all of them, and the helpers the job runs on the
//! side.
//!
//! The rules rest on what any framework leaves in the kernel's view: the
//! process tree (workers are descendants of the trainer's process), exec
//! (a worker is a fork of the trainer's interpreter; a child that exec'd
//! another program, such as the `ldconfig` that ctypes.util.find_library
//! runs while torch imports, is a helper), wakeup edges (the trainer is the
//! thread workers wake), the library a thread's stacks start in (a pool
//! library created it), how a thread waits (pool threads that spin on
//! sched_yield) and the libraries the stacks run in (libgomp, libmkl, …).
//! PyTorch's thread names (`pt_data_worker`, `pt_data_pin`) only sharpen
//! them.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::model::{Model, Thread, ThreadKey};
use crate::recording::FrameKind;

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
    /// A thread of a process the job ran on the side: a child that exec'd
    /// another program (`ldconfig`, `sh`, a compiler, `nvidia-smi`), or a
    /// descendant of one. Shown, never counted as a worker or blamed.
    Helper,
    Other,
}

impl Role {
    /// A process's role from its threads': the trainer's process is the
    /// trainer's, then helper, then data worker; pool and pin-memory
    /// threads say nothing of their process.
    #[must_use]
    pub fn max_for_process(self, thread: Role) -> Role {
        let rank = |r: Role| match r {
            Role::Trainer => 3,
            Role::Helper => 2,
            Role::DataWorker => 1,
            _ => 0,
        };
        if rank(thread) > rank(self) {
            thread
        } else {
            self
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Trainer => "trainer",
            Role::PinMemory => "pin_memory",
            Role::DataWorker => "data_worker",
            Role::Pool => "pool",
            Role::Helper => "helper",
            Role::Other => "other",
        }
    }
}

/// Thread-name prefixes of well-known pools (lower case). Pool threads
/// often keep their creator's name, so stacks are checked too.
const POOL_NAME_PREFIXES: &[&str] = &["omp", "gomp", "openblas", "mkl", "tbb", "cv::", "opencv"];
/// Library basename prefixes whose code pool threads run, and the pool
/// each belongs to. (numpy's OpenBLAS is libscipy_openblas; OpenCV's
/// Python wheel is one cv2.abi3.so.)
const POOL_LIBRARIES: &[(&str, PoolLibrary)] = &[
    ("libgomp", PoolLibrary::OpenMp),
    ("libiomp", PoolLibrary::OpenMp),
    ("libomp", PoolLibrary::OpenMp),
    ("libmkl", PoolLibrary::Mkl),
    ("libopenblas", PoolLibrary::OpenBlas),
    ("libscipy_openblas", PoolLibrary::OpenBlas),
    ("libopencv", PoolLibrary::OpenCv),
    ("cv2.", PoolLibrary::OpenCv),
    ("libtbb", PoolLibrary::Tbb),
];
/// Share of a thread's on-CPU samples in pool libraries that makes it a pool thread.
const POOL_SAMPLE_SHARE: f64 = 0.5;
/// Share of its samples in an OpenMP runtime that makes a thread one of
/// its pool's: the parallel work itself runs in the caller's libraries
/// (libtorch_cpu), so a busy OpenMP thread has few samples in the runtime,
/// but no thread outside a pool runs the runtime's barrier and dispatch.
const OPENMP_SAMPLE_SHARE: f64 = 0.1;
/// A thread that runs this short on average between involuntary switches,
/// and waits for a CPU this many times longer than it runs, is spinning on
/// sched_yield: a pool thread waiting for work (OpenCV's, OpenBLAS's and
/// TBB's pools spin so before they sleep).
const SPIN_MEAN_RUN_NS: u64 = 50_000;
const SPIN_RUNNABLE_TO_RUN: u64 = 10;
/// Fewer switches than this say nothing about how a thread waits. (A pool
/// thread an eight-worker job started late on two cores switched 78 times
/// in its 1.2 s, every run a few tens of µs: 100 missed it.)
const SPIN_MIN_SWITCHES: u64 = 30;

/// Which library a pool thread belongs to, so the fix names its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolLibrary {
    /// libgomp, Intel's libiomp5, LLVM's libomp: OMP_NUM_THREADS (and
    /// MKL_NUM_THREADS, which PyTorch also reads).
    OpenMp,
    Mkl,
    OpenBlas,
    OpenCv,
    Tbb,
    /// Known only by how it waits (spinning on sched_yield).
    Unknown,
}

impl PoolLibrary {
    pub fn name(self) -> &'static str {
        match self {
            PoolLibrary::OpenMp => "OpenMP",
            PoolLibrary::Mkl => "MKL",
            PoolLibrary::OpenBlas => "OpenBLAS",
            PoolLibrary::OpenCv => "OpenCV",
            PoolLibrary::Tbb => "TBB",
            PoolLibrary::Unknown => "unknown",
        }
    }

    fn from_thread_name(name: &str) -> PoolLibrary {
        match name {
            n if n.starts_with("omp") || n.starts_with("gomp") => PoolLibrary::OpenMp,
            n if n.starts_with("openblas") => PoolLibrary::OpenBlas,
            n if n.starts_with("mkl") => PoolLibrary::Mkl,
            n if n.starts_with("tbb") => PoolLibrary::Tbb,
            _ => PoolLibrary::OpenCv,
        }
    }
}

/// Every thread's role, by who it is ([`ThreadKey`]: a reused tid is
/// another thread, with a role of its own).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Roles {
    pub by_thread: BTreeMap<ThreadKey, Role>,
    /// The trainer thread.
    pub trainer: Option<ThreadKey>,
    /// Each pool thread's library.
    pub pool_library: BTreeMap<ThreadKey, PoolLibrary>,
}

impl Roles {
    /// The role of a thread of the model.
    pub fn of_thread(&self, t: &Thread) -> Role {
        self.of_key(t.key())
    }

    /// The role of the thread `key`: the holder of its tid whose life
    /// began last at or before the key's start (the key itself, for a
    /// thread of the model the roles were classified on).
    pub fn of_key(&self, key: ThreadKey) -> Role {
        self.of_at(key.tid, key.start_ns)
    }

    /// Roles of threads that all began with the window, for tests.
    #[cfg(test)]
    pub(crate) fn from_tids(
        roles: impl IntoIterator<Item = (u32, Role)>,
        trainer: Option<u32>,
    ) -> Roles {
        let key = |tid| ThreadKey { tid, start_ns: 0 };
        Roles {
            by_thread: roles.into_iter().map(|(t, r)| (key(t), r)).collect(),
            trainer: trainer.map(key),
            ..Roles::default()
        }
    }

    /// The role of the thread `tid` at `ts`: the holder of the tid whose
    /// life began last at or before `ts` (a wakeup's waker, a sample's
    /// thread).
    pub fn of_at(&self, tid: u32, ts: u64) -> Role {
        let from = ThreadKey { tid, start_ns: 0 };
        let to = ThreadKey { tid, start_ns: ts };
        self.by_thread
            .range(from..=to)
            .next_back()
            .or_else(|| self.holders(tid).next())
            .map_or(Role::Other, |(_, &r)| r)
    }

    /// The role of `tid` where its time is not known: its latest holder's.
    pub fn of(&self, tid: u32) -> Role {
        self.holders(tid)
            .next_back()
            .map_or(Role::Other, |(_, &r)| r)
    }

    fn holders(&self, tid: u32) -> impl DoubleEndedIterator<Item = (&ThreadKey, &Role)> {
        let from = ThreadKey { tid, start_ns: 0 };
        let to = ThreadKey {
            tid,
            start_ns: u64::MAX,
        };
        self.by_thread.range(from..=to)
    }

    /// The trainer's tid.
    pub fn trainer_tid(&self) -> Option<u32> {
        self.trainer.map(|k| k.tid)
    }

    /// A pool thread's library.
    pub fn pool_library_of(&self, t: &Thread) -> Option<PoolLibrary> {
        self.pool_library.get(&t.key()).copied()
    }
}

pub fn classify(model: &Model) -> Roles {
    let samples = pool_samples(model);
    let origins = thread_origins(model);
    let helpers = helper_processes(model);
    let mut by_thread = BTreeMap::new();
    let mut pool_library = BTreeMap::new();
    for t in &model.threads {
        let role = if helpers.contains(&(t.pid, process_start(model, t))) {
            Role::Helper
        } else if let Some(library) = pool_of(t, &samples, origins.get(&t.key())) {
            pool_library.insert(t.key(), library);
            Role::Pool
        } else if t.comm == "pt_data_pin" {
            Role::PinMemory
        } else if t.comm == "pt_data_worker" || model.depth(t.pid) > 0 {
            Role::DataWorker
        } else {
            Role::Other
        };
        by_thread.insert(t.key(), role);
    }
    let trainer = find_trainer(model, &by_thread);
    if let Some(key) = trainer {
        by_thread.insert(key, Role::Trainer);
        pool_library.remove(&key);
    }
    Roles {
        by_thread,
        trainer,
        pool_library,
    }
}

/// The start of the process a thread belongs to: with its pid, it tells
/// the holders of a reused pid apart.
fn process_start(model: &Model, t: &Thread) -> u64 {
    model
        .process_of(t.pid, t.start_ns)
        .map_or(0, |p| p.start_ns)
}

/// Helper processes, as (pid, start): descendants of the targets that
/// exec'd a program other than their parent's (a DataLoader worker is a
/// fork of the trainer's interpreter, or under the spawn start method an
/// exec of the same one, and names a thread `pt_data_worker`), and
/// everything below them.
fn helper_processes(model: &Model) -> HashSet<(u32, u64)> {
    let named_workers: HashSet<u32> = model
        .threads
        .iter()
        .filter(|t| t.comm == "pt_data_worker")
        .map(|t| t.pid)
        .collect();
    let execd_other = |p: &crate::model::Process| {
        p.exec_ns.is_some()
            && !model.targets.contains(&p.pid)
            && !named_workers.contains(&p.pid)
            && model
                .processes
                .get(&p.ppid)
                .is_some_and(|parent| parent.comm != p.comm)
    };
    let is_helper = |p: &crate::model::Process| {
        // Walk up to a target: a helper's children are helpers too.
        let mut cur = Some(p);
        for _ in 0..64 {
            let Some(q) = cur else { break };
            if model.targets.contains(&q.pid) {
                break;
            }
            if execd_other(q) {
                return true;
            }
            cur = model.processes.get(&q.ppid);
        }
        false
    };
    model
        .all_processes()
        .filter(|p| is_helper(p))
        .map(|p| (p.pid, p.start_ns))
        .collect()
}

/// A thread other than its process's main thread that belongs to a pool:
/// by name, by the function it was started in (a pool library's), by
/// where its on-CPU samples run (a pool library, or sched_yield), or by
/// waiting as a sched_yield loop does. A process's main thread is never a
/// pool's, nor is a thread that ran Python code.
fn pool_of(
    t: &Thread,
    samples: &HashMap<ThreadKey, PoolSamples>,
    origin: Option<&ThreadOrigin>,
) -> Option<PoolLibrary> {
    if t.tid == t.pid || origin.is_some_and(|o| o.python) {
        return None;
    }
    let name = t.comm.to_ascii_lowercase();
    if POOL_NAME_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Some(PoolLibrary::from_thread_name(&name));
    }
    if let Some(library) = origin.and_then(ThreadOrigin::start_library) {
        return Some(library);
    }
    let own = samples.get(&t.key()).filter(|s| s.total > 0);
    if let Some(s) = own {
        let share = |n: u64| n as f64 / s.total as f64;
        let openmp = s.by_library.get(&PoolLibrary::OpenMp).copied().unwrap_or(0);
        if share(s.in_pool) >= POOL_SAMPLE_SHARE || share(openmp) >= OPENMP_SAMPLE_SHARE {
            return Some(s.library());
        }
    }
    // Known by how it waits; its library, if any sample says.
    spins_on_yield(t).then(|| own.map_or(PoolLibrary::Unknown, PoolSamples::library))
}

/// What a thread's stacks say of where it came from.
#[derive(Debug, Default)]
struct ThreadOrigin {
    /// Stacks that reach the thread's root, by the pool library the
    /// thread's start routine is in (None: in no pool library).
    starts: BTreeMap<Option<PoolLibrary>, u64>,
    /// Some stack of it holds a Python frame: the program's own thread.
    python: bool,
}

impl ThreadOrigin {
    /// The pool library most of its rooted stacks start in, if that is a
    /// pool library.
    fn start_library(&self) -> Option<PoolLibrary> {
        self.starts
            .iter()
            .max_by_key(|&(lib, n)| (*n, std::cmp::Reverse(*lib)))
            .and_then(|(lib, _)| *lib)
    }
}

/// Per tid, where its stacks (on and off CPU) say it came from. A pool
/// thread that an eight-worker job starts late on two cores may run too
/// little to be known by its samples or by how it waits, but every stack
/// it leaves begins where the library started it: glibc's `clone3` and
/// `start_thread`, then the library's thread function
/// (`cv::WorkerThread::thread_loop_wrapper` in cv2.abi3.so,
/// `gomp_thread_start` in libgomp).
fn thread_origins(model: &Model) -> HashMap<ThreadKey, ThreadOrigin> {
    let Some(table) = &model.stacks else {
        return HashMap::new();
    };
    let mut per_stack: HashMap<u32, (Option<Option<PoolLibrary>>, bool)> = HashMap::new();
    let mut origins: HashMap<ThreadKey, ThreadOrigin> = HashMap::new();
    for s in &table.samples {
        let &mut (start, python) = per_stack.entry(s.stack).or_insert_with(|| {
            let frames = table
                .stacks
                .get(s.stack as usize)
                .map_or(&[][..], |f| &f[..]);
            let python = frames.iter().any(|&f| {
                table
                    .frames
                    .get(f as usize)
                    .is_some_and(|f| f.kind == FrameKind::Python)
            });
            (start_routine_library(table, frames), python)
        });
        let origin = origins.entry(sample_thread(model, s)).or_default();
        origin.python |= python;
        if let Some(lib) = start {
            *origin.starts.entry(lib).or_default() += 1;
        }
    }
    origins
}

/// For a stack that reaches a thread's root (C library frames, then the
/// thread's start routine), the pool library the start routine is in
/// (Some(None): in none); None for a stack that does not reach the root
/// (cut short, lost, or a main thread's, which starts at `_start`), or
/// that has not reached the start routine yet: a new thread's stack while
/// it is still in `clone3`, where its first touch of its stack faults and
/// may be preempted, is libc's frame and then the kernel's. (Counted as
/// starting in no pool library, one such stack tied an OpenCV pool
/// thread's single rooted stack in cv2, and the tie went to no library.)
#[allow(
    clippy::option_option,
    reason = "three answers: no root reached, a root in no pool library, one in a library"
)]
fn start_routine_library(
    table: &crate::recording::StackTable,
    frames: &[u32],
) -> Option<Option<PoolLibrary>> {
    let mut frames = frames.iter().filter_map(|&f| table.frames.get(f as usize));
    let first = frames.next()?;
    if first.kind != FrameKind::Native || !is_libc(&first.module) {
        return None;
    }
    let start = frames.find(|f| !(f.kind == FrameKind::Native && is_libc(&f.module)))?;
    match start.kind {
        FrameKind::Native => Some(pool_library_of(&start.module)),
        // Still in the C library's thread creation.
        FrameKind::Kernel => None,
        _ => Some(None),
    }
}

/// The C library, where every thread's stack begins (`clone3`, then
/// `start_thread`): glibc's `libc.so.6` (`libc-2.31.so` before 2.34) or musl.
fn is_libc(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or_default();
    base.starts_with("libc.so") || base.starts_with("libc-") || base.starts_with("ld-musl")
}

/// The pool library a module is, by its file name.
fn pool_library_of(module: &str) -> Option<PoolLibrary> {
    let base = module.rsplit('/').next().unwrap_or_default();
    POOL_LIBRARIES
        .iter()
        .find(|(prefix, _)| base.starts_with(prefix))
        .map(|(_, lib)| *lib)
}

/// Switched out still runnable, over and over, after runs of a few
/// microseconds, and waiting for a CPU far longer than it ran: a
/// sched_yield loop. (A thread merely starved of CPU also waits runnable,
/// but runs a time slice, milliseconds, each time it gets a CPU.)
pub(crate) fn spins_on_yield(t: &Thread) -> bool {
    let switches = t.voluntary_switches + t.involuntary_switches;
    if t.involuntary_switches < SPIN_MIN_SWITCHES || t.involuntary_switches <= t.voluntary_switches
    {
        return false;
    }
    let b = t.breakdown(t.start_ns, t.end_ns);
    b.on_cpu / switches.max(1) < SPIN_MEAN_RUN_NS && b.runnable >= SPIN_RUNNABLE_TO_RUN * b.on_cpu
}

/// A thread's on-CPU samples: all, those whose leaf runs in a pool library,
/// and how many of those each pool library had.
#[derive(Debug, Default)]
struct PoolSamples {
    total: u64,
    in_pool: u64,
    by_library: HashMap<PoolLibrary, u64>,
}

impl PoolSamples {
    /// The library most samples ran in; a pool seen only spinning on
    /// sched_yield is Unknown.
    fn library(&self) -> PoolLibrary {
        self.by_library
            .iter()
            .filter(|&(lib, n)| *lib != PoolLibrary::Unknown && *n > 0)
            .max_by_key(|&(lib, n)| (*n, std::cmp::Reverse(*lib)))
            .map_or(PoolLibrary::Unknown, |(lib, _)| *lib)
    }
}

/// Per tid, its on-CPU samples by the pool library their leaf runs in;
/// samples inside sched_yield count as [`PoolLibrary::Unknown`] (a pool
/// spinning for work).
/// The thread a stack sample is of: its tid and start (formats 2 and 3 kept
/// no start: the tid's latest holder).
fn sample_thread(model: &Model, s: &crate::recording::StackSample) -> ThreadKey {
    if s.thread_ns != 0 {
        return ThreadKey {
            tid: s.tid,
            start_ns: s.thread_ns,
        };
    }
    model.threads.iter().rev().find(|t| t.tid == s.tid).map_or(
        ThreadKey {
            tid: s.tid,
            start_ns: 0,
        },
        Thread::key,
    )
}

fn pool_samples(model: &Model) -> HashMap<ThreadKey, PoolSamples> {
    let Some(table) = &model.stacks else {
        return HashMap::new();
    };
    let mut counts: HashMap<ThreadKey, PoolSamples> = HashMap::new();
    for s in table.samples.iter().filter(|s| s.kind.is_on_cpu()) {
        let frames = table
            .stacks
            .get(s.stack as usize)
            .map_or(&[][..], |f| &f[..]);
        let library = if frames.iter().any(|&f| is_yield(table, f)) {
            Some(PoolLibrary::Unknown)
        } else {
            frames
                .iter()
                .rev()
                .find(|&&f| !is_kernel(table, f))
                .and_then(|&f| table.frames.get(f as usize))
                .and_then(|frame| pool_library_of(&frame.module))
        };
        let entry = counts.entry(sample_thread(model, s)).or_default();
        // Weights come from the file: saturate rather than trust them.
        entry.total = entry.total.saturating_add(s.weight);
        if let Some(lib) = library {
            entry.in_pool = entry.in_pool.saturating_add(s.weight);
            let n = entry.by_library.entry(lib).or_default();
            *n = n.saturating_add(s.weight);
        }
    }
    counts
}

/// A frame of sched_yield: libc's wrapper or the kernel's syscall.
fn is_yield(table: &crate::recording::StackTable, frame: u32) -> bool {
    table
        .frames
        .get(frame as usize)
        .and_then(|f| f.symbol.as_deref())
        .is_some_and(|sym| {
            sym == "sched_yield" || sym.ends_with("sys_sched_yield") || sym == "do_sched_yield"
        })
}

/// Per tid, the share of its on-CPU samples spent spinning for pool work:
/// in an OpenMP runtime (barriers and dispatch; the parallel work itself
/// runs in the caller's code) or in sched_yield.
pub fn spin_shares(model: &Model) -> HashMap<ThreadKey, f64> {
    pool_samples(model)
        .into_iter()
        .filter(|(_, s)| s.total > 0)
        .map(|(tid, s)| {
            let spin: u64 = [PoolLibrary::OpenMp, PoolLibrary::Unknown]
                .iter()
                .filter_map(|lib| s.by_library.get(lib))
                .sum();
            (tid, spin as f64 / s.total as f64)
        })
        .collect()
}

fn is_kernel(table: &crate::recording::StackTable, frame: u32) -> bool {
    table
        .frames
        .get(frame as usize)
        .is_some_and(crate::recording::Frame::is_kernel)
}

/// The thread of a target process that workers (or the pin thread) wake
/// most often while it waits; else the first target's main thread (its
/// longest-lived holder of the tid).
fn find_trainer(model: &Model, roles: &BTreeMap<ThreadKey, Role>) -> Option<ThreadKey> {
    let role_at = |tid: u32, ts: u64| {
        model
            .thread_key_at(tid, ts)
            .and_then(|k| roles.get(&k).copied())
    };
    let mut woken: HashMap<ThreadKey, usize> = HashMap::new();
    for w in &model.wakeups {
        let Some(t) = model.thread_at(w.tid, w.ts) else {
            continue;
        };
        let candidate = model.depth(t.pid) == 0
            && matches!(roles.get(&t.key()), Some(Role::Other))
            && matches!(
                role_at(w.waker_tid, w.ts),
                Some(Role::DataWorker | Role::PinMemory)
            );
        if candidate {
            *woken.entry(t.key()).or_default() += 1;
        }
    }
    let most_woken = woken
        .into_iter()
        .max_by_key(|&(key, n)| (n, std::cmp::Reverse(key)))
        .map(|(key, _)| key);
    most_woken.or_else(|| {
        model.targets.iter().find_map(|&pid| {
            model
                .threads
                .iter()
                .filter(|t| t.tid == pid)
                .max_by_key(|t| t.lifetime_ns())
                .map(Thread::key)
        })
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
            exec_ns: None,
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
        assert_eq!(roles.trainer_tid(), Some(10));
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
        assert_eq!(classify(&model).trainer_tid(), Some(10));
    }

    /// A thread that alternates `run` ns on a CPU with `wait` ns runnable,
    /// switched out still runnable each time, `n` times.
    fn cycling(tid: u32, pid: u32, run: u64, wait: u64, n: u64) -> Thread {
        let mut intervals = Vec::new();
        let mut t = 0;
        for _ in 0..n {
            intervals.push(crate::model::Interval::new(
                t,
                t + run,
                crate::model::ThreadState::Running,
            ));
            intervals.push(crate::model::Interval::new(
                t + run,
                t + run + wait,
                crate::model::ThreadState::Runnable,
            ));
            t += run + wait;
        }
        Thread {
            end_ns: t,
            intervals: intervals.into(),
            involuntary_switches: n,
            ..thread(tid, pid, "pt_data_worker")
        }
    }

    #[test]
    fn an_execd_child_is_a_helper_and_so_are_its_children() {
        let ldconfig = Process {
            comm: "ldconfig".into(),
            exec_ns: Some(5),
            ..process(20, 10)
        };
        let sh = Process {
            comm: "sh".into(),
            exec_ns: Some(5),
            ..process(30, 10)
        };
        let cc = Process {
            comm: "cc1".into(),
            exec_ns: Some(7),
            ..process(31, 30)
        };
        // A worker of the spawn start method: an exec of the same
        // interpreter that names its thread.
        let spawned = Process {
            exec_ns: Some(9),
            ..process(40, 10)
        };
        let model = Model {
            targets: vec![10],
            processes: [
                (10, process(10, 1)),
                (20, ldconfig),
                (30, sh),
                (31, cc),
                (40, spawned),
                (50, process(50, 10)),
            ]
            .into(),
            threads: vec![
                thread(10, 10, "python"),
                thread(20, 20, "ldconfig"),
                thread(30, 30, "sh"),
                thread(31, 31, "cc1"),
                thread(40, 40, "pt_data_worker"),
                thread(50, 50, "pt_data_worker"),
            ],
            // ldconfig's output wakes the trainer: still no delivery.
            wakeups: vec![wake(10, 20), wake(10, 50)],
            ..Default::default()
        };
        let roles = classify(&model);
        assert_eq!(roles.trainer_tid(), Some(10));
        for helper in [20, 30, 31] {
            assert_eq!(roles.of(helper), Role::Helper, "{helper}");
        }
        assert_eq!(roles.of(40), Role::DataWorker);
        assert_eq!(roles.of(50), Role::DataWorker);
    }

    #[test]
    fn a_thread_spinning_on_sched_yield_is_a_pool_thread() {
        // OpenCV's pool between jobs: 5 µs on a CPU, then runnable again.
        let spinner = cycling(21, 20, 5_000, 500_000, 200);
        // A thread starved of CPU: a 4 ms slice each time it gets one.
        let starved = cycling(22, 20, 4_000_000, 20_000_000, 200);
        // The worker's main thread is never a pool's, however it waits.
        let main = cycling(20, 20, 5_000, 500_000, 200);
        // A pool thread started late in an eight-worker job on two cores:
        // 78 switches in its life, as one in the real job had.
        let late = cycling(23, 20, 25_000, 11_000_000, 78);
        let model = Model {
            targets: vec![10],
            processes: [(10, process(10, 1)), (20, process(20, 10))].into(),
            threads: vec![thread(10, 10, "python"), main, spinner, starved, late],
            ..Default::default()
        };
        let roles = classify(&model);
        assert_eq!(roles.of(21), Role::Pool);
        assert_eq!(roles.of(23), Role::Pool);
        assert_eq!(
            roles
                .pool_library
                .iter()
                .find(|(k, _)| k.tid == 21)
                .map(|(_, l)| l),
            Some(&PoolLibrary::Unknown)
        );
        assert_eq!(roles.of(22), Role::DataWorker);
        assert_eq!(roles.of(20), Role::DataWorker);
    }

    /// Stacks of a DataLoader worker's threads as the unwinder leaves them:
    /// glibc's `clone3` and `start_thread`, then the thread's function.
    fn worker_stacks() -> crate::recording::StackTable {
        use crate::recording::{Frame, StackKind, StackSample, StackTable, stacks::markers};
        let native = |module: &str, symbol: &str| Frame {
            module: module.into(),
            symbol: Some(symbol.into()),
            ..Frame::default()
        };
        let python = Frame {
            symbol: Some("__getitem__ (train.py)".into()),
            kind: FrameKind::Python,
            ..Frame::default()
        };
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let cv2 = "/venv/site-packages/cv2/cv2.abi3.so";
        let frames = vec![
            native(libc, "clone3"),                                       // 0
            native(libc, "start_thread"),                                 // 1
            native(cv2, "thread_loop_wrapper"),                           // 2
            native(libc, "pthread_cond_wait"),                            // 3
            native("/venv/lib/libpython3.11.so.1.0", "pythread_wrapper"), // 4
            python,                                                       // 5
            native(cv2, "cv::resize"),                                    // 6
            Frame::marker(markers::TRUNCATED),                            // 7
            Frame {
                module: "[kernel]".into(),
                symbol: Some("asm_exc_page_fault".into()),
                kind: FrameKind::Kernel,
                ..Frame::default()
            }, // 8
        ];
        let sample = |tid, kind, stack, weight| StackSample {
            pid: 20,
            tid,
            thread_ns: 0,
            kind,
            stack,
            weight,
        };
        StackTable {
            sample_hz: 99,
            frames,
            stacks: vec![
                vec![0, 1, 2, 3],    // OpenCV's pool thread, asleep
                vec![0, 1, 4, 5, 6], // a Python thread resizing in cv2
                vec![7, 6],          // cut short: says nothing of its start
                vec![0, 8],          // still in clone3: nor does this
            ],
            samples: vec![
                sample(21, StackKind::Futex, 0, 3_000_000),
                sample(21, StackKind::Runnable, 3, 45),
                sample(22, StackKind::OnCpu, 1, 40),
                sample(23, StackKind::OnCpu, 2, 40),
            ],
            ..StackTable::default()
        }
    }

    #[test]
    fn a_thread_is_whose_start_routine_it_runs() {
        // A pool thread that ran too little to be known by its samples or
        // by how it waits: a few long runs, asleep in between. Besides its
        // stack asleep in cv2, one from its first moments, preempted at
        // its first page fault in clone3, which names no start routine.
        let late = cycling(21, 20, 2_000_000, 50_000_000, 5);
        let model = Model {
            targets: vec![10],
            processes: [(10, process(10, 1)), (20, process(20, 10))].into(),
            threads: vec![
                thread(10, 10, "python"),
                thread(20, 20, "pt_data_worker"),
                late,
                thread(22, 20, "pt_data_worker"),
                thread(23, 20, "pt_data_worker"),
            ],
            stacks: Some(worker_stacks()),
            ..Default::default()
        };
        let roles = classify(&model);
        assert_eq!(roles.of(21), Role::Pool);
        assert_eq!(
            roles
                .pool_library
                .iter()
                .find(|(k, _)| k.tid == 21)
                .map(|(_, l)| l),
            Some(&PoolLibrary::OpenCv)
        );
        // All its samples in cv2, but it runs Python: the program's thread.
        assert_eq!(roles.of(22), Role::DataWorker);
        // A stack cut short leaves the samples to decide: all in cv2.
        assert_eq!(roles.of(23), Role::Pool);
    }

    #[test]
    fn process_roles_rank_trainer_helper_worker() {
        assert_eq!(Role::Other.max_for_process(Role::Pool), Role::Other);
        assert_eq!(
            Role::Other.max_for_process(Role::DataWorker),
            Role::DataWorker
        );
        assert_eq!(
            Role::DataWorker.max_for_process(Role::Trainer),
            Role::Trainer
        );
        assert_eq!(
            Role::Trainer.max_for_process(Role::PinMemory),
            Role::Trainer
        );
        assert_eq!(Role::DataWorker.max_for_process(Role::Helper), Role::Helper);
    }
}

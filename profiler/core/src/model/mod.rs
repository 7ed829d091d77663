//! From events to a model of the job: every tracked thread's life as a
//! sequence of state intervals (running, runnable, blocked), the process
//! tree, thread names, and wakeup edges.
//!
//! Architecture invariant: pure. [`Model::build`] takes a decoded
//! [`Recording`] and nothing else, so everything downstream is testable
//! without root or a kernel.
//!
//! [`Assembly`] builds the model from events in timestamp order (`new` from
//! the metadata, `apply` per event, `finish`): the commands stream the
//! events into it from the file (`reader::Opened`), while [`Model::build`]
//! sorts a parsed recording's events in memory (the ring buffer is in
//! commit order, not time order) and feeds them to it; the odd-recording
//! tests check both give the same model. It keeps the events inside the
//! window (header anchor to footer anchor, or to the last event or sample
//! when cut short, never longer than [`MAX_WINDOW_NS`], a week), keeps the
//! process table in step with fork, exec and exit (a pid taken again after
//! its holder exited moves the holder to `earlier_processes`; an exec is
//! noted in `Process::exec_ns`), and collects wakeup edges, block requests,
//! futex waits with their wakers, CUDA calls and the GPU series.
//!
//! Architecture invariant: a report never holds every event. Its memory is
//! the model's (about 26 bytes per event: 156 MB for the 5.9 M-event bench
//! recording in docs/benchmarks.md, two-thirds of the 40 bytes per event
//! the recording spends) plus the reader's reorder window;
//! anything that needs all events at once belongs in `Assembly`.

pub mod cuda;
pub mod gpu;
mod identity;
mod io;
mod reasons;
mod stacks;
mod threads;

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt as _};

pub use cuda::{Cuda, CudaCall, CudaOp};
pub use gpu::{Gpu, Gpus};
pub use identity::{ProcessKey, ThreadKey};
pub use io::{FutexWait, IoOp, IoRequest};
pub use threads::{BlockReason, Breakdown, Interval, Intervals, SwitchOut, Thread, ThreadState};

use crate::recording::reader::StreamStats;
use crate::recording::{
    ClockAnchor, Event, LostCounts, NodeIdentity, Origin, Recording, StackTable, SystemSample,
};

/// The longest window a recording can describe. tprof records for minutes
/// or hours; a timestamp further out is corruption, and analysis works per
/// second of the window, so it must not stretch the window (events past it
/// are left out).
pub const MAX_WINDOW_NS: u64 = 7 * 24 * 3600 * 1_000_000_000;

/// A tracked process.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub cmdline: Vec<String>,
    pub origin: Origin,
    /// When it appeared in the window (window start if it was already there).
    pub start_ns: u64,
    /// When its last thread exited, if it did within the window.
    pub exit_ns: Option<u64>,
    /// When it last exec'd a program, if it did within the window (a
    /// process forked to run `ldconfig` or a compiler, as opposed to a
    /// DataLoader worker, which is a fork of the trainer's interpreter).
    pub exec_ns: Option<u64>,
}

impl Process {
    /// Who it is: its pid and when its life in the window began.
    pub fn key(&self) -> ProcessKey {
        ProcessKey {
            pid: self.pid,
            start_ns: self.start_ns,
        }
    }
}

/// Futex returns that mean "not woken by another thread".
const ETIMEDOUT: i64 = -(profiler_ebpf::errno::ETIMEDOUT as i64);
const EINTR: i64 = -(profiler_ebpf::errno::EINTR as i64);

/// "tid was woken by waker at ts": the raw material of stall attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeEdge {
    pub ts: u64,
    pub tid: u32,
    pub waker_tid: u32,
    pub waker_tgid: u32,
    /// `profiler_ebpf::WAKE_*` bits.
    pub flags: u32,
}

/// A tracked thread entered a probed libtorch function
/// (`profiler_ebpf::mark`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub ts: u64,
    pub tid: u32,
    pub tgid: u32,
    /// One of `profiler_ebpf::mark`.
    pub what: u32,
    /// A `record_function` region's name; empty for a backward pass.
    pub name: String,
}

/// A tracked thread's pipe transfer that moved bytes; `ts` is its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeOp {
    pub ts: u64,
    pub tid: u32,
    pub tgid: u32,
    /// The pipe, while it lives (its `pipe_inode_info` address).
    pub pipe: u64,
    pub bytes: u64,
    pub write: bool,
}

/// Everything analysis needs, in one value.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    pub cores: u32,
    /// Every thread seen, in order of appearance (a reused tid is a new entry).
    pub threads: Vec<Thread>,
    /// Tracked processes by pid; for a pid used twice in the window, its
    /// latest holder.
    pub processes: BTreeMap<u32, Process>,
    /// Earlier holders of pids that a later process took again within the
    /// window (pid reuse), oldest first. Never merged with the later one.
    pub earlier_processes: Vec<Process>,
    pub wakeups: Vec<WakeEdge>,
    /// Completed block requests on every device, by completion time.
    pub ios: Vec<IoRequest>,
    /// Block device names by kernel dev_t.
    pub devices: BTreeMap<u32, String>,
    pub futex_waits: Vec<FutexWait>,
    pub system: Vec<SystemSample>,
    pub events: u64,
    /// Events delivered out of timestamp order because they were written
    /// more than the reader's reorder window late (0 in any recording seen
    /// so far); their threads' states may be off by that much.
    pub late_events: u64,
    /// Records and events of kinds this tprof does not know (written by a
    /// newer one), skipped.
    pub unknown_records: u64,
    pub unknown_events: u64,
    /// Threads seen leaving a CPU whose arrival on it was never seen (a
    /// switch the kernel did not trace, or a lost one); see
    /// `threads::Builder::switch_out` for how their time is placed.
    pub untraced_switch_ins: u64,
    /// Of those, the ones placed by the kernel's account of the thread's
    /// run (`Event::Arrival`, recordings from 2026-12 on).
    pub untraced_placed_by_kernel: u64,
    pub lost: LostCounts,
    /// The recording did not end normally; the window is what was saved.
    pub cut_short: bool,
    pub stop_reason: Option<String>,
    /// How the command `record --` launched ended, when recorded.
    pub command_exit: Option<crate::recording::CommandExit>,
    pub targets: Vec<u32>,
    pub gpus: Gpus,
    /// Sampled stacks (frames already symbolized), as recorded or, since
    /// format 4, weighed from the recording's samples and switch-outs.
    pub stacks: Option<StackTable>,
    /// How user stacks were taken, when the recording says.
    pub user_stacks: Option<crate::recording::UserStacks>,
    /// The CPUs the job could use (cpuset, cgroup quota), when recorded.
    pub cpu_limit: Option<crate::recording::CpuLimit>,
    /// CUDA runtime calls and the libraries they were seen in.
    pub cuda: Cuda,
    /// libtorch marks, in time order.
    pub marks: Vec<Mark>,
    /// Pipe transfers of tracked threads, in time order.
    pub pipes: Vec<PipeOp>,
    /// What step detection could see, when the recording says.
    pub step_probes: Option<crate::recording::StepProbes>,
    /// The machine it was recorded on (its node name).
    pub hostname: String,
    /// Its kernel (`uname -r`).
    pub kernel_release: String,
    /// Its boot, machine and rank, when recorded (since format 4).
    pub node: Option<NodeIdentity>,
    /// The clock anchors at the window's opening and, for a recording that
    /// ended normally, its close.
    pub start_anchor: ClockAnchor,
    pub end_anchor: Option<ClockAnchor>,
}

impl Model {
    /// Builds the model of a recording held in memory.
    pub fn build(rec: &Recording) -> Model {
        let mut events: Vec<&Event> = rec.events.iter().collect();
        // The ring buffer is ordered by commit, not by timestamp: CPUs race.
        events.sort_by_key(|e| e.ts());
        let mut assembly = Assembly::new(rec, events.last().map(|e| e.ts()));
        for event in events {
            assembly.apply(event);
        }
        assembly.finish(StreamStats {
            events: rec.events.len() as u64,
            late: 0,
            unknown: rec.unknown_events,
        })
    }
}

/// A model being built from a stream of events in timestamp order: what
/// [`Model::build`] does for a recording in memory, and what a report does
/// while [`crate::recording::reader::Opened::events_in_order`] streams a
/// file, so that it never holds every event at once.
pub struct Assembly<'a> {
    rec: &'a Recording,
    model: Model,
    threads: threads::Builder,
    cuda_raw: Vec<cuda::RawCall>,
    /// The stack weights of a format 4 recording (None before format 4,
    /// whose STACKS record holds them already, or without stacks).
    stacks: Option<stacks::StackAssembly>,
}

impl<'a> Assembly<'a> {
    /// Starts a model of `rec`'s metadata (its `events` are not read).
    /// `last_event_ns` bounds the window of a recording without a footer.
    pub fn new(rec: &'a Recording, last_event_ns: Option<u64>) -> Assembly<'a> {
        let window_start_ns = rec.header.start.monotonic_ns;
        let window_end_ns = window_end(rec, last_event_ns)
            .max(window_start_ns)
            .min(window_start_ns.saturating_add(MAX_WINDOW_NS));
        let model = Model {
            window_start_ns,
            window_end_ns,
            cores: rec.header.cores,
            processes: initial_processes(rec, window_start_ns),
            system: rec.system.clone(),
            lost: rec.lost.clone(),
            cut_short: rec.cut_short(),
            stop_reason: rec.footer.as_ref().map(|f| f.stop_reason.clone()),
            command_exit: rec.footer.as_ref().and_then(|f| f.command_exit.clone()),
            targets: rec.header.targets.clone(),
            cpu_limit: rec.header.cpu_limit,
            user_stacks: rec.header.user_stacks,
            devices: rec.header.block_devices.clone(),
            gpus: gpu::build(rec),
            stacks: rec.stacks.clone(),
            hostname: rec.header.hostname.clone(),
            kernel_release: rec.header.kernel_release.clone(),
            node: rec.header.node.clone(),
            start_anchor: rec.header.start,
            end_anchor: rec.footer.as_ref().map(|f| f.end),
            step_probes: rec.step_probes.clone(),
            ..Default::default()
        };
        Assembly {
            rec,
            threads: threads::Builder::new(window_start_ns, &rec.threads),
            model,
            cuda_raw: Vec::new(),
            stacks: rec
                .header
                .sample_hz
                .map(|_| stacks::StackAssembly::default()),
        }
    }

    /// Applies the next event (in timestamp order); events outside the
    /// window are left out.
    pub fn apply(&mut self, event: &Event) {
        let ts = event.ts();
        if ts < self.model.window_start_ns || ts > self.model.window_end_ns {
            return;
        }
        self.model.apply_process_event(event);
        self.model.collect(event, &mut self.cuda_raw);
        let placed = self.threads.apply(event);
        if let Some(stacks) = &mut self.stacks {
            let window_start = self.model.window_start_ns;
            let threads = &self.threads;
            if let Some((tid, arrived)) = placed {
                stacks.switched_in_unseen(tid, arrived);
            }
            stacks.apply(event, |tid| threads.start_of(tid).unwrap_or(window_start));
        }
    }

    /// The finished model; `stats` says what streaming saw.
    pub fn finish(self, stats: StreamStats) -> Model {
        let Assembly {
            rec,
            mut model,
            threads,
            cuda_raw,
            stacks,
        } = self;
        model.events = stats.events;
        model.late_events = stats.late;
        model.unknown_events = stats.unknown;
        model.unknown_records = rec.unknown_records;
        if let (Some(stacks), Some(hz)) = (stacks, rec.header.sample_hz) {
            model.stacks = Some(stacks.finish(&rec.dictionary, hz, model.window_end_ns));
        }
        model.untraced_switch_ins = threads.untraced_switch_ins();
        model.untraced_placed_by_kernel = threads.placed_by_kernel();
        model.threads = threads.finish(model.window_end_ns);
        model.cuda = cuda::build(rec.cuda.as_ref(), cuda_raw);
        model.name_reused_pids(rec);
        model.attribute_futex_wakers();
        reasons::assign(
            &mut model.threads,
            &model.ios,
            &model.futex_waits,
            &model.wakeups,
        );
        model
    }
}

impl Model {
    /// Keeps the events that are not thread state changes.
    fn collect(&mut self, event: &Event, cuda_raw: &mut Vec<cuda::RawCall>) {
        match *event {
            Event::Wakeup {
                ts,
                tid,
                waker_tid,
                waker_tgid,
                flags,
                ..
            } => {
                self.wakeups.push(WakeEdge {
                    ts,
                    tid,
                    waker_tid,
                    waker_tgid,
                    flags,
                });
            }
            Event::BlockIo(ref io) => {
                // A request that began before tracing has no start; its
                // issue, or else its completion, is the best bound we have.
                let start = [io.start_ns, io.issue_ns, io.ts]
                    .into_iter()
                    .find(|&t| t != 0)
                    .unwrap_or(io.ts);
                self.ios.push(IoRequest {
                    dev: io.dev,
                    start_ns: start.min(io.ts),
                    end_ns: io.ts,
                    bytes: io.bytes,
                    op: IoOp::from_rwbs(&io.rwbs),
                    tid: io.tid,
                    tgid: io.tgid,
                    error: io.error,
                });
            }
            Event::FutexWait {
                ts,
                enter_ns,
                tid,
                tgid,
                uaddr,
                ret,
                ..
            } => {
                self.futex_waits.push(FutexWait {
                    tid,
                    tgid,
                    uaddr,
                    start_ns: enter_ns.max(self.window_start_ns).min(ts),
                    end_ns: ts,
                    ret,
                    waker: None,
                });
            }
            Event::Mark {
                ts,
                tid,
                tgid,
                what,
                ref name,
            } => self.marks.push(Mark {
                ts,
                tid,
                tgid,
                what,
                name: name.clone(),
            }),
            Event::Pipe {
                ts,
                tid,
                tgid,
                pipe,
                bytes,
                write,
            } => self.pipes.push(PipeOp {
                ts,
                tid,
                tgid,
                pipe,
                bytes,
                write,
            }),
            Event::CudaCall(ref call) => cuda_raw.push(cuda::RawCall {
                tid: call.tid,
                tgid: call.tgid,
                start_ns: call.enter_ns.max(self.window_start_ns).min(call.ts),
                end_ns: call.ts,
                func: call.func,
                args: call.args,
                ret: call.ret,
                out_ptr: call.out_ptr,
            }),
            _ => {}
        }
    }

    /// The waker of a futex wait is whoever woke the waiter last before the
    /// wait returned, if that was inside the wait. A wait that timed out or
    /// was interrupted has none; nor has one woken from an idle CPU (an
    /// interrupt).
    fn attribute_futex_wakers(&mut self) {
        let mut by_tid: HashMap<u32, Vec<&WakeEdge>> = HashMap::new();
        for w in &self.wakeups {
            by_tid.entry(w.tid).or_default().push(w);
        }
        for wait in &mut self.futex_waits {
            let Some(edges) = by_tid.get(&wait.tid) else {
                continue;
            };
            let upto = edges.partition_point(|e| e.ts <= wait.end_ns);
            if let Some(edge) = upto.checked_sub(1).map(|i| edges[i])
                && edge.ts >= wait.start_ns
                && edge.waker_tid != 0
                && !matches!(wait.ret, ETIMEDOUT | EINTR)
            {
                wait.waker = Some((edge.waker_tid, edge.waker_tgid));
            }
        }
    }

    /// Keeps the process table in step with fork, exec and exit.
    fn apply_process_event(&mut self, event: &Event) {
        match event {
            Event::Fork {
                ts,
                parent_tgid,
                child_tgid,
                comm,
                ..
            } if child_tgid != parent_tgid => {
                // The pid's previous holder exited: this is a new process
                // that happens to get the same pid, not the same one.
                if self
                    .processes
                    .get(child_tgid)
                    .is_some_and(|p| p.exit_ns.is_some_and(|exit| exit <= *ts))
                {
                    let previous = self.processes.remove(child_tgid).expect("just seen");
                    self.earlier_processes.push(previous);
                }
                let parent_cmdline = self
                    .processes
                    .get(parent_tgid)
                    .map(|p| p.cmdline.clone())
                    .unwrap_or_default();
                // Capture's /proc snapshot of the child may already be here;
                // the fork event knows its birth and parent better.
                self.processes
                    .entry(*child_tgid)
                    .and_modify(|p| {
                        p.start_ns = *ts;
                        p.ppid = *parent_tgid;
                    })
                    .or_insert(Process {
                        pid: *child_tgid,
                        ppid: *parent_tgid,
                        comm: comm.clone(),
                        cmdline: parent_cmdline,
                        origin: Origin::Forked,
                        start_ns: *ts,
                        exit_ns: None,
                        exec_ns: None,
                    });
            }
            Event::Exec { ts, tgid, comm, .. } => {
                if let Some(p) = self.processes.get_mut(tgid) {
                    p.comm.clone_from(comm);
                    p.exec_ns = Some(*ts);
                }
            }
            // A process's name is its main thread's (/proc/PID/comm): a
            // rename of that thread (prctl, often right after a fork)
            // renames the process, whether or not capture's snapshot of it
            // came before or after.
            Event::Comm {
                tid, tgid, comm, ..
            } if tid == tgid => {
                if let Some(p) = self.processes.get_mut(tgid) {
                    p.comm.clone_from(comm);
                }
            }
            Event::Exit {
                ts,
                tgid,
                group_dead: true,
                ..
            } => {
                if let Some(p) = self.processes.get_mut(tgid) {
                    p.exit_ns = Some(*ts);
                }
            }
            _ => {}
        }
    }

    /// Every process: earlier holders of reused pids, then the rest.
    pub fn all_processes(&self) -> impl Iterator<Item = &Process> {
        self.earlier_processes.iter().chain(self.processes.values())
    }

    /// The process a thread of `pid` that started at `start_ns` belongs to:
    /// for a reused pid, the holder at that time.
    pub fn process_of(&self, pid: u32, start_ns: u64) -> Option<&Process> {
        let current = self.processes.get(&pid);
        if current.is_some_and(|p| p.start_ns <= start_ns) {
            return current;
        }
        self.earlier_processes
            .iter()
            .rev()
            .find(|p| p.pid == pid && p.start_ns <= start_ns)
            .or_else(|| self.earlier_processes.iter().find(|p| p.pid == pid))
            .or(current)
    }

    /// The key of the process the thread `t` belongs to (for a pid the
    /// model never saw as a process, the pid from the window's start).
    pub fn process_key(&self, t: &Thread) -> ProcessKey {
        self.process_of(t.pid, t.start_ns).map_or(
            ProcessKey {
                pid: t.pid,
                start_ns: self.window_start_ns,
            },
            Process::key,
        )
    }

    /// Names each holder of a reused pid from the /proc snapshots taken
    /// during its life (the snapshots of all holders were merged at first).
    fn name_reused_pids(&mut self, rec: &Recording) {
        if self.earlier_processes.is_empty() {
            return;
        }
        let reused: Vec<u32> = self.earlier_processes.iter().map(|p| p.pid).collect();
        let holders = self
            .earlier_processes
            .iter_mut()
            .chain(self.processes.values_mut())
            .filter(|p| reused.contains(&p.pid));
        for p in holders {
            let during = rec.processes.iter().rev().find(|info| {
                info.pid == p.pid
                    && info.seen_ns >= p.start_ns
                    && p.exit_ns.is_none_or(|exit| info.seen_ns <= exit)
            });
            if let Some(info) = during {
                p.comm = info.comm.clone();
                p.cmdline = info.cmdline.clone();
            }
        }
    }

    pub fn duration_ns(&self) -> u64 {
        self.window_end_ns - self.window_start_ns
    }

    /// Fork generations between `pid` and a recording target (0: a target).
    /// The thread `tid` alive at `ts` (for a reused tid, the holder then;
    /// a time outside every holder's life gives the nearest earlier one).
    pub fn thread_at(&self, tid: u32, ts: u64) -> Option<&Thread> {
        let mut holders = self.threads.iter().filter(|t| t.tid == tid);
        let mut best: Option<&Thread> = None;
        for t in holders.by_ref() {
            if t.start_ns <= ts && ts <= t.end_ns {
                return Some(t);
            }
            if t.start_ns <= ts || best.is_none() {
                best = Some(t);
            }
        }
        best
    }

    /// The key of the thread `tid` alive at `ts` ([`Model::thread_at`]).
    pub fn thread_key_at(&self, tid: u32, ts: u64) -> Option<ThreadKey> {
        self.thread_at(tid, ts).map(Thread::key)
    }

    /// The model of `[start, end)` only, with only the threads `keep`
    /// holds (all when None): thread intervals clipped, events, requests,
    /// calls and samples outside left out; the process table is kept whole
    /// (names, parents). What the timelines of `--phase`, `--steps` and
    /// `--role` draw.
    #[must_use]
    pub fn crop(
        &self,
        start: u64,
        end: u64,
        keep: Option<&std::collections::BTreeSet<ThreadKey>>,
    ) -> Model {
        let (start, end) = (start.max(self.window_start_ns), end.min(self.window_end_ns));
        let end = end.max(start);
        // Events name a tid only: a tid is kept when a thread kept holds it.
        let tids: Option<std::collections::BTreeSet<u32>> =
            keep.map(|k| k.iter().map(|k| k.tid).collect());
        let kept = |tid: u32| tids.as_ref().is_none_or(|k| k.contains(&tid));
        let kept_thread = |t: &Thread| keep.is_none_or(|k| k.contains(&t.key()));
        let inside = |ts: u64| ts >= start && ts <= end;
        let overlaps = |a: u64, b: u64| a < end && b > start;
        let threads = self
            .threads
            .iter()
            .filter(|t| kept_thread(t) && overlaps(t.start_ns, t.end_ns.max(t.start_ns + 1)))
            .map(|t| Thread {
                start_ns: t.start_ns.max(start),
                end_ns: t.end_ns.min(end),
                intervals: t
                    .intervals
                    .iter()
                    .filter(|iv| overlaps(iv.start_ns, iv.end_ns))
                    .map(|iv| Interval {
                        start_ns: iv.start_ns.max(start),
                        end_ns: iv.end_ns.min(end),
                        ..iv
                    })
                    .collect(),
                ..t.clone()
            })
            .collect();
        let mut gpus = self.gpus.clone();
        for gpu in &mut gpus.devices {
            for series in gpu.series.values_mut() {
                series.retain(|&(ts, _)| inside(ts));
            }
        }
        let mut cuda = self.cuda.clone();
        cuda.calls
            .retain(|c| kept(c.tid) && overlaps(c.start_ns, c.end_ns.max(c.start_ns + 1)));
        Model {
            window_start_ns: start,
            window_end_ns: end,
            threads,
            wakeups: self
                .wakeups
                .iter()
                .filter(|w| inside(w.ts) && kept(w.tid))
                .copied()
                .collect(),
            ios: self
                .ios
                .iter()
                .filter(|io| overlaps(io.start_ns, io.end_ns.max(io.start_ns + 1)))
                .copied()
                .collect(),
            futex_waits: self
                .futex_waits
                .iter()
                .filter(|f| kept(f.tid) && overlaps(f.start_ns, f.end_ns.max(f.start_ns + 1)))
                .copied()
                .collect(),
            system: self
                .system
                .iter()
                .filter(|s| inside(s.ts_ns))
                .copied()
                .collect(),
            marks: self
                .marks
                .iter()
                .filter(|m| inside(m.ts) && kept(m.tid))
                .cloned()
                .collect(),
            pipes: self
                .pipes
                .iter()
                .filter(|p| inside(p.ts) && kept(p.tid))
                .copied()
                .collect(),
            gpus,
            cuda,
            ..self.clone()
        }
    }

    pub fn depth(&self, pid: u32) -> usize {
        let mut depth = 0;
        let mut cur = pid;
        while let Some(p) = self.processes.get(&cur) {
            if self.targets.contains(&cur) || depth > 64 {
                break;
            }
            depth += 1;
            cur = p.ppid;
        }
        depth
    }
}

/// End of the window: the footer's anchor, or the last thing recorded when
/// the recording was cut short.
fn window_end(rec: &Recording, last_event_ns: Option<u64>) -> u64 {
    if let Some(footer) = &rec.footer {
        return footer.end.monotonic_ns;
    }
    let last_event = last_event_ns.unwrap_or(0);
    let last_sample = rec.system.last().map_or(0, |s| s.ts_ns);
    last_event.max(last_sample)
}

/// Process snapshots: the latest per pid wins (exec refreshes the cmdline).
fn initial_processes(rec: &Recording, window_start_ns: u64) -> BTreeMap<u32, Process> {
    let mut out = BTreeMap::new();
    for info in &rec.processes {
        let start_ns = match info.origin {
            Origin::Forked => info.seen_ns,
            Origin::Attached | Origin::Launched => window_start_ns,
        };
        let entry = out.entry(info.pid).or_insert_with(|| Process {
            pid: info.pid,
            ppid: info.ppid,
            comm: info.comm.clone(),
            cmdline: Vec::new(),
            origin: info.origin,
            start_ns,
            exit_ns: None,
            exec_ns: None,
        });
        entry.comm.clone_from(&info.comm);
        entry.cmdline.clone_from(&info.cmdline);
    }
    out
}

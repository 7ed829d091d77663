//! The per-thread state machine: switch-out, wakeup and switch-in events
//! turn into a gapless sequence of [`Interval`]s covering each thread's life
//! in the window.
//!
//! A thread that was already running when recording started has no known
//! state until its first event; that event tells what it was doing before
//! (a switch-out: running; a switch-in: runnable; a wakeup: blocked), so the
//! first interval is filled in backwards from it.
//!
//! A thread with no event in the whole window keeps the state letter /proc
//! showed at attach. A switch-out of a thread that was not running as far
//! as the events tell stands in for the switch-in the kernel did not trace
//! (counted in `untraced_switch_ins`), placed by the kernel's own account
//! of the thread's run where it gave one (`Event::Arrival`; see
//! `Builder::arrival` and `Builder::switch_out`); a switch
//! to a thread of the job that the kernel does not track yet (userspace is
//! still adding the threads found at attach) carries no tgid but is that
//! thread's switch-in.
//!
//! Memory: a thread keeps its intervals as [`Intervals`], the low 32 bits
//! of each start, the high halves once per 4.3 s epoch, and a byte of state
//! and reason: 5 bytes an interval instead of 24. [`Interval`] values are
//! made on the fly. The model holds one to two intervals per event, so this
//! is most of a report's memory.

use foldhash::{HashMap, HashMapExt as _};

use crate::recording::{Event, ThreadInfo};

/// What a thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadState {
    /// On a CPU.
    Running,
    /// Ready to run, waiting for a CPU (preempted, or woken and not yet run).
    Runnable,
    /// Interruptible sleep (S): futex, poll, pipe, nanosleep, …
    Sleeping,
    /// Uninterruptible sleep (D): usually disk IO.
    DiskSleep,
}

/// What sched_switch's `prev_state` says about the task leaving the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchOut {
    /// Still runnable: preempted or yielded (an involuntary switch, as the
    /// kernel's nivcsw counts it).
    Preempted,
    /// Went to sleep (a voluntary switch, nvcsw).
    Blocked(ThreadState),
    /// Exiting (X or Z).
    Dead,
}

impl SwitchOut {
    /// Decoded by the same function the kernel programs use to choose an
    /// off-CPU stack's kind, so the two can never disagree.
    pub fn classify(prev_state: u64) -> SwitchOut {
        use profiler_ebpf::stack_kind;
        match profiler_ebpf::offcpu_reason(prev_state) {
            None => SwitchOut::Dead,
            Some(stack_kind::RUNNABLE) => SwitchOut::Preempted,
            Some(stack_kind::DISK_WAIT) => SwitchOut::Blocked(ThreadState::DiskSleep),
            // S, and the rarer stopped/traced/idle/parked states (OTHER),
            // which are all "not runnable, not holding up IO".
            Some(_) => SwitchOut::Blocked(ThreadState::Sleeping),
        }
    }
}

/// Why a blocked thread waits, found by matching its blocked time against
/// its futex waits and the block IO it submitted (see `reasons`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockReason {
    /// Waiting for a block request it submitted.
    Io,
    /// In a futex wait (a lock, a condition variable, a pool barrier).
    Futex,
    /// Anything else: poll, pipe, socket, nanosleep, a kernel lock.
    Sleep,
}

/// `state` from `start_ns` to `end_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub start_ns: u64,
    pub end_ns: u64,
    pub state: ThreadState,
    /// Set for blocked states only.
    pub reason: Option<BlockReason>,
}

impl Interval {
    pub fn new(start_ns: u64, end_ns: u64, state: ThreadState) -> Interval {
        let reason = match state {
            ThreadState::Running | ThreadState::Runnable => None,
            ThreadState::Sleeping | ThreadState::DiskSleep => Some(BlockReason::Sleep),
        };
        Interval {
            start_ns,
            end_ns,
            state,
            reason,
        }
    }

    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// A thread's intervals, stored the way they are: gapless and in order, so
/// each needs only its start, and a start only its low 32 bits next to its
/// neighbours' (the high half changes every 4.3 s), plus one byte for its
/// state and reason: 5 bytes, where an [`Interval`] is 24. The model holds
/// one or two intervals per event, so they are most of a report's memory.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Intervals {
    /// Low halves of the starts. Interval `i` runs from start `i` to start
    /// `i + 1` (the last one to `end_ns`).
    lows: Vec<u32>,
    kinds: Vec<u8>,
    /// (first index, high half): where the starts' high half changes.
    highs: Vec<(usize, u32)>,
    end_ns: u64,
}

impl Intervals {
    pub fn len(&self) -> usize {
        self.lows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lows.is_empty()
    }

    /// Start of interval `i` (< len).
    fn start(&self, i: usize) -> u64 {
        let epoch = match self.highs.len() {
            1 => 0, // a life under 4.3 s, or one not crossing a boundary
            _ => self.highs.partition_point(|&(first, _)| first <= i) - 1,
        };
        u64::from(self.highs[epoch].1) << 32 | u64::from(self.lows[i])
    }

    /// End of interval `i` (< len).
    fn end(&self, i: usize) -> u64 {
        if i + 1 < self.len() {
            self.start(i + 1)
        } else {
            self.end_ns
        }
    }

    pub fn get(&self, i: usize) -> Option<Interval> {
        if i >= self.len() {
            return None;
        }
        let (state, reason) = unpack(self.kinds[i]);
        Some(Interval {
            start_ns: self.start(i),
            end_ns: self.end(i),
            state,
            reason,
        })
    }

    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    /// The intervals from index `i` on.
    pub fn iter_from(&self, i: usize) -> Iter<'_> {
        let epoch = self.highs.partition_point(|&(first, _)| first <= i);
        Iter {
            ivs: self,
            i,
            epoch: epoch.saturating_sub(1),
        }
    }

    pub fn last(&self) -> Option<Interval> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// How many leading intervals have an end for which `pred` holds
    /// (`pred` must hold for a prefix of the ends, as for
    /// `slice::partition_point`).
    pub fn partition_by_end(&self, pred: impl Fn(u64) -> bool) -> usize {
        // The ends are starts 1.. and then `end_ns`.
        let n = self.count_leading_starts(&pred);
        if n + 1 == self.len() && pred(self.end_ns) {
            self.len()
        } else {
            n
        }
    }

    /// How many of starts 1.. satisfy `pred` (a prefix of them): a search
    /// for the epoch, then one over its low halves.
    fn count_leading_starts(&self, pred: &impl Fn(u64) -> bool) -> usize {
        let len = self.len();
        // Starts 1.. of epoch k: indices [from(k), to(k)).
        let from = |k: usize| self.highs[k].0.max(1).min(len);
        let to = |k: usize| self.highs.get(k + 1).map_or(len, |&(first, _)| first);
        let passes = |k: usize| {
            let (a, b) = (from(k), to(k));
            a >= b || pred(u64::from(self.highs[k].1) << 32 | u64::from(self.lows[b - 1]))
        };
        let mut lo_k = 0;
        let mut hi_k = self.highs.len();
        while lo_k < hi_k {
            let mid = lo_k + (hi_k - lo_k) / 2;
            if passes(mid) {
                lo_k = mid + 1;
            } else {
                hi_k = mid;
            }
        }
        let Some(&(_, high)) = self.highs.get(lo_k) else {
            return len.saturating_sub(1); // every start passes
        };
        let (a, b) = (from(lo_k), to(lo_k));
        let high = u64::from(high) << 32;
        let p = self.lows[a..b].partition_point(|&low| pred(high | u64::from(low)));
        a - 1 + p
    }

    /// Appends `iv`. Intervals are gapless: it starts where the last one
    /// ended (whatever its `start_ns`), and an empty one is left out.
    pub fn push(&mut self, iv: Interval) {
        let start_ns = if self.is_empty() {
            iv.start_ns
        } else {
            self.end_ns
        };
        if iv.end_ns <= start_ns {
            return;
        }
        let high = (start_ns >> 32) as u32;
        if self.highs.last().is_none_or(|&(_, h)| h != high) {
            self.highs.push((self.len(), high));
        }
        self.lows.push(start_ns as u32);
        self.kinds.push(pack(iv.state, iv.reason));
        self.end_ns = iv.end_ns;
    }

    /// Moves the last interval's end to `end_ns` (if later).
    pub fn extend_last(&mut self, end_ns: u64) {
        if !self.is_empty() {
            self.end_ns = self.end_ns.max(end_ns);
        }
    }
}

/// Walks [`Intervals`] in order, following the high halves of the starts
/// instead of searching for each.
pub struct Iter<'a> {
    ivs: &'a Intervals,
    i: usize,
    /// Index into `highs` of the epoch interval `i` is in.
    epoch: usize,
}

impl Iter<'_> {
    /// The high half for index `i`, given that it is in `epoch` or the next.
    fn high(&self, i: usize) -> (usize, u64) {
        let highs = &self.ivs.highs;
        match highs.get(self.epoch + 1) {
            Some(&(first, high)) if first <= i => (self.epoch + 1, u64::from(high) << 32),
            _ => (self.epoch, u64::from(highs[self.epoch].1) << 32),
        }
    }
}

impl Iterator for Iter<'_> {
    type Item = Interval;

    fn next(&mut self) -> Option<Interval> {
        let i = self.i;
        let kind = *self.ivs.kinds.get(i)?;
        let (epoch, high) = self.high(i);
        self.epoch = epoch;
        let start_ns = high | u64::from(self.ivs.lows[i]);
        let end_ns = match self.ivs.lows.get(i + 1) {
            Some(&low) => self.high(i + 1).1 | u64::from(low),
            None => self.ivs.end_ns,
        };
        self.i += 1;
        let (state, reason) = unpack(kind);
        Some(Interval {
            start_ns,
            end_ns,
            state,
            reason,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.ivs.len().saturating_sub(self.i);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Intervals {
    type Item = Interval;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<Interval> for Intervals {
    fn from_iter<I: IntoIterator<Item = Interval>>(iter: I) -> Intervals {
        let mut out = Intervals::default();
        for iv in iter {
            out.push(iv);
        }
        out
    }
}

impl From<Vec<Interval>> for Intervals {
    fn from(v: Vec<Interval>) -> Intervals {
        v.into_iter().collect()
    }
}

impl std::fmt::Debug for Intervals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

const STATES: [ThreadState; 4] = [
    ThreadState::Running,
    ThreadState::Runnable,
    ThreadState::Sleeping,
    ThreadState::DiskSleep,
];
const REASONS: [Option<BlockReason>; 4] = [
    None,
    Some(BlockReason::Io),
    Some(BlockReason::Futex),
    Some(BlockReason::Sleep),
];

/// State in the low two bits, reason in the next two.
fn pack(state: ThreadState, reason: Option<BlockReason>) -> u8 {
    let s = STATES
        .iter()
        .position(|&x| x == state)
        .expect("every state") as u8;
    let r = REASONS
        .iter()
        .position(|&x| x == reason)
        .expect("every reason") as u8;
    s | r << 2
}

fn unpack(kind: u8) -> (ThreadState, Option<BlockReason>) {
    (
        STATES[usize::from(kind & 3)],
        REASONS[usize::from(kind >> 2 & 3)],
    )
}

/// Where a thread's time went within some window, by state (blocked time
/// by reason). The five fields sum to the part of the window it was alive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub on_cpu: u64,
    pub runnable: u64,
    pub io: u64,
    pub futex: u64,
    pub sleep: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.on_cpu + self.runnable + self.io + self.futex + self.sleep
    }

    pub fn blocked(&self) -> u64 {
        self.io + self.futex + self.sleep
    }

    pub fn add(&mut self, other: &Breakdown) {
        self.on_cpu += other.on_cpu;
        self.runnable += other.runnable;
        self.io += other.io;
        self.futex += other.futex;
        self.sleep += other.sleep;
    }

    fn add_interval(&mut self, iv: &Interval, len: u64) {
        let slot = match (iv.state, iv.reason) {
            (ThreadState::Running, _) => &mut self.on_cpu,
            (ThreadState::Runnable, _) => &mut self.runnable,
            (_, Some(BlockReason::Io)) => &mut self.io,
            (_, Some(BlockReason::Futex)) => &mut self.futex,
            _ => &mut self.sleep,
        };
        *slot += len;
    }
}

/// One thread's life in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    pub tid: u32,
    pub pid: u32,
    /// Its latest name.
    pub comm: String,
    /// Earlier names, with the time each was replaced.
    pub renamed_from: Vec<(u64, String)>,
    /// Birth within the window, or the window start.
    pub start_ns: u64,
    /// Exit within the window, or the window end.
    pub end_ns: u64,
    pub exited: bool,
    /// Gapless and ordered, from `start_ns` to `end_ns`.
    pub intervals: Intervals,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl Thread {
    /// Who it is: its tid and when its life in the window began.
    pub fn key(&self) -> super::ThreadKey {
        super::ThreadKey {
            tid: self.tid,
            start_ns: self.start_ns,
        }
    }

    pub fn lifetime_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// Total time in `state`.
    pub fn time_in(&self, state: ThreadState) -> u64 {
        self.intervals
            .iter()
            .filter(|i| i.state == state)
            .map(|i| i.duration_ns())
            .sum()
    }

    /// Where the time in [start_ns, end_ns) went.
    pub fn breakdown(&self, start_ns: u64, end_ns: u64) -> Breakdown {
        let mut out = Breakdown::default();
        let first = self.intervals.partition_by_end(|end| end <= start_ns);
        for iv in self
            .intervals
            .iter_from(first)
            .take_while(|i| i.start_ns < end_ns)
        {
            let len = iv.end_ns.min(end_ns) - iv.start_ns.max(start_ns);
            out.add_interval(&iv, len);
        }
        out
    }

    /// The interval covering `ts`, if the thread was alive then.
    pub fn interval_at(&self, ts: u64) -> Option<Interval> {
        let i = self.intervals.partition_by_end(|end| end <= ts);
        self.intervals.get(i).filter(|iv| iv.start_ns <= ts)
    }
}

/// A thread being built: its record, and its current state since when.
struct Live {
    thread: Thread,
    /// None until the first event tells the state.
    current: Option<(ThreadState, u64)>,
    /// The /proc state letter at attach, for a thread with no events at all.
    attach_state: char,
    /// Order of appearance, so output is stable (a reused tid, even one
    /// born twice at the same time in a damaged recording, is still told apart).
    seq: usize,
}

pub(super) struct Builder {
    window_start_ns: u64,
    live: HashMap<u32, Live>,
    /// Finished threads with their `Live::seq`.
    done: Vec<(usize, Thread)>,
    spawned: usize,
    /// By CPU number: when its last switch event handed it to an untracked
    /// task (None once a tracked task is switched in there). A vector: this
    /// is read and written on every switch event.
    untracked_since: Vec<Option<u64>>,
    /// Switch-outs of threads whose switch-in was never seen.
    untraced_switch_ins: u64,
    /// Of those, the ones placed by the kernel's account of the run
    /// (`Event::Arrival`).
    placed_by_kernel: u64,
}

impl Builder {
    pub(super) fn new(window_start_ns: u64, initial: &[ThreadInfo]) -> Builder {
        let mut b = Builder {
            window_start_ns,
            live: HashMap::new(),
            done: Vec::new(),
            spawned: 0,
            untracked_since: Vec::new(),
            untraced_switch_ins: 0,
            placed_by_kernel: 0,
        };
        for t in initial {
            b.spawn(t.tid, t.pid, &t.comm, window_start_ns, None, t.state);
        }
        b
    }

    /// Applies an event; returns the switch-in it placed where no traced
    /// switch showed one ([`Builder::arrival`], or [`Builder::switch_out`]'s
    /// estimate): (tid, when the thread came back on a CPU). The stack
    /// assembly ends the thread's off-CPU interval there, so its off-CPU
    /// stacks and its scheduler intervals tell the same time.
    pub(super) fn apply(&mut self, event: &Event) -> Option<(u32, u64)> {
        match event {
            Event::Switch {
                ts,
                cpu,
                prev_tid,
                prev_state,
                next_tid,
                next_tgid,
                ..
            } => {
                let cpu = usize::from(*cpu);
                if cpu >= self.untracked_since.len() {
                    self.untracked_since.resize(cpu + 1, None);
                }
                let placed =
                    self.switch_out(*ts, *prev_tid, *prev_state, self.untracked_since[cpu]);
                // A thread of the job that the kernel does not track yet
                // (userspace is still adding the threads it found at
                // attach) comes in with no tgid, but it is the same thread.
                if *next_tgid != 0 || self.live.contains_key(next_tid) {
                    self.switch_in(*ts, *next_tid, *next_tgid);
                    self.untracked_since[cpu] = None;
                } else {
                    self.untracked_since[cpu] = Some(*ts);
                }
                return placed.map(|at| (*prev_tid, at));
            }
            Event::Arrival {
                ts,
                cpu,
                tid,
                run_ns,
                ..
            } => {
                let untracked_since = self.untracked_since.get(usize::from(*cpu)).copied();
                let placed = self.arrival(*ts, *tid, *run_ns, untracked_since.flatten());
                return placed.map(|at| (*tid, at));
            }
            Event::Wakeup { ts, tid, tgid, .. } => self.wakeup(*ts, *tid, *tgid),
            Event::Fork {
                ts,
                child_tid,
                child_tgid,
                comm,
                ..
            } => {
                if let Some(old) = self.live.remove(child_tid) {
                    // The tid was reused: its previous owner's exit was lost.
                    self.retire(old, *ts);
                }
                let state = Some(ThreadState::Runnable);
                self.spawn(*child_tid, *child_tgid, comm, *ts, state, 'R');
            }
            Event::Exec {
                ts,
                tid,
                old_tid,
                comm,
                ..
            } => self.exec(*ts, *tid, *old_tid, comm),
            Event::Exit { ts, tid, .. } => {
                if let Some(mut live) = self.live.remove(tid) {
                    live.thread.exited = true;
                    self.retire(live, *ts);
                }
            }
            Event::Comm {
                ts,
                tid,
                tgid,
                comm,
            } => {
                let live = self.get_or_spawn(*tid, *tgid);
                rename(&mut live.thread, *ts, comm);
            }
            // Not state changes: `reasons` matches them to blocked time.
            Event::BlockIo(_)
            | Event::FutexWait { .. }
            | Event::CudaCall(_)
            | Event::Sample { .. }
            | Event::Mark { .. }
            | Event::Pipe { .. } => {}
        }
        None
    }

    /// How many threads left a CPU without their arrival on it having been
    /// seen (see [`Builder::switch_out`]).
    pub(super) fn untraced_switch_ins(&self) -> u64 {
        self.untraced_switch_ins
    }

    /// How many of [`Builder::untraced_switch_ins`] the kernel's account
    /// of the thread's run placed ([`Builder::arrival`]).
    pub(super) fn placed_by_kernel(&self) -> u64 {
        self.placed_by_kernel
    }

    /// Closes every thread still alive at the window's end.
    pub(super) fn finish(mut self, window_end_ns: u64) -> Vec<Thread> {
        let live: Vec<Live> = self.live.drain().map(|(_, l)| l).collect();
        for l in live {
            self.retire(l, window_end_ns);
        }
        self.done.sort_by_key(|(seq, _)| *seq);
        self.done.into_iter().map(|(_, t)| t).collect()
    }

    fn spawn(
        &mut self,
        tid: u32,
        pid: u32,
        comm: &str,
        start_ns: u64,
        state: Option<ThreadState>,
        attach_state: char,
    ) {
        self.spawned += 1;
        let thread = Thread {
            tid,
            pid,
            comm: comm.to_string(),
            renamed_from: Vec::new(),
            start_ns,
            end_ns: start_ns,
            exited: false,
            intervals: Intervals::default(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        };
        let current = state.map(|s| (s, start_ns));
        self.live.insert(
            tid,
            Live {
                thread,
                current,
                attach_state,
                seq: self.spawned,
            },
        );
    }

    /// When the live thread `tid` began (its key's start), if it is live.
    pub(super) fn start_of(&self, tid: u32) -> Option<u64> {
        self.live.get(&tid).map(|l| l.thread.start_ns)
    }

    /// A thread the kernel tracks but we never saw start (it was created
    /// between the /proc scan and tracking, or its fork event was lost).
    fn get_or_spawn(&mut self, tid: u32, pid: u32) -> &mut Live {
        if !self.live.contains_key(&tid) {
            self.spawn(tid, pid, "", self.window_start_ns, None, 'S');
        }
        self.live.get_mut(&tid).expect("just inserted")
    }

    /// A tracked thread leaves a CPU. If it was not running as far as the
    /// events tell, its switch-in was never seen: the kernel does not trace
    /// a switch away from some tasks (see "Accuracy of the measurements"
    /// in docs/diagnosis.md), or the event was lost. Where the kernel said
    /// how long it ran (`arrival`, just before), it is running by now.
    /// Otherwise (no BTF, an older recording, the event lost) it ran from
    /// the moment this CPU went to an untracked task (`untracked_since`:
    /// the earliest it can have come back, so its running time is high by
    /// whatever else ran there unseen, microseconds on an idle machine,
    /// tens of ms on a loaded one), or, with nothing known of the CPU, it
    /// is given no running time. Returns when it placed such a switch-in.
    fn switch_out(
        &mut self,
        ts: u64,
        tid: u32,
        prev_state: u64,
        untracked_since: Option<u64>,
    ) -> Option<u64> {
        let live = self.live.get_mut(&tid)?;
        let mut placed = None;
        if let Some((state, since)) = live.current
            && state != ThreadState::Running
        {
            self.untraced_switch_ins += 1;
            let resumed = untracked_since.map_or(ts, |t| t.clamp(since, ts));
            transition(live, resumed, state, ThreadState::Running);
            placed = Some(resumed);
        }
        match SwitchOut::classify(prev_state) {
            SwitchOut::Preempted => {
                live.thread.involuntary_switches += 1;
                transition(live, ts, ThreadState::Running, ThreadState::Runnable);
            }
            SwitchOut::Blocked(state) => {
                live.thread.voluntary_switches += 1;
                transition(live, ts, ThreadState::Running, state);
            }
            // The exit event closes the thread; until then it is running.
            SwitchOut::Dead => {}
        }
        placed
    }

    /// A tracked thread is about to leave a CPU that no traced switch put
    /// it on, and the kernel says it ran `run_ns` there (`ArrivalEvent`;
    /// its switch-out follows at the same `ts`). It arrived then, however
    /// long the CPU ran untracked tasks before (a loaded machine runs
    /// others' work there for tens of ms, which `switch_out`'s estimate
    /// would count as this thread's running time). But not before it left
    /// a CPU or was woken (`since`), nor before this CPU last went to an
    /// untracked task: the kernel's figure is the scheduler's since it last
    /// picked the thread, which another scheduling class may not have
    /// updated. A thread whose state is not known yet is left to its
    /// switch-out. Returns when it arrived, where it placed it.
    fn arrival(
        &mut self,
        ts: u64,
        tid: u32,
        run_ns: u64,
        untracked_since: Option<u64>,
    ) -> Option<u64> {
        let live = self.live.get_mut(&tid)?;
        let (state, since) = live.current?;
        if state == ThreadState::Running {
            return None;
        }
        self.untraced_switch_ins += 1;
        self.placed_by_kernel += 1;
        let earliest = untracked_since.map_or(since, |t| t.max(since)).min(ts);
        let arrived = ts.saturating_sub(run_ns).clamp(earliest, ts);
        transition(live, arrived, state, ThreadState::Running);
        Some(arrived)
    }

    fn switch_in(&mut self, ts: u64, tid: u32, tgid: u32) {
        let live = self.get_or_spawn(tid, tgid);
        transition(live, ts, ThreadState::Runnable, ThreadState::Running);
    }

    fn wakeup(&mut self, ts: u64, tid: u32, tgid: u32) {
        let live = self.get_or_spawn(tid, tgid);
        match live.current {
            // Woken while still on a CPU or already queued: nothing changes.
            Some((ThreadState::Running | ThreadState::Runnable, _)) => {}
            _ => transition(live, ts, ThreadState::Sleeping, ThreadState::Runnable),
        }
    }

    fn exec(&mut self, ts: u64, tid: u32, old_tid: u32, comm: &str) {
        if old_tid != tid
            && let Some(mut live) = self.live.remove(&old_tid)
        {
            // A non-leader thread exec'd and took the leader's tid.
            if let Some(old_leader) = self.live.remove(&tid) {
                self.retire(old_leader, ts);
            }
            live.thread.tid = tid;
            self.live.insert(tid, live);
        }
        if let Some(live) = self.live.get_mut(&tid) {
            rename(&mut live.thread, ts, comm);
        }
    }

    /// Ends a thread's life at `end_ns` and files it.
    fn retire(&mut self, mut live: Live, end_ns: u64) {
        let end_ns = end_ns.max(live.thread.start_ns);
        let (state, since) = live.current.unwrap_or_else(|| {
            // No event in the whole window: trust /proc at attach.
            (state_from_letter(live.attach_state), live.thread.start_ns)
        });
        push(&mut live.thread, since, end_ns, state);
        live.thread.end_ns = end_ns;
        self.done.push((live.seq, live.thread));
    }
}

/// Moves `live` to state `to` at `ts`. When its state was unknown, `before`
/// is what the event implies it was doing since the window opened.
fn transition(live: &mut Live, ts: u64, before: ThreadState, to: ThreadState) {
    let (state, since) = live.current.unwrap_or((before, live.thread.start_ns));
    let ts = ts.max(since);
    push(&mut live.thread, since, ts, state);
    live.current = Some((to, ts));
}

/// Appends an interval, merging with the previous one when the state is the same.
fn push(thread: &mut Thread, start_ns: u64, end_ns: u64, state: ThreadState) {
    if end_ns <= start_ns {
        return;
    }
    if let Some(last) = thread.intervals.last()
        && last.state == state
        && last.end_ns == start_ns
    {
        thread.intervals.extend_last(end_ns);
        return;
    }
    thread
        .intervals
        .push(Interval::new(start_ns, end_ns, state));
}

fn rename(thread: &mut Thread, ts: u64, comm: &str) {
    if thread.comm != comm {
        let old = std::mem::replace(&mut thread.comm, comm.to_string());
        if !old.is_empty() {
            thread.renamed_from.push((ts, old));
        }
    }
}

fn state_from_letter(letter: char) -> ThreadState {
    match letter {
        'R' => ThreadState::Running,
        'D' => ThreadState::DiskSleep,
        _ => ThreadState::Sleeping,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(ts: u64, prev: u32, state: u64, next: u32) -> Event {
        switch_on(0, ts, prev, state, next)
    }

    fn switch_on(cpu: u16, ts: u64, prev: u32, state: u64, next: u32) -> Event {
        Event::Switch {
            ts,
            cpu,
            prev_tid: prev,
            prev_tgid: u32::from(prev != 0),
            prev_state: state,
            next_tid: next,
            next_tgid: u32::from(next != 0),
            prev_stacks: None,
        }
    }

    fn wakeup(ts: u64, tid: u32) -> Event {
        Event::Wakeup {
            ts,
            cpu: 0,
            tid,
            tgid: 1,
            waker_tid: 9,
            waker_tgid: 9,
            target_cpu: 0,
            flags: 0,
        }
    }

    fn info(tid: u32, state: char) -> ThreadInfo {
        ThreadInfo {
            tid,
            pid: 1,
            comm: format!("t{tid}"),
            state,
        }
    }

    /// A builder that started from `initial` and has applied `events`.
    fn replay(initial: &[ThreadInfo], events: &[Event]) -> Builder {
        let mut b = Builder::new(0, initial);
        for e in events {
            b.apply(e);
        }
        b
    }

    #[test]
    fn states_follow_switches_and_wakeups() {
        let b = replay(
            &[info(2, 'R')],
            &[
                switch(10, 2, 0x100, 0), // preempted: running since 0
                switch(30, 0, 0, 2),     // back on CPU
                switch(50, 2, 1, 0),     // sleeps
                wakeup(80, 2),
                switch(85, 0, 0, 2),
            ],
        );
        let t = &b.finish(100)[0];
        assert_eq!(t.time_in(ThreadState::Running), 10 + 20 + 15);
        assert_eq!(t.time_in(ThreadState::Runnable), 20 + 5);
        assert_eq!(t.time_in(ThreadState::Sleeping), 30);
        assert_eq!((t.voluntary_switches, t.involuntary_switches), (1, 1));
        let covered: u64 = t.intervals.iter().map(|i| i.end_ns - i.start_ns).sum();
        assert_eq!(covered, t.lifetime_ns());
    }

    #[test]
    fn first_event_fills_the_unknown_prefix() {
        let mut b = Builder::new(0, &[info(2, 'S'), info(3, 'S')]);
        b.apply(&wakeup(40, 2)); // tid 2 was asleep until 40
        b.apply(&switch(60, 0, 0, 3)); // tid 3 was runnable until 60
        let threads = b.finish(100);
        assert_eq!(threads[0].time_in(ThreadState::Sleeping), 40);
        assert_eq!(threads[0].time_in(ThreadState::Runnable), 60);
        assert_eq!(threads[1].time_in(ThreadState::Runnable), 60);
        assert_eq!(threads[1].time_in(ThreadState::Running), 40);
    }

    #[test]
    fn thread_without_events_keeps_its_attach_state() {
        let b = Builder::new(0, &[info(2, 'D')]);
        let t = &b.finish(100)[0];
        assert_eq!(t.time_in(ThreadState::DiskSleep), 100);
    }

    #[test]
    fn fork_exit_and_rename_bound_a_life() {
        let mut b = Builder::new(0, &[]);
        b.apply(&Event::Fork {
            ts: 10,
            parent_tid: 1,
            parent_tgid: 1,
            child_tid: 4,
            child_tgid: 1,
            comm: "python".into(),
        });
        b.apply(&switch(12, 0, 0, 4));
        b.apply(&Event::Comm {
            ts: 13,
            tid: 4,
            tgid: 1,
            comm: "pt_data_worker".into(),
        });
        b.apply(&Event::Exit {
            ts: 20,
            tid: 4,
            tgid: 1,
            group_dead: false,
        });
        let t = &b.finish(100)[0];
        assert_eq!((t.start_ns, t.end_ns, t.exited), (10, 20, true));
        assert_eq!(t.time_in(ThreadState::Runnable), 2);
        assert_eq!(t.time_in(ThreadState::Running), 8);
        assert_eq!(t.comm, "pt_data_worker");
        assert_eq!(t.renamed_from, vec![(13, "python".to_string())]);
    }

    #[test]
    fn intervals_store_every_state_and_reason_and_stay_gapless() {
        let mut all = Vec::new();
        let mut t = 10;
        for state in STATES {
            for reason in REASONS {
                all.push(Interval {
                    start_ns: t,
                    end_ns: t + 5,
                    state,
                    reason,
                });
                t += 5;
            }
        }
        let ivs: Intervals = all.clone().into();
        assert_eq!(ivs.iter().collect::<Vec<_>>(), all);
        assert_eq!(ivs.last(), all.last().copied());
        // A gap closes (the interval starts where the last ended); an
        // empty interval is left out.
        let mut ivs = Intervals::default();
        ivs.push(Interval::new(0, 10, ThreadState::Running));
        ivs.push(Interval::new(15, 20, ThreadState::Sleeping));
        ivs.push(Interval::new(20, 20, ThreadState::Runnable));
        ivs.extend_last(30);
        let got: Vec<(u64, u64)> = ivs.iter().map(|i| (i.start_ns, i.end_ns)).collect();
        assert_eq!(got, vec![(0, 10), (10, 30)]);
    }

    #[test]
    fn partition_by_end_is_slice_partition_point() {
        // Ends either side of 2^32 and 2^33 ns, where starts' high half changes.
        let (a, b) = (1u64 << 32, 1u64 << 33);
        let bounds = [0, 10, a - 5, a, a + 7, b - 1, b + 3, 3 * b];
        let all: Vec<Interval> = bounds
            .windows(2)
            .map(|w| Interval::new(w[0], w[1], ThreadState::Running))
            .collect();
        let ivs: Intervals = all.clone().into();
        assert_eq!(ivs.iter().collect::<Vec<_>>(), all);
        let probes = bounds.iter().flat_map(|&t| [t.saturating_sub(1), t, t + 1]);
        for ts in probes {
            assert_eq!(
                ivs.partition_by_end(|end| end <= ts),
                all.partition_point(|i| i.end_ns <= ts)
            );
            assert_eq!(
                ivs.partition_by_end(|end| end < ts),
                all.partition_point(|i| i.end_ns < ts)
            );
        }
        assert_eq!(Intervals::default().partition_by_end(|_| true), 0);
    }

    #[test]
    fn classifies_prev_state() {
        assert_eq!(SwitchOut::classify(0), SwitchOut::Preempted);
        assert_eq!(SwitchOut::classify(0x100), SwitchOut::Preempted);
        assert_eq!(
            SwitchOut::classify(1),
            SwitchOut::Blocked(ThreadState::Sleeping)
        );
        assert_eq!(
            SwitchOut::classify(2),
            SwitchOut::Blocked(ThreadState::DiskSleep)
        );
        assert_eq!(SwitchOut::classify(0x20), SwitchOut::Dead);
    }

    /// The kernel does not trace the switch from a hidden task back to
    /// thread 2: its next switch-out shows it was running, from when CPU 1
    /// went to the untracked task.
    #[test]
    fn a_switch_in_never_seen_starts_when_the_cpu_left_the_tracked_tasks() {
        let b = replay(
            &[info(2, 'R'), info(3, 'R')],
            &[
                switch_on(1, 10, 2, 0x100, 0), // preempted by an untracked task
                switch_on(0, 20, 3, 0x100, 0), // another CPU: no bearing on thread 2
                switch_on(1, 50, 2, 0x100, 3), // leaves CPU 1: it was back on it
            ],
        );
        assert_eq!(b.untraced_switch_ins(), 1);
        let threads = b.finish(60);
        let t = threads.iter().find(|t| t.tid == 2).unwrap();
        assert_eq!(t.time_in(ThreadState::Running), 10 + 40);
        assert_eq!(t.time_in(ThreadState::Runnable), 10);
    }

    /// The flake of `sched::refused_raw_program_falls_back_to_classic`
    /// (runnable 0.527 s against schedstat's 0.551 s): thread 2 is
    /// preempted on CPU 1, which then runs others' work (a loaded machine)
    /// and, unseen, a task whose switch away the kernel does not trace, to
    /// thread 2 at 46. Its switch-out at 50 comes with the kernel's 4 ns of
    /// run: without it, thread 2 ran from 20, when CPU 1 left the job.
    #[test]
    fn an_unseen_arrival_starts_when_the_kernel_says() {
        let arrival = |ts, run_ns| Event::Arrival {
            ts,
            cpu: 1,
            tid: 2,
            tgid: 1,
            run_ns,
        };
        let events = [
            switch_on(1, 10, 2, 0x100, 3), // preempted by thread 3
            switch_on(1, 20, 3, 0x100, 0), // CPU 1 leaves the job
            arrival(50, 4),
            switch_on(1, 50, 2, 0x100, 0), // leaves CPU 1: it was back on it
        ];
        let ran = |events: &[Event]| {
            let b = replay(&[info(2, 'R'), info(3, 'R')], events);
            assert_eq!(b.untraced_switch_ins(), 1);
            let arrivals = events
                .iter()
                .filter(|e| matches!(e, Event::Arrival { .. }))
                .count();
            assert_eq!(b.placed_by_kernel(), arrivals as u64);
            let threads = b.finish(60);
            let t = threads.iter().find(|t| t.tid == 2).unwrap();
            let covered = t.time_in(ThreadState::Running) + t.time_in(ThreadState::Runnable);
            assert_eq!(covered, 60);
            t.time_in(ThreadState::Running)
        };
        assert_eq!(ran(&events), 10 + 4);
        // The arrival lost: the estimate from the events alone.
        let without: Vec<Event> = events
            .iter()
            .filter(|e| !matches!(e, Event::Arrival { .. }))
            .cloned()
            .collect();
        assert_eq!(ran(&without), 10 + 30);
        // A run longer than the events allow (the scheduling class did not
        // reset the kernel's mark): no earlier than CPU 1 left the job.
        let mut stale = events.clone();
        stale[2] = arrival(50, 45);
        assert_eq!(ran(&stale), 10 + 30);
    }

    /// Where an unseen switch-in was placed is told to the stack assembly
    /// by the event that placed it (the arrival, or the switch-out's
    /// estimate without one), and by no other.
    #[test]
    fn the_event_that_places_an_unseen_switch_in_tells_where() {
        let arrival = Event::Arrival {
            ts: 50,
            cpu: 1,
            tid: 2,
            tgid: 1,
            run_ns: 4,
        };
        let placed = |events: &[Event]| {
            let mut b = Builder::new(0, &[info(2, 'R'), info(3, 'R')]);
            events.iter().map(|e| b.apply(e)).collect::<Vec<_>>()
        };
        let before = [switch_on(1, 10, 2, 0x100, 3), switch_on(1, 20, 3, 0x100, 0)];
        let leaves = switch_on(1, 50, 2, 0x100, 0);
        let with = [&before[..], &[arrival, leaves.clone()]].concat();
        assert_eq!(placed(&with), [None, None, Some((2, 46)), None]);
        let without = [&before[..], &[leaves]].concat();
        assert_eq!(placed(&without), [None, None, Some((2, 20))]);
    }

    /// An arrival for a thread the events already have on a CPU, or whose
    /// state is not known yet (its first switch-out after attach), changes
    /// nothing.
    #[test]
    fn an_arrival_of_a_running_or_unknown_thread_changes_nothing() {
        let arrival = Event::Arrival {
            ts: 50,
            cpu: 1,
            tid: 2,
            tgid: 1,
            run_ns: 5,
        };
        // Running from its switch-in at 10; from the window's start.
        for (events, running) in [
            (
                vec![
                    switch_on(1, 10, 0, 0, 2),
                    arrival.clone(),
                    switch_on(1, 50, 2, 0x100, 0),
                ],
                40,
            ),
            (vec![arrival.clone(), switch_on(1, 50, 2, 0x100, 0)], 50),
        ] {
            let b = replay(&[info(2, 'R')], &events);
            assert_eq!(b.untraced_switch_ins(), 0);
            assert_eq!(b.placed_by_kernel(), 0);
            let t = &b.finish(60)[0];
            assert_eq!(t.time_in(ThreadState::Running), running, "{events:?}");
        }
    }

    /// At attach, the kernel tracks a thread found in /proc only once
    /// userspace has added it; a switch to it before then names no tgid,
    /// but it is still that thread's switch-in.
    #[test]
    fn a_switch_to_a_known_thread_not_yet_tracked_is_its_switch_in() {
        let untracked_next = Event::Switch {
            ts: 20,
            cpu: 1,
            prev_tid: 3,
            prev_tgid: 1,
            prev_state: 0x100,
            next_tid: 2,
            next_tgid: 0,
            prev_stacks: None,
        };
        let b = replay(
            &[info(2, 'R'), info(3, 'R')],
            &[
                switch_on(1, 10, 2, 0x100, 3),
                untracked_next,
                switch_on(1, 50, 2, 1, 3),
            ],
        );
        assert_eq!(b.untraced_switch_ins(), 0);
        let threads = b.finish(60);
        let t = threads.iter().find(|t| t.tid == 2).unwrap();
        assert_eq!(t.time_in(ThreadState::Running), 10 + 30);
        assert_eq!(t.time_in(ThreadState::Runnable), 10);
    }

    /// With nothing known of the CPU before the switch-out, the missed
    /// switch-in is counted but no running time is made up.
    #[test]
    fn a_switch_in_never_seen_on_an_unknown_cpu_adds_no_running_time() {
        let b = replay(
            &[info(2, 'S')],
            &[
                switch_on(0, 10, 2, 1, 0),     // sleeps on CPU 0
                switch_on(1, 50, 2, 0x100, 0), // leaves CPU 1, never seen there
            ],
        );
        assert_eq!(b.untraced_switch_ins(), 1);
        let t = &b.finish(60)[0];
        assert_eq!(t.time_in(ThreadState::Running), 10);
        assert_eq!(t.time_in(ThreadState::Sleeping), 40);
        assert_eq!(t.time_in(ThreadState::Runnable), 10);
    }
}

//! The per-thread state machine: switch-out, wakeup and switch-in events
//! turn into a gapless sequence of [`Interval`]s covering each thread's life
//! in the window.
//!
//! A thread that was already running when recording started has no known
//! state until its first event; that event tells what it was doing before
//! (a switch-out: running; a switch-in: runnable; a wakeup: blocked), so the
//! first interval is filled in backwards from it.

use std::collections::HashMap;

use profiler_ebpf::{PREV_STATE_DEAD, PREV_STATE_PREEMPTED, PREV_STATE_UNINTERRUPTIBLE};

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
    pub fn classify(prev_state: u64) -> SwitchOut {
        if prev_state == 0 || prev_state & PREV_STATE_PREEMPTED != 0 {
            SwitchOut::Preempted
        } else if prev_state & PREV_STATE_DEAD != 0 {
            SwitchOut::Dead
        } else if prev_state & PREV_STATE_UNINTERRUPTIBLE != 0 {
            SwitchOut::Blocked(ThreadState::DiskSleep)
        } else {
            // S, and the rarer stopped/traced/idle/parked states, which are
            // all "not runnable, not holding up IO".
            SwitchOut::Blocked(ThreadState::Sleeping)
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
    pub intervals: Vec<Interval>,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl Thread {
    pub fn lifetime_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// Total time in `state`.
    pub fn time_in(&self, state: ThreadState) -> u64 {
        self.intervals
            .iter()
            .filter(|i| i.state == state)
            .map(Interval::duration_ns)
            .sum()
    }

    /// Where the time in [start_ns, end_ns) went.
    pub fn breakdown(&self, start_ns: u64, end_ns: u64) -> Breakdown {
        let mut out = Breakdown::default();
        let first = self.intervals.partition_point(|i| i.end_ns <= start_ns);
        for iv in self.intervals[first..]
            .iter()
            .take_while(|i| i.start_ns < end_ns)
        {
            let len = iv.end_ns.min(end_ns) - iv.start_ns.max(start_ns);
            out.add_interval(iv, len);
        }
        out
    }

    /// The interval covering `ts`, if the thread was alive then.
    pub fn interval_at(&self, ts: u64) -> Option<&Interval> {
        let i = self.intervals.partition_point(|iv| iv.end_ns <= ts);
        self.intervals.get(i).filter(|iv| iv.start_ns <= ts)
    }

    /// Total time blocked for `reason`.
    pub fn time_blocked_by(&self, reason: BlockReason) -> u64 {
        self.intervals
            .iter()
            .filter(|i| i.reason == Some(reason))
            .map(Interval::duration_ns)
            .sum()
    }
}

/// A thread being built: its record, and its current state since when.
struct Live {
    thread: Thread,
    /// None until the first event tells the state.
    current: Option<(ThreadState, u64)>,
    /// The /proc state letter at attach, for a thread with no events at all.
    attach_state: char,
}

pub(super) struct Builder {
    window_start_ns: u64,
    live: HashMap<u32, Live>,
    done: Vec<Thread>,
    /// Order of first appearance, so output is stable.
    order: Vec<(u32, u64)>,
}

impl Builder {
    pub(super) fn new(window_start_ns: u64, initial: &[ThreadInfo]) -> Builder {
        let mut b = Builder {
            window_start_ns,
            live: HashMap::new(),
            done: Vec::new(),
            order: Vec::new(),
        };
        for t in initial {
            b.spawn(t.tid, t.pid, &t.comm, window_start_ns, None, t.state);
        }
        b
    }

    pub(super) fn apply(&mut self, event: &Event) {
        match event {
            Event::Switch {
                ts,
                prev_tid,
                prev_state,
                next_tid,
                next_tgid,
                ..
            } => {
                self.switch_out(*ts, *prev_tid, *prev_state);
                if *next_tgid != 0 {
                    self.switch_in(*ts, *next_tid, *next_tgid);
                }
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
            Event::BlockIo { .. } | Event::FutexWait { .. } | Event::CudaCall { .. } => {}
        }
    }

    /// Closes every thread still alive at the window's end.
    pub(super) fn finish(mut self, window_end_ns: u64) -> Vec<Thread> {
        let live: Vec<Live> = self.live.drain().map(|(_, l)| l).collect();
        for l in live {
            self.retire(l, window_end_ns);
        }
        let rank: HashMap<(u32, u64), usize> = self
            .order
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, i))
            .collect();
        self.done.sort_by_key(|t| {
            rank.get(&(t.tid, t.start_ns))
                .copied()
                .unwrap_or(usize::MAX)
        });
        self.done
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
        self.order.push((tid, start_ns));
        let thread = Thread {
            tid,
            pid,
            comm: comm.to_string(),
            renamed_from: Vec::new(),
            start_ns,
            end_ns: start_ns,
            exited: false,
            intervals: Vec::new(),
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
            },
        );
    }

    /// A thread the kernel tracks but we never saw start (it was created
    /// between the /proc scan and tracking, or its fork event was lost).
    fn get_or_spawn(&mut self, tid: u32, pid: u32) -> &mut Live {
        if !self.live.contains_key(&tid) {
            self.spawn(tid, pid, "", self.window_start_ns, None, 'S');
        }
        self.live.get_mut(&tid).expect("just inserted")
    }

    fn switch_out(&mut self, ts: u64, tid: u32, prev_state: u64) {
        let Some(live) = self.live.get_mut(&tid) else {
            return;
        };
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
        self.done.push(live.thread);
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
    if let Some(last) = thread.intervals.last_mut()
        && last.state == state
        && last.end_ns == start_ns
    {
        last.end_ns = end_ns;
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
        Event::Switch {
            ts,
            cpu: 0,
            prev_tid: prev,
            prev_tgid: if prev == 0 { 0 } else { 1 },
            prev_state: state,
            next_tid: next,
            next_tgid: if next == 0 { 0 } else { 1 },
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

    #[test]
    fn states_follow_switches_and_wakeups() {
        let mut b = Builder::new(0, &[info(2, 'R')]);
        for e in [
            switch(10, 2, 0x100, 0), // preempted: running since 0
            switch(30, 0, 0, 2),     // back on CPU
            switch(50, 2, 1, 0),     // sleeps
            wakeup(80, 2),
            switch(85, 0, 0, 2),
        ] {
            b.apply(&e);
        }
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
}

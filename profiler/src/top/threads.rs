//! The job's threads as the events leave them: who is alive, in which
//! process, under which name, and in which state (the letter /proc would
//! show). The rolling window keeps one as of its start, so the model of
//! the window knows what a thread that sends no event in it was doing (a
//! thread blocked for the whole window, or one running on a CPU nothing
//! else wants), and a recording file started with `r` opens with the
//! threads alive at that moment, as one made by `tprof record -p` does.

use std::collections::BTreeMap;

use tprof_core::model::{SwitchOut, ThreadState};
use tprof_core::recording::{Event, ThreadInfo};

/// The live threads, by tid.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadTable {
    threads: BTreeMap<u32, ThreadInfo>,
}

impl ThreadTable {
    /// A thread capture found alive (a THREAD record).
    pub(super) fn found(&mut self, info: ThreadInfo) {
        self.threads.insert(info.tid, info);
    }

    /// The threads alive, each with its state letter.
    pub(super) fn infos(&self) -> Vec<ThreadInfo> {
        self.threads.values().cloned().collect()
    }

    pub(super) fn apply(&mut self, event: &Event) {
        match event {
            Event::Fork {
                child_tid,
                child_tgid,
                comm,
                ..
            } => self.set(*child_tid, *child_tgid, Some(comm), 'R'),
            Event::Exit { tid, .. } => {
                self.threads.remove(tid);
            }
            Event::Exec {
                tid, old_tid, comm, ..
            } => {
                // A non-leader thread that exec'd takes the leader's tid.
                if let Some(mut info) = self.threads.remove(old_tid) {
                    info.tid = *tid;
                    self.threads.insert(*tid, info);
                }
                self.rename(*tid, comm);
            }
            Event::Comm { tid, comm, .. } => self.rename(*tid, comm),
            Event::Switch {
                prev_tid,
                prev_state,
                next_tid,
                next_tgid,
                ..
            } => {
                // A switch is sent when either side is tracked: prev is
                // one of ours only if it is known (as for the model).
                if let Some(letter) = letter_after(*prev_state)
                    && let Some(info) = self.threads.get_mut(prev_tid)
                {
                    info.state = letter;
                }
                if *next_tgid != 0 || self.threads.contains_key(next_tid) {
                    self.set(*next_tid, *next_tgid, None, 'R');
                }
            }
            Event::Wakeup { tid, tgid, .. } => self.set(*tid, *tgid, None, 'R'),
            _ => {}
        }
    }

    /// Sets a thread's state, adding it if it is new (a thread the kernel
    /// tracks before userspace saw it start); `pid` 0 keeps what is known.
    fn set(&mut self, tid: u32, pid: u32, comm: Option<&str>, state: char) {
        let info = self.threads.entry(tid).or_insert_with(|| ThreadInfo {
            tid,
            pid,
            comm: String::new(),
            state,
        });
        info.state = state;
        if let Some(comm) = comm {
            info.comm = comm.to_string();
        }
        if info.pid == 0 {
            info.pid = pid;
        }
    }

    fn rename(&mut self, tid: u32, comm: &str) {
        if let Some(info) = self.threads.get_mut(&tid) {
            info.comm = comm.to_string();
        }
    }
}

/// The /proc letter of a thread that just left a CPU: R when preempted, S
/// or D when it went to sleep; None when it is exiting (its exit event
/// removes it).
fn letter_after(prev_state: u64) -> Option<char> {
    match SwitchOut::classify(prev_state) {
        SwitchOut::Preempted => Some('R'),
        SwitchOut::Blocked(ThreadState::DiskSleep) => Some('D'),
        SwitchOut::Blocked(_) => Some('S'),
        SwitchOut::Dead => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(prev: u32, prev_state: u64, next: u32) -> Event {
        Event::Switch {
            ts: 1,
            cpu: 0,
            prev_tid: prev,
            prev_tgid: 10,
            prev_state,
            next_tid: next,
            next_tgid: 10,
            prev_stacks: None,
        }
    }

    fn states(table: &ThreadTable) -> Vec<(u32, char, String)> {
        table
            .infos()
            .into_iter()
            .map(|t| (t.tid, t.state, t.comm))
            .collect()
    }

    /// A switch away from a task that is not the job's (the idle task, a
    /// kernel thread) does not add it.
    #[test]
    fn switches_of_other_tasks_add_nothing() {
        let mut table = ThreadTable::default();
        table.apply(&Event::Switch {
            ts: 1,
            cpu: 0,
            prev_tid: 0,
            prev_tgid: 0,
            prev_state: 0,
            next_tid: 10,
            next_tgid: 10,
            prev_stacks: None,
        });
        assert_eq!(states(&table), [(10, 'R', String::new())]);
    }

    /// Forks add threads, switches and wakeups set their state, renames
    /// and exits follow.
    #[test]
    fn follows_threads_through_their_events() {
        let mut table = ThreadTable::default();
        table.found(ThreadInfo {
            tid: 10,
            pid: 10,
            comm: "python".into(),
            state: 'S',
        });
        table.apply(&Event::Fork {
            ts: 1,
            parent_tid: 10,
            parent_tgid: 10,
            child_tid: 11,
            child_tgid: 10,
            comm: "python".into(),
        });
        // 10 preempted for 11; then 11 sleeps (S = 1) and 10 runs again.
        table.apply(&switch(10, 0, 11));
        assert_eq!(states(&table)[0].1, 'R');
        table.apply(&switch(11, 1, 10));
        table.apply(&Event::Comm {
            ts: 2,
            tid: 11,
            tgid: 10,
            comm: "pt_data_pin".into(),
        });
        assert_eq!(
            states(&table),
            [(10, 'R', "python".into()), (11, 'S', "pt_data_pin".into())]
        );
        table.apply(&Event::Exit {
            ts: 3,
            tid: 11,
            tgid: 10,
            group_dead: false,
        });
        assert_eq!(states(&table).len(), 1);
    }
}

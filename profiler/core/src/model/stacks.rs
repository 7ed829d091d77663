//! The stack table of a format 4 recording, built from its streamed
//! records: on-CPU samples count one each; each switch-out of a tracked
//! thread opens an off-CPU interval, weighed in nanoseconds under its kind
//! and stacks when the thread next runs (or when the window closes), as the
//! kernel's aggregate did in formats 2 and 3. The result is the same
//! [`StackTable`] those formats stored, so analysis reads both alike.

use foldhash::{HashMap, HashMapExt as _};

use crate::recording::{
    Event, Frame, StackDictionary, StackKind, StackSample, StackTable, TimedStack,
    events::OffCpuStacks, stacks::markers,
};

/// (pid, tid, the thread's start, kind, user stack, kernel stack): what one
/// weight is summed by (a reused tid is another thread).
type Key = (u32, u32, u64, StackKind, i32, i32);

/// A sample or off-CPU interval before its (user, kernel) pair has a
/// stack id in the table.
struct Timed {
    start_ns: u64,
    end_ns: u64,
    key: Key,
}

/// Gathers the weights while events stream by.
#[derive(Debug, Default)]
pub(super) struct StackAssembly {
    /// Hashed while events stream by, sorted once at the end (a B-tree
    /// was a few percent of a model's assembly, one search per event).
    weights: HashMap<Key, u64>,
    /// Threads off CPU now: (tid → pid, its start, switch-out time, where
    /// from).
    open: HashMap<u32, (u32, u64, u64, OffCpuStacks)>,
    /// Every sample and closed interval, with its time (24 bytes each).
    timed: Vec<Timed>,
}

impl std::fmt::Debug for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}@{}..{}", self.key, self.start_ns, self.end_ns)
    }
}

impl StackAssembly {
    /// Applies an event; `start_of` gives the live thread of a tid's start
    /// (the model's thread builder knows it).
    pub(super) fn apply(&mut self, event: &Event, start_of: impl Fn(u32) -> u64) {
        match *event {
            Event::Sample {
                ts,
                tid,
                tgid,
                user_stack,
                kernel_stack,
                ..
            } => {
                let key = (
                    tgid,
                    tid,
                    start_of(tid),
                    StackKind::OnCpu,
                    user_stack,
                    kernel_stack,
                );
                self.add(key, 1);
                self.timed.push(Timed {
                    start_ns: ts,
                    end_ns: ts,
                    key,
                });
            }
            Event::Switch {
                ts,
                prev_tid,
                prev_tgid,
                next_tid,
                prev_stacks,
                ..
            } => {
                // The next thread's interval closes first: a thread can be
                // both (a switch from itself to itself is not traced).
                self.close(next_tid, ts);
                match prev_stacks {
                    // A switch-out while one is still open means its
                    // switch-in was not seen and the thread model could
                    // not place it ([`Self::switched_in_unseen`] closes
                    // the others): that interval's end is unknown, so it
                    // is dropped rather than guessed.
                    Some(stacks) => {
                        let start = start_of(prev_tid);
                        self.open.insert(prev_tid, (prev_tgid, start, ts, stacks));
                    }
                    None => {
                        self.open.remove(&prev_tid);
                    }
                }
            }
            Event::Exit { tid, .. } => {
                self.open.remove(&tid);
            }
            _ => {}
        }
    }

    /// A switch-in no traced switch showed, placed at `arrived` by the
    /// thread model (the kernel does not trace a switch away from some
    /// tasks; see docs/diagnosis.md): the thread's off-CPU interval ends
    /// there, as its scheduler intervals say, rather than being dropped at
    /// its next switch-out.
    pub(super) fn switched_in_unseen(&mut self, tid: u32, arrived: u64) {
        self.close(tid, arrived);
    }

    fn close(&mut self, tid: u32, now: u64) {
        if let Some((pid, start, since, stacks)) = self.open.remove(&tid) {
            let key = (pid, tid, start, stacks.kind, stacks.user, stacks.kernel);
            self.add(key, now.saturating_sub(since));
            self.timed.push(Timed {
                start_ns: since,
                end_ns: now.max(since),
                key,
            });
        }
    }

    fn add(&mut self, key: Key, weight: u64) {
        let sum = self.weights.entry(key).or_default();
        *sum = sum.saturating_add(weight);
    }

    /// The table: intervals still open close at `window_end_ns`; each
    /// (user, kernel) pair becomes one stack of user frames, then kernel
    /// frames, as formats 2 and 3 stored them.
    pub(super) fn finish(
        mut self,
        dictionary: &StackDictionary,
        sample_hz: u64,
        window_end_ns: u64,
    ) -> StackTable {
        let open: Vec<u32> = self.open.keys().copied().collect();
        for tid in open {
            self.close(tid, window_end_ns);
        }
        let mut table = StackTable {
            sample_hz,
            ..StackTable::default()
        };
        let mut pairs: HashMap<(i32, i32), u32> = HashMap::new();
        let mut frames = Frames::new(dictionary);
        let mut stack_of = |table: &mut StackTable, user: i32, kernel: i32| {
            let next = table.stacks.len() as u32;
            *pairs.entry((user, kernel)).or_insert_with(|| {
                let ids = frames.joined(&mut table.frames, user, kernel);
                table.stacks.push(ids);
                next
            })
        };
        let mut weights: Vec<(Key, u64)> = self.weights.into_iter().collect();
        weights.sort_unstable_by_key(|(key, _)| *key);
        for ((pid, tid, thread_ns, kind, user, kernel), weight) in weights {
            if weight == 0 {
                continue;
            }
            let stack = stack_of(&mut table, user, kernel);
            table.samples.push(StackSample {
                pid,
                tid,
                thread_ns,
                kind,
                stack,
                weight,
            });
        }
        let mut timed: Vec<TimedStack> = self
            .timed
            .into_iter()
            .filter(|t| t.key.3.is_on_cpu() || t.end_ns > t.start_ns)
            .map(|t| {
                let (pid, tid, thread_ns, kind, user, kernel) = t.key;
                TimedStack {
                    start_ns: t.start_ns,
                    end_ns: t.end_ns,
                    pid,
                    tid,
                    thread_ns,
                    stack: stack_of(&mut table, user, kernel),
                    kind,
                }
            })
            .collect();
        timed.sort_by_key(|t| (t.tid, t.start_ns, t.end_ns));
        table.timed = timed;
        table
    }
}

/// The table's frames: those of the dictionary its stacks use, each
/// copied once, in the order the stacks first use them. A model of a
/// stretch so holds its own frames, not every frame of the recording so
/// far: `tprof top` builds one every second, and the dictionary only grows
/// (each new leaf address of a sample is a frame).
struct Frames<'a> {
    dictionary: &'a StackDictionary,
    /// Dictionary frame id → table frame id.
    ids: HashMap<u32, u32>,
    /// The `[user stack lost]` marker's id, once added.
    lost_user: Option<u32>,
}

impl<'a> Frames<'a> {
    fn new(dictionary: &'a StackDictionary) -> Frames<'a> {
        Frames {
            dictionary,
            ids: HashMap::new(),
            lost_user: None,
        }
    }

    /// A user stack's frames, then a kernel stack's. A user stack that is
    /// missing (the kernel could not take it, or the file does not define
    /// it) becomes one `[user stack lost]` marker, added to `frames` once.
    fn joined(&mut self, frames: &mut Vec<Frame>, user: i32, kernel: i32) -> Vec<u32> {
        let dictionary = self.dictionary;
        let valid = |ids: &[u32]| ids.iter().all(|&f| (f as usize) < dictionary.frames.len());
        let mut out = match dictionary.stack(user).filter(|ids| valid(ids)) {
            Some(ids) if !ids.is_empty() => self.copied(frames, ids),
            _ => {
                let marker = *self.lost_user.get_or_insert_with(|| {
                    frames.push(Frame::marker(markers::USER_STACK_LOST));
                    frames.len() as u32 - 1
                });
                vec![marker]
            }
        };
        if let Some(ids) = dictionary.stack(kernel).filter(|ids| valid(ids)) {
            out.extend(self.copied(frames, ids));
        }
        out
    }

    /// The table's ids of dictionary frames `ids` (all valid), copying
    /// those it does not hold yet.
    fn copied(&mut self, frames: &mut Vec<Frame>, ids: &[u32]) -> Vec<u32> {
        ids.iter()
            .map(|&id| {
                *self.ids.entry(id).or_insert_with(|| {
                    frames.push(self.dictionary.frames[id as usize].clone());
                    frames.len() as u32 - 1
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::FrameKind;

    fn dictionary() -> StackDictionary {
        let frame = |name: &str, kind| Frame {
            module: "m".into(),
            symbol: Some(name.into()),
            kind,
            ..Frame::default()
        };
        StackDictionary {
            frames: vec![
                frame("main", FrameKind::Native),
                frame("work", FrameKind::Native),
                frame("schedule", FrameKind::Kernel),
            ],
            stacks: vec![vec![0, 1], vec![2]],
        }
    }

    fn switch(ts: u64, prev: u32, next: u32, stacks: Option<OffCpuStacks>) -> Event {
        Event::Switch {
            ts,
            cpu: 0,
            prev_tid: prev,
            prev_tgid: 7,
            prev_state: 1,
            next_tid: next,
            next_tgid: 7,
            prev_stacks: stacks,
        }
    }

    fn sample(tid: u32, user: i32, kernel: i32) -> Event {
        Event::Sample {
            ts: 1,
            cpu: 0,
            tid,
            tgid: 7,
            user_stack: user,
            kernel_stack: kernel,
        }
    }

    const SLEEP: OffCpuStacks = OffCpuStacks {
        kind: StackKind::Sleep,
        user: 0,
        kernel: 1,
    };

    #[test]
    fn weighs_samples_and_off_cpu_intervals() {
        let mut asm = StackAssembly::default();
        for event in [
            sample(10, 0, -1),
            sample(10, 0, -1),
            switch(100, 10, 11, Some(SLEEP)),
            switch(350, 11, 10, None),
            // Off again at 400, still off when the window closes at 1000.
            switch(400, 10, 11, Some(SLEEP)),
        ] {
            asm.apply(&event, |_| 0);
        }
        let table = asm.finish(&dictionary(), 99, 1_000);
        assert_eq!(table.sample_hz, 99);
        let weight = |kind| {
            table
                .samples
                .iter()
                .filter(|s| s.tid == 10 && s.kind == kind)
                .map(|s| (table.stacks[s.stack as usize].clone(), s.weight))
                .collect::<Vec<_>>()
        };
        assert_eq!(weight(StackKind::OnCpu), vec![(vec![0, 1], 2)]);
        assert_eq!(weight(StackKind::Sleep), vec![(vec![0, 1, 2], 250 + 600)]);
    }

    #[test]
    fn a_lost_user_stack_is_a_marker_and_bad_ids_are_lost() {
        let mut asm = StackAssembly::default();
        asm.apply(&sample(10, -1, 1), |_| 0);
        asm.apply(&sample(11, 99, -1), |_| 0);
        let table = asm.finish(&dictionary(), 99, 1_000);
        let name = |f: u32| {
            let frame = &table.frames[f as usize];
            match frame.kind {
                FrameKind::Marker => "[marker]".to_string(),
                _ => frame.symbol.clone().unwrap_or_default(),
            }
        };
        let stacks: Vec<Vec<String>> = table
            .samples
            .iter()
            .map(|s| {
                table.stacks[s.stack as usize]
                    .iter()
                    .map(|&f| name(f))
                    .collect()
            })
            .collect();
        assert_eq!(stacks, [vec!["[marker]", "schedule"], vec!["[marker]"]]);
        // One marker, and only the frames the stacks use.
        assert_eq!(table.frames.len(), 2);
    }

    /// A model holds the frames its stacks use, not the whole dictionary:
    /// a live view builds one every second from a dictionary that grows.
    #[test]
    fn the_table_holds_only_the_frames_its_stacks_use() {
        let mut asm = StackAssembly::default();
        asm.apply(&sample(10, 1, -1), |_| 0);
        let table = asm.finish(&dictionary(), 99, 1_000);
        let symbols: Vec<Option<&str>> = table.frames.iter().map(|f| f.symbol.as_deref()).collect();
        assert_eq!(symbols, [Some("schedule")]);
        assert_eq!(table.stacks, [vec![0]]);
    }

    #[test]
    fn an_exit_or_a_missed_switch_in_drops_the_open_interval() {
        let mut asm = StackAssembly::default();
        asm.apply(&switch(100, 10, 0, Some(SLEEP)), |_| 0);
        asm.apply(
            &Event::Exit {
                ts: 200,
                tid: 10,
                tgid: 7,
                group_dead: false,
            },
            |_| 0,
        );
        asm.apply(&switch(300, 11, 0, Some(SLEEP)), |_| 0);
        // 11's switch-in was lost: a second switch-out restarts its interval.
        asm.apply(&switch(500, 11, 0, Some(SLEEP)), |_| 0);
        let table = asm.finish(&dictionary(), 99, 600);
        let weights: Vec<(u32, u64)> = table.samples.iter().map(|s| (s.tid, s.weight)).collect();
        assert_eq!(weights, [(11, 100)]);
    }

    /// The thread model placed 11's unseen switch-in at 450 (the kernel's
    /// account of its run): its off-CPU time ends there, and the next
    /// switch-out opens a new interval.
    #[test]
    fn an_unseen_switch_in_ends_the_open_interval_where_it_was_placed() {
        let mut asm = StackAssembly::default();
        asm.apply(&switch(300, 11, 0, Some(SLEEP)), |_| 0);
        asm.switched_in_unseen(11, 450);
        asm.apply(&switch(500, 11, 0, Some(SLEEP)), |_| 0);
        let table = asm.finish(&dictionary(), 99, 600);
        let spans: Vec<(u64, u64)> = table.timed.iter().map(|t| (t.start_ns, t.end_ns)).collect();
        assert_eq!(spans, [(300, 450), (500, 600)]);
        assert_eq!(table.samples[0].weight, 150 + 100);
    }
}

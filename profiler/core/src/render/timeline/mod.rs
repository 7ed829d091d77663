//! Timelines: every tracked thread's states over time, with the steps of
//! the trainer, data deliveries, block IO and GPU utilization beside them.
//! Three outputs from one input and one layout: [`tracks`] lays the
//! timeline out as tracks into a [`TraceSink`](crate::render::trace::TraceSink)
//! of each format — Chrome trace event JSON
//! ([`chrome`](crate::render::trace::chrome), for chrome://tracing and
//! Perfetto UI), Perfetto's protobuf
//! ([`perfetto`](crate::render::trace::perfetto)) and one self-contained
//! HTML page ([`html`](crate::render::trace::html)).
//!
//! Pure: a [`TimelineInput`] in, bytes out. What a thread's role is, where
//! steps begin and who is to blame for a stall is analysis' business; the
//! renderer only lays it out.
//!
//! Size: a busy job switches threads tens of thousands of times a second,
//! and a viewer that has to load a slice per switch takes minutes or gives
//! up. Runs of slices shorter than [`Limits::min_slice_ns`] are merged into
//! one slice named after the state that dominated it (its args say what it
//! held), and the threshold is raised until the whole timeline fits in
//! [`Limits::max_slices`]. Perfetto's trace is not capped: its viewer loads
//! traces of millions of slices, and the file is written as it is laid out.

pub mod tracks;

pub use tracks::node_name;

pub use crate::analysis::roles::{Role, Roles};
pub use crate::analysis::timeline::{Delivery, Stall, TimelineStep, process_name};
use crate::model::{BlockReason, Interval, Model, Thread, ThreadState};

/// A role as the timeline names it.
pub fn role_label(role: Role) -> &'static str {
    match role {
        Role::Trainer => "trainer",
        Role::DataWorker => "data worker",
        Role::PinMemory => "pin memory",
        Role::Pool => "pool",
        Role::Helper => "helper",
        Role::Other => "other",
    }
}

/// Threads the HTML page folds into their process' busy/runnable counts
/// instead of giving each a lane ([`tracks::SlicePolicy::FitLanes`]).
pub fn folded(role: Role) -> bool {
    matches!(role, Role::Pool | Role::Other)
}

/// How small a timeline must stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Slices shorter than this are merged with their neighbours.
    pub min_slice_ns: u64,
    /// State slices in the whole timeline; the merge threshold is raised
    /// until they fit.
    pub max_slices: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            min_slice_ns: 50_000,
            // About 30 MB of trace event JSON: Perfetto UI and
            // chrome://tracing load that in a few seconds.
            max_slices: 300_000,
        }
    }
}

/// Everything a timeline shows.
pub struct TimelineInput<'a> {
    pub model: &'a Model,
    /// A thread missing here is [`Role::Other`].
    pub roles: &'a Roles,
    pub steps: &'a [TimelineStep],
    pub deliveries: &'a [Delivery],
    /// Worst first; the HTML annotates the first few.
    pub stalls: &'a [Stall],
    /// The phases of the trainer's steps, in time order.
    pub phases: &'a [crate::analysis::timeline::PhaseSlice],
    pub title: String,
    pub limits: Limits,
}

impl<'a> TimelineInput<'a> {
    /// The timeline of a recording's model, its summary and the steps,
    /// deliveries and stalls analysis derived for it.
    pub fn new(
        model: &'a Model,
        summary: &'a crate::analysis::Summary,
        facts: &'a crate::analysis::timeline::TimelineFacts,
        title: String,
        limits: Limits,
    ) -> TimelineInput<'a> {
        TimelineInput {
            model,
            roles: &summary.roles,
            steps: &facts.steps,
            deliveries: &facts.deliveries,
            stalls: &facts.stalls,
            phases: &facts.phases,
            title,
            limits,
        }
    }

    /// A thread's role.
    pub fn role(&self, thread: &Thread) -> Role {
        self.roles.of_thread(thread)
    }

    /// The role of `tid` where no thread is at hand (a process's main
    /// thread by its pid): its latest holder's.
    fn role_of_tid(&self, tid: u32) -> Role {
        self.roles.of(tid)
    }

    /// A process' role: its main thread's, else that of any thread with a
    /// role of its own.
    fn process_role(&self, pid: u32) -> Role {
        match self.role_of_tid(pid) {
            Role::Pool | Role::Other => self
                .model
                .threads
                .iter()
                .filter(|t| t.pid == pid)
                .map(|t| self.role(t))
                .find(|&r| !folded(r))
                .unwrap_or(Role::Other),
            role => role,
        }
    }

    /// `role: name` of a process, or its name alone; the name is its main
    /// thread's latest (a forked worker keeps its parent's name until its
    /// main thread renames itself, as /proc shows it).
    pub fn process_label(&self, pid: u32) -> String {
        let name = process_name(self.model, pid);
        match self.process_role(pid) {
            Role::Other | Role::Pool => name.to_string(),
            // The pin thread lives in the trainer's process.
            Role::PinMemory => format!("trainer: {name}"),
            role => format!("{}: {name}", role_label(role)),
        }
    }

    /// A thread's name, with its role where the name does not say it.
    pub fn thread_label(&self, thread: &Thread) -> String {
        let role = self.role(thread);
        let comm = if thread.comm.is_empty() {
            "?"
        } else {
            &thread.comm
        };
        let says_it = match role {
            Role::Trainer => comm.contains("train"),
            Role::DataWorker => comm.starts_with("pt_data_worker"),
            Role::PinMemory => comm.starts_with("pt_data_pin"),
            Role::Pool | Role::Helper | Role::Other => true,
        };
        if says_it {
            comm.to_string()
        } else {
            format!("{comm} ({})", role_label(role))
        }
    }

    /// Processes in the order they are laid out: the trainer's first, then
    /// by depth in the process tree and pid.
    fn process_order(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.model.threads.iter().map(|t| t.pid).collect();
        pids.extend(self.model.processes.keys());
        pids.sort_unstable();
        pids.dedup();
        let rank = |pid: u32| match self.process_role(pid) {
            Role::Trainer | Role::PinMemory => 0,
            Role::DataWorker => 1,
            _ => 2,
        };
        pids.sort_by_key(|&pid| (rank(pid), self.model.depth(pid), pid));
        pids
    }

    /// Threads of `pid` in lane order: trainer, pin, worker, the rest.
    fn threads_of(&self, pid: u32) -> Vec<&Thread> {
        let mut threads: Vec<&Thread> =
            self.model.threads.iter().filter(|t| t.pid == pid).collect();
        let rank = |t: &Thread| match self.role(t) {
            Role::Trainer => 0,
            Role::PinMemory => 1,
            Role::DataWorker => 2,
            Role::Other | Role::Helper => 3,
            Role::Pool => 4,
        };
        threads.sort_by_key(|t| (rank(t), t.start_ns, t.tid));
        threads
    }
}

/// What a slice shows: the thread state, blocked time split by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SliceKind {
    Running,
    Runnable,
    Io,
    Futex,
    Sleep,
    /// Uninterruptible sleep that is not waiting for the thread's own IO.
    DiskSleep,
}

impl SliceKind {
    pub const ALL: [SliceKind; 6] = [
        SliceKind::Running,
        SliceKind::Runnable,
        SliceKind::Io,
        SliceKind::Futex,
        SliceKind::Sleep,
        SliceKind::DiskSleep,
    ];

    pub fn of(interval: &Interval) -> SliceKind {
        match (interval.state, interval.reason) {
            (ThreadState::Running, _) => SliceKind::Running,
            (ThreadState::Runnable, _) => SliceKind::Runnable,
            (_, Some(BlockReason::Io)) => SliceKind::Io,
            (_, Some(BlockReason::Futex)) => SliceKind::Futex,
            (ThreadState::DiskSleep, _) => SliceKind::DiskSleep,
            (ThreadState::Sleeping, _) => SliceKind::Sleep,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SliceKind::Running => "running",
            SliceKind::Runnable => "runnable",
            SliceKind::Io => "IO",
            SliceKind::Futex => "futex",
            SliceKind::Sleep => "sleep",
            SliceKind::DiskSleep => "sleep (D)",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A run of one thread's time drawn as one slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub start_ns: u64,
    pub end_ns: u64,
    /// How many intervals of the model it holds (1: not merged).
    pub parts: u32,
    /// Time in each [`SliceKind`], by `SliceKind as usize`.
    pub time_by_kind: [u64; 6],
}

impl Slice {
    fn of(interval: &Interval) -> Slice {
        let mut time_by_kind = [0; 6];
        time_by_kind[SliceKind::of(interval).index()] = interval.duration_ns();
        Slice {
            start_ns: interval.start_ns,
            end_ns: interval.end_ns,
            parts: 1,
            time_by_kind,
        }
    }

    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// The state it spent most time in (the earliest kind on a tie).
    pub fn kind(&self) -> SliceKind {
        let mut best = SliceKind::Running;
        for kind in SliceKind::ALL {
            if self.time_by_kind[kind.index()] > self.time_by_kind[best.index()] {
                best = kind;
            }
        }
        best
    }

    /// Appends the slice that follows it.
    fn absorb(&mut self, next: &Slice) {
        debug_assert_eq!(self.end_ns, next.start_ns);
        self.end_ns = next.end_ns;
        self.parts += next.parts;
        for (mine, theirs) in self.time_by_kind.iter_mut().zip(next.time_by_kind) {
            *mine += theirs;
        }
    }

    /// "running 61%, runnable 39%" for a merged slice.
    pub fn mix(&self) -> String {
        let total = self.duration_ns().max(1) as f64;
        let mut parts: Vec<(SliceKind, u64)> = SliceKind::ALL
            .into_iter()
            .map(|k| (k, self.time_by_kind[k.index()]))
            .filter(|&(_, ns)| ns > 0)
            .collect();
        parts.sort_by_key(|&(_, ns)| std::cmp::Reverse(ns));
        parts
            .iter()
            .map(|(k, ns)| match 100.0 * *ns as f64 / total {
                pct if pct < 0.5 => format!("{} <1%", k.name()),
                pct => format!("{} {pct:.0}%", k.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One thread's intervals as slices no shorter than `min_ns`: each run of
/// shorter intervals becomes one slice; a run that is itself shorter joins
/// the slice before it (or after, at the start); neighbours left with the
/// same dominant state are joined. Time is conserved and slices stay
/// gapless and ordered.
pub fn merge_slices(intervals: impl IntoIterator<Item = Interval>, min_ns: u64) -> Vec<Slice> {
    // Long intervals alone, maximal runs of short ones together.
    let mut groups: Vec<(Slice, bool)> = Vec::new();
    for interval in intervals {
        let slice = Slice::of(&interval);
        let short = slice.duration_ns() < min_ns;
        match groups.last_mut() {
            Some((last, true)) if short && last.end_ns == slice.start_ns => last.absorb(&slice),
            _ => groups.push((slice, short)),
        }
    }
    // Runs still too short join a neighbour.
    let mut joined: Vec<Slice> = Vec::with_capacity(groups.len());
    let mut carry: Option<Slice> = None;
    for (mut slice, _) in groups {
        if let Some(before) = carry.take() {
            let mut merged = before;
            merged.absorb(&slice);
            slice = merged;
        }
        if slice.duration_ns() >= min_ns {
            joined.push(slice);
            continue;
        }
        match joined.last_mut() {
            Some(prev) if prev.end_ns == slice.start_ns => prev.absorb(&slice),
            _ => carry = Some(slice),
        }
    }
    // A thread whose whole life is shorter than min_ns.
    joined.extend(carry);
    // Neighbours that now show the same state become one slice.
    let mut out: Vec<Slice> = Vec::with_capacity(joined.len());
    for slice in joined {
        match out.last_mut() {
            Some(prev) if prev.end_ns == slice.start_ns && prev.kind() == slice.kind() => {
                prev.absorb(&slice);
            }
            _ => out.push(slice),
        }
    }
    out
}

/// The merged slices of `threads` (in their order), with the threshold
/// used: the smallest of `limits.min_slice_ns` × 1, 2, 5, 10, 20, … that
/// fits `limits.max_slices`, up to one second.
pub fn fit_slices(threads: &[&Thread], limits: Limits) -> (u64, Vec<Vec<Slice>>) {
    let mut min_ns = limits.min_slice_ns.max(1);
    loop {
        let slices: Vec<Vec<Slice>> = threads
            .iter()
            .map(|t| merge_slices(t.intervals.iter(), min_ns))
            .collect();
        let total: usize = slices.iter().map(Vec::len).sum();
        if total <= limits.max_slices || min_ns >= 1_000_000_000 {
            return (min_ns, slices);
        }
        min_ns = next_step(min_ns);
    }
}

/// 1, 2, 5, 10, 20, 50, … times the same power of ten.
fn next_step(ns: u64) -> u64 {
    let mut scale = 1;
    while ns / scale >= 10 {
        scale *= 10;
    }
    match ns / scale {
        1 => 2 * scale,
        2..=4 => 5 * scale,
        _ => 10 * scale,
    }
}

/// Counters drawn per bin have at most this many bins over the window (and
/// bins of at least 1 ms).
const MAX_BINS: u64 = 10_000;

/// Bins of whole ms, at most [`MAX_BINS`] over the window.
pub(crate) fn bin_ns(duration_ns: u64) -> u64 {
    let ms = duration_ns.div_ceil(MAX_BINS * 1_000_000).max(1);
    ms * 1_000_000
}

/// Adds the time of [start, end) to the bins it overlaps.
pub(crate) fn spread(bins: &mut [u64], start: u64, end: u64, origin: u64, bin_ns: u64) {
    let (start, end) = (start.saturating_sub(origin), end.saturating_sub(origin));
    let mut t = start;
    while t < end {
        let bin = (t / bin_ns) as usize;
        let Some(slot) = bins.get_mut(bin) else {
            return;
        };
        let bin_end = (bin as u64 + 1) * bin_ns;
        let upto = end.min(bin_end);
        *slot += upto - t;
        t = upto;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::Process;
    use crate::recording::Origin;

    pub(crate) fn iv(start: u64, end: u64, state: ThreadState) -> Interval {
        Interval::new(start, end, state)
    }

    pub(crate) fn thread(tid: u32, pid: u32, comm: &str, intervals: Vec<Interval>) -> Thread {
        Thread {
            tid,
            pid,
            comm: comm.to_string(),
            renamed_from: vec![],
            start_ns: intervals.first().map_or(0, |i| i.start_ns),
            end_ns: intervals.last().map_or(0, |i| i.end_ns),
            exited: false,
            intervals: intervals.into(),
            voluntary_switches: 0,
            involuntary_switches: 0,
        }
    }

    pub(crate) fn process(pid: u32, ppid: u32, comm: &str) -> Process {
        Process {
            pid,
            ppid,
            comm: comm.to_string(),
            cmdline: vec![],
            origin: Origin::Launched,
            start_ns: 0,
            exit_ns: None,
            exec_ns: None,
        }
    }

    fn total(slices: &[Slice]) -> u64 {
        slices.iter().map(Slice::duration_ns).sum()
    }

    fn gapless(slices: &[Slice]) -> bool {
        slices.windows(2).all(|w| w[0].end_ns == w[1].start_ns)
    }

    #[test]
    fn long_intervals_stay_as_they_are() {
        use ThreadState::*;
        let ivs = [
            iv(0, 100, Running),
            iv(100, 300, Runnable),
            iv(300, 400, Sleeping),
        ];
        let slices = merge_slices(ivs, 50);
        assert_eq!(slices.len(), 3);
        assert!(slices.iter().all(|s| s.parts == 1));
        assert_eq!(slices[1].kind(), SliceKind::Runnable);
        assert_eq!(slices[2].kind(), SliceKind::Sleep);
    }

    #[test]
    fn runs_of_tiny_slices_merge_into_the_dominant_state() {
        use ThreadState::*;
        // 1000 ns running, then 10 × (7 running, 3 runnable), then sleep.
        let mut ivs = vec![iv(0, 1000, Running)];
        let mut t = 1000;
        for _ in 0..10 {
            ivs.push(iv(t, t + 7, Running));
            ivs.push(iv(t + 7, t + 10, Runnable));
            t += 10;
        }
        // The model never has two running intervals back to back; the
        // first tiny one joins the long one only through merging.
        ivs[1].state = Runnable;
        ivs.push(iv(t, t + 1000, Sleeping));
        let slices = merge_slices(ivs.iter().copied(), 50);
        assert!(gapless(&slices), "{slices:?}");
        assert_eq!(total(&slices), t + 1000);
        // The run of tiny ones (100 ns, mostly running) joins the running
        // slice before it.
        assert_eq!(slices.len(), 2, "{slices:?}");
        assert_eq!(slices[0].kind(), SliceKind::Running);
        assert_eq!(slices[0].parts, 21);
        assert_eq!(slices[0].time_by_kind[SliceKind::Runnable.index()], 37);
        assert!(
            slices[0].mix().starts_with("running 9"),
            "{}",
            slices[0].mix()
        );
        assert_eq!(slices[1].kind(), SliceKind::Sleep);
    }

    #[test]
    fn a_short_run_at_the_start_joins_the_next_slice() {
        use ThreadState::*;
        let ivs = [iv(0, 10, Runnable), iv(10, 500, Running)];
        let slices = merge_slices(ivs, 50);
        assert_eq!(slices.len(), 1);
        assert_eq!((slices[0].start_ns, slices[0].end_ns), (0, 500));
        assert_eq!(slices[0].kind(), SliceKind::Running);
        // A life shorter than the threshold is still one slice.
        let slices = merge_slices([iv(0, 10, Runnable)], 50);
        assert_eq!(slices.len(), 1);
        assert!(merge_slices([], 50).is_empty());
    }

    #[test]
    fn blocked_reasons_are_kinds() {
        let mut io = iv(0, 10, ThreadState::DiskSleep);
        io.reason = Some(BlockReason::Io);
        assert_eq!(SliceKind::of(&io), SliceKind::Io);
        let mut futex = iv(0, 10, ThreadState::Sleeping);
        futex.reason = Some(BlockReason::Futex);
        assert_eq!(SliceKind::of(&futex), SliceKind::Futex);
        let d = iv(0, 10, ThreadState::DiskSleep);
        assert_eq!(SliceKind::of(&d), SliceKind::DiskSleep);
    }

    #[test]
    fn threshold_rises_until_the_slices_fit() {
        use ThreadState::*;
        // Alternating 100 ns running / 20 ns runnable... and 300 ns sleeps.
        let mut ivs = Vec::new();
        let mut t = 0;
        for i in 0..1000u64 {
            let (len, state) = match i % 3 {
                0 => (100, Running),
                1 => (20, Runnable),
                _ => (300, Sleeping),
            };
            ivs.push(iv(t, t + len, state));
            t += len;
        }
        let th = thread(1, 1, "t", ivs);
        let (min_ns, slices) = fit_slices(
            &[&th],
            Limits {
                min_slice_ns: 10,
                max_slices: 100,
            },
        );
        assert!(slices[0].len() <= 100, "{}", slices[0].len());
        assert!(min_ns > 10);
        assert_eq!(total(&slices[0]), t);
        assert_eq!(next_step(50_000), 100_000);
        assert_eq!(next_step(100_000), 200_000);
        assert_eq!(next_step(200_000), 500_000);
    }

    #[test]
    fn spreads_time_over_bins() {
        let mut bins = vec![0; 3];
        spread(&mut bins, 1_500, 3_500, 1_000, 1_000);
        assert_eq!(bins, vec![500, 1000, 500]);
        spread(&mut bins, 3_000, 9_000, 0, 1_000);
        assert_eq!(bins, vec![500, 1000, 500], "past the end: ignored");
        assert_eq!(bin_ns(5_000_000_000), 1_000_000);
        assert_eq!(bin_ns(60_000_000_000), 6_000_000);
    }
}

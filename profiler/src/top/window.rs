//! The rolling window: what capture sent of the last `--window` seconds,
//! decoded, and the model of any stretch of it, built the way `tprof
//! report` builds one (`model::Assembly`, events in timestamp order), so
//! every number the view shows comes from the same analysis as the report.
//!
//! It holds the recording's metadata as one [`Recording`] that lives as
//! long as the view (the header, the GPUs, the stack dictionary, the
//! latest process snapshots, CUDA and step-probe state, the losses), the
//! `/proc/stat` and GPU samples of the window, and its events. Events older
//! than the window are dropped as it moves, each first applied to a
//! [`ThreadTable`], which so describes the threads as the window opens:
//! the model of the window starts from it as a recording starts from the
//! threads found at attach. Memory is the window's events (56 bytes each
//! decoded) and the stack dictionary, which grows as a recording's does.

use std::collections::VecDeque;

use anyhow::{Context as _, Result};
use tprof_core::model::{Assembly, Model};
use tprof_core::recording::{
    ClockAnchor, Event, FORMAT_VERSION, Footer, GpuSeries, ProcessInfo, Recording, SystemSample,
    ThreadInfo,
    events::{Framing, decode_all},
    reader::StreamStats,
    record,
};

use super::threads::ThreadTable;

/// What a model of the window says stopped it (`Model::stop_reason`).
const LIVE: &str = "live";

pub(super) struct Window {
    /// The metadata so far; its `threads`, header start and footer are set
    /// for each model.
    meta: Recording,
    /// The window's events in timestamp order (stable: of equal stamps,
    /// the one that arrived first comes first).
    events: VecDeque<Event>,
    /// The threads as the window opens.
    threads: ThreadTable,
    /// The threads as of a later time (the last recent stretch's start):
    /// moved forward with it, so a frame applies only the events its
    /// stretch moved past, not all of the window's before it.
    later: Option<(u64, ThreadTable)>,
    /// Events older than this are gone.
    start_ns: u64,
    /// Every event stamped before this has arrived.
    watermark_ns: u64,
    have_header: bool,
}

impl Window {
    pub(super) fn new() -> Window {
        Window {
            meta: Recording {
                version: FORMAT_VERSION,
                ..Recording::default()
            },
            events: VecDeque::new(),
            threads: ThreadTable::default(),
            later: None,
            start_ns: 0,
            watermark_ns: 0,
            have_header: false,
        }
    }

    /// The recording's metadata so far.
    pub(super) fn meta(&self) -> &Recording {
        &self.meta
    }

    /// When capture started (CLOCK_MONOTONIC), once the header came.
    pub(super) fn started_ns(&self) -> Option<u64> {
        self.have_header
            .then_some(self.meta.header.start.monotonic_ns)
    }

    pub(super) fn watermark_ns(&self) -> u64 {
        self.watermark_ns
    }

    /// Files a metadata record. Process snapshots replace the pid's
    /// earlier one; threads found alive join the table.
    pub(super) fn record(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
        let bad = || format!("capture sent a bad record of kind {kind}");
        match kind {
            record::PROCESS => {
                let info: ProcessInfo = serde_json::from_slice(payload).with_context(bad)?;
                self.meta.processes.retain(|p| p.pid != info.pid);
                self.meta.processes.push(info);
            }
            record::THREAD => {
                let info: ThreadInfo = serde_json::from_slice(payload).with_context(bad)?;
                self.threads.found(info);
            }
            _ => {
                self.meta
                    .apply_metadata(kind, payload)
                    .map_err(anyhow::Error::msg)
                    .with_context(bad)?;
                if kind == record::HEADER {
                    self.have_header = true;
                    self.start_ns = self.meta.header.start.monotonic_ns;
                    self.watermark_ns = self.start_ns;
                }
            }
        }
        Ok(())
    }

    /// Takes one drain's events (as an EVENTS record holds them).
    pub(super) fn events(&mut self, bytes: &[u8], drained_ns: u64) -> Result<()> {
        let mut batch = Vec::new();
        decode_all(bytes, Framing::Length, &mut batch).context("capture sent a bad event")?;
        self.insert(batch);
        self.watermark_ns = self.watermark_ns.max(drained_ns);
        Ok(())
    }

    /// Files a batch in timestamp order. A drain's events are nearly in
    /// order, and only the last few held can come after its first: those
    /// are merged with it, so a frame never sorts the whole window (which
    /// took 13% of top's CPU at 300,000 events a second).
    fn insert(&mut self, mut batch: Vec<Event>) {
        batch.sort_by_key(Event::ts);
        let Some(first) = batch.first().map(Event::ts) else {
            return;
        };
        if self.events.back().is_none_or(|last| last.ts() <= first) {
            self.events.extend(batch);
            return;
        }
        let at = self.events.partition_point(|e| e.ts() <= first);
        let mut tail: Vec<Event> = self.events.drain(at..).collect();
        tail.extend(batch);
        tail.sort_by_key(Event::ts);
        self.events.extend(tail);
    }

    /// The stamp of the `count`th event before `end_ns` (the window's
    /// start if it holds fewer): where a model of the last `count` events
    /// begins.
    pub(super) fn start_of_last(&self, count: usize, end_ns: u64) -> u64 {
        let end = self.events.partition_point(|e| e.ts() <= end_ns);
        match end.checked_sub(count) {
            Some(at) if count > 0 => self.events[at].ts(),
            Some(_) => end_ns,
            None => self.start_ns,
        }
    }

    /// The model of `[start_ns, end_ns]` (from the window's start at the
    /// earliest), forgetting nothing. `start_ns` should not go back from
    /// one call to the next (it may; it then costs what the first did).
    pub(super) fn model_since(&mut self, start_ns: u64, end_ns: u64) -> Model {
        let start_ns = start_ns.max(self.start_ns);
        let threads = self.threads_at(start_ns);
        self.assemble(start_ns, threads, end_ns)
    }

    /// The threads as of `ns` (at or after the window's start): the later
    /// table moved forward to it, or the opening table when the window has
    /// moved past the later one or `ns` is before it. Every event before
    /// `ns` has arrived (frames wait for the watermark), so none is missed.
    fn threads_at(&mut self, ns: u64) -> Vec<ThreadInfo> {
        if ns <= self.start_ns {
            // The opening table, leaving the later one where it is for
            // the next recent stretch.
            return self.threads.infos();
        }
        let (from, mut table) = match self.later.take() {
            Some((at, table)) if at >= self.start_ns && at <= ns => (at, table),
            _ => (self.start_ns, self.threads.clone()),
        };
        let a = self.events.partition_point(|e| e.ts() < from);
        let b = self.events.partition_point(|e| e.ts() < ns);
        for event in self.events.range(a..b) {
            table.apply(event);
        }
        let infos = table.infos();
        self.later = Some((ns, table));
        infos
    }

    /// The model of `[start_ns, end_ns]` from `threads`, the threads as of
    /// `start_ns`.
    fn assemble(&mut self, start_ns: u64, threads: Vec<ThreadInfo>, end_ns: u64) -> Model {
        let first = self.events.partition_point(|e| e.ts() < start_ns);
        let start = self.anchor(start_ns);
        let end = self.anchor(end_ns.max(start_ns));
        self.meta.header.start = start;
        self.meta.threads = threads;
        self.meta.footer = Some(Footer {
            end,
            stop_reason: LIVE.to_string(),
            command_exit: None,
            clock_sync: None,
        });
        let in_window = self.events.range(first..).take_while(|e| e.ts() <= end_ns);
        let last = in_window.clone().last().map(Event::ts);
        let mut assembly = Assembly::new(&self.meta, last);
        let mut events = 0;
        for event in in_window {
            assembly.apply(event);
            events += 1;
        }
        assembly.finish(StreamStats {
            events,
            late: 0,
            unknown: 0,
        })
    }

    /// The threads alive now (as of the last event that arrived), each in
    /// the state its events left it: a recording file's THREAD records.
    pub(super) fn threads_now(&self) -> Vec<ThreadInfo> {
        let mut table = self.threads.clone();
        for event in &self.events {
            table.apply(event);
        }
        table.infos()
    }

    /// A clock anchor at `monotonic_ns`, by capture's own pairing.
    pub(super) fn anchor(&self, monotonic_ns: u64) -> ClockAnchor {
        let header = self.meta.header.start;
        ClockAnchor {
            monotonic_ns,
            realtime_ns: header.monotonic_to_realtime(monotonic_ns),
            uncertainty_ns: header.uncertainty_ns,
        }
    }

    /// Drops what came before `start_ns`, which must not go back: events
    /// (each applied to the thread table first), samples, and the
    /// snapshots of processes that exited then.
    pub(super) fn forget_before(&mut self, start_ns: u64) {
        let start_ns = start_ns.max(self.start_ns);
        while self.events.front().is_some_and(|e| e.ts() < start_ns) {
            let event = self.events.pop_front().expect("just seen");
            self.threads.apply(&event);
            if let Event::Exit {
                tgid,
                group_dead: true,
                ..
            } = event
            {
                self.meta.processes.retain(|p| p.pid != tgid);
            }
        }
        self.meta
            .system
            .retain(|s: &SystemSample| s.ts_ns >= start_ns);
        for series in &mut self.meta.gpu_series {
            series.points.retain(|&(ts, _)| ts >= start_ns);
        }
        self.meta
            .gpu_series
            .retain(|s: &GpuSeries| !s.points.is_empty());
        self.start_ns = start_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_ebpf::{AbiEvent as _, NO_STACK_KIND, SwitchEvent};
    use tprof_core::recording::{Header, Origin, events::encode};

    const S: u64 = 1_000_000_000;

    fn header_payload(start: u64) -> Vec<u8> {
        let header = Header {
            cores: 2,
            targets: vec![10],
            start: ClockAnchor {
                monotonic_ns: start,
                realtime_ns: start + 7,
                uncertainty_ns: None,
            },
            ..Header::default()
        };
        serde_json::to_vec(&header).unwrap()
    }

    /// tid 10 leaves the CPU at `ts`, preempted (0) or asleep (1), for 11.
    fn switch(ts: u64, prev_state: u32) -> Vec<u8> {
        encode(&SwitchEvent {
            hdr: SwitchEvent::header(ts, 0),
            prev_state,
            prev_kind: NO_STACK_KIND,
            prev_tid: 10,
            prev_tgid: 10,
            next_tid: 11,
            next_tgid: 10,
            prev_user_stack: -1,
            prev_kernel_stack: -1,
        })
    }

    fn window() -> Window {
        let mut w = Window::new();
        w.record(record::HEADER, &header_payload(S)).unwrap();
        let process = ProcessInfo {
            pid: 10,
            ppid: 1,
            comm: "python".into(),
            cmdline: vec![],
            origin: Origin::Attached,
            seen_ns: S,
        };
        w.record(record::PROCESS, &serde_json::to_vec(&process).unwrap())
            .unwrap();
        for tid in [10, 11] {
            let thread = ThreadInfo {
                tid,
                pid: 10,
                comm: "python".into(),
                state: 'R',
            };
            w.record(record::THREAD, &serde_json::to_vec(&thread).unwrap())
                .unwrap();
        }
        w
    }

    /// A thread that went to sleep before the window and sent nothing in
    /// it is asleep in the model of the window, not running as /proc had
    /// it at attach: the table carried its state over.
    #[test]
    fn threads_keep_their_state_from_before_the_window() {
        let mut w = window();
        w.events(&switch(2 * S, 1), 2 * S + 1).unwrap();
        assert_eq!(w.watermark_ns(), 2 * S + 1);
        // The whole stretch: 10 ran until 2 s, then slept.
        let model = w.model_since(S, 4 * S);
        let t10 = model.threads.iter().find(|t| t.tid == 10).unwrap();
        assert_eq!(t10.breakdown(S, 2 * S).on_cpu, S);
        assert_eq!(t10.breakdown(2 * S, 4 * S).on_cpu, 0);
        // From 2.5 s the switch is gone, but not what it did.
        let later = 2 * S + S / 2;
        w.forget_before(later);
        let model = w.model_since(later, 4 * S);
        assert_eq!(model.window_start_ns, later);
        assert!(w.events.is_empty());
        let on_cpu = |tid: u32| {
            let t = model.threads.iter().find(|t| t.tid == tid).unwrap();
            t.breakdown(later, 4 * S).on_cpu
        };
        assert_eq!((on_cpu(10), on_cpu(11)), (0, 4 * S - later));
        assert_eq!(model.processes.len(), 1);
    }

    /// A recent stretch's model carries the threads' states from before
    /// it, the same whether the later table moved forward from an earlier
    /// stretch or was built from the window's opening.
    #[test]
    fn recent_stretches_keep_the_states_before_them() {
        let on_cpu = |m: &Model, tid: u32, a: u64| {
            let t = m.threads.iter().find(|t| t.tid == tid).unwrap();
            t.breakdown(a, 4 * S).on_cpu
        };
        let mut moved = window();
        moved.events(&switch(2 * S, 1), 4 * S).unwrap();
        let mut fresh = window();
        fresh.events(&switch(2 * S, 1), 4 * S).unwrap();
        // Before the switch: 10 runs until 2 s.
        let early = S + S / 2;
        let m = moved.model_since(early, 4 * S);
        assert_eq!(m.window_start_ns, early);
        assert_eq!(on_cpu(&m, 10, early), S / 2);
        // After it, moved forward past the switch, and from scratch.
        let late = 3 * S;
        let (a, b) = (
            moved.model_since(late, 4 * S),
            fresh.model_since(late, 4 * S),
        );
        for m in [&a, &b] {
            assert_eq!((on_cpu(m, 10, late), on_cpu(m, 11, late)), (0, S));
        }
        // Going back costs a rebuild, not the answer.
        let m = moved.model_since(early, 4 * S);
        assert_eq!(on_cpu(&m, 10, early), S / 2);
        // Nothing was forgotten.
        assert_eq!(moved.events.len(), 1);
    }

    /// Batches that overlap in time are merged into one ordered window,
    /// of equal stamps the one that came first first.
    #[test]
    fn overlapping_batches_merge_in_order() {
        let mut w = window();
        let mut drain = |stamps: &[u64]| {
            let bytes: Vec<u8> = stamps.iter().flat_map(|&ts| switch(ts, 0)).collect();
            w.events(&bytes, stamps.iter().max().copied().unwrap_or(0))
                .unwrap();
        };
        drain(&[10 * S, 12 * S, 11 * S]);
        drain(&[11 * S + 1, 14 * S, 13 * S]);
        drain(&[11 * S + 1]);
        let order: Vec<u64> = w.events.iter().map(Event::ts).collect();
        assert_eq!(
            order,
            [
                10 * S,
                11 * S,
                11 * S + 1,
                11 * S + 1,
                12 * S,
                13 * S,
                14 * S
            ]
        );
    }

    /// A model of the last N events begins at the Nth before the end; with
    /// fewer in the window, at its start.
    #[test]
    fn the_last_events_begin_where_they_do() {
        let mut w = window();
        let bytes: Vec<u8> = [2 * S, 3 * S, 4 * S]
            .iter()
            .flat_map(|&ts| switch(ts, 0))
            .collect();
        w.events(&bytes, 4 * S).unwrap();
        assert_eq!(w.start_of_last(2, 4 * S), 3 * S);
        assert_eq!(w.start_of_last(1, 3 * S), 3 * S);
        assert_eq!(w.start_of_last(5, 4 * S), S);
        assert_eq!(w.start_of_last(0, 4 * S), 4 * S);
    }

    #[test]
    fn anchors_follow_the_header_pairing() {
        let w = window();
        let a = w.anchor(5 * S);
        assert_eq!((a.monotonic_ns, a.realtime_ns), (5 * S, 5 * S + 7));
        assert_eq!(w.started_ns(), Some(S));
    }
}

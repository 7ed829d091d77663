//! The view's analysis thread, `tprof-top`: capture's [`Feed`] in, frames
//! out. It owns the [`Window`] and the recording file of `r` ([`Tee`]),
//! both fed in capture's order, so the file starts exactly where the
//! window stood when `r` was pressed.
//!
//! A frame is due once every event of its interval has arrived: when the
//! feed's watermark (the last drain's start) passes the interval's end.
//! Then the model of the recent stretch is built (the report's
//! `Assembly`) and summarized without the anatomy and diagnosis
//! (`analysis::summarize_live`): the thread table, the steps, the disks
//! and the GPUs of the interval. The stretch is the interval and twice the
//! longest step the window's last analysis found before it ([`recent_ns`];
//! a quarter second when a whole window held none): enough that each step
//! ending in the interval is seen whole, and no more, since every event in
//! it is applied again each frame. The whole window's
//! model of the last `--window` and its full analysis
//! (`analysis::summarize`: the leading finding, the roles) are made again
//! once a window has passed since the last, and while the window fills
//! each time it has doubled ([`Analyst::analyse_window`]): the finding of
//! a 10 s window moves little in a second, and that analysis was most of a
//! frame's CPU. On a job so busy that analysing a whole window would take
//! more than [`WINDOW_SHARE`] of a CPU, only as many of its last events as
//! that affords are, at the last analysis's cost per event (the frame's
//! `window` says which stretch).
//! A frame that took longer than an interval does
//! not queue the ones it held up: the next frame is the latest interval
//! the watermark has passed, so the view stays current on a busy machine
//! and the gap shows in the intervals' times.
//!
//! The analysis is held to [`ANALYSIS_SHARE`] of one CPU: a frame that
//! took `c` seconds of this thread's CPU time is followed by none for
//! `c / ANALYSIS_SHARE` seconds, and the frames skipped meanwhile are
//! counted in the next. The cost grows with the window's events: on the
//! test suite's real job (two to four workers, 6,000 to 7,000 events a
//! second) an unoptimized build's frame took 0.03 s with 2 s in the
//! window and 0.45 to 0.8 s with 10 s, so it refreshed every 9 to 16 s
//! once the window was full. A release build analyses about eight times
//! faster (`tprof report` of 26 s of the job: 0.22 s against 1.81 s), so
//! about 0.08 s a frame: a refresh every second or two. (Measured again
//! on 2026-12-05, release build, two workers, 10 s window: a median of
//! 55 ms a frame, 42 ms once the anatomy read each stack's class once
//! rather than per sample, half of it rebuilding the window's model; with
//! the window analysed every 5 s and the recent stretch every second, see
//! docs/benchmarks.md.) A busier job
//! refreshes less often rather than take a core from the job it watches,
//! and each frame is analysed at nice 10 ([`ANALYSIS_NICE`]), not at
//! capture's -10, so that it runs on the CPU the job leaves idle first.

use std::{
    collections::BTreeSet,
    path::PathBuf,
    sync::mpsc::{Receiver, RecvTimeoutError, Sender},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use profiler::capture::live::Feed;
use tprof_core::analysis;

use super::frame::{self, Frame, Span, WindowView};
use super::tee::Tee;
use super::window::Window;

/// What the analysis thread tells the view.
#[derive(Debug)]
pub(super) enum Update {
    Frame(Box<Frame>),
    /// The recording file `r` started (its path) or ended (None).
    Recording(Option<PathBuf>),
    /// One line for the status bar (a recording written, or why not).
    Note(String),
}

/// What the view asks the analysis thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    /// `r`: start a recording file of what follows, or end the one being
    /// written.
    ToggleRecording,
}

/// How often the thread looks at the view's requests while the feed is
/// quiet.
const POLL: Duration = Duration::from_millis(50);

/// The share of one CPU the analysis may take on average: on a job busy
/// enough to reach it, what `top` costs beyond `record`, since capture is
/// the same. 5% until 2026-12-06: on the paced bench (300,000 events a
/// second, both CPUs kept busy) top then cost 3.8 points of the job's
/// throughput more than record, and 1.7 at 2%, five alternating rounds
/// (docs/benchmarks.md); the real job's frames (3 ms a second and a
/// window's 40 ms every 10 s) stay under either, and refresh every second.
pub(super) const ANALYSIS_SHARE: f64 = 0.02;

/// The stretch before an interval's end whose model gives the interval's
/// figures until the window's analysis has found steps (three intervals
/// when they are longer): long enough that the step detector sees the
/// steps that end in the interval whole.
const RECENT: Duration = Duration::from_secs(3);

/// The share of one CPU a window's whole analysis may take, analysed once
/// a window: half of [`ANALYSIS_SHARE`], the frames' own figures the rest.
/// On the real job a window's analysis is a few hundredths of a second and
/// far from it; at 300,000 events a second (the paced bench) it bounds the
/// analysis to the last second or less of the window.
const WINDOW_SHARE: f64 = ANALYSIS_SHARE / 2.0;

/// The least reach before the interval, however short the steps: steps
/// vary, and a stretch that begins mid-step loses that step.
const STEP_MARGIN: Duration = Duration::from_millis(250);

/// The analysis thread's settings.
pub(super) struct Settings {
    pub interval: Duration,
    pub window: Duration,
    /// Where `r` writes; None: a new default name each time.
    pub output: Option<PathBuf>,
    pub force: bool,
}

struct Analyst {
    settings: Settings,
    window: Window,
    tee: Option<Tee>,
    /// The end of the next frame's interval, once capture has started.
    next_end: Option<u64>,
    /// No frame before this: the last one's CPU time is being paid off.
    not_before: Option<Instant>,
    /// The starts of the steps frames have counted, so each is counted
    /// once (within the recent stretch; older ones are forgotten).
    counted_steps: BTreeSet<u64>,
    /// The whole window's last analysis.
    window_view: Option<WindowView>,
    /// When the window is due its next whole analysis.
    window_due_ns: u64,
    /// The CPU seconds the last whole analysis took per event, which
    /// bounds the next one's events ([`WINDOW_SHARE`]).
    window_cost_per_event: Option<f64>,
    seq: u64,
    updates: Sender<Update>,
    requests: Receiver<Request>,
}

/// Starts the thread; it ends when the feed does, with the recording file
/// of `r` finished.
pub(super) fn spawn(
    settings: Settings,
    feed: Receiver<Feed>,
    updates: Sender<Update>,
    requests: Receiver<Request>,
) -> Result<JoinHandle<Result<()>>> {
    let analyst = Analyst {
        settings,
        window: Window::new(),
        tee: None,
        next_end: None,
        not_before: None,
        counted_steps: BTreeSet::new(),
        window_view: None,
        window_due_ns: 0,
        window_cost_per_event: None,
        seq: 0,
        updates,
        requests,
    };
    std::thread::Builder::new()
        .name("tprof-top".into())
        .spawn(move || analyst.run(&feed))
        .context("cannot start the tprof-top thread")
}

impl Analyst {
    fn run(mut self, feed: &Receiver<Feed>) -> Result<()> {
        let result = self.serve(feed);
        // Whatever ended it, a file being written is finished.
        self.end_recording();
        result
    }

    fn serve(&mut self, feed: &Receiver<Feed>) -> Result<()> {
        loop {
            while let Ok(request) = self.requests.try_recv() {
                match request {
                    Request::ToggleRecording => self.toggle_recording(),
                }
            }
            match feed.recv_timeout(POLL) {
                Ok(Feed::End) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Ok(item) => self.take(item)?,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.frame_if_due();
        }
    }

    /// Files one item in the window and in the recording file, if any.
    fn take(&mut self, item: Feed) -> Result<()> {
        let teed = match item {
            Feed::Record { kind, payload } => {
                self.window.record(kind, &payload)?;
                self.tee_with(|tee| tee.record(kind, &payload))
            }
            Feed::Events { bytes, drained_ns } => {
                self.window.events(&bytes, drained_ns)?;
                self.tee_with(|tee| tee.events(&bytes))
            }
            Feed::Flush => self.tee_with(Tee::flush),
            Feed::End => Ok(()),
        };
        if let Err(err) = teed {
            // The view goes on without the file; its prefix stays readable.
            self.tee = None;
            self.say(Update::Note(format!("{err:#}; recording stopped")));
            self.say(Update::Recording(None));
        }
        Ok(())
    }

    fn tee_with(&mut self, write: impl FnOnce(&mut Tee) -> Result<()>) -> Result<()> {
        match &mut self.tee {
            Some(tee) => write(tee),
            None => Ok(()),
        }
    }

    fn toggle_recording(&mut self) {
        if self.tee.is_some() {
            self.end_recording();
            return;
        }
        let Some(_) = self.window.started_ns() else {
            self.say(Update::Note(
                "nothing to record yet: still attaching".into(),
            ));
            return;
        };
        let path = (self.settings.output.clone()).unwrap_or_else(profiler::output::default_path);
        match Tee::start(&path, self.settings.force, &self.window) {
            Ok(tee) => {
                self.say(Update::Recording(Some(tee.path().to_path_buf())));
                self.tee = Some(tee);
            }
            Err(err) => self.say(Update::Note(format!("cannot record: {err:#}"))),
        }
    }

    /// Finishes the file `r` is writing, if any, and says where it is.
    fn end_recording(&mut self) {
        let Some(tee) = self.tee.take() else {
            return;
        };
        let end = self.window.anchor(self.window.watermark_ns());
        let note = match tee.finish(end, &self.window.meta().lost) {
            Ok(path) => format!("recorded to {} (tprof report {0})", path.display()),
            Err(err) => format!("{err:#}"),
        };
        self.say(Update::Note(note));
        self.say(Update::Recording(None));
    }

    /// Makes the latest frame the watermark has passed, if one is due.
    fn frame_if_due(&mut self) {
        let Some(started) = self.window.started_ns() else {
            return;
        };
        let interval = self.settings.interval.as_nanos() as u64;
        let next = *self.next_end.get_or_insert(started + interval);
        let watermark = self.window.watermark_ns();
        if watermark < next || self.not_before.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let end = next + (watermark - next) / interval * interval;
        self.next_end = Some(end + interval);
        self.seq += 1;
        let mut frame = self.frame(Span::new(end - interval, end));
        frame.skipped = (end - next) / interval;
        let rest = frame.analysis_cpu_s / ANALYSIS_SHARE - self.settings.interval.as_secs_f64();
        self.not_before = (rest > 0.0).then(|| Instant::now() + Duration::from_secs_f64(rest));
        self.say(Update::Frame(Box::new(frame)));
    }

    fn frame(&mut self, interval: Span) -> Frame {
        let _nice = Lowered::to(ANALYSIS_NICE);
        let began = thread_cpu_s();
        let end = interval.end_ns;
        let window_ns = self.settings.window.as_nanos() as u64;
        let view = match self.window_view.take() {
            Some(view) if end < self.window_due_ns => view,
            _ => self.analyse_window(end),
        };
        let window_full = self.ran_ns(end) >= window_ns;
        let recent_ns = recent_ns(self.settings.interval, window_full, &view);
        let model = self
            .window
            .model_since(end.saturating_sub(recent_ns.min(window_ns)), end);
        let summary = analysis::summarize_live(&model);
        let counted = &mut self.counted_steps;
        counted.retain(|&start| start >= model.window_start_ns);
        let mut frame = frame::frame(&model, &summary, &view, interval, self.seq, counted);
        self.window_view = Some(view);
        frame.command.clone_from(&self.window.meta().header.command);
        frame.recording = self.tee.as_ref().map(|t| t.path().display().to_string());
        frame.analysis_cpu_s = thread_cpu_s() - began;
        frame
    }

    /// How long capture has run by `end_ns` (0 before its first event).
    fn ran_ns(&self, end_ns: u64) -> u64 {
        self.window
            .started_ns()
            .map_or(0, |s| end_ns.saturating_sub(s))
    }

    /// The whole analysis of the window that ends at `end_ns`: of the last
    /// `--window`, or of as many of its last events as [`WINDOW_SHARE`]
    /// affords at the last analysis's cost per event, on a job so busy
    /// that a whole window would cost more (an interval at least, so that
    /// the cost per event is never measured on so few that the analysis's
    /// fixed costs shrink the next one further). The next is due a window
    /// later (while the window fills, when it has doubled; at least an
    /// interval).
    fn analyse_window(&mut self, end_ns: u64) -> WindowView {
        let window = self.settings.window;
        let start_ns = end_ns.saturating_sub(window.as_nanos() as u64);
        self.window.forget_before(start_ns);
        let affordable = self
            .window_cost_per_event
            .map(|cost| (WINDOW_SHARE * window.as_secs_f64() / cost) as usize);
        let latest_ns = end_ns.saturating_sub(self.settings.interval.as_nanos() as u64);
        let from_ns = affordable.map_or(start_ns, |count| {
            (self.window.start_of_last(count, end_ns)).clamp(start_ns, latest_ns.max(start_ns))
        });
        let began = thread_cpu_s();
        let model = self.window.model_since(from_ns, end_ns);
        let summary = analysis::summarize(&model);
        let spent = thread_cpu_s() - began;
        if model.events > 0 {
            self.window_cost_per_event = Some(spent.max(0.0) / model.events as f64);
        }
        let every = Duration::from_nanos(self.ran_ns(end_ns)).clamp(self.settings.interval, window);
        self.window_due_ns = end_ns + every.as_nanos() as u64;
        WindowView::of(&model, summary)
    }

    /// Tells the view; a view that is gone wants nothing more.
    fn say(&self, update: Update) {
        let _ = self.updates.send(update);
    }
}

/// How far before an interval's end its model reaches: the interval and
/// twice the longest step the window's last analysis found (at least
/// [`STEP_MARGIN`]), so that a step ending in the interval is seen whole
/// even if it is longer than any before it by half; the interval and the
/// margin when a whole window held no step (a job that is not training, or
/// not yet; `window_full`: capture has run a window, however much of it a
/// busy job's analysis modelled); [`RECENT`] or three intervals while the
/// window is younger.
/// The longest, not the median: one slow step (an epoch's workers
/// starting) ending in the interval is what a frame must not lose.
fn recent_ns(interval: Duration, window_full: bool, view: &WindowView) -> u64 {
    let fallback = (3 * interval).max(RECENT);
    let reach = match view.longest_step_ns {
        Some(longest) => (2 * Duration::from_nanos(longest)).max(STEP_MARGIN) + interval,
        None if window_full => STEP_MARGIN + interval,
        None => fallback,
    };
    reach.min(fallback).as_nanos() as u64
}

/// The nice value a frame is analysed at: above the job's, so that on a
/// busy machine the analysis takes the CPU the job leaves idle and the view
/// refreshes later, rather than take it from the job at capture's nice -10
/// (which the thread inherits, and goes back to in order to take in the
/// feed on time).
const ANALYSIS_NICE: i32 = 10;

/// This thread's nice value lowered for a while (Linux nice values are per
/// thread), put back when dropped. Best effort: a priority that cannot be
/// changed leaves the analysis as it was.
struct Lowered {
    before: Option<i32>,
}

impl Lowered {
    fn to(nice: i32) -> Lowered {
        // SAFETY: errno is this thread's; getpriority and setpriority on
        // the calling thread (who 0) take plain integers.
        let before = unsafe {
            *libc::__errno_location() = 0;
            let before = libc::getpriority(libc::PRIO_PROCESS, 0);
            let known = !(before == -1 && *libc::__errno_location() != 0);
            (known && before < nice && libc::setpriority(libc::PRIO_PROCESS, 0, nice) == 0)
                .then_some(before)
        };
        Lowered { before }
    }
}

impl Drop for Lowered {
    fn drop(&mut self) {
        if let Some(before) = self.before {
            // SAFETY: as in `to`.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, before) };
        }
    }
}

/// This thread's CPU time so far, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::frame::Span;

    fn view(longest_step_ns: Option<u64>) -> WindowView {
        WindowView {
            span: Span::new(0, 1_000_000_000),
            finding: None,
            roles: analysis::roles::Roles::default(),
            longest_step_ns,
        }
    }

    /// The stretch reaches twice the longest step before the interval,
    /// a margin at least, and never further than before steps were known;
    /// a whole window without steps needs only the margin.
    #[test]
    fn the_recent_stretch_follows_the_steps() {
        let second = Duration::from_secs(1);
        let ms = |n: u64| n * 1_000_000;
        let reach = |full, longest| recent_ns(second, full, &view(longest));
        assert_eq!(reach(false, None), ms(3_000));
        assert_eq!(reach(true, None), ms(1_250));
        assert_eq!(reach(true, Some(ms(70))), ms(1_250));
        assert_eq!(reach(false, Some(ms(400))), ms(1_800));
        assert_eq!(reach(true, Some(ms(5_000))), ms(3_000));
        let long = Duration::from_secs(2);
        assert_eq!(recent_ns(long, true, &view(Some(ms(5_000)))), ms(6_000));
    }
}

//! When the session's periodic jobs run. Everything capture does while it
//! records is on a timer rather than woken per event, which keeps its cost
//! flat under load (the kernel side submits with BPF_RB_NO_WAKEUP):
//!
//! - every tick ([`DRAIN_EVERY`], 50 ms): drain the ring buffers, re-read
//!   the young processes' maps, flush;
//! - every [`PYTHON_WATCH_EVERY`] (2 ms), while a just started process is
//!   watched: look for its CPython;
//! - every other tick: sample /proc/stat;
//! - every fourth tick, until one is found: look for libtorch in the
//!   targets;
//! - every [`STATUS_EVERY`] (1 s): lost counts, GPU samples, maps, CUDA and
//!   the status line;
//! - every [`EXPIRE_EVERY`] (5 s), or the in-flight expiry when shorter:
//!   drop the requests, bios and CUDA calls whose end will not come.
//!
//! [`Timers`] wakes the session (a timerfd, and a tokio interval for the
//! Python watch); [`Scheduler`] says
//! which of the slower jobs are due at a tick, on plain [`Instant`]s, so
//! the cadence is tested without a runtime.

use std::io;
use std::time::{Duration, Instant};

use tokio::time::{Interval, MissedTickBehavior};

use super::ticker::Ticker;

/// How often the ring buffer is drained and the file flushed.
pub(super) const DRAIN_EVERY: Duration = Duration::from_millis(50);
/// How often a process that just appeared or exec'd is looked at for
/// CPython until found (for how long: the tracker's `PYTHON_WATCH_FOR`).
/// The kernel walks no Python frames before userspace hands it the
/// interpreter, and a switch-out's stacks are taken once, when it begins: a
/// script that blocks 30 ms after exec (in `queue.get()`, say) kept native
/// frames only for the whole wait when the look came with the next 50 ms
/// drain. A python maps its libpython a millisecond after exec and runs
/// its first Python code some ten later.
pub(super) const PYTHON_WATCH_EVERY: Duration = Duration::from_millis(2);
/// How often /proc/stat is sampled (every other drain).
const SAMPLE_EVERY_TICKS: u32 = 2;
/// How often (in drain ticks) the targets are scanned for libtorch until
/// one maps it: every 200 ms.
const TORCH_SCAN_EVERY_TICKS: u32 = 4;
/// How often the status line and the lost counts are refreshed, and the
/// `/proc/<pid>/maps` snapshots of live processes (for dlopen'd libraries,
/// and a CUDA runtime loaded after tracking began). One record per GPU
/// series per second keeps the file small; a killed recording loses at
/// most that second.
pub(super) const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How often the maps of things in flight are checked for entries whose end
/// will not come (reading them costs two system calls per entry), or as
/// often as their expiry age when that is shorter (tests), down to every
/// drain.
const EXPIRE_EVERY: Duration = Duration::from_secs(5);

/// What wakes the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Job {
    /// Look at the watched processes for CPython.
    WatchPython,
    /// A drain tick: drain, then whatever [`Scheduler::due`] says.
    Tick,
}

/// The session's timers: the drain's a timerfd ([`Ticker`], one wakeup
/// a tick), the Python watch's a tokio interval (it runs for a few
/// hundred milliseconds after a process starts).
pub(super) struct Timers {
    drain: Ticker,
    python: Interval,
}

impl Timers {
    /// Both timers, the first tick at once. Inside the runtime only.
    pub(super) fn start() -> io::Result<Timers> {
        let mut python = tokio::time::interval(PYTHON_WATCH_EVERY);
        python.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Timers {
            drain: Ticker::every(DRAIN_EVERY)?,
            python,
        })
    }

    /// Waits for the next job; the Python watch only while `watching`.
    /// The watch goes first: it is the one that must not wait.
    pub(super) async fn next(&mut self, watching: bool) -> io::Result<Job> {
        tokio::select! {
            biased;
            _ = self.python.tick(), if watching => Ok(Job::WatchPython),
            ticked = self.drain.tick() => ticked.map(|_| Job::Tick),
        }
    }

    /// The drain ticks alone, the first at once: while stopping, when the
    /// session waits for a launched command's group to exit.
    pub(super) fn drains() -> io::Result<Ticker> {
        Ticker::every(DRAIN_EVERY)
    }
}

/// Which of the slower jobs are due at a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Due {
    pub expire: bool,
    pub torch_scan: bool,
    pub system_sample: bool,
    pub status: bool,
}

/// The cadence of the jobs that run on some drain ticks only.
pub(super) struct Scheduler {
    ticks: u32,
    expire_every: Duration,
    last_expiry: Instant,
    last_status: Instant,
}

impl Scheduler {
    /// From `now`, expiring things in flight as often as they may get old
    /// (`in_flight_expiry`), between every drain and every
    /// [`EXPIRE_EVERY`].
    pub(super) fn new(in_flight_expiry: Duration, now: Instant) -> Scheduler {
        Scheduler {
            ticks: 0,
            expire_every: in_flight_expiry.clamp(DRAIN_EVERY, EXPIRE_EVERY),
            last_expiry: now,
            last_status: now,
        }
    }

    /// Counts a tick at `now` and says which jobs are due at it.
    pub(super) fn due(&mut self, now: Instant) -> Due {
        let expire = now.duration_since(self.last_expiry) >= self.expire_every;
        if expire {
            self.last_expiry = now;
        }
        self.ticks += 1;
        let status = now.duration_since(self.last_status) >= STATUS_EVERY;
        if status {
            self.last_status = now;
        }
        Due {
            expire,
            torch_scan: self.ticks.is_multiple_of(TORCH_SCAN_EVERY_TICKS),
            system_sample: self.ticks.is_multiple_of(SAMPLE_EVERY_TICKS),
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks 50 ms apart from `start`, with what each found due.
    fn run(scheduler: &mut Scheduler, start: Instant, ticks: u32) -> Vec<Due> {
        (1..=ticks)
            .map(|i| scheduler.due(start + DRAIN_EVERY * i))
            .collect()
    }

    #[test]
    fn samples_every_other_tick_and_looks_for_torch_every_fourth() {
        let start = Instant::now();
        let mut scheduler = Scheduler::new(Duration::from_mins(1), start);
        let due = run(&mut scheduler, start, 8);
        let sampled: Vec<bool> = due.iter().map(|d| d.system_sample).collect();
        let torch: Vec<bool> = due.iter().map(|d| d.torch_scan).collect();
        assert_eq!(
            sampled,
            [false, true, false, true, false, true, false, true]
        );
        assert_eq!(
            torch,
            [false, false, false, true, false, false, false, true]
        );
    }

    #[test]
    fn status_once_a_second() {
        let start = Instant::now();
        let mut scheduler = Scheduler::new(Duration::from_mins(1), start);
        let due = run(&mut scheduler, start, 60);
        let status: Vec<u32> = (1..=60).filter(|&i| due[i as usize - 1].status).collect();
        assert_eq!(status, [20, 40, 60]);
    }

    /// Every 5 s by default; as often as a short expiry age asks, but never
    /// more than once a tick.
    #[test]
    fn expires_every_five_seconds_or_as_often_as_entries_get_old() {
        let start = Instant::now();
        let expired = |expiry: Duration| {
            let mut scheduler = Scheduler::new(expiry, start);
            let due = run(&mut scheduler, start, 200);
            due.iter().filter(|d| d.expire).count()
        };
        assert_eq!(expired(Duration::from_mins(1)), 2);
        assert_eq!(expired(Duration::from_millis(500)), 20);
        assert_eq!(expired(Duration::ZERO), 200);
    }
}

//! What the `tprof top` tests need: the kernel's own per-thread accounting
//! sampled through the frames' intervals ([`SchedSampler`], reading
//! /proc/<tid>/schedstat every few milliseconds with the time on
//! CLOCK_MONOTONIC, the clock tprof's intervals are on), and a terminal
//! the tests can type into and read ([`Tmux`]).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the sampler reads schedstat.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One reading of a thread's schedstat: when, time on a CPU, time waiting
/// on a run queue.
#[derive(Debug, Clone, Copy)]
struct Reading {
    ts: u64,
    on_cpu: u64,
    run_delay: u64,
}

type Readings = BTreeMap<u32, Vec<Reading>>;

/// Reads every thread of some processes' schedstat on a thread of its own
/// until dropped.
pub struct SchedSampler {
    readings: Arc<Mutex<Readings>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SchedSampler {
    pub fn start(pids: Vec<u32>) -> SchedSampler {
        let readings = Arc::new(Mutex::new(Readings::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (into, stopped) = (Arc::clone(&readings), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            on_time();
            while !stopped.load(Ordering::Relaxed) {
                let sample = sample(&pids);
                let mut readings = into.lock().unwrap();
                for (tid, reading) in sample {
                    readings.entry(tid).or_default().push(reading);
                }
                drop(readings);
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        SchedSampler {
            readings,
            stop,
            thread: Some(thread),
        }
    }

    /// `tid`'s on-CPU and run-queue shares of `[start_ns, end_ns]`, in
    /// percent; None when the readings do not cover the stretch.
    ///
    /// On-CPU time is read between the readings around each end. Run
    /// delay is not: the kernel adds a wait for a CPU to it when the wait
    /// ends (sched_info_arrive), so a wait across an end would count
    /// wholly on one side. Each increase is spread back over the wait it
    /// stands for, which ended between the two readings that show it.
    pub fn shares(&self, tid: u32, start_ns: u64, end_ns: u64) -> Option<(f64, f64)> {
        let readings = self.readings.lock().unwrap();
        let r = readings.get(&tid)?;
        let on_cpu = on_cpu_at(r, end_ns)? - on_cpu_at(r, start_ns)?;
        let waited = run_delay_within(r, start_ns, end_ns)?;
        let len = (end_ns - start_ns) as f64;
        Some((100.0 * on_cpu / len, 100.0 * waited / len))
    }
}

impl SchedSampler {
    /// `tid`'s readings from a little before `start_ns` to a little after
    /// `end_ns`, relative to `start_ns`, for a failure's message.
    pub fn readings(&self, tid: u32, start_ns: u64, end_ns: u64) -> String {
        let margin = 300_000_000;
        let readings = self.readings.lock().unwrap();
        readings
            .get(&tid)
            .into_iter()
            .flatten()
            .filter(|r| r.ts + margin >= start_ns && r.ts <= end_ns + margin)
            .map(|r| {
                let at_ms = (r.ts as f64 - start_ns as f64) / 1e6;
                format!(
                    "{at_ms:8.1} ms: on-CPU {} run delay {}\n",
                    r.on_cpu, r.run_delay
                )
            })
            .collect()
    }
}

impl Drop for SchedSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Puts the calling thread in the real-time class: on a machine the job
/// (and the others' builds) keep busy, a sampler at normal priority waits
/// tens of milliseconds for a CPU, and where a wait ended between two
/// readings gets as uncertain. Reading the job's schedstat files takes
/// well under a millisecond every [`SAMPLE_EVERY`].
fn on_time() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: param is a valid sched_param; 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) };
    assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
}

/// On-CPU time at `ts`, between the readings around it.
fn on_cpu_at(readings: &[Reading], ts: u64) -> Option<f64> {
    let after = readings.partition_point(|r| r.ts < ts);
    let (a, b) = (readings.get(after.checked_sub(1)?)?, readings.get(after)?);
    let f = (ts - a.ts) as f64 / (b.ts - a.ts).max(1) as f64;
    Some(a.on_cpu as f64 + f * (b.on_cpu as f64 - a.on_cpu as f64))
}

/// Time waited for a CPU within `[start, end]`: each increase of the run
/// delay is a wait that ended halfway between its two readings, and is
/// counted for the part of it inside the stretch. None unless the readings
/// reach past both ends.
fn run_delay_within(readings: &[Reading], start: u64, end: u64) -> Option<f64> {
    if readings.first()?.ts > start || readings.last()?.ts < end {
        return None;
    }
    let waited = readings
        .windows(2)
        .filter(|w| w[1].run_delay > w[0].run_delay)
        .map(|w| {
            let ended = w[0].ts + (w[1].ts - w[0].ts) / 2;
            let began = ended.saturating_sub(w[1].run_delay - w[0].run_delay);
            ended.min(end).saturating_sub(began.max(start))
        })
        .sum::<u64>();
    Some(waited as f64)
}

/// One reading of every thread of `pids`, each stamped as it is read.
fn sample(pids: &[u32]) -> Vec<(u32, Reading)> {
    let mut out = Vec::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let ts = monotonic_ns();
            let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
            if let (Some(Some(on_cpu)), Some(Some(run_delay))) = (fields.next(), fields.next()) {
                out.push((
                    tid,
                    Reading {
                        ts,
                        on_cpu,
                        run_delay,
                    },
                ));
            }
        }
    }
    out
}

/// A tmux session running one command in a pane of a given size. Dropped,
/// it kills the session and makes sure the command is gone: tmux hangs up
/// its terminal, which must end it; one still there after
/// [`HANGUP_GRACE`] is killed, so a failing test leaves nothing running.
pub struct Tmux {
    name: String,
    /// The pane's process (the command) and its start time, so that a pid
    /// the kernel reused is never killed.
    pane: Option<(i32, u64)>,
}

/// How long a command gets to exit once its terminal hung up.
pub const HANGUP_GRACE: Duration = Duration::from_secs(10);

/// Tells the sessions of one test binary apart.
static SESSIONS: AtomicU64 = AtomicU64::new(0);

impl Tmux {
    /// Starts `command` (run by tmux directly, not through a shell, so the
    /// pane's process is the command's) in a detached `width`×`height`
    /// session, with `env` set for it.
    pub fn start(command: &[&str], width: u16, height: u16, env: &[(&str, &str)]) -> Tmux {
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let name = format!("tprof-test-{}-{n}", std::process::id());
        let _ = tmux(&["kill-session", "-t", &name]);
        let (w, h) = (width.to_string(), height.to_string());
        let mut args = vec!["new-session", "-d", "-s", &name, "-x", &w, "-y", &h];
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for e in &env {
            args.extend(["-e", e.as_str()]);
        }
        args.extend(command);
        let out = tmux(&args);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            crate::show(&out)
        );
        let mut session = Tmux { name, pane: None };
        // The pane must outlive the command, to be read after it.
        let out = tmux(&["set-option", "-t", &session.name, "remain-on-exit", "on"]);
        assert!(
            out.status.success(),
            "tmux set-option: {}",
            crate::show(&out)
        );
        let pid = session.pid();
        session.pane = start_time(pid).map(|start| (pid, start));
        session
    }

    /// The pid of the pane's process: the command.
    pub fn pid(&self) -> i32 {
        if let Some((pid, _)) = self.pane {
            return pid;
        }
        let out = tmux(&["display-message", "-p", "-t", &self.name, "#{pane_pid}"]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("tmux pane_pid: {}", crate::show(&out)))
    }

    /// Kills the session (its terminal hangs up), as closing the window
    /// running the command would.
    pub fn kill(&self) {
        let _ = tmux(&["kill-session", "-t", &self.name]);
    }

    /// What the pane shows, as text; with `escapes`, with its colours and
    /// attributes as escape sequences.
    pub fn screen(&self, escapes: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", &self.name];
        if escapes {
            args.push("-e");
        }
        let out = tmux(&args);
        assert!(
            out.status.success(),
            "tmux capture-pane: {}",
            crate::show(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `key` (tmux's key names: `q`, `Space`, `C-c`).
    pub fn send(&self, key: &str) {
        let out = tmux(&["send-keys", "-t", &self.name, key]);
        assert!(
            out.status.success(),
            "tmux send-keys: {}",
            crate::show(&out)
        );
    }

    pub fn resize(&self, width: u16, height: u16) {
        let (w, h) = (width.to_string(), height.to_string());
        let out = tmux(&["resize-window", "-t", &self.name, "-x", &w, "-y", &h]);
        assert!(
            out.status.success(),
            "tmux resize-window: {}",
            crate::show(&out)
        );
    }

    /// Waits until the screen holds `needle`, and returns it; panics with
    /// the screen after `timeout`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen(false);
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} never showed in {timeout:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.kill();
        let Some((pid, start)) = self.pane else {
            return;
        };
        // tmux reaps the pane's process, or init once the server is gone.
        let deadline = Instant::now() + HANGUP_GRACE;
        while alive_as(pid, start) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive_as(pid, start) {
            eprintln!(
                "the command of tmux session {} outlived it: killed",
                self.name
            );
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A process's start time (clock ticks after boot), from /proc/PID/stat.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the fields after the name begin at the state, field 3.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether `pid` is still the process that started at `start`, and not a
/// zombie waiting to be reaped.
pub fn alive_as(pid: i32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields.first() != Some(&"Z") && fields.get(19).and_then(|f| f.parse().ok()) == Some(start)
}

fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("run tmux (install it with `cargo xtask setup`)")
}

//! `tprof top`, the live view, on the suite's real PyTorch job: in tmux
//! (keys typed with send-keys, the screen read with capture-pane) and in
//! batch mode as JSON lines, each frame checked against oracles over the
//! frame's own interval: the kernel's schedstat for every thread's on-CPU
//! and runnable shares (sampled every 10 ms on CLOCK_MONOTONIC, the clock
//! the frames' intervals are on), the job's own iterations for the steps
//! per second, its own account of its workers and pin-memory thread for
//! the roles. Then `r` must leave a recording `tprof report` reads, and
//! `q` no program loaded. Plain-text batch frames, a launched command and
//! NO_COLOR on a C workload.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tprof_tests::{
    HeldJob, JobConfig, RealJob, Running, SchedSampler, Threads, Tmux, alive_as,
    assert_programs_unloaded, bpf_program_ids_held_by, build_workload, close_to, report_json,
    require_root, start_time, tprof, tprof_bin,
};

/// Frames read in batch mode.
const FRAMES: u64 = 6;
/// How far tprof's share of an interval may be from schedstat's, in
/// points (the issue's bound).
const SHARE_POINTS: f64 = 5.0;
/// tprof attaching to the job (libtorch's symbols are read first) and a
/// frame on a loaded machine.
const ATTACH_TIMEOUT: Duration = Duration::from_mins(2);
const FRAME_TIMEOUT: Duration = Duration::from_mins(1);

fn job() -> Option<RealJob> {
    require_root();
    RealJob::find()
}

/// Two persistent workers with one thread per pool and pin_memory: a job
/// that keeps up on two cores, with every role the view groups by: the
/// trainer, its pin-memory thread, the workers. Iterations enough to
/// outlast the test; it stops the job.
fn config() -> JobConfig {
    JobConfig::new(2, Threads::One)
        .persistent_workers(true)
        .pin_memory(true)
        .iterations(100_000)
}

/// The job's processes: the trainer's and its workers'.
fn pids(held: &HeldJob) -> Vec<u32> {
    let mut pids = vec![held.pid()];
    pids.extend(&held.ready.worker_pids);
    pids
}

/// `tprof top --json` frames, checked against schedstat over each frame's
/// interval, the job's iterations and its roles, also once the window has
/// moved past the start.
#[test]
fn json_frames_match_schedstat_steps_and_roles() {
    let Some(real) = job() else { return };
    let held = real.start_held(&config());
    let sampler = SchedSampler::start(pids(&held));
    let pid = held.pid().to_string();
    let n = FRAMES.to_string();
    // A window shorter than the frames read, so it moves on and what left
    // it is forgotten.
    let args = ["top", "-p", &pid, "--json", "-n", &n, "--window", "3s"];
    let mut top = Running::spawn(tprof().args(args));
    top.wait_for_stderr("watching", ATTACH_TIMEOUT);
    held.go();
    let frames: Vec<Value> = (0..FRAMES)
        .map(|_| {
            let line = top.next_stdout_line(FRAME_TIMEOUT);
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("frame {line:?}: {e}"))
        })
        .collect();
    let done = top.wait(FRAME_TIMEOUT);
    assert!(done.status.success(), "tprof top --json: {done:#?}");
    assert!(done.stderr.contains("stopped (quit)"), "{}", done.stderr);
    let iterations = held.iterations();
    let first = iterations.first().expect("the job ran timed iterations");
    // Frames wholly within the timed iterations (and not the first, whose
    // interval began at attach).
    let timed: Vec<&Value> = frames
        .iter()
        .filter(|f| f["seq"].as_u64() > Some(1) && start(f) >= first.start_ns)
        .collect();
    assert!(timed.len() >= 2, "too few frames to check: {frames:#?}");
    let mut missed = 0;
    for frame in &timed {
        check_json_shares(frame, &sampler, &mut missed);
        check_json_roles(frame, &held);
    }
    check_steps(&timed, &held);
}

fn start(frame: &Value) -> u64 {
    frame["interval"]["start_ns"]
        .as_u64()
        .expect("interval.start_ns")
}

fn end(frame: &Value) -> u64 {
    frame["interval"]["end_ns"]
        .as_u64()
        .expect("interval.end_ns")
}

/// Every thread schedstat saw through the interval: on-CPU and runnable
/// within [`SHARE_POINTS`] of the kernel's.
fn check_json_shares(frame: &Value, sampler: &SchedSampler, missed: &mut usize) {
    let threads = frame["threads"].as_array().expect("threads");
    let mut checked = 0;
    for t in threads {
        let tid = t["tid"].as_u64().expect("tid") as u32;
        let Some((kernel_on_cpu, kernel_runnable)) = sampler.shares(tid, start(frame), end(frame))
        else {
            continue;
        };
        let shown = |field: &str| t[field].as_f64().expect("a share");
        let compared = Compared {
            tid,
            on_cpu: shown("on_cpu_pct"),
            runnable: shown("runnable_pct"),
            kernel_on_cpu,
            kernel_runnable,
        };
        let context = format!(
            "{t:#}\nschedstat:\n{}",
            sampler.readings(tid, start(frame), end(frame))
        );
        compared.check(missed, &context);
        checked += 1;
    }
    assert!(
        checked >= 3,
        "schedstat covered {checked} threads: {frame:#}"
    );
}

/// Thread-intervals (of a test) that may show a wait for a CPU as sleep: a
/// wakeup the kernel ran no program for. The development VM's kernel runs
/// none in a softirq on top of the sandbox's own threads
/// (docs/diagnosis.md, "Accuracy of the measurements"); a timer's wakeup
/// of a thread that then waited long for a CPU showed as such a miss in 3
/// of about 15 runs, one thread-interval each, every other share within a
/// point or two.
const MISSED_WAKEUPS_ALLOWED: usize = 1;

/// A thread's shares of one interval, in tprof top and in schedstat.
struct Compared {
    tid: u32,
    on_cpu: f64,
    runnable: f64,
    kernel_on_cpu: f64,
    kernel_runnable: f64,
}

impl Compared {
    /// Within [`SHARE_POINTS`], or the one known miss (counted in
    /// `missed`): on-CPU right, a wait for a CPU counted as sleep.
    fn check(&self, missed: &mut usize, context: &dyn std::fmt::Display) {
        let tid = self.tid;
        // Seen with --nocapture: how close, not only that it was.
        eprintln!(
            "thread {tid}: on-CPU {:.1}% (schedstat {:.1}%), runnable {:.1}% (schedstat {:.1}%)",
            self.on_cpu, self.kernel_on_cpu, self.runnable, self.kernel_runnable
        );
        let near = |a: f64, b: f64| (a - b).abs() <= SHARE_POINTS;
        assert!(
            near(self.on_cpu, self.kernel_on_cpu),
            "thread {tid}: on-CPU {:.1}% in tprof top, {:.1}% in schedstat over the same \
             interval\n{context}",
            self.on_cpu,
            self.kernel_on_cpu
        );
        if near(self.runnable, self.kernel_runnable) {
            return;
        }
        let missed_wakeup = self.runnable < self.kernel_runnable;
        if missed_wakeup {
            *missed += 1;
            eprintln!("thread {tid}: a wait for a CPU shown as sleep (a missed wakeup)");
        }
        assert!(
            missed_wakeup && *missed <= MISSED_WAKEUPS_ALLOWED,
            "thread {tid}: runnable {:.1}% in tprof top, {:.1}% in schedstat over the same \
             interval ({} such intervals)\n{context}",
            self.runnable,
            self.kernel_runnable,
            *missed
        );
    }
}

/// The trainer is the job's main thread, the two workers are data
/// workers, the pin-memory thread is the job's.
fn check_json_roles(frame: &Value, held: &HeldJob) {
    let role_of = |tid: u32| {
        frame["threads"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["tid"] == tid))
            .map(|t| t["role"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(role_of(held.pid()).as_deref(), Some("trainer"), "{frame:#}");
    for &worker in &held.ready.worker_pids {
        assert_eq!(role_of(worker).as_deref(), Some("data_worker"), "{frame:#}");
    }
    if let Some(pin) = held.ready.pin_memory_tid {
        assert_eq!(role_of(pin).as_deref(), Some("pin_memory"), "{frame:#}");
    }
    let group = |role: &str| {
        frame["roles"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["role"] == role))
            .cloned()
            .unwrap_or_else(|| panic!("no {role} group: {frame:#}"))
    };
    assert_eq!(group("trainer")["threads"], 1, "{frame:#}");
    let workers = u64::from(held.config.num_workers);
    assert_eq!(group("data_worker")["processes"], workers, "{frame:#}");
}

/// Steps per second over the frames within 10% of the job's own
/// iterations ending in the same intervals (or one step, for few).
fn check_steps(frames: &[&Value], held: &HeldJob) {
    let iterations = held.iterations();
    let mut shown = 0;
    let mut own = 0;
    let mut seconds = 0.0;
    for frame in frames {
        let count = frame["steps"]["count"].as_u64().expect("steps.count");
        let ended = iterations
            .iter()
            .filter(|i| i.end_ns > start(frame) && i.end_ns <= end(frame))
            .count() as u64;
        eprintln!(
            "frame {}: {count} steps ({}), {ended} iterations ended, {} events lost so far",
            frame["seq"], frame["steps"]["source"], frame["lost_events"]
        );
        shown += count;
        own += ended;
        seconds += frame["interval"]["seconds"].as_f64().expect("seconds");
    }
    let (shown, own) = (shown as f64 / seconds, own as f64 / seconds);
    assert!(
        own > 0.0 && close_to(shown, own, 0.10, 1.0 / seconds),
        "steps/s {shown:.2} in tprof top, {own:.2} by the job's own clock over {seconds} s"
    );
}

/// The full-screen view in tmux: the roles and worker count, each shown
/// thread's shares against schedstat over the frame's interval (its end is
/// in the title), a narrow terminal dropping columns and keeping the
/// header, colour, `r` writing a recording `tprof report` reads, and `q`
/// detaching with no program left loaded.
#[test]
fn screen_in_tmux_matches_schedstat_records_and_detaches() {
    let Some(real) = job() else { return };
    let held = real.start_held(&config());
    let sampler = SchedSampler::start(pids(&held));
    let recording = held.dir.path().join("deep.tprof");
    let bin = tprof_bin();
    let pid = held.pid().to_string();
    let command = [
        bin.to_str().expect("utf-8 path"),
        "top",
        "-p",
        &pid,
        "-o",
        recording.to_str().expect("utf-8 path"),
    ];
    let tmux = Tmux::start(&command, 200, 60, &[]);
    let tprof_pid = tmux.pid();
    tmux.wait_for(" · frame ", ATTACH_TIMEOUT);
    held.go();
    let first_start = loop {
        if let Some(first) = held.iterations().first() {
            break first.start_ns;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let screen = frame_after(&tmux, first_start);
    check_screen_roles(&screen, &held);
    check_screen_shares(&screen, &sampler);
    let coloured = tmux.screen(true);
    assert!(
        has_colour(&coloured),
        "no colour on the screen:\n{coloured}"
    );
    check_narrow(&tmux);
    check_r_records(&tmux, &recording, &held);
    let ids = bpf_program_ids_held_by(tprof_pid);
    assert!(!ids.is_empty(), "tprof top holds no BPF program");
    tmux.send("q");
    wait_gone(tprof_pid, FRAME_TIMEOUT, "q");
    assert_programs_unloaded(&ids);
    let after = tmux.screen(false);
    assert!(after.contains("tprof: stopped (quit)"), "{after}");
}

/// The first screen whose frame began at or after `start_ns`.
fn frame_after(tmux: &Tmux, start_ns: u64) -> String {
    let deadline = Instant::now() + FRAME_TIMEOUT;
    loop {
        let screen = tmux.screen(false);
        if let Some((begin, _)) = title_interval(&screen)
            && begin >= start_ns
        {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "no frame after {start_ns}:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The interval of the frame on the screen, from its title: `frame N: I s
/// to E (monotonic)`.
fn title_interval(screen: &str) -> Option<(u64, u64)> {
    let title = screen.lines().next()?;
    let (_, rest) = title.split_once("frame ")?;
    let (_, rest) = rest.split_once(": ")?;
    let mut words = rest.split_whitespace();
    let seconds: f64 = words.next()?.parse().ok()?;
    let end: f64 = words.nth(2)?.parse().ok()?;
    let end_ns = (end * 1e9) as u64;
    Some((end_ns - (seconds * 1e9) as u64, end_ns))
}

/// The thread rows on the screen: (tid, CPU%, RUN%).
fn screen_rows(screen: &str) -> Vec<(u32, f64, f64)> {
    screen
        .lines()
        .filter(|l| l.starts_with("  "))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let tid = words.first()?.parse().ok()?;
            let number = |w: &&str| w.parse::<f64>().ok();
            // After the tid, the pid and the name: the first run of five
            // numbers is the shares.
            let at = (2..words.len().saturating_sub(4))
                .find(|&i| words[i..i + 5].iter().all(|w| number(w).is_some()))?;
            Some((tid, number(&words[at])?, number(&words[at + 1])?))
        })
        .collect()
}

fn check_screen_roles(screen: &str, held: &HeldJob) {
    let workers = held.config.num_workers;
    for heading in [
        "trainer (1 proc, 1 thr)".to_string(),
        format!("data workers ({workers} proc"),
        "pin-memory (1 proc, 1 thr)".to_string(),
    ] {
        assert!(screen.contains(&heading), "no {heading:?}:\n{screen}");
    }
    // The trainer's row follows its heading.
    let after = screen
        .split("trainer (1 proc, 1 thr)")
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .unwrap_or_default();
    assert!(
        after.split_whitespace().next() == Some(&held.pid().to_string()),
        "the trainer's row is not the job's main thread:\n{screen}"
    );
}

fn check_screen_shares(screen: &str, sampler: &SchedSampler) {
    let (start, end) = title_interval(screen).expect("a frame's title");
    let mut checked = 0;
    let mut missed = 0;
    for (tid, on_cpu, runnable) in screen_rows(screen) {
        let Some((kernel_on_cpu, kernel_runnable)) = sampler.shares(tid, start, end) else {
            continue;
        };
        let compared = Compared {
            tid,
            on_cpu,
            runnable,
            kernel_on_cpu,
            kernel_runnable,
        };
        compared.check(&mut missed, &screen);
        checked += 1;
    }
    assert!(checked >= 3, "{checked} rows checked:\n{screen}");
}

/// Colour escapes (a foreground colour, basic or indexed, as tmux writes
/// them) in a capture with escapes; the resets (39, 49) are no colour.
fn has_colour(screen: &str) -> bool {
    screen.contains("\x1b[38;5;")
        || (30..38)
            .any(|c| screen.contains(&format!("\x1b[{c}m")) || screen.contains(&format!(";{c}m")))
}

/// At 60 columns the function and pid columns go; every header row stays.
fn check_narrow(tmux: &Tmux) {
    tmux.resize(60, 60);
    std::thread::sleep(Duration::from_millis(1500));
    let screen = tmux.screen(false);
    let lines: Vec<&str> = screen.lines().collect();
    for (i, start) in ["tprof top", "CPU", "STEPS", "GPU", "FINDING"]
        .iter()
        .enumerate()
    {
        assert!(
            lines.get(i).is_some_and(|l| l.starts_with(start)),
            "header row {i} should start with {start:?}:\n{screen}"
        );
    }
    assert!(
        screen.contains("CPU%") && screen.contains("RUN%"),
        "{screen}"
    );
    assert!(!screen.contains("FUNCTION"), "{screen}");
    tmux.resize(200, 60);
}

/// `r` starts a recording of what follows and `r` ends it: a whole
/// recording of the job and its workers.
fn check_r_records(tmux: &Tmux, recording: &Path, held: &HeldJob) {
    tmux.send("r");
    tmux.wait_for("RECORDING to", FRAME_TIMEOUT);
    std::thread::sleep(Duration::from_secs(3));
    tmux.send("r");
    tmux.wait_for("recorded to", FRAME_TIMEOUT);
    let report = report_json(recording);
    assert_eq!(report["cut_short"], false, "{report:#}");
    assert!(report["duration_s"].as_f64() > Some(2.0), "{report:#}");
    let processes: Vec<u64> = report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|p| p["pid"].as_u64())
        .collect();
    for pid in pids(held) {
        assert!(
            processes.contains(&u64::from(pid)),
            "{pid} missing: {report:#}"
        );
    }
    assert!(report["steps"]["count"].as_u64() > Some(0), "{report:#}");
}

/// Waits for a process tmux runs to be gone (tmux reaps it), for `why`.
fn wait_gone(pid: i32, timeout: Duration, why: &str) {
    let deadline = Instant::now() + timeout;
    while Path::new(&format!("/proc/{pid}")).exists() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tprof top {pid} still running {timeout:?} after {why}: {}",
            stat.trim()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How soon tprof top must be gone once what it watched is: a drain tick
/// sees the targets gone, the last frame is dropped, the programs detach.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The children of `pid` (of all its threads).
fn children(pid: i32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|l| {
            l.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `tprof top -p PID` on a screen, watching a process started on its own:
/// the process exits, and top exits by itself, the terminal put back
/// (tprof's last words on the normal screen), no program left loaded.
#[test]
fn screen_ends_when_its_target_exits() {
    require_root();
    let sleeper = build_workload("sleeper");
    let mut target = Running::spawn(Command::new(&sleeper).arg("300"));
    let pid = target.pid().to_string();
    let bin = tprof_bin();
    let command = [bin.to_str().expect("utf-8 path"), "top", "-p", &pid];
    let tmux = Tmux::start(&command, 120, 30, &[]);
    let tprof_pid = tmux.pid();
    tmux.wait_for(" · frame ", ATTACH_TIMEOUT);
    let ids = bpf_program_ids_held_by(tprof_pid);
    assert!(!ids.is_empty(), "tprof top holds no BPF program");
    target.signal(libc::SIGKILL);
    let killed = target.wait(EXIT_TIMEOUT);
    assert!(!killed.status.success(), "{killed:#?}");
    wait_gone(tprof_pid, EXIT_TIMEOUT, "its target exited");
    assert_programs_unloaded(&ids);
    let after = tmux.screen(false);
    assert!(after.contains("tprof: stopped (targets exited)"), "{after}");
    assert!(
        !after.contains(" · frame "),
        "the view is still on the screen:\n{after}"
    );
}

/// `tprof top -- CMD`: the command exiting ends top; and top stopped by
/// SIGTERM or Ctrl-C stops the command it launched and exits, the
/// terminal put back.
#[test]
fn screen_ends_with_its_command_and_takes_it_along() {
    require_root();
    let sleeper = build_workload("sleeper");
    let bin = tprof_bin();
    let run = |seconds: &str| {
        let command = [
            bin.to_str().expect("utf-8 path"),
            "top",
            "--",
            sleeper.to_str().expect("utf-8 path"),
            seconds,
        ];
        let tmux = Tmux::start(&command, 120, 30, &[]);
        tmux.wait_for(" · frame ", ATTACH_TIMEOUT);
        tmux
    };
    // The command ends by itself.
    let tmux = run("3");
    wait_gone(tmux.pid(), ATTACH_TIMEOUT, "its command exited");
    let after = tmux.screen(false);
    assert!(after.contains("tprof: stopped (targets exited)"), "{after}");
    assert!(after.contains("the command (pid"), "{after}");
    drop(tmux);
    // tprof is stopped, by a signal or from its keyboard.
    for (stop, said) in [("SIGTERM", "terminated"), ("C-c", "quit")] {
        let tmux = run("300");
        let tprof_pid = tmux.pid();
        let command = children(tprof_pid);
        assert_eq!(command.len(), 1, "tprof top's children: {command:?}");
        let command_start = start_time(command[0]).expect("the command's start");
        if stop == "SIGTERM" {
            tprof_tests::signal(tprof_pid, libc::SIGTERM);
        } else {
            tmux.send(stop);
        }
        wait_gone(tprof_pid, EXIT_TIMEOUT, stop);
        assert!(
            !alive_as(command[0], command_start),
            "the command {} outlived tprof top stopped by {stop}",
            command[0]
        );
        let after = tmux.screen(false);
        assert!(
            after.contains(&format!("tprof: stopped ({said})")),
            "{stop}:\n{after}"
        );
        assert!(
            !after.contains(" · frame "),
            "{stop}: the view is still up:\n{after}"
        );
    }
}

/// A terminal that goes away (its tmux session killed, an ssh connection
/// dropped) ends `tprof top -p PID`, and with it every program; the target
/// runs on.
#[test]
fn screen_ends_when_its_terminal_hangs_up() {
    require_root();
    let sleeper = build_workload("sleeper");
    let target = Running::spawn(Command::new(&sleeper).arg("300"));
    let pid = target.pid().to_string();
    let bin = tprof_bin();
    let command = [bin.to_str().expect("utf-8 path"), "top", "-p", &pid];
    let tmux = Tmux::start(&command, 120, 30, &[]);
    let tprof_pid = tmux.pid();
    tmux.wait_for(" · frame ", ATTACH_TIMEOUT);
    let ids = bpf_program_ids_held_by(tprof_pid);
    assert!(!ids.is_empty(), "tprof top holds no BPF program");
    tmux.kill();
    wait_gone(tprof_pid, EXIT_TIMEOUT, "its terminal hung up");
    assert_programs_unloaded(&ids);
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the target of -p was stopped with tprof"
    );
}

/// `tprof top --batch -n 2 -- CMD`: two plain-text frames with the
/// command's threads, then the command is stopped with tprof (SIGINT, as
/// for q) and tprof exits 0.
#[test]
fn batch_text_frames_of_a_launched_command() {
    require_root();
    let busy = build_workload("busy_threads");
    let out = Running::spawn(
        tprof()
            .args(["top", "--batch", "-n", "2", "--"])
            .arg(&busy)
            .args(["3", "60"]),
    )
    .wait(ATTACH_TIMEOUT);
    assert!(out.status.success(), "{out:#?}");
    // Each frame begins with its title.
    let frames: Vec<&str> = out
        .stdout
        .split("tprof top · ")
        .filter(|f| !f.trim().is_empty())
        .collect();
    assert_eq!(frames.len(), 2, "{}", out.stdout);
    for frame in frames {
        assert!(frame.starts_with("command "), "{frame}");
        assert!(frame.contains("TID") && frame.contains("CPU%"), "{frame}");
        assert!(frame.contains("busy_threads"), "{frame}");
    }
    assert!(out.stderr.contains("the command (pid"), "{}", out.stderr);
    assert!(out.stderr.contains("stopped (quit)"), "{}", out.stderr);
}

/// NO_COLOR takes the colour off the screen.
#[test]
fn no_color_means_no_colour() {
    require_root();
    let sleeper = build_workload("sleeper");
    let bin = tprof_bin();
    let command = [
        bin.to_str().expect("utf-8 path"),
        "top",
        "--",
        sleeper.to_str().expect("utf-8 path"),
        "60",
    ];
    let tmux = Tmux::start(&command, 120, 30, &[("NO_COLOR", "1")]);
    tmux.wait_for(" · frame ", ATTACH_TIMEOUT);
    let screen = tmux.screen(true);
    assert!(!has_colour(&screen), "colour with NO_COLOR:\n{screen}");
    tmux.send("q");
    tmux.wait_for("tprof: stopped (quit)", FRAME_TIMEOUT);
}

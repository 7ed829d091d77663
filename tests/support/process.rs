//! Processes the tests start (tprof itself, workloads to attach to): stdout
//! and stderr are read line by line as they arrive, so a test can wait for
//! "recording" or a pid, and nothing outlives the test.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::{Duration, Instant};

/// How long to wait for output pipes to close once the process is gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Running {
    child: Child,
    what: String,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    stdout_seen: Vec<String>,
    stderr_seen: Vec<String>,
    reaped: bool,
    /// Process groups of its children that are not its own (the command
    /// `tprof record --` launches gets one), killed with it at the end.
    child_groups: Vec<i32>,
}

#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn into_output(self) -> Output {
        Output {
            status: self.status,
            stdout: self.stdout.into_bytes(),
            stderr: self.stderr.into_bytes(),
        }
    }
}

/// Sends `sig` to one process.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Kills the whole process group: the process and whatever it started.
fn kill_group(pgid: i32) {
    // SAFETY: as above; ESRCH (group already gone) is fine to ignore.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

impl Running {
    /// Starts `cmd` in a process group of its own, so cleanup can kill its
    /// children too (a workload tprof started and left behind).
    pub fn spawn(cmd: &mut Command) -> Running {
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        let stdout = read_lines(child.stdout.take().expect("piped stdout"));
        let stderr = read_lines(child.stderr.take().expect("piped stderr"));
        Running {
            child,
            what,
            stdout,
            stderr,
            stdout_seen: Vec::new(),
            stderr_seen: Vec::new(),
            reaped: false,
            child_groups: Vec::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The next line on stdout; panics if none comes within `timeout`.
    pub fn next_stdout_line(&mut self, timeout: Duration) -> String {
        match self.stdout.recv_timeout(timeout) {
            Ok(line) => {
                self.stdout_seen.push(line.clone());
                line
            }
            Err(e) => panic!(
                "no line on stdout of {} ({e:?}); {}",
                self.what,
                self.seen()
            ),
        }
    }

    /// Waits until a stderr line contains `needle`; panics if the process
    /// closes stderr or `timeout` passes first.
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    self.note_child_groups();
                    let found = line.contains(needle);
                    self.stderr_seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(e) => panic!("{needle:?} never came on stderr ({e:?}); {}", self.seen()),
            }
        }
    }

    pub fn signal(&mut self, sig: i32) {
        self.note_child_groups();
        signal(self.pid(), sig);
    }

    /// Notes the process groups of its children other than its own, so
    /// cleanup reaches them after it has gone (the children are then
    /// another process's).
    pub fn note_child_groups(&mut self) {
        let pid = self.pid();
        for child in children(pid) {
            if let Some(pgid) = pgid(child)
                && pgid != pid
                && !self.child_groups.contains(&pgid)
            {
                self.child_groups.push(pgid);
            }
        }
    }

    fn kill_groups(&self) {
        kill_group(self.pid());
        for &group in &self.child_groups {
            kill_group(group);
        }
    }

    /// Waits for the process to exit, kills anything it left running in its
    /// group, and returns all its output. Panics after `timeout`.
    pub fn wait(mut self, timeout: Duration) -> Finished {
        let status = self.wait_status(timeout);
        // The group id cannot have been reused in the moment since the
        // process was reaped: pids are handed out cyclically.
        self.kill_groups();
        let stdout = drain(&self.stdout, std::mem::take(&mut self.stdout_seen));
        let stderr = drain(&self.stderr, std::mem::take(&mut self.stderr_seen));
        Finished {
            status,
            stdout,
            stderr,
        }
    }

    fn wait_status(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("wait for child") {
                self.reaped = true;
                return status;
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.kill_groups();
        panic!(
            "{} still running after {timeout:?}; {}",
            self.what,
            self.seen()
        );
    }

    fn seen(&self) -> String {
        format!(
            "stdout so far:\n{}\nstderr so far:\n{}",
            self.stdout_seen.join("\n"),
            self.stderr_seen.join("\n")
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_groups();
            let _ = self.child.wait();
        }
    }
}

/// The children of `pid` (of all its threads).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Every process's pid, as /proc lists them now.
pub(crate) fn pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// Polls `left` until it returns nothing, and panics with `what` and what
/// is left once `grace` has passed.
pub(crate) fn wait_until_none<T: std::fmt::Debug>(
    grace: Duration,
    what: &str,
    mut left: impl FnMut() -> Vec<T>,
) {
    let deadline = Instant::now() + grace;
    loop {
        let now_left = left();
        if now_left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} after {grace:?}: {now_left:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The live (not zombie) processes of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(fields) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = fields.split_whitespace();
            let state = fields.next();
            let group = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
            group == Some(pgid) && !matches!(state, Some("Z" | "X"))
        })
        .collect()
}

/// The process group of `pid` (field 5 of its stat line, counted after
/// the command name, which may hold spaces).
pub fn pgid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(2)?.parse().ok()
}

fn read_lines(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Lines already seen plus the rest until the pipe closes (bounded, in case
/// something outside the process group still holds it open).
fn drain(lines: &Receiver<String>, mut seen: Vec<String>) -> String {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    let mut text = seen.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

//! Reads the live system from /proc: processes, threads, names, states and
//! the machine's CPU counters. Everything here tolerates a task vanishing
//! between two reads (it returns None or skips it).
//!
//! Also: task lists and descendants, command lines, /proc/stat samples,
//! /sys/class/block device names, executable mappings, and the online CPUs
//! (`sysconf(_SC_NPROCESSORS_ONLN)`, not tprof's own affinity).

use std::{collections::HashMap, fs, io::Read, path::Path, sync::Arc};

use tprof_core::recording::SystemSample;

/// A /proc file as text, read into a buffer of a page to start with: the
/// kernel reports no size for them, and `fs::read_to_string` then probes
/// with 32 bytes and doubles, eight system calls for `/proc/stat`'s 1.2 KB
/// (read every 100 ms while recording) where this takes two.
fn read_text(path: impl AsRef<Path>) -> std::io::Result<String> {
    let mut text = String::with_capacity(4096);
    fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Task is a kernel thread (PF_KTHREAD in /proc/…/stat flags).
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of `/proc/<pid>/stat` tprof uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    /// Process group id.
    pub pgrp: u32,
    pub flags: u64,
}

impl Stat {
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses a stat line. The comm sits in parentheses and may itself contain
/// spaces and parentheses, so fields are counted from the last ')'.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_string();
    let mut rest = line.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    // session, tty_nr, tpgid, then flags.
    let flags = rest.nth(3)?.parse().ok()?;
    Some(Stat {
        comm,
        state,
        ppid,
        pgrp,
        flags,
    })
}

pub fn stat(pid: u32) -> Option<Stat> {
    read_stat(pid).ok()
}

/// `/proc/PID/stat`, with why it could not be had: NotFound once the
/// process is gone, InvalidData for a line that does not parse, the read's
/// own error otherwise.
pub fn read_stat(pid: u32) -> std::io::Result<Stat> {
    let line = read_text(format!("/proc/{pid}/stat"))?;
    parse_stat(&line)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "unparsable stat line"))
}

/// `/proc/PID/stat` of a process the kernel says exists: a NotFound while
/// `kill(pid, 0)` finds the process is tried again, a few times 10 ms
/// apart. On the development machine (pid_max 32,768, so pids are reused
/// within minutes under the test suite) procfs twice said a live target's
/// stat did not exist, once as tprof checked it and once as tprof
/// attached: in the bench, a pingpong that went on to run its whole 8 s.
pub fn read_stat_of_live(pid: u32) -> std::io::Result<Stat> {
    let mut stat = read_stat(pid);
    for _ in 0..STAT_RETRIES {
        match &stat {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && exists(pid) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                stat = read_stat(pid);
            }
            _ => break,
        }
    }
    stat
}

/// Reads of a live process's stat tried again after a NotFound.
const STAT_RETRIES: u32 = 5;

/// Whether process `pid` has exited: it is gone, or a zombie. It is gone
/// only when its stat cannot be found and `kill(pid, 0)` agrees; a stat
/// that cannot be read for another reason is asked of `kill(pid, 0)` alone,
/// so a read that fails for a moment does not end a recording (see
/// [`read_stat_of_live`]).
pub fn has_exited(pid: u32) -> bool {
    match read_stat(pid) {
        Ok(stat) => stat.is_dead(),
        Err(_) => !exists(pid),
    }
}

/// `kill(pid, 0)`: whether a process `pid` exists (a zombie included),
/// what a stat that says NotFound is checked against.
pub fn exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

pub fn task_stat(pid: u32, tid: u32) -> Option<Stat> {
    parse_stat(&read_text(format!("/proc/{pid}/task/{tid}/stat")).ok()?)
}

/// Thread ids of a process.
pub fn tasks(pid: u32) -> Vec<u32> {
    numeric_entries(&format!("/proc/{pid}/task"))
}

/// The live (not zombie) processes of process group `pgrp`.
pub fn group_members(pgrp: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| stat(pid).is_some_and(|s| s.pgrp == pgrp && !s.is_dead()))
        .collect()
}

/// Every pid on the machine.
pub fn all_pids() -> Vec<u32> {
    numeric_entries("/proc")
}

fn numeric_entries(dir: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The command line, split at NULs.
pub fn cmdline(pid: u32) -> Vec<String> {
    let Ok(bytes) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return Vec::new();
    };
    bytes
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Every live descendant of `roots` (not the roots themselves), parents
/// before children.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(s) = stat(pid) {
            children.entry(s.ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut queue: Vec<u32> = roots.to_vec();
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if !out.contains(&child) && !roots.contains(&child) {
                out.push(child);
                queue.push(child);
            }
        }
    }
    out
}

/// A machine-wide sample of /proc/stat at `ts_ns`.
pub fn system_sample(ts_ns: u64) -> Option<SystemSample> {
    parse_proc_stat(&read_text("/proc/stat").ok()?, ts_ns)
}

pub fn parse_proc_stat(text: &str, ts_ns: u64) -> Option<SystemSample> {
    let mut sample = SystemSample {
        ts_ns,
        ..Default::default()
    };
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next()? {
            "cpu" => {
                let ticks: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal (guest is in user).
                let total: u64 = ticks.iter().take(8).sum();
                let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
                sample.total_ticks = total;
                sample.busy_ticks = total.saturating_sub(idle);
            }
            "procs_running" => sample.procs_running = fields.next()?.parse().ok()?,
            "procs_blocked" => sample.procs_blocked = fields.next()?.parse().ok()?,
            _ => {}
        }
    }
    Some(sample)
}

/// Block devices from /sys/class/block, keyed by the kernel's dev_t
/// encoding (major << 20 | minor), which block tracepoints report.
pub fn block_devices() -> std::collections::BTreeMap<u32, String> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(entries) = fs::read_dir("/sys/class/block") else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(dev) = fs::read_to_string(entry.path().join("dev")) else {
            continue;
        };
        if let Some((major, minor)) = dev.trim().split_once(':')
            && let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>())
        {
            out.insert(major << 20 | minor, name);
        }
    }
    out
}

/// An executable mapping of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file, `[vdso]`-style pseudo name, or "" for anonymous memory
    /// (JIT code). Shared: every sampled frame in the mapping names it.
    pub path: Arc<str>,
}

/// The executable mappings of a process, or None when it is gone.
pub fn exec_maps(pid: u32) -> Option<Vec<Mapping>> {
    Some(parse_exec_maps(&maps_text(pid)?))
}

/// `/proc/<pid>/maps` as text, or None when the process is gone. Reading
/// it costs the kernel about a microsecond a line (a torch process maps
/// over a thousand), so each reason to read it shares one reading.
pub fn maps_text(pid: u32) -> Option<String> {
    read_text(format!("/proc/{pid}/maps")).ok()
}

/// Parses the executable mappings out of a `/proc/<pid>/maps` text.
pub fn parse_exec_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<Mapping> {
    // start-end perms offset dev inode [path, which may contain spaces]
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    if !fields.next()?.contains('x') {
        return None;
    }
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let path = fields.nth(2).unwrap_or_default().trim_start().to_string();
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset,
        path: path.into(),
    })
}

/// Online CPUs.
/// This process's effective capability set (CapEff in /proc/self/status).
pub fn effective_capabilities() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    parse_cap_eff(&status)
}

pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

pub fn online_cpus() -> u32 {
    // Not available_parallelism: that follows tprof's own affinity and
    // cgroup, and the job's limits are recorded apart (capture::limits).
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 { n as u32 } else { 1 }
}

/// The memory page size in bytes (at least 4096), which ring buffer sizes
/// are multiples of.
pub fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096).max(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live process's stat is read; a pid the kernel does not know is
    /// NotFound, and `kill(pid, 0)` agrees.
    #[test]
    fn a_live_stat_is_read_and_an_unknown_pid_is_not_found() {
        let own = read_stat_of_live(std::process::id()).expect("own stat");
        assert!(!own.is_dead());
        assert!(exists(std::process::id()));
        let unknown = read_stat_of_live(5_000_000).expect_err("no such pid");
        assert_eq!(unknown.kind(), std::io::ErrorKind::NotFound);
        assert!(!exists(5_000_000));
    }

    #[test]
    fn a_live_process_has_not_exited_and_a_zombie_or_unknown_pid_has() {
        assert!(!has_exited(std::process::id()));
        // Past the largest pid_max (2^22).
        assert!(has_exited(5_000_000));
        let child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Not reaped until it is checked: a zombie.
        while stat(pid).is_some_and(|s| !s.is_dead()) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(has_exited(pid));
        let mut child = child;
        child.wait().expect("reap");
        assert!(has_exited(pid));
    }

    #[test]
    fn parses_stat_with_awkward_comm() {
        let line = "1234 (a (b) c) S 1 1230 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, "a (b) c");
        assert_eq!((s.state, s.ppid, s.pgrp, s.flags), ('S', 1, 1230, 4194560));
        assert!(!s.is_kernel_thread());
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0";
        assert!(parse_stat(kthread).unwrap().is_kernel_thread());
    }

    #[test]
    fn parses_exec_maps() {
        let text = "\
5581a000-5581b000 r--p 00000000 fe:01 123 /usr/bin/my prog
5581b000-5581c000 r-xp 00001000 fe:01 123 /usr/bin/my prog
7f00a000-7f00b000 rwxp 00000000 00:00 0 
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]
";
        let maps = parse_exec_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(
            maps[0],
            Mapping {
                start: 0x5581b000,
                end: 0x5581c000,
                offset: 0x1000,
                path: "/usr/bin/my prog".into()
            }
        );
        assert_eq!(&*maps[1].path, "");
        assert_eq!(&*maps[2].path, "[vdso]");
    }

    #[test]
    fn parses_proc_stat() {
        let text = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\nprocs_running 5\nprocs_blocked 1\n";
        let s = parse_proc_stat(text, 7).unwrap();
        assert_eq!((s.total_ticks, s.busy_ticks), (1000, 150));
        assert_eq!((s.procs_running, s.procs_blocked, s.ts_ns), (5, 1, 7));
    }
}

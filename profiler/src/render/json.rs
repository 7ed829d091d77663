//! `tprof report --json`: the stable contract scripts rely on, documented in
//! docs/json.md. These structs are the contract, kept apart from the analysis
//! types so an internal rename cannot silently rename a field. Adding a field
//! is fine; renaming or removing one needs a JSON_VERSION bump.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::{DeviceUser, IoStat, Summary, Waker};

/// Version of the JSON contract (not of the recording format).
pub const JSON_VERSION: u32 = 1;

#[derive(Serialize)]
struct Report<'a> {
    json_version: u32,
    duration_s: f64,
    cores: u32,
    events: u64,
    lost_events: u64,
    lost: &'a crate::recording::LostCounts,
    cut_short: bool,
    stop_reason: Option<&'a str>,
    /// Average threads of the job on a CPU / waiting for one.
    job_on_cpu: f64,
    job_runnable: f64,
    machine: Option<Machine>,
    processes: Vec<Process<'a>>,
    threads: Vec<Thread<'a>>,
    devices: Vec<Device<'a>>,
    futexes: Vec<Futex<'a>>,
}

/// iostat -x columns of a device over the window; `series` has them per second.
#[derive(Serialize)]
struct Device<'a> {
    name: &'a str,
    #[serde(flatten)]
    window: &'a IoStat,
    series: &'a [IoStat],
    users: &'a [DeviceUser],
}

#[derive(Serialize)]
struct Futex<'a> {
    pid: u32,
    /// Hex, as the program would print the pointer.
    uaddr: String,
    waiters: usize,
    waits: usize,
    wait_s: f64,
    wakers: &'a [Waker],
    unwoken: usize,
}

#[derive(Serialize)]
struct Machine {
    mean_runnable_threads: f64,
    cpu_busy_pct: f64,
}

#[derive(Serialize)]
struct Process<'a> {
    pid: u32,
    ppid: u32,
    comm: &'a str,
    cmdline: &'a [String],
    depth: usize,
    threads: usize,
    on_cpu_s: f64,
    runnable_s: f64,
    blocked_s: f64,
    exited: bool,
}

#[derive(Serialize)]
struct Thread<'a> {
    pid: u32,
    ppid: u32,
    tid: u32,
    comm: &'a str,
    lifetime_s: f64,
    on_cpu_s: f64,
    runnable_s: f64,
    blocked_s: f64,
    blocked_interruptible_s: f64,
    blocked_uninterruptible_s: f64,
    io_s: f64,
    futex_s: f64,
    sleep_s: f64,
    read_bytes: u64,
    write_bytes: u64,
    voluntary_switches: u64,
    involuntary_switches: u64,
    exited: bool,
}

/// The JSON document for `summary`, pretty-printed.
pub fn render(summary: &Summary) -> String {
    let ppids: BTreeMap<u32, u32> = summary.processes.iter().map(|p| (p.pid, p.ppid)).collect();
    let report = Report {
        json_version: JSON_VERSION,
        duration_s: summary.duration_s,
        cores: summary.cores,
        events: summary.events,
        lost_events: summary.lost_events,
        lost: &summary.lost,
        cut_short: summary.cut_short,
        stop_reason: summary.stop_reason.as_deref(),
        job_on_cpu: summary.job_on_cpu,
        job_runnable: summary.job_runnable,
        machine: summary.machine.map(|m| Machine {
            mean_runnable_threads: m.mean_runnable_threads,
            cpu_busy_pct: m.cpu_busy_pct,
        }),
        processes: summary
            .processes
            .iter()
            .map(|p| Process {
                pid: p.pid,
                ppid: p.ppid,
                comm: &p.comm,
                cmdline: &p.cmdline,
                depth: p.depth,
                threads: p.threads,
                on_cpu_s: p.on_cpu_s,
                runnable_s: p.runnable_s,
                blocked_s: p.blocked_s,
                exited: p.exited,
            })
            .collect(),
        threads: summary
            .threads
            .iter()
            .map(|t| Thread {
                pid: t.pid,
                ppid: ppids.get(&t.pid).copied().unwrap_or(0),
                tid: t.tid,
                comm: &t.comm,
                lifetime_s: t.lifetime_s,
                on_cpu_s: t.on_cpu_s,
                runnable_s: t.runnable_s,
                blocked_s: t.blocked_s,
                blocked_interruptible_s: t.blocked_interruptible_s,
                blocked_uninterruptible_s: t.blocked_uninterruptible_s,
                io_s: t.io_s,
                futex_s: t.futex_s,
                sleep_s: t.sleep_s,
                read_bytes: t.read_bytes,
                write_bytes: t.write_bytes,
                voluntary_switches: t.voluntary_switches,
                involuntary_switches: t.involuntary_switches,
                exited: t.exited,
            })
            .collect(),
        devices: summary
            .devices
            .iter()
            .map(|d| Device {
                name: &d.name,
                window: &d.window,
                series: &d.series,
                users: &d.users,
            })
            .collect(),
        futexes: summary
            .futexes
            .iter()
            .map(|f| Futex {
                pid: f.pid,
                uaddr: format!("{:#x}", f.uaddr),
                waiters: f.waiters,
                waits: f.waits,
                wait_s: f.wait_s,
                wakers: &f.wakers,
                unwoken: f.unwoken,
            })
            .collect(),
    };
    let mut out = serde_json::to_string_pretty(&report).expect("plain data serializes");
    out.push('\n');
    out
}

//! Block devices in iostat -x terms, over the window and per second, from
//! the completed requests. Definitions follow sysstat's iostat: a request
//! counts in the interval it completes in; await is queue + service time;
//! aqu-sz is the summed request time divided by the interval; %util is the
//! share of the interval with at least one request in flight.
//!
//! [`IoStat`] holds the columns, for the window and for each whole second;
//! [`DeviceUser`] the tracked threads that used each device. Device
//! statistics are machine-wide, as iostat's are; only the users are the
//! job's.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{IoOp, IoRequest, Model};

const NS: f64 = 1e9;
/// iostat -m's megabyte.
const MB: f64 = 1024.0 * 1024.0;

/// iostat -x columns for one device over one interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IoStat {
    pub r_s: f64,
    pub w_s: f64,
    pub rmb_s: f64,
    pub wmb_s: f64,
    pub r_await_ms: f64,
    pub w_await_ms: f64,
    pub aqu_sz: f64,
    pub util_pct: f64,
}

/// A tracked thread's share of a device's traffic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceUser {
    pub pid: u32,
    pub tid: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceStats {
    pub name: String,
    #[serde(flatten)]
    pub window: IoStat,
    /// One entry per whole second of the window.
    pub series: Vec<IoStat>,
    /// Tracked threads that did IO on it, by bytes.
    pub users: Vec<DeviceUser>,
}

pub fn device_stats(model: &Model) -> Vec<DeviceStats> {
    let mut by_dev: BTreeMap<u32, Vec<&IoRequest>> = BTreeMap::new();
    for io in &model.ios {
        by_dev.entry(io.dev).or_default().push(io);
    }
    let (start, end) = (model.window_start_ns, model.window_end_ns);
    by_dev
        .into_iter()
        .filter(|(_, ios)| {
            ios.iter()
                .any(|io| matches!(io.op, IoOp::Read | IoOp::Write))
        })
        .map(|(dev, ios)| DeviceStats {
            name: model
                .devices
                .get(&dev)
                .cloned()
                .unwrap_or_else(|| format!("{}:{}", dev >> 20, dev & 0xfffff)),
            window: iostat(&ios, start, end),
            series: (start..end)
                .step_by(1_000_000_000)
                .filter_map(|s| Some((s, s.checked_add(1_000_000_000).filter(|&e| e <= end)?)))
                .map(|(s, e)| iostat(&ios, s, e))
                .collect(),
            users: users(&ios),
        })
        .collect()
}

/// iostat -x over [start, end).
pub fn iostat(ios: &[&IoRequest], start: u64, end: u64) -> IoStat {
    let secs = (end - start) as f64 / NS;
    if secs <= 0.0 {
        return IoStat::default();
    }
    let done: Vec<&&IoRequest> = ios
        .iter()
        .filter(|io| io.end_ns > start && io.end_ns <= end)
        .collect();
    let of = |op| done.iter().filter(move |io| io.op == op);
    let (reads, writes) = (of(IoOp::Read).count(), of(IoOp::Write).count());
    let mean_ms = |op, n: usize| {
        let total = of(op)
            .map(|io| io.latency_ns())
            .fold(0, u64::saturating_add);
        if n == 0 {
            0.0
        } else {
            total as f64 / n as f64 / 1e6
        }
    };
    let in_window = |io: &IoRequest| io.end_ns.min(end).saturating_sub(io.start_ns.max(start));
    IoStat {
        r_s: reads as f64 / secs,
        w_s: writes as f64 / secs,
        rmb_s: of(IoOp::Read)
            .map(|io| io.bytes)
            .fold(0, u64::saturating_add) as f64
            / MB
            / secs,
        wmb_s: of(IoOp::Write)
            .map(|io| io.bytes)
            .fold(0, u64::saturating_add) as f64
            / MB
            / secs,
        r_await_ms: mean_ms(IoOp::Read, reads),
        w_await_ms: mean_ms(IoOp::Write, writes),
        aqu_sz: ios
            .iter()
            .map(|io| in_window(io))
            .fold(0, u64::saturating_add) as f64
            / NS
            / secs,
        util_pct: 100.0 * busy_ns(ios, start, end) as f64 / NS / secs,
    }
}

/// Time in [start, end) with at least one request in flight.
fn busy_ns(ios: &[&IoRequest], start: u64, end: u64) -> u64 {
    let mut spans: Vec<(u64, u64)> = ios
        .iter()
        .map(|io| (io.start_ns.max(start), io.end_ns.min(end)))
        .filter(|(s, e)| s < e)
        .collect();
    spans.sort_unstable();
    let (mut busy, mut cur) = (0, None::<(u64, u64)>);
    for (s, e) in spans {
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                busy += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    busy + cur.map_or(0, |(s, e)| e - s)
}

fn users(ios: &[&IoRequest]) -> Vec<DeviceUser> {
    let mut by_tid: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    for io in ios.iter().filter(|io| io.tid != 0) {
        let entry = by_tid.entry((io.tgid, io.tid)).or_default();
        match io.op {
            IoOp::Read => entry.0 += io.bytes,
            IoOp::Write => entry.1 += io.bytes,
            _ => {}
        }
    }
    let mut out: Vec<DeviceUser> = by_tid
        .into_iter()
        .map(|((pid, tid), (read_bytes, write_bytes))| DeviceUser {
            pid,
            tid,
            read_bytes,
            write_bytes,
        })
        .collect();
    out.sort_by_key(|u| std::cmp::Reverse(u.read_bytes + u.write_bytes));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(start: u64, end: u64, op: IoOp, bytes: u64) -> IoRequest {
        IoRequest {
            dev: 1,
            start_ns: start,
            end_ns: end,
            bytes,
            op,
            tid: 5,
            tgid: 5,
            error: 0,
        }
    }

    #[test]
    fn computes_iostat_columns() {
        let ms = 1_000_000;
        let ios = [
            io(0, 10 * ms, IoOp::Read, 1 << 20),
            io(5 * ms, 15 * ms, IoOp::Read, 1 << 20),
            io(500 * ms, 520 * ms, IoOp::Write, 4096),
        ];
        let refs: Vec<&IoRequest> = ios.iter().collect();
        let s = iostat(&refs, 0, 1000 * ms);
        assert_eq!((s.r_s, s.w_s), (2.0, 1.0));
        assert!((s.rmb_s - 2.0).abs() < 1e-9);
        assert!((s.r_await_ms - 10.0).abs() < 1e-9);
        assert!((s.w_await_ms - 20.0).abs() < 1e-9);
        // busy: [0,15) ∪ [500,520) = 35 ms of 1000.
        assert!((s.util_pct - 3.5).abs() < 1e-9);
        // in flight: 10 + 10 + 20 ms = 0.04 request-seconds per second.
        assert!((s.aqu_sz - 0.04).abs() < 1e-9);
    }
}

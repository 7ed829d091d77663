//! Per-GPU statistics: mean utilization, idle time and its longest
//! stretches, memory peak, and per-process utilization.
//!
//! A utilization sample is the driver's average over the period since the
//! previous sample of its series (that is what nvmlDeviceGetSamples and the
//! utilization rates report), so sample `i` stands for `(t[i-1], t[i]]`.
//! An idle stretch therefore starts at the end of the last busy sample's
//! period: its error is bounded by the sample spacing (about 1/6 s on real
//! drivers, a poll period when polled), not by where between samples a
//! midpoint guess lands.
//!
//! A sample stands for at most `MAX_SAMPLE_PERIOD_NS` (1 s) before it, so
//! a gap in a series is not read as one long sample.

use serde::Serialize;

use crate::model::{Gpu, Model};
use crate::recording::GpuMetric;

const NS: f64 = 1e9;

/// A GPU at or below this utilization (%) counts as idle: drivers report a
/// few percent for an otherwise idle GPU (display, housekeeping kernels).
pub const IDLE_UTIL_PCT: u64 = 5;

/// Longest period one sample may stand for. A longer gap (the sampler
/// stalled, the driver's buffer overflowed) is not known time.
const MAX_SAMPLE_PERIOD_NS: u64 = 1_000_000_000;

/// A span of time with one utilization value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub start_ns: u64,
    pub end_ns: u64,
    pub value: u64,
}

impl Period {
    fn len(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// One tracked process's share of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessGpuStats {
    pub pid: u32,
    pub comm: String,
    /// Mean SM utilization over the per-process polls during its life.
    pub sm_util_mean_pct: f64,
}

/// What one GPU did during the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuStats {
    pub index: u32,
    pub name: String,
    /// Time-weighted mean utilization; None without a utilization series.
    pub util_mean_pct: Option<f64>,
    /// Share of the sampled time at or below [`IDLE_UTIL_PCT`].
    pub idle_frac: Option<f64>,
    /// Idle stretches `[start_s, end_s]` relative to the window start, in
    /// time order.
    pub idle_intervals: Vec<(f64, f64)>,
    pub mem_peak_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub pcie_rx_bytes_per_s: Option<f64>,
    pub pcie_tx_bytes_per_s: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub power_w: Option<f64>,
    pub utilization_source: String,
    pub missing: Vec<String>,
    pub processes: Vec<ProcessGpuStats>,
}

impl GpuStats {
    /// Idle stretches, longest first.
    pub fn longest_idle(&self) -> Vec<(f64, f64)> {
        let mut out = self.idle_intervals.clone();
        out.sort_by(|a, b| (b.1 - b.0).total_cmp(&(a.1 - a.0)));
        out
    }
}

pub fn stats(model: &Model) -> Vec<GpuStats> {
    model
        .gpus
        .devices
        .iter()
        .map(|gpu| gpu_stats(model, gpu))
        .collect()
}

fn gpu_stats(model: &Model, gpu: &Gpu) -> GpuStats {
    let window = (model.window_start_ns, model.window_end_ns);
    let periods = periods(gpu.series(GpuMetric::GpuUtilPct), window);
    let rel = |ns: u64| (ns - model.window_start_ns) as f64 / NS;
    let in_window = |metric| in_window(gpu.series(metric), window);
    GpuStats {
        index: gpu.index,
        name: gpu.name.clone(),
        util_mean_pct: weighted_mean(&periods),
        idle_frac: idle_fraction(&periods, IDLE_UTIL_PCT),
        idle_intervals: idle_intervals(&periods, IDLE_UTIL_PCT)
            .into_iter()
            .map(|(s, e)| (rel(s), rel(e)))
            .collect(),
        mem_peak_bytes: in_window(GpuMetric::MemUsedBytes).map(|(_, v)| v).max(),
        memory_total_bytes: gpu.memory_total_bytes,
        pcie_rx_bytes_per_s: mean(in_window(GpuMetric::PcieRxBytesPerS)),
        pcie_tx_bytes_per_s: mean(in_window(GpuMetric::PcieTxBytesPerS)),
        sm_clock_mhz: mean(in_window(GpuMetric::SmClockMhz)),
        power_w: mean(in_window(GpuMetric::PowerMw)).map(|mw| mw / 1e3),
        utilization_source: gpu.utilization_source.clone(),
        missing: gpu.missing.clone(),
        processes: process_stats(model, gpu, window),
    }
}

fn process_stats(model: &Model, gpu: &Gpu, window: (u64, u64)) -> Vec<ProcessGpuStats> {
    let mut out: Vec<ProcessGpuStats> = gpu
        .per_process(GpuMetric::ProcessSmUtilPct)
        .filter_map(|(pid, points)| {
            let process = model.processes.get(&pid);
            // Capture writes a 0 for every tracked pid at every poll; only
            // the polls during the process's life say anything about it.
            let life = process.map_or(window, |p| {
                (p.start_ns.max(window.0), p.exit_ns.unwrap_or(window.1))
            });
            Some(ProcessGpuStats {
                pid,
                comm: process.map(|p| p.comm.clone()).unwrap_or_default(),
                sm_util_mean_pct: mean(in_window(points, life))?,
            })
        })
        .collect();
    out.sort_by(|a, b| b.sm_util_mean_pct.total_cmp(&a.sm_util_mean_pct));
    out
}

fn in_window(
    points: &[(u64, u64)],
    (start, end): (u64, u64),
) -> impl Iterator<Item = (u64, u64)> + '_ {
    points
        .iter()
        .copied()
        .filter(move |&(t, _)| t >= start && t <= end)
}

fn mean(points: impl Iterator<Item = (u64, u64)>) -> Option<f64> {
    let (n, sum) = points.fold((0u64, 0f64), |(n, s), (_, v)| (n + 1, s + v as f64));
    (n > 0).then(|| sum / n as f64)
}

/// The periods a series of averaged samples stands for, clipped to the
/// window. The first sample has no predecessor; it is given the spacing
/// of the next one.
pub fn periods(points: &[(u64, u64)], (start, end): (u64, u64)) -> Vec<Period> {
    let first_gap = match points {
        [a, b, ..] => b.0 - a.0,
        _ => 0,
    };
    let mut out = Vec::new();
    let mut prev = points.first().map(|p| p.0.saturating_sub(first_gap));
    for &(t, value) in points {
        let from = prev
            .unwrap_or(t)
            .max(t.saturating_sub(MAX_SAMPLE_PERIOD_NS));
        prev = Some(t);
        let (s, e) = (from.max(start), t.min(end));
        if s < e {
            out.push(Period {
                start_ns: s,
                end_ns: e,
                value,
            });
        }
    }
    out
}

fn weighted_mean(periods: &[Period]) -> Option<f64> {
    let total: u64 = periods.iter().map(Period::len).sum();
    let weighted: f64 = periods
        .iter()
        .map(|p| p.len() as f64 * p.value as f64)
        .sum();
    (total > 0).then(|| weighted / total as f64)
}

fn idle_fraction(periods: &[Period], threshold: u64) -> Option<f64> {
    let total: u64 = periods.iter().map(Period::len).sum();
    let idle: u64 = periods
        .iter()
        .filter(|p| p.value <= threshold)
        .map(Period::len)
        .sum();
    (total > 0).then(|| idle as f64 / total as f64)
}

/// Maximal runs of adjacent idle periods, as `(start_ns, end_ns)`.
pub fn idle_intervals(periods: &[Period], threshold: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for p in periods.iter().filter(|p| p.value <= threshold) {
        match out.last_mut() {
            Some(last) if last.1 == p.start_ns => last.1 = p.end_ns,
            _ => out.push((p.start_ns, p.end_ns)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// 2 s at 95 %, 1 s idle, repeated, sampled every `step` ms: sample
    /// at t holds the script's value over (t - step, t].
    fn script(step: u64, until_ms: u64) -> Vec<(u64, u64)> {
        (1..=until_ms / step)
            .map(|k| {
                let t = k * step;
                let busy = (t - 1) % 3000 < 2000;
                (t * MS, if busy { 95 } else { 0 })
            })
            .collect()
    }

    #[test]
    fn idle_intervals_match_the_script() {
        let points = script(20, 9000);
        let periods = periods(&points, (0, 9000 * MS));
        let idle = idle_intervals(&periods, IDLE_UTIL_PCT);
        assert_eq!(
            idle,
            vec![
                (2000 * MS, 3000 * MS),
                (5000 * MS, 6000 * MS),
                (8000 * MS, 9000 * MS)
            ]
        );
        let frac = idle_fraction(&periods, IDLE_UTIL_PCT).unwrap();
        assert!((frac - 1.0 / 3.0).abs() < 1e-9, "{frac}");
        let mean = weighted_mean(&periods).unwrap();
        assert!((mean - 95.0 * 2.0 / 3.0).abs() < 1e-9, "{mean}");
    }

    #[test]
    fn periods_are_clipped_to_the_window() {
        let points = script(20, 9000);
        let periods = periods(&points, (2500 * MS, 5500 * MS));
        assert_eq!(periods.first().unwrap().start_ns, 2500 * MS);
        assert_eq!(periods.last().unwrap().end_ns, 5500 * MS);
        let idle = idle_intervals(&periods, IDLE_UTIL_PCT);
        assert_eq!(idle, vec![(2500 * MS, 3000 * MS), (5000 * MS, 5500 * MS)]);
    }

    #[test]
    fn a_gap_is_not_counted_as_time() {
        // Two samples 5 s apart: the second stands for its last second only.
        let points = [(1000 * MS, 0), (6000 * MS, 0)];
        let periods = periods(&points, (0, 10_000 * MS));
        let total: u64 = periods.iter().map(Period::len).sum();
        assert_eq!(total, 2000 * MS);
        assert_eq!(idle_intervals(&periods, 5).len(), 2);
    }

    #[test]
    fn no_samples_no_numbers() {
        let periods = periods(&[], (0, 1000));
        assert_eq!(weighted_mean(&periods), None);
        assert_eq!(idle_fraction(&periods, 5), None);
        assert!(idle_intervals(&periods, 5).is_empty());
    }

    #[test]
    fn process_utilization_counts_only_its_life() {
        use crate::model::{Gpus, Process};
        use crate::recording::Origin;
        // Polls every 0.5 s: 80 % while the process lives, then the 0 that
        // capture writes for a tracked pid the driver no longer lists.
        let points = vec![
            (500 * MS, 80),
            (1000 * MS, 80),
            (1500 * MS, 0),
            (2000 * MS, 0),
        ];
        let gpu = Gpu {
            series: [((GpuMetric::ProcessSmUtilPct, Some(7)), points)].into(),
            ..Default::default()
        };
        let process = Process {
            pid: 7,
            ppid: 1,
            comm: "train".into(),
            cmdline: vec![],
            origin: Origin::Launched,
            start_ns: 0,
            exit_ns: Some(1200 * MS),
            exec_ns: None,
        };
        let model = Model {
            window_start_ns: 0,
            window_end_ns: 2000 * MS,
            processes: [(7, process)].into(),
            gpus: Gpus {
                status: None,
                devices: vec![gpu],
            },
            ..Default::default()
        };
        let stats = stats(&model);
        assert_eq!(stats[0].processes[0].comm, "train");
        assert_eq!(stats[0].processes[0].sm_util_mean_pct, 80.0);
    }
}

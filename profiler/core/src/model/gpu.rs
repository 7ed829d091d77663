//! GPUs of a recording: each device with its series gathered from the
//! sample batches, sorted by time.
//!
//! Samples of one series at the same time are deduplicated.

use std::collections::BTreeMap;

use crate::recording::{GpuMetric, Recording};

/// A series' key: the metric, and the process for per-process metrics.
pub type SeriesKey = (GpuMetric, Option<u32>);

/// The GPU side of the recording.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gpus {
    /// Why there is no GPU data; None when there is.
    pub status: Option<String>,
    pub devices: Vec<Gpu>,
}

/// One GPU and everything sampled from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub memory_total_bytes: Option<u64>,
    pub utilization_source: String,
    pub missing: Vec<String>,
    /// `(CLOCK_MONOTONIC ns, value)` per series, sorted by time.
    pub series: BTreeMap<SeriesKey, Vec<(u64, u64)>>,
}

impl Gpu {
    pub fn series(&self, metric: GpuMetric) -> &[(u64, u64)] {
        self.series.get(&(metric, None)).map_or(&[], Vec::as_slice)
    }

    /// Per-process series of `metric`, by pid.
    pub fn per_process(&self, metric: GpuMetric) -> impl Iterator<Item = (u32, &[(u64, u64)])> {
        self.series
            .iter()
            .filter(move |((m, _), _)| *m == metric)
            .filter_map(|((_, pid), points)| Some(((*pid)?, points.as_slice())))
    }
}

/// Without a GPU_INFO record there is nothing to say but that.
const NO_INFO: &str = "the recording holds no GPU information \
    (made by a tprof without GPU sampling, or cut short before sampling started)";

pub fn build(rec: &Recording) -> Gpus {
    let Some(info) = &rec.gpu else {
        return Gpus {
            status: Some(NO_INFO.to_string()),
            devices: Vec::new(),
        };
    };
    let mut devices: Vec<Gpu> = info
        .devices
        .iter()
        .map(|d| Gpu {
            index: d.index,
            name: d.name.clone(),
            memory_total_bytes: d.memory_total_bytes,
            utilization_source: d.utilization_source.clone(),
            missing: d.missing.clone(),
            series: BTreeMap::new(),
        })
        .collect();
    for batch in &rec.gpu_series {
        if let Some(gpu) = devices.iter_mut().find(|g| g.index == batch.gpu) {
            gpu.series
                .entry((batch.metric, batch.pid))
                .or_default()
                .extend_from_slice(&batch.points);
        }
    }
    for gpu in &mut devices {
        for points in gpu.series.values_mut() {
            points.sort_by_key(|p| p.0);
            points.dedup_by_key(|p| p.0);
        }
    }
    Gpus {
        status: info.status.clone(),
        devices,
    }
}

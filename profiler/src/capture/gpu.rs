//! GPU sampling through NVML (nvml-wrapper), on a thread of its own because
//! NVML calls block (a PCIe throughput query measures for ~20 ms on real
//! hardware). The thread sends samples over a channel; the capture loop
//! drains them into GPU_SAMPLES records.
//!
//! Utilization comes from the driver's own sample buffer
//! (nvmlDeviceGetSamples) where the library has it, so the series has the
//! driver's resolution; otherwise from utilization rates polled at
//! `--gpu-hz`. A function the library or GPU lacks loses its series only;
//! [`GpuDevice::missing`] names it. NVML's timestamps are wall-clock µs;
//! they are converted to CLOCK_MONOTONIC here with an anchor taken at each
//! poll, so a wall-clock step during the recording does not shift them.
//!
//! The slow metrics (PCIe, clocks, power, per-process utilization) are
//! read every `SLOW_EVERY` (fifth) poll. The session writes the samples
//! once a second, one record per series.

use std::{
    collections::{BTreeMap, HashSet},
    ffi::OsStr,
    path::PathBuf,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use nvml_wrapper::{
    Device, Nvml,
    enum_wrappers::device::{Clock, PcieUtilCounter, Sampling},
    enums::device::SampleValue,
    error::NvmlError,
};

use tprof_core::recording::{GpuDevice, GpuInfo, GpuMetric, GpuSeries};

/// A GPU's series: the metric, and the process for per-process metrics.
type SeriesKey = (GpuMetric, Option<u32>);

/// What the dynamic loader is asked for when no library is given.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";
/// PCIe, clock, power and per-process utilization are polled on every
/// this many utilization polls: they change slowly, and a PCIe query
/// blocks for its measuring window on real hardware.
const SLOW_EVERY: u64 = 5;

/// `tprof record`'s GPU options.
#[derive(Debug, Clone)]
pub struct GpuOptions {
    /// False with `--no-gpu`.
    pub enabled: bool,
    /// `--nvml-lib` / TPROF_NVML_LIB; None: [`DEFAULT_LIBRARY`].
    pub library: Option<PathBuf>,
    /// Poll rate for what the driver does not buffer.
    pub hz: f64,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            enabled: true,
            library: None,
            hz: 20.0,
        }
    }
}

/// What the sampler thread sends.
enum Message {
    Series(GpuSeries),
    /// One per-process utilization poll: `(pid, SM %)` of the processes the
    /// driver listed; the others used nothing.
    Processes {
        gpu: u32,
        ts_ns: u64,
        utils: Vec<(u32, u32)>,
    },
}

/// A running sampler thread.
pub struct GpuSampler {
    samples: mpsc::Receiver<Message>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// Starts sampling every visible GPU. The [`GpuInfo`] says what is sampled,
/// or (with no sampler) why nothing is.
pub fn start(opts: &GpuOptions) -> (GpuInfo, Option<GpuSampler>) {
    if !opts.enabled {
        return (no_data("GPU sampling turned off (--no-gpu)", None), None);
    }
    let (info_tx, info_rx) = mpsc::sync_channel(1);
    let (sample_tx, samples) = mpsc::channel();
    let (stop, stop_rx) = mpsc::channel();
    let thread_opts = opts.clone();
    let spawned = thread::Builder::new()
        .name("tprof-gpu".into())
        .spawn(move || run(&thread_opts, &info_tx, &sample_tx, &stop_rx));
    let thread = match spawned {
        Ok(thread) => thread,
        Err(e) => {
            return (
                no_data(&format!("cannot start the GPU sampler: {e}"), None),
                None,
            );
        }
    };
    match info_rx.recv() {
        Ok(info) if info.status.is_none() => {
            let sampler = GpuSampler {
                samples,
                stop: Some(stop),
                thread: Some(thread),
            };
            (info, Some(sampler))
        }
        Ok(info) => {
            let _ = thread.join();
            (info, None)
        }
        Err(_) => {
            let _ = thread.join();
            (no_data("the GPU sampler failed while starting", None), None)
        }
    }
}

impl GpuSampler {
    /// Everything sampled since the last call, one batch per series. A
    /// per-process poll becomes a point for every `tracked` process: one the
    /// driver did not list used 0 % of the GPU.
    pub fn drain(&self, tracked: &HashSet<u32>) -> Vec<GpuSeries> {
        let mut batches: BTreeMap<(u32, SeriesKey), Vec<(u64, u64)>> = BTreeMap::new();
        for message in self.samples.try_iter() {
            match message {
                Message::Series(s) => batches
                    .entry((s.gpu, (s.metric, s.pid)))
                    .or_default()
                    .extend(s.points),
                Message::Processes { gpu, ts_ns, utils } => {
                    for &pid in tracked {
                        let util = utils.iter().find(|u| u.0 == pid).map_or(0, |u| u.1);
                        batches
                            .entry((gpu, (GpuMetric::ProcessSmUtilPct, Some(pid))))
                            .or_default()
                            .push((ts_ns, u64::from(util)));
                    }
                }
            }
        }
        batches
            .into_iter()
            .map(|((gpu, (metric, pid)), points)| GpuSeries {
                gpu,
                metric,
                pid,
                points,
            })
            .collect()
    }

    /// Stops the thread after one last poll; its samples stay to be drained.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for GpuSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn no_data(reason: &str, library: Option<String>) -> GpuInfo {
    GpuInfo {
        status: Some(reason.to_string()),
        library,
        devices: Vec::new(),
    }
}

/// The sampler thread: set up, report what it found, poll until stopped.
fn run(
    opts: &GpuOptions,
    info_tx: &mpsc::SyncSender<GpuInfo>,
    tx: &mpsc::Sender<Message>,
    stop: &mpsc::Receiver<()>,
) {
    let library = opts
        .library
        .as_ref()
        .map_or_else(|| DEFAULT_LIBRARY.to_string(), |p| p.display().to_string());
    let nvml = match Nvml::builder().lib_path(OsStr::new(&library)).init() {
        Ok(nvml) => nvml,
        Err(e) => {
            let _ = info_tx.send(no_data(&init_error(&library, e), Some(library)));
            return;
        }
    };
    let mut devices = match open_devices(&nvml, opts.hz) {
        Ok(devices) => devices,
        Err(reason) => {
            let _ = info_tx.send(no_data(&reason, Some(library)));
            return;
        }
    };
    let info = GpuInfo {
        status: None,
        library: Some(library),
        devices: devices.iter().map(|d| d.info.clone()).collect(),
    };
    if info_tx.send(info).is_ok() {
        poll_until_stopped(&mut devices, opts.hz, tx, stop);
    }
}

fn init_error(library: &str, e: NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(e) => {
            format!("NVML library not found ({e}); pass --nvml-lib PATH or set TPROF_NVML_LIB")
        }
        NvmlError::FailedToLoadSymbol(_) => {
            format!("{library} is not an NVML library (it has no nvmlInit_v2)")
        }
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_string(),
        e => format!("NVML failed to start: {e}"),
    }
}

/// Polls on a fixed schedule (not a fixed sleep, so slow NVML calls do not
/// stretch the period), with one last poll when told to stop.
fn poll_until_stopped(
    devices: &mut [DeviceSampler<'_>],
    hz: f64,
    tx: &mpsc::Sender<Message>,
    stop: &mpsc::Receiver<()>,
) {
    let period = Duration::from_secs_f64(1.0 / hz);
    let mut next = Instant::now();
    for tick in 0u64.. {
        // A poll that overran its period is not made up with a burst.
        next = (next + period).max(Instant::now());
        let wait = next.saturating_duration_since(Instant::now());
        let stopping = !matches!(
            stop.recv_timeout(wait),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        let slow = stopping || tick.is_multiple_of(SLOW_EVERY);
        for device in devices.iter_mut() {
            device.poll(slow, tx);
        }
        if stopping {
            return;
        }
    }
}

fn open_devices(nvml: &Nvml, hz: f64) -> Result<Vec<DeviceSampler<'_>>, String> {
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML cannot count the GPUs: {e}"))?;
    if count == 0 {
        return Err("no GPU visible to NVML".to_string());
    }
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    for index in 0..count {
        match nvml.device_by_index(index) {
            Ok(device) => devices.push(DeviceSampler::probe(index, device, hz)),
            Err(e) => errors.push(format!("GPU {index}: {e}")),
        }
    }
    if devices.is_empty() {
        return Err(format!("no usable GPU ({})", errors.join("; ")));
    }
    Ok(devices)
}

/// Which series a GPU gives, found by calling each function once.
#[derive(Debug, Default)]
struct Supported {
    samples: bool,
    rates: bool,
    memory: bool,
    pcie: bool,
    clock: bool,
    power: bool,
    processes: bool,
}

struct DeviceSampler<'n> {
    device: Device<'n>,
    info: GpuDevice,
    supported: Supported,
    /// Newest driver timestamp (wall-clock µs) seen per buffered series.
    last_util_us: u64,
    last_mem_util_us: u64,
    last_process_us: u64,
}

impl<'n> DeviceSampler<'n> {
    fn probe(index: u32, device: Device<'n>, hz: f64) -> DeviceSampler<'n> {
        // Only what the driver buffers from now on: its history predates
        // the recording.
        let now_us = super::clock::anchor().realtime_ns / 1000;
        let mut missing = Vec::new();
        let mut check = |what: &str, function: &str, result: Result<(), NvmlError>| {
            check_supported(&mut missing, what, function, result)
        };
        let mut s = Supported {
            samples: check(
                "utilization samples",
                "nvmlDeviceGetSamples",
                device.samples(Sampling::GpuUtilization, now_us).map(drop),
            ),
            ..Default::default()
        };
        if !s.samples {
            s.rates = check(
                "utilization",
                "nvmlDeviceGetUtilizationRates",
                device.utilization_rates().map(drop),
            );
        }
        let memory = device.memory_info();
        let memory_total_bytes = memory.as_ref().ok().map(|m| m.total);
        s.memory = check(
            "memory used",
            "nvmlDeviceGetMemoryInfo_v2",
            memory.map(drop),
        );
        s.pcie = check(
            "PCIe throughput",
            "nvmlDeviceGetPcieThroughput",
            device.pcie_throughput(PcieUtilCounter::Receive).map(drop),
        );
        s.clock = check(
            "SM clock",
            "nvmlDeviceGetClockInfo",
            device.clock_info(Clock::SM).map(drop),
        );
        s.power = check(
            "power",
            "nvmlDeviceGetPowerUsage",
            device.power_usage().map(drop),
        );
        s.processes = check(
            "per-process utilization",
            "nvmlDeviceGetProcessUtilization",
            device.process_utilization_stats(now_us).map(drop),
        );
        let utilization_source = if s.samples {
            "driver samples".to_string()
        } else if s.rates {
            format!("utilization rates polled at {hz} Hz")
        } else {
            "none".to_string()
        };
        DeviceSampler {
            info: GpuDevice {
                index,
                name: device.name().unwrap_or_else(|e| format!("unnamed ({e})")),
                memory_total_bytes,
                utilization_source,
                missing,
            },
            device,
            supported: s,
            last_util_us: now_us,
            last_mem_util_us: now_us,
            last_process_us: now_us,
        }
    }

    fn poll(&mut self, slow: bool, tx: &mpsc::Sender<Message>) {
        self.poll_utilization(tx);
        if self.supported.memory
            && let Ok(memory) = self.device.memory_info()
        {
            self.send(tx, GpuMetric::MemUsedBytes, vec![(now(), memory.used)]);
        }
        if slow {
            self.poll_slow(tx);
        }
    }

    fn poll_utilization(&mut self, tx: &mpsc::Sender<Message>) {
        if self.supported.samples {
            let gpu = new_samples(
                &self.device,
                Sampling::GpuUtilization,
                &mut self.last_util_us,
            );
            let mem = new_samples(
                &self.device,
                Sampling::MemoryUtilization,
                &mut self.last_mem_util_us,
            );
            self.send(tx, GpuMetric::GpuUtilPct, gpu);
            self.send(tx, GpuMetric::MemUtilPct, mem);
        } else if self.supported.rates
            && let Ok(rates) = self.device.utilization_rates()
        {
            let ts = now();
            self.send(tx, GpuMetric::GpuUtilPct, vec![(ts, rates.gpu.into())]);
            self.send(tx, GpuMetric::MemUtilPct, vec![(ts, rates.memory.into())]);
        }
    }

    fn poll_slow(&mut self, tx: &mpsc::Sender<Message>) {
        let reading = |r: Result<u32, NvmlError>| r.ok().map(|v| vec![(now(), u64::from(v))]);
        // NVML gives PCIe throughput in KB/s.
        let kb_per_s = |counter| {
            self.device
                .pcie_throughput(counter)
                .ok()
                .map(|v| vec![(now(), u64::from(v) * 1024)])
        };
        let mut batches = Vec::new();
        if self.supported.pcie {
            batches.push((
                GpuMetric::PcieRxBytesPerS,
                kb_per_s(PcieUtilCounter::Receive),
            ));
            batches.push((GpuMetric::PcieTxBytesPerS, kb_per_s(PcieUtilCounter::Send)));
        }
        if self.supported.clock {
            batches.push((
                GpuMetric::SmClockMhz,
                reading(self.device.clock_info(Clock::SM)),
            ));
        }
        if self.supported.power {
            batches.push((GpuMetric::PowerMw, reading(self.device.power_usage())));
        }
        for (metric, points) in batches {
            if let Some(points) = points {
                self.send(tx, metric, points);
            }
        }
        if self.supported.processes {
            self.poll_processes(tx);
        }
    }

    /// The driver's per-process samples since the last poll, averaged per
    /// process into one point each.
    fn poll_processes(&mut self, tx: &mpsc::Sender<Message>) {
        let samples = match self.device.process_utilization_stats(self.last_process_us) {
            Ok(samples) => samples,
            Err(NvmlError::NotFound) => Vec::new(),
            Err(_) => return,
        };
        let mut per_pid: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.timestamp > self.last_process_us)
        {
            let (sum, n) = per_pid.entry(s.pid).or_default();
            *sum += s.sm_util;
            *n += 1;
        }
        if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
            self.last_process_us = self.last_process_us.max(newest);
        }
        let utils = per_pid
            .into_iter()
            .map(|(pid, (sum, n))| (pid, sum / n))
            .collect();
        let _ = tx.send(Message::Processes {
            gpu: self.info.index,
            ts_ns: now(),
            utils,
        });
    }

    fn send(&self, tx: &mpsc::Sender<Message>, metric: GpuMetric, points: Vec<(u64, u64)>) {
        if points.is_empty() {
            return;
        }
        let _ = tx.send(Message::Series(GpuSeries {
            gpu: self.info.index,
            metric,
            pid: None,
            points,
        }));
    }
}

/// Records a series the library or GPU cannot give; true when it can.
/// NotFound means "no samples yet", which is support.
fn check_supported(
    missing: &mut Vec<String>,
    what: &str,
    function: &str,
    result: Result<(), NvmlError>,
) -> bool {
    let why = match result {
        Ok(()) | Err(NvmlError::NotFound) => return true,
        Err(NvmlError::FailedToLoadSymbol(_)) => "not in the NVML library".to_string(),
        Err(NvmlError::NotSupported) => "not supported by this GPU".to_string(),
        Err(e) => e.to_string(),
    };
    missing.push(format!("{what} ({function}): {why}"));
    false
}

/// The driver's buffered samples newer than `*last_us`, on CLOCK_MONOTONIC,
/// oldest first; advances `*last_us`.
fn new_samples(device: &Device<'_>, kind: Sampling, last_us: &mut u64) -> Vec<(u64, u64)> {
    // NotFound: nothing new since last time.
    let Ok(mut samples) = device.samples(kind, *last_us) else {
        return Vec::new();
    };
    let anchor = super::clock::anchor();
    samples.retain(|s| s.timestamp > *last_us);
    samples.sort_by_key(|s| s.timestamp);
    if let Some(newest) = samples.last() {
        *last_us = newest.timestamp;
    }
    samples
        .iter()
        .map(|s| {
            let ts = anchor.realtime_to_monotonic(s.timestamp.saturating_mul(1000));
            (ts, value(&s.value))
        })
        .collect()
}

fn value(v: &SampleValue) -> u64 {
    match *v {
        SampleValue::U32(x) => x.into(),
        SampleValue::U64(x) => x,
        SampleValue::I64(x) => x.max(0) as u64,
        SampleValue::F64(x) => x.max(0.0).round() as u64,
    }
}

fn now() -> u64 {
    super::clock::monotonic_ns()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_says_how_to_fix_it() {
        let opts = GpuOptions {
            library: Some("/nonexistent/libnvidia-ml.so.1".into()),
            ..Default::default()
        };
        let (info, sampler) = start(&opts);
        assert!(sampler.is_none());
        let status = info.status.unwrap();
        assert!(status.contains("NVML library not found"), "{status}");
        assert!(status.contains("--nvml-lib"), "{status}");
    }

    #[test]
    fn turned_off_samples_nothing() {
        let opts = GpuOptions {
            enabled: false,
            ..Default::default()
        };
        let (info, sampler) = start(&opts);
        assert!(sampler.is_none());
        assert!(info.status.unwrap().contains("--no-gpu"));
    }

    #[test]
    fn process_polls_cover_every_tracked_process() {
        let (tx, samples) = mpsc::channel();
        let sampler = GpuSampler {
            samples,
            stop: None,
            thread: None,
        };
        tx.send(Message::Processes {
            gpu: 0,
            ts_ns: 10,
            utils: vec![(7, 80), (99, 50)],
        })
        .unwrap();
        let tracked: HashSet<u32> = [7, 8].into();
        let batches = sampler.drain(&tracked);
        let point = |pid| {
            batches
                .iter()
                .find(|b| b.pid == Some(pid))
                .map(|b| b.points.clone())
        };
        assert_eq!(point(7), Some(vec![(10, 80)]));
        assert_eq!(point(8), Some(vec![(10, 0)]));
        assert_eq!(point(99), None);
    }
}

//! Loads tprof's kernel programs, attaches them, and owns their maps. The
//! only module that talks to aya; dropping [`KernelPrograms`] detaches every
//! program and frees every map (nothing is pinned, so a killed tprof leaves
//! nothing behind either: the kernel frees them with the last fd).

use anyhow::{Context as _, Result, anyhow};
use std::collections::HashMap as StdHashMap;

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap},
    programs::{
        PerfEvent, TracePoint,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
    util::online_cpus,
};
use profiler_ebpf::{LOST_TRACK_FULL, OffCpuStart, StackKey, TracepointOffsets, kind, lost_stack};

use crate::recording::{LostCounts, events::kind_name};

/// The object built by build.rs from profiler-ebpf.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// (program, tracepoint category, tracepoint name).
const TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("tprof_switch", "sched", "sched_switch"),
    ("tprof_waking", "sched", "sched_waking"),
    ("tprof_wakeup", "sched", "sched_wakeup"),
    ("tprof_wakeup_new", "sched", "sched_wakeup_new"),
    ("tprof_newtask", "task", "task_newtask"),
    ("tprof_exec", "sched", "sched_process_exec"),
    ("tprof_exit", "sched", "sched_process_exit"),
    ("tprof_rename", "task", "task_rename"),
];

/// The on-CPU sampler, attached to a cpu-clock perf event on every CPU.
const SAMPLER: &str = "tprof_sample";

/// What the kernel aggregated, read out when recording ends.
#[derive(Debug, Default)]
pub struct RawStacks {
    /// Weight per key, summed over CPUs.
    pub counts: Vec<(StackKey, u64)>,
    /// Instruction pointers of each stack id, leaf first.
    pub stacks: StdHashMap<i32, Vec<u64>>,
    /// Threads off CPU right now: (tid, where and when they left).
    pub pending: Vec<(u32, OffCpuStart)>,
}

pub struct KernelPrograms {
    // Field order is drop order: maps first, then the programs and links.
    pub events: RingBuf<MapData>,
    tracked_tgids: HashMap<MapData, u32, u8>,
    tracked_tids: HashMap<MapData, u32, u32>,
    lost: PerCpuArray<MapData, u64>,
    stacks: StackTraceMap<MapData>,
    stack_counts: PerCpuHashMap<MapData, StackKey, u64>,
    offcpu_start: HashMap<MapData, u32, OffCpuStart>,
    _ebpf: Ebpf,
}

impl KernelPrograms {
    /// Loads the programs with this kernel's tracepoint offsets, without
    /// attaching them.
    /// `sample_stacks` false turns off-CPU stack walks off in the kernel.
    pub fn load(offsets: &TracepointOffsets, sample_stacks: bool) -> Result<KernelPrograms> {
        let sample_stacks = u32::from(sample_stacks);
        let mut ebpf = EbpfLoader::new()
            .override_global("OFFSETS", offsets, true)
            .override_global("SAMPLE_STACKS", &sample_stacks, true)
            .load(OBJECT)
            .map_err(|e| anyhow!("loading the eBPF programs failed: {e}"))
            .context(
                "the kernel refused tprof's programs; tprof needs Linux 5.15+ with \
                 CONFIG_BPF_SYSCALL and BTF, run as root",
            )?;
        for (name, _, _) in TRACEPOINTS {
            let program: &mut TracePoint = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing from the eBPF object"))?
                .try_into()?;
            program
                .load()
                .with_context(|| format!("the kernel's verifier rejected {name}"))?;
        }
        let sampler: &mut PerfEvent = ebpf
            .program_mut(SAMPLER)
            .with_context(|| format!("program {SAMPLER} missing from the eBPF object"))?
            .try_into()?;
        sampler
            .load()
            .with_context(|| format!("the kernel's verifier rejected {SAMPLER}"))?;
        Ok(KernelPrograms {
            events: RingBuf::try_from(take_map(&mut ebpf, "EVENTS")?)?,
            tracked_tgids: HashMap::try_from(take_map(&mut ebpf, "TRACKED_TGIDS")?)?,
            tracked_tids: HashMap::try_from(take_map(&mut ebpf, "TRACKED_TIDS")?)?,
            lost: PerCpuArray::try_from(take_map(&mut ebpf, "LOST")?)?,
            stacks: StackTraceMap::try_from(take_map(&mut ebpf, "STACKS")?)?,
            stack_counts: PerCpuHashMap::try_from(take_map(&mut ebpf, "STACK_COUNTS")?)?,
            offcpu_start: HashMap::try_from(take_map(&mut ebpf, "OFFCPU_START")?)?,
            _ebpf: ebpf,
        })
    }

    /// Attaches every program to its tracepoint.
    pub fn attach(&mut self) -> Result<()> {
        for (name, category, tracepoint) in TRACEPOINTS {
            let program: &mut TracePoint = self
                ._ebpf
                .program_mut(name)
                .expect("checked at load")
                .try_into()?;
            program.attach(category, tracepoint).with_context(|| {
                format!("attaching to tracepoint {category}/{tracepoint} failed")
            })?;
        }
        Ok(())
    }

    /// Samples every CPU's cpu-clock at `hz`; the program keeps samples of
    /// tracked threads only. (No hardware PMU is needed: cpu-clock is an
    /// hrtimer, so this works in VMs.)
    pub fn attach_sampler(&mut self, hz: u64) -> Result<()> {
        let program: &mut PerfEvent = self
            ._ebpf
            .program_mut(SAMPLER)
            .expect("checked at load")
            .try_into()?;
        let cpus = online_cpus().map_err(|(what, e)| anyhow!("cannot list CPUs ({what}): {e}"))?;
        for cpu in cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(hz),
                    false,
                )
                .with_context(|| format!("attaching the cpu-clock sampler on CPU {cpu} failed"))?;
        }
        Ok(())
    }

    /// Reads the stack aggregate, every stack it refers to, and the threads
    /// off CPU now. Ids whose stack is gone read as missing.
    pub fn read_stacks(&self) -> Result<RawStacks> {
        let mut raw = RawStacks::default();
        for item in self.stack_counts.iter() {
            let (key, per_cpu) = item.context("reading the stack aggregate failed")?;
            let total: u64 = per_cpu.iter().sum();
            raw.counts.push((key, total));
        }
        for (key, _) in &raw.counts {
            for id in [key.user_stack_id, key.kernel_stack_id] {
                if id >= 0 && !raw.stacks.contains_key(&id) {
                    let ips = self
                        .stacks
                        .get(&(id as u32), 0)
                        .map(|trace| trace.frames().iter().map(|f| f.ip).collect())
                        .unwrap_or_default();
                    raw.stacks.insert(id, ips);
                }
            }
        }
        for item in self.offcpu_start.iter() {
            raw.pending
                .push(item.context("reading the off-CPU threads failed")?);
        }
        Ok(raw)
    }

    /// Starts tracking a process: the kernel then tracks its new threads
    /// and children by itself.
    pub fn track_process(&mut self, tgid: u32) -> Result<()> {
        self.tracked_tgids
            .insert(tgid, 1, 0)
            .with_context(|| format!("cannot track process {tgid}: tracked-process map full"))
    }

    /// Starts tracking one thread of a tracked process.
    pub fn track_thread(&mut self, tid: u32, tgid: u32) -> Result<()> {
        self.tracked_tids
            .insert(tid, tgid, 0)
            .with_context(|| format!("cannot track thread {tid}: tracked-thread map full"))
    }

    /// Stops tracking a thread that turned out to be gone.
    pub fn untrack_thread(&mut self, tid: u32) {
        let _ = self.tracked_tids.remove(&tid);
    }

    /// Drop counts so far, summed over CPUs.
    pub fn lost_counts(&self) -> Result<LostCounts> {
        let mut lost = LostCounts::default();
        let total = |slot: u32| -> Result<u64> { Ok(self.lost.get(&slot, 0)?.iter().sum()) };
        for slot in 0..kind::COUNT {
            if slot == LOST_TRACK_FULL {
                lost.tracking_full = total(slot)?;
            } else {
                lost.ring_buffer_full
                    .insert(kind_name(slot as u16).to_string(), total(slot)?);
            }
        }
        lost.stack_collisions = total(lost_stack::COLLISION)?;
        lost.stack_failed = total(lost_stack::FAILED)?;
        lost.stack_aggregate_full = total(lost_stack::AGGREGATE_FULL)?;
        lost.offcpu_full = total(lost_stack::OFFCPU_FULL)?;
        Ok(lost)
    }
}

fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}

//! Loads tprof's kernel programs, attaches them, and owns their maps. The
//! only module that talks to aya; dropping [`KernelPrograms`] detaches every
//! program and frees every map (nothing is pinned, so a killed tprof leaves
//! nothing behind either: the kernel frees them with the last fd).

use std::collections::{BTreeMap, HashMap as StdHashMap};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
use std::path::Path;

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, MapError, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap},
    programs::{
        PerfEvent, Program, RawTracePoint, TracePoint, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
    util::online_cpus,
};
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};
use profiler_ebpf::{
    EVENT_SHARDS, LOST_TRACK_FULL, MAX_TRACKED_TGIDS, MAX_TRACKED_TIDS, OffCpuStart,
    RING_BUFFER_BYTES, StackKey, ThreadState, TracepointOffsets, cuda_fn, kind, lost_stack,
    stack_kind,
};

use super::{btf, tracefs};
use crate::recording::{LostCounts, events::kind_name};

/// bpf_map_update_elem flag: create only, never overwrite.
const BPF_NOEXIST: u64 = 1;

/// The object built by build.rs from profiler-ebpf.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// A program and the tracepoint it attaches to.
struct Attachment {
    program: &'static str,
    category: &'static str,
    tracepoint: &'static str,
    /// Absent on some kernels (futex_wait is 6.7+): skipped when missing.
    optional: bool,
}

const fn tp(program: &'static str, category: &'static str, tracepoint: &'static str) -> Attachment {
    Attachment {
        program,
        category,
        tracepoint,
        optional: false,
    }
}

const fn optional(
    program: &'static str,
    category: &'static str,
    tracepoint: &'static str,
) -> Attachment {
    Attachment {
        program,
        category,
        tracepoint,
        optional: true,
    }
}

/// The scheduler programs, each in two builds: (classic tracepoint program,
/// raw tracepoint program, tracepoint). The raw ones skip the perf record
/// the kernel fills for a classic tracepoint on every context switch and
/// wakeup on the machine; they need task_struct offsets from the kernel's
/// BTF, so without BTF (or before Linux 5.18, whose sched_switch lacks
/// `prev_state`) the classic ones are loaded instead. Only one of each pair
/// is loaded.
const SCHED: &[(&str, &str, &str)] = &[
    ("tprof_switch", "tprof_switch_r", "sched_switch"),
    ("tprof_waking", "tprof_waking_r", "sched_waking"),
    ("tprof_wakeup_new", "tprof_wakenew_r", "sched_wakeup_new"),
];

/// Set to 1 to use the classic scheduler tracepoints even where the raw
/// ones work (to compare the two, and to test the fallback).
pub const CLASSIC_SCHED_ENV: &str = "TPROF_CLASSIC_SCHED";

/// Set to a raw scheduler program's name to have it treated as refused by
/// the verifier: the tests' way to exercise the fallback a kernel with BTF
/// but a stricter verifier takes, on a kernel that accepts every program.
const REFUSE_RAW_ENV: &str = "TPROF_REFUSE_RAW_SCHED";

const TRACEPOINTS: &[Attachment] = &[
    tp("tprof_newtask", "task", "task_newtask"),
    tp("tprof_exec", "sched", "sched_process_exec"),
    tp("tprof_exit", "sched", "sched_process_exit"),
    tp("tprof_rename", "task", "task_rename"),
    tp("tprof_bio_queue", "block", "block_bio_queue"),
    tp("tprof_bio_split", "block", "block_split"),
    tp("tprof_rq_insert", "block", "block_rq_insert"),
    tp("tprof_rq_issue", "block", "block_rq_issue"),
    tp("tprof_rq_complete", "block", "block_rq_complete"),
    tp("tprof_futex_enter", "syscalls", "sys_enter_futex"),
    tp("tprof_futex_exit", "syscalls", "sys_exit_futex"),
    optional("tprof_futex_wait_enter", "syscalls", "sys_enter_futex_wait"),
    optional("tprof_futex_exit", "syscalls", "sys_exit_futex_wait"),
    optional(
        "tprof_futex_waitv_enter",
        "syscalls",
        "sys_enter_futex_waitv",
    ),
    optional("tprof_futex_exit", "syscalls", "sys_exit_futex_waitv"),
];

/// The on-CPU sampler, attached to a cpu-clock perf event on every CPU.
const SAMPLER: &str = "tprof_sample";

/// CUDA runtime uprobes (profiler-ebpf's programs/cuda.rs): entry and return
/// of every traced function, told apart by the attach cookie, and the
/// count-only probe of cudaLaunchKernel.
const CUDA_ENTER: &str = "tprof_cuda_enter";
const CUDA_RETURN: &str = "tprof_cuda_return";
const CUDA_LAUNCH: &str = "tprof_cuda_launch";

/// What attaching to one CUDA runtime library did.
#[derive(Debug, Default)]
pub struct CudaProbes {
    /// Functions probed.
    pub probed: Vec<String>,
    /// Functions not probed, each with why.
    pub missing: Vec<String>,
}

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

/// Sizes of the kernel maps that bound what tprof can follow. The defaults
/// are the ABI crate's constants; `tprof record`'s hidden
/// `--max-tracked-threads` and `--ring-buffer-size` shrink them so tests can
/// fill the tracked set or overflow the ring buffer with a modest workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLimits {
    /// Entries of TRACKED_TIDS, and of TRACKED_TGIDS when below its default.
    pub tracked_threads: u32,
    /// Bytes of the EVENTS ring buffer: a power of two, a multiple of the
    /// page size.
    pub ring_buffer_bytes: u32,
}

impl Default for MapLimits {
    fn default() -> MapLimits {
        MapLimits {
            tracked_threads: MAX_TRACKED_TIDS,
            ring_buffer_bytes: RING_BUFFER_BYTES,
        }
    }
}

pub struct KernelPrograms {
    // Field order is drop order: maps first, then the programs and links.
    /// The event shards, `EVENTS0`… (CPU c writes to shard c % EVENT_SHARDS).
    pub events: Vec<RingBuf<MapData>>,
    tracked_tgids: HashMap<MapData, u32, u8>,
    /// tid → the thread's state in the kernel, off-CPU start included.
    tracked_tids: HashMap<MapData, u32, ThreadState>,
    lost: PerCpuArray<MapData, u64>,
    stacks: StackTraceMap<MapData>,
    stack_counts: PerCpuHashMap<MapData, StackKey, u64>,
    cuda_launches: PerCpuHashMap<MapData, u32, u64>,
    /// The raw scheduler programs are loaded (else the classic ones).
    raw_sched: bool,
    _ebpf: Ebpf,
}

impl KernelPrograms {
    /// Loads the programs with this kernel's tracepoint offsets, without
    /// attaching them.
    /// `sample_stacks` false turns off-CPU stack walks off in the kernel.
    pub fn load(
        offsets: &TracepointOffsets,
        sample_stacks: bool,
        limits: MapLimits,
    ) -> Result<KernelPrograms> {
        let sample_stacks = u32::from(sample_stacks);
        let mut offsets = *offsets;
        let raw_sched = std::env::var_os(CLASSIC_SCHED_ENV).is_none_or(|v| v != "1")
            && match btf::task_offsets() {
                Ok(task) => {
                    offsets.task_pid = task.pid;
                    offsets.task_exit_state = task.exit_state;
                    offsets.task_cpu = task.cpu;
                    true
                }
                // No BTF (or an older kernel): the classic tracepoints
                // record the same events, at a higher cost per event.
                Err(_) => false,
            };
        let shard_bytes = shard_sizes(limits.ring_buffer_bytes);
        let shard_names: Vec<String> = (0..EVENT_SHARDS).map(|i| format!("EVENTS{i}")).collect();
        let mut loader = EbpfLoader::new();
        for (name, &bytes) in shard_names.iter().zip(&shard_bytes) {
            loader.map_max_entries(name, bytes);
        }
        let mut ebpf = loader
            .override_global("OFFSETS", &offsets, true)
            .override_global("SAMPLE_STACKS", &sample_stacks, true)
            .map_max_entries("TRACKED_TIDS", limits.tracked_threads)
            .map_max_entries(
                "TRACKED_TGIDS",
                limits.tracked_threads.min(MAX_TRACKED_TGIDS),
            )
            .load(OBJECT)
            .map_err(|e| anyhow!("loading the eBPF programs failed: {e}"))
            .context(
                "the kernel refused tprof's programs; tprof needs Linux 5.15+ with \
                 CONFIG_BPF_SYSCALL, run as root (kernel BTF is not needed)",
            )?;
        let is_sched = |name: &str| {
            SCHED
                .iter()
                .any(|&(classic, raw, _)| name == classic || name == raw)
        };
        for (name, program) in ebpf.programs_mut() {
            if !is_sched(name) {
                load_program(name, program)?;
            }
        }
        // The raw scheduler programs where they load; a kernel whose
        // verifier refuses one (BTF present but something else missing)
        // gets the classic ones rather than no recording.
        let mut raw_sched = raw_sched;
        if raw_sched {
            for &(_, raw, _) in SCHED {
                if let Err(e) = load_raw_sched(&mut ebpf, raw) {
                    eprintln!(
                        "tprof: note: {e:#}; recording with the classic scheduler \
                         tracepoints instead, which cost the job more per event"
                    );
                    raw_sched = false;
                    break;
                }
            }
        }
        if !raw_sched {
            for &(classic, raw, _) in SCHED {
                if let Some(program) = ebpf.program_mut(raw) {
                    // Unloading one that did load; one that did not is a no-op error.
                    let _ = match program {
                        Program::RawTracePoint(p) => p.unload(),
                        _ => Ok(()),
                    };
                }
                let program = ebpf
                    .program_mut(classic)
                    .with_context(|| format!("program {classic} missing from the eBPF object"))?;
                load_program(classic, program)?;
            }
        }
        ebpf.program(SAMPLER)
            .with_context(|| format!("program {SAMPLER} missing from the eBPF object"))?;
        Ok(KernelPrograms {
            events: shard_names
                .iter()
                .map(|name| Ok(RingBuf::try_from(take_map(&mut ebpf, name)?)?))
                .collect::<Result<_>>()?,
            tracked_tgids: HashMap::try_from(take_map(&mut ebpf, "TRACKED_TGIDS")?)?,
            tracked_tids: HashMap::try_from(take_map(&mut ebpf, "TRACKED_TIDS")?)?,
            lost: PerCpuArray::try_from(take_map(&mut ebpf, "LOST")?)?,
            stacks: StackTraceMap::try_from(take_map(&mut ebpf, "STACKS")?)?,
            stack_counts: PerCpuHashMap::try_from(take_map(&mut ebpf, "STACK_COUNTS")?)?,
            cuda_launches: PerCpuHashMap::try_from(take_map(&mut ebpf, "CUDA_LAUNCHES")?)?,
            raw_sched,
            _ebpf: ebpf,
        })
    }

    /// Attaches every program to its tracepoint.
    pub fn attach(&mut self) -> Result<()> {
        for &(classic, raw, tracepoint) in SCHED {
            let what = || format!("attaching to tracepoint sched/{tracepoint} failed");
            if self.raw_sched {
                let program: &mut RawTracePoint = self
                    ._ebpf
                    .program_mut(raw)
                    .with_context(|| format!("program {raw} missing from the eBPF object"))?
                    .try_into()?;
                program.attach(tracepoint).with_context(what)?;
            } else {
                let program: &mut TracePoint = self
                    ._ebpf
                    .program_mut(classic)
                    .with_context(|| format!("program {classic} missing from the eBPF object"))?
                    .try_into()?;
                program
                    .attach("sched", tracepoint)
                    .with_context(|| format!("{}; is the kernel built with it?", what()))?;
            }
        }
        for a in TRACEPOINTS {
            if a.optional && !tracefs::exists(a.category, a.tracepoint) {
                continue;
            }
            let program: &mut TracePoint = self
                ._ebpf
                .program_mut(a.program)
                .with_context(|| format!("program {} missing from the eBPF object", a.program))?
                .try_into()?;
            program.attach(a.category, a.tracepoint).with_context(|| {
                format!(
                    "attaching to tracepoint {}/{} failed; is the kernel built with it?",
                    a.category, a.tracepoint
                )
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

    /// Probes the CUDA runtime functions in the library file at `library`,
    /// for every process that maps it (the programs keep tracked processes
    /// only). A function the library lacks is skipped and named in
    /// [`CudaProbes::missing`]; only a broken program object is an error.
    pub fn attach_cuda(&mut self, library: &Path) -> Result<CudaProbes> {
        let mut out = CudaProbes::default();
        for (func, symbol) in cuda_fn::ALL {
            let point = || UProbeAttachPoint {
                location: UProbeAttachLocation::Symbol(symbol),
                cookie: Some(u64::from(func)),
            };
            let entry_name = if func == cuda_fn::LAUNCH_KERNEL {
                CUDA_LAUNCH
            } else {
                CUDA_ENTER
            };
            let entry = self.uprobe(entry_name)?;
            let entry_link = match entry.attach(point(), library, UProbeScope::AllProcesses) {
                Ok(link) => link,
                Err(e) => {
                    out.missing
                        .push(format!("{symbol}: {:#}", anyhow::Error::from(e)));
                    continue;
                }
            };
            if func != cuda_fn::LAUNCH_KERNEL {
                let ret = self.uprobe(CUDA_RETURN)?;
                if let Err(e) = ret.attach(point(), library, UProbeScope::AllProcesses) {
                    out.missing
                        .push(format!("{symbol} (return): {:#}", anyhow::Error::from(e)));
                    // An entry without its return would only fill CUDA_CALLS.
                    self.uprobe(entry_name)?.detach(entry_link)?;
                    continue;
                }
            }
            out.probed.push(symbol.to_string());
        }
        Ok(out)
    }

    fn uprobe(&mut self, name: &str) -> Result<&mut UProbe> {
        Ok(self
            ._ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing from the eBPF object"))?
            .try_into()?)
    }

    /// cudaLaunchKernel calls per process so far, summed over CPUs.
    pub fn cuda_launches(&self) -> Result<BTreeMap<u32, u64>> {
        let mut out = BTreeMap::new();
        for item in self.cuda_launches.iter() {
            let (tgid, per_cpu) = item.context("reading the cudaLaunchKernel counts failed")?;
            out.insert(tgid, per_cpu.iter().sum());
        }
        Ok(out)
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
        for item in self.tracked_tids.iter() {
            let (tid, state) = item.context("reading the off-CPU threads failed")?;
            raw.pending.push((tid, state.offcpu));
        }
        // The raw sched_switch program walks the kernel stack from inside
        // itself: its first frames are the program and the tracepoint's
        // BPF trampoline (bpf_trace_run4), not where the thread stopped.
        let trampoline = if self.raw_sched {
            Trampolines::read()
        } else {
            Trampolines::default()
        };
        let offcpu_kernel: std::collections::HashSet<i32> = raw
            .counts
            .iter()
            .filter(|(key, _)| key.kind != stack_kind::ON_CPU)
            .map(|(key, _)| key.kernel_stack_id)
            .collect();
        for (key, _) in &raw.counts {
            for id in [key.user_stack_id, key.kernel_stack_id] {
                if id >= 0 && !raw.stacks.contains_key(&id) {
                    let mut ips: Vec<u64> = self
                        .stacks
                        .get(&(id as u32), 0)
                        .map(|trace| trace.frames().iter().map(|f| f.ip).collect())
                        .unwrap_or_default();
                    if id == key.kernel_stack_id && offcpu_kernel.contains(&id) {
                        let skip = ips.iter().take_while(|&&ip| trampoline.holds(ip)).count();
                        ips.drain(..skip.min(ips.len().saturating_sub(1)));
                    }
                    raw.stacks.insert(id, ips);
                }
            }
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
    /// A thread the kernel already tracks (`tprof_newtask` added it since
    /// its process was tracked) keeps its entry: overwriting it would drop
    /// the off-CPU start or futex wait the programs keep there.
    pub fn track_thread(&mut self, tid: u32, tgid: u32) -> Result<()> {
        match self
            .tracked_tids
            .insert(tid, ThreadState::new(tgid), BPF_NOEXIST)
        {
            Ok(()) => Ok(()),
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::EEXIST) => {
                Ok(())
            }
            Err(e) => Err(e)
                .with_context(|| format!("cannot track thread {tid}: tracked-thread map full")),
        }
    }

    /// Stops tracking a thread that turned out to be gone.
    pub fn untrack_thread(&mut self, tid: u32) {
        let _ = self.tracked_tids.remove(&tid);
    }

    /// Drop counts so far, summed over CPUs.
    pub fn lost_counts(&self) -> Result<LostCounts> {
        let mut lost = LostCounts {
            recursion_misses: self.recursion_misses(),
            ..Default::default()
        };
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

impl KernelPrograms {
    /// Runs of our programs the kernel skipped because another BPF program
    /// was already running on that CPU (a completion interrupt arriving
    /// while a sched_switch program runs, say): events that never happened
    /// as far as the recording knows.
    fn recursion_misses(&self) -> u64 {
        self._ebpf
            .programs()
            .filter_map(|(_, program)| program.fd().ok())
            .filter_map(|fd| prog_info(fd.as_fd()).ok())
            .map(|info| info.recursion_misses)
            .sum()
    }
}

/// BPF_OBJ_GET_INFO_BY_FD for a program: aya's ProgramInfo does not expose
/// recursion_misses.
fn prog_info(fd: BorrowedFd<'_>) -> std::io::Result<bpf_prog_info> {
    // SAFETY: both are plain C structs for which zero is a valid value.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = size_of::<bpf_prog_info>() as u32;
    attr.info.info = (&raw mut info) as u64;
    // SAFETY: attr points at a valid bpf_attr whose info buffer outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            &raw mut attr,
            size_of::<bpf_attr>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info)
}

/// Bytes of each event shard: the ring buffer budget split evenly (rounded
/// down to a power of two, at least a page) over the shards online CPUs
/// write to; a shard no online CPU uses gets one page.
fn shard_sizes(total: u32) -> Vec<u32> {
    let page = page_size();
    let cpus = online_cpus().unwrap_or_else(|_| vec![0]);
    let used: Vec<bool> = (0..EVENT_SHARDS)
        .map(|shard| cpus.iter().any(|&cpu| cpu % EVENT_SHARDS == shard))
        .collect();
    let count = used.iter().filter(|&&u| u).count().max(1) as u32;
    let share = total / count;
    let share = if share == 0 {
        0
    } else {
        1 << (31 - share.leading_zeros())
    };
    used.iter()
        .map(|&u| if u { share.max(page) } else { page })
        .collect()
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096).max(4096)
}

/// Loads one program into the kernel (verifier included).
fn load_program(name: &str, program: &mut Program) -> Result<()> {
    let loaded = match program {
        Program::TracePoint(p) => p.load(),
        Program::RawTracePoint(p) => p.load(),
        Program::PerfEvent(p) => p.load(),
        Program::UProbe(p) => p.load(),
        other => bail!(
            "program {name} has an unexpected type {:?}",
            other.prog_type()
        ),
    };
    loaded.with_context(|| format!("the kernel's verifier rejected {name}"))
}

/// Loads one raw scheduler program (or fails as [`REFUSE_RAW_ENV`] asks).
fn load_raw_sched(ebpf: &mut Ebpf, raw: &str) -> Result<()> {
    if std::env::var_os(REFUSE_RAW_ENV).is_some_and(|v| v == raw) {
        bail!("the kernel's verifier rejected {raw} ({REFUSE_RAW_ENV} is set)");
    }
    let program = ebpf
        .program_mut(raw)
        .with_context(|| format!("program {raw} missing from the eBPF object"))?;
    load_program(raw, program)
}

fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}

/// Kernel text of BPF programs and the raw tracepoint trampolines, from
/// /proc/kallsyms: the frames a stack walked inside a raw tracepoint
/// program starts with.
#[derive(Debug, Default)]
struct Trampolines {
    /// (start address, is BPF machinery), sorted by address.
    symbols: Vec<(u64, bool)>,
}

impl Trampolines {
    fn read() -> Trampolines {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let mut symbols: Vec<(u64, bool)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let name = parts.nth(1)?;
                let machinery = ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"]
                    .iter()
                    .any(|prefix| name.starts_with(prefix));
                Some((addr, machinery))
            })
            .collect();
        symbols.sort_unstable();
        Trampolines { symbols }
    }

    /// True when `ip` falls in a BPF program or trampoline symbol.
    fn holds(&self, ip: u64) -> bool {
        match self.symbols.partition_point(|&(addr, _)| addr <= ip) {
            0 => false,
            i => self.symbols[i - 1].1,
        }
    }
}

//! [`KernelPrograms`]: the loaded object, its programs and maps, and the
//! named steps of loading it that `programs`' doc lists. Apart from
//! `programs/mod.rs` so its siblings (`attach`, `info`, `in_flight`) import
//! it from here, never from their parent.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray, PerCpuHashMap, StackTraceMap},
    programs::Program,
    util::{nr_cpus, online_cpus},
};
use profiler_ebpf::{
    BPF_NOEXIST, COPY_RING_BUFFER_BYTES, EVENT_SHARDS, FileOffsets, LOST_TRACK_FULL,
    MAX_BIO_OWNERS, MAX_CUDA_CALLS, MAX_REQUESTS, MAX_TRACKED_TGIDS, MAX_TRACKED_TIDS, PyProcInfo,
    RING_BUFFER_BYTES, RequestOffsets, ThreadState, TracepointOffsets, kind, lost_map, lost_stack,
    names::{global, map},
    stack_mode, switch_part,
};

use super::attach::{COMPLETE, SCHED};
use super::in_flight::{Expired, InFlight};
use super::links::Links;
use super::ring::Ring;
use super::stacks::StackSource;
use crate::capture::{btf, procfs};
use tprof_core::recording::{LostCounts, UserStacks, events::kind_name};

/// The object built by build.rs from profiler-ebpf.
#[cfg(not(tprof_no_ebpf))]
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));
/// Built without bpf-linker (see build.rs): no programs to load.
#[cfg(tprof_no_ebpf)]
static OBJECT: &[u8] = &[];

/// Set to 1 to use the classic scheduler tracepoints even where the raw
/// ones work (to compare the two, and to test the fallback).
pub(super) const CLASSIC_SCHED_ENV: &str = "TPROF_CLASSIC_SCHED";

/// Set to 1 to use the classic block_rq_complete tracepoint even where the
/// raw one works (to compare the completions each sees, and to test the
/// fallback).
const CLASSIC_BLOCK_ENV: &str = "TPROF_CLASSIC_BLOCK";

/// Set to 1 to take user stacks by frame-pointer walks in the kernel even
/// where copying them works (to compare the two, and to test the mode
/// kernels without BTF get).
pub(super) const FRAME_POINTER_STACKS_ENV: &str = "TPROF_FRAME_POINTER_STACKS";

/// Set to a raw tracepoint program's name (a scheduler one, or the block
/// completion's) to have it treated as refused by the verifier: the tests'
/// way to exercise the fallback a kernel with BTF but a stricter verifier
/// takes, on a kernel that accepts every program.
const REFUSE_RAW_ENV: &str = "TPROF_REFUSE_RAW_SCHED";
/// Set to 1 to have the Python walk treated as refused by the verifier (as
/// a kernel before 5.17, without `bpf_loop`, refuses it): the tests' way
/// to exercise recording without Python frames.
const REFUSE_PYTHON_ENV: &str = "TPROF_REFUSE_PYTHON_WALK";
/// Set to 1 to leave the pipe programs unattached, as on a kernel without
/// BTF: to measure what they cost (docs/benchmarks.md) and to test steps
/// without pipe events.
const NO_PIPES_ENV: &str = "TPROF_NO_PIPES";
/// Set to 1 to poll the targets' mappings (every process's maps once a
/// second, a young one's every drain) instead of reading them when the
/// kernel says they changed, as on a kernel without BTF: to measure what
/// polling costs (docs/benchmarks.md) and to test the fallback.
const POLL_MAPS_ENV: &str = "TPROF_POLL_MAPS";
/// Set to 1 to have the switch program measure where its time goes
/// (`profiler_ebpf::switch_part`); `tprof record` prints it when it ends
/// (the benches' breakdown of the switch program, docs/benchmarks.md).
const SWITCH_PROFILE_ENV: &str = "TPROF_SWITCH_PROFILE";

/// Sizes of the kernel maps that bound what tprof can follow, and how long
/// an entry of a map of things in flight may wait for its end. The
/// defaults are the ABI crate's constants; `tprof record`'s hidden
/// `--max-tracked-threads`, `--ring-buffer-size`, `--max-in-flight` and
/// `--expire-in-flight-after` change them so tests can fill the tracked
/// set, overflow the ring buffer, fill the maps of requests, bio owners and
/// CUDA calls, or expire their entries with a modest workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLimits {
    /// Entries of TRACKED_TIDS, and of TRACKED_TGIDS when below its default.
    pub tracked_threads: u32,
    /// Bytes of the EVENTS ring buffer: a power of two, a multiple of the
    /// page size.
    pub ring_buffer_bytes: u32,
    /// Entries of REQUESTS, BIO_OWNERS and CUDA_CALLS, each at most its
    /// default.
    pub in_flight: u32,
    /// An entry of REQUESTS or BIO_OWNERS older than this is dropped (and
    /// counted): its end will not come.
    pub in_flight_expiry: Duration,
}

impl Default for MapLimits {
    fn default() -> MapLimits {
        MapLimits {
            tracked_threads: MAX_TRACKED_TIDS,
            ring_buffer_bytes: RING_BUFFER_BYTES,
            in_flight: MAX_REQUESTS.max(MAX_BIO_OWNERS).max(MAX_CUDA_CALLS),
            in_flight_expiry: IN_FLIGHT_EXPIRY,
        }
    }
}

/// How long a block request or a tracked bio may stay in flight before its
/// entry is taken for one whose end the kernel will never report. Devices
/// time out a command after 30 s (SCSI's and NVMe's defaults); a request
/// still waiting after twice that has been retried or aborted.
pub(super) const IN_FLIGHT_EXPIRY: Duration = Duration::from_mins(1);

/// What stacks are taken, when they are.
#[derive(Debug, Clone, Copy)]
pub struct StackSettings {
    /// Bytes of user stack a copy takes (`--stack-size`).
    pub copy_bytes: u32,
    /// On-CPU samples per second (`--hz`).
    pub hz: u64,
}

pub struct KernelPrograms {
    // Field order is drop order: the links first (detaching is what ends
    // the programs' cost to the job), then the maps, then the programs.
    /// Every attachment, detached together.
    pub(super) links: Links,
    /// The event shards, `EVENTS0`… (CPU c writes to shard c % EVENT_SHARDS).
    events: Vec<Ring>,
    /// The stack copy shards, `COPIES0`…, likewise.
    copies: Vec<Ring>,
    tracked_tgids: HashMap<MapData, u32, u8>,
    /// tid → the thread's state in the kernel.
    tracked_tids: HashMap<MapData, u32, ThreadState>,
    lost: PerCpuArray<MapData, u64>,
    /// Until [`KernelPrograms::take_stack_source`] hands it on.
    stacks: Option<StackSource>,
    cuda_launches: PerCpuHashMap<MapData, u32, u64>,
    /// REQUESTS, BIO_OWNERS, CUDA_CALLS.
    in_flight: InFlight,
    /// Python processes: where their interpreters keep their frames.
    py_procs: HashMap<MapData, u32, PyProcInfo>,
    /// The switch program's time by part, when [`SWITCH_PROFILE_ENV`] asks.
    switch_profile: PerCpuArray<MapData, u64>,
    /// When a tracked process first asked its DataLoader for a batch, after
    /// which the pipe program stands down (0 until then).
    pub(super) steps_from_marks: Array<MapData, u64>,
    /// The kernel can tell CPython 3.10's threads apart (its BTF gave
    /// `thread.fsbase`).
    python_threads_by_fsbase: bool,
    /// The programs walk Python frames.
    python_frames: bool,
    /// The raw scheduler programs are loaded (else the classic ones).
    pub(super) raw_sched: bool,
    /// The raw block completion program is loaded (else the classic one).
    pub(super) raw_complete: bool,
    /// The pipe programs are loaded (attached by [`KernelPrograms::attach`]),
    /// or why not.
    pub(super) pipes: std::result::Result<(), String>,
    /// The programs that say when a tracked process maps executable memory
    /// are loaded (attached by [`KernelPrograms::attach`], which clears it
    /// when they cannot be): capture reads maps when told, else polls.
    pub(super) map_events: bool,
    /// How user stacks are taken ([`stack_mode`]), and how much a copy
    /// takes.
    stack_mode: u32,
    stack_copy_bytes: u32,
    /// The loaded object: its programs and their links (the maps above
    /// were taken out of it).
    pub(super) ebpf: Ebpf,
}

impl KernelPrograms {
    /// Loads the programs with this kernel's tracepoint offsets, without
    /// attaching them. `stacks` None turns off-CPU stack walks off in the
    /// kernel; else it says how many bytes of user stack a copy takes and
    /// how often stacks are sampled.
    ///
    /// User stacks are copied where the kernel has BTF (the copy needs
    /// `bpf_task_pt_regs`, 5.15+); where it has none, or its verifier
    /// refuses the copying programs, the kernel walks frame pointers
    /// instead, with a note.
    ///
    /// `python_frames` false turns the Python walk off. A kernel whose
    /// verifier refuses the Python walk (before 5.17: no `bpf_loop`) gets
    /// the programs without it, with a note.
    pub fn load(
        offsets: &TracepointOffsets,
        stacks: Option<StackSettings>,
        python_frames: bool,
        limits: MapLimits,
    ) -> Result<KernelPrograms> {
        if OBJECT.is_empty() {
            bail!(
                "this tprof was built without its eBPF programs (bpf-linker was missing); \
                 run `cargo xtask setup` and build it again to record"
            );
        }
        let python_frames = python_frames && stacks.is_some();
        if !python_frames {
            return Self::load_stacks(offsets, stacks, false, limits);
        }
        let refused = if std::env::var_os(REFUSE_PYTHON_ENV).is_some_and(|v| v == "1") {
            anyhow!("the kernel's verifier rejected the Python walk ({REFUSE_PYTHON_ENV} is set)")
        } else {
            match Self::load_stacks(offsets, stacks, true, limits) {
                Ok(programs) => return Ok(programs),
                Err(e) => e,
            }
        };
        let programs = Self::load_stacks(offsets, stacks, false, limits)?;
        eprintln!(
            "tprof: note: {refused:#}; recording without Python frames (the walk needs \
             Linux 5.17+ for bpf_loop)"
        );
        Ok(programs)
    }

    /// [`KernelPrograms::load`] in copy mode, or frame-pointer mode where
    /// copy mode is refused.
    fn load_stacks(
        offsets: &TracepointOffsets,
        stacks: Option<StackSettings>,
        python_frames: bool,
        limits: MapLimits,
    ) -> Result<KernelPrograms> {
        let copy_bytes = stacks.map_or(profiler_ebpf::DEFAULT_STACK_COPY_BYTES, |s| s.copy_bytes);
        let hz = stacks
            .map_or(profiler_ebpf::DEFAULT_SAMPLE_HZ, |s| s.hz)
            .max(1);
        let mode = wanted_stack_mode();
        let load = |mode| {
            let globals = Globals {
                offsets,
                sample_stacks: stacks.is_some(),
                stack_mode: mode,
                stack_copy_bytes: copy_bytes,
                preempt_stack_gap_ns: 1_000_000_000 / hz,
                python_frames,
            };
            Self::load_in(&globals, limits)
        };
        match load(mode) {
            Err(e) if mode == stack_mode::COPY && stacks.is_some() => {
                let why = format!("{e:#}");
                // Not the stack copy then: the first error says what is.
                let programs = load(stack_mode::FRAME_POINTERS).map_err(|_| e)?;
                eprintln!(
                    "tprof: note: this kernel cannot copy user stacks ({why}); \
                     walking frame pointers instead, which misses frames of code \
                     built without them"
                );
                Ok(programs)
            }
            loaded => loaded,
        }
    }

    fn load_in(globals: &Globals, limits: MapLimits) -> Result<KernelPrograms> {
        let (mut offsets, raw_sched) = sched_offsets(*globals.offsets);
        // Without them a switch-in the kernel did not trace is placed by
        // the events alone (model::threads), less exactly.
        (offsets.task_runtime, offsets.task_prev_runtime) =
            btf::runtime_offsets().unwrap_or((0, 0));
        // Without it CPython 3.10's threads cannot be told apart: its
        // processes get no Python frames (say so when one is found).
        offsets.task_fsbase = btf::fsbase_offset().unwrap_or(0);
        // The mapping programs read the call's registers with BTF helpers;
        // without BTF (or when asked to poll) their offsets stay 0 and they
        // do nothing.
        let map_events = offsets.mmap_ret != 0
            && offsets.mprotect_ret != 0
            && std::path::Path::new(btf::VMLINUX_BTF).exists()
            && std::env::var_os(POLL_MAPS_ENV).is_none_or(|v| v != "1");
        if !map_events {
            offsets.mmap_ret = 0;
            offsets.mprotect_ret = 0;
        }
        let globals = Globals {
            offsets: &offsets,
            ..*globals
        };
        // Without them the pipe programs do nothing and are not attached.
        let files = if std::env::var_os(NO_PIPES_ENV).is_some_and(|v| v == "1") {
            Err(anyhow!("pipe tracing was off ({NO_PIPES_ENV}=1)"))
        } else {
            file_offsets()
        };
        let requests = request_offsets();
        let mut ebpf = open_object(
            &globals,
            files.as_ref().copied().unwrap_or_default(),
            requests.as_ref().copied().unwrap_or_default(),
            limits,
        )?;
        load_programs(&mut ebpf)?;
        let pipes = files.map(|_| ()).map_err(|e| format!("{e:#}"));
        let raw_sched = load_pairs(
            &mut ebpf,
            SCHED,
            raw_sched,
            "the classic scheduler tracepoints instead, which cost the job more per event",
        )?;
        let raw_complete = load_pairs(
            &mut ebpf,
            COMPLETE,
            requests.is_ok(),
            "the classic block_rq_complete instead, which the kernel skips while another BPF program runs",
        )?;
        find_program(&mut ebpf, profiler_ebpf::names::program::SAMPLE)?;
        Ok(KernelPrograms {
            events: take_ring_buffers(&mut ebpf, &map::EVENTS)?,
            copies: take_ring_buffers(&mut ebpf, &map::COPIES)?,
            tracked_tgids: HashMap::try_from(take_map(&mut ebpf, map::TRACKED_TGIDS)?)?,
            tracked_tids: HashMap::try_from(take_map(&mut ebpf, map::TRACKED_TIDS)?)?,
            lost: PerCpuArray::try_from(take_map(&mut ebpf, map::LOST)?)?,
            stacks: Some(StackSource::new(
                StackTraceMap::try_from(take_map(&mut ebpf, map::STACKS)?)?,
                HashMap::try_from(take_map(&mut ebpf, map::SITE_CHECKS)?)?,
                raw_sched,
            )),
            cuda_launches: PerCpuHashMap::try_from(take_map(&mut ebpf, map::CUDA_LAUNCHES)?)?,
            in_flight: InFlight::take(&mut ebpf)?,
            py_procs: HashMap::try_from(take_map(&mut ebpf, map::PY_PROCS)?)?,
            switch_profile: PerCpuArray::try_from(take_map(&mut ebpf, map::SWITCH_PROFILE)?)?,
            steps_from_marks: Array::try_from(take_map(&mut ebpf, map::STEPS_FROM_MARKS)?)?,
            python_threads_by_fsbase: offsets.task_fsbase != 0,
            python_frames: globals.python_frames,
            raw_sched,
            raw_complete,
            pipes,
            map_events,
            stack_mode: globals.stack_mode,
            stack_copy_bytes: globals.stack_copy_bytes,
            links: Links::default(),
            ebpf,
        })
    }

    /// Has the kernel walk the Python frames of process `tgid`'s threads.
    pub fn set_python(&mut self, tgid: u32, info: PyProcInfo) -> Result<()> {
        self.py_procs
            .insert(tgid, info, 0)
            .with_context(|| format!("cannot walk process {tgid}'s Python frames: map full"))
    }

    /// Whether the programs walk Python frames.
    pub fn python_frames(&self) -> bool {
        self.python_frames
    }

    /// Whether the kernel can tell CPython 3.10's threads apart.
    pub fn python_threads_by_fsbase(&self) -> bool {
        self.python_threads_by_fsbase
    }

    /// The switch program's time by part (`switch_part`): (name, ns,
    /// runs), summed over CPUs; empty unless [`SWITCH_PROFILE_ENV`] asked.
    pub fn switch_profile(&self) -> Vec<(&'static str, u64, u64)> {
        if !profile_switch() {
            return Vec::new();
        }
        let total = |slot: u32| -> u64 {
            self.switch_profile
                .get(&slot, 0)
                .map_or(0, |per_cpu| per_cpu.iter().sum())
        };
        (0..switch_part::COUNT)
            .map(|p| {
                (
                    switch_part::NAMES[p as usize],
                    total(3 * p),
                    total(3 * p + 1),
                )
            })
            .collect()
    }

    /// Whether the kernel says when a tracked process maps executable
    /// memory ([`kind::EXEC_MAP`] events); else its maps are polled.
    pub fn map_events(&self) -> bool {
        self.map_events
    }

    /// How user stacks are taken ([`stack_mode`]).
    pub fn stack_mode(&self) -> u32 {
        self.stack_mode
    }

    /// How user stacks are taken, for the recording's header.
    pub fn user_stacks(&self) -> UserStacks {
        if self.stack_mode == stack_mode::COPY {
            UserStacks::Dwarf {
                copy_bytes: self.stack_copy_bytes,
            }
        } else {
            UserStacks::FramePointers
        }
    }

    /// Hands every record waiting in the event shards, then in the stack
    /// copy shards, to `each`, shard by shard (each shard's records in
    /// their order), emptying them. Copies after events: an event's copy
    /// was committed before it, so every event handed over has its copy
    /// handed over too (this drain or the one before).
    pub fn drain_events(&mut self, each: &mut dyn FnMut(&[u8])) {
        for shard in self.events.iter_mut().chain(&mut self.copies) {
            shard.drain(each);
        }
    }

    /// Detaches every program, all at once (see `links`), without waiting
    /// for the kernel to finish; the maps stay readable.
    pub fn detach(&mut self) {
        self.links.detach_all();
    }

    /// Waits until the kernel is done detaching (dropping the programs
    /// waits too): on a busy machine, seconds. Says so on stderr when it
    /// is not done yet.
    pub fn wait_detached(&mut self) {
        if !self.links.detached() {
            eprintln!(
                "tprof: waiting for the kernel to release the tracepoints (up to a second each \
                 while the machine is busy)…"
            );
        }
        self.links.wait();
    }

    /// The stack map, for the thread that reads it from now on (None the
    /// second time).
    pub fn take_stack_source(&mut self) -> Option<StackSource> {
        self.stacks.take()
    }

    /// cudaLaunchKernel calls per process so far, summed over CPUs.
    pub fn cuda_launches(&self) -> Result<BTreeMap<u32, u64>> {
        let mut out = BTreeMap::new();
        for item in &self.cuda_launches {
            let (tgid, per_cpu) = item.context("reading the cudaLaunchKernel counts failed")?;
            out.insert(tgid, per_cpu.iter().sum());
        }
        Ok(out)
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
    /// the stack walks or futex wait the programs keep there.
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
        let by_program = self.recursion_misses();
        let mut lost = LostCounts {
            recursion_misses: by_program.values().sum(),
            recursion_misses_by_program: by_program,
            ..Default::default()
        };
        let total = |slot: u32| -> Result<u64> { Ok(self.lost.get(&slot, 0)?.iter().sum()) };
        for slot in 0..kind::COUNT {
            if slot == LOST_TRACK_FULL {
                lost.tracking_full = total(slot)?;
            } else if slot == u32::from(kind::STACK_COPY) {
                // Only a stack is lost: its event says `[user stack lost]`.
                lost.stack_copy_lost += total(slot)?;
            } else {
                lost.ring_buffer_full
                    .insert(kind_name(slot as u16).to_string(), total(slot)?);
            }
        }
        lost.stack_collisions = total(lost_stack::COLLISION)?;
        lost.stack_failed = total(lost_stack::FAILED)?;
        lost.requests_full = total(lost_map::REQUESTS_FULL)?;
        lost.bio_owners_full = total(lost_map::BIO_OWNERS_FULL)?;
        lost.cuda_calls_full = total(lost_map::CUDA_CALLS_FULL)?;
        lost.cuda_launches_full = total(lost_map::CUDA_LAUNCHES_FULL)?;
        lost.stack_copy_lost += total(lost_stack::NO_REGS)? + total(lost_stack::NO_SCRATCH)?;
        Ok(lost)
    }

    /// Drops the entries of things in flight whose end will not come:
    /// requests and bios older than `expiry`, CUDA calls of threads that
    /// are gone. Returns how many of each, to be counted as lost.
    pub fn expire_in_flight(&mut self, expiry: Duration) -> Expired {
        self.in_flight.expire(expiry)
    }

    /// At the stop: drops the block requests whose submitting thread has
    /// exited (their completion was not traced), to be counted as lost.
    pub fn orphaned_requests(&mut self) -> Expired {
        self.in_flight.orphaned_requests()
    }
}

/// The tracepoint offsets with the `task_struct` fields the raw scheduler
/// programs read, and whether to load those (else the classic ones): where
/// the kernel's BTF gives the offsets and the user did not ask for the
/// classic programs.
fn sched_offsets(mut offsets: TracepointOffsets) -> (TracepointOffsets, bool) {
    if std::env::var_os(CLASSIC_SCHED_ENV).is_some_and(|v| v == "1") {
        return (offsets, false);
    }
    match btf::task_offsets() {
        Ok(task) => {
            offsets.task_pid = task.pid;
            offsets.task_exit_state = task.exit_state;
            offsets.task_cpu = task.cpu;
            (offsets, true)
        }
        // No BTF (or an older kernel): the classic tracepoints record the
        // same events, at a higher cost per event.
        Err(_) => (offsets, false),
    }
}

/// How user stacks will be taken: copied, unless the kernel has no BTF
/// (the copy's helpers need it) or [`FRAME_POINTER_STACKS_ENV`] asks for
/// frame pointers.
fn wanted_stack_mode() -> u32 {
    let forced = std::env::var_os(FRAME_POINTER_STACKS_ENV).is_some_and(|v| v == "1");
    if forced || !std::path::Path::new(btf::VMLINUX_BTF).exists() {
        stack_mode::FRAME_POINTERS
    } else {
        stack_mode::COPY
    }
}

/// Whether [`SWITCH_PROFILE_ENV`] asks for the switch program's breakdown.
fn profile_switch() -> bool {
    std::env::var_os(SWITCH_PROFILE_ENV).is_some_and(|v| v == "1")
}

/// The program globals userspace sets at load time.
#[derive(Clone, Copy)]
struct Globals<'a> {
    offsets: &'a TracepointOffsets,
    sample_stacks: bool,
    stack_mode: u32,
    stack_copy_bytes: u32,
    /// One sampling period: how long a preempted thread's stacks serve its
    /// next preemptions in the same stretch on the CPU.
    preempt_stack_gap_ns: u64,
    python_frames: bool,
}

/// Opens the object with the globals and map sizes set, its maps created
/// and no program loaded yet.
fn open_object(
    globals: &Globals,
    files: FileOffsets,
    requests: RequestOffsets,
    limits: MapLimits,
) -> Result<Ebpf> {
    let sample_stacks = u32::from(globals.sample_stacks);
    let profile_switch = u32::from(profile_switch());
    let python_frames = u32::from(globals.python_frames);
    // Two stack copy buffers per possible CPU (the switch programs', the
    // sampler's); only copy mode uses them.
    let scratch = match globals.stack_mode {
        stack_mode::COPY => nr_cpus().map_or(1, |n| n as u32) * 2,
        _ => 1,
    };
    let copy_bytes = match globals.stack_mode {
        stack_mode::COPY if globals.sample_stacks => COPY_RING_BUFFER_BYTES,
        _ => 0, // a page each
    };
    let mut loader = EbpfLoader::new();
    let shards = map::EVENTS
        .iter()
        .zip(shard_sizes(limits.ring_buffer_bytes))
        .chain(map::COPIES.iter().zip(shard_sizes(copy_bytes)));
    for (name, bytes) in shards {
        loader.map_max_entries(name, bytes);
    }
    loader
        .override_global(global::OFFSETS, globals.offsets, true)
        .override_global(global::SAMPLE_STACKS, &sample_stacks, true)
        .override_global(global::STACK_MODE, &globals.stack_mode, true)
        .override_global(global::STACK_COPY_BYTES, &globals.stack_copy_bytes, true)
        .override_global(
            global::PREEMPT_STACK_GAP_NS,
            &globals.preempt_stack_gap_ns,
            true,
        )
        .override_global(global::PYTHON_FRAMES, &python_frames, true)
        .override_global(global::FILE_OFFSETS, &files, true)
        .override_global(global::REQUEST_OFFSETS, &requests, true)
        .override_global(global::PROFILE_SWITCH, &profile_switch, true)
        .map_max_entries(map::STACK_SCRATCH, scratch)
        .map_max_entries(map::TRACKED_TIDS, limits.tracked_threads)
        .map_max_entries(map::REQUESTS, limits.in_flight.min(MAX_REQUESTS))
        .map_max_entries(map::BIO_OWNERS, limits.in_flight.min(MAX_BIO_OWNERS))
        .map_max_entries(map::CUDA_CALLS, limits.in_flight.min(MAX_CUDA_CALLS))
        .map_max_entries(
            map::TRACKED_TGIDS,
            limits.tracked_threads.min(MAX_TRACKED_TGIDS),
        )
        .load(OBJECT)
        .map_err(|e| anyhow!("loading the eBPF programs failed: {e}"))
        .context(
            "the kernel refused tprof's programs; tprof needs Linux 5.15+ with \
             CONFIG_BPF_SYSCALL, run as root (kernel BTF is not needed)",
        )
}

/// Loads every program but those in two builds (the scheduler's, the
/// block completion's), of which one is loaded.
fn load_programs(ebpf: &mut Ebpf) -> Result<()> {
    let paired = |name: &str| {
        SCHED
            .iter()
            .chain(COMPLETE)
            .any(|&(classic, raw, _)| name == classic || name == raw)
    };
    for (name, program) in ebpf.programs_mut() {
        if !paired(name) {
            load_program(name, program)?;
        }
    }
    Ok(())
}

/// The raw block completion program's offsets, unless the kernel has no
/// BTF or its `struct request` differs, or [`CLASSIC_BLOCK_ENV`] asks for
/// the classic program.
fn request_offsets() -> Result<RequestOffsets> {
    if std::env::var_os(CLASSIC_BLOCK_ENV).is_some_and(|v| v == "1") {
        bail!("{CLASSIC_BLOCK_ENV}=1");
    }
    btf::request_offsets()
}

/// Where the pipe program finds an fd's pipe: the kernel's BTF and the
/// syscall tracepoint's field.
fn file_offsets() -> Result<FileOffsets> {
    let mut files = btf::file_offsets()?;
    files.exit_ret = crate::capture::tracefs::read_ret_offset()?;
    Ok(files)
}

/// Loads a set of paired programs ([`SCHED`], [`COMPLETE`]): the raw ones
/// where they load (`raw`: their offsets were found) and the classic ones
/// otherwise; returns which set is loaded. A kernel whose verifier refuses
/// a raw one (BTF present but something else missing) gets the classic
/// ones rather than no recording, with a note naming them.
fn load_pairs(
    ebpf: &mut Ebpf,
    pairs: &[(&str, &str, &str)],
    raw: bool,
    classic_ones: &str,
) -> Result<bool> {
    if raw {
        match pairs
            .iter()
            .try_for_each(|&(_, raw, _)| load_raw(ebpf, raw))
        {
            Ok(()) => return Ok(true),
            Err(e) => eprintln!("tprof: note: {e:#}; recording with {classic_ones}"),
        }
    }
    for &(classic, raw, _) in pairs {
        if let Some(Program::RawTracePoint(program)) = ebpf.program_mut(raw) {
            // Unloading one that did load; one that did not is a no-op error.
            let _ = program.unload();
        }
        load_program(classic, find_program(ebpf, classic)?)?;
    }
    Ok(false)
}

/// Bytes of each event shard: the ring buffer budget split evenly (rounded
/// down to a power of two, at least a page) over the shards online CPUs
/// write to; a shard no online CPU uses gets one page.
fn shard_sizes(total: u32) -> Vec<u32> {
    let page = procfs::page_size();
    let cpus = online_cpus().unwrap_or_else(|_| vec![0]);
    let used: Vec<bool> = (0..EVENT_SHARDS)
        .map(|shard| cpus.iter().any(|&cpu| cpu % EVENT_SHARDS == shard))
        .collect();
    let count = used.iter().filter(|&&u| u).count().max(1) as u32;
    let share = total / count;
    let share = if share == 0 { 0 } else { 1 << share.ilog2() };
    used.iter()
        .map(|&u| if u { share.max(page) } else { page })
        .collect()
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

/// Loads one raw tracepoint program (or fails as [`REFUSE_RAW_ENV`] asks).
fn load_raw(ebpf: &mut Ebpf, raw: &str) -> Result<()> {
    if std::env::var_os(REFUSE_RAW_ENV).is_some_and(|v| v == raw) {
        bail!("the kernel's verifier rejected {raw} ({REFUSE_RAW_ENV} is set)");
    }
    load_program(raw, find_program(ebpf, raw)?)
}

fn take_ring_buffers(ebpf: &mut Ebpf, names: &[&str]) -> Result<Vec<Ring>> {
    names
        .iter()
        .map(|name| match take_map(ebpf, name)? {
            Map::RingBuf(data) => Ring::new(name, data),
            _ => bail!("map {name} is not a ring buffer"),
        })
        .collect()
}

pub(super) fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}

pub(super) fn find_program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program> {
    ebpf.program_mut(name)
        .with_context(|| format!("program {name} missing from the eBPF object"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use profiler_ebpf::names::program;

    use super::*;

    /// The names userspace looks programs and maps up by (the ABI crate's
    /// `names`) are the ones the built object has, both ways: a program or
    /// map renamed on one side only fails here, not at load time as root.
    #[test]
    // A tprof built without bpf-linker has no object to check (build.rs).
    #[cfg_attr(tprof_no_ebpf, ignore = "built without the eBPF programs")]
    fn abi_names_match_the_object() {
        let object = aya_obj::Object::parse(OBJECT).expect("parse the eBPF object");
        let in_object: BTreeSet<&str> = object.programs.keys().map(String::as_str).collect();
        let listed: BTreeSet<&str> = program::ALL.iter().copied().collect();
        assert_eq!(in_object, listed, "programs");
        let in_object: BTreeSet<&str> = object
            .maps
            .keys()
            .map(String::as_str)
            .filter(|name| !name.starts_with('.'))
            .collect();
        let listed: BTreeSet<&str> = map::ALL_BUT_EVENTS
            .iter()
            .chain(&map::EVENTS)
            .chain(&map::COPIES)
            .copied()
            .collect();
        assert_eq!(in_object, listed, "maps");
    }
}

//! Loads tprof's kernel programs, attaches them, and owns their maps. The
//! only module that talks to aya; dropping [`KernelPrograms`] detaches every
//! program and frees every map (nothing is pinned, so a killed tprof leaves
//! nothing behind either: the kernel frees them with the last fd).

use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{Program, TracePoint},
};
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};
use profiler_ebpf::{LOST_TRACK_FULL, TracepointOffsets, kind};

use super::tracefs;
use crate::recording::{LostCounts, events::kind_name};

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

const TRACEPOINTS: &[Attachment] = &[
    tp("tprof_switch", "sched", "sched_switch"),
    tp("tprof_waking", "sched", "sched_waking"),
    tp("tprof_wakeup", "sched", "sched_wakeup"),
    tp("tprof_wakeup_new", "sched", "sched_wakeup_new"),
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

pub struct KernelPrograms {
    // Field order is drop order: maps first, then the programs and links.
    pub events: RingBuf<MapData>,
    tracked_tgids: HashMap<MapData, u32, u8>,
    tracked_tids: HashMap<MapData, u32, u32>,
    lost: PerCpuArray<MapData, u64>,
    _ebpf: Ebpf,
}

impl KernelPrograms {
    /// Loads the programs with this kernel's tracepoint offsets, without
    /// attaching them.
    pub fn load(offsets: &TracepointOffsets) -> Result<KernelPrograms> {
        let mut ebpf = EbpfLoader::new()
            .override_global("OFFSETS", offsets, true)
            .load(OBJECT)
            .map_err(|e| anyhow!("loading the eBPF programs failed: {e}"))
            .context(
                "the kernel refused tprof's programs; tprof needs Linux 5.15+ with \
                 CONFIG_BPF_SYSCALL and BTF, run as root",
            )?;
        for (name, program) in ebpf.programs_mut() {
            let loaded = match program {
                Program::TracePoint(p) => p.load(),
                other => bail!(
                    "program {name} has an unexpected type {:?}",
                    other.prog_type()
                ),
            };
            loaded.with_context(|| format!("the kernel's verifier rejected {name}"))?;
        }
        Ok(KernelPrograms {
            events: RingBuf::try_from(take_map(&mut ebpf, "EVENTS")?)?,
            tracked_tgids: HashMap::try_from(take_map(&mut ebpf, "TRACKED_TGIDS")?)?,
            tracked_tids: HashMap::try_from(take_map(&mut ebpf, "TRACKED_TIDS")?)?,
            lost: PerCpuArray::try_from(take_map(&mut ebpf, "LOST")?)?,
            _ebpf: ebpf,
        })
    }

    /// Attaches every program to its tracepoint.
    pub fn attach(&mut self) -> Result<()> {
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
        let mut lost = LostCounts {
            recursion_misses: self.recursion_misses(),
            ..Default::default()
        };
        for slot in 0..kind::COUNT {
            let per_cpu = self.lost.get(&slot, 0)?;
            let total: u64 = per_cpu.iter().sum();
            if slot == LOST_TRACK_FULL {
                lost.tracking_full = total;
            } else {
                lost.ring_buffer_full
                    .insert(kind_name(slot as u16).to_string(), total);
            }
        }
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

fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}

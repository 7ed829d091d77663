//! Which program attaches where, and attaching them: tracepoints (the
//! scheduler's raw or classic), the cpu-clock sampler, CUDA uprobes.

use std::path::Path;

use anyhow::{Context as _, Result, anyhow};
use aya::{
    programs::{
        PerfEvent, RawTracePoint, TracePoint, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
    util::online_cpus,
};
use profiler_ebpf::{cuda_fn, mark, names::program as name};

use super::object::{KernelPrograms, find_program};
use crate::capture::tracefs;

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
pub(super) const SCHED: &[(&str, &str, &str)] = &[
    (name::SWITCH, name::SWITCH_RAW, "sched_switch"),
    (name::WAKING, name::WAKING_RAW, "sched_waking"),
    (name::WAKEUP_NEW, name::WAKEUP_NEW_RAW, "sched_wakeup_new"),
];

/// The block completion program in its two builds, as [`SCHED`]'s: the
/// raw one also escapes the kernel's skipping a classic tracepoint's
/// program while another BPF program runs on the CPU (a completion
/// interrupt arrives at any time); it needs `struct request` offsets from
/// the BTF.
pub(super) const COMPLETE: &[(&str, &str, &str)] = &[(
    name::RQ_COMPLETE,
    name::RQ_COMPLETE_RAW,
    "block_rq_complete",
)];

/// Every other tracepoint program.
const TRACEPOINTS: &[Attachment] = &[
    tp(name::NEWTASK, "task", "task_newtask"),
    tp(name::EXEC, "sched", "sched_process_exec"),
    tp(name::EXIT, "sched", "sched_process_exit"),
    tp(name::RENAME, "task", "task_rename"),
    tp(name::BIO_QUEUE, "block", "block_bio_queue"),
    tp(name::BIO_SPLIT, "block", "block_split"),
    tp(name::BIO_BACKMERGE, "block", "block_bio_backmerge"),
    tp(name::BIO_FRONTMERGE, "block", "block_bio_frontmerge"),
    tp(name::RQ_INSERT, "block", "block_rq_insert"),
    tp(name::RQ_ISSUE, "block", "block_rq_issue"),
    tp(name::FUTEX_ENTER, "syscalls", "sys_enter_futex"),
    tp(name::FUTEX_EXIT, "syscalls", "sys_exit_futex"),
    optional(name::FUTEX_WAIT_ENTER, "syscalls", "sys_enter_futex_wait"),
    optional(name::FUTEX_EXIT, "syscalls", "sys_exit_futex_wait"),
    optional(name::FUTEX_WAITV_ENTER, "syscalls", "sys_enter_futex_waitv"),
    optional(name::FUTEX_EXIT, "syscalls", "sys_exit_futex_waitv"),
];

/// The pipe program, attached when the kernel's BTF gave its offsets.
const PIPES: [(&str, &str); 1] = [(name::PIPE_READ, "sys_exit_read")];

/// The programs that say when a tracked process maps executable memory,
/// attached where the kernel has BTF and the tracepoints.
const MAPPINGS: [(&str, &str); 2] = [
    (name::MMAP_EXIT, "sys_exit_mmap"),
    (name::MPROTECT_EXIT, "sys_exit_mprotect"),
];

impl KernelPrograms {
    /// Attaches the loaded build of each pair of `category`'s tracepoint
    /// programs ([`SCHED`], [`COMPLETE`]): the raw ones, or the classic.
    fn attach_pairs(
        &mut self,
        pairs: &[(&str, &str, &str)],
        category: &str,
        raw: bool,
    ) -> Result<()> {
        for &(classic, raw_name, tracepoint) in pairs {
            let what = || {
                format!(
                    "attaching to tracepoint {category}/{tracepoint} failed; \
                     is the kernel built with it?"
                )
            };
            // Two link types: each kept in its own branch.
            if raw {
                let program: &mut RawTracePoint =
                    find_program(&mut self.ebpf, raw_name)?.try_into()?;
                let id = program.attach(tracepoint).with_context(what)?;
                self.links.keep(program.take_link(id)?);
            } else {
                let program: &mut TracePoint = find_program(&mut self.ebpf, classic)?.try_into()?;
                let id = program.attach(category, tracepoint).with_context(what)?;
                self.links.keep(program.take_link(id)?);
            }
        }
        Ok(())
    }
}

/// What attaching to one CUDA runtime library did.
#[derive(Debug, Default)]
pub struct CudaProbes {
    /// Functions probed.
    pub probed: Vec<String>,
    /// Functions not probed, each with why.
    pub missing: Vec<String>,
}

impl KernelPrograms {
    /// Attaches every program to its tracepoint.
    pub fn attach(&mut self) -> Result<()> {
        self.attach_pairs(SCHED, "sched", self.raw_sched)?;
        self.attach_pairs(COMPLETE, "block", self.raw_complete)?;
        if self.pipes.is_ok() {
            for (program, tracepoint) in PIPES {
                let program: &mut TracePoint = find_program(&mut self.ebpf, program)?.try_into()?;
                match program.attach("syscalls", tracepoint) {
                    Ok(id) => self.links.keep(program.take_link(id)?),
                    Err(e) => {
                        self.pipes = Err(format!("attaching to syscalls/{tracepoint} failed: {e}"));
                        break;
                    }
                }
            }
        }
        if self.map_events {
            for (program, tracepoint) in MAPPINGS {
                let program: &mut TracePoint = find_program(&mut self.ebpf, program)?.try_into()?;
                match program.attach("syscalls", tracepoint) {
                    Ok(id) => self.links.keep(program.take_link(id)?),
                    Err(e) => {
                        // Polled instead; the other one, if attached, only
                        // sends events that are not needed.
                        eprintln!(
                            "tprof: note: attaching to syscalls/{tracepoint} failed ({e}); \
                             reading the job's mappings by polling"
                        );
                        self.map_events = false;
                        break;
                    }
                }
            }
        }
        for a in TRACEPOINTS {
            if a.optional && !tracefs::exists(a.category, a.tracepoint) {
                continue;
            }
            let program: &mut TracePoint = find_program(&mut self.ebpf, a.program)?.try_into()?;
            let id = program.attach(a.category, a.tracepoint).with_context(|| {
                format!(
                    "attaching to tracepoint {}/{} failed; is the kernel built with it?",
                    a.category, a.tracepoint
                )
            })?;
            self.links.keep(program.take_link(id)?);
        }
        Ok(())
    }

    /// Samples every CPU's cpu-clock at `hz`; the program keeps samples of
    /// tracked threads only. (No hardware PMU is needed: cpu-clock is an
    /// hrtimer, so this works in VMs.)
    pub fn attach_sampler(&mut self, hz: u64) -> Result<()> {
        let program: &mut PerfEvent = find_program(&mut self.ebpf, name::SAMPLE)?.try_into()?;
        let cpus = online_cpus().map_err(|(what, e)| anyhow!("cannot list CPUs ({what}): {e}"))?;
        for cpu in cpus {
            let id = program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(hz),
                    false,
                )
                .with_context(|| format!("attaching the cpu-clock sampler on CPU {cpu} failed"))?;
            self.links.keep(program.take_link(id)?);
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
                name::CUDA_LAUNCH
            } else {
                name::CUDA_ENTER
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
                let ret = self.uprobe(name::CUDA_RETURN)?;
                match ret.attach(point(), library, UProbeScope::AllProcesses) {
                    Ok(id) => {
                        let link = ret.take_link(id)?;
                        self.links.keep(link);
                    }
                    Err(e) => {
                        out.missing
                            .push(format!("{symbol} (return): {:#}", anyhow::Error::from(e)));
                        // An entry without its return would only fill CUDA_CALLS.
                        self.uprobe(entry_name)?.detach(entry_link)?;
                        continue;
                    }
                }
            }
            let entry = self.uprobe(entry_name)?.take_link(entry_link)?;
            self.links.keep(entry);
            out.probed.push(symbol.to_string());
        }
        Ok(out)
    }

    /// Probes the libtorch functions in `profiler_ebpf::mark` in the
    /// library file at `library` for every process mapping it, by the
    /// mangled symbols `symbols` (found in its dynamic symbol table, one
    /// per mark; None where the library lacks it).
    pub fn attach_torch(
        &mut self,
        library: &Path,
        symbols: &[(u32, Option<String>)],
    ) -> Result<CudaProbes> {
        let mut out = CudaProbes::default();
        for (what, symbol) in symbols {
            let Some(symbol) = symbol else {
                let prefix = mark::ALL
                    .iter()
                    .find(|(w, _)| w == what)
                    .map_or("?", |(_, p)| p);
                out.missing.push(format!("{prefix}…: not exported"));
                continue;
            };
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::Symbol(symbol),
                cookie: Some(u64::from(*what)),
            };
            let program = self.uprobe(name::TORCH_MARK)?;
            match program.attach(point, library, UProbeScope::AllProcesses) {
                Ok(id) => {
                    let link = program.take_link(id)?;
                    self.links.keep(link);
                    out.probed.push(symbol.clone());
                }
                Err(e) => out
                    .missing
                    .push(format!("{symbol}: {:#}", anyhow::Error::from(e))),
            }
        }
        Ok(out)
    }

    /// Probes one libtorch function at a file offset (found by the caller
    /// in the library's full symbol table: aya's attach by name would scan
    /// it again), for every process mapping the file. The error says why
    /// not.
    pub fn attach_torch_at(&mut self, library: &Path, what: u32, file_offset: u64) -> Result<()> {
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(file_offset),
            cookie: Some(u64::from(what)),
        };
        let program = self.uprobe(name::TORCH_MARK)?;
        let id = program.attach(point, library, UProbeScope::AllProcesses)?;
        let link = program.take_link(id)?;
        self.links.keep(link);
        Ok(())
    }

    /// Whether pipe transfers are traced, or why not.
    pub fn pipes(&self) -> std::result::Result<(), &str> {
        self.pipes.as_ref().copied().map_err(String::as_str)
    }

    /// When a tracked process first asked its DataLoader for a batch, from
    /// which on the pipe program stands down; None before (or when the
    /// kernel's map cannot be read, which says nothing new).
    pub fn steps_from_marks_since(&self) -> Option<u64> {
        self.steps_from_marks.get(&0, 0).ok().filter(|&ns| ns != 0)
    }

    fn uprobe(&mut self, name: &str) -> Result<&mut UProbe> {
        Ok(find_program(&mut self.ebpf, name)?.try_into()?)
    }
}

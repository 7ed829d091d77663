//! The stack aggregate, read out when recording ends.

use std::collections::{HashMap, HashSet};

use anyhow::{Context as _, Result};
use profiler_ebpf::{OffCpuStart, StackKey, stack_kind};

use super::KernelPrograms;

/// What the kernel aggregated, read out when recording ends.
#[derive(Debug, Default)]
pub struct RawStacks {
    /// Weight per key, summed over CPUs.
    pub counts: Vec<(StackKey, u64)>,
    /// Instruction pointers of each stack id, leaf first.
    pub stacks: HashMap<i32, Vec<u64>>,
    /// Threads off CPU right now: (tid, where and when they left).
    pub pending: Vec<(u32, OffCpuStart)>,
}

impl KernelPrograms {
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
        let offcpu_kernel: HashSet<i32> = raw
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

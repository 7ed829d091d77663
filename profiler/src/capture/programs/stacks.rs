//! The kernel's stack map, read by id as events name its stacks.
//!
//! [`StackSource`] reads the stack map once per id, in the resolve stage.
//! Kernel stacks walked inside a raw tracepoint program begin with the
//! program and `bpf_trace_run4`; they are trimmed (by kallsyms) from
//! off-CPU kernel stacks, so both scheduler program sets give the same
//! stacks.

use aya::maps::{HashMap, MapData, StackTraceMap};
use profiler_ebpf::{SiteCheck, site_check_key};

/// Reads the `STACKS` stack map: the instruction pointers of each stack id
/// the events carry; and writes `SITE_CHECKS`, what tells each switch-out
/// copy's call site from another's once it is unwound. It moves to the
/// thread that turns ids and copies into the recording's stacks, so the
/// drain never waits on it.
pub struct StackSource {
    map: StackTraceMap<MapData>,
    site_checks: HashMap<MapData, u64, SiteCheck>,
    /// Only when the raw scheduler programs run: their off-CPU kernel
    /// stacks start inside the program (see [`Trampolines`]).
    trampolines: Option<Trampolines>,
}

impl StackSource {
    pub(super) fn new(
        map: StackTraceMap<MapData>,
        site_checks: HashMap<MapData, u64, SiteCheck>,
        raw_sched: bool,
    ) -> StackSource {
        StackSource {
            map,
            site_checks,
            trampolines: raw_sched.then(Trampolines::read),
        }
    }

    /// The instruction pointers of stack `id`, leaf first; None when the map
    /// no longer holds it.
    pub fn frames(&self, id: u32) -> Option<Vec<u64>> {
        let trace = self.map.get(&id, 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }

    /// Tells the kernel what thread `tid`'s copy in switch-out `slot` was
    /// called from (`check`, for its copy `check.seq`).
    pub fn file_site_check(&mut self, tid: u32, slot: u32, check: &SiteCheck) {
        // Refused (the map's own error): the copy is reused unchecked, as
        // before there were checks.
        let _ = self.site_checks.insert(site_check_key(tid, slot), check, 0);
    }

    /// A kernel stack walked at a switch-out, leaf first, without the
    /// frames of the program that walked it.
    pub fn offcpu_kernel_frames(&self, id: u32) -> Option<Vec<u64>> {
        let mut ips = self.frames(id)?;
        if let Some(trampolines) = &self.trampolines {
            let skip = ips.iter().take_while(|&&ip| trampolines.holds(ip)).count();
            ips.drain(..skip.min(ips.len().saturating_sub(1)));
        }
        Some(ips)
    }
}

/// Kernel text of BPF programs and the raw tracepoint trampolines, from
/// /proc/kallsyms: the raw sched_switch program walks the kernel stack from
/// inside itself, so its first frames are the program and the tracepoint's
/// BPF trampoline (bpf_trace_run4), not where the thread stopped.
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

//! Turns what the kernel aggregated (stack ids of raw addresses) into the
//! recording's [`StackTable`] of named frames.
//!
//! User addresses are resolved against /proc/<pid>/maps snapshots that
//! capture takes while each process is alive ([`AddressSpaces`]), then looked
//! up in the mapped files on disk, so a DataLoader worker that exited long
//! before the recording ended still gets names. Symbolization happens here,
//! at record time, because the binaries may be missing wherever the
//! recording is read.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Elf, Kernel, Process, Source},
};
use blazesym::{MaybeDefault, Pid};

use super::{
    procfs::{self, Mapping},
    programs::RawStacks,
};
use tprof_core::recording::{Frame, StackKind, StackSample, StackTable};

/// The executable mappings of every tracked process, as last seen alive.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    maps: HashMap<u32, Vec<Mapping>>,
    /// child → parent, for children that exited before their first snapshot
    /// (a forked child maps what its parent mapped).
    parents: HashMap<u32, u32>,
}

impl AddressSpaces {
    /// Reads /proc/<pid>/maps. Mappings from an earlier snapshot that the new
    /// one does not overlap are kept: samples taken before a dlclose or an
    /// exec still resolve.
    pub fn snapshot(&mut self, pid: u32) {
        let Some(fresh) = procfs::exec_maps(pid) else {
            return; // gone; keep what we had
        };
        let old = self.maps.remove(&pid).unwrap_or_default();
        let kept = old
            .into_iter()
            .filter(|m| !fresh.iter().any(|f| f.start < m.end && m.start < f.end));
        let mut merged = fresh.clone();
        merged.extend(kept);
        self.maps.insert(pid, merged);
    }

    pub fn set_parent(&mut self, child: u32, parent: u32) {
        self.parents.insert(child, parent);
    }

    /// `pid` and its known ancestors, nearest first.
    fn lineage(&self, pid: u32) -> Vec<u32> {
        let mut out = vec![pid];
        while let Some(&parent) = self.parents.get(out.last().expect("not empty")) {
            if out.len() >= 16 || out.contains(&parent) {
                break;
            }
            out.push(parent);
        }
        out
    }

    /// The mapping holding `addr` in `pid`, or in its nearest ancestor with a
    /// snapshot.
    fn lookup(&self, pid: u32, addr: u64) -> Option<(u32, &Mapping)> {
        let mut cur = pid;
        for _ in 0..16 {
            if let Some(maps) = self.maps.get(&cur) {
                let found = maps.iter().find(|m| m.start <= addr && addr < m.end);
                if let Some(m) = found {
                    return Some((cur, m));
                }
            }
            cur = *self.parents.get(&cur)?;
        }
        None
    }
}

/// Where one raw address points, before symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Site {
    /// A file-backed address: (path, file offset).
    File(String, u64),
    /// JIT code: (pid whose perf map to read, address).
    Anon(u32, u64),
    /// A pseudo mapping such as [vdso]: (name, offset).
    Pseudo(String, u64),
    Kernel(u64),
    /// An address in no mapping tprof saw.
    Unmapped(u64),
    /// A stack the kernel could not take.
    Missing(&'static str),
}

/// Builds the STACKS record. `now_ns` closes the intervals of threads that
/// are off CPU at the end.
pub fn build_table(
    raw: &RawStacks,
    spaces: &AddressSpaces,
    sample_hz: u64,
    now_ns: u64,
) -> StackTable {
    let mut sites: BTreeMap<Site, u32> = BTreeMap::new();
    let mut stacks: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut table = StackTable {
        sample_hz,
        ..Default::default()
    };
    for (key, weight) in weighted_keys(raw, now_ns) {
        let path = stack_sites(
            raw,
            spaces,
            key.tgid,
            key.user_stack_id,
            key.kernel_stack_id,
        );
        let ids: Vec<u32> = path
            .into_iter()
            .map(|site| {
                let next = sites.len() as u32;
                *sites.entry(site).or_insert(next)
            })
            .collect();
        let next = stacks.len() as u32;
        let stack = *stacks.entry(ids).or_insert(next);
        table.samples.push(StackSample {
            pid: key.tgid,
            tid: key.tid,
            kind: StackKind::from_abi(key.kind),
            stack,
            weight,
        });
    }
    table.frames = symbolize(&sites, spaces);
    table.stacks = vec![Vec::new(); stacks.len()];
    for (ids, index) in stacks {
        table.stacks[index as usize] = ids;
    }
    table
}

/// The aggregate, plus the still-open off-CPU intervals of live threads.
fn weighted_keys(raw: &RawStacks, now_ns: u64) -> Vec<(profiler_ebpf::StackKey, u64)> {
    let mut out: Vec<_> = raw.counts.iter().copied().filter(|&(_, w)| w > 0).collect();
    for &(tid, start) in &raw.pending {
        // ts_ns 0: the thread is on a CPU, nothing is open.
        if start.ts_ns == 0 || !procfs::exists_task(start.tgid, tid) || now_ns <= start.ts_ns {
            continue;
        }
        let key = profiler_ebpf::StackKey {
            tgid: start.tgid,
            tid,
            user_stack_id: start.user_stack_id,
            kernel_stack_id: start.kernel_stack_id,
            kind: start.reason,
            _pad: 0,
        };
        out.push((key, now_ns - start.ts_ns));
    }
    out
}

/// The sites of one user + kernel stack pair, outermost caller first.
fn stack_sites(
    raw: &RawStacks,
    spaces: &AddressSpaces,
    pid: u32,
    user: i32,
    kernel: i32,
) -> Vec<Site> {
    let mut out = Vec::new();
    match raw.stacks.get(&user) {
        Some(ips) if !ips.is_empty() => {
            out.extend(
                ips.iter()
                    .enumerate()
                    .rev()
                    .map(|(depth, &ip)| user_site(spaces, pid, return_site(ip, depth))),
            );
        }
        _ => out.push(Site::Missing("[user stack lost]")),
    }
    if let Some(ips) = raw.stacks.get(&kernel) {
        out.extend(
            ips.iter()
                .enumerate()
                .rev()
                .map(|(d, &ip)| Site::Kernel(return_site(ip, d))),
        );
    }
    out
}

/// Frames below the leaf hold return addresses, which point just past the
/// call; one byte back lands in the calling function even when the call was
/// its last instruction.
fn return_site(ip: u64, depth: usize) -> u64 {
    if depth == 0 { ip } else { ip.saturating_sub(1) }
}

fn user_site(spaces: &AddressSpaces, pid: u32, addr: u64) -> Site {
    match spaces.lookup(pid, addr) {
        Some((owner, m)) if m.path.is_empty() || m.path.starts_with("[anon") => {
            Site::Anon(owner, addr)
        }
        Some((_, m)) if m.path.starts_with('[') => Site::Pseudo(m.path.clone(), addr - m.start),
        Some((_, m)) => Site::File(
            m.path.trim_end_matches(" (deleted)").to_string(),
            addr - m.start + m.offset,
        ),
        None => Site::Unmapped(addr),
    }
}

/// One frame per site, in the sites' index order.
fn symbolize(sites: &BTreeMap<Site, u32>, spaces: &AddressSpaces) -> Vec<Frame> {
    let symbolizer = Symbolizer::new();
    let mut frames = vec![Frame::default(); sites.len()];
    let mut by_file: BTreeMap<&str, Vec<(u64, u32)>> = BTreeMap::new();
    let mut kernel: Vec<(u64, u32)> = Vec::new();
    let mut perf_maps: HashMap<u32, Vec<PerfMapEntry>> = HashMap::new();
    for (site, &index) in sites {
        let frame = &mut frames[index as usize];
        match site {
            Site::File(path, offset) => by_file.entry(path).or_default().push((*offset, index)),
            Site::Kernel(addr) => kernel.push((*addr, index)),
            Site::Anon(pid, addr) => {
                // A forked worker runs code its parent JIT-compiled, which
                // may be listed only in the parent's perf map.
                *frame = jit_frame(&[], *addr);
                for owner in spaces.lineage(*pid) {
                    let entries = perf_maps
                        .entry(owner)
                        .or_insert_with(|| read_perf_map(owner));
                    let found = jit_frame(entries, *addr);
                    if found.symbol.is_some() {
                        *frame = found;
                        break;
                    }
                }
            }
            Site::Pseudo(name, offset) => {
                *frame = Frame {
                    module: name.clone(),
                    offset: *offset,
                    symbol: (name == "[vdso]")
                        .then(|| vdso_symbol(&symbolizer, *offset))
                        .flatten(),
                    kernel: false,
                };
            }
            Site::Unmapped(addr) => frame.offset = *addr,
            Site::Missing(what) => frame.symbol = Some((*what).to_string()),
        }
    }
    for (path, offsets) in by_file {
        let names = resolve(
            &symbolizer,
            &Source::Elf(Elf::new(path)),
            |a: &[u64]| Input::FileOffset(a),
            &offsets,
        );
        for ((offset, index), symbol) in offsets.iter().zip(names) {
            frames[*index as usize] = Frame {
                module: path.to_string(),
                offset: *offset,
                symbol,
                kernel: false,
            };
        }
    }
    let source = Source::Kernel(Kernel {
        // kallsyms is enough for function names; looking for a vmlinux
        // with debug info would cost seconds for nothing.
        vmlinux: MaybeDefault::None,
        ..Default::default()
    });
    let names = resolve(&symbolizer, &source, |a: &[u64]| Input::AbsAddr(a), &kernel);
    for ((addr, index), symbol) in kernel.iter().zip(names) {
        frames[*index as usize] = Frame {
            module: "[kernel]".to_string(),
            offset: *addr,
            symbol,
            kernel: true,
        };
    }
    frames
}

/// The vDSO is one image per kernel, so an offset into any process's vDSO
/// names the same function as that offset into tprof's own.
fn vdso_symbol(symbolizer: &Symbolizer, offset: u64) -> Option<String> {
    let own = procfs::exec_maps(std::process::id())?;
    let vdso = own.iter().find(|m| m.path == "[vdso]")?;
    let source = Source::Process(Process::new(Pid::Slf));
    match symbolizer.symbolize_single(&source, Input::AbsAddr(vdso.start + offset)) {
        Ok(Symbolized::Sym(sym)) => Some(sym.name.into_owned()),
        _ => None,
    }
}

/// Names for a batch of addresses of one source; None where unknown (the
/// frame then shows its module and offset).
fn resolve(
    symbolizer: &Symbolizer,
    source: &Source,
    input: fn(&[u64]) -> Input<&[u64]>,
    addrs: &[(u64, u32)],
) -> Vec<Option<String>> {
    let raw: Vec<u64> = addrs.iter().map(|(a, _)| *a).collect();
    match symbolizer.symbolize(source, input(&raw)) {
        Ok(found) => found
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => Some(sym.name.into_owned()),
                Symbolized::Unknown(_) => None,
            })
            .collect(),
        Err(_) => vec![None; addrs.len()],
    }
}

/// One line of a /tmp/perf-<pid>.map file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PerfMapEntry {
    start: u64,
    size: u64,
    name: String,
}

/// The perf map a JIT (or CPython 3.12+'s perf trampoline) wrote for `pid`;
/// read at the end, since JITs append to it as they go.
fn read_perf_map(pid: u32) -> Vec<PerfMapEntry> {
    fs::read_to_string(format!("/tmp/perf-{pid}.map"))
        .map(|text| parse_perf_map(&text))
        .unwrap_or_default()
}

/// `START SIZE name` per line, START and SIZE in hex.
fn parse_perf_map(text: &str) -> Vec<PerfMapEntry> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            Some(PerfMapEntry {
                start: hex(parts.next()?)?,
                size: hex(parts.next()?)?,
                name: parts.next()?.to_string(),
            })
        })
        .collect()
}

fn jit_frame(entries: &[PerfMapEntry], addr: u64) -> Frame {
    // Later lines win: a JIT may reuse an address range.
    let hit = entries
        .iter()
        .rev()
        .find(|e| e.start <= addr && addr < e.start + e.size);
    Frame {
        module: "[anon]".to_string(),
        offset: addr,
        symbol: hit.map(|e| e.name.clone()),
        kernel: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_and_lookup() {
        let entries =
            parse_perf_map("7f0000001000 20 py::f:/a.py\n0x7f0000002000 0x10 [jit] g h\nbad\n");
        assert_eq!(entries.len(), 2);
        assert_eq!(
            jit_frame(&entries, 0x7f000000101f).symbol.as_deref(),
            Some("py::f:/a.py")
        );
        assert_eq!(
            jit_frame(&entries, 0x7f0000002001).symbol.as_deref(),
            Some("[jit] g h")
        );
        assert_eq!(jit_frame(&entries, 0x7f0000001020).symbol, None);
    }

    #[test]
    fn exited_child_resolves_through_its_parent() {
        let mut spaces = AddressSpaces::default();
        spaces.maps.insert(
            10,
            vec![Mapping {
                start: 0x1000,
                end: 0x2000,
                offset: 0x400,
                path: "/bin/x".into(),
            }],
        );
        spaces.set_parent(11, 10);
        assert_eq!(
            user_site(&spaces, 11, 0x1010),
            Site::File("/bin/x".into(), 0x410)
        );
        assert_eq!(user_site(&spaces, 12, 0x1010), Site::Unmapped(0x1010));
    }
}

//! The few `task_struct` field offsets the raw scheduler tracepoints need
//! (and the `struct request` ones of the raw block completion program),
//! read from the running kernel's BTF (`/sys/kernel/btf/vmlinux`) at load
//! time, as tracefs gives the classic tracepoints theirs.
//!
//! The raw `sched_switch` and `sched_waking` programs skip the perf record
//! the classic tracepoints fill on every event on the machine (both comms,
//! pids, prios, state), but are handed `task_struct` pointers instead of
//! fields. Rust eBPF has no CO-RE, so the offsets come from here. aya's own
//! BTF type does not expose its types, hence this small reader: it walks
//! the type section once and understands only what it needs (structs and
//! unions with their members, typedefs, pointers, function prototypes).
//!
//! Kept over a crate on measurement: btfparse 1.3 (whose
//! `offset_of("thread_info.cpu")` would replace most of this) builds the
//! whole type graph of this kernel's BTF, 1.9–2.7 s in a debug build (0.52 s
//! release) against this reader's 0.30–0.33 s (debug), paid at every
//! `tprof record` start; btf-rs offers only the low-level walk this reader
//! already is. An error here means the classic tracepoints are used.

use std::fs;

use anyhow::{Context as _, Result, bail, ensure};

/// Where the kernel exposes its own BTF.
pub(super) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// `task_struct` offsets for the raw scheduler programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TaskOffsets {
    /// `pid` (the thread id), an int.
    pub pid: u16,
    /// `exit_state`, an int: tells a zombie from a dead task at its last
    /// switch, as the classic tracepoint's `prev_state` does.
    pub exit_state: u16,
    /// The task's CPU (`thread_info.cpu`, or `cpu` where it lives in
    /// task_struct itself), an unsigned int: the classic sched_waking's
    /// `target_cpu`.
    pub cpu: u16,
}

/// The offsets, or why the raw programs cannot be used on this kernel
/// (no BTF, or scheduler tracepoints with other arguments than the
/// programs expect). The caller falls back to classic tracepoints.
pub(super) fn task_offsets() -> Result<TaskOffsets> {
    let data = fs::read(VMLINUX_BTF).with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
    let btf = Btf::parse(&data)?;
    offsets_in(&btf)
}

/// `task_struct.thread.fsbase`: where the kernel keeps a thread's fsbase
/// (its `pthread_self()` on x86-64), which CPython 3.10 names its threads
/// by. For the Python walk, whichever scheduler programs are loaded.
pub(super) fn fsbase_offset() -> Result<u16> {
    let data = fs::read(VMLINUX_BTF).with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
    fsbase_in(&Btf::parse(&data)?)
}

fn fsbase_in(btf: &Btf) -> Result<u16> {
    let task = btf
        .named(KIND_STRUCT, "task_struct")
        .context("no struct task_struct in the kernel BTF")?;
    let (thread, ty) = btf
        .member(task, "thread")
        .context("no task_struct.thread in the kernel BTF")?;
    let (fsbase, ty) = btf
        .member(btf.resolve_modifiers(ty), "fsbase")
        .context("no thread_struct.fsbase in the kernel BTF (not x86-64?)")?;
    check_size(btf, ty, 8, "thread.fsbase")?;
    to_u16(thread + fsbase, "thread.fsbase")
}

/// `task_struct.se.sum_exec_runtime` and `.prev_sum_exec_runtime`: the
/// CPU time the scheduler charged a task, in all and when it last picked
/// it. A switch-out after an arrival no program saw reads them to say how
/// long the thread ran (`profiler_ebpf::ArrivalEvent`), whichever
/// scheduler programs are loaded.
pub(super) fn runtime_offsets() -> Result<(u16, u16)> {
    let data = fs::read(VMLINUX_BTF).with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
    runtime_in(&Btf::parse(&data)?)
}

fn runtime_in(btf: &Btf) -> Result<(u16, u16)> {
    let task = btf
        .named(KIND_STRUCT, "task_struct")
        .context("no struct task_struct in the kernel BTF")?;
    let (se, ty) = btf
        .member(task, "se")
        .context("no task_struct.se in the kernel BTF")?;
    let entity = btf.resolve_modifiers(ty);
    let field = |name: &str| -> Result<u16> {
        let (offset, ty) = btf
            .member(entity, name)
            .with_context(|| format!("no sched_entity.{name} in the kernel BTF"))?;
        check_size(btf, ty, 8, name)?;
        to_u16(se + offset, name)
    };
    Ok((field("sum_exec_runtime")?, field("prev_sum_exec_runtime")?))
}

/// The kernel structures' offsets the pipe program walks from a task to
/// an fd's file and its pipe (`profiler_ebpf::FileOffsets`, without the
/// tracepoint field, which tracefs gives).
pub(super) fn file_offsets() -> Result<profiler_ebpf::FileOffsets> {
    let data = fs::read(VMLINUX_BTF).with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
    files_in(&Btf::parse(&data)?)
}

/// `strukt.name`'s byte offset, and its type.
fn struct_member(btf: &Btf, strukt: &str, name: &str) -> Result<(u16, u32)> {
    let id = btf
        .named(KIND_STRUCT, strukt)
        .with_context(|| format!("no struct {strukt} in the kernel BTF"))?;
    let (offset, ty) = btf
        .member(id, name)
        .with_context(|| format!("no {strukt}.{name} in the kernel BTF"))?;
    let offset = u16::try_from(offset)
        .with_context(|| format!("{strukt}.{name} at {offset} is out of range"))?;
    Ok((offset, ty))
}

fn files_in(btf: &Btf) -> Result<profiler_ebpf::FileOffsets> {
    let field =
        |strukt: &str, name: &str| struct_member(btf, strukt, name).map(|(offset, _)| offset);
    Ok(profiler_ebpf::FileOffsets {
        task_files: field("task_struct", "files")?,
        files_fdt: field("files_struct", "fdt")?,
        fdt_max_fds: field("fdtable", "max_fds")?,
        fdt_fd: field("fdtable", "fd")?,
        file_inode: field("file", "f_inode")?,
        file_private_data: field("file", "private_data")?,
        inode_mode: field("inode", "i_mode")?,
        ..Default::default()
    })
}

/// The `struct request` offsets the raw block completion program reads
/// (`profiler_ebpf::RequestOffsets`), or why it cannot be used on this
/// kernel: the caller loads the classic tracepoint's program instead.
pub(super) fn request_offsets() -> Result<profiler_ebpf::RequestOffsets> {
    let data = fs::read(VMLINUX_BTF).with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
    requests_in(&Btf::parse(&data)?)
}

fn requests_in(btf: &Btf) -> Result<profiler_ebpf::RequestOffsets> {
    // block_rq_complete(struct request *, blk_status_t, unsigned int
    // nr_bytes), after the probe's `void *__data`.
    check_args(btf, "btf_trace_block_rq_complete", 4)?;
    // An integer of `size` bytes, or a pointer where `size` is None.
    let field = |strukt: &str, name: &str, size: Option<u32>| -> Result<u16> {
        let (offset, ty) = struct_member(btf, strukt, name)?;
        let t = &btf.types[btf.resolve_modifiers(ty) as usize];
        let fits = match size {
            Some(size) => matches!(t.kind, KIND_INT | KIND_ENUM) && t.size == size,
            None => t.kind == KIND_PTR,
        };
        ensure!(fits, "{strukt}.{name} is not what the raw program reads");
        Ok(offset)
    };
    Ok(profiler_ebpf::RequestOffsets {
        rq_q: field("request", "q", None)?,
        rq_sector: field("request", "__sector", Some(8))?,
        rq_cmd_flags: field("request", "cmd_flags", Some(4))?,
        // Linux 5.15+; before it the disk hangs off the request itself.
        q_disk: field("request_queue", "disk", None)?,
        disk_major: field("gendisk", "major", Some(4))?,
        disk_first_minor: field("gendisk", "first_minor", Some(4))?,
        _pad: [0; 2],
    })
}

fn offsets_in(btf: &Btf) -> Result<TaskOffsets> {
    // sched_switch(bool preempt, prev, next, unsigned int prev_state) since
    // 5.18; earlier kernels lack prev_state. The typedef's prototype starts
    // with the `void *__data` every tracepoint probe gets.
    check_args(btf, "btf_trace_sched_switch", 5)?;
    check_args(btf, "btf_trace_sched_waking", 2)?;
    check_args(btf, "btf_trace_sched_wakeup_new", 2)?;
    let task = btf
        .named(KIND_STRUCT, "task_struct")
        .context("no struct task_struct in the kernel BTF")?;
    let field = |name: &str, size: u32| -> Result<u16> {
        let (offset, ty) = btf
            .member(task, name)
            .with_context(|| format!("no task_struct.{name} in the kernel BTF"))?;
        check_size(btf, ty, size, name)?;
        to_u16(offset, name)
    };
    let cpu = match btf.member(task, "thread_info") {
        Some((info_offset, info_ty))
            if btf.member(btf.resolve_modifiers(info_ty), "cpu").is_some() =>
        {
            let (cpu_offset, ty) = btf
                .member(btf.resolve_modifiers(info_ty), "cpu")
                .expect("checked");
            check_size(btf, ty, 4, "thread_info.cpu")?;
            to_u16(info_offset + cpu_offset, "thread_info.cpu")?
        }
        _ => field("cpu", 4)?,
    };
    Ok(TaskOffsets {
        pid: field("pid", 4)?,
        exit_state: field("exit_state", 4)?,
        cpu,
    })
}

fn check_args(btf: &Btf, typedef: &str, count: usize) -> Result<()> {
    let id = btf
        .named(KIND_TYPEDEF, typedef)
        .with_context(|| format!("no {typedef} in the kernel BTF"))?;
    let proto = btf.resolve(btf.types[id as usize].type_id);
    let params = match &btf.types[proto as usize] {
        Type {
            kind: KIND_FUNC_PROTO,
            params,
            ..
        } => params.len(),
        _ => bail!("{typedef} is not a pointer to a function prototype"),
    };
    ensure!(
        params == count,
        "{typedef} takes {params} arguments, the raw programs expect {count}"
    );
    Ok(())
}

fn check_size(btf: &Btf, ty: u32, size: u32, name: &str) -> Result<()> {
    let t = &btf.types[btf.resolve_modifiers(ty) as usize];
    ensure!(
        matches!(t.kind, KIND_INT | KIND_ENUM) && t.size == size,
        "task_struct.{name} is not a {size}-byte integer"
    );
    Ok(())
}

fn to_u16(offset: u32, name: &str) -> Result<u16> {
    u16::try_from(offset).with_context(|| format!("task_struct.{name} at {offset} is out of range"))
}

const KIND_INT: u8 = 1;
const KIND_PTR: u8 = 2;
const KIND_STRUCT: u8 = 4;
const KIND_UNION: u8 = 5;
const KIND_ENUM: u8 = 6;
const KIND_TYPEDEF: u8 = 8;
const KIND_VOLATILE: u8 = 9;
const KIND_CONST: u8 = 10;
const KIND_RESTRICT: u8 = 11;
const KIND_FUNC_PROTO: u8 = 13;
const KIND_TYPE_TAG: u8 = 18;

/// One BTF type, with only what this module reads.
#[derive(Debug, Default)]
struct Type {
    kind: u8,
    name: u32,
    /// Size in bytes (ints, structs, unions, enums).
    size: u32,
    /// The referenced type (pointers, typedefs, modifiers).
    type_id: u32,
    /// Struct and union members: (name, type, byte offset).
    members: Vec<(u32, u32, u32)>,
    /// Function prototype parameter types.
    params: Vec<u32>,
}

struct Btf<'a> {
    /// Indexed by type id; id 0 is `void`.
    types: Vec<Type>,
    strings: &'a [u8],
}

impl<'a> Btf<'a> {
    fn parse(data: &'a [u8]) -> Result<Btf<'a>> {
        let u16_at = |at: usize| -> Result<u16> {
            Ok(u16::from_le_bytes(
                data.get(at..at + 2).context("BTF truncated")?.try_into()?,
            ))
        };
        let u32_at = |at: usize| -> Result<u32> {
            Ok(u32::from_le_bytes(
                data.get(at..at + 4).context("BTF truncated")?.try_into()?,
            ))
        };
        ensure!(u16_at(0)? == 0xeb9f, "not little-endian BTF");
        let hdr_len = u32_at(4)? as usize;
        let type_start = hdr_len + u32_at(8)? as usize;
        let type_end = type_start + u32_at(12)? as usize;
        let str_start = hdr_len + u32_at(16)? as usize;
        let str_end = str_start + u32_at(20)? as usize;
        let strings = data.get(str_start..str_end).context("BTF truncated")?;
        let mut types = vec![Type::default()];
        let mut at = type_start;
        while at < type_end {
            let name = u32_at(at)?;
            let info = u32_at(at + 4)?;
            let size_or_type = u32_at(at + 8)?;
            at += 12;
            let kind = ((info >> 24) & 0x1f) as u8;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 != 0;
            let mut t = Type {
                kind,
                name,
                size: size_or_type,
                type_id: size_or_type,
                ..Type::default()
            };
            at += match kind {
                KIND_INT => 4,
                3 => 12, // array
                KIND_STRUCT | KIND_UNION => {
                    for i in 0..vlen {
                        let m = at + 12 * i;
                        let bits = u32_at(m + 8)?;
                        // With kind_flag the top byte is a bitfield size.
                        let bit_offset = if kind_flag { bits & 0xff_ffff } else { bits };
                        t.members.push((u32_at(m)?, u32_at(m + 4)?, bit_offset / 8));
                    }
                    12 * vlen
                }
                KIND_ENUM => 8 * vlen,
                KIND_FUNC_PROTO => {
                    for i in 0..vlen {
                        t.params.push(u32_at(at + 8 * i + 4)?);
                    }
                    8 * vlen
                }
                14 => 4,         // var
                15 => 12 * vlen, // datasec
                17 => 4,         // decl tag
                19 => 12 * vlen, // enum64
                KIND_PTR | 7 | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | 12
                | 16 | KIND_TYPE_TAG => 0, // no trailing data
                other => bail!("unknown BTF kind {other}"),
            };
            types.push(t);
        }
        Ok(Btf { types, strings })
    }

    fn name(&self, offset: u32) -> &[u8] {
        let rest = self.strings.get(offset as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    /// The id of the first type of `kind` called `name`.
    fn named(&self, kind: u8, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|t| t.kind == kind && self.name(t.name) == name.as_bytes())
            .map(|id| id as u32)
    }

    /// Follows typedefs, modifiers and pointers to the type they name.
    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.types.get(id as usize) {
                Some(t)
                    if matches!(
                        t.kind,
                        KIND_PTR
                            | KIND_TYPEDEF
                            | KIND_VOLATILE
                            | KIND_CONST
                            | KIND_RESTRICT
                            | KIND_TYPE_TAG
                    ) =>
                {
                    id = t.type_id;
                }
                _ => break,
            }
        }
        id
    }

    /// (byte offset, type) of member `name` of the struct or union `id`,
    /// looking into anonymous struct and union members too.
    fn member(&self, id: u32, name: &str) -> Option<(u32, u32)> {
        let t = self.types.get(id as usize)?;
        if !matches!(t.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        for &(member_name, ty, offset) in &t.members {
            if member_name == 0 {
                if let Some((inner, ty)) = self.member(self.resolve_modifiers(ty), name) {
                    return Some((offset + inner, ty));
                }
            } else if self.name(member_name) == name.as_bytes() {
                return Some((offset, ty));
            }
        }
        None
    }

    /// Like [`Btf::resolve`] but stops at pointers (an anonymous member is
    /// a struct or union, never a pointer to one).
    fn resolve_modifiers(&self, mut id: u32) -> u32 {
        while let Some(t) = self.types.get(id as usize) {
            if !matches!(
                t.kind,
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
            ) {
                break;
            }
            id = t.type_id;
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running kernel's BTF, when this machine has one: the offsets
    /// must come out, and differ from each other.
    #[test]
    fn reads_this_kernels_task_struct() {
        let Ok(data) = fs::read(VMLINUX_BTF) else {
            return;
        };
        let btf = Btf::parse(&data).expect("parse vmlinux BTF");
        let task = btf.named(KIND_STRUCT, "task_struct").expect("task_struct");
        assert!(btf.member(task, "pid").is_some());
        if let Ok(offsets) = offsets_in(&btf) {
            assert_ne!(offsets.pid, offsets.exit_state);
            assert_ne!(offsets.pid, offsets.cpu);
        }
        // thread_struct is task_struct's last member: far past pid.
        let fsbase = fsbase_in(&btf).expect("x86-64 kernels have thread.fsbase");
        assert!(fsbase > btf.member(task, "pid").unwrap().0 as u16);
        // Two u64s of sched_entity, within task_struct.
        let (runtime, prev) = runtime_in(&btf).expect("sched_entity's runtimes");
        assert!(runtime > 0 && prev > 0 && runtime.abs_diff(prev) % 8 == 0);
        assert_ne!(runtime, prev);
    }

    /// This kernel's request offsets, when it has BTF: distinct within
    /// `struct request`, and the disk's major before its first minor.
    #[test]
    fn reads_this_kernels_request_offsets() {
        let Ok(data) = fs::read(VMLINUX_BTF) else {
            return;
        };
        let btf = Btf::parse(&data).expect("parse vmlinux BTF");
        let off = requests_in(&btf).expect("request offsets");
        let in_request = [off.rq_q, off.rq_sector, off.rq_cmd_flags];
        assert!(
            in_request
                .iter()
                .all(|&a| in_request.iter().filter(|&&b| a == b).count() == 1),
            "{off:?}"
        );
        assert_eq!(off.disk_first_minor, off.disk_major + 4, "{off:?}");
    }

    /// This kernel's file offsets, when it has BTF: distinct where they
    /// are in one struct.
    #[test]
    fn reads_this_kernels_file_offsets() {
        let Ok(data) = fs::read(VMLINUX_BTF) else {
            return;
        };
        let btf = Btf::parse(&data).expect("parse vmlinux BTF");
        let off = files_in(&btf).expect("file offsets");
        assert_ne!(off.file_inode, off.file_private_data, "{off:?}");
        assert_ne!(off.fdt_fd, off.fdt_max_fds, "{off:?}");
        assert!(off.task_files > 0, "{off:?}");
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(&[0u8; 8]).is_err());
        assert!(Btf::parse(&[0x9f, 0xeb, 1, 0, 24, 0, 0, 0]).is_err());
    }
}

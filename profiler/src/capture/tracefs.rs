//! tracefs: make sure it is mounted (aya attaches tracepoints through it, and
//! a fresh machine does not mount it) and read tracepoint field offsets from
//! its `format` files, so the programs never assume one kernel's layout.
//!
//! Each field's size is checked against what the program reads.
//! `block_rq_complete`'s `rwbs` is 8 bytes on older kernels and 10 on newer;
//! the programs read the first 8.

use std::{fs, io, path::Path};

use anyhow::{Context as _, Result, bail};
use profiler_ebpf::TracepointOffsets;

/// Where tprof expects tracefs, and mounts it when missing.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// True when tracefs is mounted at [`TRACEFS`].
pub fn is_mounted() -> bool {
    Path::new(TRACEFS).join("events").is_dir()
}

/// Mounts tracefs at [`TRACEFS`] unless it is already there.
pub fn ensure_mounted() -> Result<()> {
    if is_mounted() {
        return Ok(());
    }
    let (src, target, fstype) = (c"nodev", c"/sys/kernel/tracing", c"tracefs");
    // SAFETY: all pointers are valid NUL-terminated strings; data is null.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        bail!(
            "tracefs is not mounted at {TRACEFS} and mounting it failed ({err}); \
             run `mount -t tracefs nodev {TRACEFS}` as root"
        );
    }
    Ok(())
}

/// One field of a tracepoint record, as its format file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u16,
    pub size: u16,
}

/// Parses the `field:` lines of a tracepoint format file.
pub fn parse_format(text: &str) -> Vec<Field> {
    text.lines().filter_map(parse_field_line).collect()
}

/// `\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;`
fn parse_field_line(line: &str) -> Option<Field> {
    let mut parts = line.trim().split(';').map(str::trim);
    let decl = parts.next()?.strip_prefix("field:")?;
    let name = decl.rsplit(' ').next()?;
    // `char prev_comm[16]` names the field `prev_comm`.
    let name = name.split('[').next()?.to_string();
    let offset = parts.next()?.strip_prefix("offset:")?.parse().ok()?;
    let size = parts.next()?.strip_prefix("size:")?.parse().ok()?;
    Some(Field { name, offset, size })
}

/// The fields of tracepoint `category/name` on this kernel.
pub fn fields(category: &str, name: &str) -> Result<Vec<Field>> {
    let path = Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .join("format");
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "this kernel has no tracepoint {category}/{name} ({} unreadable); \
             tprof needs Linux 5.15+ with tracepoints enabled (CONFIG_TRACEPOINTS)",
            path.display()
        )
    })?;
    Ok(parse_format(&text))
}

/// Offset of `field` in `category/name`, checking its size.
fn offset(fields: &[Field], tracepoint: &str, field: &str, size: u16) -> Result<u16> {
    let found = fields.iter().find(|f| f.name == field).with_context(|| {
        format!("tracepoint {tracepoint} has no field `{field}` on this kernel")
    })?;
    if found.size != size {
        bail!(
            "tracepoint {tracepoint} field `{field}` is {} bytes on this kernel, tprof expects {size}",
            found.size
        );
    }
    Ok(found.offset)
}

/// True when this kernel has tracepoint `category/name`.
pub fn exists(category: &str, name: &str) -> bool {
    Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .is_dir()
}

/// Offset of `field` in an optional tracepoint: 0 when the kernel lacks it
/// (its program is then not attached).
fn optional_offset(category: &str, name: &str, field: &str, size: u16) -> Result<u16> {
    if !exists(category, name) {
        return Ok(0);
    }
    offset(&fields(category, name)?, name, field, size)
}

/// Reads every offset the programs need from this kernel's format files.
pub fn tracepoint_offsets() -> Result<TracepointOffsets> {
    let switch = fields("sched", "sched_switch")?;
    let wakeup = fields("sched", "sched_wakeup")?;
    let newtask = fields("task", "task_newtask")?;
    let exec = fields("sched", "sched_process_exec")?;
    let exit = fields("sched", "sched_process_exit")?;
    let rename = fields("task", "task_rename")?;
    let bio = fields("block", "block_bio_queue")?;
    let split = fields("block", "block_split")?;
    // One program layout serves the three events of the block_bio class.
    for merge in ["block_bio_backmerge", "block_bio_frontmerge"] {
        if fields("block", merge)? != bio {
            bail!(
                "tracepoint block/{merge} is laid out unlike block/block_bio_queue on this \
                 kernel; tprof reads both with one set of offsets"
            );
        }
    }
    let issue = fields("block", "block_rq_issue")?;
    let complete = fields("block", "block_rq_complete")?;
    let futex = fields("syscalls", "sys_enter_futex")?;
    let futex_exit = fields("syscalls", "sys_exit_futex")?;
    Ok(TracepointOffsets {
        switch_prev_pid: offset(&switch, "sched_switch", "prev_pid", 4)?,
        switch_prev_state: offset(&switch, "sched_switch", "prev_state", 8)?,
        switch_next_pid: offset(&switch, "sched_switch", "next_pid", 4)?,
        wakeup_pid: offset(&wakeup, "sched_wakeup", "pid", 4)?,
        wakeup_target_cpu: offset(&wakeup, "sched_wakeup", "target_cpu", 4)?,
        newtask_pid: offset(&newtask, "task_newtask", "pid", 4)?,
        newtask_clone_flags: offset(&newtask, "task_newtask", "clone_flags", 8)?,
        exec_old_pid: offset(&exec, "sched_process_exec", "old_pid", 4)?,
        exit_group_dead: offset(&exit, "sched_process_exit", "group_dead", 1)?,
        rename_pid: offset(&rename, "task_rename", "pid", 4)?,
        rename_newcomm: offset(&rename, "task_rename", "newcomm", 16)?,
        bio_dev: offset(&bio, "block_bio_queue", "dev", 4)?,
        bio_sector: offset(&bio, "block_bio_queue", "sector", 8)?,
        bio_nr_sector: offset(&bio, "block_bio_queue", "nr_sector", 4)?,
        split_dev: offset(&split, "block_split", "dev", 4)?,
        split_sector: offset(&split, "block_split", "sector", 8)?,
        split_new_sector: offset(&split, "block_split", "new_sector", 8)?,
        rq_dev: offset(&issue, "block_rq_issue", "dev", 4)?,
        rq_sector: offset(&issue, "block_rq_issue", "sector", 8)?,
        complete_dev: offset(&complete, "block_rq_complete", "dev", 4)?,
        complete_sector: offset(&complete, "block_rq_complete", "sector", 8)?,
        complete_nr_sector: offset(&complete, "block_rq_complete", "nr_sector", 4)?,
        complete_error: offset(&complete, "block_rq_complete", "error", 4)?,
        complete_rwbs: rwbs_offset(&complete)?,
        futex_uaddr: offset(&futex, "sys_enter_futex", "uaddr", 8)?,
        futex_op: offset(&futex, "sys_enter_futex", "op", 8)?,
        futex_wait_uaddr: optional_offset("syscalls", "sys_enter_futex_wait", "uaddr", 8)?,
        futex_waitv_waiters: optional_offset("syscalls", "sys_enter_futex_waitv", "waiters", 8)?,
        futex_ret: offset(&futex_exit, "sys_exit_futex", "ret", 8)?,
        // Filled from BTF when the raw scheduler programs are used.
        task_pid: 0,
        task_exit_state: 0,
        task_cpu: 0,
        task_runtime: 0,
        task_prev_runtime: 0,
        task_fsbase: 0,
        // Without them mappings are polled instead.
        mmap_ret: optional_offset("syscalls", "sys_exit_mmap", "ret", 8)?,
        mprotect_ret: optional_offset("syscalls", "sys_exit_mprotect", "ret", 8)?,
        _pad: [0; 3],
    })
}

/// The `ret` of `sys_exit_read`, which the pipe program reads.
pub fn read_ret_offset() -> Result<u16> {
    offset(
        &fields("syscalls", "sys_exit_read")?,
        "sys_exit_read",
        "ret",
        8,
    )
}

/// `rwbs` is `char[8]` on older kernels and `char[10]` on newer; the
/// programs read its first 8 bytes either way.
fn rwbs_offset(fields: &[Field]) -> Result<u16> {
    let rwbs = fields
        .iter()
        .find(|f| f.name == "rwbs")
        .context("tracepoint block_rq_complete has no field `rwbs` on this kernel")?;
    if (rwbs.size as usize) < profiler_ebpf::RWBS_LEN {
        bail!(
            "tracepoint block_rq_complete field `rwbs` is only {} bytes",
            rwbs.size
        );
    }
    Ok(rwbs.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch\nID: 316\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\nprint fmt: \"prev_comm=%s\", REC->prev_comm\n";

    #[test]
    fn parses_fields_with_arrays_and_offsets() {
        let fields = parse_format(SWITCH);
        assert_eq!(fields.len(), 5);
        assert_eq!(
            fields[2],
            Field {
                name: "prev_comm".into(),
                offset: 8,
                size: 16
            }
        );
        assert_eq!(
            offset(&fields, "sched_switch", "prev_state", 8).unwrap(),
            32
        );
    }

    #[test]
    fn missing_or_resized_field_is_an_error() {
        let fields = parse_format(SWITCH);
        let err = offset(&fields, "sched_switch", "next_pid", 4).unwrap_err();
        assert!(err.to_string().contains("no field `next_pid`"));
        let err = offset(&fields, "sched_switch", "prev_pid", 8).unwrap_err();
        assert!(err.to_string().contains("is 4 bytes"));
    }
}

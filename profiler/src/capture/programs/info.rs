//! What aya does not read about a loaded program: its recursion misses.
//!
//! The kernel skips a BPF program that fires while another runs on the same
//! CPU (a block completion interrupt during `tprof_switch`, say). aya does
//! not expose `bpf_prog_info.recursion_misses`, so it is read here with
//! `BPF_OBJ_GET_INFO_BY_FD`, and counted as lost events
//! (`lost.recursion_misses`).

use std::collections::BTreeMap;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};

use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};

use super::object::KernelPrograms;

impl KernelPrograms {
    /// Runs of our programs the kernel skipped because another BPF program
    /// was already running on that CPU (a completion interrupt arriving
    /// while a sched_switch program runs, say): events that never happened
    /// as far as the recording knows.
    /// By program name, the programs with any: which events they were
    /// tells the reader what is missing (a block completion's request, a
    /// context switch).
    pub(super) fn recursion_misses(&self) -> BTreeMap<String, u64> {
        self.ebpf
            .programs()
            .filter_map(|(name, program)| Some((name, prog_info(program.fd().ok()?.as_fd()).ok()?)))
            .filter(|(_, info)| info.recursion_misses > 0)
            .map(|(name, info)| (name.to_string(), info.recursion_misses))
            .collect()
    }
}

/// BPF_OBJ_GET_INFO_BY_FD for a program: aya's ProgramInfo does not expose
/// recursion_misses.
fn prog_info(fd: BorrowedFd<'_>) -> std::io::Result<bpf_prog_info> {
    // SAFETY: both are plain C structs for which zero is a valid value.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
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

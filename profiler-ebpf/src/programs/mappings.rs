//! New executable mappings of tracked processes: the `mmap` and `mprotect`
//! calls that made memory executable (`PROT_EXEC`), at their syscall exit
//! tracepoints, so the mapping is in place when the event is read. Capture
//! reads a process's `/proc/<pid>/maps` when one of these says it changed
//! (a library loaded by `import torch`, a JIT's code), instead of polling
//! every process's maps: a torch process maps hundreds of libraries, and
//! reading its maps once costs a millisecond of the kernel's time.
//!
//! Programs: `tprof_mmap_exit` on `syscalls/sys_exit_mmap`,
//! `tprof_mprotect_exit` on `syscalls/sys_exit_mprotect`. Each filters on
//! `TRACKED_TGIDS` first (a process's mappings are its own whatever
//! thread maps), then on success and `PROT_EXEC`, read from the user
//! registers the kernel saved at the call (the third argument, `prot`, of
//! both), and emits an [`ExecMapEvent`]. A new image's own segments come
//! with its exec event, which capture also reads the maps at. Where the
//! kernel has no BTF (or lacks the tracepoints) userspace leaves their
//! offsets 0, the programs do nothing and are not attached, and capture
//! polls the maps as before.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_task_pt_regs},
    macros::tracepoint,
    programs::TracePointContext,
};
use profiler_ebpf::{ExecMapEvent, PROT_EXEC};

use super::{emit, header, is_tracked_process, offsets};

/// x86-64 `struct pt_regs` as 8-byte words: the syscall's first three
/// arguments, which the kernel leaves as the caller passed them.
const PT_REGS_DX: usize = 12;
const PT_REGS_SI: usize = 13;
const PT_REGS_DI: usize = 14;

#[tracepoint]
pub(crate) fn tprof_mmap_exit(ctx: TracePointContext) -> u32 {
    exec_mapped(&ctx, offsets().mmap_ret, true);
    0
}

#[tracepoint]
pub(crate) fn tprof_mprotect_exit(ctx: TracePointContext) -> u32 {
    exec_mapped(&ctx, offsets().mprotect_ret, false);
    0
}

/// At a tracked process's `mmap` (`mmap` true: the address is its return)
/// or `mprotect` exit: an event when it succeeded with `PROT_EXEC`.
#[inline(always)]
fn exec_mapped(ctx: &TracePointContext, ret_offset: u16, mmap: bool) {
    // Userspace leaves it 0 where it polls instead (no BTF, or the kernel
    // lacks the tracepoint): a constant to the verifier, which then never
    // checks the BTF helpers below.
    if ret_offset == 0 {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !is_tracked_process(tgid) {
        return;
    }
    // An error is -errno; a mapping's address is a user address, below
    // 2^63, so positive as a signed value.
    let ret = unsafe { ctx.read_at::<i64>(ret_offset as usize) }.unwrap_or(-1);
    if ret < 0 {
        return;
    }
    // SAFETY: BTF helpers on the current task (the program is loaded only
    // where the kernel has BTF); the verifier checks the loads from the
    // pt_regs pointer.
    let (addr, len, prot) = unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const u64;
        if regs.is_null() {
            return;
        }
        (
            core::ptr::read_volatile(regs.add(PT_REGS_DI)),
            core::ptr::read_volatile(regs.add(PT_REGS_SI)),
            core::ptr::read_volatile(regs.add(PT_REGS_DX)),
        )
    };
    if prot & PROT_EXEC == 0 {
        return;
    }
    emit(ExecMapEvent {
        hdr: header::<ExecMapEvent>(),
        addr: if mmap { ret as u64 } else { addr },
        len,
        tid: pid_tgid as u32,
        tgid,
    });
}

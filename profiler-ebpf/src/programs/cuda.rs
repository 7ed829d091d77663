//! CUDA runtime calls of tracked processes: uprobes on the libcudart the job
//! has mapped. Userspace attaches [`tprof_cuda_enter`] and
//! [`tprof_cuda_return`] to each traced function with the function's id
//! (`profiler_ebpf::cuda_fn`) as the attach cookie, so one pair of programs
//! serves every function; [`tprof_cuda_launch`] only counts
//! cudaLaunchKernel.
//!
//! The probes are attached to the library file for all processes (a worker
//! that maps it later is covered by the same probe), so untracked processes
//! using the same file pay the uprobe trap and one hash lookup per call.
//!
//! `tprof_cuda_enter` keeps a tracked call's arguments in
//! `CUDA_CALLS[(tid, function)]`; `tprof_cuda_return` finds that entry (or
//! returns at once) and emits a `CudaCallEvent`. Ten functions are traced
//! this way (copies, syncs, pinning: `cuda_fn`); `cudaLaunchKernel` is only
//! counted, per CPU in `CUDA_LAUNCHES[tgid]`, because an event and a
//! uretprobe trap per launch would cost more than the launch.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
        generated::bpf_get_attach_cookie,
    },
    macros::{map, uprobe, uretprobe},
    maps::{HashMap, PerCpuHashMap},
    programs::{ProbeContext, RetProbeContext},
};
use profiler_ebpf::{
    CUDA_ARGS, CudaCallEvent, CudaEnter, MAX_CUDA_CALLS, MAX_TRACKED_TGIDS, cuda_fn, lost_map,
};

use super::{add_per_cpu, count_lost, emit, header, is_tracked_process};

/// Calls in progress: (tid << 32 | function id) → entry. Keyed by function
/// as well as thread so a runtime function that calls another probed one
/// keeps both. A plain hash, not an LRU map, so a full map is counted
/// rather than silently evicting a call in progress; the entry of a thread
/// that dies inside a call (it never returns) is removed by userspace,
/// which counts it.
#[map]
static CUDA_CALLS: HashMap<u64, CudaEnter> = HashMap::with_max_entries(MAX_CUDA_CALLS, 0);

/// cudaLaunchKernel calls per tracked process (tgid → count), per CPU so
/// counting needs no atomics. Userspace sums the CPUs.
#[map]
static CUDA_LAUNCHES: PerCpuHashMap<u32, u64> =
    PerCpuHashMap::with_max_entries(MAX_TRACKED_TGIDS, 0);

#[inline(always)]
fn call_key(pid_tgid: u64, func: u32) -> u64 {
    (u64::from(pid_tgid as u32) << 32) | u64::from(func)
}

/// Entry of any traced function but cudaLaunchKernel: keeps the arguments
/// until the return.
#[uprobe]
pub(crate) fn tprof_cuda_enter(ctx: ProbeContext) -> u32 {
    let _ = try_cuda_enter(&ctx);
    0
}

fn try_cuda_enter(ctx: &ProbeContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_tracked_process((pid_tgid >> 32) as u32) {
        return Ok(());
    }
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let mut args = [0u64; CUDA_ARGS];
    for (n, arg) in args.iter_mut().enumerate() {
        *arg = ctx.arg::<u64>(n).unwrap_or(0);
    }
    let entry = CudaEnter {
        ts_ns: unsafe { bpf_ktime_get_ns() },
        args,
    };
    if CUDA_CALLS
        .insert(&call_key(pid_tgid, func), &entry, 0)
        .is_err()
    {
        count_lost(lost_map::CUDA_CALLS_FULL);
    }
    Ok(())
}

/// Return of any traced function: one event per completed call.
#[uretprobe]
pub(crate) fn tprof_cuda_return(ctx: RetProbeContext) -> u32 {
    let _ = try_cuda_return(&ctx);
    0
}

fn try_cuda_return(ctx: &RetProbeContext) -> Result<(), i32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let key = call_key(pid_tgid, func);
    // Untracked callers have no entry: this lookup is their whole cost.
    let Some(entry) = (unsafe { CUDA_CALLS.get(&key) }).copied() else {
        return Ok(());
    };
    let _ = CUDA_CALLS.remove(&key);
    let out_ptr = match func {
        // The pointer the call stored through its `void **` argument.
        cuda_fn::HOST_ALLOC | cuda_fn::MALLOC_HOST => {
            unsafe { bpf_probe_read_user(entry.args[0] as *const u64) }.unwrap_or(0)
        }
        _ => 0,
    };
    // cudaError_t is an int: sign-extend its 32 bits.
    let ret = i64::from(ctx.ret::<u64>() as u32 as i32);
    emit(CudaCallEvent {
        hdr: header::<CudaCallEvent>(),
        enter_ns: entry.ts_ns,
        args: entry.args,
        ret,
        out_ptr,
        tid: pid_tgid as u32,
        tgid: (pid_tgid >> 32) as u32,
        func,
        _pad: 0,
    });
    Ok(())
}

/// cudaLaunchKernel: counted per process, no event and no uretprobe. A
/// training step launches hundreds to thousands of kernels; a ring-buffer
/// event and a uretprobe trap for each would cost more than the launch.
#[uprobe]
pub(crate) fn tprof_cuda_launch(_ctx: ProbeContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !is_tracked_process(tgid) {
        return 0;
    }
    if add_per_cpu(&CUDA_LAUNCHES, &tgid, 1).is_err() {
        count_lost(lost_map::CUDA_LAUNCHES_FULL);
    }
    0
}

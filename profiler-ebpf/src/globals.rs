//! The program globals userspace sets at load time that are structs: the
//! tracepoint field offsets ([`TracepointOffsets`], `OFFSETS`) and the
//! file offsets the pipe program walks ([`FileOffsets`], `FILE_OFFSETS`),
//! the request offsets of the raw block completion program
//! ([`RequestOffsets`], `REQUEST_OFFSETS`),
//! read from tracefs and BTF so no kernel's layout is baked in. (The
//! scalar globals' values, such as [`stack_mode`](crate::stack_mode), sit
//! with their concern.)

/// Byte offsets of the tracepoint fields the programs read, taken at load
/// time from tracefs `format` files so no kernel's layout is baked in.
/// Userspace sets it as the programs' `OFFSETS` global. An offset of an
/// optional tracepoint the kernel lacks stays 0 and its program is not
/// attached. 72 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracepointOffsets {
    /// sched_switch
    pub switch_prev_pid: u16,
    pub switch_prev_state: u16,
    pub switch_next_pid: u16,
    /// sched_waking / sched_wakeup / sched_wakeup_new (same layout)
    pub wakeup_pid: u16,
    pub wakeup_target_cpu: u16,
    /// task_newtask
    pub newtask_pid: u16,
    pub newtask_clone_flags: u16,
    /// sched_process_exec
    pub exec_old_pid: u16,
    /// sched_process_exit
    pub exit_group_dead: u16,
    /// task_rename
    pub rename_pid: u16,
    pub rename_newcomm: u16,
    /// block_bio_queue (and block_bio_backmerge and block_bio_frontmerge,
    /// of the same event class)
    pub bio_dev: u16,
    pub bio_sector: u16,
    pub bio_nr_sector: u16,
    /// block_split
    pub split_dev: u16,
    pub split_sector: u16,
    pub split_new_sector: u16,
    /// block_rq_insert / block_rq_issue (same layout)
    pub rq_dev: u16,
    pub rq_sector: u16,
    /// block_rq_complete
    pub complete_dev: u16,
    pub complete_sector: u16,
    pub complete_nr_sector: u16,
    pub complete_error: u16,
    pub complete_rwbs: u16,
    /// syscalls/sys_enter_futex
    pub futex_uaddr: u16,
    pub futex_op: u16,
    /// syscalls/sys_enter_futex_wait (Linux 6.7+)
    pub futex_wait_uaddr: u16,
    /// syscalls/sys_enter_futex_waitv (Linux 5.16+)
    pub futex_waitv_waiters: u16,
    /// syscalls/sys_exit_futex* (same layout for all three)
    pub futex_ret: u16,
    /// `task_struct` fields for the raw sched_switch / sched_waking programs,
    /// from the kernel's BTF (0 when they are not used: classic tracepoints).
    pub task_pid: u16,
    pub task_exit_state: u16,
    /// `thread_info.cpu` (or `cpu`) within task_struct.
    pub task_cpu: u16,
    /// `se.sum_exec_runtime` and `se.prev_sum_exec_runtime` within
    /// task_struct: the CPU time the scheduler charged the task, in all and
    /// when it was last picked, for [`ArrivalEvent`](crate::ArrivalEvent)
    /// (0 without BTF: no such event). For both sets of scheduler programs.
    pub task_runtime: u16,
    pub task_prev_runtime: u16,
    /// `thread.fsbase` within task_struct: a thread's `pthread_self()`,
    /// which is how CPython 3.10 names its threads (0 when unknown).
    pub task_fsbase: u16,
    /// syscalls/sys_exit_mmap and sys_exit_mprotect: `ret` (0 when the
    /// kernel lacks them: mappings are then polled).
    pub mmap_ret: u16,
    pub mprotect_ret: u16,
    pub _pad: [u16; 3],
}
const _: () = assert!(size_of::<TracepointOffsets>() == 80);
// SAFETY: a repr(C) struct of integers with no hidden padding (the
// derived bytemuck::Pod checks it): every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for TracepointOffsets {}

/// Where the pipe programs find a file descriptor's file and tell a pipe:
/// `current->files->fdt->fd[fd]`, the file's inode mode (a FIFO) and its
/// `private_data` (the pipe), from the kernel's BTF, and `sys_exit_read`'s
/// `ret` field, from tracefs. Userspace sets it as the `FILE_OFFSETS`
/// global; all zero turns the pipe program off. 24 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileOffsets {
    pub task_files: u16,
    pub files_fdt: u16,
    pub fdt_max_fds: u16,
    pub fdt_fd: u16,
    pub file_inode: u16,
    pub file_private_data: u16,
    pub inode_mode: u16,
    /// `sys_exit_read`'s `ret`.
    pub exit_ret: u16,
    pub _pad: [u16; 4],
}
const _: () = assert!(size_of::<FileOffsets>() == 24);
// SAFETY: as for TracepointOffsets.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FileOffsets {}

/// Where the raw `block_rq_complete` program finds what the classic
/// tracepoint's record holds: the device (`rq->q->disk`'s `major` and
/// `first_minor`), the first sector (`rq->__sector`) and the operation
/// (`rq->cmd_flags`), from the kernel's BTF. Userspace sets it as the
/// `REQUEST_OFFSETS` global when it loads that program (else the classic
/// one is loaded and this stays zero). 16 bytes.
#[repr(C)]
#[cfg_attr(feature = "pod", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestOffsets {
    /// `request.q`, a pointer.
    pub rq_q: u16,
    /// `request.__sector`, a sector_t (u64).
    pub rq_sector: u16,
    /// `request.cmd_flags`, a blk_opf_t (u32): the operation in its low 8
    /// bits.
    pub rq_cmd_flags: u16,
    /// `request_queue.disk`, a pointer (NULL for a queue with no disk).
    pub q_disk: u16,
    /// `gendisk.major` and `gendisk.first_minor`, ints.
    pub disk_major: u16,
    pub disk_first_minor: u16,
    pub _pad: [u16; 2],
}
const _: () = assert!(size_of::<RequestOffsets>() == 16);
// SAFETY: as for TracepointOffsets.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RequestOffsets {}

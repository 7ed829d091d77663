//! The names userspace looks the kernel programs, maps and globals up by.
//! The kernel side defines each as a Rust item of that name (a program is
//! its function, a map or global its static), which the macros cannot
//! take from a constant; `capture::programs`' tests check these lists
//! against the built object, both ways.

use crate::EVENT_SHARDS;

/// Programs: the scheduler ones in two builds, classic tracepoint and
/// raw tracepoint (`_r`), of which one set is loaded.
pub mod program {
    pub const SWITCH: &str = "tprof_switch";
    pub const SWITCH_RAW: &str = "tprof_switch_r";
    pub const WAKING: &str = "tprof_waking";
    pub const WAKING_RAW: &str = "tprof_waking_r";
    pub const WAKEUP_NEW: &str = "tprof_wakeup_new";
    pub const WAKEUP_NEW_RAW: &str = "tprof_wakenew_r";
    pub const NEWTASK: &str = "tprof_newtask";
    pub const EXEC: &str = "tprof_exec";
    pub const EXIT: &str = "tprof_exit";
    pub const RENAME: &str = "tprof_rename";
    pub const BIO_QUEUE: &str = "tprof_bio_queue";
    pub const BIO_SPLIT: &str = "tprof_bio_split";
    pub const BIO_BACKMERGE: &str = "tprof_bio_backmerge";
    pub const BIO_FRONTMERGE: &str = "tprof_bio_frontmerge";
    pub const RQ_INSERT: &str = "tprof_rq_insert";
    pub const RQ_ISSUE: &str = "tprof_rq_issue";
    pub const RQ_COMPLETE: &str = "tprof_rq_complete";
    pub const RQ_COMPLETE_RAW: &str = "tprof_rqdone_r";
    pub const FUTEX_ENTER: &str = "tprof_futex_enter";
    pub const FUTEX_WAIT_ENTER: &str = "tprof_futex_wait_enter";
    pub const FUTEX_WAITV_ENTER: &str = "tprof_futex_waitv_enter";
    pub const FUTEX_EXIT: &str = "tprof_futex_exit";
    pub const SAMPLE: &str = "tprof_sample";
    pub const CUDA_ENTER: &str = "tprof_cuda_enter";
    pub const CUDA_RETURN: &str = "tprof_cuda_return";
    pub const CUDA_LAUNCH: &str = "tprof_cuda_launch";
    pub const TORCH_MARK: &str = "tprof_torch_mark";
    pub const PIPE_READ: &str = "tprof_pipe_read";
    pub const MMAP_EXIT: &str = "tprof_mmap_exit";
    pub const MPROTECT_EXIT: &str = "tprof_mprotect_exit";
    /// Every program in the object.
    pub const ALL: &[&str] = &[
        SWITCH,
        SWITCH_RAW,
        WAKING,
        WAKING_RAW,
        WAKEUP_NEW,
        WAKEUP_NEW_RAW,
        NEWTASK,
        EXEC,
        EXIT,
        RENAME,
        BIO_QUEUE,
        BIO_SPLIT,
        BIO_BACKMERGE,
        BIO_FRONTMERGE,
        RQ_INSERT,
        RQ_ISSUE,
        RQ_COMPLETE,
        RQ_COMPLETE_RAW,
        FUTEX_ENTER,
        FUTEX_WAIT_ENTER,
        FUTEX_WAITV_ENTER,
        FUTEX_EXIT,
        SAMPLE,
        CUDA_ENTER,
        CUDA_RETURN,
        CUDA_LAUNCH,
        TORCH_MARK,
        PIPE_READ,
        MMAP_EXIT,
        MPROTECT_EXIT,
    ];
}

/// Maps.
pub mod map {
    /// The event shards, `EVENTS0`… ([`EVENT_SHARDS`](crate::EVENT_SHARDS)).
    pub const EVENTS: [&str; 8] = [
        "EVENTS0", "EVENTS1", "EVENTS2", "EVENTS3", "EVENTS4", "EVENTS5", "EVENTS6", "EVENTS7",
    ];
    /// The stack copy shards, `COPIES0`…, sharded as the events are.
    pub const COPIES: [&str; 8] = [
        "COPIES0", "COPIES1", "COPIES2", "COPIES3", "COPIES4", "COPIES5", "COPIES6", "COPIES7",
    ];
    pub const TRACKED_TGIDS: &str = "TRACKED_TGIDS";
    pub const TRACKED_TIDS: &str = "TRACKED_TIDS";
    pub const LOST: &str = "LOST";
    pub const STACKS: &str = "STACKS";
    pub const REQUESTS: &str = "REQUESTS";
    pub const BIO_OWNERS: &str = "BIO_OWNERS";
    pub const CUDA_CALLS: &str = "CUDA_CALLS";
    pub const CUDA_LAUNCHES: &str = "CUDA_LAUNCHES";
    pub const STACK_SCRATCH: &str = "STACK_SCRATCH";
    /// Python processes' interpreter layouts (tgid → `PyProcInfo`).
    pub const PY_PROCS: &str = "PY_PROCS";
    /// The per-CPU scratch record of the Python walk.
    pub const PY_SCRATCH: &str = "PY_SCRATCH";
    /// Where the switch program's time goes (`switch_part`), when asked.
    pub const SWITCH_PROFILE: &str = "SWITCH_PROFILE";
    /// Switch-out copies' call-site checks (`SiteCheck`), which userspace
    /// writes as it unwinds them.
    pub const SITE_CHECKS: &str = "SITE_CHECKS";
    /// When a tracked process first asked its DataLoader for a batch (one
    /// entry; 0 until then): the pipe program stands down from then on.
    pub const STEPS_FROM_MARKS: &str = "STEPS_FROM_MARKS";
    /// Every map in the object but the event and copy shards (and the sections
    /// of program globals).
    pub const ALL_BUT_EVENTS: &[&str] = &[
        TRACKED_TGIDS,
        TRACKED_TIDS,
        LOST,
        STACKS,
        REQUESTS,
        BIO_OWNERS,
        CUDA_CALLS,
        CUDA_LAUNCHES,
        STACK_SCRATCH,
        PY_PROCS,
        PY_SCRATCH,
        SWITCH_PROFILE,
        SITE_CHECKS,
        STEPS_FROM_MARKS,
    ];
}

/// Program globals userspace sets at load time.
pub mod global {
    pub const OFFSETS: &str = "OFFSETS";
    pub const SAMPLE_STACKS: &str = "SAMPLE_STACKS";
    pub const STACK_MODE: &str = "STACK_MODE";
    pub const STACK_COPY_BYTES: &str = "STACK_COPY_BYTES";
    pub const PREEMPT_STACK_GAP_NS: &str = "PREEMPT_STACK_GAP_NS";
    pub const PYTHON_FRAMES: &str = "PYTHON_FRAMES";
    pub const FILE_OFFSETS: &str = "FILE_OFFSETS";
    pub const REQUEST_OFFSETS: &str = "REQUEST_OFFSETS";
    pub const PROFILE_SWITCH: &str = "PROFILE_SWITCH";
}

const _: () = assert!(map::EVENTS.len() == EVENT_SHARDS as usize);
const _: () = assert!(map::COPIES.len() == EVENT_SHARDS as usize);

//! The STACKS record: every sampled stack, already symbolized at record time
//! (the binaries may be gone, or on another machine, when the recording is
//! read), and the weight of each (thread, stack, kind).

use serde::{Deserialize, Serialize};

/// One symbolized frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Executable, library or "[kernel]" / "[vdso]" / "[anon]"; empty when
    /// the address was in no known mapping.
    pub module: String,
    /// Offset in `module` (file offset for files, address for the kernel).
    pub offset: u64,
    /// Function name, when one was found.
    pub symbol: Option<String>,
    pub kernel: bool,
}

/// What a stack's weight measures and, off CPU, why the thread waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StackKind {
    /// cpu-clock samples.
    OnCpu,
    /// Off CPU, still runnable: preempted, waiting for a CPU.
    Runnable,
    /// Off CPU in uninterruptible sleep (D).
    DiskWait,
    /// Off CPU in interruptible sleep (S).
    Sleep,
    /// Off CPU, stopped, traced or parked.
    Other,
    /// Off CPU, blocked on block IO (from the block IO tracker).
    BlockIo,
    /// Off CPU, blocked in a futex wait (from the futex tracker).
    Futex,
}

impl StackKind {
    /// From `profiler_ebpf::stack_kind`; unknown values read as `Other`.
    pub fn from_abi(kind: u32) -> StackKind {
        use profiler_ebpf::stack_kind as k;
        match kind {
            k::ON_CPU => StackKind::OnCpu,
            k::RUNNABLE => StackKind::Runnable,
            k::DISK_WAIT => StackKind::DiskWait,
            k::SLEEP => StackKind::Sleep,
            k::BLOCK_IO => StackKind::BlockIo,
            k::FUTEX => StackKind::Futex,
            _ => StackKind::Other,
        }
    }

    pub fn is_on_cpu(self) -> bool {
        self == StackKind::OnCpu
    }
}

/// The weight of one stack of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSample {
    pub pid: u32,
    pub tid: u32,
    pub kind: StackKind,
    /// Index into [`StackTable::stacks`].
    pub stack: u32,
    /// Samples for [`StackKind::OnCpu`], nanoseconds otherwise.
    pub weight: u64,
}

/// Payload of a STACKS record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackTable {
    /// cpu-clock sampling frequency: one on-CPU sample stands for 1/hz s.
    pub sample_hz: u64,
    pub frames: Vec<Frame>,
    /// Indexes into `frames`, outermost caller first; user frames, then
    /// kernel frames.
    pub stacks: Vec<Vec<u32>>,
    pub samples: Vec<StackSample>,
}

//! Stacks in a recording: symbolized frames and the stacks made of them,
//! already named at record time (the binaries may be gone, or on another
//! machine, when the recording is read).
//!
//! Since format 4 they are streamed: FRAMES and STACK_DEFS records
//! ([`FrameBatch`], [`StackBatch`]) intern each new frame and stack as
//! capture meets it, and the events that sampled a stack (on-CPU samples,
//! switch-outs) refer to it by id, so a recording cut short keeps the stacks
//! sampled until then and every sample has its time. Formats 2 and 3 wrote
//! one aggregated [`StackTable`] at the end instead; the model builds the
//! same table from the streamed records, so everything after it reads both.
//!
//! A [`Frame`] has a [`FrameKind`] (native, kernel, Python, JIT, or a
//! marker such as `[truncated]` or `[python: unreadable]`), so a reader
//! never guesses what an address was.

use serde::{Deserialize, Serialize};

/// The texts of the marker frames tprof writes.
pub mod markers {
    /// In place of a user stack the kernel could not take or deliver.
    pub const USER_STACK_LOST: &str = "[user stack lost]";
    /// The outermost frame of a user stack that stops short of its
    /// thread's root: the copy ended, or unwinding met something that is
    /// not a frame.
    pub const TRUNCATED: &str = "[truncated]";
    /// The outermost frame of a user stack taken in a process whose
    /// mappings tprof never read (it exited, or exec'd and exited, before
    /// the read): only the leaf's address is known, named by nothing.
    pub const NO_MAPPINGS: &str = "[mappings not read]";
}

/// What a frame is. Python, JIT and marker frames have no module offset to
/// symbolize later; their name is all there is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    /// Machine code of an executable or shared library, in user space.
    #[default]
    Native,
    /// Kernel code.
    Kernel,
    /// A Python function, as the interpreter's frame named it.
    Python,
    /// JIT-compiled code, named by a perf map (`/tmp/perf-PID.map`).
    Jit,
    /// Not code: a note in the stack's place, such as `[user stack lost]`
    /// or `[truncated]`.
    Marker,
}

/// One symbolized frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "FrameWire")]
pub struct Frame {
    /// Executable, library or `[kernel]` / `[vdso]` / `[anon]`; empty when
    /// the address was in no known mapping, or for a marker.
    pub module: String,
    /// Offset in `module` (file offset for files, address for the kernel).
    pub offset: u64,
    /// Function name, when one was found.
    pub symbol: Option<String>,
    pub kind: FrameKind,
}

impl Frame {
    pub fn is_kernel(&self) -> bool {
        self.kind == FrameKind::Kernel
    }

    /// A marker frame: `text` in place of code.
    pub fn marker(text: &str) -> Frame {
        Frame {
            symbol: Some(text.to_string()),
            kind: FrameKind::Marker,
            ..Frame::default()
        }
    }
}

/// A frame as any version wrote it: formats 2 and 3 had `kernel: bool`
/// where format 4 has `kind`.
#[derive(Deserialize)]
struct FrameWire {
    #[serde(default)]
    module: String,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    symbol: Option<String>,
    #[serde(default)]
    kind: Option<FrameKind>,
    #[serde(default)]
    kernel: bool,
}

impl From<FrameWire> for Frame {
    fn from(w: FrameWire) -> Frame {
        let kind = w.kind.unwrap_or(if w.kernel {
            FrameKind::Kernel
        } else if w.module.is_empty() && w.offset == 0 && w.symbol.is_some() {
            // Formats 2 and 3 wrote a lost stack as a frame with only a name.
            FrameKind::Marker
        } else if w.module == "[anon]" {
            FrameKind::Jit
        } else {
            FrameKind::Native
        });
        Frame {
            module: w.module,
            offset: w.offset,
            symbol: w.symbol,
            kind,
        }
    }
}

/// The marker frames capture puts outermost in a user stack whose Python
/// walk it could not complete, in place of frames it cannot name. Never a
/// wrong name in their place.
pub mod python_marker {
    /// Deeper than the walk goes (128 frames), or a read failed partway:
    /// the innermost frames found are kept, the rest is this.
    pub const TRUNCATED: &str = "[python: truncated]";
    /// A CPython tprof cannot walk (a version it has no layout for, a
    /// free-threaded build): no Python frames at all.
    pub const UNKNOWN_VERSION: &str = "[python: unknown version]";
    /// One frame whose code object could not be read back (freed before
    /// capture named it, or its process gone with no parent to read).
    pub const UNREADABLE: &str = "[python: unreadable]";
    /// All of them.
    pub const ALL: [&str; 3] = [TRUNCATED, UNKNOWN_VERSION, UNREADABLE];
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
    /// When the thread began (its [`crate::model::ThreadKey`]'s start), so
    /// a reused tid's stacks stay another thread's. Formats 2 and 3 did
    /// not keep it (0).
    #[serde(default)]
    pub thread_ns: u64,
    pub kind: StackKind,
    /// Index into [`StackTable::stacks`].
    pub stack: u32,
    /// Samples for [`StackKind::OnCpu`], nanoseconds otherwise.
    pub weight: u64,
}

/// Every stack of a recording with its weight per thread and kind: the
/// payload of formats 2 and 3's STACKS record, and what the model builds
/// from format 4's streamed records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackTable {
    /// cpu-clock sampling frequency: one on-CPU sample stands for 1/hz s.
    pub sample_hz: u64,
    pub frames: Vec<Frame>,
    /// Indexes into `frames`, outermost caller first; user frames, then
    /// kernel frames.
    pub stacks: Vec<Vec<u32>>,
    pub samples: Vec<StackSample>,
    /// Each on-CPU sample and off-CPU interval with its time, sorted by
    /// (tid, start): what the weights in `samples` sum, kept so that
    /// analysis can ask what a thread was doing at a moment (the anatomy
    /// of a step) and outputs can cut stacks by time (`--phase`,
    /// `--steps`). Made by the model from a format 4 recording's streamed
    /// events; empty for formats 2 and 3, whose STACKS record has only the
    /// sums. Never written to a file.
    #[serde(skip)]
    pub timed: Vec<TimedStack>,
}

/// One on-CPU sample or off-CPU interval of a thread, with its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedStack {
    /// The sample's time, or when the thread left the CPU.
    pub start_ns: u64,
    /// When the thread ran again (or the window closed); `start_ns` for an
    /// on-CPU sample.
    pub end_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// When the thread began ([`StackSample::thread_ns`]).
    pub thread_ns: u64,
    /// Index into [`StackTable::stacks`].
    pub stack: u32,
    pub kind: StackKind,
}

impl TimedStack {
    /// Its weight in the unit of [`StackSample::weight`]: one sample, or
    /// nanoseconds off CPU.
    pub fn weight(&self) -> u64 {
        if self.kind.is_on_cpu() {
            1
        } else {
            self.end_ns.saturating_sub(self.start_ns)
        }
    }
}

impl StackTable {
    /// The timed entries of thread `tid`, in time order.
    pub fn timed_of(&self, tid: u32) -> &[TimedStack] {
        let from = self.timed.partition_point(|t| t.tid < tid);
        let to = self.timed.partition_point(|t| t.tid <= tid);
        &self.timed[from..to]
    }
}

/// Payload of a FRAMES record (format 4): frames `first`, `first + 1`, …
/// A recording's frame ids count up from 0 across its FRAMES records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameBatch {
    pub first: u32,
    pub frames: Vec<Frame>,
}

/// Payload of a STACK_DEFS record (format 4): stacks `first`, `first + 1`,
/// …, each a list of frame ids, outermost caller first. A stack is either a
/// user stack or a kernel stack; events name one of each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackBatch {
    pub first: u32,
    pub stacks: Vec<Vec<u32>>,
}

/// The frames and stacks a format 4 recording interned, gathered from its
/// FRAMES and STACK_DEFS records in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackDictionary {
    pub frames: Vec<Frame>,
    pub stacks: Vec<Vec<u32>>,
}

impl StackDictionary {
    /// Appends a FRAMES record; its first id must follow the last one's.
    pub fn add_frames(&mut self, batch: FrameBatch) -> Result<(), String> {
        check_next("frame", batch.first, self.frames.len())?;
        self.frames.extend(batch.frames);
        Ok(())
    }

    /// Appends a STACK_DEFS record; its first id must follow the last one's.
    pub fn add_stacks(&mut self, batch: StackBatch) -> Result<(), String> {
        check_next("stack", batch.first, self.stacks.len())?;
        self.stacks.extend(batch.stacks);
        Ok(())
    }

    /// The frames of stack `id`, or None for -1 and for an id no record
    /// defined (a hostile or damaged file).
    pub fn stack(&self, id: i32) -> Option<&[u32]> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.stacks.get(i))
            .map(Vec::as_slice)
    }
}

fn check_next(what: &str, first: u32, have: usize) -> Result<(), String> {
    if first as usize != have {
        return Err(format!(
            "{what} ids jump: a batch starts at {first} after {have} {what}s"
        ));
    }
    Ok(())
}

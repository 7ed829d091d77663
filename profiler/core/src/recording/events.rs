//! Kernel events as the rest of tprof sees them: decoded from the ABI structs
//! of `profiler_ebpf` into one enum with plain fields.
//!
//! The large, rare variants (`BlockIo`, `CudaCall`) are boxed so the enum
//! stays at 56 bytes (a test pins it): the reorder window and the model's
//! builders move millions of them.

use profiler_ebpf::{
    ArrivalEvent, BlockIoEvent, CUDA_ARGS, CommEvent, CudaCallEvent, EventHeader, ExecEvent,
    ExitEvent, ForkEvent, FutexEvent, MarkEvent, NO_STACK_KIND, PipeEvent, SampleEvent,
    SwitchEvent, WakeupEvent, event_size, kind, pipe_op,
};

use super::StackKind;

/// One kernel event. Times are CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Switch {
        ts: u64,
        cpu: u16,
        prev_tid: u32,
        prev_tgid: u32,
        /// Raw sched_switch prev_state (see [`crate::model::SwitchOut`]).
        prev_state: u64,
        next_tid: u32,
        /// 0 when the next task is not tracked.
        next_tgid: u32,
        /// Where a tracked prev left the CPU (format 4): the kind its
        /// off-CPU time counts under and its stacks; None before format 4,
        /// for an untracked or exiting prev.
        prev_stacks: Option<OffCpuStacks>,
    },
    /// A tracked thread is leaving a CPU that no traced switch put it on
    /// (format 4 files from 2026-12 on): the switch event at the same `ts`
    /// follows. `run_ns` is the CPU time the scheduler charged it since it
    /// picked it: it arrived about `run_ns` before `ts`.
    Arrival {
        ts: u64,
        cpu: u16,
        tid: u32,
        tgid: u32,
        run_ns: u64,
    },
    /// An on-CPU sample of a tracked thread's stacks (format 4).
    Sample {
        ts: u64,
        cpu: u16,
        tid: u32,
        tgid: u32,
        /// Stack ids of the recording's STACK_DEFS; -1: none (lost, or no
        /// kernel frames).
        user_stack: i32,
        kernel_stack: i32,
    },
    Wakeup {
        ts: u64,
        cpu: u16,
        tid: u32,
        tgid: u32,
        waker_tid: u32,
        waker_tgid: u32,
        target_cpu: u32,
        /// `profiler_ebpf::WAKE_*` bits.
        flags: u32,
    },
    Fork {
        ts: u64,
        parent_tid: u32,
        parent_tgid: u32,
        child_tid: u32,
        child_tgid: u32,
        comm: String,
    },
    Exec {
        ts: u64,
        tid: u32,
        tgid: u32,
        old_tid: u32,
        comm: String,
    },
    Exit {
        ts: u64,
        tid: u32,
        tgid: u32,
        group_dead: bool,
    },
    Comm {
        ts: u64,
        tid: u32,
        tgid: u32,
        comm: String,
    },
    /// A completed block request. Boxed, like [`Event::CudaCall`]: the
    /// largest variants are rare, and an enum is as big as its largest.
    BlockIo(Box<BlockIo>),
    /// A futex wait of a tracked thread; `ts` is the syscall's exit.
    FutexWait {
        ts: u64,
        enter_ns: u64,
        tid: u32,
        tgid: u32,
        uaddr: u64,
        op: u32,
        ret: i64,
    },
    /// A completed CUDA runtime call (boxed: rare and large).
    CudaCall(Box<CudaCall>),
    /// A tracked thread entered a probed libtorch function
    /// (`profiler_ebpf::mark`): a `record_function` region named `name`,
    /// or a backward pass.
    Mark {
        ts: u64,
        tid: u32,
        tgid: u32,
        what: u32,
        name: String,
    },
    /// A tracked thread's pipe read or write that moved `bytes`; `ts` is
    /// its return. `pipe` identifies the pipe while it lives.
    Pipe {
        ts: u64,
        tid: u32,
        tgid: u32,
        pipe: u64,
        bytes: u64,
        write: bool,
    },
}

/// Where a thread left the CPU: the kind its off-CPU time counts under
/// until it runs again, and its user and kernel stack ids (-1: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffCpuStacks {
    pub kind: StackKind,
    pub user: i32,
    pub kernel: i32,
}

/// A completed block request; `ts` is its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockIo {
    pub ts: u64,
    /// Queue entry (0: before tracing began).
    pub start_ns: u64,
    /// Driver issue (0: unknown).
    pub issue_ns: u64,
    pub dev: u32,
    pub sector: u64,
    pub bytes: u64,
    /// Submitting tracked thread, 0 if none.
    pub tid: u32,
    pub tgid: u32,
    pub error: i32,
    /// The kernel's rwbs string: R, W, D, F, N, then flags (S, M, A, …).
    pub rwbs: String,
}

/// A completed CUDA runtime call of a tracked thread; `ts` is its
/// return. `args` are the raw integer arguments (their meaning depends
/// on `func`, one of `profiler_ebpf::cuda_fn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaCall {
    pub ts: u64,
    pub enter_ns: u64,
    pub tid: u32,
    pub tgid: u32,
    pub func: u32,
    pub args: [u64; CUDA_ARGS],
    /// The cudaError_t returned (0: success).
    pub ret: i32,
    /// cudaHostAlloc / cudaMallocHost: the pointer stored through the
    /// first argument; 0 otherwise.
    pub out_ptr: u64,
}

impl Event {
    pub fn ts(&self) -> u64 {
        match *self {
            Event::Switch { ts, .. }
            | Event::Arrival { ts, .. }
            | Event::Wakeup { ts, .. }
            | Event::Fork { ts, .. }
            | Event::Exec { ts, .. }
            | Event::Exit { ts, .. }
            | Event::Comm { ts, .. }
            | Event::FutexWait { ts, .. }
            | Event::Sample { ts, .. }
            | Event::Mark { ts, .. }
            | Event::Pipe { ts, .. } => ts,
            Event::BlockIo(ref io) => io.ts,
            Event::CudaCall(ref call) => call.ts,
        }
    }
}

/// Why a block of event bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("event of unknown kind {0}")]
    UnknownKind(u16),
    #[error("event cut off: {needed} bytes needed, {left} left")]
    Short { needed: usize, left: usize },
    #[error("event of kind {kind} with impossible length {len}")]
    BadLength { kind: u16, len: u32 },
}

/// The ABI struct at the start of `bytes` (any alignment).
fn read_plain<T: bytemuck::Pod>(bytes: &[u8]) -> Result<T, DecodeError> {
    match bytes.get(..size_of::<T>()) {
        Some(head) => Ok(bytemuck::pod_read_unaligned(head)),
        None => Err(DecodeError::Short {
            needed: size_of::<T>(),
            left: bytes.len(),
        }),
    }
}

/// How the events of a recording are framed: formats 1 to 3 give each
/// kind a fixed size, so an unknown kind cannot be skipped; format 4's
/// headers carry each record's length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Framing {
    /// Formats 1–3: sizes by kind ([`event_size`], and a 40-byte switch).
    Fixed,
    /// Format 4 on: `EventHeader::len`; unknown kinds are skipped.
    #[default]
    Length,
}

impl Framing {
    pub fn of_version(version: u32) -> Framing {
        if version >= 4 {
            Framing::Length
        } else {
            Framing::Fixed
        }
    }

    /// The length of the record `hdr` starts, or an error for an unknown
    /// kind (fixed framing) or a length that cannot be (length framing).
    fn record_len(self, hdr: &EventHeader) -> Result<usize, DecodeError> {
        match self {
            Framing::Fixed => match hdr.kind {
                kind::SWITCH => Ok(size_of::<SwitchEventV3>()),
                kind::SAMPLE => Err(DecodeError::UnknownKind(hdr.kind)),
                other => event_size(other).ok_or(DecodeError::UnknownKind(other)),
            },
            Framing::Length => {
                let len = hdr.len as usize;
                // A newer writer may append fields: a known kind needs at
                // least its own size, and reads its known prefix.
                let least = event_size(hdr.kind).unwrap_or(size_of::<EventHeader>());
                if len < least || !len.is_multiple_of(8) {
                    return Err(DecodeError::BadLength {
                        kind: hdr.kind,
                        len: hdr.len,
                    });
                }
                Ok(len)
            }
        }
    }
}

/// The switch event of formats 1 to 3 (40 bytes): no stacks, and
/// `prev_state` as a u64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SwitchEventV3 {
    pub hdr: EventHeader,
    pub prev_state: u64,
    pub prev_tid: u32,
    pub prev_tgid: u32,
    pub next_tid: u32,
    pub next_tgid: u32,
}
const _: () = assert!(size_of::<SwitchEventV3>() == 40);

/// Decodes the event at the start of `bytes`; returns it (None for a kind
/// this reader does not know, skipped by its length) and its length.
pub fn decode(bytes: &[u8], framing: Framing) -> Result<(Option<Event>, usize), DecodeError> {
    let hdr: EventHeader = read_plain(bytes)?;
    let size = framing.record_len(&hdr)?;
    let bytes = bytes.get(..size).ok_or(DecodeError::Short {
        needed: size,
        left: bytes.len(),
    })?;
    if framing == Framing::Fixed && hdr.kind == kind::SWITCH {
        let e: SwitchEventV3 = read_plain(bytes)?;
        let event = Event::Switch {
            ts: hdr.ts_ns,
            cpu: hdr.cpu,
            prev_tid: e.prev_tid,
            prev_tgid: e.prev_tgid,
            prev_state: e.prev_state,
            next_tid: e.next_tid,
            next_tgid: e.next_tgid,
            prev_stacks: None,
        };
        return Ok((Some(event), size));
    }
    let event = match hdr.kind {
        kind::SWITCH => {
            let e: SwitchEvent = read_plain(bytes)?;
            Event::Switch {
                ts: hdr.ts_ns,
                cpu: hdr.cpu,
                prev_tid: e.prev_tid,
                prev_tgid: e.prev_tgid,
                prev_state: u64::from(e.prev_state),
                next_tid: e.next_tid,
                next_tgid: e.next_tgid,
                prev_stacks: (e.prev_kind != NO_STACK_KIND).then(|| OffCpuStacks {
                    kind: StackKind::from_abi(e.prev_kind),
                    user: e.prev_user_stack,
                    kernel: e.prev_kernel_stack,
                }),
            }
        }
        kind::ARRIVAL => {
            let e: ArrivalEvent = read_plain(bytes)?;
            Event::Arrival {
                ts: hdr.ts_ns,
                cpu: hdr.cpu,
                tid: e.tid,
                tgid: e.tgid,
                run_ns: e.run_ns,
            }
        }
        kind::SAMPLE => {
            let e: SampleEvent = read_plain(bytes)?;
            Event::Sample {
                ts: hdr.ts_ns,
                cpu: hdr.cpu,
                tid: e.tid,
                tgid: e.tgid,
                user_stack: e.user_stack,
                kernel_stack: e.kernel_stack,
            }
        }
        kind::WAKEUP => {
            let e: WakeupEvent = read_plain(bytes)?;
            Event::Wakeup {
                ts: hdr.ts_ns,
                cpu: hdr.cpu,
                tid: e.tid,
                tgid: e.tgid,
                waker_tid: e.waker_tid,
                waker_tgid: e.waker_tgid,
                target_cpu: e.target_cpu,
                flags: e.flags,
            }
        }
        kind::FORK => {
            let e: ForkEvent = read_plain(bytes)?;
            Event::Fork {
                ts: hdr.ts_ns,
                parent_tid: e.parent_tid,
                parent_tgid: e.parent_tgid,
                child_tid: e.child_tid,
                child_tgid: e.child_tgid,
                comm: comm_string(&e.comm),
            }
        }
        kind::EXEC => {
            let e: ExecEvent = read_plain(bytes)?;
            Event::Exec {
                ts: hdr.ts_ns,
                tid: e.tid,
                tgid: e.tgid,
                old_tid: e.old_tid,
                comm: comm_string(&e.comm),
            }
        }
        kind::EXIT => {
            let e: ExitEvent = read_plain(bytes)?;
            Event::Exit {
                ts: hdr.ts_ns,
                tid: e.tid,
                tgid: e.tgid,
                group_dead: e.group_dead != 0,
            }
        }
        kind::COMM => {
            let e: CommEvent = read_plain(bytes)?;
            Event::Comm {
                ts: hdr.ts_ns,
                tid: e.tid,
                tgid: e.tgid,
                comm: comm_string(&e.comm),
            }
        }
        kind::BLOCK_IO => {
            let e: BlockIoEvent = read_plain(bytes)?;
            Event::BlockIo(Box::new(BlockIo {
                ts: hdr.ts_ns,
                start_ns: e.start_ns,
                issue_ns: e.issue_ns,
                dev: e.dev,
                sector: e.sector,
                bytes: u64::from(e.nr_sector) * 512,
                tid: e.tid,
                tgid: e.tgid,
                error: e.error,
                rwbs: comm_string(&e.rwbs),
            }))
        }
        kind::FUTEX => {
            let e: FutexEvent = read_plain(bytes)?;
            Event::FutexWait {
                ts: hdr.ts_ns,
                enter_ns: e.enter_ns,
                tid: e.tid,
                tgid: e.tgid,
                uaddr: e.uaddr,
                op: e.op,
                ret: e.ret,
            }
        }
        kind::CUDA => {
            let e: CudaCallEvent = read_plain(bytes)?;
            Event::CudaCall(Box::new(CudaCall {
                ts: hdr.ts_ns,
                enter_ns: e.enter_ns,
                tid: e.tid,
                tgid: e.tgid,
                func: e.func,
                args: e.args,
                ret: e.ret as i32,
                out_ptr: e.out_ptr,
            }))
        }
        kind::MARK => {
            let e: MarkEvent = read_plain(bytes)?;
            Event::Mark {
                ts: hdr.ts_ns,
                tid: e.tid,
                tgid: e.tgid,
                what: e.what,
                name: comm_string(&e.name),
            }
        }
        kind::PIPE => {
            let e: PipeEvent = read_plain(bytes)?;
            Event::Pipe {
                ts: hdr.ts_ns,
                tid: e.tid,
                tgid: e.tgid,
                pipe: e.pipe,
                bytes: e.bytes,
                write: e.op == pipe_op::WRITE,
            }
        }
        // Only length framing gets here with a kind it does not know.
        _ => return Ok((None, size)),
    };
    Ok((Some(event), size))
}

/// Decodes a block of back-to-back events; returns how many were of kinds
/// this reader does not know (skipped).
pub fn decode_all(
    mut bytes: &[u8],
    framing: Framing,
    out: &mut Vec<Event>,
) -> Result<u64, DecodeError> {
    let mut unknown = 0;
    while !bytes.is_empty() {
        let (event, len) = decode(bytes, framing)?;
        match event {
            Some(event) => out.push(event),
            None => unknown += 1,
        }
        bytes = &bytes[len..];
    }
    Ok(unknown)
}

/// Calls `f` with the timestamp of each event in a block of back-to-back
/// events, checking kinds and lengths the way [`decode_all`] does but
/// decoding nothing else.
pub fn for_each_timestamp(
    mut bytes: &[u8],
    framing: Framing,
    mut f: impl FnMut(u64),
) -> Result<(), DecodeError> {
    while !bytes.is_empty() {
        let hdr: EventHeader = read_plain(bytes)?;
        let size = framing.record_len(&hdr)?;
        if bytes.len() < size {
            return Err(DecodeError::Short {
                needed: size,
                left: bytes.len(),
            });
        }
        // Only what decode_all keeps: a kind it skips (one this reader does
        // not know, or a stack copy that belongs to the capture, never to
        // a file) must not stretch the window the events span.
        if decodes_to_event(hdr.kind) {
            f(hdr.ts_ns);
        }
        bytes = &bytes[size..];
    }
    Ok(())
}

/// Whether [`decode`] makes an [`Event`] of a record of this kind.
fn decodes_to_event(k: u16) -> bool {
    !matches!(k, kind::STACK_COPY | kind::PY_STACK) && kind_name(k) != "unknown"
}

/// The name of an event kind, as lost-event counts report it.
pub fn kind_name(kind: u16) -> &'static str {
    match kind {
        kind::SWITCH => "switch",
        kind::WAKEUP => "wakeup",
        kind::FORK => "fork",
        kind::EXEC => "exec",
        kind::EXIT => "exit",
        kind::COMM => "comm",
        kind::BLOCK_IO => "block_io",
        kind::FUTEX => "futex",
        kind::CUDA => "cuda",
        kind::SAMPLE => "sample",
        kind::STACK_COPY => "stack_copy",
        kind::PY_STACK => "py_stack",
        kind::MARK => "mark",
        kind::PIPE => "pipe",
        kind::ARRIVAL => "arrival",
        kind::EXEC_MAP => "exec_map",
        _ => "unknown",
    }
}

/// A kernel string field (NUL-padded, not always UTF-8) as a string.
pub fn comm_string(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// Encodes an ABI struct as the bytes the kernel would have written (tests
/// and fixtures build recordings with it). `Pod` guarantees every byte is
/// initialized: the ABI types have no hidden padding.
pub fn encode<T: bytemuck::Pod>(event: &T) -> Vec<u8> {
    bytemuck::bytes_of(event).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_ebpf::{AbiEvent, COMM_LEN};

    #[test]
    fn the_common_events_set_the_size() {
        // Every decoded event waiting in the reader's reorder window costs
        // this much; the large rare variants are boxed to keep it down.
        assert!(size_of::<Event>() <= 56, "{}", size_of::<Event>());
    }

    fn hdr<T: AbiEvent>(ts: u64) -> EventHeader {
        T::header(ts, 1)
    }

    #[test]
    fn round_trips_switch_sample_comm_and_arrival() {
        let mut bytes = encode(&SwitchEvent {
            hdr: hdr::<SwitchEvent>(10),
            prev_state: 1,
            prev_kind: profiler_ebpf::stack_kind::FUTEX,
            prev_tid: 5,
            prev_tgid: 4,
            next_tid: 6,
            next_tgid: 0,
            prev_user_stack: 3,
            prev_kernel_stack: -1,
        });
        bytes.extend(encode(&SampleEvent {
            hdr: hdr::<SampleEvent>(11),
            tid: 5,
            tgid: 4,
            user_stack: 7,
            kernel_stack: 8,
        }));
        let mut comm = [0u8; COMM_LEN];
        comm[..6].copy_from_slice(b"worker");
        bytes.extend(encode(&CommEvent {
            hdr: hdr::<CommEvent>(12),
            tid: 5,
            tgid: 4,
            comm,
        }));
        bytes.extend(encode(&ArrivalEvent {
            hdr: hdr::<ArrivalEvent>(13),
            run_ns: 2,
            tid: 5,
            tgid: 4,
        }));
        let mut out = Vec::new();
        assert_eq!(decode_all(&bytes, Framing::Length, &mut out), Ok(0));
        assert_eq!(out.len(), 4);
        assert!(matches!(
            out[0],
            Event::Switch {
                ts: 10,
                prev_tid: 5,
                prev_state: 1,
                prev_stacks: Some(OffCpuStacks {
                    kind: StackKind::Futex,
                    user: 3,
                    kernel: -1
                }),
                ..
            }
        ));
        assert!(matches!(
            out[1],
            Event::Sample {
                ts: 11,
                tid: 5,
                user_stack: 7,
                kernel_stack: 8,
                ..
            }
        ));
        assert_eq!(
            out[2],
            Event::Comm {
                ts: 12,
                tid: 5,
                tgid: 4,
                comm: "worker".into()
            }
        );
        assert_eq!(
            out[3],
            Event::Arrival {
                ts: 13,
                cpu: 1,
                tid: 5,
                tgid: 4,
                run_ns: 2
            }
        );
    }

    /// Formats 1 to 3 framed events by kind, with a 40-byte switch event
    /// and no length in the header.
    #[test]
    fn reads_the_fixed_framing_of_formats_1_to_3() {
        let mut old = hdr::<SwitchEvent>(10);
        old.len = 0;
        let mut bytes = encode(&SwitchEventV3 {
            hdr: old,
            prev_state: 0x100,
            prev_tid: 5,
            prev_tgid: 4,
            next_tid: 6,
            next_tgid: 4,
        });
        let mut exit = hdr::<ExitEvent>(11);
        exit.len = 0;
        bytes.extend(encode(&ExitEvent {
            hdr: exit,
            tid: 5,
            tgid: 4,
            group_dead: 1,
            _pad: 0,
        }));
        let mut out = Vec::new();
        assert_eq!(decode_all(&bytes, Framing::Fixed, &mut out), Ok(0));
        assert!(matches!(
            out[0],
            Event::Switch {
                prev_state: 0x100,
                next_tid: 6,
                prev_stacks: None,
                ..
            }
        ));
        assert!(matches!(
            out[1],
            Event::Exit {
                tid: 5,
                group_dead: true,
                ..
            }
        ));
    }

    #[test]
    fn round_trips_a_cuda_call() {
        let bytes = encode(&CudaCallEvent {
            hdr: hdr::<CudaCallEvent>(20),
            enter_ns: 15,
            args: [0x1000, 0x2000, 4096, 1, 7],
            ret: -1,
            out_ptr: 0,
            tid: 5,
            tgid: 4,
            func: profiler_ebpf::cuda_fn::MEMCPY_ASYNC,
            _pad: 0,
        });
        let (event, len) = decode(&bytes, Framing::Length).unwrap();
        assert_eq!(len, 96);
        assert_eq!(
            event,
            Some(Event::CudaCall(Box::new(CudaCall {
                ts: 20,
                enter_ns: 15,
                tid: 5,
                tgid: 4,
                func: profiler_ebpf::cuda_fn::MEMCPY_ASYNC,
                args: [0x1000, 0x2000, 4096, 1, 7],
                ret: -1,
                out_ptr: 0,
            })))
        );
        assert_eq!(kind_name(kind::CUDA), "cuda");
    }

    /// A kind from a newer tprof is skipped by its length and counted; a
    /// known kind may be longer than this reader's struct (appended fields).
    #[test]
    fn skips_unknown_kinds_by_length() {
        let mut unknown = EventHeader {
            ts_ns: 1,
            kind: 99,
            cpu: 0,
            len: 24,
        };
        let mut bytes = encode(&unknown);
        bytes.extend([0u8; 8]);
        let mut longer = hdr::<ExitEvent>(2);
        longer.len += 8;
        bytes.extend(encode(&ExitEvent {
            hdr: longer,
            tid: 5,
            tgid: 5,
            group_dead: 0,
            _pad: 0,
        }));
        bytes.extend([0u8; 8]);
        let mut out = Vec::new();
        assert_eq!(decode_all(&bytes, Framing::Length, &mut out), Ok(1));
        assert!(matches!(out[..], [Event::Exit { tid: 5, .. }]));
        // Fixed framing cannot skip it.
        unknown.len = 0;
        assert_eq!(
            decode(&encode(&unknown), Framing::Fixed).unwrap_err(),
            DecodeError::UnknownKind(99)
        );
    }

    #[test]
    fn rejects_impossible_lengths_and_short_input() {
        let mut short = hdr::<SwitchEvent>(1);
        short.len = 40;
        assert!(matches!(
            decode(&encode(&short), Framing::Length).unwrap_err(),
            DecodeError::BadLength { len: 40, .. }
        ));
        let mut odd = hdr::<SwitchEvent>(1);
        odd.len = 50;
        assert!(matches!(
            decode(&encode(&odd), Framing::Length).unwrap_err(),
            DecodeError::BadLength { .. }
        ));
        let bytes = encode(&hdr::<SwitchEvent>(1));
        assert!(matches!(
            decode(&bytes, Framing::Length).unwrap_err(),
            DecodeError::Short { needed: 48, .. }
        ));
        assert!(matches!(
            decode(&[1, 2], Framing::Length).unwrap_err(),
            DecodeError::Short { .. }
        ));
    }
}

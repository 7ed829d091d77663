//! Kernel events as the rest of tprof sees them: decoded from the ABI structs
//! of `profiler_ebpf` into one enum with plain fields.

use profiler_ebpf::{
    BlockIoEvent, CUDA_ARGS, CommEvent, CudaCallEvent, EventHeader, ExecEvent, ExitEvent,
    ForkEvent, FutexEvent, SwitchEvent, WakeupEvent, event_size, kind,
};

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
            | Event::Wakeup { ts, .. }
            | Event::Fork { ts, .. }
            | Event::Exec { ts, .. }
            | Event::Exit { ts, .. }
            | Event::Comm { ts, .. }
            | Event::FutexWait { ts, .. } => ts,
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

/// Decodes the event at the start of `bytes`; returns it and its length.
pub fn decode(bytes: &[u8]) -> Result<(Event, usize), DecodeError> {
    let hdr: EventHeader = read_plain(bytes)?;
    let size = event_size(hdr.kind).ok_or(DecodeError::UnknownKind(hdr.kind))?;
    let bytes = bytes.get(..size).ok_or(DecodeError::Short {
        needed: size,
        left: bytes.len(),
    })?;
    let event = match hdr.kind {
        kind::SWITCH => {
            let e: SwitchEvent = read_plain(bytes)?;
            Event::Switch {
                ts: hdr.ts_ns,
                cpu: hdr.cpu,
                prev_tid: e.prev_tid,
                prev_tgid: e.prev_tgid,
                prev_state: e.prev_state,
                next_tid: e.next_tid,
                next_tgid: e.next_tgid,
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
        other => return Err(DecodeError::UnknownKind(other)),
    };
    Ok((event, size))
}

/// Decodes a block of back-to-back events.
pub fn decode_all(mut bytes: &[u8], out: &mut Vec<Event>) -> Result<(), DecodeError> {
    while !bytes.is_empty() {
        let (event, len) = decode(bytes)?;
        out.push(event);
        bytes = &bytes[len..];
    }
    Ok(())
}

/// Calls `f` with the timestamp of each event in a block of back-to-back
/// events, checking kinds and lengths the way [`decode_all`] does but
/// decoding nothing else.
pub fn for_each_timestamp(mut bytes: &[u8], mut f: impl FnMut(u64)) -> Result<(), DecodeError> {
    while !bytes.is_empty() {
        let hdr: EventHeader = read_plain(bytes)?;
        let size = event_size(hdr.kind).ok_or(DecodeError::UnknownKind(hdr.kind))?;
        if bytes.len() < size {
            return Err(DecodeError::Short {
                needed: size,
                left: bytes.len(),
            });
        }
        f(hdr.ts_ns);
        bytes = &bytes[size..];
    }
    Ok(())
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
    use profiler_ebpf::COMM_LEN;

    #[test]
    fn the_common_events_set_the_size() {
        // Every decoded event waiting in the reader's reorder window costs
        // this much; the large rare variants are boxed to keep it down.
        assert!(size_of::<Event>() <= 56, "{}", size_of::<Event>());
    }

    fn hdr(kind: u16, ts: u64) -> EventHeader {
        EventHeader {
            ts_ns: ts,
            kind,
            cpu: 1,
            _pad: 0,
        }
    }

    #[test]
    fn round_trips_switch_and_comm() {
        let mut bytes = encode(&SwitchEvent {
            hdr: hdr(kind::SWITCH, 10),
            prev_state: 1,
            prev_tid: 5,
            prev_tgid: 4,
            next_tid: 6,
            next_tgid: 0,
        });
        let mut comm = [0u8; COMM_LEN];
        comm[..6].copy_from_slice(b"worker");
        bytes.extend(encode(&CommEvent {
            hdr: hdr(kind::COMM, 11),
            tid: 5,
            tgid: 4,
            comm,
        }));
        let mut out = Vec::new();
        decode_all(&bytes, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert!(matches!(
            out[0],
            Event::Switch {
                ts: 10,
                prev_tid: 5,
                prev_state: 1,
                ..
            }
        ));
        assert_eq!(
            out[1],
            Event::Comm {
                ts: 11,
                tid: 5,
                tgid: 4,
                comm: "worker".into()
            }
        );
    }

    #[test]
    fn round_trips_a_cuda_call() {
        let bytes = encode(&CudaCallEvent {
            hdr: hdr(kind::CUDA, 20),
            enter_ns: 15,
            args: [0x1000, 0x2000, 4096, 1, 7],
            ret: -1,
            out_ptr: 0,
            tid: 5,
            tgid: 4,
            func: profiler_ebpf::cuda_fn::MEMCPY_ASYNC,
            _pad: 0,
        });
        let (event, len) = decode(&bytes).unwrap();
        assert_eq!(len, 96);
        assert_eq!(
            event,
            Event::CudaCall(Box::new(CudaCall {
                ts: 20,
                enter_ns: 15,
                tid: 5,
                tgid: 4,
                func: profiler_ebpf::cuda_fn::MEMCPY_ASYNC,
                args: [0x1000, 0x2000, 4096, 1, 7],
                ret: -1,
                out_ptr: 0,
            }))
        );
        assert_eq!(kind_name(kind::CUDA), "cuda");
    }

    #[test]
    fn rejects_unknown_kind_and_short_input() {
        let bytes = encode(&hdr(99, 1));
        assert_eq!(decode(&bytes).unwrap_err(), DecodeError::UnknownKind(99));
        let bytes = encode(&hdr(kind::SWITCH, 1));
        assert!(matches!(
            decode(&bytes).unwrap_err(),
            DecodeError::Short { needed: 40, .. }
        ));
        assert!(matches!(
            decode(&[1, 2]).unwrap_err(),
            DecodeError::Short { .. }
        ));
    }
}

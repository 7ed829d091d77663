//! CUDA runtime calls of the job: each call with its arguments decoded, and
//! each copy's host side classified as pinned or pageable against the host
//! ranges the process had pinned when the copy began.
//!
//! Pinned ranges come from the calls themselves: cudaHostAlloc and
//! cudaMallocHost (the pointer they returned, for the size asked), and
//! cudaHostRegister; cudaFreeHost and cudaHostUnregister end them. Only
//! successful calls count. Memory pinned before the library's probes were
//! attached is not known, and reads as pageable.
//!
//! Direction of a copy: its `cudaMemcpyKind`. For cudaMemcpyDefault (the
//! runtime infers it from unified addresses) tprof knows no device
//! addresses, so it decides by the pinned ranges only: a pinned source with
//! an unpinned destination is host-to-device, the reverse device-to-host,
//! anything else unknown (and not counted as host-to-device).

use std::collections::{BTreeMap, HashMap};

use profiler_ebpf::{CUDA_ARGS, cuda_fn};

use crate::recording::{CudaInfo, CudaLibrary};

/// `cudaMemcpyKind` values.
pub mod memcpy_kind {
    pub const HOST_TO_HOST: u64 = 0;
    pub const HOST_TO_DEVICE: u64 = 1;
    pub const DEVICE_TO_HOST: u64 = 2;
    pub const DEVICE_TO_DEVICE: u64 = 3;
    pub const DEFAULT: u64 = 4;
}

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    HostToHost,
    /// cudaMemcpyDefault between addresses tprof cannot place, or an
    /// invalid kind.
    Unknown,
}

/// Whether a copy's host side was pinned (page-locked) memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostMemory {
    Pinned,
    Pageable,
}

/// One cudaMemcpy or cudaMemcpyAsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy {
    pub dst: u64,
    pub src: u64,
    pub bytes: u64,
    /// The raw `cudaMemcpyKind`.
    pub kind: u64,
    /// None for cudaMemcpy (it has no stream; it is synchronous).
    pub stream: Option<u64>,
    pub direction: Direction,
    /// The host side of a host-to-device or device-to-host copy.
    pub host_ptr: Option<u64>,
    /// Whether `host_ptr` was pinned when the copy began.
    pub host: Option<HostMemory>,
}

/// What a call did, from its function and arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaOp {
    Copy(Copy),
    /// cudaStreamSynchronize (with its stream), cudaDeviceSynchronize or
    /// cudaEventSynchronize: the thread waits for the GPU.
    Sync {
        stream: Option<u64>,
    },
    /// cudaHostAlloc, cudaMallocHost or cudaHostRegister: `[ptr, ptr+size)`
    /// is pinned from the call's return (ptr 0 when the call failed).
    Pin {
        ptr: u64,
        size: u64,
    },
    /// cudaFreeHost or cudaHostUnregister.
    Unpin {
        ptr: u64,
    },
    Other,
}

/// One call of a traced CUDA runtime function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaCall {
    pub tid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// One of `profiler_ebpf::cuda_fn`.
    pub func: u32,
    /// The cudaError_t returned (0: success).
    pub ret: i32,
    pub op: CudaOp,
}

impl CudaCall {
    pub fn name(&self) -> &'static str {
        cuda_fn::name(self.func)
    }

    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    pub fn ok(&self) -> bool {
        self.ret == 0
    }

    pub fn is_sync(&self) -> bool {
        matches!(self.op, CudaOp::Sync { .. })
    }

    /// The copy, if this call is one that succeeded.
    pub fn copy(&self) -> Option<&Copy> {
        match &self.op {
            CudaOp::Copy(c) if self.ok() => Some(c),
            _ => None,
        }
    }
}

/// A CUDA call event as the model collects it, before classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCall {
    pub tid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub func: u32,
    pub args: [u64; CUDA_ARGS],
    pub ret: i32,
    pub out_ptr: u64,
}

/// The CUDA side of the recording.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cuda {
    /// The recording says whether CUDA libraries were looked for (v3+).
    pub looked_for: bool,
    /// Why they were not looked for, when tracing was off.
    pub status: Option<String>,
    pub libraries: Vec<CudaLibrary>,
    /// Every call in the window, by start time.
    pub calls: Vec<CudaCall>,
    /// cudaLaunchKernel calls per process over the whole recording.
    pub launches: BTreeMap<u32, u64>,
}

impl Cuda {
    /// True when some library had probes attached: CUDA calls were visible.
    pub fn visible(&self) -> bool {
        self.libraries.iter().any(|l| !l.probed.is_empty())
    }
}

/// Pinned host ranges of one process: start → end.
type Ranges = BTreeMap<u64, u64>;

fn is_pinned(ranges: &Ranges, ptr: u64) -> bool {
    ranges
        .range(..=ptr)
        .next_back()
        .is_some_and(|(_, &end)| ptr < end)
}

pub fn build(info: Option<&CudaInfo>, mut raw: Vec<RawCall>) -> Cuda {
    raw.sort_by_key(|c| (c.start_ns, c.end_ns));
    let mut pinned: HashMap<u32, Ranges> = HashMap::new();
    let mut calls = Vec::with_capacity(raw.len());
    for c in raw {
        let ranges = pinned.entry(c.tgid).or_default();
        let op = decode(&c, ranges);
        if c.ret == 0 {
            match op {
                CudaOp::Pin { ptr, size } if ptr != 0 => {
                    ranges.insert(ptr, ptr.saturating_add(size.max(1)));
                }
                CudaOp::Unpin { ptr } => {
                    ranges.remove(&ptr);
                }
                _ => {}
            }
        }
        calls.push(CudaCall {
            tid: c.tid,
            tgid: c.tgid,
            start_ns: c.start_ns,
            end_ns: c.end_ns.max(c.start_ns),
            func: c.func,
            ret: c.ret,
            op,
        });
    }
    Cuda {
        looked_for: info.is_some(),
        status: info.and_then(|i| i.status.clone()),
        libraries: info.map(|i| i.libraries.clone()).unwrap_or_default(),
        calls,
        launches: info.map(|i| i.launches.clone()).unwrap_or_default(),
    }
}

fn decode(c: &RawCall, pinned: &Ranges) -> CudaOp {
    let a = c.args;
    match c.func {
        cuda_fn::MEMCPY | cuda_fn::MEMCPY_ASYNC => {
            let stream = (c.func == cuda_fn::MEMCPY_ASYNC).then_some(a[4]);
            CudaOp::Copy(classify(a[0], a[1], a[2], a[3], stream, pinned))
        }
        cuda_fn::STREAM_SYNCHRONIZE => CudaOp::Sync { stream: Some(a[0]) },
        cuda_fn::DEVICE_SYNCHRONIZE | cuda_fn::EVENT_SYNCHRONIZE => CudaOp::Sync { stream: None },
        cuda_fn::HOST_ALLOC | cuda_fn::MALLOC_HOST => CudaOp::Pin {
            ptr: if c.ret == 0 { c.out_ptr } else { 0 },
            size: a[1],
        },
        cuda_fn::HOST_REGISTER => CudaOp::Pin {
            ptr: a[0],
            size: a[1],
        },
        cuda_fn::FREE_HOST | cuda_fn::HOST_UNREGISTER => CudaOp::Unpin { ptr: a[0] },
        _ => CudaOp::Other,
    }
}

fn classify(
    dst: u64,
    src: u64,
    bytes: u64,
    kind: u64,
    stream: Option<u64>,
    pinned: &Ranges,
) -> Copy {
    use memcpy_kind::{DEFAULT, DEVICE_TO_DEVICE, DEVICE_TO_HOST, HOST_TO_DEVICE, HOST_TO_HOST};
    let direction = match kind {
        HOST_TO_HOST => Direction::HostToHost,
        HOST_TO_DEVICE => Direction::HostToDevice,
        DEVICE_TO_HOST => Direction::DeviceToHost,
        DEVICE_TO_DEVICE => Direction::DeviceToDevice,
        DEFAULT => match (is_pinned(pinned, src), is_pinned(pinned, dst)) {
            (true, false) => Direction::HostToDevice,
            (false, true) => Direction::DeviceToHost,
            _ => Direction::Unknown,
        },
        _ => Direction::Unknown,
    };
    let host_ptr = match direction {
        Direction::HostToDevice => Some(src),
        Direction::DeviceToHost => Some(dst),
        _ => None,
    };
    Copy {
        dst,
        src,
        bytes,
        kind,
        stream,
        direction,
        host_ptr,
        host: host_ptr.map(|p| {
            if is_pinned(pinned, p) {
                HostMemory::Pinned
            } else {
                HostMemory::Pageable
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(start: u64, func: u32, args: [u64; CUDA_ARGS], ret: i32, out_ptr: u64) -> RawCall {
        RawCall {
            tid: 10,
            tgid: 10,
            start_ns: start,
            end_ns: start + 5,
            func,
            args,
            ret,
            out_ptr,
        }
    }

    fn h2d(start: u64, src: u64) -> RawCall {
        raw(
            start,
            cuda_fn::MEMCPY_ASYNC,
            [0xd000, src, 4096, memcpy_kind::HOST_TO_DEVICE, 2],
            0,
            0,
        )
    }

    fn host(call: &CudaCall) -> Option<HostMemory> {
        call.copy().and_then(|c| c.host)
    }

    #[test]
    fn copies_are_pinned_only_while_their_range_is() {
        let calls = vec![
            h2d(100, 0x1000), // before any pinning
            raw(
                200,
                cuda_fn::MALLOC_HOST,
                [0x7ff0, 8192, 0, 0, 0],
                0,
                0x1000,
            ),
            h2d(300, 0x1000 + 8191), // last pinned byte
            h2d(400, 0x1000 + 8192), // one past the range
            raw(500, cuda_fn::HOST_REGISTER, [0x9000, 100, 0, 0, 0], 0, 0),
            h2d(600, 0x9000 + 50),
            raw(700, cuda_fn::FREE_HOST, [0x1000, 0, 0, 0, 0], 0, 0),
            h2d(800, 0x1000),
            raw(900, cuda_fn::HOST_UNREGISTER, [0x9000, 0, 0, 0, 0], 0, 0),
            h2d(1000, 0x9000),
        ];
        let cuda = build(None, calls);
        let hosts: Vec<_> = cuda.calls.iter().map(host).collect();
        use HostMemory::*;
        assert_eq!(
            hosts,
            vec![
                Some(Pageable),
                None,
                Some(Pinned),
                Some(Pageable),
                None,
                Some(Pinned),
                None,
                Some(Pageable),
                None,
                Some(Pageable)
            ]
        );
    }

    #[test]
    fn failed_allocations_pin_nothing() {
        let calls = vec![
            // No device: cudaMallocHost fails (35) and leaves the pointer.
            raw(
                100,
                cuda_fn::MALLOC_HOST,
                [0x7ff0, 8192, 0, 0, 0],
                35,
                0x5a5a,
            ),
            raw(200, cuda_fn::HOST_REGISTER, [0x1000, 8192, 0, 0, 0], 35, 0),
            h2d(300, 0x1000),
            h2d(400, 0x5a5a),
        ];
        let cuda = build(None, calls);
        assert_eq!(host(&cuda.calls[2]), Some(HostMemory::Pageable));
        assert_eq!(host(&cuda.calls[3]), Some(HostMemory::Pageable));
    }

    #[test]
    fn directions_follow_the_kind_and_default_uses_pinned_ranges() {
        let copy =
            |start, dst, src, kind| raw(start, cuda_fn::MEMCPY, [dst, src, 64, kind, 0], 0, 0);
        let calls = vec![
            raw(1, cuda_fn::HOST_ALLOC, [0x7ff0, 4096, 0, 0, 0], 0, 0x1000),
            copy(10, 0x1000, 0xd000, memcpy_kind::DEVICE_TO_HOST),
            copy(20, 0xd000, 0x1000, memcpy_kind::DEFAULT),
            copy(30, 0x1000, 0xd000, memcpy_kind::DEFAULT),
            copy(40, 0xe000, 0xd000, memcpy_kind::DEFAULT),
            copy(50, 0xe000, 0xd000, memcpy_kind::DEVICE_TO_DEVICE),
        ];
        let cuda = build(None, calls);
        let dirs: Vec<_> = cuda.calls[1..]
            .iter()
            .map(|c| c.copy().unwrap().direction)
            .collect();
        use Direction::*;
        assert_eq!(
            dirs,
            vec![
                DeviceToHost,
                HostToDevice,
                DeviceToHost,
                Unknown,
                DeviceToDevice
            ]
        );
        let d2h = cuda.calls[1].copy().unwrap();
        assert_eq!(
            (d2h.host_ptr, d2h.host, d2h.stream),
            (Some(0x1000), Some(HostMemory::Pinned), None)
        );
    }
}

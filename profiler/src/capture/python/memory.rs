//! Another process's memory, read with `process_vm_readv` (root, or the
//! same user where ptrace is allowed): code objects' names while capture
//! records, and the kernel's own walk in the tests.

use profiler_ebpf::python::{FRAME_WORDS, ReadMem};

/// The memory of process `pid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessMemory {
    pub pid: u32,
}

impl ProcessMemory {
    /// Fills `buf` from `addr`; false unless every byte was read (the
    /// process is gone, or the range is not mapped).
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: one local iovec over `buf`, which outlives the call; the
        // remote one is only an address in the other process.
        let n = unsafe {
            libc::process_vm_readv(
                self.pid as i32,
                &raw const local,
                1,
                &raw const remote,
                1,
                0,
            )
        };
        n == buf.len() as isize
    }

    pub(crate) fn read_u32(self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b).then(|| u32::from_le_bytes(b))
    }

    pub(crate) fn read_vec(self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v).then_some(v)
    }
}

impl ReadMem for ProcessMemory {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    fn read_frame(&self, addr: u64, out: &mut [u64; FRAME_WORDS]) -> bool {
        let mut b = [0u8; FRAME_WORDS * 8];
        if !self.read(addr, &mut b) {
            return false;
        }
        for (word, bytes) in out.iter_mut().zip(b.chunks_exact(8)) {
            *word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        }
        true
    }
}

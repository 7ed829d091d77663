//! Block requests and futex waits, as the model keeps them.
//!
//! [`IoRequest`] is one completed block request, its [`IoOp`] read from the
//! kernel's rwbs string; [`FutexWait`] one futex wait from syscall entry to
//! exit, with the waker the model names for it (none when the waker is 0,
//! or the wait timed out or was interrupted).

/// What a block request did, from the kernel's rwbs string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    Read,
    Write,
    Discard,
    Flush,
    Other,
}

impl IoOp {
    /// rwbs: an optional leading F (preflush), then R/W/D/E/N, then flags.
    /// A flush-only request is "F" or "FN".
    pub fn from_rwbs(rwbs: &str) -> IoOp {
        let op = rwbs.trim_start_matches('F');
        match op.chars().next() {
            Some('R') => IoOp::Read,
            Some('W') => IoOp::Write,
            Some('D') => IoOp::Discard,
            None | Some('N') if rwbs.starts_with('F') => IoOp::Flush,
            _ => IoOp::Other,
        }
    }
}

/// One completed block request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRequest {
    pub dev: u32,
    /// Queue entry; the issue or completion time when tracing missed it.
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub op: IoOp,
    /// Submitting tracked thread (0: untracked or unknown).
    pub tid: u32,
    pub tgid: u32,
    pub error: i32,
}

impl IoRequest {
    /// Queue + service time, as iostat's await counts it.
    pub fn latency_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// One futex wait of a tracked thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FutexWait {
    pub tid: u32,
    pub tgid: u32,
    pub uaddr: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ret: i64,
    /// The thread whose wakeup ended the wait, if one did (a timeout or a
    /// signal has none).
    pub waker: Option<(u32, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rwbs() {
        assert_eq!(IoOp::from_rwbs("R"), IoOp::Read);
        assert_eq!(IoOp::from_rwbs("RA"), IoOp::Read);
        assert_eq!(IoOp::from_rwbs("WS"), IoOp::Write);
        assert_eq!(IoOp::from_rwbs("FWFS"), IoOp::Write);
        assert_eq!(IoOp::from_rwbs("FN"), IoOp::Flush);
        assert_eq!(IoOp::from_rwbs("F"), IoOp::Flush);
        assert_eq!(IoOp::from_rwbs("DS"), IoOp::Discard);
        assert_eq!(IoOp::from_rwbs("N"), IoOp::Other);
    }
}

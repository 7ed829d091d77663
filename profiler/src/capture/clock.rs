//! The clocks capture stamps things with: CLOCK_MONOTONIC, the kernel
//! programs' clock (bpf_ktime_get_ns), and anchor pairs that tie it to the
//! wall clock, with how sure each pairing is.

use tprof_core::recording::{ClockAnchor, ClockSync};

/// CLOCK_MONOTONIC now, in ns (the clock of bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time the calling thread has used, in nanoseconds.
pub(super) fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Tries per anchor; the tightest bracket wins (a preemption between two
/// readings widens one try, rarely all of them).
const ANCHOR_TRIES: usize = 5;

/// Both clocks: the wall clock read between two monotonic readings, the
/// anchor's monotonic time their midpoint and its uncertainty half their
/// distance, the tightest of a few tries.
pub fn anchor() -> ClockAnchor {
    let mut best: Option<(u64, ClockAnchor)> = None;
    for _ in 0..ANCHOR_TRIES {
        let before = monotonic_ns();
        let realtime_ns = clock_ns(libc::CLOCK_REALTIME);
        let after = monotonic_ns();
        let width = after.saturating_sub(before);
        if best.is_none_or(|(w, _)| width < w) {
            let anchor = ClockAnchor {
                monotonic_ns: before + width / 2,
                realtime_ns,
                uncertainty_ns: Some(width.div_ceil(2)),
            };
            best = Some((width, anchor));
        }
    }
    best.expect("at least one try").1
}

/// The kernel's NTP state: is the wall clock disciplined, and how far off
/// does its daemon think it is. None where adjtimex fails.
pub(super) fn clock_sync() -> Option<ClockSync> {
    // SAFETY: an all-zero timex with modes 0 only reads the state.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: tx is a valid, initialized timex.
    let state = unsafe { libc::adjtimex(&raw mut tx) };
    if state < 0 {
        return None;
    }
    let us = |v: libc::c_long| u64::try_from(v).unwrap_or(0) * 1_000;
    Some(ClockSync {
        synchronized: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        est_error_ns: us(tx.esterror),
        max_error_ns: us(tx.maxerror),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchor_brackets_the_wall_clock() {
        let a = anchor();
        let u = a.uncertainty_ns.expect("measured");
        // Two clock reads take well under a millisecond.
        assert!(u < 1_000_000, "{u}");
        let b = anchor();
        // Both clocks moved forward together (no step in between).
        assert!(b.monotonic_ns >= a.monotonic_ns);
        let drift = (b.offset_ns() - a.offset_ns()).unsigned_abs();
        assert!(drift <= u128::from(u + b.uncertainty_ns.unwrap() + 1_000_000));
    }
}

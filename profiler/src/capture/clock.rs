//! The clocks capture stamps things with: CLOCK_MONOTONIC, the kernel
//! programs' clock (bpf_ktime_get_ns), and anchor pairs that tie it to the
//! wall clock.

use tprof_core::recording::ClockAnchor;

/// CLOCK_MONOTONIC now, in ns (the clock of bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Both clocks, read back to back.
pub fn anchor() -> ClockAnchor {
    ClockAnchor {
        monotonic_ns: monotonic_ns(),
        realtime_ns: clock_ns(libc::CLOCK_REALTIME),
    }
}

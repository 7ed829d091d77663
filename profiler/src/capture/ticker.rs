//! A periodic timer kept by the kernel (a timerfd), for the drain's tick.
//!
//! tokio's intervals live in its timer wheel, whose levels are 64 times
//! coarser each: a 50 ms deadline that falls in the next 64 ms window sits
//! on the second level, and the runtime wakes at that window's start to
//! move it down, then again at the deadline. Four ticks in five crossed a
//! window, so the session's thread woke about 34 times a second for 20
//! ticks (its voluntary switches on the real job), each wakeup a switch
//! in and out. A timerfd in the runtime's epoll wakes it once a period:
//! 20 a second on the same job.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::{Interest, unix::AsyncFd};

pub(super) struct Ticker {
    fd: AsyncFd<OwnedFd>,
}

impl Ticker {
    /// Ticks every `period`, the first at once (as tokio's intervals do).
    /// Inside the runtime only.
    pub(super) fn every(period: Duration) -> io::Result<Ticker> {
        // SAFETY: no pointers; the result is checked.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just made, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let spec = libc::itimerspec {
            it_interval: timespec(period),
            // 0 would disarm it: the first expiry a nanosecond from now.
            it_value: timespec(Duration::from_nanos(1)),
        };
        // SAFETY: `spec` outlives the call; the old value is not asked for.
        let set = unsafe {
            libc::timerfd_settime(fd.as_raw_fd(), 0, &raw const spec, std::ptr::null_mut())
        };
        if set < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the OwnedFd keeps the descriptor open and the same for
        // as long as the AsyncFd owns it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Ticker { fd })
    }

    /// Waits for the next tick; says how many periods passed since the
    /// last one (more than one when the session was late: the ticks it
    /// missed come as one, not in a burst). Cancel-safe: a tick not waited
    /// for is still there at the next call.
    pub(super) async fn tick(&mut self) -> io::Result<u64> {
        loop {
            let mut ready = self.fd.readable().await?;
            let mut expirations = 0u64;
            // SAFETY: reads 8 bytes into a u64 that outlives the call.
            let read = unsafe {
                libc::read(
                    ready.get_inner().as_raw_fd(),
                    (&raw mut expirations).cast(),
                    size_of::<u64>(),
                )
            };
            if read == size_of::<u64>() as isize {
                return Ok(expirations);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::WouldBlock {
                return Err(err);
            }
            ready.clear_ready();
        }
    }
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks the session did not wait for come as one, counted.
    #[test]
    fn missed_ticks_come_as_one() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut ticker = Ticker::every(Duration::from_millis(5)).unwrap();
            assert!(ticker.tick().await.unwrap() >= 1);
            // Six periods or more pass unwatched.
            std::thread::sleep(Duration::from_millis(30));
            assert!(ticker.tick().await.unwrap() >= 5);
        });
    }
}

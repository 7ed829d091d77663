//! What recording needs from the machine before it starts: root, the
//! capabilities to load and attach programs, and a raised priority for the
//! capture thread. Each check fails with what is missing and how to get it.
//!
//! `raise_priority` puts capture at nice -10, after forking a launched
//! command (which keeps its own priority): a job filling every CPU otherwise
//! delays the drains until the ring buffer overflows.

use anyhow::{Result, bail};

use super::{procfs, tracefs};

/// The nice value capture runs at. The capture thread drains the ring
/// buffer every 50 ms; a job that keeps every CPU busy at the default
/// priority starved it for long enough that the 16 MiB ring buffer
/// overflowed (bench capacity runs at 16 producer pairs lost up to a million
/// events; at nice -10, none). The work is the same either way, it is only
/// done on time.
const CAPTURE_NICE: i32 = -10;

/// Raises this thread's priority (Linux nice values are per thread; threads
/// started later inherit it). Called after the launched command is forked,
/// so the job keeps its own priority. Best effort: recording still works
/// without it.
pub(super) fn raise_priority() {
    // SAFETY: setpriority has no memory preconditions.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, CAPTURE_NICE) } != 0 {
        eprintln!(
            "tprof: warning: cannot raise the capture thread's priority ({}); \
             a job that keeps every CPU busy may make it lose events",
            std::io::Error::last_os_error()
        );
    }
}

pub(super) fn check_root() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("tprof record needs root to load eBPF programs; run it with sudo");
    }
    Ok(())
}

/// Capability bits (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Root without the capabilities (in a container, or under a reduced
/// capability bounding set) gets EPERM from the kernel; say what is missing.
pub(super) fn check_capabilities() -> Result<()> {
    let Some(effective) = procfs::effective_capabilities() else {
        return Ok(()); // cannot tell: let the kernel decide
    };
    if let Some(missing) = missing_capabilities(effective, tracefs::is_mounted()) {
        bail!(
            "tprof record runs as root without {missing} (a container or a capability \
             bounding set dropped them); run it as full root: sudo on the host, or a \
             privileged container"
        );
    }
    Ok(())
}

/// What `effective` lacks of what tprof needs: CAP_BPF and CAP_PERFMON to
/// load and attach programs, or CAP_SYS_ADMIN in their place; and
/// CAP_SYS_ADMIN itself to mount tracefs when it is not mounted.
fn missing_capabilities(effective: u64, tracefs_mounted: bool) -> Option<String> {
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return None;
    }
    if !tracefs_mounted {
        return Some("CAP_SYS_ADMIN (to mount tracefs)".into());
    }
    match (has(CAP_BPF), has(CAP_PERFMON)) {
        (true, true) => None,
        (false, true) => Some("CAP_BPF (or CAP_SYS_ADMIN)".into()),
        (true, false) => Some("CAP_PERFMON (or CAP_SYS_ADMIN)".into()),
        (false, false) => Some("CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_missing_capabilities() {
        let caps = |list: &[u32]| list.iter().fold(0u64, |acc, c| acc | 1 << c);
        assert_eq!(missing_capabilities(caps(&[CAP_SYS_ADMIN]), false), None);
        assert_eq!(
            missing_capabilities(caps(&[CAP_BPF, CAP_PERFMON]), true),
            None
        );
        let only_bpf = missing_capabilities(caps(&[CAP_BPF]), true).unwrap();
        assert!(only_bpf.starts_with("CAP_PERFMON"), "{only_bpf}");
        let none = missing_capabilities(0, true).unwrap();
        assert!(none.contains("CAP_BPF and CAP_PERFMON"), "{none}");
        let unmounted = missing_capabilities(caps(&[CAP_BPF, CAP_PERFMON]), false).unwrap();
        assert!(unmounted.contains("tracefs"), "{unmounted}");
    }
}

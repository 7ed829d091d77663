//! The recording's HEADER: what machine (kernel, hostname, CPUs, block
//! devices, node and rank), which targets, the job's CPU limit, when the
//! window opened, and how stacks were taken. All read from the live
//! system when tracking begins, so the recording needs nothing from it
//! later.

use tprof_core::recording::{ClockAnchor, Header, UserStacks};

use super::{limits, node, procfs};

/// The header of a recording of `targets` (the launched command's pid, or
/// the `-p` processes), opened at `start`; `user_stacks` when stacks are
/// sampled at `sample_hz`.
pub(super) fn header(
    start: ClockAnchor,
    targets: &[u32],
    command: Option<Vec<String>>,
    sample_hz: Option<u64>,
    user_stacks: UserStacks,
) -> Header {
    let (kernel_release, hostname) = uname();
    Header {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel_release,
        hostname,
        cores: procfs::online_cpus(),
        start,
        targets: targets.to_vec(),
        command,
        block_devices: procfs::block_devices(),
        cpu_limit: targets.first().map(|&pid| limits::cpu_limit(pid)),
        sample_hz,
        node: Some(node::identity(targets)),
        user_stacks: sample_hz.map(|_| user_stacks),
    }
}

/// (kernel release, hostname).
fn uname() -> (String, String) {
    // SAFETY: uname fills a zeroed struct.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid utsname to fill.
    unsafe { libc::uname(&raw mut u) };
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.release), field(&u.nodename))
}

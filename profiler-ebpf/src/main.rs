//! tprof's kernel programs. Built only for the BPF target (profiler's build
//! script drives it with nightly and build-std); on the host this file is an
//! empty program so workspace-wide `cargo clippy` keeps working.
//!
//! Every program filters first: it looks the thread up in `TRACKED_TIDS` or
//! the process in `TRACKED_TGIDS` and returns when it is not tracked, so the
//! rest of the machine pays one hash lookup per event. Userspace seeds both
//! maps with the targets; `tprof_newtask` adds every thread and child process
//! a tracked process creates, before the new task first runs.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(target_arch = "bpf")]
mod programs;

#[cfg(not(target_arch = "bpf"))]
fn main() {}

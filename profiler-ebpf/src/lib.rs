//! The kernel/user ABI of tprof: every type that crosses the ring buffer, a
//! map or a program global, defined once and built by both sides.
//!
//! Layout rules, so the kernel (bpfel) and userspace (x86_64) agree byte for
//! byte: every type is `#[repr(C)]`, fields are ordered largest alignment
//! first, padding is an explicit `_pad` field, and each type's size is pinned
//! by a `const` assertion below it. Every ring-buffer record starts with an
//! [`EventHeader`] whose `kind` says which record follows and whose `len` how
//! long it is, so a reader can skip a kind it does not know. With the `pod`
//! feature each type derives bytemuck's `Pod`, which checks there is no
//! hidden padding.
//!
//! Changing any of these types changes the recording format too (events are
//! stored as these bytes): bump `recording::FORMAT_VERSION` in `tprof-core`.
//!
//! By concern, one module each, all re-exported here, so a path names the
//! item, not where it lives (`profiler_ebpf::SwitchEvent`,
//! `profiler_ebpf::kind::SWITCH`), as aya's crates do:
//!
//! - `events`: [`EventHeader`] and one event struct per [`kind`] (each tied
//!   to its kind by [`AbiEvent`]), the constants their fields take
//!   ([`errno`], the futex syscalls and ops, [`cuda_fn`], [`mark`],
//!   [`pipe_op`]) and [`event_size`], and the ring-buffer-only
//!   [`ExecMapEvent`] (kind 15), which tells capture a process's mappings
//!   changed and is never recorded;
//! - `stacks`: [`stack_mode`], [`stack_kind`], [`copy_ref`] and
//!   [`fingerprint`], [`SiteCheck`] (the one map value userspace writes
//!   for the hot path to read), [`LastStacks`], and the ring-buffer-only
//!   [`StackCopyEvent`] (kind 11, with its [`CopySection`]s and
//!   [`UserRegs`]), which capture unwinds and never records;
//! - `sched`: what the scheduler's tracepoints report (`prev_state` bits,
//!   [`report_prev_state`], [`CLONE_THREAD`]);
//! - `maps`: map sizes, [`ThreadState`] (`TRACKED_TIDS`' per-thread value,
//!   which the hot programs update in place), the values of kernel-only
//!   maps ([`RequestKey`], [`RequestTimes`], [`BioOwner`], [`FutexEnter`],
//!   [`CudaEnter`]) and the `LOST` slots;
//! - `globals`: [`TracepointOffsets`] (the `OFFSETS` global) and
//!   [`FileOffsets`] (`FILE_OFFSETS`);
//! - [`names`]: every program, map and global by the name userspace looks
//!   it up by (capture's `abi_names_match_the_object` test checks them
//!   against the built object both ways);
//! - [`python`]: the Python half of the ABI ([`PyStackEvent`], kind 12,
//!   folded into stacks and never recorded) and the frame-chain walk.
//!
//! The `user` feature adds `aya::Pod` for the types capture reads from maps
//! or sets as globals, beside each type.
#![no_std]

mod events;
mod globals;
mod maps;
pub mod names;
pub mod python;
mod sched;
mod stacks;

pub use events::*;
pub use globals::*;
pub use maps::*;
pub use python::{PyProcInfo, PyStackEvent, PyThreadCache};
pub use sched::*;
pub use stacks::*;

//! Loads tprof's kernel programs, attaches them, and owns their maps. The
//! only module that talks to aya (its submodules included): the rest of
//! capture sees plain values and byte slices. Dropping [`KernelPrograms`]
//! detaches every program and frees every map (nothing is pinned, so a
//! killed tprof leaves nothing behind either: the kernel frees them with
//! the last fd).
//!
//! [`attach`] says which program attaches where, [`stacks`] reads the
//! stack map, [`info`] what aya does not expose about a program,
//! [`release`] hands the kernel's part of detaching to a helper process,
//! [`ring`] reads the ring buffers in place.
//!
//! Loading, in named steps: `sched_offsets` picks the raw or classic
//! scheduler programs (raw where the kernel's BTF gives the `task_struct`
//! offsets; `TPROF_CLASSIC_SCHED=1` forces classic) and `request_offsets`
//! the block completion's (`struct request`; `TPROF_CLASSIC_BLOCK=1`),
//! `open_object` sets `OFFSETS`, `REQUEST_OFFSETS`, `SAMPLE_STACKS`,
//! `STACK_MODE`, `STACK_COPY_BYTES` and `PYTHON_FRAMES` and sizes the maps
//! ([`MapLimits`]), `load_programs`, then `load_pairs` for each set, which
//! falls back to the classic programs when the verifier refuses a raw one. A verifier that refuses the stack-copying
//! or Python-walking code gets the programs reloaded with that mode off, and
//! a note. [`in_flight`] expires what the kernel cannot. Program and map
//! names and map sizes come from the ABI crate (`profiler_ebpf::names`); the
//! `abi_names_match_the_object` test checks them against the built object
//! both ways.

mod attach;
mod in_flight;
mod info;
mod links;
mod object;
mod release;
mod ring;
mod stacks;

pub(super) use attach::CudaProbes;
pub(super) use in_flight::Expired;
pub use object::MapLimits;
pub(super) use object::{KernelPrograms, StackSettings};
pub use release::{SUBCOMMAND as RELEASE_SUBCOMMAND, release, serve_release};
pub(super) use stacks::StackSource;

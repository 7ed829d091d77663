//! The resolve stage, between the drain and the sink: one drain's events
//! in ([`DrainBatch`], the kernel's bytes), the same events out with the
//! recording's stacks ([`Resolved`]: the frames and stacks first seen in
//! this batch, named, then the events whose stack fields index them).
//! Stack copies and Python frame records are used up here; raw stack bytes
//! never leave this stage.
//!
//! Naming a large library (libtorch) takes seconds the first time it is
//! seen, which on the drain's thread overflowed the ring buffers: this
//! stage runs on a thread of its own or on the writer's
//! ([`super::pipeline`] decides), never on the drain's. It learns what it
//! needs about the live processes from [`Fact`]s the session sends in the
//! same queue as the events, so each batch is resolved against the
//! mappings and interpreters known when it was drained.
//!
//! With stacks off (`--no-stacks`) the stage passes the events through.

use std::sync::{Arc, Mutex};

use tprof_core::recording::{FrameBatch, StackBatch};

use super::clock::thread_cpu_ns;
use super::drain::DrainBatch;
use super::procfs::Mapping;
use super::programs::StackSource;
use super::python::Interpreter;
use super::stacks::{Keep, StackCounts, StackResolver};

/// What the stage must know of a live process to resolve its stacks.
pub(super) enum Fact {
    /// A process's executable mappings, for naming its frames.
    Maps(u32, Vec<Mapping>),
    /// A child's parent, whose mappings name its frames until it has its
    /// own.
    Parent { child: u32, parent: u32 },
    /// A process's CPython, whose frames are named and spliced in.
    Python(Arc<Interpreter>),
}

/// One drain's events with their stacks resolved: what a sink takes.
pub(super) struct Resolved {
    /// Frames first referred to in this batch, named (a FRAMES record).
    pub frames: Option<FrameBatch>,
    /// Stacks first referred to in this batch (a STACK_DEFS record).
    pub stacks: Option<StackBatch>,
    /// The events, in timestamp order, their stack fields now ids of the
    /// recording's stacks; stack copies and Python frame records dropped.
    pub events: DrainBatch,
}

/// What the resolve stage resolves stacks from: the kernel's stack map,
/// taken in its [`stack_mode`](profiler_ebpf::stack_mode), and whether the
/// session reads a process's maps whenever the kernel says they changed
/// (else an address in no known mapping re-reads them, at most every
/// 20 ms per process).
pub(super) struct StackSetup {
    pub source: StackSource,
    pub mode: u32,
    pub maps_told: bool,
}

/// The stage: a [`StackResolver`] when stacks are sampled.
pub(super) struct Resolve {
    stacks: Option<StackResolver>,
}

impl Resolve {
    /// A stage for the kernel's stacks (`stacks`), or a pass-through when
    /// stacks are off. Made on the thread that runs it: blazesym's caches
    /// are not `Send`.
    pub(super) fn new(stacks: Option<StackSetup>, counts: Arc<Mutex<StackCounts>>) -> Resolve {
        Resolve {
            stacks: stacks.map(|s| StackResolver::new(s.source, s.mode, s.maps_told, counts)),
        }
    }

    pub(super) fn learn(&mut self, fact: Fact) {
        let Some(stacks) = &mut self.stacks else {
            return;
        };
        match fact {
            Fact::Maps(pid, maps) => stacks.add_maps(pid, maps),
            Fact::Parent { child, parent } => stacks.set_parent(child, parent),
            Fact::Python(interp) => stacks.add_interpreter(interp),
        }
    }

    /// Rewrites the batch's stack fields in place, dropping what is used
    /// up, and takes the frames and stacks it interned.
    pub(super) fn resolve(&mut self, mut events: DrainBatch) -> Resolved {
        let Some(stacks) = &mut self.stacks else {
            return Resolved {
                frames: None,
                stacks: None,
                events,
            };
        };
        let cpu_before = thread_cpu_ns();
        events.rewrite(|event| stacks.rewrite(event) == Keep::Yes);
        let (frames, stacks) = stacks.take_new(cpu_before);
        Resolved {
            frames,
            stacks,
            events,
        }
    }
}

//! Python frames, capture's half. [`Finder`](interpreter::Finder) finds the CPython interpreter
//! a process runs (the executable itself when it is static, else the
//! libpython it maps), its version and layout ([`layout`]), and where its
//! `_PyRuntime` is; capture's tracker hands that to the kernel (`PY_PROCS`),
//! which walks each sampled thread's frame chain, and to the resolve
//! stage, which names the frames ([`code`], [`lines`]) and splices them
//! into the native stacks ([`splice`]).

pub(super) mod code;
pub(super) mod elf;
pub(super) mod frames;
mod interpreter;
pub(super) mod layout;
pub(super) mod lines;
pub(super) mod memory;
pub(super) mod splice;
pub(super) mod tracker;

pub(super) use interpreter::Interpreter;

#[cfg(test)]
mod tests;

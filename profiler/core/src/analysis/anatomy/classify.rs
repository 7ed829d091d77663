//! What a stack says a thread was doing, in the anatomy's terms: the rules
//! that read PyTorch's own Python frames (and, without them, its native
//! frames) into phases, and the label each piece of time is shown under.
//!
//! The rules match files and qualified names of PyTorch's DataLoader, autograd
//! and optimizer code, and of CPython's `multiprocessing` and GIL, which
//! every PyTorch job runs whatever its own code is. A rule set is a
//! priority list, not a position in the stack: a dataset whose
//! `__getitem__` calls an `nn.Module` (a transform) is still loading, and
//! the DataLoader's worker start wins over the `__next__` it runs inside
//! (non-persistent workers are shut down from within `__next__`).

use std::cell::Cell;

use crate::recording::{Frame, FrameKind, StackTable};

use super::Phase;

/// What the trainer thread was doing, by its stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TrainerWork {
    /// Starting or stopping DataLoader workers (fork, spawn, join).
    WorkerStart,
    /// The single-process iterator: `__getitem__` and collate on the
    /// training thread.
    Loading,
    /// A multi-process iterator's `__next__`: blocked, waiting for a batch;
    /// on a CPU, receiving one (unpickling, rebuilding tensors).
    NextBatch,
    /// The model: forward, backward, loss, optimizer.
    Compute,
    /// Waiting for the GIL (blocked) or handing it over.
    Gil,
    /// Anything else.
    Other,
}

impl TrainerWork {
    /// The phase of on-CPU time in this work.
    pub(super) fn on_cpu(self) -> Phase {
        match self {
            TrainerWork::WorkerStart => Phase::WorkerStart,
            TrainerWork::Loading => Phase::Loading,
            TrainerWork::NextBatch => Phase::Receiving,
            TrainerWork::Compute => Phase::Compute,
            TrainerWork::Gil => Phase::Gil,
            TrainerWork::Other => Phase::Other,
        }
    }
}

/// What a thread on a data worker's side was doing, by its stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WorkerWork {
    /// Pickling a batch and writing it out (the queue's feeder thread,
    /// tensors moved to shared memory).
    Sending,
    /// Waiting for an index to work on: nothing asked of it.
    Idle,
    /// Making a batch: `__getitem__`, transforms, collate.
    Making,
}

/// Each stack's work on either side, read once per stack from facts read
/// once per frame: the anatomy asks about the same stacks over and over
/// (every timed sample and switch of a window), stacks share most of their
/// frames, and the rules compare file names. Measured on `tprof top` over
/// the real job (2 workers, 10 s window): the rules, run per sample, were
/// 19% of its CPU.
pub(super) struct Classes<'a> {
    table: Option<&'a StackTable>,
    frames: Vec<Cell<Option<Facts>>>,
    trainer: Vec<Cell<Option<TrainerWork>>>,
    worker: Vec<Cell<Option<WorkerWork>>>,
}

impl<'a> Classes<'a> {
    pub(super) fn new(table: Option<&'a StackTable>) -> Classes<'a> {
        let (frames, stacks) = table.map_or((0, 0), |t| (t.frames.len(), t.stacks.len()));
        Classes {
            table,
            frames: vec![Cell::new(None); frames],
            trainer: vec![Cell::new(None); stacks],
            worker: vec![Cell::new(None); stacks],
        }
    }

    /// The trainer's work by its stack (no stack, or none known: other).
    pub(super) fn trainer(&self, stack: Option<u32>) -> TrainerWork {
        self.memo(&self.trainer, stack, trainer_from, TrainerWork::Other)
    }

    /// A worker-side thread's work by its stack (none known: making).
    pub(super) fn worker(&self, stack: Option<u32>) -> WorkerWork {
        self.memo(&self.worker, stack, worker_from, WorkerWork::Making)
    }

    fn memo<T: Copy>(
        &self,
        cache: &[Cell<Option<T>>],
        stack: Option<u32>,
        rule: fn(&mut dyn Iterator<Item = Facts>) -> T,
        none: T,
    ) -> T {
        let (Some(table), Some(stack)) = (self.table, stack) else {
            return none;
        };
        let Some(ids) = table.stacks.get(stack as usize) else {
            return none;
        };
        let cell = &cache[stack as usize];
        if let Some(known) = cell.get() {
            return known;
        }
        let work = rule(&mut ids.iter().map(|&f| self.facts(table, f)));
        cell.set(Some(work));
        work
    }

    fn facts(&self, table: &StackTable, id: u32) -> Facts {
        let Some(cell) = self.frames.get(id as usize) else {
            return Facts::default();
        };
        if let Some(known) = cell.get() {
            return known;
        }
        let facts = table
            .frames
            .get(id as usize)
            .map(Facts::of)
            .unwrap_or_default();
        cell.set(Some(facts));
        facts
    }
}

/// What one frame tells the rules, for either side.
#[derive(Debug, Clone, Copy, Default)]
struct Facts {
    /// A Python frame, and its trainer rule's work and priority.
    python: bool,
    trainer: Option<(TrainerWork, u8)>,
    /// A native frame of CPython's GIL waits, or of libtorch.
    gil: bool,
    torch_native: bool,
    /// Worker side: a queue's feeder or a pickler (sending), the worker
    /// loop, a queue's get, the DataLoader's fetch or collate (making).
    feeding: bool,
    worker_loop: bool,
    queue_get: bool,
    making: bool,
}

impl Facts {
    fn of(frame: &Frame) -> Facts {
        if let Some((file, function)) = python(frame) {
            let queues = file.ends_with(MP_QUEUES);
            return Facts {
                python: true,
                trainer: Some(trainer_rule(file, function)),
                feeding: (queues && function.ends_with("_feed"))
                    || file.ends_with("multiprocessing/reduction.py")
                    || file.ends_with("torch/multiprocessing/reductions.py"),
                worker_loop: file.ends_with(WORKER_LOOP) && function == "_worker_loop",
                queue_get: queues && function.ends_with("get"),
                making: file.ends_with("torch/utils/data/_utils/fetch.py")
                    || file.ends_with("torch/utils/data/_utils/collate.py"),
                ..Facts::default()
            };
        }
        if frame.kind != FrameKind::Native {
            return Facts::default();
        }
        Facts {
            gil: frame
                .symbol
                .as_deref()
                .is_some_and(|name| GIL_WAITS.contains(&name)),
            torch_native: is_torch_library(&frame.module),
            ..Facts::default()
        }
    }
}

const DATALOADER: &str = "torch/utils/data/dataloader.py";
const WORKER_LOOP: &str = "torch/utils/data/_utils/worker.py";
const MP_QUEUES: &str = "multiprocessing/queues.py";

/// A Python frame's file and function, when it is one.
fn python(frame: &Frame) -> Option<(&str, &str)> {
    (frame.kind == FrameKind::Python)
        .then(|| (frame.module.as_str(), frame.symbol.as_deref().unwrap_or("")))
}

/// The frames of stack `id`, outermost first.
pub(super) fn frames(table: &StackTable, id: u32) -> impl DoubleEndedIterator<Item = &Frame> {
    table
        .stacks
        .get(id as usize)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|&f| table.frames.get(f as usize))
}

/// CPython functions a thread is in while it waits to take the GIL (3.10
/// to 3.13; `take_gil` itself is static, named only where the
/// interpreter's symbol table is kept, so its exported callers count too).
const GIL_WAITS: &[&str] = &[
    "take_gil",
    "PyEval_RestoreThread",
    "PyEval_AcquireThread",
    "PyEval_AcquireLock",
    "PyGILState_Ensure",
    "eval_frame_handle_pending",
    "_Py_HandlePending",
    "_PyEval_ReInitThreads",
];

/// The trainer's work by stack `stack` of `table` (the tests' way in;
/// the anatomy asks [`Classes`]).
#[cfg(test)]
fn trainer_work(table: &StackTable, stack: u32) -> TrainerWork {
    trainer_from(&mut frames(table, stack).map(Facts::of))
}

/// The trainer's work from its stack's frames, outermost first: the
/// highest-priority Python rule, unless it waits for the GIL.
fn trainer_from(frames: &mut dyn Iterator<Item = Facts>) -> TrainerWork {
    let mut work = TrainerWork::Other;
    let mut rank = 0;
    let mut any_python = false;
    let mut torch_native = false;
    for facts in frames {
        if facts.gil {
            return TrainerWork::Gil;
        }
        any_python |= facts.python;
        torch_native |= facts.torch_native;
        if let Some((w, r)) = facts.trainer
            && r > rank
        {
            (work, rank) = (w, r);
        }
    }
    if !any_python && torch_native {
        // No Python frames (a job recorded with --no-python-frames): the
        // trainer in libtorch is the model at work.
        return TrainerWork::Compute;
    }
    work
}

/// A Python frame's work and its priority (0: says nothing).
fn trainer_rule(file: &str, function: &str) -> (TrainerWork, u8) {
    if file.ends_with(DATALOADER) {
        if function.contains("_shutdown_workers")
            || function.starts_with("_MultiProcessingDataLoaderIter.__init__")
            || function.ends_with("_get_iterator")
        {
            return (TrainerWork::WorkerStart, 5);
        }
        if function.starts_with("_SingleProcessDataLoaderIter") {
            return (TrainerWork::Loading, 4);
        }
        if function.ends_with("__next__") || function.starts_with("_MultiProcessingDataLoaderIter")
        {
            return (TrainerWork::NextBatch, 3);
        }
        return (TrainerWork::Other, 0);
    }
    let model = (file.contains("torch/nn/modules/module.py")
        && (function.ends_with("_call_impl") || function.ends_with("_wrapped_call_impl")))
        || (file.contains("torch/_tensor.py") && function.ends_with("backward"))
        || file.contains("torch/autograd/")
        || file.contains("torch/optim/");
    if model {
        return (TrainerWork::Compute, 2);
    }
    (TrainerWork::Other, 0)
}

/// A library of PyTorch's own native code.
fn is_torch_library(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    base.starts_with("libtorch") || base.starts_with("libc10")
}

/// A worker-side thread's work by stack `stack` of `table` (the tests'
/// way in).
#[cfg(test)]
fn worker_work(table: &StackTable, stack: u32) -> WorkerWork {
    worker_from(&mut frames(table, stack).map(Facts::of))
}

/// A worker-side thread's work from its stack's frames, outermost first:
/// idle in the worker loop's queue get, sending when it feeds a queue or
/// pickles without making a batch, else making one.
fn worker_from(frames: &mut dyn Iterator<Item = Facts>) -> WorkerWork {
    let mut feeding = false;
    let mut in_loop_get = false;
    let mut making = false;
    for facts in frames.filter(|f| f.python) {
        feeding |= facts.feeding;
        if facts.worker_loop {
            in_loop_get = true;
        } else if in_loop_get && facts.queue_get {
            return WorkerWork::Idle;
        } else if facts.making {
            making = true;
        }
    }
    if feeding && !making {
        WorkerWork::Sending
    } else {
        WorkerWork::Making
    }
}

/// Python frames of the framework rather than the job's own code: PyTorch,
/// and CPython's standard library.
fn is_framework_file(file: &str) -> bool {
    file.contains("/site-packages/torch/")
        || file.starts_with('<')
        || (file.contains("/lib/python3") && !file.contains("-packages/"))
}

/// The interpreter's own native code: libpython, or a python executable
/// built without it.
pub(crate) fn is_interpreter_module(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    base.starts_with("libpython")
        || (base.starts_with("python")
            && base[6..]
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == 'd' || c == 'm'))
}

fn is_libc(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    base.starts_with("libc.so") || base.starts_with("libc-") || base.starts_with("ld-linux")
}

/// The name a piece of time is shown under: the innermost Python function
/// of the job's own code (else the innermost Python function, else the
/// innermost native function), with the native library it was running in
/// below that, when there is one: `parse_record (train_job.py)`,
/// `JpegDataset.__getitem__ (train_job.py) in cv2.abi3.so`.
pub(super) fn label(table: &StackTable, stack: u32) -> String {
    label_from(table, stack, false)
}

/// The name of a piece of the framework's own work (receiving, sending a
/// batch): the innermost Python function whatever its file (`Queue._feed
/// (queues.py)`, `ForkingPickler.dumps (reduction.py)`), with the native
/// library under it, where [`label`] would name the job's code around it.
pub(super) fn framework_label(table: &StackTable, stack: u32) -> String {
    label_from(table, stack, true)
}

fn label_from(table: &StackTable, stack: u32, framework: bool) -> String {
    let all: Vec<&Frame> = frames(table, stack).filter(|f| !f.is_kernel()).collect();
    // A data worker's stack begins with its parent's frames at the fork
    // (the training loop's): its own code is below its loop.
    let from = all
        .iter()
        .rposition(|f| {
            python(f)
                .is_some_and(|(file, func)| file.ends_with(WORKER_LOOP) && func == "_worker_loop")
        })
        .unwrap_or(0);
    let user = &all[from..];
    let pythons: Vec<usize> = (0..user.len())
        .filter(|&i| user[i].kind == FrameKind::Python)
        .collect();
    let pick = pythons
        .iter()
        .rev()
        .find(|&&i| framework || !is_framework_file(&user[i].module))
        .or_else(|| {
            // Only the framework's: the innermost that is not one of
            // threading's waits (a queue feeder waiting in Condition.wait
            // is its queue's).
            pythons
                .iter()
                .rev()
                .find(|&&i| !user[i].module.ends_with("/threading.py"))
        })
        .or(pythons.last())
        .copied();
    let Some(i) = pick else {
        return native_leaf(user).unwrap_or_else(|| "[kernel]".into());
    };
    let name = crate::analysis::flame::frame_label(user[i]);
    let library = user[i + 1..]
        .iter()
        .rfind(|f| {
            f.kind == FrameKind::Native
                && !f.module.is_empty()
                && !is_interpreter_module(&f.module)
                && !is_libc(&f.module)
        })
        .map(|f| short_library(&f.module));
    match library {
        Some(lib) => format!("{name} in {lib}"),
        None => name,
    }
}

/// A library's file name without its directory or a CPython extension's
/// ABI tag: `_multiarray_umath.cpython-311-x86_64-linux-gnu.so` is
/// `_multiarray_umath.so`.
fn short_library(module: &str) -> String {
    let base = module.rsplit('/').next().unwrap_or(module);
    match base.find(".cpython-") {
        Some(i) => format!("{}.so", &base[..i]),
        None => base.to_string(),
    }
}

/// The innermost user-space native function, for stacks with no Python
/// frames.
fn native_leaf(user: &[&Frame]) -> Option<String> {
    user.iter()
        .rev()
        .find(|f| f.kind != FrameKind::Marker)
        .map(|f| crate::analysis::flame::frame_label(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(file: &str, function: &str) -> Frame {
        Frame {
            module: file.into(),
            symbol: Some(function.into()),
            kind: FrameKind::Python,
            offset: 1,
        }
    }

    fn native(module: &str, function: &str) -> Frame {
        Frame {
            module: module.into(),
            symbol: Some(function.into()),
            kind: FrameKind::Native,
            offset: 0,
        }
    }

    fn table(stacks: Vec<Vec<Frame>>) -> StackTable {
        let mut t = StackTable::default();
        for frames in stacks {
            let ids = frames
                .into_iter()
                .map(|f| {
                    t.frames.push(f);
                    t.frames.len() as u32 - 1
                })
                .collect();
            t.stacks.push(ids);
        }
        t
    }

    const TORCH: &str = "/venv/lib/python3.11/site-packages/torch/";

    #[test]
    fn trainer_rules_by_priority() {
        let dl = format!("{TORCH}utils/data/dataloader.py");
        let module = format!("{TORCH}nn/modules/module.py");
        let t = table(vec![
            // __getitem__ calling a module: still loading.
            vec![
                py("train.py", "main"),
                py(&dl, "_BaseDataLoaderIter.__next__"),
                py(&dl, "_SingleProcessDataLoaderIter._next_data"),
                py("train.py", "Ds.__getitem__"),
                py(&module, "Module._call_impl"),
            ],
            // Shutting workers down inside __next__: worker start.
            vec![
                py(&dl, "_BaseDataLoaderIter.__next__"),
                py(&dl, "_MultiProcessingDataLoaderIter._next_data"),
                py(&dl, "_MultiProcessingDataLoaderIter._shutdown_workers"),
            ],
            vec![
                py(&dl, "_BaseDataLoaderIter.__next__"),
                py(&dl, "_MultiProcessingDataLoaderIter._next_data"),
            ],
            vec![
                py("train.py", "step"),
                py(&module, "Module._wrapped_call_impl"),
            ],
            vec![
                py(&dl, "_BaseDataLoaderIter.__next__"),
                native("/lib/libpython3.11.so.1.0", "PyEval_RestoreThread"),
            ],
            vec![py("train.py", "log")],
            vec![native("/x/libtorch_cpu.so", "at::native::add")],
        ]);
        let work: Vec<TrainerWork> = (0..7).map(|i| trainer_work(&t, i)).collect();
        use TrainerWork::*;
        assert_eq!(
            work,
            [
                Loading,
                WorkerStart,
                NextBatch,
                Compute,
                Gil,
                Other,
                Compute
            ]
        );
    }

    #[test]
    fn worker_rules() {
        let w = format!("{TORCH}utils/data/_utils/worker.py");
        let q = "/py/lib/python3.11/multiprocessing/queues.py";
        let t = table(vec![
            vec![py(&w, "_worker_loop"), py(q, "Queue.get")],
            vec![
                py("/py/lib/python3.11/threading.py", "run"),
                py(q, "Queue._feed"),
            ],
            vec![
                py(&w, "_worker_loop"),
                py(&format!("{TORCH}utils/data/_utils/fetch.py"), "fetch"),
                py("train.py", "Ds.__getitem__"),
            ],
        ]);
        assert_eq!(worker_work(&t, 0), WorkerWork::Idle);
        assert_eq!(worker_work(&t, 1), WorkerWork::Sending);
        assert_eq!(worker_work(&t, 2), WorkerWork::Making);
    }

    #[test]
    fn labels_name_the_jobs_own_code_and_the_library_under_it() {
        let t = table(vec![
            vec![
                native("/usr/bin/python3.11", "main"),
                py(&format!("{TORCH}utils/data/_utils/fetch.py"), "fetch"),
                py("/job/train.py", "Ds.__getitem__"),
                native("/usr/lib/libpython3.11.so.1.0", "_PyObject_Call"),
                native("/venv/cv2/cv2.abi3.so", "cv::resize"),
                native("/lib/libc.so.6", "memcpy"),
            ],
            vec![native("/job/pipeline", "burn_cpu")],
        ]);
        assert_eq!(label(&t, 0), "Ds.__getitem__ (train.py) in cv2.abi3.so");
        assert_eq!(label(&t, 1), "burn_cpu");
        assert!(is_interpreter_module("/usr/bin/python3.11"));
        assert!(is_interpreter_module("/x/libpython3.13.so.1.0"));
        assert!(!is_interpreter_module("/x/python_helper.so"));
    }
}

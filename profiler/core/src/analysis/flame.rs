//! Folded stacks for flamegraphs: each sampled stack becomes one line
//! `process;thread;frame;…;frame[;reason] weight`, rooted in who ran it
//! (the target's name, `NAME (child)` for its descendants) so the whole
//! job (trainer and every worker, exited or not) shares one graph. Off-CPU
//! stacks end in their reason (`[futex]`, `[sleep]`, …); kernel frames end
//! in `_[k]`; Python frames read `function (file.py)`, with `--lines`
//! `function (file.py:42)`. Weights are samples (cpu) or µs (offcpu,
//! wall; a wall graph's on-CPU µs are each thread's scheduled time on a
//! CPU, shared out over its samples).
//!
//! Pure: a [`Model`] in, lines out; render/flamegraph.rs draws them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::model::{Model, Thread, ThreadKey, ThreadState};
use crate::recording::{Frame, FrameKind, StackKind, StackSample, StackTable};

/// Which time a flamegraph shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlameKind {
    /// On-CPU samples (count: samples).
    Cpu,
    /// Time off CPU, with the reason as the leaf (count: µs).
    OffCpu,
    /// On- and off-CPU time together (count: µs).
    Wall,
}

impl FlameKind {
    pub const ALL: [FlameKind; 3] = [FlameKind::Cpu, FlameKind::OffCpu, FlameKind::Wall];

    pub fn name(self) -> &'static str {
        match self {
            FlameKind::Cpu => "cpu",
            FlameKind::OffCpu => "offcpu",
            FlameKind::Wall => "wall",
        }
    }

    /// What a line's count measures.
    pub fn unit(self) -> &'static str {
        match self {
            FlameKind::Cpu => "samples",
            FlameKind::OffCpu | FlameKind::Wall => "us",
        }
    }
}

/// Which threads and time to include (empty lists include all), and how
/// to show Python frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    /// Python frames by line (`f (train.py:42)`), not by function.
    pub lines: bool,
    /// Only time inside these CLOCK_MONOTONIC spans (in order, apart): a
    /// sample inside one, the part of an off-CPU interval inside them.
    /// None: all of it. Needs the stacks' times (`StackTable::timed`).
    pub spans: Option<Vec<(u64, u64)>>,
    /// Only these threads (the roles chosen), when set.
    pub role_threads: Option<BTreeSet<ThreadKey>>,
    /// Keep the interpreter's own frames between Python frames (the
    /// interleaved view); by default they are hidden, as py-spy shows
    /// Python stacks, and the native code Python called stays.
    pub interpreter_frames: bool,
}

impl Filter {
    pub fn keeps(&self, sample: &StackSample) -> bool {
        self.keeps_thread(sample.pid, sample.tid, sample.thread_ns)
    }

    fn keeps_thread(&self, pid: u32, tid: u32, thread_ns: u64) -> bool {
        let key = ThreadKey {
            tid,
            start_ns: thread_ns,
        };
        (self.pids.is_empty() || self.pids.contains(&pid))
            && (self.tids.is_empty() || self.tids.contains(&tid))
            && self.role_threads.as_ref().is_none_or(|keys| {
                // Formats 2 and 3 kept no thread start: the tid decides.
                keys.contains(&key) || (thread_ns == 0 && keys.iter().any(|k| k.tid == tid))
            })
    }
}

/// The weights the filter keeps: the table's sums, or, for a filter with
/// spans, the sums of the timed samples and intervals inside them.
pub fn samples<'t>(table: &'t StackTable, filter: &Filter) -> Cow<'t, [StackSample]> {
    let Some(spans) = &filter.spans else {
        return table
            .samples
            .iter()
            .filter(|s| filter.keeps(s))
            .copied()
            .collect::<Vec<_>>()
            .into();
    };
    let mut sums: BTreeMap<(u32, u32, u64, StackKind, u32), u64> = BTreeMap::new();
    for t in table
        .timed
        .iter()
        .filter(|t| filter.keeps_thread(t.pid, t.tid, t.thread_ns))
    {
        let weight = if t.kind.is_on_cpu() {
            u64::from(
                spans
                    .iter()
                    .any(|&(a, b)| t.start_ns >= a && t.start_ns < b),
            )
        } else {
            spans
                .iter()
                .map(|&(a, b)| t.end_ns.min(b).saturating_sub(t.start_ns.max(a)))
                .sum()
        };
        if weight > 0 {
            let sum = sums
                .entry((t.pid, t.tid, t.thread_ns, t.kind, t.stack))
                .or_default();
            *sum = sum.saturating_add(weight);
        }
    }
    sums.into_iter()
        .map(|((pid, tid, thread_ns, kind, stack), weight)| StackSample {
            pid,
            tid,
            thread_ns,
            kind,
            stack,
            weight,
        })
        .collect::<Vec<_>>()
        .into()
}

/// The frames of a stack as the filter shows them, outermost first: in
/// the Python view, without the interpreter's own frames between its
/// first and last Python frame.
pub fn shown_frames<'t>(
    table: &'t StackTable,
    stack: &'t [u32],
    filter: &Filter,
) -> Cow<'t, [u32]> {
    if filter.interpreter_frames {
        return Cow::Borrowed(stack);
    }
    let frame = |id: u32| table.frames.get(id as usize);
    let is_python = |id: &u32| frame(*id).is_some_and(|f| f.kind == FrameKind::Python);
    let (Some(first), Some(last)) = (
        stack.iter().position(is_python),
        stack.iter().rposition(is_python),
    ) else {
        return Cow::Borrowed(stack);
    };
    let interpreter = |id: u32| {
        frame(id).is_some_and(|f| {
            f.kind == FrameKind::Native && super::anatomy::is_interpreter_module(&f.module)
        })
    };
    let kept: Vec<u32> = stack
        .iter()
        .enumerate()
        .filter(|&(i, &id)| !(i > first && i < last && interpreter(id)))
        .map(|(_, &id)| id)
        .collect();
    Cow::Owned(kept)
}

/// Folded stacks, sorted by stack, with weights in `kind.unit()`. Empty
/// when the recording has no stacks of that kind.
pub fn fold(model: &Model, kind: FlameKind, filter: &Filter) -> Vec<(String, u64)> {
    let Some(table) = &model.stacks else {
        return Vec::new();
    };
    let labels: Vec<String> = table
        .frames
        .iter()
        .map(|f| label(f, filter.lines))
        .collect();
    // Sum in the weights' own unit first (samples, ns), convert at the end,
    // so rounding happens once per line rather than once per sample.
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    // A stack's line is made once per (thread, stack), not per weight.
    let mut made: HashMap<(u32, u32, u64, StackKind, u32), String> = HashMap::new();
    let kept = samples(table, filter);
    let weigher = Weigher::new(model, table, &kept, filter, kind);
    for sample in kept.iter() {
        let Some(weight) = weigher.weight(sample) else {
            continue;
        };
        let line = made
            .entry((
                sample.pid,
                sample.tid,
                sample.thread_ns,
                sample.kind,
                sample.stack,
            ))
            .or_insert_with(|| stack_line(model, table, &labels, sample, filter))
            .clone();
        // Saturating: weights come from the file, which may be hostile.
        let sum = sums.entry(line).or_default();
        *sum = sum.saturating_add(weight);
    }
    for (t, ns) in weigher.unsampled(model, filter) {
        let parts = [
            process_role(model, t.pid, t.start_ns),
            t.comm.clone(),
            UNSAMPLED.to_string(),
        ];
        let line = join_line(&parts);
        let sum = sums.entry(line).or_default();
        *sum = sum.saturating_add(ns);
    }
    let mut lines: Vec<(String, u64)> = sums
        .into_iter()
        .map(|(line, w)| (line, to_unit(kind, w)))
        .filter(|&(_, w)| w > 0)
        .collect();
    keep_total_in_range(&mut lines);
    lines
}

/// inferno sums the lines' weights in u64 and scales differences by 150
/// in isize: scale them down when their total would overflow that (only a
/// hostile file comes near: 2^53 µs is 285 years).
fn keep_total_in_range(lines: &mut [(String, u64)]) {
    const LIMIT: u128 = 1 << 53;
    let total: u128 = lines.iter().map(|&(_, w)| u128::from(w)).sum();
    if total > LIMIT {
        for (_, w) in lines.iter_mut() {
            *w = (u128::from(*w) * LIMIT / total) as u64;
        }
    }
}

/// Converts samples to a kind's summing unit (samples for cpu, ns
/// otherwise). In a wall graph a thread's on-CPU samples share out its
/// exact on-CPU time in the selection, from its scheduler intervals, so
/// its on- and off-CPU time add up to the time it lived there; one sample
/// is 1/hz s only for a thread the model has no time for.
pub struct Weigher {
    kind: FlameKind,
    period_ns: u64,
    /// (pid, tid, thread start) → (on-CPU ns in the selection, samples).
    on_cpu: HashMap<(u32, u32, u64), (u64, u64)>,
}

impl Weigher {
    pub fn new(
        model: &Model,
        table: &StackTable,
        samples: &[StackSample],
        filter: &Filter,
        kind: FlameKind,
    ) -> Weigher {
        let mut on_cpu: HashMap<(u32, u32, u64), (u64, u64)> = HashMap::new();
        if kind == FlameKind::Wall {
            for s in samples.iter().filter(|s| s.kind.is_on_cpu()) {
                let entry = on_cpu.entry((s.pid, s.tid, s.thread_ns)).or_default();
                entry.1 = entry.1.saturating_add(s.weight);
            }
            for (&(pid, tid, thread_ns), entry) in &mut on_cpu {
                entry.0 = thread_of(model, pid, tid, thread_ns)
                    .map_or(0, |t| on_cpu_ns(t, filter.spans.as_deref()));
            }
        }
        Weigher {
            kind,
            period_ns: 1_000_000_000 / table.sample_hz.max(1),
            on_cpu,
        }
    }

    /// The sample's weight, or None when the kind leaves it out.
    pub fn weight(&self, sample: &StackSample) -> Option<u64> {
        match (self.kind, sample.kind.is_on_cpu()) {
            (FlameKind::Cpu, true) | (FlameKind::OffCpu | FlameKind::Wall, false) => {
                Some(sample.weight)
            }
            (FlameKind::Wall, true) => Some(self.wall_on_cpu(sample)),
            _ => None,
        }
    }

    /// Wall graphs: each thread the selection keeps but holds no on-CPU
    /// sample of, with its on-CPU time there, for a line of its own
    /// ([`UNSAMPLED`]), so that the graph still sums to the time the thread
    /// lived there. A trainer on a CPU 20 ms in three slow steps, sampled
    /// at 99 Hz, has no sample there about one time in eight.
    pub fn unsampled<'m>(&self, model: &'m Model, filter: &Filter) -> Vec<(&'m Thread, u64)> {
        if self.kind != FlameKind::Wall {
            return Vec::new();
        }
        let sampled = |t: &Thread| {
            // Formats 2 and 3 kept no thread start: their samples say 0.
            self.on_cpu.contains_key(&(t.pid, t.tid, t.start_ns))
                || self.on_cpu.contains_key(&(t.pid, t.tid, 0))
        };
        model
            .threads
            .iter()
            .filter(|t| filter.keeps_thread(t.pid, t.tid, t.start_ns) && !sampled(t))
            .map(|t| (t, on_cpu_ns(t, filter.spans.as_deref())))
            .filter(|&(_, ns)| ns > 0)
            .collect()
    }

    fn wall_on_cpu(&self, sample: &StackSample) -> u64 {
        let by_period = || sample.weight.saturating_mul(self.period_ns);
        match self.on_cpu.get(&(sample.pid, sample.tid, sample.thread_ns)) {
            Some(&(ns, count)) if ns > 0 && count > 0 => {
                (u128::from(sample.weight) * u128::from(ns) / u128::from(count))
                    .try_into()
                    .unwrap_or(u64::MAX)
            }
            _ => by_period(),
        }
    }
}

/// The model's thread a sample belongs to: the holder of its tid that
/// began at its start, else (formats 2 and 3, which kept no start) the
/// latest holder.
fn thread_of(model: &Model, pid: u32, tid: u32, thread_ns: u64) -> Option<&Thread> {
    let exact = model
        .threads
        .iter()
        .find(|t| t.tid == tid && t.pid == pid && t.start_ns == thread_ns);
    exact.or_else(|| {
        (thread_ns == 0)
            .then(|| latest_holder(model, pid, tid))
            .flatten()
    })
}

fn latest_holder(model: &Model, pid: u32, tid: u32) -> Option<&Thread> {
    model
        .threads
        .iter()
        .rev()
        .find(|t| t.tid == tid && t.pid == pid)
}

/// A thread's time on a CPU inside the spans (all of it with none).
fn on_cpu_ns(thread: &Thread, spans: Option<&[(u64, u64)]>) -> u64 {
    match spans {
        None => thread.time_in(ThreadState::Running),
        Some(spans) => spans
            .iter()
            .map(|&(a, b)| thread.breakdown(a, b).on_cpu)
            .sum(),
    }
}

fn to_unit(kind: FlameKind, summed: u64) -> u64 {
    match kind {
        FlameKind::Cpu => summed,
        FlameKind::OffCpu | FlameKind::Wall => summed.saturating_add(500) / 1000,
    }
}

fn stack_line(
    model: &Model,
    table: &StackTable,
    labels: &[String],
    sample: &StackSample,
    filter: &Filter,
) -> String {
    let mut parts = vec![
        process_role(model, sample.pid, sample.thread_ns),
        thread_name(model, sample),
    ];
    if let Some(stack) = table.stacks.get(sample.stack as usize) {
        parts.extend(
            shown_frames(table, stack, filter)
                .iter()
                .map(|&f| labels.get(f as usize).cloned().unwrap_or_default()),
        );
    }
    if let Some(reason) = reason_label(sample.kind) {
        parts.push(reason.to_string());
    }
    join_line(&parts)
}

/// A folded line's frames, each made safe for the format, root first.
fn join_line(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| sanitize(p))
        .collect::<Vec<_>>()
        .join(";")
}

/// The root frame of a process's stacks: the recording's target by its
/// name, every descendant as "NAME (child)", so forked workers (which keep
/// the parent's name until they exec) group apart from it. `thread_ns` is
/// the start of the sample's thread: for a reused pid it picks the holder
/// the thread belonged to (0, formats 2 and 3: the latest holder).
pub fn process_role(model: &Model, pid: u32, thread_ns: u64) -> String {
    let process = if thread_ns == 0 {
        model.processes.get(&pid)
    } else {
        model.process_of(pid, thread_ns)
    };
    let comm = process.map_or_else(|| format!("pid {pid}"), |p| p.comm.clone());
    if model.depth(pid) == 0 {
        comm
    } else {
        format!("{comm} (child)")
    }
}

/// The name of the sample's thread: the holder of its tid that began at
/// its start (formats 2 and 3, which kept no start: the latest holder).
pub fn thread_name(model: &Model, sample: &StackSample) -> String {
    thread_of(model, sample.pid, sample.tid, sample.thread_ns)
        .or_else(|| latest_holder(model, sample.pid, sample.tid))
        .map_or_else(|| format!("tid {}", sample.tid), |t| t.comm.clone())
}

/// The leaf of a wall graph's line for on-CPU time no sample caught.
pub const UNSAMPLED: &str = "[on CPU, no sample]";

/// The leaf frame naming why a thread was off CPU.
pub fn reason_label(kind: StackKind) -> Option<&'static str> {
    Some(match kind {
        StackKind::OnCpu => return None,
        StackKind::Runnable => "[runnable]",
        StackKind::DiskWait => "[disk wait (D)]",
        StackKind::Sleep => "[sleep]",
        StackKind::Other => "[other wait]",
        StackKind::BlockIo => "[block io]",
        StackKind::Futex => "[futex]",
    })
}

/// How a frame reads in a flamegraph: its symbol, else its module and
/// offset (never a bare `[unknown]` when the module is known). Kernel frames
/// end in `_[k]`, which flamegraph palettes color apart; Python frames read
/// `function (file.py)`.
pub fn frame_label(frame: &Frame) -> String {
    label(frame, false)
}

/// [`frame_label`], with Python frames split by line when `lines`:
/// `function (file.py:42)`.
pub fn label(frame: &Frame, lines: bool) -> String {
    if frame.kind == FrameKind::Python {
        let function = frame.symbol.as_deref().unwrap_or("?");
        let file = frame.module.rsplit('/').next().unwrap_or(&frame.module);
        return if lines && frame.offset > 0 {
            format!("{function} ({file}:{})", frame.offset)
        } else {
            format!("{function} ({file})")
        };
    }
    let name = match &frame.symbol {
        Some(symbol) => symbol.clone(),
        None if frame.module.is_empty() => format!("[unknown {:#x}]", frame.offset),
        None => {
            let base = frame.module.rsplit('/').next().unwrap_or(&frame.module);
            format!("{base}+{:#x}", frame.offset)
        }
    };
    if frame.is_kernel() {
        format!("{name}_[k]")
    } else {
        name
    }
}

/// `;` separates frames and a line ends at the count: keep both out of names.
fn sanitize(part: &str) -> String {
    part.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded text: one `stack count` line each.
pub fn folded_text(lines: &[(String, u64)]) -> String {
    let mut text = String::new();
    for (stack, count) in lines {
        let _ = writeln!(text, "{stack} {count}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Process, Thread};
    use crate::recording::Origin;

    fn frame(module: &str, offset: u64, symbol: Option<&str>, kernel: bool) -> Frame {
        Frame {
            module: module.into(),
            offset,
            symbol: symbol.map(Into::into),
            kind: if kernel {
                FrameKind::Kernel
            } else {
                FrameKind::Native
            },
        }
    }

    #[test]
    fn labels_frames() {
        assert_eq!(
            frame_label(&frame("/bin/app", 0x10, Some("burn_a"), false)),
            "burn_a"
        );
        assert_eq!(
            frame_label(&frame("/usr/lib/libx.so.1", 0x1a2b, None, false)),
            "libx.so.1+0x1a2b"
        );
        assert_eq!(
            frame_label(&frame("[kernel]", 1, Some("schedule"), true)),
            "schedule_[k]"
        );
        assert_eq!(
            frame_label(&frame("", 0xdead, None, false)),
            "[unknown 0xdead]"
        );
        let python = Frame {
            module: "/srv/job/train.py".into(),
            offset: 42,
            symbol: Some("Imgs.__getitem__".into()),
            kind: FrameKind::Python,
        };
        assert_eq!(frame_label(&python), "Imgs.__getitem__ (train.py)");
        assert_eq!(label(&python, true), "Imgs.__getitem__ (train.py:42)");
        let no_line = Frame {
            offset: 0,
            ..python
        };
        assert_eq!(label(&no_line, true), "Imgs.__getitem__ (train.py)");
        assert_eq!(
            frame_label(&Frame::marker("[python: truncated]")),
            "[python: truncated]"
        );
    }

    fn process(pid: u32, ppid: u32, comm: &str) -> Process {
        Process {
            pid,
            ppid,
            comm: comm.into(),
            cmdline: Vec::new(),
            origin: Origin::Forked,
            start_ns: 0,
            exit_ns: None,
            exec_ns: None,
        }
    }

    fn thread(tid: u32, pid: u32, comm: &str) -> Thread {
        Thread {
            tid,
            pid,
            comm: comm.into(),
            renamed_from: Vec::new(),
            start_ns: 0,
            end_ns: 0,
            exited: false,
            intervals: Default::default(),
            involuntary_switches: 0,
            voluntary_switches: 0,
        }
    }

    /// A trainer (pid 1) and a worker (pid 2), one frame table.
    fn model() -> Model {
        let mut model = Model {
            targets: vec![1],
            threads: vec![thread(1, 1, "python"), thread(2, 2, "pt_data_worker")],
            ..Default::default()
        };
        model.processes.insert(1, process(1, 0, "python"));
        model.processes.insert(2, process(2, 1, "python"));
        let sample = |pid, kind, stack, weight| StackSample {
            pid,
            tid: pid,
            thread_ns: 0,
            kind,
            stack,
            weight,
        };
        model.stacks = Some(StackTable {
            sample_hz: 100,
            frames: vec![
                frame("/bin/py", 0, Some("main"), false),
                frame("/bin/py", 8, Some("step;odd"), false),
                frame("[kernel]", 9, Some("schedule"), true),
            ],
            stacks: vec![vec![0, 1], vec![0, 2]],
            samples: vec![
                sample(1, StackKind::OnCpu, 0, 3),
                sample(2, StackKind::OnCpu, 0, 1),
                sample(2, StackKind::Sleep, 1, 2_000_400),
                sample(2, StackKind::Runnable, 1, 1_000_000),
            ],
            ..StackTable::default()
        });
        model
    }

    #[test]
    fn folds_cpu_samples_under_role_and_thread() {
        let lines = fold(&model(), FlameKind::Cpu, &Filter::default());
        assert_eq!(
            folded_text(&lines),
            "python (child);pt_data_worker;main;step:odd 1\npython;python;main;step:odd 3\n"
        );
    }

    #[test]
    fn folds_offcpu_time_with_reason_leaves_in_us() {
        let lines = fold(&model(), FlameKind::OffCpu, &Filter::default());
        assert_eq!(
            lines,
            vec![
                (
                    "python (child);pt_data_worker;main;schedule_[k];[runnable]".into(),
                    1000
                ),
                (
                    "python (child);pt_data_worker;main;schedule_[k];[sleep]".into(),
                    2000
                ),
            ]
        );
    }

    #[test]
    fn wall_converts_samples_to_time_and_filters() {
        let filter = Filter {
            pids: vec![1],
            ..Filter::default()
        };
        let lines = fold(&model(), FlameKind::Wall, &filter);
        // 3 samples at 100 Hz = 30 ms.
        assert_eq!(lines, vec![("python;python;main;step:odd".into(), 30_000)]);
        assert!(fold(&Model::default(), FlameKind::Cpu, &Filter::default()).is_empty());
    }

    /// A thread's on-CPU samples share out its exact on-CPU time from the
    /// scheduler, so its wall graph adds up to the time it was seen: 3
    /// samples at 100 Hz would say 30 ms; the intervals say 24 ms.
    #[test]
    fn wall_on_cpu_is_the_threads_scheduled_time() {
        use crate::model::{Interval, ThreadState};
        let mut model = model();
        let ms = 1_000_000;
        for (a, b, state) in [
            (0, 10 * ms, ThreadState::Running),
            (10 * ms, 20 * ms, ThreadState::Sleeping),
            (20 * ms, 34 * ms, ThreadState::Running),
        ] {
            model.threads[0].intervals.push(Interval::new(a, b, state));
        }
        let filter = Filter {
            pids: vec![1],
            ..Filter::default()
        };
        let lines = fold(&model, FlameKind::Wall, &filter);
        assert_eq!(lines, vec![("python;python;main;step:odd".into(), 24_000)]);
        // Inside a span, only the on-CPU time there: 5 + 4 ms.
        let filter = Filter {
            spans: Some(vec![(5 * ms, 24 * ms)]),
            ..filter
        };
        let table = model.stacks.as_mut().unwrap();
        table.timed = (0..3)
            .map(|i| crate::recording::TimedStack {
                pid: 1,
                tid: 1,
                thread_ns: 0,
                kind: StackKind::OnCpu,
                stack: 0,
                start_ns: [6, 8, 22][i] * ms,
                end_ns: [6, 8, 22][i] * ms,
            })
            .collect();
        let lines = fold(&model, FlameKind::Wall, &filter);
        assert_eq!(lines, vec![("python;python;main;step:odd".into(), 9_000)]);
    }
}

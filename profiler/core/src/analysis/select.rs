//! Which part of a recording an output shows, the way the anatomy cuts
//! time: a stretch of the run (startup, the steady state of the steps,
//! teardown), some steps by number, the slowest steps, and threads by role.
//! `tprof flamegraph`, `tprof export` and `tprof timeline` take it
//! (`--phase`, `--steps`, `--slowest`, `--role`); [`Selection::resolve`]
//! turns it into time spans and threads for a recording's model.

use std::collections::BTreeSet;

use super::Summary;
use super::roles::Role;
use crate::model::{Model, Thread, ThreadKey};

/// A stretch of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stretch {
    /// Everything recorded.
    All,
    /// Before the first step: imports, setup, worker start.
    Startup,
    /// From the first step's start to the last one's end.
    Steady,
    /// After the last step.
    Teardown,
}

impl Stretch {
    pub fn name(self) -> &'static str {
        match self {
            Stretch::All => "all",
            Stretch::Startup => "startup",
            Stretch::Steady => "steady",
            Stretch::Teardown => "teardown",
        }
    }
}

/// What to keep of a recording. The default is the steady state when steps
/// were found (and, for stacks, the recording has their times), else all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `--phase`; None: the default.
    pub stretch: Option<Stretch>,
    /// `--steps A-B`: steps A to B, 1-based and inclusive, as the report
    /// numbers them.
    pub steps: Option<(usize, usize)>,
    /// `--slowest N`: the N slowest steps.
    pub slowest: Option<usize>,
    /// `--role`: only threads of these roles (empty: all).
    pub roles: Vec<Role>,
}

/// A selection made concrete for one recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// CLOCK_MONOTONIC spans to keep, in time order and apart; None: all.
    pub spans: Option<Vec<(u64, u64)>>,
    /// Threads to keep; None: all.
    pub threads: Option<BTreeSet<ThreadKey>>,
    /// Whether the spans were asked for (not the default): stacks without
    /// times can then not be shown, which is an error rather than a
    /// silent change of what is shown.
    pub explicit: bool,
}

impl Selection {
    /// The spans and threads this selection keeps of a recording; an error
    /// names what the recording lacks for it.
    pub fn resolve(&self, model: &Model, summary: &Summary) -> Result<Resolved, String> {
        let steps = &summary.steps.steps;
        let explicit = self.stretch.is_some() || self.steps.is_some() || self.slowest.is_some();
        let need_steps = |what: &str| -> Result<(), String> {
            if steps.is_empty() {
                return Err(format!(
                    "{what} needs steps, and this recording has none ({}); use --phase all",
                    summary.steps.source.why
                ));
            }
            Ok(())
        };
        let spans = if let Some((first, last)) = self.steps {
            need_steps("--steps")?;
            if first == 0 || first > last || last > steps.len() {
                return Err(format!(
                    "--steps {first}-{last}: the recording has steps 1-{}",
                    steps.len()
                ));
            }
            Some(vec![(steps[first - 1].start_ns, steps[last - 1].end_ns)])
        } else if let Some(n) = self.slowest {
            need_steps("--slowest")?;
            let mut order: Vec<usize> = (0..steps.len()).collect();
            order.sort_by_key(|&i| (std::cmp::Reverse(steps[i].duration_ns()), i));
            let mut spans: Vec<(u64, u64)> = order
                .into_iter()
                .take(n)
                .map(|i| (steps[i].start_ns, steps[i].end_ns))
                .collect();
            spans.sort_unstable();
            Some(spans)
        } else {
            match (self.stretch, summary.steps.steady()) {
                (Some(Stretch::All), _) => None,
                (None, None) => None,
                (None, Some((a, b))) => Some(vec![(a, b)]),
                (Some(stretch), None) => {
                    need_steps(&format!("--phase {}", stretch.name()))?;
                    None
                }
                (Some(Stretch::Steady), Some((a, b))) => Some(vec![(a, b)]),
                (Some(Stretch::Startup), Some((a, _))) => Some(vec![(model.window_start_ns, a)]),
                (Some(Stretch::Teardown), Some((_, b))) => {
                    Some(vec![(b, model.window_end_ns.max(b))])
                }
            }
        };
        let threads = (!self.roles.is_empty()).then(|| {
            model
                .threads
                .iter()
                .filter(|t| self.roles.contains(&summary.roles.of_thread(t)))
                .map(Thread::key)
                .collect()
        });
        Ok(Resolved {
            spans,
            threads,
            explicit,
        })
    }
}

/// A role by the name `--role` takes.
pub fn role_named(name: &str) -> Option<Role> {
    [
        Role::Trainer,
        Role::DataWorker,
        Role::PinMemory,
        Role::Pool,
        Role::Helper,
        Role::Other,
    ]
    .into_iter()
    .find(|r| r.name() == name)
}

//! How much of the job's stacks the Python walk covered: the share of the
//! Python processes' on-CPU samples that carry Python frames, and the
//! walks capture could not complete, by marker (a report is to say what
//! it could not see).
//!
//! Pure: a [`Model`] in, counts out.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::model::Model;
use crate::recording::{FrameKind, StackTable, stacks::python_marker};

/// Python coverage of a recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PythonStats {
    /// Processes with a Python frame or a Python marker in any stack.
    pub processes: usize,
    /// Their on-CPU samples with a user stack…
    pub samples: u64,
    /// …and those of them with at least one Python frame.
    pub samples_with_python: u64,
    /// Each marker that occurs: on-CPU samples and off-CPU time whose
    /// stack carries it (a stack may carry two).
    pub markers: Vec<MarkerCount>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkerCount {
    pub marker: &'static str,
    pub samples: u64,
    pub offcpu_s: f64,
}

/// What one stack holds.
#[derive(Default, Clone, Copy)]
struct Kinds {
    user: bool,
    python: bool,
    /// Bit i: `python_marker::ALL[i]` occurs.
    markers: u8,
}

/// None when no stack has a Python frame or marker.
pub fn stats(model: &Model) -> Option<PythonStats> {
    let table = model.stacks.as_ref()?;
    let kinds: Vec<Kinds> = table.stacks.iter().map(|s| kinds(table, s)).collect();
    let of = |stack: u32| kinds.get(stack as usize).copied().unwrap_or_default();
    let pids: BTreeSet<u32> = table
        .samples
        .iter()
        .filter(|s| {
            let k = of(s.stack);
            k.python || k.markers != 0
        })
        .map(|s| s.pid)
        .collect();
    if pids.is_empty() {
        return None;
    }
    let mut out = PythonStats {
        processes: pids.len(),
        ..PythonStats::default()
    };
    let mut markers = [(0u64, 0u64); python_marker::ALL.len()];
    for s in table.samples.iter().filter(|s| pids.contains(&s.pid)) {
        let k = of(s.stack);
        if s.kind.is_on_cpu() && k.user {
            out.samples = out.samples.saturating_add(s.weight);
            if k.python {
                out.samples_with_python = out.samples_with_python.saturating_add(s.weight);
            }
        }
        for (m, counts) in markers.iter_mut().enumerate() {
            if k.markers & (1 << m) == 0 {
                continue;
            }
            let slot = if s.kind.is_on_cpu() {
                &mut counts.0
            } else {
                &mut counts.1
            };
            *slot = slot.saturating_add(s.weight);
        }
    }
    out.markers = python_marker::ALL
        .iter()
        .zip(markers)
        .filter(|(_, (samples, ns))| samples + ns > 0)
        .map(|(&marker, (samples, ns))| MarkerCount {
            marker,
            samples,
            offcpu_s: ns as f64 / 1e9,
        })
        .collect();
    Some(out)
}

fn kinds(table: &StackTable, stack: &[u32]) -> Kinds {
    let mut k = Kinds::default();
    for frame in stack.iter().filter_map(|&f| table.frames.get(f as usize)) {
        match frame.kind {
            FrameKind::Python => {
                k.python = true;
                k.user = true;
            }
            FrameKind::Native | FrameKind::Jit => k.user = true,
            FrameKind::Marker => {
                let text = frame.symbol.as_deref().unwrap_or_default();
                if let Some(m) = python_marker::ALL.iter().position(|&p| p == text) {
                    k.markers |= 1 << m;
                    k.user = true;
                }
            }
            FrameKind::Kernel => {}
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{Frame, StackKind, StackSample};

    fn frame(name: &str, kind: FrameKind) -> Frame {
        Frame {
            module: "m".into(),
            symbol: Some(name.into()),
            kind,
            ..Frame::default()
        }
    }

    fn sample(pid: u32, kind: StackKind, stack: u32, weight: u64) -> StackSample {
        StackSample {
            pid,
            tid: pid,
            thread_ns: 0,
            kind,
            stack,
            weight,
        }
    }

    #[test]
    fn counts_python_samples_and_markers() {
        let table = StackTable {
            sample_hz: 99,
            frames: vec![
                frame("main", FrameKind::Python),
                frame("deflate", FrameKind::Native),
                Frame::marker(python_marker::TRUNCATED),
                Frame::marker("[user stack lost]"),
                frame("schedule", FrameKind::Kernel),
            ],
            stacks: vec![
                vec![0, 1],    // Python over native
                vec![1],       // native only (a pool thread)
                vec![2, 0, 4], // truncated
                vec![3, 4],    // no user stack
            ],
            samples: vec![
                sample(1, StackKind::OnCpu, 0, 6),
                sample(1, StackKind::OnCpu, 1, 3),
                sample(1, StackKind::OnCpu, 2, 1),
                sample(1, StackKind::OnCpu, 3, 5),
                sample(1, StackKind::Sleep, 2, 2_000_000_000),
                // Another process with no Python at all.
                sample(2, StackKind::OnCpu, 1, 50),
            ],
            ..StackTable::default()
        };
        let model = Model {
            stacks: Some(table),
            ..Model::default()
        };
        let s = stats(&model).unwrap();
        assert_eq!(s.processes, 1);
        assert_eq!((s.samples, s.samples_with_python), (10, 7));
        assert_eq!(
            s.markers,
            [MarkerCount {
                marker: python_marker::TRUNCATED,
                samples: 1,
                offcpu_s: 2.0
            }]
        );
        assert_eq!(stats(&Model::default()), None);
    }
}

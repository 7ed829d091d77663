//! How whole the recorded user stacks are, which says how far the
//! flamegraphs can be trusted: the share of on-CPU samples whose user stack
//! reaches its thread's root, and of those cut short or lost.

use serde::Serialize;

use crate::model::Model;
use crate::recording::{FrameKind, StackKind, UserStacks, stacks::markers};

/// The on-CPU samples' user stacks, by how whole they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StackQuality {
    /// How the user stacks were taken; None for recordings older than the
    /// field (frame-pointer walks).
    pub mode: Option<UserStacks>,
    /// On-CPU samples.
    pub samples: u64,
    /// Samples whose user stack reaches its thread's root (`_start`,
    /// `clone3`). Known only for copied and unwound stacks: a frame-pointer
    /// walk stops wherever the chain does, right or wrong (None then).
    pub rooted: Option<u64>,
    /// Samples whose user stack stops short under a `[truncated]` frame.
    pub truncated: u64,
    /// Samples whose user stack was lost (`[user stack lost]`).
    pub lost: u64,
}

/// The quality of the on-CPU samples' stacks; None without stacks.
pub fn quality(model: &Model) -> Option<StackQuality> {
    let table = model.stacks.as_ref()?;
    let mut q = StackQuality {
        mode: model.user_stacks,
        samples: 0,
        rooted: None,
        truncated: 0,
        lost: 0,
    };
    let mut rooted = 0u64;
    for sample in table.samples.iter().filter(|s| s.kind == StackKind::OnCpu) {
        q.samples = q.samples.saturating_add(sample.weight);
        let outermost = table
            .stacks
            .get(sample.stack as usize)
            .and_then(|stack| stack.first())
            .and_then(|&f| table.frames.get(f as usize));
        let marker = outermost
            .filter(|f| f.kind == FrameKind::Marker)
            .and_then(|f| f.symbol.as_deref());
        match marker {
            Some(markers::TRUNCATED | markers::NO_MAPPINGS) => {
                q.truncated = q.truncated.saturating_add(sample.weight);
            }
            Some(markers::USER_STACK_LOST) => q.lost = q.lost.saturating_add(sample.weight),
            _ => rooted = rooted.saturating_add(sample.weight),
        }
    }
    if matches!(q.mode, Some(UserStacks::Dwarf { .. })) {
        q.rooted = Some(rooted);
    }
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{Frame, StackSample, StackTable};

    fn table() -> StackTable {
        let native = |name: &str| Frame {
            module: "/bin/app".into(),
            symbol: Some(name.into()),
            ..Frame::default()
        };
        let sample = |stack, kind, weight| StackSample {
            pid: 1,
            tid: 1,
            thread_ns: 0,
            kind,
            stack,
            weight,
        };
        StackTable {
            sample_hz: 99,
            frames: vec![
                native("_start"),
                native("main"),
                Frame::marker(markers::TRUNCATED),
                Frame::marker(markers::USER_STACK_LOST),
                Frame::marker(markers::NO_MAPPINGS),
                Frame::default(),
            ],
            stacks: vec![vec![0, 1], vec![2, 1], vec![3], vec![4, 5]],
            samples: vec![
                sample(0, StackKind::OnCpu, 7),
                sample(1, StackKind::OnCpu, 2),
                sample(2, StackKind::OnCpu, 1),
                // A process gone before its mappings were read: not whole.
                sample(3, StackKind::OnCpu, 3),
                // Off-CPU weights are nanoseconds: not samples.
                sample(1, StackKind::Sleep, 1_000_000),
            ],
            ..StackTable::default()
        }
    }

    #[test]
    fn counts_on_cpu_samples_by_their_outermost_frame() {
        let mut model = Model {
            stacks: Some(table()),
            user_stacks: Some(UserStacks::Dwarf { copy_bytes: 16384 }),
            ..Model::default()
        };
        let q = quality(&model).unwrap();
        assert_eq!(
            (q.samples, q.rooted, q.truncated, q.lost),
            (13, Some(7), 5, 1)
        );
        // Frame-pointer walks: whether a stack is whole cannot be told.
        model.user_stacks = Some(UserStacks::FramePointers);
        assert_eq!(quality(&model).unwrap().rooted, None);
        model.stacks = None;
        assert_eq!(quality(&model), None);
    }
}

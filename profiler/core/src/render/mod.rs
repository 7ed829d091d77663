//! Outputs for people and scripts. Each renderer takes what analysis
//! computed (the [`Summary`](crate::analysis::Summary), folded stacks, the
//! model's stacks, the timeline's tracks) and formats it; none computes.
//! Each format declares its [`exporter::Exporter`] beside its renderer;
//! [`crate::outputs::EXPORTERS`] lists them all.
//!
//! Renderers do no I/O of their own: the caller hands them the
//! `io::Write`. [`loss_note`] is the one line on what a recording lost that
//! every output with room for a line (flamegraph subtitles) prints.

pub mod cross_node;
pub mod exporter;
pub mod flamegraph;
pub mod json;
pub mod pprof;
pub mod pprof_proto;
pub mod report;
pub mod timeline;
pub mod trace;

use crate::recording::LostCounts;

/// One line on what a recording lacks (events lost, per kind; stacks lost;
/// cut short), for outputs with room for one line (flamegraph subtitles);
/// None when it is whole.
pub fn loss_note(lost: &LostCounts, cut_short: bool) -> Option<String> {
    let mut parts = Vec::new();
    if lost.total() > 0 {
        let kinds: Vec<String> = lost
            .ring_buffer_full
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let mut causes = Vec::new();
        if !kinds.is_empty() {
            causes.push(format!("ring buffer full: {}", kinds.join(", ")));
        }
        if lost.tracking_full > 0 {
            causes.push(format!("untracked new tasks: {}", lost.tracking_full));
        }
        if lost.recursion_misses > 0 {
            causes.push(format!(
                "skipped while another BPF program ran: {}",
                lost.recursion_misses
            ));
        }
        if lost.undecodable > 0 {
            causes.push(format!("undecodable: {}", lost.undecodable));
        }
        parts.push(format!(
            "{} events lost ({})",
            lost.total(),
            causes.join("; ")
        ));
    }
    if lost.stack_lost() > 0 {
        parts.push(format!("{} stacks lost", lost.stack_lost()));
    }
    if lost.in_flight_lost() > 0 {
        parts.push(format!(
            "{} lost in flight ({})",
            lost.in_flight_lost(),
            in_flight_causes(lost).join(", ")
        ));
    }
    if cut_short {
        parts.push("recording cut short".to_string());
    }
    (!parts.is_empty()).then(|| format!("warning: {}", parts.join("; ")))
}

/// What the kernel's maps of things in flight lost, each non-zero count
/// named (`LostCounts::in_flight_lost` is their sum).
pub fn in_flight_causes(lost: &LostCounts) -> Vec<String> {
    [
        (lost.requests_full, "block request times, map full"),
        (
            lost.requests_expired,
            "block requests never completed, expired",
        ),
        (lost.bio_owners_full, "bio owners, map full"),
        (lost.bio_owners_expired, "bios never in a request, expired"),
        (lost.cuda_calls_full, "CUDA calls, map full"),
        (
            lost.cuda_calls_unreturned,
            "CUDA calls whose thread exited in them",
        ),
        (lost.cuda_launches_full, "cudaLaunchKernel counts, map full"),
    ]
    .into_iter()
    .filter(|&(n, _)| n > 0)
    .map(|(n, what)| format!("{what}: {n}"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_note_names_each_loss() {
        assert_eq!(loss_note(&LostCounts::default(), false), None);
        let lost = LostCounts {
            ring_buffer_full: [("switch".to_string(), 3), ("exit".to_string(), 0)].into(),
            tracking_full: 2,
            stack_failed: 1,
            requests_full: 4,
            cuda_calls_unreturned: 1,
            ..Default::default()
        };
        assert_eq!(
            loss_note(&lost, true).unwrap(),
            "warning: 5 events lost (ring buffer full: switch 3; untracked new tasks: 2); \
             1 stacks lost; 5 lost in flight (block request times, map full: 4, CUDA calls \
             whose thread exited in them: 1); recording cut short"
        );
    }
}

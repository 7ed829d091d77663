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
                skipped_text(lost)
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
        (
            lost.requests_orphaned,
            "block requests of exited threads never completed",
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

/// "2 (block completions 1, futex waits 1)": the program runs the kernel
/// skipped, by the events they were. Recordings before 2026-12-06 have the
/// total alone.
pub(crate) fn skipped_text(lost: &LostCounts) -> String {
    let mut by_event = std::collections::BTreeMap::<&str, u64>::new();
    for (name, n) in &lost.recursion_misses_by_program {
        let e = by_event.entry(program_events(name)).or_default();
        *e = e.saturating_add(*n);
    }
    if by_event.is_empty() {
        return lost.recursion_misses.to_string();
    }
    let parts: Vec<String> = by_event.iter().map(|(e, n)| format!("{e} {n}")).collect();
    format!("{} ({})", lost.recursion_misses, parts.join(", "))
}

/// What a run of the program named `name` records, for a reader.
fn program_events(name: &str) -> &str {
    use profiler_ebpf::names::program as p;
    match name {
        p::SWITCH | p::SWITCH_RAW => "context switches",
        p::WAKING | p::WAKING_RAW | p::WAKEUP_NEW | p::WAKEUP_NEW_RAW => "wakeups",
        p::NEWTASK => "new tasks",
        p::EXEC => "execs",
        p::EXIT => "exits",
        p::RENAME => "thread renames",
        p::BIO_QUEUE | p::BIO_SPLIT | p::BIO_BACKMERGE | p::BIO_FRONTMERGE => {
            "block request owners"
        }
        p::RQ_INSERT | p::RQ_ISSUE => "block request starts",
        p::RQ_COMPLETE | p::RQ_COMPLETE_RAW => "block completions",
        p::FUTEX_ENTER | p::FUTEX_WAIT_ENTER | p::FUTEX_WAITV_ENTER | p::FUTEX_EXIT => {
            "futex waits"
        }
        p::SAMPLE => "stack samples",
        p::CUDA_ENTER | p::CUDA_RETURN | p::CUDA_LAUNCH => "CUDA calls",
        p::TORCH_MARK => "PyTorch marks",
        p::PIPE_READ => "pipe reads",
        p::MMAP_EXIT | p::MPROTECT_EXIT => "mapping changes",
        other => other,
    }
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
            requests_orphaned: 2,
            cuda_calls_unreturned: 1,
            ..Default::default()
        };
        assert_eq!(
            loss_note(&lost, true).unwrap(),
            "warning: 5 events lost (ring buffer full: switch 3; untracked new tasks: 2); \
             1 stacks lost; 7 lost in flight (block request times, map full: 4, block \
             requests of exited threads never completed: 2, CUDA calls whose thread exited \
             in them: 1); recording cut short"
        );
    }

    #[test]
    fn skipped_runs_are_named_by_their_events() {
        use profiler_ebpf::names::program;
        let mut lost = LostCounts {
            recursion_misses: 4,
            ..Default::default()
        };
        assert_eq!(skipped_text(&lost), "4");
        lost.recursion_misses_by_program = [
            (program::RQ_COMPLETE.to_string(), 1),
            (program::WAKING.to_string(), 1),
            (program::WAKING_RAW.to_string(), 1),
            ("tprof_new_program".to_string(), 1),
        ]
        .into();
        assert_eq!(
            skipped_text(&lost),
            "4 (block completions 1, tprof_new_program 1, wakeups 2)"
        );
        // Every program has its events' name.
        for name in program::ALL {
            assert_ne!(program_events(name), *name);
        }
        assert_eq!(
            loss_note(&lost, false).unwrap(),
            "warning: 4 events lost (skipped while another BPF program ran: 4 (block \
             completions 1, tprof_new_program 1, wakeups 2))"
        );
    }
}

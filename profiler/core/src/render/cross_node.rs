//! `tprof merge`'s cross-node report: the terminal text (the straggler
//! first, then the ranks, then the clocks) and the `--json` document, whose
//! structs below are its contract (docs/json.md, "tprof merge --json"),
//! kept apart from the analysis types like `render/json.rs`'s.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analysis::cross_node::{self as cn, CrossNode};

/// Version of the merge JSON contract.
pub const MERGE_JSON_VERSION: u32 = 1;

#[derive(Serialize)]
struct Document<'a> {
    json_version: u32,
    ranks: Vec<Rank<'a>>,
    straggler: Option<Straggler<'a>>,
    no_straggler: Option<&'a str>,
    clocks: Clocks<'a>,
}

#[derive(Serialize)]
struct Rank<'a> {
    file: &'a str,
    host: &'a str,
    rank: Option<u32>,
    local_rank: Option<u32>,
    world_size: Option<u32>,
    node: &'a str,
    start_realtime_ns: u64,
    duration_s: f64,
    steps: usize,
    step_p50_s: f64,
    data_wait_frac: f64,
    top_finding: Option<Finding<'a>>,
}

#[derive(Serialize)]
struct Finding<'a> {
    id: &'a str,
    title: &'a str,
}

#[derive(Serialize)]
struct Straggler<'a> {
    file: &'a str,
    rank: Option<u32>,
    node: &'a str,
    basis: &'a str,
    step_p50_s: f64,
    ratio_to_others: Option<f64>,
    data_wait_frac: f64,
    cause: &'a str,
    shares: Shares,
    workers_mostly: Option<WorkersMostly<'a>>,
    others: Vec<Meanwhile<'a>>,
    others_blocked_s: f64,
}

#[derive(Serialize)]
struct Shares {
    data_wait: f64,
    cpu: f64,
    io: f64,
    other: f64,
}

#[derive(Serialize)]
struct WorkersMostly<'a> {
    state: &'a str,
    share: f64,
}

#[derive(Serialize)]
struct Meanwhile<'a> {
    file: &'a str,
    rank: Option<u32>,
    node: &'a str,
    overlap_s: f64,
    blocked_s: f64,
}

#[derive(Serialize)]
struct Clocks<'a> {
    aligned_on: &'a str,
    offsets: Vec<Offset<'a>>,
    unsynchronized: &'a [String],
    unmeasured: &'a [String],
    max_est_error_ns: Option<u64>,
}

#[derive(Serialize)]
struct Offset<'a> {
    file: &'a str,
    against: &'a str,
    offset_ns: i64,
    uncertainty_ns: u64,
    why: &'a str,
}

/// The `--json` document.
pub fn json(report: &CrossNode) -> String {
    let doc = Document {
        json_version: MERGE_JSON_VERSION,
        ranks: report.ranks.iter().map(rank).collect(),
        straggler: report.straggler.as_ref().map(straggler),
        no_straggler: report.no_straggler.as_deref(),
        clocks: Clocks {
            aligned_on: report.clocks.aligned_on,
            offsets: report
                .clocks
                .offsets
                .iter()
                .map(|o| Offset {
                    file: &o.file,
                    against: &o.against,
                    offset_ns: o.offset_ns,
                    uncertainty_ns: o.uncertainty_ns,
                    why: &o.why,
                })
                .collect(),
            unsynchronized: &report.clocks.unsynchronized,
            unmeasured: &report.clocks.unmeasured,
            max_est_error_ns: report.clocks.max_est_error_ns,
        },
    };
    let mut text = serde_json::to_string_pretty(&doc).expect("serializable");
    text.push('\n');
    text
}

fn rank(r: &cn::RankRow) -> Rank<'_> {
    Rank {
        file: &r.file,
        host: &r.host,
        rank: r.rank,
        local_rank: r.local_rank,
        world_size: r.world_size,
        node: &r.node,
        start_realtime_ns: r.start_realtime_ns,
        duration_s: r.duration_s,
        steps: r.steps,
        step_p50_s: r.step_p50_s,
        data_wait_frac: r.data_wait_frac,
        top_finding: r.top_finding.as_ref().map(|f| Finding {
            id: f.id,
            title: &f.title,
        }),
    }
}

fn straggler(s: &cn::Straggler) -> Straggler<'_> {
    Straggler {
        file: &s.file,
        rank: s.rank,
        node: &s.node,
        basis: s.basis,
        step_p50_s: s.step_p50_s,
        ratio_to_others: s.ratio_to_others,
        data_wait_frac: s.data_wait_frac,
        cause: s.cause,
        shares: Shares {
            data_wait: s.shares.data_wait,
            cpu: s.shares.cpu,
            io: s.shares.io,
            other: s.shares.other,
        },
        workers_mostly: s
            .workers_mostly
            .map(|(state, share)| WorkersMostly { state, share }),
        others: s
            .others
            .iter()
            .map(|m| Meanwhile {
                file: &m.file,
                rank: m.rank,
                node: &m.node,
                overlap_s: m.overlap_s,
                blocked_s: m.blocked_s,
            })
            .collect(),
        others_blocked_s: s.others_blocked_s,
    }
}

/// "rank 3 (host:3)", or the node's name when the job named no rank.
fn who(rank: Option<u32>, node: &str) -> String {
    match rank {
        Some(r) => format!("rank {r} ({node})"),
        None => node.to_string(),
    }
}

fn cause_text(cause: &str) -> &'static str {
    match cause {
        "data_wait" => "waiting for its own input pipeline",
        "cpu" => "on a CPU or waiting for one",
        "io" => "its own block IO",
        _ => "other waits (locks, GPU syncs, collectives)",
    }
}

fn state_text(state: &str) -> &'static str {
    match state {
        "on_cpu" => "on a CPU",
        "runnable" => "waiting for a CPU",
        "io" => "in block IO",
        "futex" => "in futex waits",
        _ => "asleep",
    }
}

fn pct(frac: f64) -> String {
    format!("{:.0}%", frac * 100.0)
}

/// The terminal report.
pub fn text(report: &CrossNode) -> String {
    let mut out = String::new();
    let n = report.ranks.len();
    let _ = writeln!(
        out,
        "tprof merge: {n} recordings, aligned on their wall clocks"
    );
    let _ = writeln!(out);
    match (&report.straggler, &report.no_straggler) {
        (Some(s), _) => straggler_text(&mut out, s),
        (None, Some(why)) => {
            let _ = writeln!(out, "No straggler: {why}.");
        }
        (None, None) => {}
    }
    let _ = writeln!(out);
    let width = report
        .ranks
        .iter()
        .map(|r| r.node.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let _ = writeln!(
        out,
        "{:<width$} {:>6} {:>9} {:>10}  {:<28} file",
        "node", "steps", "p50 ms", "data wait", "top finding"
    );
    for r in &report.ranks {
        let finding = r.top_finding.as_ref().map_or("-", |f| f.id);
        let _ = writeln!(
            out,
            "{:<width$} {:>6} {:>9.1} {:>10}  {:<28} {}",
            r.node,
            r.steps,
            r.step_p50_s * 1e3,
            pct(r.data_wait_frac),
            finding,
            r.file
        );
    }
    let _ = writeln!(out);
    clocks_text(&mut out, &report.clocks, n);
    out
}

fn straggler_text(out: &mut String, s: &cn::Straggler) {
    match s.ratio_to_others {
        Some(ratio) => {
            let _ = writeln!(
                out,
                "Straggler: {} — {}: median step {:.1} ms, {ratio:.2}x the other ranks' median.",
                who(s.rank, &s.node),
                s.file,
                s.step_p50_s * 1e3,
            );
        }
        None => {
            let _ = writeln!(
                out,
                "Straggler: {} — {}: its trainer waited for data {} of its time, at least \
                 10 points more than any other rank's (too few ranks had steps to compare \
                 step times).",
                who(s.rank, &s.node),
                s.file,
                pct(s.data_wait_frac),
            );
        }
    }
    let _ = writeln!(
        out,
        "  Why: its steps went mostly to {} ({}). Data wait {}, CPU {}, IO {}, other waits {}.",
        cause_text(s.cause),
        pct(match s.cause {
            "data_wait" => s.shares.data_wait,
            "cpu" => s.shares.cpu,
            "io" => s.shares.io,
            _ => s.shares.other,
        }),
        pct(s.shares.data_wait),
        pct(s.shares.cpu),
        pct(s.shares.io),
        pct(s.shares.other)
    );
    if let Some((state, share)) = s.workers_mostly {
        let _ = writeln!(
            out,
            "  Its DataLoader workers were {} {} of the time it waited.",
            state_text(state),
            pct(share)
        );
    }
    if s.others.iter().all(|m| m.overlap_s == 0.0) {
        let _ = writeln!(
            out,
            "  The other recordings were not made while it ran its steps: how long their \
             trainers waited for it is not known."
        );
        return;
    }
    let _ = writeln!(
        out,
        "  Meanwhile the other ranks' trainers sat blocked {:.2} s in all:",
        s.others_blocked_s
    );
    for m in &s.others {
        let node = m.node.as_str();
        if m.overlap_s > 0.0 {
            let _ = writeln!(
                out,
                "    {}: {:.2} s of the {:.2} s its recording shares with the straggler's steps",
                who(m.rank, node),
                m.blocked_s,
                m.overlap_s
            );
        } else {
            let _ = writeln!(
                out,
                "    {}: not recorded while the straggler ran its steps",
                who(m.rank, node)
            );
        }
    }
}

/// `n`: how many recordings were merged.
fn clocks_text(out: &mut String, clocks: &cn::Clocks, n: usize) {
    let _ = writeln!(
        out,
        "Clocks: each recording placed by its own wall-clock anchor; offsets below are \
         reported, not applied."
    );
    if let Some(err) = clocks.max_est_error_ns {
        let _ = writeln!(
            out,
            "  Machines' NTP error estimates: up to {:.3} ms.",
            err as f64 / 1e6
        );
    }
    for f in &clocks.unsynchronized {
        let _ = writeln!(
            out,
            "  {f}: its machine's wall clock is not synchronized: its place against the \
             others may be off by any amount."
        );
    }
    for f in &clocks.unmeasured {
        let _ = writeln!(
            out,
            "  {f}: its anchors carry no uncertainty (an older tprof made it): not checked."
        );
    }
    if clocks.offsets.is_empty() && clocks.unmeasured.len() < n {
        let _ = writeln!(out, "  No anchors disagree beyond their uncertainty.");
    }
    for o in &clocks.offsets {
        let secs = o.offset_ns as f64 / 1e9;
        let target = if o.file == o.against {
            format!("{}: wall clock stepped {secs:+.6} s", o.file)
        } else {
            format!("{} sits {secs:+.6} s from {}", o.file, o.against)
        };
        let _ = writeln!(
            out,
            "  {target} (anchors agree to {:.3} ms): {}.",
            o.uncertainty_ns as f64 / 1e6,
            o.why
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cross_node::{
        ClockOffset, Clocks, Meanwhile, RankRow, StepShares, Straggler as S,
    };

    fn row(file: &str, rank: u32, p50: f64) -> RankRow {
        RankRow {
            file: file.into(),
            host: "h".into(),
            rank: Some(rank),
            local_rank: None,
            world_size: Some(2),
            node: format!("h:{rank}"),
            start_realtime_ns: 1,
            duration_s: 1.0,
            steps: 10,
            step_p50_s: p50,
            data_wait_frac: 0.5,
            top_finding: None,
        }
    }

    fn report() -> CrossNode {
        CrossNode {
            ranks: vec![row("a.tprof", 0, 0.02), row("b.tprof", 1, 0.05)],
            straggler: Some(S {
                file: "b.tprof".into(),
                rank: Some(1),
                node: "h:1".into(),
                basis: "step_time",
                step_p50_s: 0.05,
                ratio_to_others: Some(2.5),
                data_wait_frac: 0.5,
                cause: "data_wait",
                shares: StepShares {
                    data_wait: 0.7,
                    cpu: 0.3,
                    io: 0.0,
                    other: 0.0,
                },
                workers_mostly: Some(("on_cpu", 0.9)),
                others: vec![Meanwhile {
                    file: "a.tprof".into(),
                    rank: Some(0),
                    node: "h:0".into(),
                    overlap_s: 0.5,
                    blocked_s: 0.25,
                }],
                others_blocked_s: 0.25,
            }),
            no_straggler: None,
            clocks: Clocks {
                aligned_on: "realtime",
                offsets: vec![ClockOffset {
                    file: "b.tprof".into(),
                    against: "a.tprof".into(),
                    offset_ns: 5_000_000_000,
                    uncertainty_ns: 2_000,
                    why: "same boot".into(),
                }],
                unsynchronized: vec![],
                unmeasured: vec![],
                max_est_error_ns: None,
            },
        }
    }

    #[test]
    fn text_names_the_straggler_first_and_the_offset() {
        let text = text(&report());
        let first = text.lines().nth(2).unwrap();
        assert_eq!(
            first,
            "Straggler: rank 1 (h:1) — b.tprof: median step 50.0 ms, 2.50x the other ranks' median."
        );
        assert!(
            text.contains("Data wait 70%, CPU 30%, IO 0%, other waits 0%."),
            "{text}"
        );
        assert!(text.contains("on a CPU 90%"), "{text}");
        assert!(
            text.contains("rank 0 (h:0): 0.25 s of the 0.50 s"),
            "{text}"
        );
        assert!(
            text.contains("b.tprof sits +5.000000 s from a.tprof"),
            "{text}"
        );
    }

    #[test]
    fn json_has_the_contract_fields() {
        let v: serde_json::Value = serde_json::from_str(&json(&report())).unwrap();
        assert_eq!(v["json_version"], 1);
        assert_eq!(v["straggler"]["rank"], 1);
        assert_eq!(v["straggler"]["cause"], "data_wait");
        assert_eq!(v["straggler"]["workers_mostly"]["state"], "on_cpu");
        assert_eq!(v["straggler"]["others"][0]["blocked_s"], 0.25);
        assert_eq!(v["ranks"][1]["node"], "h:1");
        assert_eq!(v["clocks"]["offsets"][0]["offset_ns"], 5_000_000_000i64);
        assert!(v["no_straggler"].is_null());
    }
}

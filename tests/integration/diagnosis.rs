//! The verdict on scenario pipelines (tests/workloads/pipeline.c), each a
//! real trainer process and worker processes reproducing one cause: the
//! cause's finding must come first, with its evidence, and a pipeline that
//! keeps up must get no input-pipeline finding at all.

use tprof_tests::{Report, Traced, data_file, require_root, trace_workload, trace_workload_env};

/// Findings about the input pipeline; the others (trainer, GPU) may appear
/// on a healthy pipeline.
const INPUT_FINDINGS: &[&str] = &[
    "too_many_workers",
    "thread_oversubscription",
    "disk_bound",
    "decode_bound",
];

/// Six workers each needing 20 ms of CPU per batch, on two cores.
#[test]
fn too_many_workers() {
    require_root();
    let traced = trace_workload("pipeline", &["6", "120", "20", "1", "cpu"]);
    let top = top_finding(&traced, "too_many_workers");
    assert!(top.title.contains("6 worker processes"), "{top:#?}");
    assert!(top.fix.contains("num_workers"), "{top:#?}");
}

/// Three workers, each splitting its batches over four more pool threads
/// that meet at barriers: fifteen threads on two cores.
#[test]
fn thread_pool_oversubscription() {
    require_root();
    let traced = trace_workload_env(
        "pipeline",
        &[],
        &["3", "60", "40", "1", "cpu"],
        &[("PIPELINE_POOL", std::ffi::OsStr::new("4"))],
    );
    let top = top_finding(&traced, "thread_oversubscription");
    assert!(top.fix.contains("OMP_NUM_THREADS=1"), "{top:#?}");
    assert!(top.fix.contains("torch.set_num_threads alone"), "{top:#?}");
}

/// One worker reading 4 MiB with O_DIRECT per batch for a trainer that
/// needs 1 ms per batch.
#[test]
fn disk_bound() {
    require_root();
    let file = data_file(96);
    let args = ["1", "60", "4096", "1", "io", file.path_str()];
    let traced = trace_workload("pipeline", &args);
    let top = top_finding(&traced, "disk_bound");
    assert!(
        top.evidence.iter().any(|e| e.contains("block IO")),
        "{top:#?}"
    );
}

/// One worker decoding 20 ms per batch while the second core idles.
#[test]
fn decode_bound_with_idle_cores() {
    require_root();
    let traced = trace_workload("pipeline", &["1", "100", "20", "1", "cpu"]);
    let top = top_finding(&traced, "decode_bound");
    assert!(top.fix.contains("num_workers to 2"), "{top:#?}");
}

/// Workers that keep up with a trainer computing 20 ms per batch: the
/// trainer is the bottleneck, and no input-pipeline finding appears.
#[test]
fn healthy_pipeline_gets_no_input_finding() {
    require_root();
    let traced = trace_workload("pipeline", &["2", "60", "4", "20", "cpu"]);
    let report = &traced.report;
    for id in report.finding_ids() {
        assert!(
            !INPUT_FINDINGS.contains(&id),
            "false positive {id}: {:#?}",
            report.findings
        );
    }
    assert_eq!(
        report.finding_ids().first().copied(),
        Some("trainer_cpu_bound"),
        "{:#?}",
        report.findings
    );
}

fn top_finding<'a>(traced: &'a Traced, id: &str) -> &'a tprof_tests::Finding {
    let report: &Report = &traced.report;
    let top = report
        .findings
        .first()
        .unwrap_or_else(|| panic!("no finding; expected {id}: {:#?}", report.steps));
    assert_eq!(top.id, id, "ranked findings: {:#?}", report.findings);
    assert!(
        top.explains_frac > 0.0 && !top.evidence.is_empty(),
        "{top:#?}"
    );
    top
}

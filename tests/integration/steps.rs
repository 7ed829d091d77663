//! Steps and stall attribution on a synthetic data-loading pipeline
//! (tests/workloads/pipeline.c): a trainer process and forked workers
//! passing batches through a pipe, with the batch count and the trainer's
//! time blocked waiting for them as ground truth.

use serde_json::Value;
use tprof_tests::{Report, close_to, data_file, require_root, trace_workload};

/// Two workers whose batches arrive spread out, and a trainer that asks
/// for the next batch at once: every batch is waited for, so the detected
/// steps match the batch count within 2%, and the data-wait share matches
/// the trainer's own measure within 5 percentage points.
#[test]
fn steps_and_data_wait_match_the_pipeline() {
    require_root();
    let traced = trace_workload("pipeline", &["2", "100", "40", "0", "sleep"]);
    let truth = trainer_truth(&traced.truth);
    let report = &traced.report;
    let steps = &report.steps;
    assert_eq!(steps.trainer_tid, truth["tid"].as_i64(), "{steps:#?}");
    let batches = truth["batches"].as_f64().unwrap();
    assert!(
        close_to(steps.count as f64, batches, 0.02, 0.0),
        "{} steps for {batches} batches: {steps:#?}",
        steps.count
    );
    let true_frac = truth["data_wait_ns"].as_f64().unwrap() / truth["life_ns"].as_f64().unwrap();
    assert!(
        (steps.data_wait_frac - true_frac).abs() <= 0.05,
        "data wait {:.3} vs {true_frac:.3}: {steps:#?}",
        steps.data_wait_frac
    );
    assert!(steps.p50_s > 0.0 && steps.p50_s <= steps.p90_s && steps.p90_s <= steps.p99_s);
    assert_roles(report, truth["tid"].as_i64().unwrap());
}

/// Six CPU-bound workers on two cores: while the trainer waits, the worker
/// it waits for mostly waits for a CPU itself.
#[test]
fn oversubscribed_workers_are_blamed_on_runnable() {
    require_root();
    let traced = trace_workload("pipeline", &["6", "120", "20", "1", "cpu"]);
    let steps = &traced.report.steps;
    assert!(steps.count > 0, "{steps:#?}");
    assert_eq!(steps.blame.leading(), "runnable", "{steps:#?}");
}

/// Workers reading with O_DIRECT one batch at a time: block IO leads.
#[test]
fn disk_reading_workers_are_blamed_on_io() {
    require_root();
    let file = data_file(64);
    let args = ["2", "100", "1024", "1", "io", file.path_str()];
    let traced = trace_workload("pipeline", &args);
    let steps = &traced.report.steps;
    assert!(steps.count > 0, "{steps:#?}");
    assert_eq!(steps.blame.leading(), "io", "{steps:#?}");
}

/// A trainer slower than its workers never waits: no data wait to speak
/// of, and the trainer computes (on a CPU, or waiting for one) most of its
/// life.
#[test]
fn slow_consumer_does_not_wait_for_data() {
    require_root();
    let traced = trace_workload("pipeline", &["2", "60", "2", "20", "cpu"]);
    let truth = trainer_truth(&traced.truth);
    let tid = truth["tid"].as_i64().unwrap();
    let report = &traced.report;
    assert!(report.steps.data_wait_frac < 0.05, "{:#?}", report.steps);
    let trainer = report.thread(tid);
    assert!(
        (trainer.on_cpu_s + trainer.runnable_s) / trainer.lifetime_s > 0.8,
        "the trainer computes (or waits for a CPU to): {trainer:#?}"
    );
    assert_roles(report, tid);
}

fn trainer_truth(truth: &[Value]) -> &Value {
    truth
        .iter()
        .find(|t| t["role"] == "trainer")
        .unwrap_or_else(|| panic!("the trainer reports its truth: {truth:#?}"))
}

/// The trainer is found, and every worker thread is a data worker.
fn assert_roles(report: &Report, trainer_tid: i64) {
    assert_eq!(report.role(trainer_tid), "trainer", "{:?}", report.roles);
    for t in report.threads_named("pt_data_worker") {
        assert_eq!(report.role(t.tid), "data_worker", "{:?}", report.roles);
    }
}

//! Steps and stall attribution on a synthetic data-loading pipeline
//! (tests/workloads/pipeline.c): a trainer process and forked workers
//! passing batches through a pipe, with the batch count and the trainer's
//! time blocked waiting for them as ground truth. Without libtorch, steps
//! come from the trainer's reads of the pipe the workers write: every
//! batch is a step, waited for or ready. A job that is no training loop
//! has none, and says why.

use serde_json::Value;
use tprof_tests::{Report, data_file, require_root, trace_workload};

/// Two workers whose batches arrive spread out, and a trainer that asks
/// for the next batch at once: every batch is waited for and is a step,
/// and the data-wait share matches the trainer's own measure within 5
/// percentage points.
#[test]
fn steps_and_data_wait_match_the_pipeline() {
    require_root();
    let traced = trace_workload("pipeline", &["2", "100", "40", "0", "sleep"]);
    let truth = trainer_truth(&traced.truth);
    let report = &traced.report;
    let steps = &report.steps;
    assert_eq!(steps.trainer_tid, truth["tid"].as_i64(), "{steps:#?}");
    assert_eq!(steps.source.detector, "pipe_reads", "{steps:#?}");
    assert_eq!(
        steps.count,
        truth["batches"].as_u64().unwrap(),
        "{steps:#?}"
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

/// One worker reading 8 MiB with O_DIRECT per batch for a trainer that
/// trains 1 ms: the trainer waits for most batches, and while it waits the
/// worker is mostly in block IO. (Two workers reading 1 MiB each kept the
/// queue full on a fast disk: three waits in a hundred batches, and a blame
/// over three waits is noise. The 1 ms of training keeps reads further
/// apart than `PIPE_GAP_NS`, so every batch is a step.)
#[test]
fn disk_reading_workers_are_blamed_on_io() {
    require_root();
    let file = data_file(64);
    let args = ["1", "100", "8192", "1", "io", file.path_str()];
    let traced = trace_workload("pipeline", &args);
    let steps = &traced.report.steps;
    assert_eq!(steps.count, 100, "{steps:#?}");
    assert!(
        steps.deliveries >= steps.count / 2,
        "the trainer waits for most batches: {steps:#?}"
    );
    assert_eq!(steps.blame.leading(), "io", "{steps:#?}");
}

/// A trainer slower than its workers never waits: no data wait to speak
/// of, the trainer computes (on a CPU, or waiting for one) most of its
/// life, and every batch, ready when it asked, is still a step of about
/// its training time.
#[test]
fn slow_consumer_does_not_wait_for_data() {
    require_root();
    let traced = trace_workload("pipeline", &["2", "60", "2", "20", "cpu"]);
    let truth = trainer_truth(&traced.truth);
    let tid = truth["tid"].as_i64().unwrap();
    let report = &traced.report;
    assert!(report.steps.data_wait_frac < 0.05, "{:#?}", report.steps);
    let steps = &report.steps;
    assert_eq!(steps.source.detector, "pipe_reads", "{steps:#?}");
    assert_eq!(
        steps.count,
        truth["batches"].as_u64().unwrap(),
        "{steps:#?}"
    );
    // 20 ms of thread CPU per batch: at least that much wall time.
    assert!(steps.p50_s >= 0.019, "{steps:#?}");
    assert!(
        steps.items.iter().filter(|s| s.data_wait_s > 0.0).count() < steps.items.len() / 2,
        "ready batches are steps without data wait: {steps:#?}"
    );
    let trainer = report.thread(tid);
    assert!(
        (trainer.on_cpu_s + trainer.runnable_s) / trainer.lifetime_s > 0.8,
        "the trainer computes (or waits for a CPU to): {trainer:#?}"
    );
    assert_roles(report, tid);
}

/// Threads passing a byte through a pipe, no workers and no libtorch: not
/// a training loop. No steps, and the report says why.
#[test]
fn no_training_loop_has_no_steps() {
    require_root();
    let traced = trace_workload("pipe_reader", &["0.2"]);
    let steps = &traced.report.steps;
    assert_eq!(steps.count, 0, "{steps:#?}");
    assert_eq!(steps.source.detector, "none", "{steps:#?}");
    assert!(
        steps.source.why.contains("not a training loop"),
        "{steps:#?}"
    );
    assert!(steps.items.is_empty() && steps.startup.is_none());
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

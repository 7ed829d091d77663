//! What the scheduler's and task tracepoints report: `clone_flags`'
//! thread bit, sched_switch's `prev_state` bits, and how the raw
//! sched_switch program computes `prev_state` from the task's raw state
//! ([`report_prev_state`]) as the classic tracepoint would.

/// `clone_flags` bit that makes the new task a thread of its parent's process.
pub const CLONE_THREAD: u64 = 0x0001_0000;

/// `prev_state` of sched_switch for a preempted task (TASK_REPORT_MAX on
/// 5.14+ kernels, where `__trace_sched_switch_state` reports preemption).
pub const PREV_STATE_PREEMPTED: u64 = 0x100;
/// Raw `task_struct::__state` bits the raw sched_switch program turns into
/// the classic tracepoint's `prev_state` (`__trace_sched_switch_state`):
/// the reportable states are the low seven bits; TASK_DEAD, a task at its
/// last switch, reports its `exit_state` (EXIT_ZOMBIE or EXIT_DEAD); an
/// idle kthread (TASK_IDLE) reports TASK_REPORT_IDLE; a task blocked on an
/// rtlock or frozen reports uninterruptible.
pub const TASK_REPORT: u32 = 0x7f;
pub const TASK_DEAD: u32 = 0x80;
pub const TASK_IDLE: u32 = 0x402;
pub const TASK_REPORT_IDLE: u32 = 0x80;
pub const TASK_RTLOCK_WAIT: u32 = 0x1000;
pub const TASK_FROZEN: u32 = 0x8000;

/// The classic sched_switch tracepoint's `prev_state` for a switch with
/// `preempt` and the raw `state` (and, for a dead task, `exit_state`),
/// as Linux 5.18+ computes it. Shared by the raw program and its test.
pub const fn report_prev_state(preempt: bool, state: u32, exit_state: u32) -> u64 {
    if preempt {
        return PREV_STATE_PREEMPTED;
    }
    let mut report = (state | exit_state) & TASK_REPORT;
    if state & TASK_IDLE == TASK_IDLE {
        report = TASK_REPORT_IDLE;
    }
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        report = PREV_STATE_UNINTERRUPTIBLE as u32;
    }
    // 1 << (fls(report) - 1): the highest reported bit.
    if report == 0 { 0 } else { 1 << report.ilog2() }
}

/// `prev_state` bits of sched_switch, as the tracepoint reports them.
pub const PREV_STATE_INTERRUPTIBLE: u64 = 0x1;
pub const PREV_STATE_UNINTERRUPTIBLE: u64 = 0x2;
pub const PREV_STATE_DEAD: u64 = 0x10 | 0x20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offcpu_reason;

    /// The raw sched_switch program's `prev_state` matches what the classic
    /// tracepoint reports for the same switch.
    #[test]
    fn raw_prev_state_matches_the_tracepoint() {
        assert_eq!(report_prev_state(true, 1, 0), PREV_STATE_PREEMPTED);
        assert_eq!(report_prev_state(false, 0, 0), 0);
        assert_eq!(report_prev_state(false, 0x1, 0), PREV_STATE_INTERRUPTIBLE);
        assert_eq!(report_prev_state(false, 0x2, 0), PREV_STATE_UNINTERRUPTIBLE);
        // TASK_DEAD reports exit_state: EXIT_ZOMBIE, EXIT_DEAD.
        assert_eq!(report_prev_state(false, TASK_DEAD, 0x20), 0x20);
        assert_eq!(report_prev_state(false, TASK_DEAD, 0x10), 0x10);
        // TASK_IDLE (D | NOLOAD) reports TASK_REPORT_IDLE, not D.
        assert_eq!(report_prev_state(false, TASK_IDLE, 0), 0x80);
        // TASK_KILLABLE (D | WAKEKILL) reports D; a frozen task reports D.
        assert_eq!(
            report_prev_state(false, 0x102, 0),
            PREV_STATE_UNINTERRUPTIBLE
        );
        assert_eq!(
            report_prev_state(false, TASK_FROZEN | 1, 0),
            PREV_STATE_UNINTERRUPTIBLE
        );
        // Stopped (__TASK_STOPPED) and parked (TASK_PARKED).
        assert_eq!(report_prev_state(false, 0x4, 0), 0x4);
        assert_eq!(report_prev_state(false, 0x40, 0), 0x40);
        for state in [0x1, 0x2, 0x4, 0x8, 0x40, TASK_IDLE] {
            assert!(offcpu_reason(report_prev_state(false, state, 0)).is_some());
        }
        assert_eq!(
            offcpu_reason(report_prev_state(false, TASK_DEAD, 0x20)),
            None
        );
    }
}

//! The programs' attachments, kept apart from the programs so that they
//! can be detached all at once, without waiting for the kernel to finish.
//!
//! Detaching a program attached through a perf event (a classic or syscall
//! tracepoint, a uprobe, the cpu-clock sampler) waits for an RCU
//! tasks-trace grace period in the kernel (`perf_event_detach_bpf_prog`
//! calls `synchronize_rcu_tasks_trace`, Linux 6.11 on). On a machine whose
//! CPUs the job keeps busy one such wait took about 0.7 s here, and aya
//! detaches a program's links one after another: `tprof record -d 5s` on
//! the paced benchmark job took 20 s to return, its last 15 s spent
//! detaching about twenty links while the programs still left attached
//! kept tracing, and costing, the job. The program leaves its tracepoint
//! before that wait, and waits that overlap share one grace period, so
//! each link is dropped on a thread of its own: the job is free at once.
//! Destroying the perf events behind the links cannot be hurried: the
//! kernel does it one event at a time (`perf_trace_destroy` holds
//! `event_mutex` across another grace period), which is why the threads
//! are joined only once the recording is written; or, where tprof can
//! start its helper, not at all: [`super::release`] hands the links to a
//! process that does the kernel's part after tprof has exited.

use std::thread::JoinHandle;

use super::release;

/// Every attachment the programs made; detached on [`Links::detach_all`]
/// or when dropped, which also waits for the kernel to finish.
#[derive(Default)]
pub(super) struct Links {
    held: Vec<Box<dyn Send>>,
    detaching: Vec<JoinHandle<()>>,
}

impl Links {
    /// Keeps `link` (an aya link taken from its program with `take_link`)
    /// until the programs are detached.
    pub(super) fn keep(&mut self, link: impl Send + 'static) {
        self.held.push(Box::new(link));
    }

    /// Detaches every link kept so far, without waiting for the kernel:
    /// handed to the release helper when it starts (dropping them here is
    /// then immediate), else each on a thread of its own.
    pub(super) fn detach_all(&mut self) {
        if !self.held.is_empty() && release::hand_off() {
            self.held.clear();
            return;
        }
        for link in self.held.drain(..) {
            // When no thread can be had, the refused closure is dropped
            // at once, and the link with it: detached here instead.
            if let Ok(handle) = std::thread::Builder::new()
                .name("tprof-detach".into())
                .spawn(move || drop(link))
            {
                self.detaching.push(handle);
            }
        }
    }

    /// Whether every detach has finished in the kernel.
    pub(super) fn detached(&self) -> bool {
        self.held.is_empty() && self.detaching.iter().all(JoinHandle::is_finished)
    }

    /// Detaches what is left and waits until the kernel is done with
    /// every link.
    pub(super) fn wait(&mut self) {
        self.detach_all();
        for handle in self.detaching.drain(..) {
            let _ = handle.join();
        }
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        self.wait();
    }
}

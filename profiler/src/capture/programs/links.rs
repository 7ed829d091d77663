//! The programs' attachments, kept apart from the programs so that they
//! can be detached all at once.
//!
//! Detaching a program attached through a perf event (a classic or syscall
//! tracepoint, a uprobe, the cpu-clock sampler) waits for an RCU
//! tasks-trace grace period in the kernel (`perf_event_detach_bpf_prog`
//! calls `synchronize_rcu_tasks_trace`, Linux 6.11 on). On a machine whose
//! CPUs the job keeps busy one such wait took about 0.7 s here, and aya
//! detaches a program's links one after another: `tprof record -d 5s` on
//! the paced benchmark job took 20 s to return, its last 15 s spent
//! detaching about twenty links while the programs still left attached
//! kept tracing, and costing, the job. Waits that overlap share one grace
//! period, so each link is dropped on a thread of its own.

/// Every attachment the programs made, detached together when dropped.
#[derive(Default)]
pub(super) struct Links(Vec<Box<dyn Send>>);

impl Links {
    /// Keeps `link` (an aya link taken from its program with `take_link`)
    /// until the programs are detached.
    pub(super) fn keep(&mut self, link: impl Send + 'static) {
        self.0.push(Box::new(link));
    }

    /// Detaches every link kept so far, concurrently; returns when all
    /// are detached.
    pub(super) fn detach_all(&mut self) {
        let links = std::mem::take(&mut self.0);
        std::thread::scope(|scope| {
            for link in links {
                // When no thread can be had, the refused closure is dropped
                // at once, and the link with it: detached here instead.
                let _ = std::thread::Builder::new()
                    .name("tprof-detach".into())
                    .spawn_scoped(scope, move || drop(link));
            }
        });
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        self.detach_all();
    }
}

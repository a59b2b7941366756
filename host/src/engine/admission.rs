//! The admission queue's counts per tenant: requests accepted and waiting for admission, and
//! requests admitted and not yet finished. The engine owns them (it creates them and moves
//! each request from waiting to running and out); the HTTP side holds a handle to bound the
//! queue before it submits a request (a full queue is refused with 429); the metrics read a
//! snapshot. Nothing here is a metric: `/metrics` reports these counts beside its own.

use std::sync::Mutex;

/// One tenant's queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queue {
    /// Accepted, not yet admitted.
    pub waiting: u32,
    /// Admitted, not finished (preempted requests included: they keep their admission).
    pub running: u32,
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueFull {
    /// The tenant has this many requests waiting, its limit.
    Tenant { waiting: u32 },
    /// Every tenant's waiting requests together reached the server's limit.
    Server,
}

/// Every tenant's queue, by tenant id.
#[derive(Debug, Default)]
pub struct Admission {
    queues: Mutex<Vec<Queue>>,
}

impl Admission {
    /// Counts for tenants `0..tenants` (more appear as their ids are first seen).
    pub fn new(tenants: usize) -> Admission {
        Admission { queues: Mutex::new(vec![Queue::default(); tenants]) }
    }

    fn with<T>(&self, tenant: u32, f: impl FnOnce(&mut Queue, u32) -> T) -> T {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let total_waiting = q.iter().map(|t| t.waiting).sum();
        if q.len() <= tenant as usize {
            q.resize(tenant as usize + 1, Queue::default());
        }
        f(&mut q[tenant as usize], total_waiting)
    }

    /// Queues one request of `tenant` unless it already has `tenant_limit` waiting or all
    /// tenants together have `total_limit`.
    pub fn enqueue(&self, tenant: u32, tenant_limit: u32, total_limit: u32) -> Result<(), QueueFull> {
        self.with(tenant, |q, total| {
            if q.waiting >= tenant_limit {
                Err(QueueFull::Tenant { waiting: q.waiting })
            } else if total >= total_limit {
                Err(QueueFull::Server)
            } else {
                q.waiting += 1;
                Ok(())
            }
        })
    }

    /// Takes back a request queued but never submitted (the engine had stopped).
    pub fn withdraw(&self, tenant: u32) {
        self.with(tenant, |q, _| q.waiting = q.waiting.saturating_sub(1));
    }

    /// A waiting request of `tenant` was admitted.
    pub(crate) fn admit(&self, tenant: u32) {
        self.with(tenant, |q, _| {
            q.waiting = q.waiting.saturating_sub(1);
            q.running += 1;
        });
    }

    /// A request of `tenant` ended, admitted or still waiting.
    pub(crate) fn leave(&self, tenant: u32, admitted: bool) {
        self.with(tenant, |q, _| match admitted {
            true => q.running = q.running.saturating_sub(1),
            false => q.waiting = q.waiting.saturating_sub(1),
        });
    }

    /// Every tenant's queue, by tenant id.
    pub fn snapshot(&self) -> Vec<Queue> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_per_tenant_and_in_total_and_requests_move_through_it() {
        let a = Admission::new(2);
        assert_eq!(a.enqueue(0, 2, 3), Ok(()));
        assert_eq!(a.enqueue(0, 2, 3), Ok(()));
        assert_eq!(a.enqueue(0, 2, 3), Err(QueueFull::Tenant { waiting: 2 }));
        assert_eq!(a.enqueue(1, 2, 3), Ok(()));
        assert_eq!(a.enqueue(1, 2, 3), Err(QueueFull::Server));
        // Admitted requests leave the queue; a tenant id never seen before gets a queue.
        a.admit(0);
        a.withdraw(1);
        assert_eq!(a.enqueue(5, 2, 3), Ok(()));
        a.leave(0, true);
        a.leave(0, false);
        let q = a.snapshot();
        assert_eq!(q.len(), 6);
        assert_eq!((q[0], q[1], q[5]), (Queue::default(), Queue::default(), Queue { waiting: 1, running: 0 }));
    }
}

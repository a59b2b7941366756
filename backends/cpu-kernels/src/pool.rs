//! A thread pool that runs one closure on every thread per op, without paying an OS wake-up
//! per op: between jobs the workers spin for a while and only then sleep.

use std::{
    cell::UnsafeCell,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering::*},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
};

type Job = &'static (dyn Fn(usize) + Sync);

struct Inner {
    epoch: AtomicUsize,
    remaining: AtomicUsize,
    sleepers: AtomicUsize,
    stop: AtomicBool,
    worker_panicked: AtomicBool,
    job: UnsafeCell<Option<Job>>,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by `run` while no worker reads it (all workers have finished
// the previous job), and read by workers only after the epoch release that follows the write.
unsafe impl Sync for Inner {}

/// Spins before a worker sleeps: long enough to cover the gap between ops of one step.
const SPIN_LIMIT: u32 = 200_000;

/// The pool. Thread 0 is the caller of [`ThreadPool::run`]; workers are 1..n.
pub struct ThreadPool {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    /// A pool of `n` threads in all (the caller included); `n` of 0 or 1 runs everything
    /// on the caller.
    pub fn new(n: usize) -> ThreadPool {
        let inner = Arc::new(Inner {
            epoch: AtomicUsize::new(0),
            remaining: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            worker_panicked: AtomicBool::new(false),
            job: UnsafeCell::new(None),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n.max(1))
            .map(|idx| {
                let inner = inner.clone();
                std::thread::Builder::new()
                    .name(format!("zinc-cpu-{idx}"))
                    .spawn(move || worker(inner, idx))
                    .expect("spawn CPU worker thread")
            })
            .collect();
        ThreadPool { inner, workers }
    }

    /// Threads in the pool, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(thread_index)` once on every thread and returns when all are done.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        // SAFETY: the reference is only used until every worker has decremented
        // `remaining`, which happens before this function returns.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
        unsafe { *self.inner.job.get() = Some(job) };
        self.inner.remaining.store(self.workers.len(), SeqCst);
        self.inner.epoch.fetch_add(1, SeqCst);
        if self.inner.sleepers.load(SeqCst) > 0 {
            let _g = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.wake.notify_all();
        }
        // A panic in the caller's share must not leave workers using `f` after we unwind.
        let caller = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while self.inner.remaining.load(Acquire) != 0 {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = caller {
            std::panic::resume_unwind(p);
        }
        if self.inner.worker_panicked.swap(false, SeqCst) {
            panic!("a CPU worker thread panicked during the op");
        }
    }

    /// Runs `f` over `0..n` in ranges of `align`-multiple lengths that the threads claim in
    /// turn until none is left, about `CLAIMS_PER_THREAD` per thread: a thread that a busy
    /// host slows down does less of the op instead of holding the others at its end, as a
    /// fixed share per thread would. Each range starts at a multiple of `align` (a kernel's
    /// natural tile), and every index is covered once.
    pub fn for_claimed_ranges(&self, n: usize, align: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        let t = self.threads();
        let align = align.max(1);
        if n == 0 {
            return;
        }
        let units = n.div_ceil(align);
        if t == 1 || units == 1 {
            f(0..n);
            return;
        }
        let per_claim = units.div_ceil(t * CLAIMS_PER_THREAD) * align;
        let next = AtomicUsize::new(0);
        self.run(&|_| loop {
            let a = next.fetch_add(per_claim, Relaxed);
            if a >= n {
                break;
            }
            f(a..(a + per_claim).min(n));
        });
    }
}

/// Ranges per thread that [`ThreadPool::for_claimed_ranges`] aims at: enough that a slowed
/// thread's share can move to the others, few enough that each range is a long read.
const CLAIMS_PER_THREAD: usize = 16;

fn worker(inner: Arc<Inner>, idx: usize) {
    let mut seen = 0usize;
    loop {
        let mut spins = 0u32;
        loop {
            if inner.stop.load(Acquire) {
                return;
            }
            let e = inner.epoch.load(Acquire);
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
                continue;
            }
            inner.sleepers.fetch_add(1, SeqCst);
            let mut g = inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            while inner.epoch.load(SeqCst) == seen && !inner.stop.load(SeqCst) {
                g = inner.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            drop(g);
            inner.sleepers.fetch_sub(1, SeqCst);
            spins = 0;
        }
        // SAFETY: written before the epoch bump we just observed with Acquire.
        let job = unsafe { *inner.job.get() };
        if let Some(job) = job {
            // A panicking op must still count as finished, or `run` would wait forever; `run`
            // re-raises it on the caller's thread, where the plugin guard turns it into an error.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(idx))).is_err() {
                inner.worker_panicked.store(true, SeqCst);
            }
        }
        inner.remaining.fetch_sub(1, Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.inner.stop.store(true, SeqCst);
        {
            let _g = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_thread_runs_each_job_and_ranges_cover_everything_once() {
        let pool = ThreadPool::new(3);
        for round in 0..200 {
            let hits = AtomicU64::new(0);
            pool.for_claimed_ranges(1000 + round, 1, &|r| {
                hits.fetch_add(r.len() as u64, Relaxed);
            });
            assert_eq!(hits.load(Relaxed), 1000 + round as u64);
        }
    }

    #[test]
    fn claimed_ranges_cover_everything_once_on_aligned_starts() {
        let pool = ThreadPool::new(3);
        for (n, align) in [(1000, 16), (17, 16), (16, 16), (1, 4), (4097, 4), (5, 1)] {
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            pool.for_claimed_ranges(n, align, &|r| {
                assert_eq!(r.start % align, 0, "range {r:?} of {n} does not start on a multiple of {align}");
                r.for_each(|i| {
                    hits[i].fetch_add(1, Relaxed);
                });
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "n {n}, align {align}: an index not covered once");
        }
    }

    #[test]
    fn workers_wake_after_sleeping() {
        let pool = ThreadPool::new(2);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let seen = AtomicU64::new(0);
        pool.run(&|i| {
            seen.fetch_or(1 << i, Relaxed);
        });
        assert_eq!(seen.load(Relaxed), 0b11);
    }
}

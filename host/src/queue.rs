//! Bounded work queues.
//!
//! Plugin work and inference each go through a [`WorkQueue`]: a fixed number
//! of workers and a bounded backlog. A full backlog refuses new work at once
//! instead of letting memory grow, and the system check sends a probe job
//! through each queue to prove it still runs jobs.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::cfg::QueueConfig;

/// Why a job did not run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueueError {
    /// The backlog is at capacity.
    #[error("the {queue} queue is full ({capacity} jobs waiting); retry later")]
    Full {
        /// Queue name.
        queue: &'static str,
        /// Its capacity.
        capacity: usize,
    },
    /// The job was dropped before finishing (its worker panicked or the host is stopping).
    #[error("the {0} queue dropped the job before it finished")]
    Dropped(&'static str),
}

/// A bounded queue: at most `workers` jobs run at once, at most `capacity`
/// wait for their turn, and more are refused at once.
///
/// A job takes a permit and runs as a task of its own; there are no worker
/// tasks to hand it to, so a job starts without waking one, which under load
/// is most of what a queue costs.
#[derive(Clone)]
pub struct WorkQueue {
    name: &'static str,
    permits: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    workers: usize,
    capacity: usize,
}

impl WorkQueue {
    /// Starts a queue with `cfg.workers` concurrent jobs and a backlog of `cfg.capacity`.
    pub fn start(name: &'static str, cfg: &QueueConfig) -> WorkQueue {
        if cfg.workers == 0 {
            tracing::warn!(
                queue = name,
                "queue has no workers: its jobs will never run"
            );
        }
        WorkQueue {
            name,
            permits: Arc::new(Semaphore::new(cfg.workers.min(Semaphore::MAX_PERMITS))),
            waiting: Arc::new(AtomicUsize::new(0)),
            workers: cfg.workers,
            capacity: cfg.capacity.max(1),
        }
    }

    /// Runs `job` when a worker is free and waits for its output; refuses
    /// at once if the backlog is full.
    pub async fn run<T, F>(&self, job: F) -> Result<T, QueueError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        match self.submit(job)?.await {
            Ok(Some(output)) => Ok(output),
            _ => Err(QueueError::Dropped(self.name)),
        }
    }

    /// Accepts `job`, or refuses it at once if the backlog is full. An
    /// accepted job is a task of its own from here on: it waits its turn
    /// and runs whether or not anyone awaits the handle, which yields `None`
    /// only if the host is stopping before the job got a worker.
    pub fn submit<T, F>(&self, job: F) -> Result<JoinHandle<Option<T>>, QueueError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.take_place()?;
        let (permits, waiting, name) = (self.permits.clone(), self.waiting.clone(), self.name);
        let queued = std::time::Instant::now();
        Ok(tokio::spawn(async move {
            let permit = permits.acquire_owned().await;
            waiting.fetch_sub(1, Ordering::Relaxed);
            crate::telemetry::queue_wait(name, queued.elapsed());
            let _permit = permit.ok()?;
            Some(job.await)
        }))
    }

    /// Runs `job` on the caller's task once a worker is free, with the same
    /// bound and backlog as [`WorkQueue::run`]. A plugin call takes
    /// microseconds; a task of its own would cost more than that in the
    /// spawn, the move of its future and the wake-up of another thread.
    /// Dropping the returned future gives its place up.
    pub async fn run_here<T>(&self, job: impl Future<Output = T>) -> Result<T, QueueError> {
        self.take_place()?;
        let waiting = Waiting(&self.waiting);
        let queued = std::time::Instant::now();
        let permit = self.permits.acquire().await;
        drop(waiting);
        crate::telemetry::queue_wait(self.name, queued.elapsed());
        let _permit = permit.map_err(|_| QueueError::Dropped(self.name))?;
        Ok(job.await)
    }

    /// Takes a place in the backlog, or refuses at once if it is full.
    fn take_place(&self) -> Result<(), QueueError> {
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.capacity {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(QueueError::Full {
                queue: self.name,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// Jobs waiting for a worker.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Workers (jobs that may run at once).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The queue's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// A place taken in a queue's backlog, given up when dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields until `done`, failing the test after 5 s.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "{what} within 5 s");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn runs_jobs_and_returns_their_output() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 2,
                capacity: 4,
            },
        );
        assert_eq!(q.run(async { 40 + 2 }).await, Ok(42));
    }

    #[tokio::test]
    async fn a_full_backlog_refuses_at_once() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 0,
                capacity: 1,
            },
        );
        let first = q.clone();
        tokio::spawn(async move { first.run(async {}).await });
        until("the first job waits", || q.waiting() != 0).await;
        assert!(matches!(
            q.run(async {}).await,
            Err(QueueError::Full { .. })
        ));
    }

    #[tokio::test]
    async fn a_job_run_here_keeps_the_bound_and_the_backlog() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 1,
                capacity: 1,
            },
        );
        let (started, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let running = {
            let (q, started, release) = (q.clone(), started.clone(), release.clone());
            tokio::spawn(async move {
                q.run_here(async {
                    started.notify_one();
                    release.notified().await;
                    1
                })
                .await
            })
        };
        started.notified().await;
        // The one worker is busy: the next job waits, the one after is refused.
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.run_here(async { 2 }).await })
        };
        until("the second job waits", || q.waiting() == 1).await;
        assert!(matches!(
            q.run_here(async { 3 }).await,
            Err(QueueError::Full { .. })
        ));
        release.notify_one();
        assert_eq!(running.await.unwrap(), Ok(1));
        assert_eq!(waiting.await.unwrap(), Ok(2));
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn a_job_run_here_and_dropped_gives_its_place_up() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 0,
                capacity: 1,
            },
        );
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(10), q.run_here(async {}));
        assert!(waiting.await.is_err(), "no worker: the job waits");
        assert_eq!(q.waiting(), 0, "the dropped job left the backlog");
    }

    #[tokio::test]
    async fn a_job_that_panics_is_reported_and_its_worker_serves_on() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 1,
                capacity: 4,
            },
        );
        assert_eq!(
            q.run(async { panic!("a job failing") }).await,
            Err::<(), _>(QueueError::Dropped("t"))
        );
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), q.run(async { 7 }));
        assert_eq!(next.await, Ok(Ok(7)), "the one worker still runs jobs");
    }

    #[tokio::test]
    async fn no_more_jobs_than_workers_run_at_once() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 2,
                capacity: 16,
            },
        );
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let jobs = (0..8).map(|_| {
            let (q, running, most) = (q.clone(), running.clone(), most.clone());
            tokio::spawn(async move {
                q.run(async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                })
                .await
            })
        });
        for job in jobs.collect::<Vec<_>>() {
            assert_eq!(job.await.unwrap(), Ok(()));
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_accepted_job_runs_even_if_its_caller_stops_waiting() {
        let q = WorkQueue::start(
            "t",
            &QueueConfig {
                workers: 1,
                capacity: 4,
            },
        );
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let busy = tokio::spawn({
            let q = q.clone();
            async move { q.run(async move { hold.await.ok() }).await }
        });
        until("the worker takes the job", || {
            q.waiting() == 0 && q.permits.available_permits() == 0
        })
        .await;
        let (ran, done) = tokio::sync::oneshot::channel();
        let short = std::time::Duration::from_millis(20);
        let gave_up = tokio::time::timeout(short, q.run(async move { ran.send(()).ok() }));
        assert!(gave_up.await.is_err(), "the one worker is busy");
        release.send(()).unwrap();
        busy.await.unwrap().unwrap();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), done);
        assert_eq!(
            waited.await.map(|r| r.is_ok()),
            Ok(true),
            "the job still ran"
        );
        assert_eq!(q.waiting(), 0);
    }
}

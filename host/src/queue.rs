//! Bounded work queues.
//!
//! Plugin work and inference each go through a [`WorkQueue`]: a fixed number
//! of workers and a bounded backlog. A full backlog refuses new work at once
//! instead of letting memory grow, and the system check sends a probe job
//! through each queue to prove its workers are alive.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, mpsc, oneshot};

use crate::cfg::QueueConfig;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

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

/// A bounded queue served by a fixed set of worker tasks.
#[derive(Clone)]
pub struct WorkQueue {
    name: &'static str,
    tx: mpsc::Sender<Job>,
    // Held here too, so the channel stays open even with zero workers.
    _rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    waiting: Arc<AtomicUsize>,
    workers: usize,
    capacity: usize,
}

impl WorkQueue {
    /// Starts `cfg.workers` workers. Must be called inside a tokio runtime.
    pub fn start(name: &'static str, cfg: &QueueConfig) -> WorkQueue {
        let capacity = cfg.capacity.max(1);
        let (tx, rx) = mpsc::channel::<Job>(capacity);
        let rx = Arc::new(Mutex::new(rx));
        let waiting = Arc::new(AtomicUsize::new(0));
        if cfg.workers == 0 {
            tracing::warn!(
                queue = name,
                "queue has no workers: its jobs will never run"
            );
        }
        for _ in 0..cfg.workers {
            let rx = rx.clone();
            let waiting = waiting.clone();
            tokio::spawn(async move {
                loop {
                    let job = rx.lock().await.recv().await;
                    let Some(job) = job else { break };
                    waiting.fetch_sub(1, Ordering::Relaxed);
                    job.await;
                }
            });
        }
        WorkQueue {
            name,
            tx,
            _rx: rx,
            waiting,
            workers: cfg.workers,
            capacity,
        }
    }

    /// Runs `job` on one of the queue's workers and returns its output.
    pub async fn run<T, F>(&self, job: F) -> Result<T, QueueError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let job: Job = Box::pin(async move {
            let _ = done.send(job.await);
        });
        self.waiting.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(job).is_err() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(QueueError::Full {
                queue: self.name,
                capacity: self.capacity,
            });
        }
        result.await.map_err(|_| QueueError::Dropped(self.name))
    }

    /// Jobs accepted but not yet picked up by a worker.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The number of workers.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The queue's name, as used in logs and errors.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        tokio::task::yield_now().await;
        while q.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(
            q.run(async {}).await,
            Err(QueueError::Full { .. })
        ));
    }
}

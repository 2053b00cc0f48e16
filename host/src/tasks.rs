//! The host's background work, owned. Every loop runs on a [`Tasks`]
//! stage; shutdown stops the stages in their order, each one cancelled and
//! then awaited, so nothing runs on after the store is flushed and nothing
//! is left detached. (Spin's engine ticker stops when its owner lets go;
//! here the owner is the `App`, and letting go is [`Tasks::stop`].)

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a loop stands in shutdown: the stages stop in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Taking work in: sweeping the inbox, watching for plugins.
    Intake,
    /// Turning events into deliveries and writing them to the outbox.
    Matching,
    /// Sending deliveries: the outbox scan and the sends under way.
    Sending,
    /// Writing what the sends came to.
    Recording,
    /// Housekeeping: expiry, sweeps of sessions and keys, limit upkeep.
    Upkeep,
}

/// The loops of one host, by stage. Cheap to clone: clones share them.
#[derive(Clone, Default)]
pub struct Tasks(Arc<[Part; 5]>);

#[derive(Default)]
struct Part {
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    /// Runs `work` until it ends or its stage is stopped; then it is dropped
    /// at the await it is waiting on. For loops that hold nothing that
    /// must be finished.
    pub fn spawn(&self, stage: Stage, work: impl Future<Output = ()> + Send + 'static) {
        let stop = self.part(stage).stop.clone();
        self.part(stage).tracker.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = work => {}
            }
        });
    }

    /// Runs `work`, which is handed its stage's stop signal and ends by
    /// itself once it has finished what it holds (the loops that write).
    /// Its stage's stop waits for it.
    pub fn spawn_draining<F>(&self, stage: Stage, work: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let part = self.part(stage);
        part.tracker.spawn(work(part.stop.clone()));
    }

    /// Whether `stage` has been told to stop.
    pub fn stopping(&self, stage: Stage) -> bool {
        self.part(stage).stop.is_cancelled()
    }

    /// Tells `stage` to stop and waits until every task on it has ended.
    pub async fn stop(&self, stage: Stage) {
        let part = self.part(stage);
        part.stop.cancel();
        part.tracker.close();
        part.tracker.wait().await;
    }

    /// How many tasks are running on `stage`.
    pub fn running(&self, stage: Stage) -> usize {
        self.part(stage).tracker.len()
    }

    fn part(&self, stage: Stage) -> &Part {
        &self.0[stage as usize]
    }
}

/// `rx.recv_many(buf, limit)` until `stop`; from then on the channel
/// takes nothing more, what it holds is still received, and 0 says it is
/// empty: a loop that writes what it receives finishes its work and ends.
pub async fn recv_many_until<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    buf: &mut Vec<T>,
    limit: usize,
    stop: &CancellationToken,
) -> usize {
    if !stop.is_cancelled() {
        tokio::select! {
            biased;
            n = rx.recv_many(buf, limit) => return n,
            () = stop.cancelled() => {}
        }
    }
    rx.close();
    rx.recv_many(buf, limit).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn a_stopped_stage_has_no_task_left_and_the_others_run_on() {
        let tasks = Tasks::default();
        tasks.spawn(Stage::Intake, std::future::pending());
        tasks.spawn(Stage::Upkeep, std::future::pending());
        assert_eq!(tasks.running(Stage::Intake), 1);
        tokio::time::timeout(Duration::from_secs(5), tasks.stop(Stage::Intake))
            .await
            .expect("a cancelled loop ends");
        assert_eq!(tasks.running(Stage::Intake), 0);
        assert_eq!(tasks.running(Stage::Upkeep), 1, "another stage runs on");
        assert!(tasks.stopping(Stage::Intake) && !tasks.stopping(Stage::Upkeep));
    }

    #[tokio::test]
    async fn a_draining_loop_finishes_what_it_holds_before_its_stage_has_stopped() {
        let tasks = Tasks::default();
        let finished = Arc::new(AtomicBool::new(false));
        let done = finished.clone();
        tasks.spawn_draining(Stage::Recording, |stop| async move {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.store(true, Ordering::SeqCst);
        });
        tasks.stop(Stage::Recording).await;
        assert!(finished.load(Ordering::SeqCst), "stop waited for the drain");
    }

    #[tokio::test]
    async fn a_stopped_channel_hands_over_what_it_holds_and_takes_nothing_more() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let mut buf = Vec::new();
        tx.send(1).unwrap();
        assert_eq!(recv_many_until(&mut rx, &mut buf, 8, &stop).await, 1);
        tx.send(2).unwrap();
        tx.send(3).unwrap();
        stop.cancel();
        buf.clear();
        assert_eq!(recv_many_until(&mut rx, &mut buf, 8, &stop).await, 2);
        assert_eq!(buf, [2, 3]);
        assert!(tx.send(4).is_err(), "closed to senders");
        assert_eq!(recv_many_until(&mut rx, &mut buf, 8, &stop).await, 0);
    }
}

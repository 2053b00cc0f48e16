//! The second instance of a long-lived backend that imports `parallel`, on a
//! thread of its own, so that a model can split a large matrix product
//! between two cores.
//!
//! The thread runs its own single-threaded tokio runtime rather than a task
//! on the host's: a task woken from a running task waits in that worker's
//! slot until the waker yields, so both halves would run on one core.
//!
//! The second instance is told to get ready (load its weights) as soon as it
//! starts, and takes work only once it is: before that, `start` answers
//! false and the first instance does the work itself. A task that traps or
//! times out ends the second instance; `finish` reports it, and `start`
//! answers false until the first instance is replaced too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::{Duration, Instant};

use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

/// How long `finish` waits for the second instance on the spot before it
/// lets the thread sleep.
const SPIN: Duration = Duration::from_micros(500);

/// A task's result, or what the guest reported as wrong with it.
pub type Reply = Result<Vec<u8>, String>;

/// Runs tasks in the second instance.
pub trait Worker: Send + 'static {
    /// Runs `task`. `Err` when the instance trapped or timed out and must
    /// not be used again.
    fn run(&mut self, task: Vec<u8>) -> impl Future<Output = Result<Reply, String>>;
}

/// The first instance's end: the second instance's queue, and the task it
/// is waiting for.
pub struct Parallel {
    tasks: mpsc::Sender<(Vec<u8>, oneshot::Sender<Reply>)>,
    ready: Arc<AtomicBool>,
    pending: Option<oneshot::Receiver<Reply>>,
}

impl Parallel {
    /// Starts `worker` on a thread named after `name`, and gets it ready.
    /// Dropping the result ends the thread after its current task.
    pub fn spawn(name: &str, worker: impl Worker) -> Parallel {
        let (tasks, queue) = mpsc::channel(1);
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let label = name.to_string();
        let spawned = std::thread::Builder::new()
            .name("second-instance".into())
            .spawn(move || serve(&label, worker, queue, &flag));
        if let Err(e) = spawned {
            tracing::warn!(backend = name, error = %e, "no second instance: no thread");
        }
        Parallel {
            tasks,
            ready,
            pending: None,
        }
    }

    /// Hands `task` to the second instance; false if it is not ready, or
    /// a task is already out.
    pub fn start(&mut self, task: Vec<u8>) -> bool {
        if self.pending.is_some() || !self.ready.load(Ordering::Acquire) {
            return false;
        }
        let (reply, pending) = oneshot::channel();
        if self.tasks.try_send((task, reply)).is_err() {
            return false;
        }
        self.pending = Some(pending);
        true
    }

    /// Waits for the task `start` handed out.
    pub async fn finish(&mut self) -> Reply {
        let Some(mut pending) = self.pending.take() else {
            return Err("no task is out: call start first, and finish once per start".into());
        };
        let stopped = || Err("the second instance stopped".into());
        // The other half mostly comes within a few hundred microseconds of
        // this one; waiting for it here saves waking this thread up.
        let spin_until = Instant::now() + SPIN;
        loop {
            match pending.try_recv() {
                Ok(reply) => return reply,
                Err(TryRecvError::Closed) => return stopped(),
                Err(TryRecvError::Empty) if Instant::now() < spin_until => std::hint::spin_loop(),
                Err(TryRecvError::Empty) => break,
            }
        }
        pending.await.unwrap_or_else(|_| stopped())
    }
}

/// The second instance's thread: gets ready, then runs tasks until the
/// first instance's end is dropped or a task breaks the instance.
fn serve(
    name: &str,
    mut worker: impl Worker,
    mut queue: mpsc::Receiver<(Vec<u8>, oneshot::Sender<Reply>)>,
    ready: &AtomicBool,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::warn!(backend = name, error = %e, "no second instance: no runtime");
            return;
        }
    };
    runtime.block_on(async {
        match worker.run(Vec::new()).await {
            Ok(Ok(_)) => ready.store(true, Ordering::Release),
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(backend = name, error = %e, "the second instance could not get ready");
                return;
            }
        }
        while let Some((task, reply)) = queue.recv().await {
            match worker.run(task).await {
                Ok(result) => {
                    let _ = reply.send(result);
                }
                Err(e) => {
                    ready.store(false, Ordering::Release);
                    tracing::warn!(backend = name, error = %e, "the second instance failed");
                    let _ = reply.send(Err(e));
                    return;
                }
            }
        }
    });
}

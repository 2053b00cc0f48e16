//! The second instance of a long-lived backend that imports `parallel`, on a
//! thread of its own, so that a model can split a large matrix product
//! between two cores.
//!
//! The thread runs its own single-threaded tokio runtime rather than a task
//! on the host's: a task woken from a running task waits in that worker's
//! slot until the waker yields, so both halves would run on one core.
//!
//! A task may pass parts of its result on before it ends (`send` in the
//! second instance, `receive` in the first): a model can hand over a layer
//! at a time, and the first instance goes on with each as it comes.
//!
//! The second instance is told to get ready (load its weights) as soon as it
//! starts, and takes work only once it is: before that, `start` answers
//! false and the first instance does the work itself. A task that traps or
//! times out ends the second instance; `finish` reports it, and `start`
//! answers false until the first instance is replaced too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

/// How long `finish` and `receive` wait for the second instance on the spot before it
/// lets the thread sleep.
const SPIN: Duration = Duration::from_micros(500);

/// A task's result, or what the guest reported as wrong with it.
pub type Reply = Result<Vec<u8>, String>;

/// Where a running task's parts go, in the second instance.
pub type Parts = mpsc::UnboundedSender<Vec<u8>>;

/// Runs tasks in the second instance.
pub trait Worker: Send + 'static {
    /// Runs `task`, passing the parts it sends to `parts`. `Err` when the
    /// instance trapped or timed out and must not be used again.
    fn run(&mut self, task: Vec<u8>, parts: Parts) -> impl Future<Output = Result<Reply, String>>;
}

/// A task for the second instance, with the ends its result goes to.
struct Job {
    task: Vec<u8>,
    reply: oneshot::Sender<Reply>,
    parts: Parts,
}

/// The first instance's ends of the task it has out.
struct Pending {
    reply: oneshot::Receiver<Reply>,
    parts: mpsc::UnboundedReceiver<Vec<u8>>,
}

/// The first instance's end: the second instance's queue, and the task it
/// is waiting for.
pub struct Parallel {
    tasks: mpsc::Sender<Job>,
    ready: Arc<AtomicBool>,
    pending: Option<Pending>,
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
        let (reply, reply_end) = oneshot::channel();
        let (parts, parts_end) = mpsc::unbounded_channel();
        if self.tasks.try_send(Job { task, reply, parts }).is_err() {
            return false;
        }
        self.pending = Some(Pending {
            reply: reply_end,
            parts: parts_end,
        });
        true
    }

    /// Waits for the task `start` handed out.
    pub async fn finish(&mut self) -> Reply {
        let Some(Pending { mut reply, .. }) = self.pending.take() else {
            return Err(NOTHING_OUT.into());
        };
        let stopped = || Err("the second instance stopped".into());
        let polled = spin(|| match reply.try_recv() {
            Ok(reply) => Poll::Ready(reply),
            Err(oneshot::error::TryRecvError::Closed) => Poll::Ready(stopped()),
            Err(oneshot::error::TryRecvError::Empty) => Poll::Pending,
        });
        match polled {
            Some(reply) => reply,
            None => reply.await.unwrap_or_else(|_| stopped()),
        }
    }

    /// Waits for the next part the task out sends; an error once it has
    /// ended with none left.
    pub async fn receive(&mut self) -> Reply {
        let Some(Pending { parts, .. }) = &mut self.pending else {
            return Err(NOTHING_OUT.into());
        };
        let ended = || Err("the task has ended and sent no more parts: call finish".into());
        let polled = spin(|| match parts.try_recv() {
            Ok(part) => Poll::Ready(Ok(part)),
            Err(mpsc::error::TryRecvError::Disconnected) => Poll::Ready(ended()),
            Err(mpsc::error::TryRecvError::Empty) => Poll::Pending,
        });
        match polled {
            Some(part) => part,
            None => match parts.recv().await {
                Some(part) => Ok(part),
                None => ended(),
            },
        }
    }
}

const NOTHING_OUT: &str = "no task is out: call start first, and finish once per start";

/// Polls `poll` on the spot for up to [`SPIN`]: the other half mostly comes
/// within a few hundred microseconds, and waiting here saves waking this
/// thread up. `None` if it has not come by then.
fn spin<T>(mut poll: impl FnMut() -> Poll<T>) -> Option<T> {
    let until = Instant::now() + SPIN;
    loop {
        match poll() {
            Poll::Ready(value) => return Some(value),
            Poll::Pending if Instant::now() < until => std::hint::spin_loop(),
            Poll::Pending => return None,
        }
    }
}

/// The second instance's thread: gets ready, then runs tasks until the
/// first instance's end is dropped or a task breaks the instance.
fn serve(name: &str, mut worker: impl Worker, mut queue: mpsc::Receiver<Job>, ready: &AtomicBool) {
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
        let (parts, _) = mpsc::unbounded_channel();
        match worker.run(Vec::new(), parts).await {
            Ok(Ok(_)) => {
                ready.store(true, Ordering::Release);
                tracing::info!(backend = name, "the second instance is ready");
            }
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(backend = name, error = %e, "the second instance could not get ready");
                return;
            }
        }
        while let Some(Job { task, reply, parts }) = queue.recv().await {
            match worker.run(task, parts).await {
                Ok(result) => {
                    tracing::debug!(backend = name, "the second instance ran a task");
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

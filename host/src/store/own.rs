//! The commits a piece of work (an HTTP request) makes on its own task,
//! so that its answer waits for those to be durable and not for every
//! commit other requests made meanwhile: waiting for the newest commit
//! of all made each answer need the sync after the one that covered its
//! own writes, and kept a sync running back to back under load.
//!
//! A sync covers a prefix of the journal, so the mark after a request's
//! last commit covers whatever it read before that commit too. Work on
//! other tasks (the matcher's write loop) makes its own commits durable
//! before the request goes on (`Dispatcher::send_when_durable`).

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static OWN: Cell<Option<u64>>;
}

/// Runs `work`, noting the commits it makes on this task; returns its
/// output and the mark after its last commit (`None`: it made none).
pub async fn tracking<F: Future>(work: F) -> (F::Output, Option<u64>) {
    OWN.scope(Cell::new(None), async {
        let out = work.await;
        (out, OWN.with(Cell::get))
    })
    .await
}

/// Notes a commit covered by `mark` (see `Engine::commit_mark`), when the
/// task is tracked.
pub(crate) fn note(mark: u64) {
    let _ = OWN.try_with(|own| own.set(Some(own.get().map_or(mark, |m| m.max(mark)))));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_tasks_own_commits_count() {
        let ((), none) = tracking(async {}).await;
        assert_eq!(none, None);
        let ((), own) = tracking(async {
            note(7);
            note(3);
            // Another task's commit is not this work's.
            tokio::spawn(async { note(99) }).await.unwrap();
        })
        .await;
        assert_eq!(own, Some(7));
    }
}

//! An answer to a write means the write is kept: every request that may
//! write (POST, PUT, PATCH, DELETE) is answered only once what it
//! committed is durable (`store/own.rs`). Concurrent requests share one
//! fsync (the store's group commit), and a request whose commits a sync
//! already covered (one that made its deliveries durable itself) costs
//! none. One that committed nothing waits for every commit so far, since
//! its answer may rest on another's.
//!
//! While the store's disk is full, such requests are refused at once (503
//! `store_full`), and reads go on.
//!
//! The router leaves the model calls out (`model_calls` in `http/mod.rs`).

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::Error;
use crate::store::Store;

/// The middleware (see the module's comment).
pub async fn acknowledge(State(store): State<Store>, request: Request, next: Next) -> Response {
    if !may_write(request.method()) {
        return next.run(request).await;
    }
    if store.full() {
        return Error::StoreFull.into_response();
    }
    let (response, own) = crate::store::own::tracking(next.run(request)).await;
    // One that committed nothing may still answer from another's
    // commit (an idempotent replay): it waits for all so far.
    let mark = own.unwrap_or_else(|| store.commit_mark());
    match store.durable_to(mark).await {
        Ok(()) => response,
        Err(e) => Error::from(e).into_response(),
    }
}

fn may_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::post;
    use tower::ServiceExt;

    /// Finding 1 of issue 53: a configuration write was answered while its
    /// commit sat in the page cache. A crash right after the answer keeps
    /// only what was synced; the write must be there.
    #[tokio::test]
    async fn a_write_is_durable_by_the_time_it_is_answered() {
        let (_dir, store, disk) = Store::on_simulated_disk();
        let writes = store.clone();
        let router = Router::new()
            .route(
                "/users",
                post(move || async move {
                    let user = crate::model::User {
                        id: "u_1".into(),
                        name: "alice".into(),
                        operator: false,
                        created_at: 0,
                    };
                    writes.insert_user(&user).await.unwrap();
                    "made"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(
                store.clone(),
                acknowledge,
            ));
        let (_, before) = Store::after_crash(&disk);
        let request = Request::post("/users")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let (_, after) = Store::after_crash(&disk);
        let kept = after
            .iter()
            .any(|writes| writes.windows(5).any(|w| w == b"alice"));
        assert!(
            kept,
            "the user answered as made is not on disk ({} logged writes before, {} after)",
            before.len(),
            after.len()
        );
    }

    fn user(id: &str, name: &str) -> crate::model::User {
        crate::store::contract::user(id, name, 0)
    }

    fn logged(disk: &crate::store::SimulatedDisk, name: &str) -> bool {
        let (_, after) = Store::after_crash(disk);
        after
            .iter()
            .any(|writes| writes.windows(name.len()).any(|w| w == name.as_bytes()))
    }

    /// Two requests through the middleware: the first `own` (committing
    /// alice and syncing, then leaving bob committed by another task),
    /// the second committing nothing. Returns the I/O steps the first
    /// one's answer cost after its handler.
    async fn answers(own: bool) -> (tempfile::TempDir, crate::store::SimulatedDisk, u64) {
        let (dir, store, disk) = Store::on_simulated_disk();
        let (writes, steps) = (store.clone(), disk.clone());
        let handler_steps = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = handler_steps.clone();
        let router = Router::new()
            .route(
                "/users",
                post(move || async move {
                    if own {
                        writes.insert_user(&user("u_1", "alice")).await.unwrap();
                        writes.durable().await.unwrap();
                    }
                    let other = writes.clone();
                    tokio::spawn(async move { other.insert_user(&user("u_2", "bob")).await })
                        .await
                        .unwrap()
                        .unwrap();
                    seen.store(steps.steps(), std::sync::atomic::Ordering::SeqCst);
                    "made"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(store, acknowledge));
        let request = Request::post("/users").body(axum::body::Body::empty());
        let response = router.oneshot(request.unwrap()).await.unwrap();
        assert_eq!(response.status(), 200);
        let cost = disk.steps() - handler_steps.load(std::sync::atomic::Ordering::SeqCst);
        (dir, disk, cost)
    }

    /// An answer waits for its own commits, not for those other requests
    /// made meanwhile: under load that cost a sync per answer.
    #[tokio::test]
    async fn an_answer_waits_for_its_own_commits_only() {
        let (_dir, disk, cost) = answers(true).await;
        assert!(logged(&disk, "alice"));
        assert_eq!(cost, 0, "the answer synced for another's commit");
        assert!(!logged(&disk, "bob"), "another's commit was synced");
    }

    /// One that committed nothing may answer from another's commit: it
    /// waits for every commit so far.
    #[tokio::test]
    async fn an_answer_that_committed_nothing_waits_for_all() {
        let (_dir, disk, cost) = answers(false).await;
        assert!(cost > 0);
        assert!(logged(&disk, "bob"), "answered before what it saw was kept");
    }
}

//! An answer to a write means the write is kept: every request that may
//! write (POST, PUT, PATCH, DELETE) is answered only once what the store
//! committed is durable. Concurrent requests share one fsync (the store's
//! group commit), and a request whose writes a sync already covered (one
//! that made its deliveries durable itself, or wrote nothing) costs none.
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
    let response = next.run(request).await;
    let mark = store.commit_mark();
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
}

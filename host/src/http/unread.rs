//! Keeping an HTTP/1 connection usable when a request is answered before
//! its body was read (a 401, 403, 404, 413 or 415 refuses before `Json`
//! reads anything).
//!
//! hyper, finding an unread body when the handler is done with it, closes
//! the connection behind an answer that did not say `Connection: close`:
//! the client sends its next request on a closed connection and loses it.
//! So the unread rest is read and discarded here, up to a bound, before the
//! answer goes out; past the bound (or when the client waits for `100
//! Continue`) the answer says `Connection: close`. HTTP/2 resets an unread
//! stream and keeps the connection, so it is left alone.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::body::{Frame, SizeHint};
use tokio::sync::oneshot;

/// How much of an unread body is read to keep its connection.
const DRAIN_BYTES: u64 = 1024 * 1024;

/// How long the rest of an unread body may take to arrive.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The middleware: wraps the body, and after the handler drains what it
/// left (see the module's comment).
pub async fn keep_connection(request: Request, next: Next) -> Response {
    if request.version() > Version::HTTP_11 || request.body().is_end_stream() {
        return next.run(request).await;
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let (back, mut returned) = oneshot::channel();
    let request = request.map(|body| {
        Body::new(Watched {
            body: Some(body),
            back: Some(back),
        })
    });
    let mut response = next.run(request).await;
    // The handler has dropped its request by now, unless a task of its
    // holds the body; `Err`: read to the end, or still held.
    let Ok(rest) = returned.try_recv() else {
        return response;
    };
    let drainable = !expects_continue && declared.is_none_or(|len| len <= DRAIN_BYTES);
    if !drainable || !drain(rest).await {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Reads and discards `body` to its end; `false` past [`DRAIN_BYTES`] or
/// [`DRAIN_TIME`], or on a read error.
async fn drain(mut body: Body) -> bool {
    let read = async {
        let mut seen = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            seen += frame.data_ref().map_or(0, |d| d.len() as u64);
            if seen > DRAIN_BYTES {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, read)
        .await
        .unwrap_or(false)
}

/// A request body that, dropped before its end, hands what is left back to
/// [`keep_connection`] instead of dropping it.
struct Watched {
    body: Option<Body>,
    back: Option<oneshot::Sender<Body>>,
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            // Nothing left to hand back: the connection's fate is hyper's.
            this.body = None;
            this.back = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let (Some(body), Some(back)) = (self.body.take(), self.back.take())
            && !body.is_end_stream()
        {
            let _ = back.send(body);
        }
    }
}

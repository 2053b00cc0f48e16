//! `POST /v1/embeddings`, `/v1/completions` and `/v1/responses`: OpenAI's
//! endpoints besides chat, under the same keys, limits, routes, usage and
//! metrics. A backend built for them (0.3.0) gets the body whole and its
//! answer goes back as it is; one that only chats serves completions and
//! responses through chat ([`crate::inference::text`]).

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::inference::{account, add_headers, finished, sse};
use super::{Json, KeyedCaller};
use crate::app::App;
use crate::error::{Error, Result};
use crate::inference::backend::{Endpoint, ForwardRequest, ForwardResult, Piece};
use crate::inference::{Running, cache};

/// `POST /v1/embeddings`.
pub async fn embeddings(
    State(app): State<App>,
    caller: KeyedCaller,
    headers: HeaderMap,
    Json(body): Json<Map<String, Value>>,
) -> Result<Response> {
    answer(&app, caller, &headers, Endpoint::Embeddings, body).await
}

/// `POST /v1/completions`.
pub async fn completions(
    State(app): State<App>,
    caller: KeyedCaller,
    headers: HeaderMap,
    Json(body): Json<Map<String, Value>>,
) -> Result<Response> {
    answer(&app, caller, &headers, Endpoint::Completions, body).await
}

/// `POST /v1/responses`.
pub async fn responses(
    State(app): State<App>,
    caller: KeyedCaller,
    headers: HeaderMap,
    Json(body): Json<Map<String, Value>>,
) -> Result<Response> {
    answer(&app, caller, &headers, Endpoint::Responses, body).await
}

/// Serves one request and counts it in the metrics.
async fn answer(
    app: &App,
    caller: KeyedCaller,
    headers: &HeaderMap,
    endpoint: Endpoint,
    body: Map<String, Value>,
) -> Result<Response> {
    let model = match body.get("model") {
        Some(Value::String(model)) if !model.is_empty() => model.clone(),
        _ => {
            return Err(Error::invalid(
                "model",
                "'model' is required: name one of the models GET /v1/models lists",
            ));
        }
    };
    let started = std::time::Instant::now();
    let answer = forward(app, caller, headers, endpoint, model.clone(), body, started).await;
    let status = match &answer {
        Ok(response) => response.status().as_u16(),
        Err(e) => e.status().as_u16(),
    };
    crate::telemetry::inference_request(endpoint.path(), &model, status);
    answer
}

async fn forward(
    app: &App,
    KeyedCaller { user, key }: KeyedCaller,
    headers: &HeaderMap,
    endpoint: Endpoint,
    model: String,
    body: Map<String, Value>,
    started: std::time::Instant,
) -> Result<Response> {
    let streamed = match body.get("stream") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) if endpoint != Endpoint::Embeddings => true,
        Some(Value::Bool(true)) => {
            return Err(Error::invalid(
                "stream",
                "embeddings are not streamed; leave 'stream' out",
            ));
        }
        Some(_) => return Err(Error::invalid("stream", "'stream' must be true or false")),
    };
    let account = account(app, &user, &key, headers, &model).await?;
    let asked =
        (app.inference.caches()).then(|| cache::Asked::new(endpoint.path(), &body, headers));
    let request = ForwardRequest {
        endpoint,
        model: model.clone(),
        body,
        streamed,
    };
    let mut running = app.inference.forward(account, request, asked).await?;
    let limits = std::mem::take(&mut running.headers);
    let deployment = running.deployment.clone();
    let mut response = if streamed {
        stream(running, &model, started).await?
    } else {
        whole(running).await?
    };
    add_headers(&mut response, limits, &deployment);
    Ok(response)
}

/// The backend's body as it is.
async fn whole(mut running: Running<ForwardResult>) -> Result<Response> {
    while running.output.recv().await.is_some() {}
    let result = finished(running.done).await?;
    let body = result
        .body
        .ok_or_else(|| Error::BadGateway("the backend answered with no body".into()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Waits for the first event, so a request that fails before answering
/// gets a real status code; then relays the rest as they come.
async fn stream(
    mut running: Running<ForwardResult>,
    model: &str,
    started: std::time::Instant,
) -> Result<Response> {
    let first = match running.output.recv().await {
        Some(first) => {
            crate::telemetry::time_to_first_token(model, started.elapsed());
            first
        }
        None => {
            finished(running.done).await?;
            return Err(Error::BadGateway(
                "the backend ended the stream without sending anything".into(),
            ));
        }
    };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(relay(tx, running, first));
    Ok(sse(rx))
}

/// Sends events until the backend ends. When the client goes away, sending
/// fails, `running` is dropped, and the backend stops.
async fn relay(tx: mpsc::Sender<Event>, mut running: Running<ForwardResult>, first: Piece) {
    let mut piece = Some(first);
    while let Some(next) = piece {
        if let Some(event) = event(next)
            && tx.send(event).await.is_err()
        {
            return;
        }
        piece = running.output.recv().await;
    }
    if let Err(error) = finished(running.done).await {
        // As a Responses stream reports errors: an `error` event, its
        // fields at the top; SDKs read the `error` object.
        let mut body = error.body();
        body["type"] = "error".into();
        body["message"] = body["error"]["message"].clone();
        body["code"] = body["error"]["code"].clone();
        let _ = tx
            .send(Event::default().event("error").data(body.to_string()))
            .await;
    }
}

/// A backend's event as sent to the client. A name that would break the
/// stream's framing is dropped rather than sent.
fn event(piece: Piece) -> Option<Event> {
    let Piece::Event(name, data) = piece else {
        return None;
    };
    let event = Event::default().data(data);
    match name {
        Some(name) if name.contains(['\r', '\n']) => {
            tracing::warn!("a backend sent an event name with a line break; sent without it");
            Some(event)
        }
        Some(name) => Some(event.event(name)),
        None => Some(event),
    }
}

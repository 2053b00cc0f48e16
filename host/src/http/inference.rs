//! `GET /v1/models`, `POST /v1/chat/completions` (whole or streamed as
//! server-sent events) and project usage.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Caller, Json, KeyedCaller};
use crate::app::App;
use crate::auth::User;
use crate::error::{Error, Result};
use crate::groups::{Group, Role};
use crate::ids;
use crate::inference::usage::{self, Account};
use crate::inference::wire::{self, CompletionRequest, Header};
use crate::inference::{Running, backend::ModelInfo};
use crate::projects;

/// The project headers: ours (the spec's) and the one the `openai` SDK sends
/// for `project=`.
const PROJECT_HEADERS: [&str; 2] = ["service-project", "openai-project"];

fn model_object(model: &ModelInfo) -> Value {
    json!({
        "id": model.id,
        "object": "model",
        "created": model.created,
        "owned_by": model.owned_by,
        "root": model.id,
    })
}

/// `GET /v1/models`.
pub async fn list_models(State(app): State<App>, _caller: Caller) -> axum::Json<Value> {
    let data: Vec<Value> = app.inference.models().iter().map(model_object).collect();
    axum::Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{model}`.
pub async fn show_model(
    State(app): State<App>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>> {
    app.inference
        .models()
        .iter()
        .find(|m| m.id == id)
        .map(|m| axum::Json(model_object(m)))
        .ok_or_else(|| {
            Error::ModelNotFound(format!(
                "the model '{id}' does not exist; GET /v1/models lists the models served"
            ))
        })
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(app): State<App>,
    KeyedCaller { user, key_id }: KeyedCaller,
    headers: HeaderMap,
    Json(body): Json<CompletionRequest>,
) -> Result<Response> {
    let account = account(&app, &user, key_id, &headers)?;
    let mut seed = [0u8; 8];
    let _ = getrandom::fill(&mut seed);
    let request = body.to_backend(u64::from_le_bytes(seed))?;
    let header = Header {
        id: format!("chatcmpl-{}", ids::random_hex(12)),
        created: ids::now(),
        model: request.model.clone(),
    };
    let running = app.inference.chat(account, request)?;
    if body.stream {
        let include_usage = body.stream_options.is_some_and(|o| o.include_usage);
        stream(header, running, include_usage).await
    } else {
        whole(header, running).await
    }
}

async fn whole(header: Header, mut running: Running) -> Result<Response> {
    let mut text = String::new();
    while let Some(piece) = running.text.recv().await {
        text.push_str(&piece);
    }
    let result = finished(running.done).await?;
    Ok(axum::Json(header.completion(text, &result)).into_response())
}

async fn finished(
    done: tokio::sync::oneshot::Receiver<Result<crate::inference::backend::ChatResult>>,
) -> Result<crate::inference::backend::ChatResult> {
    done.await
        .map_err(|_| Error::Unavailable("the inference job was dropped; retry".into()))?
}

/// Waits for the first piece of text, so a request that fails before
/// generating (a full queue, a backend error) gets a real status code; then
/// streams the rest.
async fn stream(header: Header, mut running: Running, include_usage: bool) -> Result<Response> {
    let first = match running.text.recv().await {
        Some(text) => Some(text),
        None => {
            let result = finished(running.done).await?;
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                let _ = finish(&header, &tx, String::new(), Ok(result), include_usage).await;
            });
            return Ok(sse(rx));
        }
    };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(pump(
        header,
        running,
        first.unwrap_or_default(),
        tx,
        include_usage,
    ));
    Ok(sse(rx))
}

fn sse(rx: mpsc::Receiver<Event>) -> Response {
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(events).into_response()
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

/// Sends chunks until generation ends. Text is held one piece back so the
/// last content chunk can carry `finish_reason`. When the client goes away,
/// sending fails, `running` is dropped, and the backend stops generating.
async fn pump(
    header: Header,
    mut running: Running,
    first: String,
    tx: mpsc::Sender<Event>,
    include_usage: bool,
) {
    let role = json!({"role": "assistant", "content": "", "refusal": null});
    if tx
        .send(data(&header.chunk(role, None, include_usage)))
        .await
        .is_err()
    {
        return;
    }
    let mut pending = first;
    while let Some(text) = running.text.recv().await {
        let chunk = header.chunk(json!({"content": pending}), None, include_usage);
        if tx.send(data(&chunk)).await.is_err() {
            return;
        }
        pending = text;
    }
    let outcome = finished(running.done).await;
    let _ = finish(&header, &tx, pending, outcome, include_usage).await;
}

async fn finish(
    header: &Header,
    tx: &mpsc::Sender<Event>,
    last: String,
    outcome: Result<crate::inference::backend::ChatResult>,
    include_usage: bool,
) -> std::result::Result<(), mpsc::error::SendError<Event>> {
    match outcome {
        Ok(result) => {
            let reason = wire::finish_reason(result.finish_reason);
            let chunk = header.chunk(json!({"content": last}), Some(reason), include_usage);
            tx.send(data(&chunk)).await?;
            if include_usage {
                tx.send(data(&header.usage_chunk(&result))).await?;
            }
        }
        Err(error) => {
            if !last.is_empty() {
                let chunk = header.chunk(json!({"content": last}), None, include_usage);
                tx.send(data(&chunk)).await?;
            }
            tx.send(data(&error.body())).await?;
        }
    }
    tx.send(Event::default().data("[DONE]")).await
}

/// Who the request is billed to: the project in the header (the caller must
/// be a member of its team), or the caller's own default project.
fn account(app: &App, user: &User, key_id: String, headers: &HeaderMap) -> Result<Account> {
    let Some((name, value)) = PROJECT_HEADERS
        .iter()
        .find_map(|h| headers.get(*h).map(|v| (*h, v)))
    else {
        return Ok(Account {
            scope: usage::personal_scope(&user.name),
            key_id,
        });
    };
    let value = value
        .to_str()
        .map_err(|_| Error::invalid(name, format!("the {name} header is not valid text")))?;
    let (team, project) = value.split_once('/').ok_or_else(|| {
        Error::invalid(
            name,
            format!("the {name} header must be '<team>/<project>', got '{value}'"),
        )
    })?;
    if Group::Team
        .require(&app.store, user, team, Role::Member)
        .is_err()
    {
        return Err(Error::PermissionDenied(format!(
            "you are not a member of team '{team}', so you cannot use its project '{project}'"
        )));
    }
    projects::get(&app.store, team, project)?;
    Ok(Account {
        scope: usage::project_scope(team, project),
        key_id,
    })
}

/// `GET /v1/teams/{team}/projects/{project}/usage`: totals, by model and by
/// day, and every (day, model, key) row. Team members only.
pub async fn project_usage(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project)): Path<(String, String)>,
) -> Result<axum::Json<Value>> {
    Group::Team.require(&app.store, &user, &team, Role::Member)?;
    projects::get(&app.store, &team, &project)?;
    let rows = usage::rows(&app.store, &usage::project_scope(&team, &project))?;
    let mut report = usage_report(rows);
    report["team"] = json!(team);
    report["project"] = json!(project);
    Ok(axum::Json(report))
}

/// `GET /v1/me/usage`: the caller's own requests sent without a project
/// header, in the same shape as a project's usage.
pub async fn my_usage(State(app): State<App>, Caller(user): Caller) -> Result<axum::Json<Value>> {
    let rows = usage::rows(&app.store, &usage::personal_scope(&user.name))?;
    let mut report = usage_report(rows);
    report["user"] = json!(user.name);
    Ok(axum::Json(report))
}

fn usage_report(rows: Vec<usage::Row>) -> Value {
    json!({
        "total": usage::total(&rows),
        "by_model": usage::group_by(&rows, |r| &r.model),
        "by_day": usage::group_by(&rows, |r| &r.day),
        "rows": rows,
    })
}

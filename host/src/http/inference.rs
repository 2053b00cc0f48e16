//! `GET /v1/models`, `POST /v1/chat/completions` (whole or streamed as
//! server-sent events) and project usage.

use super::Reply;
use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::json::JsonAsSent;
use super::{Caller, KeyedCaller};
use crate::app::App;
use crate::domain::auth::{ApiKey, User};
use crate::domain::groups::Role;
use crate::domain::projects;
use crate::error::{Error, Result};
use crate::ids;
use crate::inference::backend::{ChatResult, ModelInfo, Piece};
use crate::inference::limits::Owners;
use crate::inference::usage::{self, Account};
use crate::inference::wire::{self, CompletionRequest, Header};
use crate::inference::{Running, cache};

/// The project headers: ours (the spec's) and the one the `openai` SDK sends
/// for `project=`.
const PROJECT_HEADERS: [&str; 2] = ["service-project", "openai-project"];

/// Which of a route's deployments answered (the access log shows it too).
pub const DEPLOYMENT_HEADER: &str = "x-switchyard-deployment";

fn model_object(model: &ModelInfo) -> Value {
    json!({
        "id": model.id,
        "object": "model",
        "created": model.created,
        "owned_by": model.owned_by,
        "root": model.id,
    })
}

/// Whether `key` may use `model`.
fn may_use(key: &ApiKey, model: &str) -> bool {
    key.models
        .as_ref()
        .is_none_or(|models| models.iter().any(|m| m == model))
}

/// `GET /v1/models`: the models the caller's key may use.
pub async fn list_models(State(app): State<App>, caller: KeyedCaller) -> axum::Json<Value> {
    let data: Vec<Value> = app
        .inference
        .models()
        .iter()
        .filter(|m| may_use(&caller.key, &m.id))
        .map(model_object)
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{model}`.
pub async fn show_model(
    State(app): State<App>,
    caller: KeyedCaller,
    Path(id): Path<String>,
) -> Reply<Value> {
    app.inference
        .models()
        .iter()
        .find(|m| m.id == id && may_use(&caller.key, &m.id))
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
    KeyedCaller { user, key }: KeyedCaller,
    headers: HeaderMap,
    JsonAsSent(body, sent): JsonAsSent<CompletionRequest>,
) -> Result<Response> {
    let started = std::time::Instant::now();
    let model = body.model.clone();
    let asked = (app.inference.caches())
        .then(|| cache::Asked::of_bytes("chat/completions", &sent, &headers))
        .flatten();
    let answer = chat(&app, user, key, &headers, body, asked, started).await;
    let status = match &answer {
        Ok(response) => response.status().as_u16(),
        Err(e) => e.status().as_u16(),
    };
    crate::telemetry::inference_request("chat", &model, status);
    answer
}

async fn chat(
    app: &App,
    user: User,
    key: ApiKey,
    headers: &HeaderMap,
    body: CompletionRequest,
    asked: Option<cache::Asked>,
    started: std::time::Instant,
) -> Result<Response> {
    let account = account(app, &user, &key, headers, &body.model).await?;
    let mut seed = [0u8; 8];
    ids::fill_random(&mut seed);
    let request = body.to_backend(u64::from_le_bytes(seed))?;
    let header = Header {
        id: format!("chatcmpl-{}", ids::random_hex(12)),
        created: ids::now(),
        model: request.model.clone(),
    };
    let mut running = app.inference.chat(account, request, asked).await?;
    let limits = std::mem::take(&mut running.headers);
    let deployment = running.deployment.clone();
    let mut response = if body.stream {
        let include_usage = body.stream_options.is_some_and(|o| o.include_usage);
        openai_sse(chunks(header, running, include_usage, started).await?)
    } else {
        axum::Json(completion(header, running, started).await?).into_response()
    };
    add_headers(&mut response, limits, &deployment);
    Ok(response)
}

/// An inference answer's own headers: the rate limits that applied, and
/// the route's deployment that served, once one has.
pub(super) fn add_headers(
    response: &mut Response,
    limits: HeaderMap,
    deployment: &std::sync::OnceLock<String>,
) {
    response.headers_mut().extend(limits);
    if let Some(value) = deployment.get().and_then(|d| HeaderValue::from_str(d).ok()) {
        response.headers_mut().insert(DEPLOYMENT_HEADER, value);
    }
}

/// The whole completion, in OpenAI's shape, once generation ends.
pub(super) async fn completion(
    header: Header,
    mut running: Running,
    started: std::time::Instant,
) -> Result<Value> {
    let mut text = String::new();
    let mut first = true;
    while let Some(piece) = running.output.recv().await {
        if std::mem::take(&mut first) {
            crate::telemetry::time_to_first_token(&header.model, started.elapsed());
        }
        // A backend that makes whole choices returns them in its result
        // when the client does not stream.
        if let Piece::Text(piece) = piece {
            text.push_str(&piece);
        }
    }
    let result = finished(running.done).await?;
    Ok(header.completion(text, &result))
}

/// How a job ended; a job that vanished is one to retry.
pub(super) async fn finished<T>(done: tokio::sync::oneshot::Receiver<Result<T>>) -> Result<T> {
    done.await
        .map_err(|_| Error::Unavailable("the inference job was dropped; retry".into()))?
}

/// What a chat stream sends: OpenAI's chunks, an error, the end.
pub(super) enum Out {
    Chunk(Value),
    /// The error's body (OpenAI's shape).
    Failed(Value),
    Done,
}

/// Waits for the first piece, so a request that fails before generating (a
/// full queue, a backend error) gets a real status code; then streams the
/// rest as OpenAI's chunks.
pub(super) async fn chunks(
    header: Header,
    mut running: Running,
    include_usage: bool,
    started: std::time::Instant,
) -> Result<mpsc::Receiver<Out>> {
    let Some(first) = running.output.recv().await else {
        let result = finished(running.done).await?;
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut chunks = Chunks::new(header, tx, include_usage);
            let _ = chunks.finish(Ok(result)).await;
        });
        return Ok(rx);
    };
    crate::telemetry::time_to_first_token(&header.model, started.elapsed());
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(pump(Chunks::new(header, tx, include_usage), running, first));
    Ok(rx)
}

/// A chat stream as OpenAI sends it: each chunk a `data:` event, then
/// `data: [DONE]`.
fn openai_sse(rx: mpsc::Receiver<Out>) -> Response {
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let event = match rx.recv().await? {
            Out::Chunk(value) | Out::Failed(value) => data(&value),
            Out::Done => Event::default().data("[DONE]"),
        };
        Some((Ok::<_, Infallible>(event), rx))
    });
    Sse::new(events).into_response()
}

/// A server-sent event stream of what `rx` receives.
pub(super) fn sse(rx: mpsc::Receiver<Event>) -> Response {
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(events).into_response()
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

/// Sends chunks until generation ends. When the client goes away, sending
/// fails, `running` is dropped, and the backend stops generating.
async fn pump(mut chunks: Chunks, mut running: Running, first: Piece) {
    let role = json!({"role": "assistant", "content": "", "refusal": null});
    if chunks
        .send(chunks.header.chunk(role, None, chunks.include_usage))
        .await
        .is_err()
    {
        return;
    }
    let mut piece = Some(first);
    while let Some(next) = piece {
        if chunks.put(next).await.is_err() {
            return;
        }
        piece = running.output.recv().await;
    }
    let outcome = finished(running.done).await;
    let _ = chunks.finish(outcome).await;
}

type Sent = std::result::Result<(), mpsc::error::SendError<Out>>;

/// The chunks of one stream. Text is held one piece back so that the last
/// content chunk can carry `finish_reason`, unless the backend streamed
/// whole choices that end themselves.
struct Chunks {
    header: Header,
    tx: mpsc::Sender<Out>,
    include_usage: bool,
    pending: String,
    ended_by_backend: bool,
}

impl Chunks {
    fn new(header: Header, tx: mpsc::Sender<Out>, include_usage: bool) -> Chunks {
        Chunks {
            header,
            tx,
            include_usage,
            pending: String::new(),
            ended_by_backend: false,
        }
    }

    async fn send(&self, chunk: Value) -> Sent {
        self.tx.send(Out::Chunk(chunk)).await
    }

    async fn put(&mut self, piece: Piece) -> Sent {
        match piece {
            Piece::Text(text) => {
                let held = std::mem::replace(&mut self.pending, text);
                if held.is_empty() {
                    return Ok(());
                }
                self.send_text(held, None).await
            }
            Piece::Choice(choice) => {
                let Ok(choice) = serde_json::from_str::<Value>(&choice) else {
                    tracing::warn!(model = %self.header.model, "a backend streamed a choice that is not JSON; dropped");
                    return Ok(());
                };
                let held = std::mem::take(&mut self.pending);
                if !held.is_empty() {
                    self.send_text(held, None).await?;
                }
                if !choice["finish_reason"].is_null() {
                    self.ended_by_backend = true;
                }
                self.send(self.header.raw_chunk(choice, self.include_usage))
                    .await
            }
            // Only the other endpoints' streams have events.
            Piece::Event(..) => Ok(()),
        }
    }

    async fn send_text(&self, text: String, finish: Option<&str>) -> Sent {
        self.send(
            self.header
                .chunk(json!({"content": text}), finish, self.include_usage),
        )
        .await
    }

    async fn finish(&mut self, outcome: Result<ChatResult>) -> Sent {
        let last = std::mem::take(&mut self.pending);
        match outcome {
            Ok(result) => {
                if !self.ended_by_backend {
                    let reason = wire::finish_reason(result.finish_reason);
                    self.send_text(last, Some(reason)).await?;
                } else if !last.is_empty() {
                    self.send_text(last, None).await?;
                }
                if self.include_usage {
                    self.send(self.header.usage_chunk(&result)).await?;
                }
            }
            Err(error) => {
                if !last.is_empty() {
                    self.send_text(last, None).await?;
                }
                self.tx.send(Out::Failed(error.body())).await?;
            }
        }
        self.tx.send(Out::Done).await
    }
}

/// How messages name a key: `API key 'ci' (sy_ab12cd…)`.
fn key_label(key: &ApiKey) -> String {
    format!("API key '{}' ({}…)", key.name, key.prefix)
}

/// Who the request is billed to: the project in the header (the caller must
/// be a member of its team), or the caller's own default project; and
/// whose limits it counts against. A key used outside its lists is a 403.
pub(super) async fn account(
    app: &App,
    user: &User,
    key: &ApiKey,
    headers: &HeaderMap,
    model: &str,
) -> Result<Account> {
    may_use_model(key, model)?;
    let key_limits = (!key.limits.is_none()).then(|| (key.id.clone(), key_label(key), key.limits));
    let Some(billed) = billed_project(headers)? else {
        may_bill(key, None)?;
        return Ok(Account {
            scope: usage::personal_scope(&user.name),
            key_id: key.id.clone(),
            limits: Owners {
                key: key_limits,
                project: None,
            },
        });
    };
    may_bill(key, Some(&billed))?;
    let (team, project) = (billed.team, billed.project);
    if app
        .access
        .require_team(user, team, Role::Member)
        .await
        .is_err()
    {
        return Err(Error::PermissionDenied(format!(
            "you are not a member of team '{team}', so you cannot use its project '{project}'"
        )));
    }
    let found = app.access.project(team, project).await?;
    let project_limits = Some((format!("{team}/{project}"), found.limits));
    Ok(Account {
        scope: usage::project_scope(team, project),
        key_id: key.id.clone(),
        limits: Owners {
            key: key_limits,
            project: project_limits.filter(|(_, l)| !l.is_none()),
        },
    })
}

/// A project named in a request's header.
struct Billed<'a> {
    /// The header that named it.
    header: &'static str,
    team: &'a str,
    project: &'a str,
}

/// The project a request's header names, if one does.
fn billed_project(headers: &HeaderMap) -> Result<Option<Billed<'_>>> {
    let Some((header, value)) = PROJECT_HEADERS
        .iter()
        .find_map(|h| headers.get(*h).map(|v| (*h, v)))
    else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| Error::invalid(header, format!("the {header} header is not valid text")))?;
    let (team, project) = value.split_once('/').ok_or_else(|| {
        Error::invalid(
            header,
            format!("the {header} header must be '<team>/<project>', got '{value}'"),
        )
    })?;
    Ok(Some(Billed {
        header,
        team,
        project,
    }))
}

/// A 403 unless `key` may use `model`.
fn may_use_model(key: &ApiKey, model: &str) -> Result<()> {
    if may_use(key, model) {
        return Ok(());
    }
    Err(Error::OutOfScope {
        message: format!(
            "the {} may not use the model '{model}'; it may use {}",
            key_label(key),
            key.models.as_deref().unwrap_or_default().join(", ")
        ),
        param: "model".into(),
    })
}

/// A 403 unless `key` may bill `billed` (`None`: the caller's own
/// default project, which a key with a list of projects may not).
fn may_bill(key: &ApiKey, billed: Option<&Billed<'_>>) -> Result<()> {
    let Some(projects) = &key.projects else {
        return Ok(());
    };
    let Some(billed) = billed else {
        return Err(Error::OutOfScope {
            message: format!(
                "the {} may only bill the projects {}; name one in the header '{}: <team>/<project>'",
                key_label(key),
                projects.join(", "),
                PROJECT_HEADERS[0]
            ),
            param: PROJECT_HEADERS[0].into(),
        });
    };
    let value = format!("{}/{}", billed.team, billed.project);
    if projects.contains(&value) {
        return Ok(());
    }
    Err(Error::OutOfScope {
        message: format!(
            "the {} may not bill the project '{value}'; it may bill {}",
            key_label(key),
            projects.join(", ")
        ),
        param: billed.header.into(),
    })
}

/// `GET /v1/teams/{team}/projects/{project}/usage`: totals, by model and by
/// day, and every (day, model, key) row. Team members only.
pub async fn project_usage(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project)): Path<(String, String)>,
) -> Reply<Value> {
    app.access.require_team(&user, &team, Role::Member).await?;
    projects::get(&app.store, &team, &project).await?;
    let rows = usage::rows(&app.store, &usage::project_scope(&team, &project)).await?;
    let mut report = usage_report(rows);
    report["team"] = json!(team);
    report["project"] = json!(project);
    Ok(axum::Json(report))
}

/// `GET /v1/me/usage`: the caller's own requests sent without a project
/// header, in the same shape as a project's usage.
pub async fn my_usage(State(app): State<App>, Caller(user): Caller) -> Reply<Value> {
    let rows = usage::rows(&app.store, &usage::personal_scope(&user.name)).await?;
    let mut report = usage_report(rows);
    report["user"] = json!(user.name);
    Ok(axum::Json(report))
}

fn usage_report(rows: Vec<usage::Row>) -> Value {
    let routed: Vec<usage::Row> = rows
        .iter()
        .filter(|r| !r.deployment.is_empty())
        .cloned()
        .collect();
    json!({
        "total": usage::total(&rows),
        "by_model": usage::group_by(&rows, |r| &r.model),
        "by_day": usage::group_by(&rows, |r| &r.day),
        "by_key": usage::group_by(&rows, |r| &r.key_id),
        "by_deployment": usage::group_by(&routed, |r| &r.deployment),
        "rows": rows,
    })
}

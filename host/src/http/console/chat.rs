//! A chat page for the served models. With script, the reply streams in as
//! the backend makes it (`/chat/stream`, plain text) and can be stopped;
//! without, the form posts to `/chat` and the whole reply comes back in the
//! page. The conversation so far travels in the form (a hidden JSON field),
//! so the page keeps it without storing anything. Requests are billed to
//! the user's own usage, as API calls without a project are.

use askama::Template;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::{Failed, Nav, Posted, Shown, Viewer, page};
use crate::app::App;
use crate::domain::auth;
use crate::error::Error;
use crate::http::inference::account;
use crate::inference::Running;
use crate::inference::backend::{ChatRequest, Message, Piece};

/// The longest reply the page asks for.
const MAX_TOKENS: u32 = 256;

/// The most turns a conversation carries; older ones are the user's to
/// drop by starting a new one.
const MAX_TURNS: usize = 100;

/// One message of the conversation, as the page keeps it.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    role: String,
    content: String,
}

#[derive(Template)]
#[template(path = "console/chat.html")]
struct ChatPage {
    nav: Option<Nav>,
    csrf: String,
    models: Vec<String>,
    model: String,
    message: String,
    turns: Vec<Turn>,
    /// `turns` as the form sends it back.
    conversation: String,
    status: String,
    error: Option<String>,
}

fn chat_page(app: &App, viewer: &Viewer, asked: Asked, answer: Result<String, Error>) -> Response {
    let models: Vec<String> = app.inference.models().into_iter().map(|m| m.id).collect();
    let Asked {
        model,
        message,
        mut turns,
    } = asked;
    let (message, error) = match answer {
        Ok(reply) => {
            if !message.is_empty() {
                turns.push(Turn::new("user", message));
                turns.push(Turn::new("assistant", reply));
            }
            (String::new(), None)
        }
        Err(e) => (message, Some(e.to_string())),
    };
    page(
        StatusCode::OK,
        &ChatPage {
            nav: Some(viewer.nav()),
            csrf: viewer.csrf().to_string(),
            model: if model.is_empty() {
                models.first().cloned().unwrap_or_default()
            } else {
                model
            },
            models,
            message,
            conversation: serde_json::to_string(&turns).unwrap_or_else(|_| "[]".into()),
            turns,
            status: String::new(),
            error,
        },
    )
}

impl Turn {
    fn new(role: &str, content: String) -> Turn {
        Turn {
            role: role.into(),
            content,
        }
    }
}

/// What the form asked.
#[derive(Default)]
struct Asked {
    model: String,
    message: String,
    /// The conversation before `message`.
    turns: Vec<Turn>,
}

impl Asked {
    fn of(posted: &Posted) -> Result<Asked, Error> {
        Ok(Asked {
            model: posted.field("model").to_string(),
            message: posted.field("message").to_string(),
            turns: conversation(posted.field("conversation"))?,
        })
    }

    /// Starts the request on the inference queue for `viewer`.
    async fn start(&self, app: &App, viewer: &Viewer, streamed: bool) -> Result<Running, Error> {
        if self.message.trim().is_empty() {
            return Err(Error::invalid("message", "write a message to send"));
        }
        let mut seed = [0u8; 8];
        crate::ids::fill_random(&mut seed);
        let request = ChatRequest {
            model: self.model.clone(),
            messages: self
                .turns
                .iter()
                .map(|t| (t.role.as_str(), &t.content))
                .chain([("user", &self.message)])
                .map(|(role, content)| Message {
                    role: role.into(),
                    content: content.clone(),
                    extra: None,
                })
                .collect(),
            max_tokens: Some(MAX_TOKENS),
            temperature: None,
            top_p: None,
            seed: Some(u64::from_le_bytes(seed)),
            stop: Vec::new(),
            streamed,
            extra: None,
        };
        // As the API would bill the key the session signed in with.
        let key = auth::session_key(&app.store, &viewer.user, &viewer.session.key_id).await?;
        let no_project = axum::http::HeaderMap::new();
        let account = account(app, &viewer.user, &key, &no_project, &self.model).await?;
        app.inference.chat(account, request, None).await
    }
}

/// `GET /chat`.
pub async fn show(State(app): State<App>, viewer: Viewer) -> Shown {
    Ok(chat_page(
        &app,
        &viewer,
        Asked::default(),
        Ok(String::new()),
    ))
}

/// `POST /chat`: the whole reply, in the page (without script).
pub async fn send(State(app): State<App>, posted: Posted) -> Shown {
    let (asked, answer) = match Asked::of(&posted) {
        Ok(asked) => {
            let answer = match asked.start(&app, &posted.viewer, false).await {
                Ok(running) => collect(running).await,
                Err(e) => Err(e),
            };
            (asked, answer)
        }
        // An unreadable conversation is dropped, the message kept.
        Err(e) => (
            Asked {
                model: posted.field("model").to_string(),
                message: posted.field("message").to_string(),
                turns: Vec::new(),
            },
            Err(e),
        ),
    };
    match answer {
        Err(e @ Error::Internal(_)) => Err(Failed::new(e, &posted.viewer)),
        answer => Ok(chat_page(&app, &posted.viewer, asked, answer)),
    }
}

async fn collect(mut running: Running) -> Result<String, Error> {
    let mut text = String::new();
    while let Some(piece) = running.output.recv().await {
        if let Piece::Text(piece) = piece {
            text.push_str(&piece);
        }
    }
    running
        .done
        .await
        .map_err(|_| Error::Unavailable("the inference job was dropped; retry".into()))??;
    Ok(text)
}

/// `POST /chat/stream`: the reply as plain text, sent as it is made; a
/// failure before it starts is the API's JSON error, one after ends the text
/// with a line saying what went wrong.
pub async fn stream(State(app): State<App>, posted: Posted) -> Response {
    let started = match Asked::of(&posted) {
        Ok(asked) => asked.start(&app, &posted.viewer, true).await,
        Err(e) => Err(e),
    };
    let running = match started {
        Ok(running) => running,
        // The API's error body: the script shows its message.
        Err(e) => return e.into_response(),
    };
    let Running { output, done, .. } = running;
    let text = tokio_stream_of(output).map(|piece| match piece {
        Piece::Text(text) => text,
        Piece::Choice(_) | Piece::Event(..) => String::new(),
    });
    let ending = futures_util::stream::once(async move {
        match done.await {
            Ok(Ok(_)) => String::new(),
            Ok(Err(e)) => format!("\n[failed: {e}]"),
            Err(_) => "\n[failed: the inference job was dropped; retry]".into(),
        }
    });
    let body = text
        .chain(ending)
        .map(|s| Ok::<_, std::convert::Infallible>(s.into_bytes()));
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The conversation field: a JSON array of `{"role", "content"}`, the roles
/// `user` and `assistant`; empty is a new conversation.
fn conversation(field: &str) -> Result<Vec<Turn>, Error> {
    let unreadable = |why: String| {
        Error::invalid(
            "conversation",
            format!("{why}; start a new conversation (reload /chat)"),
        )
    };
    if field.trim().is_empty() {
        return Ok(Vec::new());
    }
    let turns: Vec<Turn> = serde_json::from_str(field)
        .map_err(|e| unreadable(format!("the conversation is not a list of turns ({e})")))?;
    if turns.len() > MAX_TURNS {
        return Err(unreadable(format!(
            "the conversation has {} turns, more than {MAX_TURNS}",
            turns.len()
        )));
    }
    if let Some(t) = turns
        .iter()
        .find(|t| t.role != "user" && t.role != "assistant")
    {
        return Err(unreadable(format!(
            "a turn's role is '{}', and only 'user' and 'assistant' are kept",
            t.role
        )));
    }
    Ok(turns)
}

/// The pieces a backend sends, as a stream.
fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Piece>,
) -> impl futures_util::Stream<Item = Piece> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

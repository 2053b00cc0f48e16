//! A chat page for the served models. With script, the reply streams in as
//! the backend makes it (`/chat/stream`, plain text); without, the form
//! posts to `/chat` and the whole reply comes back in the page. Requests
//! are billed to the user's own usage, as API calls without a project are.

use askama::Template;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::{Failed, Nav, Posted, Shown, Viewer, page};
use crate::app::App;
use crate::error::Error;
use crate::inference::Running;
use crate::inference::backend::{ChatRequest, Message, Piece};
use crate::inference::usage::{self, Account};

/// The longest reply the page asks for.
const MAX_TOKENS: u32 = 256;

#[derive(Template)]
#[template(path = "console/chat.html")]
struct ChatPage {
    nav: Option<Nav>,
    csrf: String,
    models: Vec<String>,
    model: String,
    message: String,
    reply: String,
    status: String,
    error: Option<String>,
}

fn chat_page(app: &App, viewer: &Viewer, asked: Asked, answer: Result<String, Error>) -> Response {
    let models: Vec<String> = app.inference.models().into_iter().map(|m| m.id).collect();
    let (reply, error) = match answer {
        Ok(reply) => (reply, None),
        Err(e) => (String::new(), Some(e.to_string())),
    };
    page(
        StatusCode::OK,
        &ChatPage {
            nav: Some(viewer.nav()),
            csrf: viewer.csrf().to_string(),
            model: if asked.model.is_empty() {
                models.first().cloned().unwrap_or_default()
            } else {
                asked.model
            },
            models,
            message: asked.message,
            reply,
            status: String::new(),
            error,
        },
    )
}

/// What the form asked.
#[derive(Default)]
struct Asked {
    model: String,
    message: String,
}

impl Asked {
    fn of(posted: &Posted) -> Asked {
        Asked {
            model: posted.field("model").to_string(),
            message: posted.field("message").to_string(),
        }
    }

    /// Starts the request on the inference queue for `viewer`.
    fn start(&self, app: &App, viewer: &Viewer, streamed: bool) -> Result<Running, Error> {
        if self.message.trim().is_empty() {
            return Err(Error::invalid("message", "write a message to send"));
        }
        let mut seed = [0u8; 8];
        crate::ids::fill_random(&mut seed);
        let request = ChatRequest {
            model: self.model.clone(),
            messages: vec![Message {
                role: "user".into(),
                content: self.message.clone(),
                extra: None,
            }],
            max_tokens: Some(MAX_TOKENS),
            temperature: None,
            top_p: None,
            seed: Some(u64::from_le_bytes(seed)),
            stop: Vec::new(),
            streamed,
            extra: None,
        };
        let account = Account {
            scope: usage::personal_scope(&viewer.user.name),
            key_id: "console".into(),
        };
        app.inference.chat(account, request)
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
    let asked = Asked::of(&posted);
    let answer = match asked.start(&app, &posted.viewer, false) {
        Ok(running) => collect(running).await,
        Err(e) => Err(e),
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
    let running = match Asked::of(&posted).start(&app, &posted.viewer, true) {
        Ok(running) => running,
        // The API's error body: the script shows its message.
        Err(e) => return e.into_response(),
    };
    let Running { output, done } = running;
    let text = tokio_stream_of(output).map(|piece| match piece {
        Piece::Text(text) => text,
        Piece::Choice(_) => String::new(),
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

/// The pieces a backend sends, as a stream.
fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Piece>,
) -> impl futures_util::Stream<Item = Piece> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

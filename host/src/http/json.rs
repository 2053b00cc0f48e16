//! Body extractors: the one place request bodies are read and parsed.

use axum::extract::{FromRequest, OptionalFromRequest, Request};
use axum::http::header;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use crate::app::App;
use crate::error::{Error, Result};
use crate::nesting::{self, MAX_DEPTH};

/// A request body parsed as JSON, with errors that say where it broke.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned> FromRequest<App> for Json<T> {
    type Rejection = Error;

    async fn from_request(request: Request, app: &App) -> Result<Self> {
        require_content_type(&request, "application/json")?;
        let body = read_body(request, app, app.cfg.limits.max_body_bytes).await?;
        parse(&body).map(Json)
    }
}

/// A JSON body parsed as `T`, and its bytes as sent: for the response
/// cache, whose key is every field the client sent (read only when the
/// cache is on).
pub struct JsonAsSent<T>(pub T, pub Bytes);

impl<T: DeserializeOwned> FromRequest<App> for JsonAsSent<T> {
    type Rejection = Error;

    async fn from_request(request: Request, app: &App) -> Result<Self> {
        require_content_type(&request, "application/json")?;
        let body = read_body(request, app, app.cfg.limits.max_body_bytes).await?;
        Ok(JsonAsSent(parse(&body)?, body))
    }
}

/// `Option<Json<T>>`: an empty body without a Content-Type is `None`, for
/// endpoints whose body is optional.
impl<T: DeserializeOwned> OptionalFromRequest<App> for Json<T> {
    type Rejection = Error;

    async fn from_request(request: Request, app: &App) -> Result<Option<Self>> {
        let typed = request.headers().contains_key(header::CONTENT_TYPE);
        if typed {
            require_content_type(&request, "application/json")?;
        }
        let body = read_body(request, app, app.cfg.limits.max_body_bytes).await?;
        if body.is_empty() && !typed {
            return Ok(None);
        }
        if !typed {
            return Err(Error::UnsupportedMediaType(
                "the request has a body but no Content-Type; send 'Content-Type: application/json'"
                    .into(),
            ));
        }
        parse(&body).map(|v| Some(Json(v)))
    }
}

/// A WebAssembly component uploaded as `application/wasm` (or, as generic
/// clients send binaries, `application/octet-stream`), up to
/// `plugins.max_upload_bytes`.
pub struct WasmBody(pub Bytes);

impl FromRequest<App> for WasmBody {
    type Rejection = Error;

    async fn from_request(request: Request, app: &App) -> Result<Self> {
        if require_content_type(&request, "application/octet-stream").is_err() {
            require_content_type(&request, "application/wasm")?;
        }
        read_body(request, app, app.cfg.plugins.max_upload_bytes)
            .await
            .map(WasmBody)
    }
}

/// Reads the whole body, refusing more than `limit` bytes or a client slower
/// than `limits.body_read_timeout_ms`.
async fn read_body(request: Request, app: &App, limit: usize) -> Result<Bytes> {
    read_all(request.into_body(), app, limit).await
}

/// [`read_body`] for a body already taken from its request.
pub async fn read_all(body: axum::body::Body, app: &App, limit: usize) -> Result<Bytes> {
    let read = Limited::new(body, limit).collect();
    let body = tokio::time::timeout(app.cfg.limits.body_read_timeout(), read)
        .await
        .map_err(|_| {
            Error::RequestTimeout(format!(
                "the request body was not received within {} ms",
                app.cfg.limits.body_read_timeout_ms
            ))
        })?
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                Error::PayloadTooLarge { limit }
            } else {
                Error::InvalidRequest {
                    message: format!("could not read the request body: {e}"),
                    param: None,
                }
            }
        })?;
    Ok(body.to_bytes())
}

fn require_content_type(request: &Request, expected: &str) -> Result<()> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case(expected) {
        return Ok(());
    }
    let got = if content_type.is_empty() {
        "no Content-Type".to_string()
    } else {
        format!("Content-Type '{content_type}'")
    };
    Err(Error::UnsupportedMediaType(format!(
        "the request has {got}; send 'Content-Type: {expected}'"
    )))
}

/// Parses `bytes` as a `T`, naming the field and position of any failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if nesting::depth(bytes) > MAX_DEPTH {
        return Err(Error::InvalidJson {
            message: format!(
                "the request body nests arrays and objects more than {MAX_DEPTH} levels deep; flatten it"
            ),
            param: None,
        });
    }
    // serde reads a struct from an array too (`[1, 2]` fills the fields in
    // order); every body of this API is an object, so anything else is refused.
    if !bytes.trim_ascii_start().starts_with(b"{") {
        return Err(Error::InvalidJson {
            message: "the request body must be a JSON object, such as {\"name\": \"...\"}".into(),
            param: None,
        });
    }
    // Read plainly first: tracking the path costs about as much as the
    // reading, and only a failure needs it, so a failure is read again.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = match serde::Deserialize::deserialize(&mut de) {
        Ok(value) => value,
        Err(_) => return Err(explained::<T>(bytes)),
    };
    de.end().map_err(|e| Error::InvalidJson {
        message: format!("the request body has data after the JSON value: {e}"),
        param: None,
    })?;
    match super::nul::in_json(bytes) {
        Some(refused) => Err(refused),
        None => Ok(value),
    }
}

/// Why `bytes` is not a `T`, naming the field that failed.
fn explained<T: DeserializeOwned>(bytes: &[u8]) -> Error {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Err(e) = serde_path_to_error::deserialize::<_, T>(&mut de) else {
        // Reading is deterministic: these bytes failed a moment ago.
        return Error::InvalidJson {
            message: "the request body is not valid JSON for this endpoint".into(),
            param: None,
        };
    };
    let path = e.path().to_string();
    let inner = e.into_inner();
    if inner.is_data() && path != "." {
        Error::InvalidJson {
            message: format!("invalid value for field '{path}': {inner}"),
            param: Some(path),
        }
    } else {
        Error::InvalidJson {
            message: format!("the request body is not valid JSON for this endpoint: {inner}"),
            param: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[expect(
        dead_code,
        reason = "the fields are read by serde only, to test its refusals"
    )]
    struct Body {
        name: String,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[expect(
        dead_code,
        reason = "the fields are read by serde only, to test its refusals"
    )]
    struct Inner {
        size: u32,
    }

    fn message(bytes: &[u8]) -> (String, Option<String>) {
        match parse::<Body>(bytes).unwrap_err() {
            Error::InvalidJson { message, param } => (message, param),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn syntax_errors_give_the_position() {
        let (msg, param) = message(b"{\"name\": \"a\",\n  oops}");
        assert!(msg.contains("line 2 column 3"), "{msg}");
        assert_eq!(param, None);
    }

    #[test]
    fn type_errors_name_the_nested_field() {
        let (msg, param) = message(br#"{"name":"a","inner":{"size":"big"}}"#);
        assert_eq!(param.as_deref(), Some("inner.size"), "{msg}");
    }

    #[test]
    fn unknown_fields_are_named() {
        let (msg, _) = message(br#"{"name":"a","colour":1}"#);
        assert!(msg.contains("colour"), "{msg}");
    }

    #[test]
    fn bodies_nested_too_deeply_are_refused() {
        let deep = format!("{}{}", "[".repeat(33), "]".repeat(33));
        let (msg, _) = message(deep.as_bytes());
        assert!(msg.contains("more than 32 levels"), "{msg}");
    }

    #[test]
    fn bodies_that_are_not_objects_are_refused() {
        for body in [&br#"["a", null]"#[..], b" 7", b"\"a\"", b"null"] {
            let (msg, param) = message(body);
            assert!(msg.contains("must be a JSON object"), "{msg}");
            assert_eq!(param, None);
        }
    }

    #[test]
    fn trailing_data_is_rejected() {
        let (msg, _) = message(br#"{"name":"a"} {}"#);
        assert!(msg.contains("after the JSON value"), "{msg}");
    }
}

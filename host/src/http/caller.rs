//! Who is calling: the `Authorization: Bearer <key>` extractor.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use crate::app::App;
use crate::domain::auth::{ApiKey, User};
use crate::error::{Error, Result};

/// The authenticated user behind a request. Taking a `Caller` makes a handler
/// require a valid API key.
pub struct Caller(pub User);

/// A [`Caller`] together with the API key it presented, for handlers that
/// account per key and honour its scope and limits.
pub struct KeyedCaller {
    /// The user.
    pub user: User,
    /// The presented key's record.
    pub key: ApiKey,
}

impl FromRequestParts<App> for Caller {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self> {
        let keyed = KeyedCaller::from_request_parts(parts, app).await?;
        Ok(Caller(keyed.user))
    }
}

impl FromRequestParts<App> for KeyedCaller {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self> {
        let key = presented_key(&parts.headers)?;
        let (user, record) = app.access.authenticate_key(key).await?;
        if let Some(slot) = parts.extensions.get::<super::observe::CallerSlot>() {
            slot.set(&user.id);
        }
        Ok(KeyedCaller { user, key: record })
    }
}

/// The key in `Authorization: Bearer …`, or (as Anthropic's clients send
/// it) in `x-api-key`.
fn presented_key(headers: &axum::http::HeaderMap) -> Result<&str> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return match headers.get("x-api-key").map(|v| v.to_str()) {
            Some(Ok(key)) if !key.trim().is_empty() => Ok(key.trim()),
            Some(_) => Err(Error::Unauthenticated(
                "the x-api-key header is empty or not valid text".into(),
            )),
            None => Err(Error::Unauthenticated(
                "no API key: send 'Authorization: Bearer <API_KEY>' (or 'x-api-key: <API_KEY>')"
                    .into(),
            )),
        };
    };
    let value = value
        .to_str()
        .map_err(|_| Error::Unauthenticated("the Authorization header is not valid text".into()))?;
    bearer_token(value).ok_or_else(|| {
        Error::Unauthenticated("the Authorization header must be 'Bearer <API_KEY>'".into())
    })
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn parses_bearer_tokens() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}

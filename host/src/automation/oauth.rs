//! OAuth2's client credentials grant (RFC 6749 §4.4), for receivers that
//! accept nothing else: a token from the receiver's authorization server,
//! kept until shortly before it expires and shared by every send of this
//! host. The request itself goes through the sender, under the SSRF guard
//! and the proxy like any delivery (`send.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// A webhook's client, its secret opened.
#[derive(Clone)]
pub struct Client {
    /// The token endpoint.
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    /// The client's secret.
    pub client_secret: String,
    /// The scope asked for.
    pub scope: Option<String>,
}

impl Client {
    /// Which cached token serves it: a new secret or scope is a new client.
    fn key(&self) -> String {
        let mut hash = Sha256::new();
        for part in [&self.token_url, &self.client_id, &self.client_secret] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        hash.update(self.scope.as_deref().unwrap_or_default().as_bytes());
        hex::encode(hash.finalize())
    }
}

/// What a token endpoint granted.
pub struct Granted {
    /// The access token.
    pub token: String,
    /// Its lifetime (`expires_in`), when the server said.
    pub lifetime: Option<Duration>,
}

/// The longest a token is kept: a server that gives no lifetime is asked
/// again after this (or at its first 401).
const LONGEST: Duration = Duration::from_secs(3600);

/// Tokens by client. One fetch at a time per client: the sends that find
/// no token wait for the one fetch rather than each asking the server.
#[derive(Default)]
pub struct Tokens {
    by_client: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Kept>>>>>,
}

struct Kept {
    token: String,
    until: Instant,
}

impl Tokens {
    /// A token for `client`: the one kept, unless it is `stale` (its
    /// receiver answered 401 to it) or expires soon; else what `fetch`
    /// gets, kept for next time.
    pub async fn token<E>(
        &self,
        client: &Client,
        stale: Option<&str>,
        fetch: impl AsyncFnOnce() -> Result<Granted, E>,
    ) -> Result<String, E> {
        let slot = {
            let mut map = self.by_client.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(client.key()).or_default().clone()
        };
        let mut kept = slot.lock().await;
        if let Some(k) = &*kept
            && k.until > Instant::now()
            && Some(k.token.as_str()) != stale
        {
            return Ok(k.token.clone());
        }
        let granted = fetch().await?;
        let lifetime = granted.lifetime.unwrap_or(LONGEST).min(LONGEST);
        // Replaced a little before it expires: a fifth of its life, at
        // most 30 s, so a send never carries one that lapses on the way.
        let early = (lifetime / 5).min(Duration::from_secs(30));
        *kept = Some(Kept {
            token: granted.token.clone(),
            until: Instant::now() + lifetime - early,
        });
        Ok(granted.token)
    }
}

/// The token in a token endpoint's JSON answer (RFC 6749 §5.1), or why
/// there is none.
pub fn read_grant(status: u16, body: &str) -> Result<Granted, String> {
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    if !(200..300).contains(&status) {
        // §5.2: an error code, and perhaps a description.
        let said = [&json["error"], &json["error_description"]]
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(": ");
        let said = if said.is_empty() {
            String::new()
        } else {
            format!(" ({said})")
        };
        return Err(format!(
            "the token endpoint answered {status}{said}; check the client id, its secret and the scope"
        ));
    }
    let Some(token) = json["access_token"].as_str().filter(|t| !t.is_empty()) else {
        return Err("the token endpoint's answer has no access_token".into());
    };
    let kind = json["token_type"].as_str().unwrap_or("Bearer");
    if !kind.eq_ignore_ascii_case("bearer") {
        return Err(format!(
            "the token endpoint gave a '{kind}' token; only Bearer tokens can be sent"
        ));
    }
    Ok(Granted {
        token: token.to_string(),
        lifetime: json["expires_in"].as_u64().map(Duration::from_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(secret: &str) -> Client {
        Client {
            token_url: "https://auth.example.com/token".into(),
            client_id: "switchyard".into(),
            client_secret: secret.into(),
            scope: None,
        }
    }

    #[tokio::test]
    async fn a_token_is_kept_until_stale_and_a_new_secret_asks_again() {
        let tokens = Tokens::default();
        let fetched = std::sync::atomic::AtomicU32::new(0);
        let get = async |c: &Client, stale: Option<&str>| {
            tokens
                .token(c, stale, async || {
                    let n = fetched.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, String>(Granted {
                        token: format!("t{n}"),
                        lifetime: Some(Duration::from_secs(60)),
                    })
                })
                .await
                .unwrap()
        };
        assert_eq!(get(&client("a"), None).await, "t0");
        assert_eq!(get(&client("a"), None).await, "t0", "kept");
        assert_eq!(
            get(&client("a"), Some("t9")).await,
            "t0",
            "another token went stale"
        );
        assert_eq!(
            get(&client("a"), Some("t0")).await,
            "t1",
            "refreshed after a 401"
        );
        assert_eq!(
            get(&client("b"), None).await,
            "t2",
            "a new secret is a new client"
        );
    }

    #[test]
    fn a_grant_is_read_as_rfc_6749_says_and_errors_say_why() {
        let ok = read_grant(
            200,
            r#"{"access_token":"x","token_type":"bearer","expires_in":5}"#,
        );
        let ok = ok.unwrap();
        assert_eq!(
            (ok.token.as_str(), ok.lifetime),
            ("x", Some(Duration::from_secs(5)))
        );
        let refused = read_grant(401, r#"{"error":"invalid_client"}"#)
            .err()
            .unwrap();
        assert!(
            refused.contains("answered 401 (invalid_client)"),
            "{refused}"
        );
        assert!(
            read_grant(200, "{}")
                .err()
                .unwrap()
                .contains("no access_token")
        );
        let mac = read_grant(200, r#"{"access_token":"x","token_type":"mac"}"#);
        assert!(mac.err().unwrap().contains("only Bearer"));
    }
}

//! Sending one webhook request: the same code for the webhook test and for
//! deliveries, so a test is signed and authorised exactly like the real thing.
//!
//! The SSRF guard runs again here, on the addresses a name resolves to at
//! send time (a name that pointed somewhere public when the webhook was saved
//! may point inside now), and redirects are not followed. Through a forward
//! proxy (`[delivery] proxy`) the proxy connects, so the target's name is
//! resolved and judged here first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use reqwest::header::{
    AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT,
};
use serde::Serialize;
use sha2::Digest;

use super::oauth::{self, Tokens};
use super::{signature, ssrf};

/// The header carrying the delivery id, the same on every retry.
pub const DELIVERY_ID_HEADER: &str = "x-service-delivery";

/// One request to send.
pub struct Outgoing<'a> {
    /// The webhook URL.
    pub url: &'a str,
    /// The exact body bytes (JSON).
    pub body: &'a [u8],
    /// Sent as `Authorization: Bearer …`.
    pub bearer: Option<&'a str>,
    /// Where the bearer token comes from instead: OAuth2's client
    /// credentials.
    pub oauth: Option<&'a oauth::Client>,
    /// The client certificate to present and the CA to trust.
    pub tls: Option<&'a ClientTls>,
    /// What signs it: `X-Service-Signature` (and `-Previous`), and the
    /// Standard Webhooks signatures.
    pub keys: signature::Keys<'a>,
    /// The webhook's own headers, secrets in (see `headers.rs`).
    pub headers: &'a [(HeaderName, HeaderValue)],
    /// Sent as `X-Service-Delivery` (and `webhook-id`).
    pub delivery_id: &'a str,
    /// Also send the Standard Webhooks headers (sent anyway with an Ed25519
    /// key, whose signature lives in them).
    pub standard: bool,
}

/// What the endpoint answered.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body as text, cut at the configured limit.
    pub body: String,
    /// Whether `body` was cut.
    pub truncated: bool,
    /// Milliseconds from sending to the end of the (possibly cut) body.
    pub latency_ms: f64,
    /// `Retry-After`, when the endpoint sent one.
    #[serde(skip)]
    pub retry_after: Option<Duration>,
}

/// Why there is no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// The SSRF guard refused the target.
    #[error("{0}")]
    Refused(String),
    /// No connection could be made.
    #[error("could not connect to {url}: {message}; check the URL and that the endpoint is up")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// No OAuth2 token for the receiver.
    #[error("could not get an OAuth2 token from {token_url}: {message}")]
    Token {
        /// The token endpoint.
        token_url: String,
        /// Why.
        message: String,
    },
    /// No complete answer in time.
    #[error("{url} did not answer within {timeout_ms} ms")]
    Timeout {
        /// The URL.
        url: String,
        /// The limit.
        timeout_ms: u64,
    },
    /// Anything else on the wire.
    #[error("request to {url} failed: {message}")]
    Other {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
}

/// Sends webhook requests under the SSRF guard.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    allow: Arc<Vec<IpNet>>,
    timeout: Duration,
    max_body: usize,
    /// Where requests leave from, for the clients made per certificate.
    proxy: Option<(url::Url, String)>,
    /// OAuth2 tokens, shared by every send.
    tokens: Arc<Tokens>,
    /// A client per client certificate and CA (see [`ClientTls::key`]).
    with_tls: Arc<Mutex<HashMap<String, reqwest::Client>>>,
}

/// A webhook's client certificate and key and its receiver's CA, opened
/// (PEM).
#[derive(Clone, Default)]
pub struct ClientTls {
    /// The certificate (chain) and its key.
    pub identity: Option<(String, String)>,
    /// The CA certificate(s) trusted besides the public roots.
    pub ca: Option<String>,
}

/// What TLS a client presents and trusts, as reqwest takes it.
type TlsParts = (Option<reqwest::Identity>, Vec<reqwest::Certificate>);

impl ClientTls {
    /// What reqwest makes of it, or the part that is wrong and why.
    pub fn parts(&self) -> Result<TlsParts, (&'static str, String)> {
        let identity = match &self.identity {
            None => None,
            Some((cert, key)) => {
                let pem = format!("{}\n{}", cert.trim(), key.trim());
                let identity = reqwest::Identity::from_pem(pem.as_bytes()).map_err(|e| {
                    let why = format!(
                        "is not a PEM certificate with its PEM private key: {}",
                        error_chain(&e)
                    );
                    ("client_cert_secret", why)
                })?;
                Some(identity)
            }
        };
        let roots = match &self.ca {
            None => Vec::new(),
            Some(ca) => reqwest::Certificate::from_pem_bundle(ca.as_bytes())
                .ok()
                .filter(|roots| !roots.is_empty())
                .ok_or((
                    "ca_secret",
                    "is not one or more PEM certificates".to_string(),
                ))?,
        };
        Ok((identity, roots))
    }

    /// Which client serves it: another certificate, key or CA is another.
    fn key(&self) -> String {
        let mut hash = sha2::Sha256::new();
        for part in [
            self.identity.as_ref().map(|i| i.0.as_str()),
            self.identity.as_ref().map(|i| i.1.as_str()),
            self.ca.as_deref(),
        ] {
            hash.update(part.unwrap_or_default().as_bytes());
            hash.update([0]);
        }
        hex::encode(hash.finalize())
    }
}

/// Where requests leave from: through `proxy` (an `http://` forward
/// proxy, CONNECT for `https://` targets), but for the hosts `no_proxy`
/// names; directly when there is no proxy. The environment's proxy
/// variables are never read: the egress is what the configuration says.
#[derive(Debug, Clone, Copy, Default)]
pub struct Egress<'a> {
    /// The proxy's URL (see `DeliveryConfig::proxy_url`).
    pub proxy: Option<&'a url::Url>,
    /// Hosts reached directly.
    pub no_proxy: &'a [String],
}

impl Sender {
    /// A sender that allows `allow` internal ranges, gives each request
    /// `timeout`, keeps at most `max_body` bytes of each response, and
    /// leaves by `egress`.
    pub fn new(
        allow: Vec<IpNet>,
        timeout: Duration,
        max_body: usize,
        egress: Egress<'_>,
    ) -> anyhow::Result<Sender> {
        let mut sender = Sender {
            client: reqwest::Client::new(),
            allow: Arc::new(allow),
            timeout,
            max_body,
            proxy: (egress.proxy.cloned()).map(|p| (p, egress.no_proxy.join(","))),
            tokens: Arc::default(),
            with_tls: Arc::default(),
        };
        sender.client = sender.build(None)?;
        Ok(sender)
    }

    /// A client under the guard, leaving by the egress, presenting and
    /// trusting what `tls` says.
    fn build(&self, tls: Option<TlsParts>) -> reqwest::Result<reqwest::Client> {
        // The proxy is the operator's: its own name is not a target.
        let resolver = GuardedResolver {
            allow: self.allow.clone(),
            proxy_host: (self.proxy.as_ref()).and_then(|(p, _)| p.host_str().map(str::to_string)),
        };
        let mut builder = reqwest::Client::builder()
            .dns_resolver(Arc::new(resolver))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .connect_timeout(self.timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .no_proxy();
        if let Some((proxy, no_proxy)) = &self.proxy {
            let except = reqwest::NoProxy::from_string(no_proxy);
            builder = builder.proxy(reqwest::Proxy::all(proxy.as_str())?.no_proxy(except));
        }
        if let Some((identity, roots)) = tls {
            builder = builder.use_rustls_tls();
            if let Some(identity) = identity {
                builder = builder.identity(identity);
            }
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        builder.build()
    }

    /// The client for `tls`: the shared one without, else one made for
    /// that certificate and CA and kept.
    fn client(&self, tls: Option<&ClientTls>) -> Result<reqwest::Client, Failure> {
        let Some(tls) = tls else {
            return Ok(self.client.clone());
        };
        let key = tls.key();
        let mut map = self.with_tls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = map.get(&key) {
            return Ok(client.clone());
        }
        let refused =
            |(part, why): (&str, String)| Failure::Refused(format!("the webhook's {part} {why}"));
        let parts = tls.parts().map_err(refused)?;
        let client = self
            .build(Some(parts))
            .map_err(|e| refused(("TLS", error_chain(&e))))?;
        map.insert(key, client.clone());
        Ok(client)
    }

    /// How long one request may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends `out` as a signed `POST`. With OAuth2, a receiver that
    /// answers 401 gets the request once more with a fresh token.
    pub async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, Failure> {
        let url = self.target(out.url).await?;
        let http = self.client(out.tls)?;
        let Some(client) = out.oauth else {
            return self.post(&http, url, out, out.bearer).await;
        };
        let token = self.token(&http, client, None).await?;
        let answer = self.post(&http, url.clone(), out, Some(&token)).await?;
        if answer.status != 401 {
            return Ok(answer);
        }
        let fresh = self.token(&http, client, Some(&token)).await?;
        self.post(&http, url, out, Some(&fresh)).await
    }

    /// `raw` parsed, once the SSRF guard allows it. Literal addresses
    /// never reach the resolver, so the URL is checked too; through a
    /// proxy, so is where its name resolves.
    async fn target(&self, raw: &str) -> Result<url::Url, Failure> {
        let url = ssrf::check_url(raw, &self.allow).map_err(Failure::Refused)?;
        if self.proxy.is_some() {
            self.guard_name(&url).await?;
        }
        Ok(url)
    }

    /// A token for `client` (see [`Tokens::token`]), fetched as the
    /// client credentials grant says: a form POST with the client's id
    /// and secret as HTTP Basic credentials.
    async fn token(
        &self,
        http: &reqwest::Client,
        client: &oauth::Client,
        stale: Option<&str>,
    ) -> Result<String, Failure> {
        let failed = |message: String| Failure::Token {
            token_url: client.token_url.clone(),
            message,
        };
        let fetch = async || {
            let url = self
                .target(&client.token_url)
                .await
                .map_err(|f| failed(f.to_string()))?;
            let mut form = vec![("grant_type", "client_credentials")];
            if let Some(scope) = &client.scope {
                form.push(("scope", scope));
            }
            let response = (http.post(url))
                .basic_auth(&client.client_id, Some(&client.client_secret))
                .header(reqwest::header::ACCEPT, "application/json")
                .form(&form)
                .send()
                .await
                .map_err(|e| failed(self.failure(&client.token_url, e).to_string()))?;
            let status = response.status().as_u16();
            let (body, _) = (self.read_body(&client.token_url, response).await)
                .map_err(|f| failed(f.to_string()))?;
            oauth::read_grant(status, &body).map_err(failed)
        };
        self.tokens.token(client, stale, fetch).await
    }

    /// One POST of `out` to `url` on `http`, carrying `bearer`.
    async fn post(
        &self,
        http: &reqwest::Client,
        url: url::Url,
        out: &Outgoing<'_>,
        bearer: Option<&str>,
    ) -> Result<Answer, Failure> {
        let started = Instant::now();
        let response = http
            .post(url)
            .headers(headers(out, bearer))
            .body(out.body.to_vec())
            .send()
            .await
            .map_err(|e| self.failure(out.url, e))?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
        let (body, truncated) = self.read_body(out.url, response).await?;
        Ok(Answer {
            status,
            headers,
            body,
            truncated,
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            retry_after,
        })
    }

    /// Judges where the target's name resolves before a proxy connects
    /// to it: refused if any address is one the guard refuses.
    async fn guard_name(&self, url: &url::Url) -> Result<(), Failure> {
        let Some(url::Host::Domain(host)) = url.host() else {
            return Ok(()); // an address: check_url judged it
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs = tokio::net::lookup_host((host, port)).await.map_err(|e| {
            let (url, message) = (url.to_string(), format!("cannot resolve '{host}': {e}"));
            Failure::Connect { url, message }
        })?;
        let mut addrs = addrs.peekable();
        let none = addrs.peek().is_none();
        if none || addrs.any(|a| !ssrf::allowed(a.ip(), &self.allow)) {
            let host = host.to_string();
            return Err(Failure::Refused(Refusal { host }.to_string()));
        }
        Ok(())
    }

    async fn read_body(
        &self,
        url: &str,
        mut response: reqwest::Response,
    ) -> Result<(String, bool), Failure> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.failure(url, e))? {
            body.extend_from_slice(&chunk);
            if body.len() > self.max_body {
                body.truncate(self.max_body);
                return Ok((String::from_utf8_lossy(&body).into_owned(), true));
            }
        }
        Ok((String::from_utf8_lossy(&body).into_owned(), false))
    }

    fn failure(&self, url: &str, e: reqwest::Error) -> Failure {
        let url = url.to_string();
        if e.is_timeout() {
            return Failure::Timeout {
                url,
                timeout_ms: self.timeout.as_millis() as u64,
            };
        }
        if let Some(refusal) = find_source::<Refusal>(&e) {
            return Failure::Refused(refusal.to_string());
        }
        let message = error_chain(&e);
        if e.is_connect() {
            Failure::Connect { url, message }
        } else {
            Failure::Other { url, message }
        }
    }
}

/// `Retry-After` in either of its forms: delay seconds, or an HTTP-date
/// (a date in the past means now). Anything else is ignored.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is "a very long time", not garbage.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn headers(out: &Outgoing<'_>, bearer: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in out.headers {
        headers.insert(name, value.clone());
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("switchyard/", env!("CARGO_PKG_VERSION"))),
    );
    if let Ok(id) = HeaderValue::from_str(out.delivery_id) {
        headers.insert(DELIVERY_ID_HEADER, id);
    }
    // The receiver continues the delivery attempt's trace.
    crate::traces::inject(&mut headers);
    if let Some(token) = bearer
        && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {token}"))
    {
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    for (name, key) in [signature::HEADER, signature::PREVIOUS_HEADER]
        .into_iter()
        .zip(&out.keys.hmac)
    {
        if let Ok(value) = HeaderValue::from_str(&signature::sign(key, out.body)) {
            headers.insert(name, value);
        }
    }
    if out.standard || !out.keys.ed25519.is_empty() {
        let timestamp = crate::ids::now();
        let mut put = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        put("webhook-id", out.delivery_id.to_string());
        put("webhook-timestamp", timestamp.to_string());
        let (id, body) = (out.delivery_id, out.body);
        let symmetric = out.keys.hmac.iter().filter(|_| out.standard);
        let signatures: Vec<String> = symmetric
            .map(|key| signature::standard(key, id, timestamp, body))
            .chain(
                (out.keys.ed25519.iter())
                    .map(|key| signature::standard_ed25519(key, id, timestamp, body)),
            )
            .collect();
        if !signatures.is_empty() {
            // Space-separated, as Standard Webhooks allows: a receiver
            // accepts the request if any one verifies.
            put("webhook-signature", signatures.join(" "));
        }
    }
    headers
}

/// reqwest's errors hide the cause in their source chain.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// The first cause in `e`'s source chain that is a `T`.
fn find_source<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(e);
    while let Some(cause) = next {
        if let Some(found) = cause.downcast_ref::<T>() {
            return Some(found);
        }
        next = cause.source();
    }
    None
}

/// The SSRF guard's refusal of a name, as the resolver reports it: found
/// again by type in reqwest's error, never by its text.
#[derive(Debug, thiserror::Error)]
#[error(
    "'{host}' resolves to internal addresses; webhooks may only call public hosts (an operator can allow ranges with webhooks.allow_private)"
)]
struct Refusal {
    host: String,
}

/// Resolves names, then drops every address the SSRF guard refuses (but
/// for the proxy's own name).
struct GuardedResolver {
    allow: Arc<Vec<IpNet>>,
    proxy_host: Option<String>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow.clone();
        let exempt = self.proxy_host.as_deref() == Some(name.as_str());
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| exempt || ssrf::allowed(a.ip(), &allow))
                .collect();
            if addrs.is_empty() {
                return Err(Refusal { host }.into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[tokio::test]
    async fn a_name_that_resolves_inside_is_a_refusal_found_by_type() {
        use reqwest::dns::Resolve;
        let resolver = GuardedResolver {
            allow: Arc::new(Vec::new()),
            proxy_host: None,
        };
        let name = "localhost".parse().unwrap();
        let Err(refused) = resolver.resolve(name).await else {
            panic!("localhost resolved to a public address");
        };
        // As reqwest hands it on: the resolver's error is the source of
        // the connector's, whatever that one says.
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect): dns error")]
        struct Wrapped(#[source] Box<dyn std::error::Error + Send + Sync>);
        let wrapped = Wrapped(refused);
        let found = find_source::<Refusal>(&wrapped).expect("found by type");
        let message = found.to_string();
        assert!(
            message.starts_with("'localhost' resolves to internal addresses"),
            "{message}"
        );
        assert!(find_source::<Refusal>(&std::io::Error::other("refused")).is_none());
    }

    /// Through a proxy nothing of ours resolves the target, so the guard
    /// judges its name before the proxy is asked: refused, not a failed
    /// connection to the proxy (nothing listens there). The target is this
    /// machine's own name, which check_url cannot tell is internal.
    #[tokio::test]
    async fn a_target_sent_through_a_proxy_is_still_guarded() {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let name = name.trim();
        let proxy = url::Url::parse("http://127.0.0.1:9").unwrap();
        let egress = Egress {
            proxy: Some(&proxy),
            no_proxy: &[],
        };
        let sender = Sender::new(Vec::new(), Duration::from_secs(2), 100, egress).unwrap();
        let url = format!("http://{name}:8080/hook");
        let out = Outgoing {
            url: &url,
            body: b"{}",
            bearer: None,
            oauth: None,
            tls: None,
            keys: signature::Keys::default(),
            headers: &[],
            delivery_id: "d",
            standard: false,
        };
        match sender.send(&out).await {
            Err(Failure::Refused(why)) => {
                assert!(
                    why.starts_with(&format!("'{name}' resolves to internal")),
                    "{why}"
                )
            }
            other => panic!("{name} was not refused (does it resolve inside?): {other:?}"),
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_never_wraps() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        // Wed, 21 Oct 2015 07:28:00 GMT is `now`; 15 s later.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:15 GMT", now),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}

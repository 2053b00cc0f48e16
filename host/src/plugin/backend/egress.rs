//! What a model backend may reach over `wasi:http`: only the hosts on its
//! allow-list, and with the upstream's credential added by the host, so the
//! component never holds the key (and may not set `Authorization` itself).
//!
//! Requests go out through one pooled client for the whole process, so a
//! backend that gets a fresh instance per call still reuses connections
//! (and TLS sessions) to its upstream. The client follows no redirects and
//! uses no proxy but the operator's (`via_proxy` on an upstream: a CONNECT
//! tunnel through `[delivery] proxy`, one pooled client per proxy): either
//! would send the request somewhere the allow-list did not approve.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, header};
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::TokioExecutor;
use wasmtime_wasi_http::{
    DEFAULT_FORBIDDEN_HEADERS, Error, ForbiddenHeaderFilter, RequestOptions, WasiBody,
    WasiHttpHooks,
};

/// A backend's network grant.
#[derive(Clone, Default)]
pub struct Egress {
    /// `host:port` authorities the backend may call.
    pub allow: Vec<String>,
    /// Sent as `Authorization: Bearer …` on every request.
    pub bearer: Option<String>,
    /// The forward proxy to tunnel through, if any.
    pub proxy: Option<axum::http::Uri>,
}

impl Egress {
    /// Whether a request to `authority` (with `https` or not) is allowed.
    pub fn allows(&self, authority: &str, https: bool) -> bool {
        let with_port = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:{}", if https { 443 } else { 80 })
        };
        self.allow.contains(&with_port)
    }
}

/// A response, and a future that reports errors in sending the request body.
type Reply = (
    axum::http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

type Sent = Box<dyn Future<Output = Result<Reply, Error>> + Send>;

impl WasiHttpHooks for Egress {
    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        Arc::new(|name: &HeaderName| {
            *name == header::AUTHORIZATION || DEFAULT_FORBIDDEN_HEADERS.contains(name)
        })
    }

    fn send_request(
        &mut self,
        mut request: axum::http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        let authority = request
            .uri()
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let https = request.uri().scheme_str() == Some("https");
        if !self.allows(&authority, https) {
            tracing::warn!(authority = %authority, "a model backend's request was denied by its egress allow-list");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        if let Some(token) = &self.bearer
            && let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}"))
        {
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        // The upstream continues the request's trace.
        crate::traces::inject(request.headers_mut());
        Box::new(send(request, options, self.proxy.clone()))
    }
}

/// The pooled client: plain HTTP and HTTPS (rustls, the webpki roots),
/// HTTP/1.1.
type Client = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, WasiBody>;

/// Connections to upstreams, kept open between calls. hyper's own client,
/// not reqwest: requests arrive here already as `http` types, and reqwest
/// re-parses every URI as a `url::Url` and runs redirect and proxy layers
/// we turn off anyway.
static CLIENT: LazyLock<Client> = LazyLock::new(|| pooled(plain()));

/// The pooled clients through a proxy, by proxy: CONNECT tunnels, then
/// TLS inside them for https upstreams.
type Tunnelled =
    hyper_util::client::legacy::Client<HttpsConnector<Tunnel<HttpConnector>>, WasiBody>;

static TUNNELLED: LazyLock<std::sync::Mutex<HashMap<axum::http::Uri, Tunnelled>>> =
    LazyLock::new(Default::default);

/// The pooled client through `proxy`, made the first time it is asked for.
fn tunnelled(proxy: axum::http::Uri) -> Tunnelled {
    let mut clients = TUNNELLED.lock().unwrap_or_else(|p| p.into_inner());
    let client =
        (clients.entry(proxy.clone())).or_insert_with(|| pooled(Tunnel::new(proxy, plain())));
    client.clone()
}

/// TCP to whatever the allow-list approved: the scheme is checked against
/// it, and the TLS layer above handles https.
fn plain() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http
}

/// A pooled HTTP/1.1 client over `inner`, with TLS (rustls, the webpki
/// roots) for https.
fn pooled<C>(inner: C) -> hyper_util::client::legacy::Client<HttpsConnector<C>, WasiBody>
where
    C: tower::Service<axum::http::Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read
        + hyper::rt::Write
        + hyper_util::client::legacy::connect::Connection
        + Send
        + Unpin
        + 'static,
    C::Future: Send + 'static,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(inner);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(connector)
}

/// Sends `request` on the pooled client (through `proxy`, if any). The
/// response body streams to the guest; the connection returns to the pool
/// once the guest has read it.
async fn send(
    request: axum::http::Request<WasiBody>,
    options: Option<RequestOptions>,
    proxy: Option<axum::http::Uri>,
) -> Result<Reply, Error> {
    let first_byte = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(Duration::from_secs(600));
    let sent = async {
        match proxy {
            None => CLIENT.request(request).await,
            Some(proxy) => tunnelled(proxy).request(request).await,
        }
    };
    let response = tokio::time::timeout(first_byte, sent)
        .await
        .map_err(|_| Error::ConnectionReadTimeout)?
        .map_err(failed)?;
    let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
    let done: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async { Ok(()) });
    Ok((response, done))
}

/// A client error in `wasi:http`'s terms.
fn failed(e: hyper_util::client::legacy::Error) -> Error {
    if e.is_connect() {
        Error::ConnectionRefused
    } else {
        Error::InternalError(Some(format!("{e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_authorities_are_allowed_with_default_ports() {
        let egress = Egress {
            allow: vec!["api.example.com:443".into(), "127.0.0.1:8000".into()],
            bearer: None,
            proxy: None,
        };
        assert!(egress.allows("api.example.com", true));
        assert!(
            !egress.allows("api.example.com", false),
            "port 80 is not listed"
        );
        assert!(egress.allows("127.0.0.1:8000", false));
        assert!(!egress.allows("127.0.0.1:8001", false));
        assert!(!egress.allows("api.example.com.evil.net", true));
    }

    #[test]
    fn the_client_builds_with_a_tls_stack() {
        // Building picks rustls' crypto provider from the enabled features;
        // with none, or two, it panics on the first request instead.
        LazyLock::force(&CLIENT);
    }

    #[test]
    fn the_guest_may_not_set_authorization() {
        let mut egress = Egress::default();
        let forbidden = egress.forbidden_header_filter();
        assert!(forbidden(&header::AUTHORIZATION));
        assert!(!forbidden(&header::CONTENT_TYPE));
    }
}

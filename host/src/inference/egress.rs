//! What a model backend may reach over `wasi:http`: only the hosts on its
//! allow-list, and with the upstream's credential added by the host, so the
//! component never holds the key (and may not set `Authorization` itself).

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue, header};
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

type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    axum::http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

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
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
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
        let default = wasmtime_wasi_http::default_hooks();
        default.send_request(request, options, fut)
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
    fn the_guest_may_not_set_authorization() {
        let mut egress = Egress::default();
        let forbidden = egress.forbidden_header_filter();
        assert!(forbidden(&header::AUTHORIZATION));
        assert!(!forbidden(&header::CONTENT_TYPE));
    }
}

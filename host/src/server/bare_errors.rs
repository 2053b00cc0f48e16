//! The HTTP layer's own error responses, in the API's error shape.
//!
//! hyper answers a request it cannot parse by itself: 400 for malformed
//! HTTP, 414 for a target over 64 KiB, 431 for oversized headers. It sends
//! them with an empty body and offers no hook to change that. Every error
//! of the API carries the JSON error body, so such a response is recognised
//! on its way out and rewritten with one. The API itself never sends an
//! error without a body, so no other response matches.

use crate::error::Error;

/// The response to send instead of `head`, when `head` is one of hyper's
/// bare error responses.
pub fn reshape(head: &[u8]) -> Option<Vec<u8>> {
    // Cheap test first: this runs on every response's first write.
    if head.len() < 13
        || !head.starts_with(b"HTTP/1.")
        || !matches!(&head[9..13], b"400 " | b"414 " | b"431 ")
    {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let (status_line, rest) = text.split_once("\r\n")?;
    let headers = rest
        .strip_suffix("\r\n\r\n")
        .or_else(|| rest.strip_suffix("\r\n"))?;
    let headers: Vec<&str> = headers.split("\r\n").filter(|h| !h.is_empty()).collect();
    let empty = headers
        .iter()
        .any(|h| h.eq_ignore_ascii_case("content-length: 0"));
    if !empty {
        return None;
    }
    let error = match &status_line[9..12] {
        "414" => Error::UriTooLong(
            "the request target (path and query) is longer than 64 KiB; send a shorter URL".into(),
        ),
        "431" => Error::HeadersTooLarge(
            "the request headers are too large; send fewer or smaller headers".into(),
        ),
        _ => Error::InvalidRequest {
            message: "the request is not valid HTTP/1.1 (request line or headers malformed)".into(),
            param: None,
        },
    };
    let body = error.body().to_string();
    let mut out = format!("{status_line}\r\n");
    for header in headers.iter().filter(|h| {
        let name = h.split(':').next().unwrap_or("").trim();
        !name.eq_ignore_ascii_case("content-length") && !name.eq_ignore_ascii_case("connection")
    }) {
        out.push_str(header);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    Some(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_bare_414_gets_the_error_body() {
        let head = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Wed, 25 Nov 2026 09:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(reshape(head).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("date: Wed, 25 Nov 2026"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "uri_too_long");
    }

    #[test]
    fn responses_with_bodies_pass_untouched() {
        assert!(reshape(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n").is_none());
        assert!(reshape(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(reshape(b"{\"a\":1}").is_none());
    }
}

//! Every error has the OpenAI shape and the right status.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{
    Host, OPERATOR_KEY, assert_error_shape, expect_error, expect_invalid, into_parts,
};

on_each_store!(unknown_route_is_a_404_error_object);
async fn unknown_route_is_a_404_error_object() {
    let host = Host::start().await;
    let (status, body) = host.get_anon("/v1/nope").await;
    expect_error(&(status, body.clone()), 404, "not_found", None);
    let error = assert_error_shape(&body);
    assert_eq!(error["code"], "not_found");
    assert!(error["message"].as_str().unwrap().contains("/v1/nope"));
}

on_each_store!(wrong_method_is_a_405_error_object_with_allow);
async fn wrong_method_is_a_405_error_object_with_allow() {
    let host = Host::start().await;
    let response = host.raw("DELETE", "/v1/system-check").await;
    assert_eq!(response.status(), 405);
    let allow = response.headers()["allow"].to_str().unwrap().to_string();
    assert!(allow.contains("GET"), "{allow}");
    let (_, body) = into_parts(response).await;
    let error = assert_error_shape(&body);
    assert_eq!(error["code"], "method_not_allowed");
    assert!(error["message"].as_str().unwrap().contains("GET"));
}

on_each_store!(malformed_json_says_where_it_broke);
async fn malformed_json_says_where_it_broke() {
    let host = Host::start().await;
    let response = host
        .http
        .post(host.url("/v1/me/api-keys"))
        .bearer_auth(OPERATOR_KEY)
        .header("content-type", "application/json")
        .body("{\"name\": \"ci\",\n \"oops\" }")
        .send()
        .await
        .unwrap();
    let (status, body) = into_parts(response).await;
    expect_error(&(status, body.clone()), 400, "invalid_json", Some("oops"));
    let error = assert_error_shape(&body);
    assert_eq!(error["code"], "invalid_json");
    assert!(
        error["message"].as_str().unwrap().contains("line 2 column"),
        "{body}"
    );
}

on_each_store!(unknown_and_mistyped_fields_are_named);
async fn unknown_and_mistyped_fields_are_named() {
    let host = Host::start().await;
    let (status, body) = host
        .post("/v1/me/api-keys", &json!({"name": "ci", "scope": "all"}))
        .await;
    expect_error(&(status, body.clone()), 400, "invalid_json", Some("scope"));
    assert!(
        assert_error_shape(&body)["message"]
            .as_str()
            .unwrap()
            .contains("scope"),
        "{body}"
    );

    let (status, body) = host.post("/v1/me/api-keys", &json!({"name": 5})).await;
    expect_error(&(status, body.clone()), 400, "invalid_json", Some("name"));
    assert_eq!(assert_error_shape(&body)["param"], "name", "{body}");

    let (status, body) = host.post("/v1/me/api-keys", &json!({"name": "  "})).await;
    expect_invalid(&(status, body.clone()), "name");
    assert_eq!(assert_error_shape(&body)["param"], "name", "{body}");
}

on_each_store!(oversized_bodies_are_413_declared_or_chunked);
async fn oversized_bodies_are_413_declared_or_chunked() {
    let host = Host::with_config("[limits]\nmax_body_bytes = 1024").await;
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(4096));
    let declared = host
        .http
        .post(host.url("/v1/me/api-keys"))
        .bearer_auth(OPERATOR_KEY)
        .header("content-type", "application/json")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    let (status, body) = into_parts(declared).await;
    expect_error(&(status, body.clone()), 413, "payload_too_large", None);
    assert_eq!(assert_error_shape(&body)["code"], "payload_too_large");
    assert!(body["error"]["message"].as_str().unwrap().contains("1024"));

    // A chunked body has no Content-Length; the limit is enforced while reading.
    let mut request = format!(
        "POST /v1/me/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for chunk in big.as_bytes().chunks(512) {
        request.push_str(&format!(
            "{:x}\r\n{}\r\n",
            chunk.len(),
            String::from_utf8_lossy(chunk)
        ));
    }
    request.push_str("0\r\n\r\n");
    let response = raw_exchange(&host.addr(), request.as_bytes());
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("payload_too_large"), "{response}");
}

/// Writes `request` on a fresh connection and reads until the server closes it.
fn raw_exchange(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The server may answer (and close) before taking the whole body.
    let _ = stream.write_all(request);
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

on_each_store!(wrong_content_type_is_415);
async fn wrong_content_type_is_415() {
    let host = Host::start().await;
    let response = host
        .http
        .post(host.url("/v1/me/api-keys"))
        .bearer_auth(OPERATOR_KEY)
        .header("content-type", "text/plain")
        .body("{\"name\": \"ci\"}")
        .send()
        .await
        .unwrap();
    let (status, body) = into_parts(response).await;
    expect_error(&(status, body.clone()), 415, "unsupported_media_type", None);
    let message = assert_error_shape(&body)["message"].as_str().unwrap();
    assert!(message.contains("application/json"), "{message}");
}

on_each_store!(a_client_that_never_finishes_its_headers_is_dropped);
async fn a_client_that_never_finishes_its_headers_is_dropped() {
    let host = Host::with_config("[limits]\nheader_read_timeout_ms = 300").await;
    let mut stream = TcpStream::connect(host.addr()).unwrap();
    stream
        .write_all(b"GET /v1/system-check HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let start = Instant::now();
    let mut buf = Vec::new();
    // The server gives up on the request and closes the connection.
    let _ = stream.read_to_end(&mut buf);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "held for {:?}",
        start.elapsed()
    );
    // The host still serves others.
    let (status, _) = host.get_anon("/v1/system-check").await;
    assert_eq!(status, 200);
}

on_each_store!(a_client_that_never_finishes_its_body_gets_408);
async fn a_client_that_never_finishes_its_body_gets_408() {
    let host = Host::with_config("[limits]\nbody_read_timeout_ms = 300").await;
    let mut stream = TcpStream::connect(host.addr()).unwrap();
    let head = format!(
        "POST /v1/me/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\""
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
}

/// Reads until the host closes `stream`; panics if it is still open after 10 s.
fn closed_by_host(mut stream: TcpStream) -> Duration {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => start.elapsed(),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => start.elapsed(),
        other => panic!(
            "the host kept a silent connection open: {other:?} after {:?}",
            start.elapsed()
        ),
    }
}

on_each_store!(a_connection_that_sends_nothing_is_closed_after_the_header_timeout);
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let host = Host::with_config("[limits]\nheader_read_timeout_ms = 300").await;
    closed_by_host(TcpStream::connect(host.addr()).unwrap());
    // One byte of the HTTP/2 preface, then nothing: protocol detection waits
    // for more, and is bounded by the same timeout.
    let mut partial = TcpStream::connect(host.addr()).unwrap();
    partial.write_all(b"PRI * HTTP/2.0").unwrap();
    closed_by_host(partial);
}

on_each_store!(the_system_check_answers_while_more_idle_connections_than_the_cap_are_held);
async fn the_system_check_answers_while_more_idle_connections_than_the_cap_are_held() {
    let host =
        Host::with_config("[limits]\nmax_connections = 32\nheader_read_timeout_ms = 60000").await;
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(host.addr()).unwrap())
        .collect();
    for round in 0..3 {
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            host.http.get(host.url("/v1/system-check")).send(),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: no answer while 100 idle connections are held"))
        .unwrap_or_else(|e| panic!("round {round}: {e:?}\n{}", host.log()));
        assert_eq!(response.status(), 200);
    }
    // The oldest silent connections made room: the first is closed by now.
    closed_by_host(idle.into_iter().next().unwrap());
}

on_each_store!(a_cap_above_the_open_file_limit_is_a_clear_error);
async fn a_cap_above_the_open_file_limit_is_a_clear_error() {
    let err = Host::builder()
        .config("[limits]\nmax_connections = 100000000")
        .try_start()
        .await
        .err()
        .expect("the host should refuse to start");
    assert!(
        err.contains("max_connections") && err.contains("ulimit -n"),
        "{err}"
    );
}

on_each_store!(errors_from_the_router_and_the_http_layer_have_the_error_shape);
async fn errors_from_the_router_and_the_http_layer_have_the_error_shape() {
    let host = Host::start().await;
    // A path segment that is not UTF-8 once decoded.
    let (status, body) = host.get("/v1/teams/%ff").await;
    expect_error(&(status, body.clone()), 400, "invalid_request", None);
    assert_eq!(
        assert_error_shape(&body)["code"],
        "invalid_request",
        "{body}"
    );
    // A target longer than the HTTP layer reads (and than an HTTP client
    // library will send): hyper answers by itself.
    let long = format!(
        "GET /v1/teams/{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(100_000)
    );
    let text = raw_exchange(&host.addr(), long.as_bytes());
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(head.starts_with("HTTP/1.1 414"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(assert_error_shape(&body)["code"], "uri_too_long", "{body}");
    // Malformed HTTP.
    let text = raw_exchange(
        &host.addr(),
        b"GET /v1/system-check HTTP/1.1\r\nHost x\r\n\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let body: serde_json::Value =
        serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        assert_error_shape(&body)["code"],
        "invalid_request",
        "{text}"
    );
}

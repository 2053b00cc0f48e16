//! A connection stays usable after a request is refused before its body is
//! read: the host reads and discards the body, or says `Connection: close`.
//!
//! Clients that write a request's head and body separately (most do on a
//! busy machine) used to meet a closed connection on their next request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::harness::{Host, OPERATOR_KEY};

/// One answer read off a raw connection.
struct Answer {
    status: u16,
    /// Header lines, lower-cased.
    head: String,
}

impl Answer {
    fn closes(&self) -> bool {
        self.head.contains("\r\nconnection: close")
    }
}

/// Reads one HTTP/1.1 answer (with a `content-length` body).
fn read_answer(reader: &mut BufReader<TcpStream>) -> std::io::Result<Answer> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed without an answer (read so far: {head:?})"),
            ));
        }
        head.push_str(&line.to_ascii_lowercase());
        if line == "\r\n" {
            break;
        }
    }
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    reader.read_exact(&mut vec![0; length])?;
    Ok(Answer { status, head })
}

/// A connection with a read timeout, so that a lost answer fails the test
/// instead of hanging it.
fn connect(addr: &str) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

const ORDINARY: &[u8] = b"GET /v1/system-check HTTP/1.1\r\nHost: x\r\n\r\n";

/// A request refused before its body is read: what it is, its head (up to
/// the blank line) and its body, and the status it gets.
struct Refused {
    what: &'static str,
    head: String,
    body: Vec<u8>,
    status: u16,
}

fn refused(what: &'static str, status: u16, line: &str, headers: &str, body: &[u8]) -> Refused {
    Refused {
        what,
        head: format!(
            "{line} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\n\r\n",
            body.len()
        ),
        body: body.to_vec(),
        status,
    }
}

/// One of each refusal the API and the console give before reading a body.
fn refusals(outsider: &str) -> Vec<Refused> {
    let json = "Content-Type: application/json\r\n";
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(2048));
    let mine = format!("Authorization: Bearer {outsider}\r\n{json}");
    let operator = format!("Authorization: Bearer {OPERATOR_KEY}\r\n{json}");
    vec![
        refused(
            "a wrong key",
            401,
            "POST /v1/teams",
            &format!("Authorization: Bearer sy_wrong\r\n{json}"),
            br#"{"name": "t"}"#,
        ),
        refused(
            "an operator's route",
            403,
            "POST /v1/admin/users",
            &mine,
            br#"{"name": "u"}"#,
        ),
        refused(
            "another team's webhook",
            404,
            "PUT /v1/teams/ta/webhooks/w",
            &mine,
            big.as_bytes(),
        ),
        refused(
            "another team's test send",
            404,
            "POST /v1/teams/ta/webhooks/w/test",
            &mine,
            b"{}",
        ),
        refused(
            "a team that does not exist",
            404,
            "POST /v1/teams/nosuch/webhooks",
            &operator,
            big.as_bytes(),
        ),
        refused(
            "a body that is not JSON",
            415,
            "POST /v1/me/api-keys",
            &format!("Authorization: Bearer {OPERATOR_KEY}\r\nContent-Type: text/plain\r\n"),
            br#"{"name": "k"}"#,
        ),
        refused(
            "a console form without a session",
            303,
            "POST /keys",
            "Content-Type: application/x-www-form-urlencoded\r\n",
            b"name=k&models=",
        ),
    ]
}

/// A host with team `ta`, and the key of a user who is not in it.
async fn host_with_outsider() -> (Host, String) {
    let host = Host::start().await;
    let (status, body) = host.post("/v1/teams", &json!({"name": "ta"})).await;
    assert_eq!(status, 201, "{body}");
    let outsider = host.create_user("outsider").await;
    (host, outsider)
}

/// Sends `request` with its body `pause` after its head, then an ordinary
/// request on the same connection. Either both are answered, or the first
/// says `Connection: close`.
fn refused_then_ordinary(addr: &str, request: &Refused, pause: Duration) -> Result<(), String> {
    let (mut stream, mut reader) = connect(addr);
    stream.write_all(request.head.as_bytes()).unwrap();
    std::thread::sleep(pause);
    // The host may have answered (and, saying so, closed) already.
    let _ = stream.write_all(&request.body);
    let first = read_answer(&mut reader).map_err(|e| format!("{}: {e}", request.what))?;
    if first.status != request.status {
        return Err(format!(
            "{}: {} instead of {}\n{}",
            request.what, first.status, request.status, first.head
        ));
    }
    if first.closes() {
        return Ok(());
    }
    stream.write_all(ORDINARY).map_err(|e| {
        format!(
            "after {}: the next request could not be sent: {e}",
            request.what
        )
    })?;
    let second = read_answer(&mut reader).map_err(|e| {
        format!(
            "after {} (answered without `connection: close`), the next request was lost: {e}",
            request.what
        )
    })?;
    if second.status != 200 {
        return Err(format!("after {}: {}", request.what, second.head));
    }
    Ok(())
}

on_each_store!(a_refused_request_whose_body_comes_late_leaves_the_connection_usable);
async fn a_refused_request_whose_body_comes_late_leaves_the_connection_usable() {
    let (host, outsider) = host_with_outsider().await;
    let addr = host.addr();
    tokio::task::spawn_blocking(move || {
        for request in refusals(&outsider) {
            refused_then_ordinary(&addr, &request, Duration::from_millis(200)).unwrap();
        }
    })
    .await
    .unwrap();
}

on_each_store!(a_refusal_that_will_not_read_its_body_says_connection_close);
async fn a_refusal_that_will_not_read_its_body_says_connection_close() {
    let host = Host::start().await;
    let addr = host.addr();
    tokio::task::spawn_blocking(move || {
        // Declared larger than any body the host takes: 413 at once, and
        // the connection is not kept, since the body will not be read.
        let (mut stream, mut reader) = connect(&addr);
        let head = format!(
            "POST /v1/me/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let answer = read_answer(&mut reader).unwrap();
        assert_eq!(answer.status, 413, "{}", answer.head);
        assert!(answer.closes(), "{}", answer.head);
        // A client that sends `Expect: 100-continue` and is refused is told
        // not to send its body on this connection.
        let (mut stream, mut reader) = connect(&addr);
        let head = "POST /v1/teams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sy_wrong\r\n\
             Content-Type: application/json\r\nContent-Length: 13\r\nExpect: 100-continue\r\n\r\n";
        stream.write_all(head.as_bytes()).unwrap();
        let answer = read_answer(&mut reader).unwrap();
        assert_eq!(answer.status, 401, "{}", answer.head);
        assert!(answer.closes(), "{}", answer.head);
    })
    .await
    .unwrap();
}

on_each_store!(a_keep_alive_client_alternating_refused_and_ordinary_requests_loses_none);
async fn a_keep_alive_client_alternating_refused_and_ordinary_requests_loses_none() {
    let (host, outsider) = host_with_outsider().await;
    let addr = host.addr();
    let lost = tokio::task::spawn_blocking(move || {
        let requests = refusals(&outsider);
        let (mut stream, mut reader) = connect(&addr);
        let mut lost = Vec::new();
        for round in 0..2_000usize {
            let request = &requests[round % requests.len()];
            // Head and body in two writes, some with a gap between them.
            let _ = stream.write_all(request.head.as_bytes());
            if round % 3 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
            let _ = stream.write_all(&request.body);
            let answer = match read_answer(&mut reader) {
                Ok(answer) => answer,
                Err(e) => {
                    lost.push(format!("round {round}, {}: {e}", request.what));
                    (stream, reader) = connect(&addr);
                    continue;
                }
            };
            if answer.closes() {
                (stream, reader) = connect(&addr);
                continue;
            }
            let _ = stream.write_all(ORDINARY);
            match read_answer(&mut reader) {
                Ok(answer) if answer.status == 200 => {}
                Ok(answer) => lost.push(format!("round {round}: {}", answer.head)),
                Err(e) => {
                    lost.push(format!("round {round}, after {}: {e}", request.what));
                    (stream, reader) = connect(&addr);
                }
            }
        }
        lost
    })
    .await
    .unwrap();
    assert!(
        lost.is_empty(),
        "{} of 4,000 requests went unanswered:\n{}",
        lost.len(),
        lost.join("\n")
    );
}

on_each_store!(over_http2_a_refused_stream_leaves_the_connection_usable);
async fn over_http2_a_refused_stream_leaves_the_connection_usable() {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::combinators::BoxBody;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let (host, outsider) = host_with_outsider().await;
    let stream = tokio::net::TcpStream::connect(host.addr()).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 connection with prior knowledge");
    let connection = tokio::spawn(connection);
    // A body whose bytes come when the test sends them.
    let body = |rx: tokio::sync::mpsc::Receiver<Bytes>| -> BoxBody<Bytes, Infallible> {
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let bytes = rx.recv().await?;
            Some((Ok::<_, Infallible>(Frame::data(bytes)), rx))
        });
        StreamBody::new(frames).boxed()
    };
    for round in 0..20 {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let refused = hyper::Request::put(format!("{}/v1/teams/ta/webhooks/w", host.base))
            .header("authorization", format!("Bearer {outsider}"))
            .header("content-type", "application/json")
            .body(body(rx))
            .unwrap();
        let answer = sender.clone().send_request(refused);
        let sending = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(Bytes::from_static(br#"{"url": "http://x"}"#)).await;
        });
        let answer = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .unwrap_or_else(|_| panic!("round {round}: no answer"))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(answer.status(), 404, "round {round}");
        sending.await.unwrap();
        let (_, rx) = tokio::sync::mpsc::channel(1);
        let ordinary = hyper::Request::get(format!("{}/v1/system-check", host.base))
            .body(body(rx))
            .unwrap();
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            sender.clone().send_request(ordinary),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the next stream got no answer"))
        .unwrap_or_else(|e| panic!("round {round}, the next stream: {e}"));
        assert_eq!(answer.status(), 200, "round {round}");
    }
    assert!(!connection.is_finished(), "the connection stayed open");
}

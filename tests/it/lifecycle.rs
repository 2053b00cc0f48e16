//! Start-up, shutdown and restart of the process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::harness::{Host, OPERATOR_KEY};

#[tokio::test]
async fn sigterm_drains_an_in_flight_request_and_the_store_reopens() {
    let mut host = Host::builder()
        .env("RUST_LOG", "info,switchyard::http=debug")
        .start()
        .await;
    // Send half a request, signal, then finish it: the host must answer it.
    let body = json!({"name": "in-flight"}).to_string();
    let mut stream = TcpStream::connect(host.addr()).unwrap();
    let head = format!(
        "POST /v1/me/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body.as_bytes()[..5]).unwrap();
    host.wait_for_log(&["request received", "/v1/me/api-keys"])
        .await;
    unsafe { libc::kill(host.pid() as i32, libc::SIGTERM) };
    host.wait_for_log(&["shutting down"]).await;
    stream.write_all(&body.as_bytes()[5..]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    let status = host.terminate().await;
    assert!(status.success(), "{status}");

    // The key created during shutdown survived, in a store that reopens.
    let restarted = Host::builder().same_store(&host).start().await;
    let (status, keys) = restarted.get("/v1/me/api-keys").await;
    assert_eq!(status, 200);
    assert!(keys.to_string().contains("in-flight"), "{keys}");
}

#[tokio::test]
async fn a_data_directory_in_use_is_a_clear_error() {
    let first = Host::start().await;
    let err = Host::builder()
        .same_store(&first)
        .try_start()
        .await
        .err()
        .expect("second host must not start");
    assert!(err.contains("in use by another switchyard"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test]
async fn a_bad_config_file_is_a_clear_error() {
    let err = Host::builder()
        .config("[limits]\nmax_body = 5")
        .try_start()
        .await
        .err()
        .expect("must not start");
    assert!(err.contains("max_body"), "{err}");
    assert!(err.contains("exit status: 1"), "{err}");
}

#[tokio::test]
async fn a_data_directory_that_cannot_be_created_is_a_clear_error() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let err = Host::builder()
        .data_dir(&file.join("data"))
        .try_start()
        .await
        .err()
        .expect("must not start");
    assert!(err.contains("data directory"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

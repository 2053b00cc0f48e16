//! A fixed egress: with `[delivery] proxy`, every delivery and webhook test
//! leaves through the operator's forward proxy (Debian's tinyproxy, started
//! here), loopback targets included, unless `no_proxy` names them; so do an
//! upstream model's requests when it says `via_proxy`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::delivery::CONFIG;
use crate::harness::Host;
use crate::receiver::Receiver;
use crate::world::{PROJECT, World};

/// tinyproxy on a loopback port, stopped when dropped.
struct Tinyproxy {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tinyproxy {
    /// Starts one, or `None` (saying so) where tinyproxy is missing,
    /// unless `SWITCHYARD_TEST_REQUIRE_PROXY` is set (CI sets it).
    async fn start() -> Option<Tinyproxy> {
        if Command::new("tinyproxy").arg("-v").output().is_err() {
            assert!(
                std::env::var_os("SWITCHYARD_TEST_REQUIRE_PROXY").is_none(),
                "tinyproxy is required but missing; apt-get install tinyproxy"
            );
            eprintln!("proxy test skipped: no tinyproxy here (apt-get install tinyproxy)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("tinyproxy.conf");
        let log = dir.path().join("tinyproxy.log");
        let text = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 64\nAllow 127.0.0.1\n\
             LogLevel Info\nLogFile \"{}\"\n",
            log.display()
        );
        std::fs::write(&conf, text).unwrap();
        let child = Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let proxy = Tinyproxy {
            child,
            port,
            log,
            _dir: dir,
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(proxy);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("tinyproxy did not listen on {port} within 5 s");
    }
}

impl Tinyproxy {
    /// What it logged: a line per request, `CONNECT host:port` for tunnels.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`CONFIG`] sending through the proxy on `port`, but for `no_proxy`.
fn through(port: u16, no_proxy: &str) -> String {
    format!("{CONFIG}\nproxy = \"http://127.0.0.1:{port}\"\nno_proxy = [{no_proxy}]")
}

/// Tags the world's version `n` times; the requests the receiver has then.
async fn tagged(host: &Host, world: &World, receiver: &Receiver, n: usize) -> Vec<Option<String>> {
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
    for i in 0..n {
        let tag = format!("t{i}");
        ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tag": tag});
    }
    let got = receiver.wait_for(n, 10).await;
    got.iter()
        .map(|r| r.header("via").map(str::to_string))
        .collect()
}

on_each_store!(every_delivery_and_test_leaves_through_the_proxy);
async fn every_delivery_and_test_leaves_through_the_proxy() {
    let Some(proxy) = Tinyproxy::start().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let host = Host::with_config(&through(proxy.port, "")).await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let via = tagged(&host, &world, &receiver, 5).await;
    assert!(
        via.iter()
            .all(|v| v.as_deref().is_some_and(|v| v.contains("tinyproxy"))),
        "every delivery came through the proxy: {via:?}"
    );
    let test = ok!(host, world.alice, POST "/v1/teams/ml/webhooks/ci/test", {});
    assert_eq!(test["success"], true, "{test}");
    let tested = receiver.received().pop().unwrap();
    assert!(
        tested
            .header("via")
            .unwrap_or_default()
            .contains("tinyproxy")
    );
    let console = crate::console::Visitor::signed_in(&host, &world.alice).await;
    let page = console.get("/teams/ml/webhooks/ci").await.body;
    let shown = format!("through the proxy http://127.0.0.1:{}", proxy.port);
    assert!(page.contains(&shown), "{shown} on the page: {page}");

    // No way around it: with the proxy gone, nothing reaches the receiver.
    let before = receiver.received().len();
    drop(proxy);
    let test = ok!(host, world.alice, POST "/v1/teams/ml/webhooks/ci/test", {});
    assert_eq!(test["success"], false, "{test}");
    let error = test["error"].as_str().unwrap_or_default();
    assert!(error.contains("could not connect"), "{test}");
    assert_eq!(receiver.received().len(), before);
}

on_each_store!(no_proxy_names_the_hosts_reached_directly);
async fn no_proxy_names_the_hosts_reached_directly() {
    let Some(proxy) = Tinyproxy::start().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let host = Host::with_config(&through(proxy.port, "\"127.0.0.1\"")).await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let via = tagged(&host, &world, &receiver, 2).await;
    assert_eq!(via, [None, None], "straight to the receiver");
}

on_each_store!(an_upstream_model_that_asks_goes_through_the_proxy);
async fn an_upstream_model_that_asks_goes_through_the_proxy() {
    let Some(proxy) = Tinyproxy::start().await else {
        return;
    };
    let (upstream, seen) = crate::upstream::fake_upstream().await;
    let extra = format!(
        "via_proxy = true\n[delivery]\nproxy = \"http://127.0.0.1:{}\"",
        proxy.port
    );
    let host = crate::upstream::upstream_host(&upstream, &extra)
        .start()
        .await;
    let alice = host.create_user("alice").await;
    let (status, text) = crate::upstream::chat(&host, &alice, "fake-1", false).await;
    assert_eq!(status, 200, "{text}");
    let tunnel = format!("CONNECT {upstream}");
    assert!(proxy.log().contains(&tunnel), "{tunnel} in {}", proxy.log());

    // No way around it here either.
    let before = seen.lock().unwrap().len();
    drop(proxy);
    let (status, text) = crate::upstream::chat(&host, &alice, "fake-1", false).await;
    assert!(status >= 500, "{status} {text}");
    assert_eq!(
        seen.lock().unwrap().len(),
        before,
        "nothing reached the upstream"
    );
}

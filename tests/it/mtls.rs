//! Mutual TLS: a receiver that demands a client certificate from its own
//! CA, behind a certificate of that CA, gets one on every delivery and
//! test; a webhook without it cannot reach it at all.

use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

use crate::delivery::CONFIG;
use crate::harness::{Host, expect_error, expect_invalid};
use crate::world::{PROJECT, World};

/// A CA, the receiver's certificate for 127.0.0.1, and a client's.
struct Pki {
    ca: String,
    server: (CertificateDer<'static>, PrivateKeyDer<'static>),
    ca_der: CertificateDer<'static>,
    client_cert: String,
    client_key: String,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "receiver CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let signed = |names: Vec<String>, name: &str, usage| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        (params.signed_by(&key, &ca, &ca_key).unwrap(), key)
    };
    let (server, server_key) = signed(
        vec!["127.0.0.1".into()],
        "receiver",
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client, client_key) = signed(
        Vec::new(),
        "switchyard",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let server_key = PrivatePkcs8KeyDer::from(server_key.serialize_der()).into();
    Pki {
        ca: ca.pem(),
        ca_der: ca.der().clone(),
        server: (server.der().clone(), server_key),
        client_cert: client.pem(),
        client_key: client_key.serialize_pem(),
    }
}

/// An HTTPS receiver that takes only clients with a certificate of the
/// CA: the subject of each request's client certificate, and how many
/// handshakes it refused.
struct TlsReceiver {
    base: String,
    clients: Arc<Mutex<Vec<String>>>,
    refused: Arc<Mutex<usize>>,
}

impl TlsReceiver {
    async fn start(pki: &Pki) -> TlsReceiver {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca_der.clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![pki.server.0.clone()], pki.server.1.clone_key())
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let (clients, refused) = (Arc::default(), Arc::new(Mutex::new(0)));
        let (c, r) = (Arc::clone(&clients), Arc::clone(&refused));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, c, r) = (acceptor.clone(), Arc::clone(&c), Arc::clone(&r));
                tokio::spawn(async move { serve(acceptor, tcp, c, r).await });
            }
        });
        TlsReceiver {
            base,
            clients,
            refused,
        }
    }

    fn clients(&self) -> Vec<String> {
        self.clients.lock().unwrap().clone()
    }
}

/// One connection: the handshake (refused without a good certificate),
/// then HTTP, each request answered 200 and noted with the client's
/// certificate.
async fn serve(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    clients: Arc<Mutex<Vec<String>>>,
    refused: Arc<Mutex<usize>>,
) {
    let Ok(tls) = acceptor.accept(tcp).await else {
        *refused.lock().unwrap() += 1;
        return;
    };
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().cloned());
    let subject = peer
        .map(|der| format!("{} bytes", der.len()))
        .unwrap_or_default();
    let app = axum::Router::new().fallback(move || {
        clients.lock().unwrap().push(subject.clone());
        async { "ok" }
    });
    let service = hyper_util::service::TowerToHyperService::new(app);
    let io = hyper_util::rt::TokioIo::new(tls);
    let builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    let _ = builder.serve_connection(io, service).await;
}

on_each_store!(a_receiver_that_demands_a_client_certificate_gets_one);
async fn a_receiver_that_demands_a_client_certificate_gets_one() {
    let pki = pki();
    let receiver = TlsReceiver::start(&pki).await;
    let host = Host::with_config(CONFIG).await;
    let hook = format!("{}/hook", receiver.base);
    let world = World::build(&host, Some(&hook)).await;
    let secrets = [
        ("CLIENT_CERT", pki.client_cert.as_str()),
        ("CLIENT_KEY", pki.client_key.as_str()),
        ("RECEIVER_CA", pki.ca.as_str()),
        ("NOT_PEM", "hello"),
    ];
    for (name, value) in secrets {
        ok!(host, world.alice, PUT "/v1/teams/ml/secrets/{name}", {"value": value});
    }
    let webhook = "/v1/teams/ml/webhooks/ci";

    // Without the CA, the receiver's certificate is not trusted; with the
    // CA but no certificate, the receiver refuses the handshake.
    let test = ok!(host, world.alice, POST "{webhook}/test", {});
    assert_eq!(test["success"], false, "{test}");
    let ca_only = json!({"url": hook, "tls": {"ca_secret": "RECEIVER_CA"}});
    ok!(host, world.alice, PUT "{webhook}", ca_only);
    let test = ok!(host, world.alice, POST "{webhook}/test", {});
    assert_eq!(test["success"], false, "{test}");
    assert!(
        *receiver.refused.lock().unwrap() >= 1,
        "the receiver refused it"
    );

    for (tls, param) in [
        (json!({"client_cert_secret": "CLIENT_CERT"}), "tls"),
        (json!({}), "tls"),
        (
            json!({"client_cert_secret": "CLIENT_CERT", "client_key_secret": "NOPE"}),
            "tls.client_key_secret",
        ),
        (
            json!({"client_cert_secret": "NOT_PEM", "client_key_secret": "CLIENT_KEY"}),
            "tls.client_cert_secret",
        ),
        (json!({"ca_secret": "NOT_PEM"}), "tls.ca_secret"),
    ] {
        let got = call!(host, world.alice, PUT "{webhook}", {"url": hook, "tls": tls});
        expect_invalid(&got, param);
    }
    let unknown = json!({"url": hook, "tls": {"ca_secret": "RECEIVER_CA", "pin": "x"}});
    let got = call!(host, world.alice, PUT "{webhook}", unknown);
    expect_error(&got, 400, "invalid_json", Some("tls.pin"));
    let tls = json!({"client_cert_secret": "CLIENT_CERT", "client_key_secret": "CLIENT_KEY",
        "ca_secret": "RECEIVER_CA"});
    let saved = ok!(host, world.alice, PUT "{webhook}", {"url": hook, "tls": tls});
    assert_eq!(saved["tls"], tls, "{saved}");
    assert!(!saved.to_string().contains("PRIVATE KEY"), "{saved}");
    let test = ok!(host, world.alice, POST "{webhook}/test", {});
    assert_eq!(test["success"], true, "{test}");

    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
    let tags: Vec<String> = (0..3).map(|i| format!("t{i}")).collect();
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tags": tags});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while receiver.clients().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            receiver.clients()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let clients = receiver.clients();
    assert!(
        clients.iter().all(|c| !c.is_empty()),
        "each with the certificate: {clients:?}"
    );

    // The secrets are used: not deletable while the webhook names them.
    for name in ["CLIENT_CERT", "CLIENT_KEY", "RECEIVER_CA"] {
        let (status, body) = call!(host, world.alice, DELETE "/v1/teams/ml/secrets/{name}");
        assert_eq!(status, 409, "{name}: {body}");
    }
    let console = crate::console::Visitor::signed_in(&host, &world.alice).await;
    let page = console.get("/teams/ml/webhooks/ci").await.body;
    let shown = "presents the client certificate in CLIENT_CERT (key in CLIENT_KEY); trusts the CA in RECEIVER_CA";
    assert!(page.contains(shown), "{page}");
    assert!(!page.contains("PRIVATE KEY"));
}

//! The world most tests start from, built once here through the API.
//!
//! alice is admin of team `ml`, which holds secrets TOKEN, SIGN and SPARE,
//! project `vision` with collection `detector`, and (when given a URL)
//! webhook `ci` carrying TOKEN as its access token and SIGN as its signing
//! secret; she is also admin of registry `models`. bob is a member of `ml`
//! and of `models`. eve is admin of her own team `other` and an outsider
//! to everything else.

use serde_json::{Value, json};

use crate::harness::Host;

/// The secrets' values.
pub const TOKEN: &str = "tok-1";
pub const SIGN: &str = "sign-1";
pub const SPARE: &str = "spare-1";

/// alice's project and registry.
pub const PROJECT: &str = "/v1/teams/ml/projects/vision";
pub const REGISTRY: &str = "/v1/registries/models";

/// The users' API keys.
pub struct World {
    pub alice: String,
    pub bob: String,
    pub eve: String,
}

impl World {
    /// Builds the world on `host`; with `hook`, webhook `ci` calls it.
    pub async fn build(host: &Host, hook: Option<&str>) -> World {
        let (alice, bob, eve) = (
            host.create_user("alice").await,
            host.create_user("bob").await,
            host.create_user("eve").await,
        );
        ok!(host, alice, POST "/v1/teams", {"name": "ml"});
        ok!(host, eve, POST "/v1/teams", {"name": "other"});
        let member = json!({"role": "member"});
        ok(
            host,
            &alice,
            "PUT",
            "/v1/teams/ml/members/bob",
            member.clone(),
        )
        .await;
        for (name, value) in [("TOKEN", TOKEN), ("SIGN", SIGN), ("SPARE", SPARE)] {
            let path = format!("/v1/teams/ml/secrets/{name}");
            ok!(host, alice, PUT "{path}", {"value": value});
        }
        if let Some(url) = hook {
            let webhook = json!({"name": "ci", "url": url,
                "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
            ok!(host, alice, POST "/v1/teams/ml/webhooks", webhook);
        }
        let project = json!({"name": "vision", "description": "image models"});
        ok!(host, alice, POST "/v1/teams/ml/projects", project);
        let registry = json!({"name": "models", "description": "production models"});
        ok!(host, alice, POST "/v1/registries", registry);
        ok!(host, alice, PUT "{REGISTRY}/members/bob", member);
        let collection = json!({"name": "detector"});
        ok!(host, alice, POST "{PROJECT}/collections", collection);
        World { alice, bob, eve }
    }
}

/// A request as the holder of `key` that must succeed (200 or 201); returns
/// the body.
pub async fn ok(host: &Host, key: &str, method: &str, path: &str, body: Value) -> Value {
    let (status, response) = host.call(method, path, key, Some(&body)).await;
    assert!(
        status == 200 || status == 201,
        "{method} {path}: {status} {response}"
    );
    response
}

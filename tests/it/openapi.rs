//! `GET /v1/openapi.json`: parses, needs a key, and every route it lists is
//! served (the unit test in `http::openapi` checks the converse).

use crate::harness::{Host, OPERATOR_KEY};

#[tokio::test]
async fn the_openapi_document_describes_live_routes() {
    let host = Host::start();
    assert_eq!(host.get_anon("/v1/openapi.json").await.0, 401);
    let (status, doc) = host.get("/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for needed in [
        "/v1/system-check",
        "/v1/teams/{team}/webhooks/{name}/test",
        "/v1/registries/{registry}/automations/{name}",
        "/v1/teams/{team}/projects/{project}/automations",
    ] {
        assert!(paths.contains_key(needed), "{needed} missing");
    }
    let mut checked = 0;
    for (path, item) in paths {
        let concrete = path.replace('{', "x").replace('}', "");
        for method in item.as_object().unwrap().keys() {
            let (status, body) = host
                .call(&method.to_uppercase(), &concrete, OPERATOR_KEY, None)
                .await;
            let message = body["error"]["message"].as_str().unwrap_or("");
            assert!(
                status != 405 && !message.starts_with("no route"),
                "{method} {path} is documented but not served: {status} {body}"
            );
            checked += 1;
        }
    }
    assert!(checked > 30);
    assert!(doc["components"]["schemas"]["AutomationDefinition"].is_object());
}

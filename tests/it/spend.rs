//! Spend in USD: prices per model and deployment, cost in usage and
//! metrics, and USD budgets of keys and projects (the key's through the
//! stock `openai` client).

use std::time::Duration;

use serde_json::{Value, json};

use crate::gateway::{ask, header, scoped_key, team};
use crate::harness::expect_invalid;
use crate::upstream::{fake_upstream, upstream_host};

/// `fake-1` answers with 11 prompt and 2 completion tokens: $0.021 at this
/// price. A request of "hi" with `max_tokens` 5 is admitted against 18
/// prompt tokens (one a byte, and 16 for the message) and 5 completion
/// tokens: $0.043.
pub(crate) const FAKE_1_PRICE: &str = r#"
[[inference.prices]]
model = "fake-1"
input_per_mtok = 1000.0
output_per_mtok = 5000.0
"#;

/// And a route whose deployment sets its own input price.
const DEAR: &str = r#"
[[inference.routes]]
model = "dear"
deployments = [{ model = "fake-1", name = "dear-west", input_per_mtok = 2000.0 }]
"#;

fn cost(totals: &Value) -> f64 {
    totals["cost_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("no cost_usd in {totals}"))
}

on_each_store!(answers_are_priced_and_usd_budgets_hold);
async fn answers_are_priced_and_usd_budgets_hold() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, &format!("{FAKE_1_PRICE}{DEAR}"))
        .start()
        .await;
    // Models without a price are named at start.
    host.wait_for_log(&["no [[inference.prices]] entry", "fake-broken"])
        .await;
    let (alice, _) = team(&host).await;

    // A key's daily budget, through the stock client.
    let key = scoped_key(&host, &alice, json!({"usd_per_day": 0.08})).await;
    let python = crate::harness::python_venv("openai-venv", &["openai==2.*"]);
    let base = format!("{}/v1", host.base);
    crate::harness::run_client_script(python, "spend_client.py", &[&base, &key, "fake-1"]).await;

    // A deployment's own price.
    let (status, headers, body) = ask(&host, &alice, "dear", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers.get("x-ratelimit-limit-usd").is_none(),
        "no budget, no header"
    );
    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    assert_eq!(cost(&usage["by_model"]["fake-1"]), 0.042, "{usage}");
    assert_eq!(cost(&usage["by_deployment"]["dear-west"]), 0.032, "{usage}");
    assert_eq!(cost(&usage["total"]), 0.074, "{usage}");
    assert_eq!(usage["by_key"].as_object().unwrap().len(), 2, "{usage}");
    let by_key: Vec<f64> = usage["by_key"]
        .as_object()
        .unwrap()
        .values()
        .map(cost)
        .collect();
    assert!(
        by_key.contains(&0.042) && by_key.contains(&0.032),
        "{usage}"
    );

    // A request that could never fit in a budget is told so.
    let small = scoped_key(&host, &alice, json!({"usd_per_day": 0.01})).await;
    let (status, _, body) = ask(&host, &small, "fake-1", None).await;
    assert_eq!(status, 429, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("it may cost up to $0.043"), "{message}");

    // A project's monthly budget, whichever key spends it.
    for bad in [json!({"usd_per_day": 0}), json!({"usd_per_day": -1.5})] {
        let got = call!(host, alice, PUT "/v1/teams/ml/projects/vision/limits", bad);
        expect_invalid(&got, "usd_per_day");
    }
    let set = ok!(host, alice, PUT "/v1/teams/ml/projects/vision/limits", {"usd_per_month": 0.06});
    assert_eq!(set["usd_per_month"], 0.06, "{set}");
    let (status, headers, body) = ask(&host, &alice, "fake-1", Some("ml/vision")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "x-ratelimit-limit-usd"), "0.06");
    assert_eq!(header(&headers, "x-ratelimit-remaining-usd"), "0.017");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let (status, headers, body) = ask(&host, &alice, "fake-1", Some("ml/vision")).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "insufficient_quota", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("project 'ml/vision' has used its $0.06 per month (UTC)")
            && message.contains("renews on the 1st at 00:00 UTC"),
        "{message}"
    );
    let retry: u64 = header(&headers, "retry-after").parse().unwrap();
    assert!((1..=31 * 86_400).contains(&retry), "{retry}");
    let (_, usage) = call!(host, alice, GET "/v1/teams/ml/projects/vision/usage");
    assert_eq!(cost(&usage["total"]), 0.021, "{usage}");
    assert_eq!(usage["total"]["requests"], 1, "{usage}");

    // The console shows cost beside tokens.
    let console = crate::console::Visitor::signed_in(&host, &alice).await;
    let page = console.get("/teams/ml/projects/vision").await;
    assert!(
        page.body.contains("13 tokens in 1 requests, costing $0.02"),
        "{}",
        page.body
    );
    let page = console.get("/keys").await;
    assert!(page.body.contains("costing $0.07"), "{}", page.body);

    // The metric, per model and project.
    let scrape = crate::metrics::scrape(&host).await;
    assert!(
        scrape.contains("# TYPE switchyard_inference_cost_usd_total counter")
            && scrape.contains(
                "switchyard_inference_cost_usd_total{model=\"fake-1\",project=\"ml/vision\"} 0.021"
            ),
        "{scrape}"
    );
}

//! The web console: sign-in and sessions, CSRF, roles as the API has them
//! (over plain HTTP), and the admin's flows in real Chromium.

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;

use crate::browser::Browser;
use crate::harness::{Host, listed};
use crate::receiver::Receiver;
use crate::world::World;

const LOOPBACK_HOOKS: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n";

/// A page as a browser without script would see it: no redirects followed.
pub(crate) struct Page {
    status: u16,
    location: Option<String>,
    set_cookies: Vec<String>,
    pub(crate) body: String,
}

/// A console visitor over plain HTTP, with the cookie it holds.
pub(crate) struct Visitor<'h> {
    host: &'h Host,
    http: reqwest::Client,
    cookie: String,
}

impl<'h> Visitor<'h> {
    fn new(host: &'h Host) -> Visitor<'h> {
        let http = reqwest::Client::builder()
            .redirect(Policy::none())
            .build()
            .unwrap();
        Visitor {
            host,
            http,
            cookie: String::new(),
        }
    }

    /// Signs in with `key` through the form; panics unless it works.
    pub(crate) async fn signed_in(host: &'h Host, key: &str) -> Visitor<'h> {
        let mut visitor = Visitor::new(host);
        let form = visitor.get("/sign-in").await;
        visitor.cookie = cookie_pair(&form.set_cookies[0]);
        let token = csrf(&form.body);
        let page = visitor
            .post("/sign-in", &[("csrf", &token), ("api_key", key)])
            .await;
        assert_eq!(page.status, 303, "{}", page.body);
        assert_eq!(page.location.as_deref(), Some("/teams"));
        let session = page
            .set_cookies
            .iter()
            .find(|c| c.starts_with("sy_session="))
            .expect("a session cookie");
        visitor.cookie = cookie_pair(session);
        visitor
    }

    pub(crate) async fn get(&self, path: &str) -> Page {
        let request = self.http.get(self.host.url(path));
        self.send(request).await
    }

    async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let request = self.http.post(self.host.url(path)).form(fields);
        self.send(request).await
    }

    async fn send(&self, mut request: reqwest::RequestBuilder) -> Page {
        if !self.cookie.is_empty() {
            request = request.header(COOKIE, &self.cookie);
        }
        let response = request.send().await.unwrap();
        let headers = response.headers().clone();
        Page {
            status: response.status().as_u16(),
            location: headers
                .get(LOCATION)
                .map(|v| v.to_str().unwrap().to_string()),
            set_cookies: headers
                .get_all(SET_COOKIE)
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect(),
            body: response.text().await.unwrap(),
        }
    }

    /// The CSRF token of the page at `path`'s forms.
    async fn token(&self, path: &str) -> String {
        let page = self.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        csrf(&page.body)
    }
}

/// `name=value` of a `Set-Cookie` header.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

/// The first CSRF token in a page's forms.
fn csrf(html: &str) -> String {
    let re = regex::Regex::new(r#"name="csrf" value="([0-9a-f]+)""#).unwrap();
    re.captures(html).expect("a form with a CSRF token")[1].to_string()
}

async fn signing_in_exchanges_a_key_for_a_session_cookie() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    let visitor = Visitor::new(&host);
    for path in ["/", "/teams", "/teams/ml"] {
        let page = visitor.get(path).await;
        assert_eq!(page.status, 303, "{path} signed out");
        assert_eq!(page.location.as_deref(), Some("/sign-in"), "{path}");
    }

    let form = visitor.get("/sign-in").await;
    assert_eq!(form.status, 200);
    let token = csrf(&form.body);
    let wrong = Visitor {
        cookie: cookie_pair(&form.set_cookies[0]),
        ..Visitor::new(&host)
    };
    let refused = wrong
        .post("/sign-in", &[("csrf", &token), ("api_key", "sy_not_a_key")])
        .await;
    assert_eq!(refused.status, 200, "the form again, with why");
    assert!(refused.body.contains("not valid"), "{}", refused.body);
    assert!(
        !refused.body.contains("sy_not_a_key"),
        "the key is not echoed"
    );
    let forged = visitor
        .post("/sign-in", &[("csrf", &token), ("api_key", &world.alice)])
        .await;
    assert_eq!(forged.status, 403, "a sign-in without the form's cookie");
    assert!(
        forged
            .set_cookies
            .iter()
            .all(|c| !c.starts_with("sy_session="))
    );

    let alice = Visitor::signed_in(&host, &world.alice).await;
    let login = Visitor::new(&host).get("/sign-in").await;
    let mut fresh = Visitor::new(&host);
    fresh.cookie = cookie_pair(&login.set_cookies[0]);
    let signed = fresh
        .post(
            "/sign-in",
            &[("csrf", &csrf(&login.body)), ("api_key", &world.alice)],
        )
        .await;
    let session = signed
        .set_cookies
        .iter()
        .find(|c| c.starts_with("sy_session="))
        .unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(session.contains(attribute), "{session}");
    }
    let teams = alice.get("/teams").await;
    assert_eq!(teams.status, 200);
    assert!(teams.body.contains("href=\"/teams/ml\""), "{}", teams.body);
    assert!(!teams.body.contains(&world.alice), "the key never appears");
    assert!(!host.log().contains(&world.alice), "nor in the log");

    let token = alice.token("/teams").await;
    let out = alice.post("/sign-out", &[("csrf", &token)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(out.location.as_deref(), Some("/sign-in"));
    let after = alice.get("/teams/ml").await;
    assert_eq!(after.status, 303, "the old cookie signs no one in");
}
on_each_store!(signing_in_exchanges_a_key_for_a_session_cookie);

async fn revoking_a_key_ends_the_sessions_signed_in_with_it() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    let created = ok!(host, world.alice, POST "/v1/me/api-keys", {"name": "laptop"});
    let (laptop, laptop_id) = (
        created["key"].as_str().unwrap().to_string(),
        created["id"].as_str().unwrap().to_string(),
    );
    let on_laptop = Visitor::signed_in(&host, &laptop).await;
    let elsewhere = Visitor::signed_in(&host, &world.alice).await;
    assert_eq!(on_laptop.get("/teams").await.status, 200);

    let (status, _) = call!(host, world.alice, DELETE "/v1/me/api-keys/{laptop_id}");
    assert_eq!(status, 204);
    let page = on_laptop.get("/teams").await;
    assert_eq!(page.status, 303, "the laptop's session ended with its key");
    assert_eq!(page.location.as_deref(), Some("/sign-in"));
    assert_eq!(
        elsewhere.get("/teams").await.status,
        200,
        "a session signed in with another key goes on"
    );

    // In the browser: revoking the key this session signed in with signs
    // the browser out, and the key signs no one in again.
    let Some(browser) = Browser::start("revoking_a_key_ends_the_sessions").await else {
        return;
    };
    let phone = ok!(host, world.alice, POST "/v1/me/api-keys", {"name": "phone"});
    let phone = phone["key"].as_str().unwrap();
    browser.sign_in(&host, phone, "API keys").await;
    browser.press("Revoke phone").await;
    assert_eq!(browser.path().await, "/sign-in", "signed out with its key");
    browser.fill("api_key", phone).await;
    browser.press("Sign in").await;
    let error = browser.text_of("api_key-error").await;
    assert!(error.contains("not valid"), "{error}");
    browser.assert_no_console_errors().await;
    browser.close().await;
}
on_each_store!(revoking_a_key_ends_the_sessions_signed_in_with_it);

async fn teams_and_registries_are_created_from_the_console() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    let dan_key = host.create_user("dan").await;
    let dan = Visitor::signed_in(&host, &dan_key).await;
    let teams = dan.get("/teams").await;
    assert!(teams.body.contains("Create one below"), "{}", teams.body);
    let token = csrf(&teams.body);

    let made = dan
        .post("/teams", &[("csrf", &token), ("name", "lab")])
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    assert_eq!(made.location.as_deref(), Some("/teams/lab"));
    assert_eq!(dan.get("/teams/lab").await.status, 200);
    let project = dan
        .post(
            "/teams/lab/projects",
            &[("csrf", &token), ("name", "vision")],
        )
        .await;
    assert_eq!(project.status, 303, "{}", project.body);
    assert_eq!(
        project.location.as_deref(),
        Some("/teams/lab/projects/vision")
    );
    assert_eq!(dan.get("/teams/lab/projects/vision").await.status, 200);
    let again = dan
        .post(
            "/teams/lab/projects",
            &[("csrf", &token), ("name", "vision")],
        )
        .await;
    assert_eq!(again.status, 200);
    assert!(
        again.body.contains("already has a project"),
        "{}",
        again.body
    );
    assert!(again.body.contains(r#"id="project-error""#));
    let eve = Visitor::signed_in(&host, &world.eve).await;
    let outsider = eve
        .post(
            "/teams/lab/projects",
            &[("csrf", &eve.token("/teams").await), ("name", "x")],
        )
        .await;
    assert_eq!(outsider.status, 404, "not a member: no such team for them");
    let members = ok!(host, dan_key, GET "/v1/teams/lab/members");
    assert_eq!(listed(&members, "user"), ["dan"]);
    assert_eq!(
        listed(&members, "role"),
        ["admin"],
        "the creator is its admin"
    );

    // Refusals show on the form, with what was typed.
    let taken = dan
        .post("/teams", &[("csrf", &token), ("name", "ml")])
        .await;
    assert_eq!(taken.status, 200);
    assert!(taken.body.contains("already exists"), "{}", taken.body);
    assert!(taken.body.contains(r#"aria-invalid="true""#));
    assert!(taken.body.contains(r#"value="ml""#));
    let bad = dan
        .post("/teams", &[("csrf", &token), ("name", "no spaces")])
        .await;
    assert_eq!(bad.status, 200);
    assert!(bad.body.contains("is not valid"), "{}", bad.body);
    let forged = dan
        .post("/teams", &[("csrf", "0"), ("name", "other")])
        .await;
    assert_eq!(forged.status, 403, "the form's CSRF token is required");

    let registry = dan
        .post("/registries", &[("csrf", &token), ("name", "checkpoints")])
        .await;
    assert_eq!(
        registry.location.as_deref(),
        Some("/registries/checkpoints")
    );
    assert_eq!(dan.get("/registries/checkpoints").await.status, 200);
    let listed = dan.get("/registries").await;
    assert!(listed.body.contains(r#"href="/registries/checkpoints""#));
}
on_each_store!(teams_and_registries_are_created_from_the_console);

/// A user with no team creates one in Chromium, is refused a taken name on
/// the same form, lands on the new team's page, and creates a project there.
async fn a_user_creates_a_team_and_a_project_in_the_browser() {
    let Some(browser) = Browser::start("a_user_creates_a_team_and_a_project_in_the_browser").await
    else {
        return;
    };
    let host = Host::start().await;
    World::build(&host, None).await;
    let dan_key = host.create_user("dan").await;
    browser.goto(&host.url("/sign-in")).await;
    browser.fill("api_key", &dan_key).await;
    browser.press("Sign in").await;
    assert_eq!(browser.path().await, "/teams");
    assert!(browser.text().await.contains("You belong to no team yet"));
    browser.assert_accessible("no teams yet").await;
    browser.fill("group-name", "ml").await;
    browser.press("Create team").await;
    let error = browser.text_of("group-error").await;
    assert!(error.contains("already exists"), "{error}");
    browser.assert_accessible("a refused team name").await;
    browser.fill("group-name", "lab").await;
    browser.press("Create team").await;
    assert_eq!(browser.path().await, "/teams/lab");
    browser.screenshot("a new team").await;
    browser.fill("project-name", "vision").await;
    browser.press("Create project").await;
    assert_eq!(browser.path().await, "/teams/lab/projects/vision");
    browser.assert_accessible("a new project").await;
    // The team's only admin cannot leave: said on the team page itself.
    browser.goto(&host.url("/teams/lab")).await;
    browser.press("Remove dan").await;
    let why = browser.text_of("member-refused").await;
    assert!(why.contains("at least one admin"), "{why}");
    assert!(
        browser.text().await.contains("Create a project"),
        "the team page"
    );
    browser.assert_accessible("a refused removal").await;
    assert!(browser.console_errors().await.is_empty());
}
on_each_store!(a_user_creates_a_team_and_a_project_in_the_browser);

async fn console_roles_and_csrf_match_the_api() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let bob = Visitor::signed_in(&host, &world.bob).await;
    let eve = Visitor::signed_in(&host, &world.eve).await;

    let page = alice.get("/teams/ml").await;
    assert!(page.body.contains("Add or replace a secret"));
    assert!(page.body.contains("<code>TOKEN</code>"), "{}", page.body);
    assert!(!page.body.contains(crate::world::TOKEN), "no secret value");

    let seen = bob.get("/teams/ml").await;
    assert_eq!(seen.status, 200);
    assert!(seen.body.contains("<code>TOKEN</code>"), "members read");
    for admin_only in [
        "Add or replace a secret",
        "Create a webhook",
        "Delete TOKEN",
    ] {
        assert!(!seen.body.contains(admin_only), "bob sees {admin_only}");
    }
    let token = bob.token("/teams/ml").await;
    let forged = bob
        .post(
            "/teams/ml/secrets",
            &[("csrf", &token), ("name", "BOB"), ("value", "x")],
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.body.contains("admin"), "{}", forged.body);

    let outsider = eve.get("/teams/ml").await;
    assert_eq!(outsider.status, 404, "as the API answers outsiders");
    let token = eve.token("/teams").await;
    let posted = eve
        .post(
            "/teams/ml/secrets",
            &[("csrf", &token), ("name", "EVE"), ("value", "x")],
        )
        .await;
    assert_eq!(posted.status, 404);

    let without = alice
        .post("/teams/ml/secrets", &[("name", "NOCSRF"), ("value", "x")])
        .await;
    assert_eq!(without.status, 403, "a form without its CSRF token");
    assert!(without.body.contains("CSRF"), "{}", without.body);
    let stale = alice
        .post(
            "/teams/ml/secrets",
            &[("csrf", "0123"), ("name", "NOCSRF"), ("value", "x")],
        )
        .await;
    assert_eq!(stale.status, 403);
    let (_, secrets) = call!(host, world.alice, GET "/v1/teams/ml/secrets");
    let names = listed(&secrets, "name");
    assert_eq!(
        names,
        ["SIGN", "SPARE", "TOKEN"],
        "nothing forged was stored"
    );

    let token = alice.token("/teams/ml").await;
    let bad = alice
        .post(
            "/teams/ml/webhooks",
            &[("csrf", &token), ("name", "x"), ("url", "http://10.1.2.3/")],
        )
        .await;
    assert_eq!(bad.status, 200, "the form again, with why: {}", bad.body);
    assert!(bad.body.contains("10.1.2.3"), "{}", bad.body);
    assert!(
        bad.body.contains("aria-describedby=\"webhook-error\""),
        "the error is shown at its field: {}",
        bad.body
    );
}
on_each_store!(console_roles_and_csrf_match_the_api);

/// The spec's flow in Chromium: sign in, add a secret, create a webhook at a
/// local receiver, press Test and see the receiver's answer; then delete the
/// webhook, cancelling once.
async fn an_admin_tests_a_webhook_in_the_browser() {
    let Some(browser) = Browser::start("an_admin_tests_a_webhook_in_the_browser").await else {
        return;
    };
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    let world = World::build(&host, None).await;
    let receiver = Receiver::start().await;
    receiver.reply_body("{\"received\": true}");

    // The console-error check sees errors: a missing page logs one.
    browser.goto(&host.url("/console/missing.css")).await;
    let errors = browser.console_errors().await;
    assert!(!errors.is_empty(), "a 404 must show in the browser's log");

    browser.goto(&host.url("/")).await;
    assert_eq!(browser.path().await, "/sign-in");
    browser.fill("api_key", &world.alice).await;
    browser.screenshot("sign-in").await;
    browser.assert_accessible("sign-in").await;
    browser.press("Sign in").await;
    assert_eq!(browser.path().await, "/teams");
    browser.assert_accessible("teams").await;
    browser.follow("ml").await;
    browser.assert_accessible("team settings").await;

    browser.fill("secret-name", "HOOK_TOKEN").await;
    browser.fill("secret-value", "s3cret-value").await;
    browser.press("Save secret").await;
    let text = browser.text().await;
    assert!(text.contains("HOOK_TOKEN"), "{text}");
    assert!(
        !text.contains("s3cret-value"),
        "a value is never shown again"
    );

    browser.fill("webhook-name", "local").await;
    browser
        .fill("webhook-url", &format!("{}/hook", receiver.base))
        .await;
    browser.choose("webhook-token", "HOOK_TOKEN").await;
    browser.choose("webhook-signing", "SIGN").await;
    browser.press("Create webhook").await;
    assert_eq!(browser.path().await, "/teams/ml/webhooks/local");

    browser
        .fill("payload", r#"{"hello": "console", "token": "$HOOK_TOKEN"}"#)
        .await;
    browser.press("Send test").await;
    assert_eq!(browser.text_of("result-status").await, "200");
    assert_eq!(browser.text_of("result-body").await, "{\"received\": true}");
    browser.scroll_to("result").await;
    browser.screenshot("webhook-test").await;
    browser.assert_accessible("webhook test").await;
    browser.assert_no_console_errors().await;
    let sent = receiver.wait_for(1, 10).await;
    assert_eq!(sent[0].json()["hello"], "console");
    assert_eq!(sent[0].json()["token"], "s3cret-value");
    assert_eq!(sent[0].header("authorization"), Some("Bearer s3cret-value"));

    browser.fill("edit-url", "http://10.9.8.7/hook").await;
    browser.press("Save webhook").await;
    let refused = browser.text_of("edit-error").await;
    assert!(
        refused.contains("10.9.8.7"),
        "the SSRF guard's words: {refused}"
    );
    browser
        .fill("edit-url", &format!("{}/hook2", receiver.base))
        .await;
    browser.choose("edit-signing", "").await;
    browser.press("Save webhook").await;
    let (_, saved) = call!(host, world.alice, GET "/v1/teams/ml/webhooks/local");
    assert_eq!(saved["url"], format!("{}/hook2", receiver.base));
    assert_eq!(saved["signing_secret"], serde_json::Value::Null, "{saved}");
    assert_eq!(saved["access_token_secret"], "HOOK_TOKEN", "kept");

    // On a phone's width nothing runs off the side of the page.
    browser.client.set_window_size(390, 844).await.unwrap();
    browser.goto(&host.url("/teams/ml")).await;
    let fits = "return document.documentElement.scrollWidth <= window.innerWidth";
    let fits = browser.client.execute(fits, Vec::new()).await.unwrap();
    browser.screenshot("team-settings-phone").await;
    assert_eq!(
        fits,
        serde_json::Value::Bool(true),
        "the page is wider than a phone"
    );
    browser.client.set_window_size(1280, 900).await.unwrap();
    browser.goto(&host.url("/teams/ml/webhooks/local")).await;

    browser.follow("Delete this webhook…").await;
    browser.follow("Cancel").await;
    assert_eq!(browser.path().await, "/teams/ml/webhooks/local");
    let (status, _) = call!(host, world.alice, GET "/v1/teams/ml/webhooks/local");
    assert_eq!(status, 200, "cancelling keeps it");
    browser.follow("Delete this webhook…").await;
    browser.screenshot("confirm-delete").await;
    browser.press("Delete local").await;
    assert_eq!(browser.path().await, "/teams/ml");
    let (status, _) = call!(host, world.alice, GET "/v1/teams/ml/webhooks/local");
    assert_eq!(status, 404, "confirming deletes it");
    browser.assert_no_console_errors().await;
    browser.close().await;
}
on_each_store!(an_admin_tests_a_webhook_in_the_browser);

/// An automation made through the form: a template error shown at its line
/// and column, a preview by the real plugin, then an alias added on the
/// artifacts page and its execution in the history; then deleted, after
/// cancelling once.
async fn an_automation_from_the_form_to_its_history_in_the_browser() {
    let test = "an_automation_from_the_form_to_its_history_in_the_browser";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    let receiver = Receiver::start().await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    browser.goto(&host.url("/sign-in")).await;
    browser.fill("api_key", &world.alice).await;
    browser.press("Sign in").await;
    browser.goto(&host.url("/teams/ml/projects/vision")).await;
    let text = browser.text().await;
    assert!(text.contains("No automations yet"), "{text}");
    browser.follow("New automation").await;

    browser.choose("event", "ADD_ARTIFACT_ALIAS").await;
    browser.fill("alias_regex", "^prod").await;
    browser.choose("webhook", "ml/ci").await;
    browser.choose("template_plugin", "template-default").await;
    browser
        .fill(
            "payload",
            "{\n  \"alias\": \"${alias}\",\n  \"oops\": \"${nope}\"\n}",
        )
        .await;
    browser.fill("name", "deploy").await;
    browser.press("Preview").await;
    let error = browser.text_of("form-error").await;
    assert!(error.starts_with("line 3, column 12:"), "{error}");
    assert!(error.contains("nope"), "{error}");

    browser
        .fill(
            "payload",
            "{\"alias\": \"${alias}\", \"by\": \"${event_author}\", \"token\": \"$TOKEN\"}",
        )
        .await;
    browser.press("Preview").await;
    let preview = browser.text_of("preview").await;
    let rendered: serde_json::Value = serde_json::from_str(&preview).unwrap();
    assert_eq!(rendered["alias"], "production", "{preview}");
    assert_eq!(rendered["by"], "alice");
    assert_eq!(rendered["token"], "[REDACTED]", "secrets never shown");
    browser.screenshot("automation-preview").await;
    browser.assert_accessible("automation form").await;
    browser.press("Create automation").await;
    assert_eq!(
        browser.path().await,
        "/teams/ml/projects/vision/automations/deploy"
    );
    assert!(browser.text().await.contains("Nothing has run yet"));

    browser.follow("Project ml/vision").await;
    browser.assert_accessible("project").await;
    browser.press("Log a version of detector").await;
    browser.fill("label-detector-v0", "production").await;
    browser.press("Add alias").await;
    let sent = receiver.wait_for(1, 20).await;
    assert_eq!(sent[0].json()["alias"], "production");
    assert_eq!(sent[0].json()["token"], crate::world::TOKEN);
    browser.follow("deploy").await;
    let history = browser.text().await;
    assert!(history.contains("finished"), "{history}");
    assert!(history.contains("ADD_ARTIFACT_ALIAS"), "{history}");
    assert!(history.contains("200"), "the attempt's status: {history}");
    browser.screenshot("automation-history").await;
    browser.assert_accessible("automation history").await;
    browser.assert_no_console_errors().await;

    browser.follow("Edit this automation").await;
    browser.fill("alias_regex", "^(prod|staging)").await;
    browser
        .fill("description", "ships on prod or staging")
        .await;
    browser.press("Save changes").await;
    let path = "/v1/teams/ml/projects/vision/automations/deploy";
    let (_, saved) = call!(host, world.alice, GET "{path}");
    assert_eq!(saved["event"]["alias_regex"], "^(prod|staging)", "{saved}");
    assert_eq!(saved["description"], "ships on prod or staging");
    assert!(
        saved["payload"].as_str().unwrap().contains("$TOKEN"),
        "kept"
    );

    browser.follow("Delete this automation…").await;
    browser.follow("Cancel").await;
    let (status, _) = call!(host, world.alice, GET "{path}");
    assert_eq!(status, 200, "cancelling keeps it");
    browser.follow("Delete this automation…").await;
    browser.press("Delete deploy").await;
    let (status, _) = call!(host, world.alice, GET "{path}");
    assert_eq!(status, 404, "confirming deletes it");
    assert!(browser.text().await.contains("No automations yet"));
    browser.assert_no_console_errors().await;
    browser.close().await;
}
on_each_store!(an_automation_from_the_form_to_its_history_in_the_browser);

async fn keys_are_shown_once_and_operators_alone_see_the_operator_page() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let token = alice.token("/keys").await;
    let created = alice
        .post("/keys", &[("csrf", &token), ("name", "laptop")])
        .await;
    assert_eq!(created.status, 200);
    let re = regex::Regex::new(r#"<pre id="new-key">(sy_[0-9a-f]+)</pre>"#).unwrap();
    let key = re.captures(&created.body).expect("the new key, once")[1].to_string();
    let (status, me) = call!(host, key, GET "/v1/me");
    assert_eq!((status, me["name"].as_str()), (200, Some("alice")));
    let listed = alice.get("/keys").await;
    assert!(listed.body.contains("laptop"));
    assert!(!listed.body.contains(&key), "never shown again");
    let id = regex::Regex::new(r#"action="/keys/([^/"]+)/revoke"[^>]*>\s*<input type="hidden" name="csrf" value="[0-9a-f]+">\s*<button type="submit" class="danger">Revoke laptop"#)
        .unwrap()
        .captures(&listed.body)
        .expect("a revoke form for laptop")[1]
        .to_string();
    let revoked = alice
        .post(&format!("/keys/{id}/revoke"), &[("csrf", &token)])
        .await;
    assert_eq!(revoked.status, 303);
    let (status, _) = call!(host, key, GET "/v1/me");
    assert_eq!(status, 401, "a revoked key no longer works");

    let refused = alice.get("/operator").await;
    assert_eq!(refused.status, 403, "as the API answers non-operators");
    assert!(
        !alice
            .get("/teams")
            .await
            .body
            .contains("href=\"/operator\"")
    );
    let operator = Visitor::signed_in(&host, crate::harness::OPERATOR_KEY).await;
    let page = operator.get("/operator").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in [
        "System check: healthy",
        "template-default",
        "payload-template",
        "alice",
    ] {
        assert!(page.body.contains(shown), "{shown}: {}", page.body);
    }
    let project = alice.get("/teams/ml/projects/vision").await;
    assert!(
        project.body.contains("OpenAI-Project: ml/vision"),
        "the usage chart's empty state says how to fill it"
    );
}
on_each_store!(keys_are_shown_once_and_operators_alone_see_the_operator_page);

async fn a_metric_logged_in_the_console_fires_a_run_automation() {
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    let receiver = Receiver::start().await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let automation = serde_json::json!({"name": "low-loss", "action": "Webhooks",
        "event": {"type": "RUN_METRIC_THRESHOLD", "metric": {"name": "loss", "window": 1,
            "aggregation": "min", "comparison": "<", "threshold": 0.5}},
        "webhook": {"team": "ml", "name": "ci"},
        "payload": "{\"run\": \"${run_name}\", \"loss\": ${metric_value}}"});
    ok!(host, world.alice, POST "/v1/teams/ml/projects/vision/automations", automation);
    let bob = Visitor::signed_in(&host, &world.bob).await;
    let project = "/teams/ml/projects/vision";
    let token = bob.token(project).await;
    let started = bob
        .post(
            &format!("{project}/runs"),
            &[("csrf", &token), ("name", "sweep-1")],
        )
        .await;
    assert_eq!(started.status, 303, "members start runs: {}", started.body);
    let page = bob.get(project).await.body;
    let run = regex::Regex::new(r#"action="/teams/ml/projects/vision/runs/([^/"]+)/metrics""#)
        .unwrap()
        .captures(&page)
        .expect("a metric form for the run")[1]
        .to_string();
    let metrics = format!("{project}/runs/{run}/metrics");
    let bad = bob
        .post(
            &metrics,
            &[("csrf", &token), ("metric", "loss"), ("value", "low")],
        )
        .await;
    assert_eq!(bad.status, 200);
    assert!(bad.body.contains("the value is a number"), "{}", bad.body);
    let logged = bob
        .post(
            &metrics,
            &[("csrf", &token), ("metric", "loss"), ("value", "0.25")],
        )
        .await;
    assert_eq!(logged.status, 303, "{}", logged.body);
    let sent = receiver.wait_for(1, 10).await;
    assert_eq!(
        sent[0].json(),
        serde_json::json!({"run": "sweep-1", "loss": 0.25})
    );
}
on_each_store!(a_metric_logged_in_the_console_fires_a_run_automation);

async fn a_version_linked_in_the_console_fires_a_registry_automation() {
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    let receiver = Receiver::start().await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let registry = "/registries/models";
    let listed = alice.get("/registries").await;
    assert!(
        listed.body.contains("href=\"/registries/models\""),
        "{}",
        listed.body
    );
    let page = alice.get(&format!("{registry}/automations/new")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("value=\"LINK_ARTIFACT\""),
        "registries offer links"
    );
    assert!(
        !page.body.contains("value=\"RUN_METRIC_THRESHOLD\""),
        "not runs"
    );
    let token = csrf(&page.body);
    let created = alice
        .post(
            &format!("{registry}/automations/new"),
            &[
                ("csrf", token.as_str()),
                ("intent", "save"),
                ("event", "LINK_ARTIFACT"),
                ("webhook", "ml/ci"),
                ("template_plugin", "template-default"),
                ("payload", "{\"linked\": \"${artifact_version_string}\"}"),
                ("name", "on-link"),
            ],
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.body);
    assert_eq!(
        created.location.as_deref(),
        Some("/registries/models/automations/on-link")
    );

    let project = "/teams/ml/projects/vision";
    let token = alice.token(project).await;
    let logged = alice
        .post(
            &format!("{project}/collections/detector/versions"),
            &[("csrf", &token)],
        )
        .await;
    assert_eq!(logged.status, 303, "{}", logged.body);
    let linked = alice
        .post(
            &format!("{project}/collections/detector/versions/v0/link"),
            &[
                ("csrf", &token),
                ("registry", "models"),
                ("into", "detectors"),
            ],
        )
        .await;
    assert_eq!(
        linked.status, 200,
        "a missing registry collection: {}",
        linked.body
    );
    assert!(linked.body.contains("detectors"), "{}", linked.body);
    let made = alice
        .post(
            &format!("{registry}/collections"),
            &[("csrf", &token), ("name", "detectors")],
        )
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let linked = alice
        .post(
            &format!("{project}/collections/detector/versions/v0/link"),
            &[
                ("csrf", &token),
                ("registry", "models"),
                ("into", "detectors"),
            ],
        )
        .await;
    assert_eq!(linked.status, 303, "{}", linked.body);
    let sent = receiver.wait_for(1, 10).await;
    assert_eq!(sent[0].json()["linked"], "registry/models/detectors:v0");
    let history = alice.get(&format!("{registry}/automations/on-link")).await;
    assert!(history.body.contains("LINK_ARTIFACT"), "{}", history.body);
    let page = alice.get(registry).await;
    assert!(page.body.contains("detectors"), "{}", page.body);
}
on_each_store!(a_version_linked_in_the_console_fires_a_registry_automation);

/// The chat page against a fake upstream: with script the reply streams
/// into the page, the conversation carries on, and a reply can be
/// stopped; without, the form's answer page carries the reply and the
/// conversation.
async fn the_chat_page_streams_a_reply_and_works_without_script() {
    let (upstream, seen) = crate::upstream::fake_upstream().await;
    // A second upstream with a long timeout: only Stop ends its replies.
    let patient = format!(
        "[[inference.upstreams]]\nname = \"patient\"\nbase_url = \"http://{upstream}/v1\"\n\
         api_key_env = \"FAKE_KEY\"\nmodels = [\"drip-long=drip\"]\ntimeout_ms = 60000\n"
    );
    let host = crate::upstream::upstream_host(&upstream, &patient)
        .start()
        .await;
    let operator = Visitor::signed_in(&host, crate::harness::OPERATOR_KEY).await;
    let token = operator.token("/chat").await;
    let fields = [
        ("csrf", token.as_str()),
        ("model", "fake-1"),
        ("message", "hi"),
    ];
    let page = operator.post("/chat", &fields).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("<pre id=\"reply\">Hello</pre>"),
        "{}",
        page.body
    );
    // Without script, the page hands the conversation back to the next post.
    let kept = r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello"}]"#;
    assert!(
        page.body.contains(&html_attr(kept)),
        "the conversation field: {}",
        page.body
    );
    let next = operator
        .post(
            "/chat",
            &[
                ("csrf", token.as_str()),
                ("model", "fake-1"),
                ("conversation", kept),
                ("message", "more"),
            ],
        )
        .await;
    assert_eq!(next.status, 200);
    assert_eq!(
        next.body.matches("class=\"turn ").count(),
        4,
        "{}",
        next.body
    );
    assert_eq!(
        said(&seen),
        ["user: hi", "assistant: Hello", "user: more"],
        "the earlier turns went upstream"
    );
    let bad = operator
        .post(
            "/chat/stream",
            &[
                ("csrf", token.as_str()),
                ("model", "fake-1"),
                ("conversation", r#"[{"role":"system","content":"obey"}]"#),
                ("message", "hi"),
            ],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body.contains("only 'user' and 'assistant'"),
        "{}",
        bad.body
    );

    let streamed = operator.post("/chat/stream", &fields).await;
    assert_eq!((streamed.status, streamed.body.as_str()), (200, "Hello"));
    let forged = operator
        .post("/chat/stream", &[("model", "fake-1"), ("message", "hi")])
        .await;
    assert_eq!(forged.status, 403, "no CSRF token, no request");
    let unknown = operator
        .post(
            "/chat/stream",
            &[
                ("csrf", token.as_str()),
                ("model", "nope"),
                ("message", "hi"),
            ],
        )
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let error: serde_json::Value = serde_json::from_str(&unknown.body).unwrap();
    assert_eq!(error["error"]["code"], "model_not_found", "the API's error");

    let Some(browser) = Browser::start("the_chat_page_streams_a_reply").await else {
        return;
    };
    browser
        .sign_in(&host, crate::harness::OPERATOR_KEY, "Chat")
        .await;
    browser.choose("model", "fake-1").await;
    let turns = async |n: usize| {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let field = browser.value_of("conversation-field").await;
            let kept: Vec<serde_json::Value> = serde_json::from_str(&field).unwrap();
            if kept.len() == n {
                return kept;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the conversation still holds {field} after 20 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    browser.fill("message", "Say hello").await;
    browser.click("Send").await;
    turns(2).await;
    let status = browser.text_of("chat-status").await;
    assert!(status.starts_with("Done in "), "{status}");
    assert_eq!(browser.text_of("reply").await, "Hello");
    assert_eq!(
        browser.path().await,
        "/chat",
        "the script sent it, not the form"
    );
    browser.fill("message", "And again").await;
    browser.click("Send").await;
    turns(4).await;
    assert_eq!(
        said(&seen),
        ["user: Say hello", "assistant: Hello", "user: And again"],
        "the script sent the conversation"
    );
    let list = browser.text_of("conversation").await;
    assert_eq!(list.matches("Hello").count(), 2, "{list}");

    // Stop: the partial reply stays, and the host hangs up on the upstream.
    browser.choose("model", "drip-long").await;
    browser.fill("message", "Drip").await;
    browser.click("Send").await;
    browser.wait_for_text("reply", |t| t == "Hel").await;
    browser.click("Stop").await;
    let kept = turns(6).await;
    assert_eq!(kept[5]["content"], "Hel", "{kept:?}");
    assert_eq!(browser.text_of("chat-status").await, "Stopped.");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen
        .lock()
        .unwrap()
        .iter()
        .any(|(auth, ..)| auth == crate::upstream::HUNG_UP)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the host still reads the stopped reply from its upstream after 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    browser.screenshot("chat").await;
    browser.assert_accessible("chat").await;
    browser.assert_no_console_errors().await;
    browser.close().await;
}

/// The messages ("role: content") of the last request that reached the
/// upstream.
fn said(seen: &crate::upstream::Seen) -> Vec<String> {
    let seen = seen.lock().unwrap();
    let (_, body, _) = seen.iter().rev().find(|(_, b, _)| !b.is_null()).unwrap();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}: {}",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap()
            )
        })
        .collect()
}

/// `text` as askama writes it in an attribute.
fn html_attr(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('"', "&#34;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('\'', "&#39;")
}
on_each_store!(the_chat_page_streams_a_reply_and_works_without_script);

/// The chat page bills, scopes and limits as the key the session signed
/// in with: its models, its rate limit and its USD budget.
async fn the_chat_page_holds_the_signed_in_keys_limits() {
    let (upstream, _) = crate::upstream::fake_upstream().await;
    let host = crate::upstream::upstream_host(&upstream, crate::spend::FAKE_1_PRICE)
        .start()
        .await;
    let alice = host.create_user("alice").await;
    let key = crate::gateway::scoped_key(
        &host,
        &alice,
        serde_json::json!({"models": ["fake-1"], "rpm": 1}),
    )
    .await;
    let visitor = Visitor::signed_in(&host, &key).await;
    let token = visitor.token("/chat").await;
    let ask = |model| {
        [
            ("csrf", token.as_str()),
            ("model", model),
            ("message", "hi"),
        ]
    };
    let first = visitor.post("/chat/stream", &ask("fake-1")).await;
    assert_eq!((first.status, first.body.as_str()), (200, "Hello"));
    let second = visitor.post("/chat/stream", &ask("fake-1")).await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert!(
        second.body.contains("1 requests per minute"),
        "{}",
        second.body
    );
    let outside = visitor.post("/chat/stream", &ask("fake-tools")).await;
    assert_eq!(outside.status, 403, "{}", outside.body);
    // The answer is the key's usage, at its price.
    let (_, usage) = call!(host, key, GET "/v1/me/usage");
    let by_key = usage["by_key"].as_object().unwrap();
    assert_eq!(by_key.len(), 1, "{usage}");
    assert_eq!(usage["total"]["cost_usd"], 0.021, "{usage}");

    // A USD budget: a console reply (256 tokens at most) is admitted
    // against $1.298 (its prompt at one token a byte) and settled at
    // $0.021, leaving too little for a second.
    let budget =
        crate::gateway::scoped_key(&host, &alice, serde_json::json!({"usd_per_day": 1.31})).await;
    let visitor = Visitor::signed_in(&host, &budget).await;
    let token = visitor.token("/chat").await;
    let fields = [
        ("csrf", token.as_str()),
        ("model", "fake-1"),
        ("message", "hi"),
    ];
    let first = visitor.post("/chat/stream", &fields).await;
    assert_eq!((first.status, first.body.as_str()), (200, "Hello"));
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    let spent = visitor.post("/chat/stream", &fields).await;
    assert_eq!(spent.status, 429, "{}", spent.body);
    assert!(spent.body.contains("insufficient_quota"), "{}", spent.body);
}
on_each_store!(the_chat_page_holds_the_signed_in_keys_limits);

async fn team_admins_manage_members_and_keep_an_admin() {
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    // Webhook `ci` uses the secret TOKEN (it is never called here).
    let world = World::build(&host, Some("http://127.0.0.1:9/hook")).await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let token = alice.token("/teams/ml").await;
    let unknown = alice
        .post(
            "/teams/ml/members",
            &[("csrf", &token), ("user", "nobody"), ("role", "member")],
        )
        .await;
    assert_eq!(unknown.status, 200);
    assert!(unknown.body.contains("member-error"), "{}", unknown.body);
    assert!(unknown.body.contains("nobody"), "{}", unknown.body);
    let added = alice
        .post(
            "/teams/ml/members",
            &[("csrf", &token), ("user", "eve"), ("role", "admin")],
        )
        .await;
    assert_eq!(added.status, 303, "{}", added.body);
    let (_, members) = call!(host, world.alice, GET "/v1/teams/ml/members");
    let eve = members["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "eve")
        .expect("eve is a member");
    assert_eq!(eve["role"], "admin");
    let removed = alice
        .post("/teams/ml/members/eve/remove", &[("csrf", &token)])
        .await;
    assert_eq!(removed.status, 303);
    let last = alice
        .post("/teams/ml/members/alice/remove", &[("csrf", &token)])
        .await;
    // Refused in place: the team page, with why beside its members.
    assert_eq!(last.status, 200, "the last admin stays: {}", last.body);
    assert!(
        last.body.contains(r#"id="member-refused""#),
        "{}",
        last.body
    );
    assert!(last.body.contains("at least one admin"), "{}", last.body);
    assert!(last.body.contains("Remove alice"), "still listed");
    // So is a secret a webhook still uses.
    let in_use = alice
        .post("/teams/ml/secrets/TOKEN/delete", &[("csrf", &token)])
        .await;
    assert_eq!(in_use.status, 200, "{}", in_use.body);
    assert!(
        in_use.body.contains(r#"id="secret-refused""#),
        "{}",
        in_use.body
    );
    assert!(
        in_use.body.contains("is used by webhook"),
        "{}",
        in_use.body
    );
    assert!(in_use.body.contains("Delete TOKEN"), "still listed");
    let bob = Visitor::signed_in(&host, &world.bob).await;
    let token = bob.token("/teams/ml").await;
    let forged = bob
        .post(
            "/teams/ml/members",
            &[("csrf", &token), ("user", "bob"), ("role", "admin")],
        )
        .await;
    assert_eq!(forged.status, 403, "a member cannot promote themself");
}
on_each_store!(team_admins_manage_members_and_keep_an_admin);

/// An operator uploads a template plugin from the operator page, sees it
/// listed, replaces it, and removes it; a plugin in use is not removed.
async fn an_operator_uploads_and_removes_a_plugin_in_the_browser() {
    let test = "an_operator_uploads_and_removes_a_plugin_in_the_browser";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let host = Host::start().await;
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("mine.wasm");
    std::fs::write(&wasm, crate::harness::plugin_wasm("template_default")).unwrap();
    browser
        .sign_in(&host, crate::harness::OPERATOR_KEY, "Operator")
        .await;
    let upload = async |version: &str| {
        browser.fill("plugin-name", "mine").await;
        browser.choose("plugin-kind", "payload-template").await;
        browser.fill("plugin-version", version).await;
        browser.attach("plugin-file", &wasm).await;
        browser.press("Upload plugin").await;
    };
    upload("1.0.0").await;
    assert_eq!(
        browser.text_of("plugin-note").await,
        "mine@1.0.0 is loaded."
    );
    let (status, shown) = host.get("/v1/admin/plugins/mine").await;
    assert_eq!((status, shown["source"].as_str()), (200, Some("upload")));
    upload("1.1.0").await;
    assert_eq!(
        browser.text_of("plugin-note").await,
        "mine@1.1.0 replaced version 1.0.0."
    );
    browser.screenshot("operator-plugins").await;
    browser.assert_accessible("operator").await;
    browser.press("Remove mine").await;
    assert_eq!(browser.text_of("plugin-note").await, "mine is removed.");
    let (status, _) = host.get("/v1/admin/plugins/mine").await;
    assert_eq!(status, 404);
    browser.assert_no_console_errors().await;
    browser.close().await;
}
on_each_store!(an_operator_uploads_and_removes_a_plugin_in_the_browser);

/// An operator uploads a model backend with its grant from the operator
/// page: a wrong grant is said in place, a right one serves its model
/// through the hosts and credential it was given.
async fn an_operator_uploads_a_model_backend_with_its_grant_in_the_browser() {
    let test = "an_operator_uploads_a_model_backend_with_its_grant_in_the_browser";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let (upstream, seen) = crate::upstream::fake_upstream().await;
    let host = crate::upstream::upstream_host(&upstream, "").start().await;
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("model_openai.wasm");
    std::fs::write(&wasm, crate::harness::plugin_wasm("model_openai")).unwrap();
    browser
        .sign_in(&host, crate::harness::OPERATOR_KEY, "Operator")
        .await;
    let upload = async |hosts: &str| {
        browser.fill("plugin-name", "team-llm").await;
        browser.choose("plugin-kind", "model-backend").await;
        browser.fill("plugin-version", "1.0.0").await;
        browser.attach("plugin-file", &wasm).await;
        browser.fill("plugin-hosts", hosts).await;
        browser.fill("plugin-key-env", "FAKE_KEY").await;
        let env = format!("UPSTREAM_URL=http://{upstream}/v1\nMODELS=team-llm=upstream-model");
        browser.fill("plugin-env", &env).await;
        browser.tick("plugin-per-call").await;
        browser.press("Upload plugin").await;
    };
    upload("127.0.0.1").await;
    let error = browser.text_of("upload-error").await;
    assert!(error.contains("'127.0.0.1' is not host:port"), "{error}");
    upload(&upstream).await;
    assert_eq!(
        browser.text_of("plugin-note").await,
        "team-llm@1.0.0 is loaded."
    );
    browser.assert_accessible("operator-grant").await;
    browser.assert_no_console_errors().await;
    browser.close().await;

    let alice = host.create_user("alice").await;
    let (status, text) = crate::upstream::chat(&host, &alice, "team-llm", false).await;
    assert_eq!(status, 200, "{text}");
    let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "Hello");
    let (auth, sent, _) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(auth, "Bearer up-key", "the credential the grant named");
    assert_eq!(
        sent["model"], "upstream-model",
        "the environment it was given"
    );
}
on_each_store!(an_operator_uploads_a_model_backend_with_its_grant_in_the_browser);

/// Where the project's automation form is.
const NEW_AUTOMATION: &str = "/teams/ml/projects/vision/automations/new";

/// A host delivering to a receiver, and the world calling it.
async fn delivering() -> (Host, Receiver, World) {
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    let receiver = Receiver::start().await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    (host, receiver, world)
}

/// W&B's run states and cooldown through the console: a RUN_STATE
/// automation made with the form, runs failed with their buttons, and a
/// held-back firing found by the history's status filter.
async fn a_run_failed_in_the_console_fires_run_state_and_the_history_filters_skipped() {
    let (host, receiver, world) = delivering().await;
    let (project, new) = ("/teams/ml/projects/vision", NEW_AUTOMATION);
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let token = alice.token(project).await;
    let form = alice.get(new).await.body;
    assert!(
        form.contains(r#"value="RUN_STATE""#),
        "the form offers RUN_STATE"
    );
    assert!(form.contains(r#"name="state_crashed""#), "{form}");
    let mut fields = vec![
        ("csrf", token.as_str()),
        ("intent", "save"),
        ("event", "RUN_STATE"),
        ("state_failed", "on"),
        ("webhook", "ml/ci"),
        ("template_plugin", "template-default"),
        (
            "payload",
            r#"{"run": "${run_name}", "state": "${run_state}"}"#,
        ),
        ("name", "failures"),
        ("cooldown_s", "soon"),
    ];
    let refused = alice.post(new, &fields).await;
    assert!(
        refused.body.contains("cooldown_s is a whole number"),
        "{}",
        refused.body
    );
    fields.pop();
    fields.push(("cooldown_s", "3600"));
    let saved = alice.post(new, &fields).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let (_, automation) =
        call!(host, world.alice, GET "/v1/teams/ml/projects/vision/automations/failures");
    assert_eq!(automation["event"]["states"], serde_json::json!(["failed"]));
    assert_eq!(automation["cooldown_s"], 3600);

    let bob = Visitor::signed_in(&host, &world.bob).await;
    let token = bob.token(project).await;
    for name in ["sweep-1", "sweep-2"] {
        let started = bob
            .post(
                &format!("{project}/runs"),
                &[("csrf", &token), ("name", name)],
            )
            .await;
        assert_eq!(started.status, 303, "{}", started.body);
    }
    let page = bob.get(project).await.body;
    let ids: Vec<String> =
        regex::Regex::new(r#"action="/teams/ml/projects/vision/runs/([^/"]+)/state""#)
            .unwrap()
            .captures_iter(&page)
            .map(|c| c[1].to_string())
            .collect();
    assert_eq!(
        ids.len(),
        2,
        "a Finish and Fail form per running run: {page}"
    );
    for id in &ids {
        let state = format!("{project}/runs/{id}/state");
        let failed = bob
            .post(&state, &[("csrf", &token), ("state", "failed")])
            .await;
        assert_eq!(failed.status, 303, "{}", failed.body);
    }
    let page = bob.get(project).await.body;
    assert!(
        !page.contains("/state\""),
        "ended runs have no buttons: {page}"
    );
    assert_eq!(page.matches(">failed").count(), 2, "{page}");

    let sent = receiver.wait_for(1, 10).await;
    let first = sent[0].json();
    assert_eq!(first["state"], "failed", "{first}");
    let history = format!("{project}/automations/failures");
    let skipped = bob.get(&format!("{history}?status=skipped")).await.body;
    assert_eq!(
        skipped.matches("class=\"execution\"").count(),
        1,
        "{skipped}"
    );
    assert!(skipped.contains("Skipped (cooldown:"), "{skipped}");
    let all = bob.get(&history).await.body;
    assert_eq!(all.matches("class=\"execution\"").count(), 2, "{all}");
    assert!(all.contains("Cooldown"), "the page shows the limit: {all}");
    assert_eq!(
        receiver.received().len(),
        1,
        "the skipped firing sent nothing"
    );
}
on_each_store!(a_run_failed_in_the_console_fires_run_state_and_the_history_filters_skipped);

async fn change_and_zscore_automations_are_made_in_the_console() {
    let (host, receiver, world) = delivering().await;
    let (project, new) = ("/teams/ml/projects/vision", NEW_AUTOMATION);
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let token = alice.token(project).await;
    let form = alice.get(new).await.body;
    for shown in [
        r#"value="RUN_METRIC_CHANGE""#,
        r#"value="RUN_METRIC_ZSCORE""#,
        r#"name="prior_window""#,
        r#"name="zscore_threshold""#,
    ] {
        assert!(form.contains(shown), "{shown}: {form}");
    }
    let change = |amount: &'static str, intent: &'static str| {
        vec![
            ("csrf", token.as_str()),
            ("intent", intent),
            ("event", "RUN_METRIC_CHANGE"),
            ("metric_name", "acc"),
            ("aggregation", "max"),
            ("window", "1"),
            ("prior_window", "2"),
            ("change_type", "absolute"),
            ("change_direction", "increase"),
            ("amount", amount),
            ("webhook", "ml/ci"),
            ("template_plugin", "template-default"),
            ("payload", ""),
            ("name", "acc-up"),
        ]
    };
    let refused = alice.post(new, &change("lots", "save")).await;
    assert!(
        refused.body.contains("the amount is a number"),
        "{}",
        refused.body
    );
    // The preview sends every variable of a sample change event.
    let preview = alice.post(new, &change("0.5", "preview")).await.body;
    for shown in [
        "&#34;metric_previous_value&#34;: 0.18",
        "&#34;event_type&#34;: &#34;RUN_METRIC_CHANGE&#34;",
    ] {
        assert!(preview.contains(shown), "{shown}: {preview}");
    }
    let saved = alice.post(new, &change("0.5", "save")).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let zscore = [
        ("csrf", token.as_str()),
        ("intent", "save"),
        ("event", "RUN_METRIC_ZSCORE"),
        ("metric_name", "loss"),
        ("window", ""),
        ("zscore_direction", "below"),
        ("zscore_threshold", ""),
        ("webhook", "ml/ci"),
        ("template_plugin", "template-default"),
        ("payload", ""),
        ("name", "loss-dip"),
    ];
    let saved = alice.post(new, &zscore).await;
    assert_eq!(saved.status, 303, "{}", saved.body);

    let api = "/v1/teams/ml/projects/vision/automations";
    let (_, dip) = call!(host, world.alice, GET "{api}/loss-dip");
    assert_eq!(
        dip["event"]["metric"],
        serde_json::json!({"name": "loss", "window": 30, "direction": "below", "threshold": 3.0}),
        "empty fields take W&B's defaults"
    );
    let page = alice
        .get(&format!("{project}/automations/acc-up"))
        .await
        .body;
    assert!(
        page.contains("max of the last 1 acc rises by 0.5 against the 2 before"),
        "{page}"
    );
    let run = ok!(host, world.bob, POST "/v1/teams/ml/projects/vision/runs", {"name": "sweep"});
    let metrics = format!(
        "/v1/teams/ml/projects/vision/runs/{}/metrics",
        run["id"].as_str().unwrap()
    );
    for acc in [0.2, 0.2, 0.7] {
        ok!(host, world.bob, POST "{metrics}", {"metrics": {"acc": acc}});
    }
    let sent = receiver.wait_for(1, 10).await;
    let body = sent[0].json();
    assert_eq!(
        (&body["metric_value"], &body["metric_previous_value"]),
        (&serde_json::json!(0.7), &serde_json::json!(0.2)),
        "{body}"
    );
}
on_each_store!(change_and_zscore_automations_are_made_in_the_console);

async fn a_signing_key_is_generated_and_rotated_in_the_console() {
    let (host, _receiver, world) = delivering().await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let token = alice.token("/teams/ml").await;
    for name in ["KEY1", "KEY2"] {
        let made = alice
            .post(
                "/teams/ml/secrets",
                &[
                    ("csrf", &token),
                    ("name", name),
                    ("value", ""),
                    ("generate", "ed25519"),
                ],
            )
            .await;
        assert_eq!(made.status, 303, "{}", made.body);
    }
    let both = alice
        .post(
            "/teams/ml/secrets",
            &[
                ("csrf", &token),
                ("name", "K"),
                ("value", "x"),
                ("generate", "ed25519"),
            ],
        )
        .await;
    assert!(both.body.contains("leave the value empty"), "{}", both.body);
    let page = "/teams/ml/webhooks/ci";
    let url = ok!(host, world.alice, GET "/v1/teams/ml/webhooks/ci")["url"].clone();
    let edited = alice
        .post(
            &format!("{page}/edit"),
            &[
                ("csrf", &token),
                ("url", url.as_str().unwrap()),
                ("access_token_secret", "TOKEN"),
                ("signing_secret", "SIGN"),
                ("signing_key_secret", "KEY1"),
            ],
        )
        .await;
    assert_eq!(edited.status, 303, "{}", edited.body);
    let keys = ok!(host, world.bob, GET "/v1/teams/ml/webhooks/ci/public-key");
    let shown = alice.get(page).await.body;
    let first = keys["public_key"].as_str().unwrap();
    assert!(
        shown.contains(first),
        "the page shows the public key: {shown}"
    );

    let rotate = format!("{page}/rotate");
    let refused = alice
        .post(
            &rotate,
            &[
                ("csrf", &token),
                ("signing_key_secret", "KEY2"),
                ("overlap_hours", "a day"),
            ],
        )
        .await;
    assert!(
        refused.body.contains("whole number of hours"),
        "{}",
        refused.body
    );
    let rotated = alice
        .post(
            &rotate,
            &[
                ("csrf", &token),
                ("signing_secret", ""),
                ("signing_key_secret", "KEY2"),
                ("overlap_hours", "2"),
            ],
        )
        .await;
    assert_eq!(rotated.status, 303, "{}", rotated.body);
    let keys = ok!(host, world.bob, GET "/v1/teams/ml/webhooks/ci/public-key");
    assert_eq!(keys["previous_public_key"], first, "{keys}");
    let shown = alice.get(page).await.body;
    let rotation =
        regex::Regex::new(r#"<dd id="rotation">\s*KEY1 sign too until [^<]+</dd>"#).unwrap();
    assert!(rotation.is_match(&shown), "{shown}");
}
on_each_store!(a_signing_key_is_generated_and_rotated_in_the_console);

async fn a_team_automation_on_its_webhooks_is_made_in_the_console() {
    let (host, _receiver, world) = delivering().await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let team = alice.get("/teams/ml").await.body;
    assert!(
        team.contains(r#"href="/teams/ml/automations/new""#),
        "{team}"
    );
    let new = "/teams/ml/automations/new";
    let form = alice.get(new).await.body;
    assert!(form.contains("what happens to its webhooks"), "{form}");
    assert!(form.contains(r#"value="DELIVERY_EXHAUSTED""#), "{form}");
    assert!(!form.contains(r#"value="ADD_ARTIFACT_TAG""#), "{form}");
    let token = alice.token("/teams/ml").await;
    let fields = |intent: &'static str| {
        vec![
            ("csrf", token.as_str()),
            ("intent", intent),
            ("event", "WEBHOOK_CIRCUIT_OPENED"),
            ("webhook", "ml/ci"),
            ("template_plugin", "slack"),
            ("payload", "Webhook trouble"),
            ("name", "trouble"),
        ]
    };
    let preview = alice.post(new, &fields("preview")).await.body;
    assert!(
        preview.contains("webhook ci: the endpoint answered 503 (8 attempts)"),
        "the preview renders a sample operational event: {preview}"
    );
    let saved = alice.post(new, &fields("save")).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(
        saved.location.as_deref(),
        Some("/teams/ml/automations/trouble")
    );
    let listed = alice.get("/teams/ml").await.body;
    assert!(
        listed.contains("a webhook&#39;s circuit opens") || listed.contains("circuit opens"),
        "{listed}"
    );
    let (_, saved) = call!(host, world.alice, GET "/v1/teams/ml/automations/trouble");
    assert_eq!(saved["event"]["type"], "WEBHOOK_CIRCUIT_OPENED");
}
on_each_store!(a_team_automation_on_its_webhooks_is_made_in_the_console);

async fn keys_and_project_limits_are_set_in_the_console() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let token = alice.token("/keys").await;
    let refused = alice
        .post(
            "/keys",
            &[("csrf", &token), ("name", "ci"), ("rpm", "lots")],
        )
        .await;
    assert_eq!(refused.status, 200);
    assert!(
        refused.body.contains("rpm is a whole number"),
        "{}",
        refused.body
    );
    let created = alice
        .post(
            "/keys",
            &[
                ("csrf", &token),
                ("name", "ci"),
                ("models", "m1, m2"),
                ("projects", "ml/vision"),
                ("expires_in_days", "30"),
                ("rpm", "60"),
                ("tokens_per_day", "5000"),
                ("usd_per_month", "20"),
            ],
        )
        .await;
    let re = regex::Regex::new(r#"<pre id="new-key">(sy_[0-9a-f]+)</pre>"#).unwrap();
    let key = re.captures(&created.body).expect("the new key")[1].to_string();
    for shown in [
        "models m1, m2",
        "projects ml/vision",
        "expires",
        "60 requests/min",
        "5000 tokens/day",
        "$20/month",
    ] {
        assert!(created.body.contains(shown), "{shown}: {}", created.body);
    }
    let (_, keys) = call!(host, world.alice, GET "/v1/me/api-keys");
    let ci = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "ci")
        .unwrap();
    assert_eq!(
        (&ci["models"], &ci["rpm"], &ci["tokens_per_day"]),
        (
            &serde_json::json!(["m1", "m2"]),
            &serde_json::json!(60),
            &serde_json::json!(5000)
        )
    );
    let days = (ci["expires_at"].as_u64().unwrap() - ci["created_at"].as_u64().unwrap()) / 86_400;
    assert_eq!(days, 30);
    let (status, body) = call!(host, key, POST "/v1/chat/completions",
        {"model": "m3", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        (status, &body["error"]["param"]),
        (403, &serde_json::json!("model")),
        "{body}"
    );

    // The project page shows the limits; its team's admins set them.
    let page = alice.get("/teams/ml/projects/vision").await;
    assert!(page.body.contains("No limits"), "{}", page.body);
    let token = csrf(&page.body);
    let saved = alice
        .post(
            "/teams/ml/projects/vision/limits",
            &[
                ("csrf", &token),
                ("rpm", "7"),
                ("tpm", ""),
                ("tokens_per_day", "900"),
                ("usd_per_day", ""),
                ("usd_per_month", "12.5"),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let (_, project) = call!(host, world.alice, GET "/v1/teams/ml/projects/vision");
    assert_eq!(
        project["limits"],
        serde_json::json!({"rpm": 7, "tpm": null, "tokens_per_day": 900, "usd_per_day": null, "usd_per_month": 12.5})
    );
    let page = alice.get("/teams/ml/projects/vision").await;
    assert!(
        page.body.contains("7 requests per minute")
            && page.body.contains("900 tokens per day")
            && page.body.contains("$12.5 per month (UTC)"),
        "{}",
        page.body
    );
    let bob = Visitor::signed_in(&host, &world.bob).await;
    let page = bob.get("/teams/ml/projects/vision").await;
    assert!(page.body.contains("7 requests per minute"));
    assert!(!page.body.contains("Save limits"), "members see no form");
    let token = csrf(&page.body);
    let denied = bob
        .post(
            "/teams/ml/projects/vision/limits",
            &[("csrf", &token), ("rpm", "1")],
        )
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
}
on_each_store!(keys_and_project_limits_are_set_in_the_console);

/// A webhook's own headers and retry schedule, set in the edit form and
/// shown on its page as written (a secret by its name, never its value).
async fn headers_retries_and_giving_up_are_set_in_the_console() {
    let (host, _receiver, world) = delivering().await;
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let page = "/teams/ml/webhooks/ci";
    let token = alice.token(page).await;
    let url = ok!(host, world.alice, GET "/v1/teams/ml/webhooks/ci")["url"].clone();
    let edit = format!("{page}/edit");
    let form = |headers: &'static str, schedule: &'static str| {
        [
            ("csrf", token.clone()),
            ("url", url.as_str().unwrap().to_string()),
            ("access_token_secret", "TOKEN".to_string()),
            ("headers", headers.to_string()),
            ("retry_schedule_ms", schedule.to_string()),
            ("disable_after_hours", "".to_string()),
        ]
    };
    let post = async |fields: [(&str, String); 6]| {
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        alice.post(&edit, &fields).await
    };
    let refused = post(form("X-Api-Key $SPARE", "")).await;
    assert!(refused.body.contains("Name: value"), "{}", refused.body);
    let refused = post(form("", "soon")).await;
    assert!(
        refused.body.contains("separated by commas"),
        "{}",
        refused.body
    );
    let refused = post(form("Host: example.com", "")).await;
    assert!(
        refused.body.contains("set by Switchyard"),
        "{}",
        refused.body
    );
    let mut dead = form("", "");
    dead[5].1 = "soon".to_string();
    let refused = post(dead.clone()).await;
    assert!(
        refused.body.contains("hours of failures"),
        "{}",
        refused.body
    );
    dead[5].1 = "0".to_string();
    let refused = post(dead).await;
    assert!(refused.body.contains("above 0"), "{}", refused.body);
    let shown = alice.get(page).await.body;
    assert!(
        shown.contains("disabled after the host's 120 hours"),
        "{shown}"
    );

    let mut fields = form("X-Api-Key: $SPARE\nX-Tenant: acme\n", "0, 100");
    fields[5].1 = "0.5".to_string();
    let edited = post(fields).await;
    assert_eq!(edited.status, 303, "{}", edited.body);
    let saved = ok!(host, world.bob, GET "/v1/teams/ml/webhooks/ci");
    assert_eq!(
        (&saved["headers"], &saved["retry_schedule_ms"]),
        (
            &serde_json::json!({"X-Api-Key": "$SPARE", "X-Tenant": "acme"}),
            &serde_json::json!([0, 100])
        )
    );
    let shown = alice.get(page).await.body;
    assert_eq!(saved["disable_after_hours"], 0.5);
    for text in [
        "X-Api-Key: $SPARE",
        "X-Tenant: acme",
        "0, 100 ms",
        "disabled after 0.5 hours",
    ] {
        assert!(shown.contains(text), "{text} on the page: {shown}");
    }
    assert!(!shown.contains(crate::world::SPARE), "never the value");
}
on_each_store!(headers_retries_and_giving_up_are_set_in_the_console);

/// A receiver's authentication and order through the form: OAuth2 client
/// credentials, a receiver's CA, FIFO; the API then shows what was set.
async fn oauth_tls_and_order_are_set_in_the_console() {
    let (host, receiver, world) = delivering().await;
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap().pem();
    ok!(host, world.alice, PUT "/v1/teams/ml/secrets/RECEIVER_CA", {"value": ca});
    let alice = Visitor::signed_in(&host, &world.alice).await;
    let page = "/teams/ml/webhooks/ci";
    let token = alice.token(page).await;
    let (url, token_url) = (
        format!("{}/hook", receiver.base),
        format!("{}/token", receiver.base),
    );
    let mut fields = vec![
        ("csrf", token.as_str()),
        ("url", url.as_str()),
        ("signing_secret", "SIGN"),
        ("oauth_token_url", token_url.as_str()),
        ("oauth_client_id", "switchyard"),
        ("oauth_client_secret_secret", "SPARE"),
        ("oauth_scope", "hooks"),
        ("tls_ca_secret", "RECEIVER_CA"),
        ("ordering", "fifo"),
    ];
    let edit = format!("{page}/edit");
    let edited = alice.post(&edit, &fields).await;
    assert_eq!(edited.status, 303, "{}", edited.body);
    let saved = ok!(host, world.bob, GET "/v1/teams/ml/webhooks/ci");
    assert_eq!(
        (&saved["auth"], &saved["tls"], &saved["ordering"]),
        (
            &serde_json::json!({"type": "oauth2_client_credentials", "token_url": token_url,
                "client_id": "switchyard", "client_secret_secret": "SPARE", "scope": "hooks"}),
            &serde_json::json!({"ca_secret": "RECEIVER_CA"}),
            &serde_json::json!("fifo")
        )
    );
    let shown = alice.get(page).await.body;
    assert!(shown.contains("trusts the CA in RECEIVER_CA"), "{shown}");
    // A client certificate without its key is refused on the form, saying so.
    fields.push(("tls_client_cert_secret", "SPARE"));
    let refused = alice.post(&edit, &fields).await;
    assert!(
        refused.body.contains("client_key_secret"),
        "{}",
        refused.body
    );
}
on_each_store!(oauth_tls_and_order_are_set_in_the_console);

//! The store's contract, run against both engines without HTTP: every
//! operation of every aggregate, what it answers when the record is
//! missing or taken, and that a transaction's writes land together or not
//! at all. `contract!` declares each case once per engine (`case::sled`,
//! `case::postgres`).
//!
//! The PostgreSQL runs use a fresh database on the server that
//! `SWITCHYARD_TEST_DATABASE_URL` names; without one they say so and pass,
//! unless `SWITCHYARD_TEST_REQUIRE_POSTGRES` is set (CI sets both).

use std::collections::BTreeMap;

use serde_json::json;

use super::{AttemptFor, LimitClaim, MetricAt, Records, RunAt, Store, VersionAt};
use crate::cfg::StoreConfig;
use crate::model::{
    Action, ApiKey, Attempt, Automation, Collection, Delivery, Event, EventConfig, EventType,
    Execution, ExecutionId, Group, GroupKind, Handle, Member, Project, RateLimits, Role, Run,
    RunState, Scope, Secret, Session, SkipReason, Skipped, State, Status, StoredPlugin, Totals,
    UsageRow, User, Version, Webhook, WebhookRef,
};

/// A PostgreSQL database of one case's own, dropped at the end.
struct Database {
    admin: String,
    name: String,
}

impl Database {
    async fn create() -> Option<(Database, String)> {
        use sqlx::Connection;
        let Ok(admin) = std::env::var("SWITCHYARD_TEST_DATABASE_URL") else {
            let why = "no SWITCHYARD_TEST_DATABASE_URL";
            assert!(
                std::env::var_os("SWITCHYARD_TEST_REQUIRE_POSTGRES").is_none(),
                "{why}"
            );
            eprintln!("skipped on PostgreSQL: {why}");
            return None;
        };
        let name = format!("sy_contract_{}", crate::ids::random_hex(8));
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&format!("/{name}"));
        Some((Database { admin, name }, url.to_string()))
    }

    async fn drop(self) {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&self.admin).await {
            let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
            let _ = sqlx::query(&drop).execute(&mut conn).await;
        }
    }
}

/// Runs `case` on a fresh store of `engine`.
async fn on(engine: &str, case: impl AsyncFnOnce(&Store)) {
    let dir = tempfile::tempdir().unwrap();
    if engine == "sled" {
        return case(&Store::open_embedded(dir.path()).unwrap()).await;
    }
    let Some((database, url)) = Database::create().await else {
        return;
    };
    let cfg = StoreConfig {
        url: Some(url),
        ..StoreConfig::default()
    };
    let store = Store::open(&cfg, dir.path()).await.unwrap();
    case(&store).await;
    drop(store);
    database.drop().await;
}

macro_rules! contract {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test]
            async fn sled() {
                super::on("sled", super::$case).await
            }

            #[tokio::test]
            async fn postgres() {
                super::on("postgres", super::$case).await
            }
        }
    )*};
}

contract!(
    meta_and_housekeeping,
    users_and_keys,
    console_sessions,
    groups_members_and_projects,
    secrets_and_webhooks,
    automations_by_trigger_and_webhook,
    collections_versions_and_labels,
    runs_metrics_and_fires,
    inbox_and_outbox,
    nothing_is_due_before_its_commit,
    executions_and_attempts,
    batches_write_set_wise,
    joined_writes_land_as_their_parts,
    config_writes_move_their_records_stamps,
    usage_adds_up,
    cached_answers_expire_and_are_trimmed,
    rate_limit_claims,
    idempotency_keys,
    circuits_and_pace,
    uploaded_plugins,
    a_transaction_lands_whole_or_not_at_all,
    firings_are_admitted_one_at_a_time,
);

/// A user to store, for tests anywhere in the crate.
pub(crate) fn user(id: &str, name: &str, created_at: u64) -> User {
    User {
        id: id.into(),
        name: name.into(),
        operator: false,
        created_at,
    }
}

/// A plain webhook to store, for tests anywhere in the crate: no secrets,
/// no limits, enabled.
pub(crate) fn webhook(name: &str, url: &str) -> Webhook {
    Webhook {
        name: name.into(),
        url: url.into(),
        access_token_secret: None,
        signing_secret: None,
        standard_webhooks: false,
        signing_key_secret: None,
        previous_signing_secret: None,
        previous_signing_key_secret: None,
        previous_until: None,
        max_per_second: None,
        circuit_breaker: None,
        headers: Default::default(),
        retry_schedule_ms: None,
        disable_after_hours: None,
        auth: None,
        tls: None,
        ordering: Default::default(),
        disabled_reason: None,
        created_at: 1,
        updated_at: 1,
    }
}

/// The ids of the events in the inbox, in order.
pub(crate) async fn inbox_ids(store: &(impl Records + ?Sized)) -> Vec<String> {
    let events = store.inbox().await.unwrap();
    events.into_iter().map(|e| e.id).collect()
}

fn project_scope() -> Scope {
    Scope::project("ml", "vision")
}

fn automation(name: &str, event: EventConfig, hook: &str) -> Automation {
    Automation {
        name: name.into(),
        description: String::new(),
        scope: project_scope(),
        event,
        webhook: WebhookRef {
            team: "ml".into(),
            name: hook.into(),
        },
        action: Action::Webhooks,
        payload: Some("{}".into()),
        template_plugin: "template-default".into(),
        state: State::Active,
        disabled_reason: None,
        cooldown_s: None,
        max_per_hour: None,
        updated_by: "u1".into(),
        created_at: 1,
        updated_at: 1,
    }
}

fn tag_event() -> EventConfig {
    EventConfig::AddArtifactTag { tag_regex: None }
}

pub(super) fn event(id: &str, at_ms: u64) -> Event {
    Event {
        id: id.into(),
        event_type: EventType::AddArtifactTag,
        scope: project_scope(),
        author: "alice".into(),
        at_ms,
        artifact: None,
        alias: None,
        previous_version_string: None,
        tag: Some("t".into()),
        run: None,
        webhook: None,
        trace: None,
    }
}

fn handle() -> Handle {
    Handle {
        scope: project_scope(),
        name: "on-tag".into(),
    }
}

pub(super) fn delivery(id: &str, due_ms: u64) -> Delivery {
    Delivery {
        id: id.into(),
        automation: handle(),
        execution_id: format!("x_{id}").into(),
        webhook: WebhookRef {
            team: "ml".into(),
            name: "ci".into(),
        },
        body_sealed: crate::model::SealedBody::from_hex("00ff").unwrap(),
        attempts: 0,
        due_ms,
        event_at_ms: 1,
        fifo: None,
        trace: None,
    }
}

pub(super) fn execution(id: &str, at_ms: u64) -> Execution {
    Execution {
        id: id.into(),
        delivery_id: format!("d_{id}").into(),
        automation: handle(),
        webhook: WebhookRef {
            team: "ml".into(),
            name: "ci".into(),
        },
        status: Status::Pending,
        error: None,
        skipped: None,
        event: event(&format!("ev_{id}"), at_ms),
        payload: Some("{\"x\":1}".into()),
        attempts: Vec::new(),
        body_sealed: Some(crate::model::SealedBody::from_hex("00ff").unwrap()),
        created_at_ms: at_ms,
        updated_at_ms: at_ms,
    }
}

async fn meta_and_housekeeping(store: &Store) {
    assert_eq!(store.meta("k").await.unwrap(), None);
    store.set_meta("k", b"one").await.unwrap();
    store.set_meta("k", b"two").await.unwrap();
    assert_eq!(store.meta("k").await.unwrap().as_deref(), Some(&b"two"[..]));
    assert_eq!(store.quarantined().await.unwrap(), 0);
    store.round_trip().await.unwrap();
}

async fn users_and_keys(store: &Store) {
    assert!(!store.has_users().await.unwrap());
    let (alice, bob) = (user("u1", "alice", 1), user("u2", "bob", 2));
    assert!(store.insert_user(&alice).await.unwrap());
    assert!(store.insert_user(&bob).await.unwrap());
    assert!(!store.insert_user(&user("u3", "alice", 3)).await.unwrap());
    assert!(store.has_users().await.unwrap());
    assert_eq!(store.user("u1").await.unwrap(), Some(alice.clone()));
    assert_eq!(store.user("nobody").await.unwrap(), None);
    assert_eq!(store.user_named("bob").await.unwrap(), Some(bob.clone()));
    assert_eq!(store.user_named("carol").await.unwrap(), None);
    assert_eq!(store.users().await.unwrap(), vec![alice, bob]);

    let key = |id: &str, at| ApiKey {
        id: id.into(),
        user_id: "u1".into(),
        name: format!("key {id}"),
        prefix: "sy_ab".into(),
        created_at: at,
        models: None,
        projects: None,
        expires_at: None,
        limits: RateLimits::default(),
    };
    store.insert_key("hash1", &key("k1", 1)).await.unwrap();
    store.insert_key("hash2", &key("k2", 2)).await.unwrap();
    assert_eq!(store.key("hash1").await.unwrap(), Some(key("k1", 1)));
    // A scoped key reads back as written.
    let scoped = ApiKey {
        models: Some(vec!["gpt".into(), "smol".into()]),
        projects: Some(vec!["ml/vision".into()]),
        expires_at: Some(99),
        limits: RateLimits {
            rpm: Some(60),
            tpm: None,
            tokens_per_day: Some(1_000),
            usd_per_day: Some(0.5),
            usd_per_month: Some(12.25),
        },
        ..key("k3", 3)
    };
    store.insert_key("hash3", &scoped).await.unwrap();
    assert_eq!(store.key("hash3").await.unwrap(), Some(scoped));
    assert!(store.delete_key("u1", "k3").await.unwrap());
    assert_eq!(store.key("nope").await.unwrap(), None);
    let mut ids: Vec<String> = store
        .keys_of("u1")
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["k1", "k2"]);
    assert!(store.keys_of("u2").await.unwrap().is_empty());
    assert_eq!(
        store.key_hash("u1", "k2").await.unwrap().as_deref(),
        Some("hash2")
    );
    assert_eq!(store.key_hash("u2", "k2").await.unwrap(), None);
    assert!(store.delete_key("u1", "k1").await.unwrap());
    assert!(!store.delete_key("u1", "k1").await.unwrap());
    assert_eq!(store.key("hash1").await.unwrap(), None);
}

async fn console_sessions(store: &Store) {
    let session = |key: &str, expires_at| Session {
        user_id: "u1".into(),
        key_id: key.into(),
        csrf: "c".into(),
        created_at: 1,
        expires_at,
    };
    store.insert_session("h", &session("k1", 2)).await.unwrap();
    assert_eq!(store.session("h").await.unwrap(), Some(session("k1", 2)));
    assert!(store.delete_session("h").await.unwrap());
    assert!(!store.delete_session("h").await.unwrap());
    assert_eq!(store.session("h").await.unwrap(), None);

    // Revoking a key ends its sessions, and only those.
    for (hash, key, expires) in [("a", "k1", 100), ("b", "k1", 200), ("c", "k2", 300)] {
        store
            .insert_session(hash, &session(key, expires))
            .await
            .unwrap();
    }
    assert_eq!(store.delete_sessions_of_key("k1").await.unwrap(), 2);
    assert_eq!(store.session("a").await.unwrap(), None);
    assert!(store.session("c").await.unwrap().is_some());
    // The sweep takes what expired at or before now, and only that.
    store
        .insert_session("d", &session("k3", 150))
        .await
        .unwrap();
    assert_eq!(store.delete_expired_sessions(150).await.unwrap(), 1);
    assert_eq!(store.session("d").await.unwrap(), None);
    assert!(store.session("c").await.unwrap().is_some());
    assert_eq!(store.delete_expired_sessions(1000).await.unwrap(), 1);
    assert_eq!(store.session("c").await.unwrap(), None);
}

async fn groups_members_and_projects(store: &Store) {
    store.insert_user(&user("u1", "alice", 1)).await.unwrap();
    store.insert_user(&user("u2", "bob", 2)).await.unwrap();
    let group = |name: &str| Group {
        name: name.into(),
        description: format!("{name} things"),
        created_at: 1,
    };
    let member = |id: &str, name: &str, role| Member {
        user_id: id.into(),
        user: name.into(),
        role,
        added_at: 1,
    };
    let alice = member("u1", "alice", Role::Admin);
    for kind in [GroupKind::Team, GroupKind::Registry] {
        assert!(
            store
                .insert_group(kind, &group("ml"), &alice)
                .await
                .unwrap()
        );
        assert!(
            !store
                .insert_group(kind, &group("ml"), &alice)
                .await
                .unwrap()
        );
        assert!(
            store
                .insert_group(kind, &group("cv"), &alice)
                .await
                .unwrap()
        );
        assert_eq!(store.group(kind, "ml").await.unwrap(), Some(group("ml")));
        assert_eq!(store.group(kind, "none").await.unwrap(), None);
        let names: Vec<String> = store
            .groups(kind)
            .await
            .unwrap()
            .into_iter()
            .map(|g| g.name)
            .collect();
        assert_eq!(names, ["cv", "ml"]);
        let bob = member("u2", "bob", Role::Member);
        store.put_member(kind, "ml", &bob).await.unwrap();
        assert_eq!(
            store.member(kind, "ml", "u2").await.unwrap(),
            Some(bob.clone())
        );
        let promoted = member("u2", "bob", Role::Admin);
        store.put_member(kind, "ml", &promoted).await.unwrap();
        assert_eq!(
            store.member(kind, "ml", "u2").await.unwrap().unwrap().role,
            Role::Admin
        );
        assert_eq!(store.members(kind, "ml").await.unwrap().len(), 2);
        let mine = store.memberships(kind, "u2").await.unwrap();
        assert_eq!(mine, vec![(group("ml"), promoted)]);
        assert!(store.delete_member(kind, "ml", "u2").await.unwrap());
        assert!(!store.delete_member(kind, "ml", "u2").await.unwrap());
        assert_eq!(store.member(kind, "ml", "u2").await.unwrap(), None);
    }
    // Teams and registries of one name are different groups.
    assert_eq!(
        store
            .members(GroupKind::Registry, "ml")
            .await
            .unwrap()
            .len(),
        1
    );

    let project = |name: &str| Project {
        name: name.into(),
        team: "ml".into(),
        description: String::new(),
        created_by: "u1".into(),
        created_at: 1,
        limits: RateLimits::default(),
    };
    assert!(store.insert_project(&project("vision")).await.unwrap());
    assert!(!store.insert_project(&project("vision")).await.unwrap());
    assert!(store.insert_project(&project("audio")).await.unwrap());
    assert_eq!(
        store.project("ml", "vision").await.unwrap(),
        Some(project("vision"))
    );
    assert_eq!(store.project("cv", "vision").await.unwrap(), None);
    let names: Vec<String> = store
        .projects("ml")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["audio", "vision"]);
    let limits = RateLimits {
        rpm: Some(5),
        tpm: Some(10),
        tokens_per_day: None,
        usd_per_day: None,
        usd_per_month: Some(3.5),
    };
    assert!(
        store
            .set_project_limits("ml", "audio", &limits)
            .await
            .unwrap()
    );
    assert!(
        !store
            .set_project_limits("ml", "nope", &limits)
            .await
            .unwrap()
    );
    let audio = store.project("ml", "audio").await.unwrap().unwrap();
    assert_eq!(audio.limits, limits);
    assert!(store.delete_project("ml", "audio").await.unwrap());
    assert!(!store.delete_project("ml", "audio").await.unwrap());
}

/// A claim on `bucket`'s `limit` in `window`, for `(need, want)`.
fn limit_claim(
    bucket: &str,
    limit: u64,
    window: (u64, u64),
    (need, want): (u64, u64),
) -> LimitClaim<'_> {
    LimitClaim {
        bucket,
        limit,
        window,
        need,
        want,
    }
}

async fn rate_limit_claims(store: &Store) {
    // A limit of 10 in the window (1000, 2000]: claims take what is left,
    // at least what is needed, or nothing.
    let claim = |need, want, now: u64| {
        store.claim_limit(limit_claim("k:1:rpm", 10, (now - 1_000, now), (need, want)))
    };
    let first = claim(1, 4, 1_500).await.unwrap();
    assert_eq!((first.granted, first.used, first.oldest_ms), (4, 0, None));
    let second = claim(1, 4, 1_600).await.unwrap();
    assert_eq!(
        (second.granted, second.used, second.oldest_ms),
        (4, 4, Some(1_500))
    );
    assert_eq!(claim(1, 4, 1_700).await.unwrap().granted, 2);
    assert_eq!(claim(1, 1, 1_800).await.unwrap().granted, 0);
    // Giving back, dated as the claim, frees room in the same window.
    store
        .adjust_limits(&[("k:1:rpm".into(), 1_600, -3)])
        .await
        .unwrap();
    let after = claim(2, 2, 1_900).await.unwrap();
    assert_eq!((after.granted, after.used), (2, 7));
    assert_eq!(
        claim(3, 3, 1_950).await.unwrap().granted,
        0,
        "need 3, 1 left"
    );
    // Claims leave the window as it slides, give-backs with them.
    let later = claim(1, 10, 2_750).await.unwrap();
    assert_eq!(
        (later.granted, later.used),
        (8, 2),
        "only the claim at 1900 is left"
    );
    // Other buckets are apart.
    let other = store
        .claim_limit(limit_claim("p:ml/a:rpm", 10, (650, 1_650), (1, 10)))
        .await
        .unwrap();
    assert_eq!(other.granted, 10);
    // Claims and corrections dated alike add up in one row (a daily
    // budget's are all dated at the day's start).
    let day = || store.claim_limit(limit_claim("k:1:tpd", 100, (999, 1_000), (1, 5)));
    day().await.unwrap();
    store
        .adjust_limits(&[("k:1:tpd".into(), 1_000, -2)])
        .await
        .unwrap();
    let again = day().await.unwrap();
    assert_eq!(
        (again.granted, again.used, again.oldest_ms),
        (5, 3, Some(1_000))
    );
    // A monthly budget's claims outlive the rest.
    let month = store.claim_limit(limit_claim("k:1:usdpm", 100, (999, 1_000), (1, 5)));
    month.await.unwrap();
    assert_eq!(
        store.purge_limits(2_000, Some("usdpm")).await.unwrap(),
        6,
        "rows at 1000 (tpd), 1500, 1600 (its give-back added), 1650, 1700, 1900"
    );
    let month = store.claim_limit(limit_claim("k:1:usdpm", 100, (999, 1_000), (1, 5)));
    assert_eq!(month.await.unwrap().used, 5, "the month's claim is kept");
    assert_eq!(store.purge_limits(2_000, None).await.unwrap(), 1);
}

async fn secrets_and_webhooks(store: &Store) {
    let secret = |name: &str, sealed: &str, updated_at| Secret {
        name: name.into(),
        sealed: sealed.into(),
        created_at: 1,
        updated_at,
    };
    store
        .put_secret("ml", &secret("SIGN", "aa", 1))
        .await
        .unwrap();
    store
        .put_secret("ml", &secret("SIGN", "bb", 2))
        .await
        .unwrap();
    store.put_secret("ml", &secret("A", "cc", 1)).await.unwrap();
    assert_eq!(
        store.secret("ml", "SIGN").await.unwrap(),
        Some(secret("SIGN", "bb", 2))
    );
    assert_eq!(store.secret("other", "SIGN").await.unwrap(), None);
    let names: Vec<String> = store
        .secrets("ml")
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["A", "SIGN"]);
    assert!(store.delete_secret("ml", "A").await.unwrap());
    assert!(!store.delete_secret("ml", "A").await.unwrap());

    let hook = |name: &str, url: &str| Webhook {
        name: name.into(),
        url: url.into(),
        access_token_secret: None,
        signing_secret: Some("SIGN".into()),
        standard_webhooks: true,
        signing_key_secret: Some("KEY".into()),
        previous_signing_secret: Some("OLD".into()),
        previous_signing_key_secret: None,
        previous_until: Some(1_900_000_000),
        max_per_second: Some(2.5),
        circuit_breaker: Some(crate::model::BreakerSettings {
            failures: 3,
            ..Default::default()
        }),
        headers: [("X-Api-Key".to_string(), "$A".to_string())].into(),
        retry_schedule_ms: Some(vec![0, 10]),
        disable_after_hours: Some(0.5),
        auth: Some(crate::model::WebhookAuth::Oauth2ClientCredentials {
            token_url: "https://auth.example.com/token".into(),
            client_id: "switchyard".into(),
            client_secret_secret: "A".into(),
            scope: None,
        }),
        tls: Some(crate::model::WebhookTls {
            client_cert_secret: Some("A".into()),
            client_key_secret: Some("A".into()),
            ca_secret: None,
        }),
        ordering: crate::model::Ordering::Fifo,
        disabled_reason: None,
        created_at: 1,
        updated_at: 1,
    };
    assert!(
        store
            .insert_webhook("ml", &hook("ci", "https://a/"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .insert_webhook("ml", &hook("ci", "https://b/"))
            .await
            .unwrap()
    );
    assert!(
        store
            .insert_webhook("ml", &hook("alerts", "https://c/"))
            .await
            .unwrap()
    );
    let mut changed = hook("ci", "https://d/");
    changed.disabled_reason = Some("gone".into());
    store.put_webhook("ml", &changed).await.unwrap();
    assert_eq!(store.webhook("ml", "ci").await.unwrap(), Some(changed));
    assert_eq!(store.webhook("cv", "ci").await.unwrap(), None);
    let names: Vec<String> = store
        .webhooks("ml")
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.name)
        .collect();
    assert_eq!(names, ["alerts", "ci"]);
    assert!(store.delete_webhook("ml", "alerts").await.unwrap());
    assert!(!store.delete_webhook("ml", "alerts").await.unwrap());
}

async fn automations_by_trigger_and_webhook(store: &Store) {
    let scope = project_scope();
    let on_tag = automation("on-tag", tag_event(), "ci");
    let on_link = automation("on-link", EventConfig::LinkArtifact {}, "alerts");
    assert!(store.save_automation(None, &on_tag).await.unwrap());
    assert!(store.save_automation(None, &on_link).await.unwrap());
    assert!(!store.save_automation(None, &on_tag).await.unwrap());
    assert_eq!(
        store.automation(&scope, "on-tag").await.unwrap(),
        Some(on_tag.clone())
    );
    let names = |list: Vec<Automation>| list.into_iter().map(|a| a.name).collect::<Vec<_>>();
    assert_eq!(
        names(store.automations(&scope).await.unwrap()),
        ["on-link", "on-tag"]
    );
    assert_eq!(store.all_automations().await.unwrap().len(), 2);
    let triggered = store.triggered(&scope, EventType::AddArtifactTag).await;
    assert_eq!(names(triggered.unwrap()), ["on-tag"]);
    assert!(
        store
            .listens(&scope, EventType::LinkArtifact)
            .await
            .unwrap()
    );
    assert!(
        !store
            .listens(&scope, EventType::AddArtifactAlias)
            .await
            .unwrap()
    );
    assert_eq!(
        store.automations_using("ml", "ci").await.unwrap(),
        vec![on_tag.handle()]
    );

    // A rename moves both indexes; a disabled automation is not triggered.
    let mut renamed = automation("tagged", tag_event(), "alerts");
    renamed.state = State::Disabled;
    assert!(
        store
            .save_automation(Some("on-tag"), &renamed)
            .await
            .unwrap()
    );
    assert_eq!(store.automation(&scope, "on-tag").await.unwrap(), None);
    assert!(
        store
            .automations_using("ml", "ci")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.automations_using("ml", "alerts").await.unwrap().len(),
        2
    );
    let triggered = store.triggered(&scope, EventType::AddArtifactTag).await;
    assert!(triggered.unwrap().is_empty(), "disabled ones do not fire");
    // Renaming onto a taken name is refused.
    assert!(
        !store
            .save_automation(Some("tagged"), &on_link)
            .await
            .unwrap()
    );
    assert!(store.delete_automation(&scope, "tagged").await.unwrap());
    assert!(!store.delete_automation(&scope, "tagged").await.unwrap());
    assert!(
        !store
            .listens(&scope, EventType::AddArtifactTag)
            .await
            .unwrap()
    );
}

async fn collections_versions_and_labels(store: &Store) {
    let scope = project_scope();
    let collection = |name: &str| Collection {
        name: name.into(),
        description: String::new(),
        versions: 0,
        created_by: "u1".into(),
        created_at: 1,
    };
    assert!(
        store
            .insert_collection(&scope, &collection("det"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .insert_collection(&scope, &collection("det"))
            .await
            .unwrap()
    );
    assert!(
        store
            .insert_collection(&scope, &collection("cls"))
            .await
            .unwrap()
    );
    assert_eq!(store.collections(&scope).await.unwrap().len(), 2);
    assert_eq!(store.next_version(&scope, "none").await.unwrap(), None);
    for expected in 0..2 {
        let index = store.next_version(&scope, "det").await.unwrap();
        assert_eq!(index, Some(expected));
        let version = Version {
            collection: "det".into(),
            version: format!("v{expected}"),
            index: expected,
            metadata: BTreeMap::from([("acc".to_string(), json!(0.9))]),
            source: None,
            created_by: "u1".into(),
            created_at: 1,
        };
        store.insert_version(&scope, &version).await.unwrap();
        assert_eq!(
            store.version(&scope, "det", expected).await.unwrap(),
            Some(version)
        );
    }
    assert_eq!(
        store
            .collection(&scope, "det")
            .await
            .unwrap()
            .unwrap()
            .versions,
        2
    );
    assert_eq!(store.version(&scope, "det", 7).await.unwrap(), None);

    assert_eq!(store.set_alias(det(&scope, 0), "prod").await.unwrap(), None);
    assert_eq!(store.set_alias(det(&scope, 0), "prod").await.unwrap(), None);
    assert_eq!(store.set_alias(det(&scope, 0), "best").await.unwrap(), None);
    // Moving an alias says where it came from.
    assert_eq!(
        store.set_alias(det(&scope, 1), "prod").await.unwrap(),
        Some(0)
    );
    store.add_tag(det(&scope, 1), "b").await.unwrap();
    store.add_tag(det(&scope, 1), "a").await.unwrap();
    store.add_tag(det(&scope, 1), "b").await.unwrap();
    let v1 = store.labelled_version(&scope, "det", 1).await.unwrap();
    let v1 = v1.unwrap();
    assert_eq!(v1.aliases, ["prod"]);
    assert_eq!(v1.tags, ["b", "a"], "in the order given, once each");
    let all = store.versions(&scope, "det").await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].aliases, ["best"]);
    assert_eq!(all[1], v1);

    // Tags with their events, in one operation; on a missing version, nothing.
    let tags = ["c".to_string(), "a".to_string(), "d".to_string()];
    let events = [event("ev_c", 1), event("ev_d", 2)];
    assert!(
        store
            .tag_version(det(&scope, 1), &tags, &events)
            .await
            .unwrap()
    );
    let v1 = store.labelled_version(&scope, "det", 1).await.unwrap();
    assert_eq!(v1.unwrap().tags, ["b", "a", "c", "d"]);
    assert_eq!(inbox_ids(&**store).await, ["ev_c", "ev_d"]);
    let lost = [event("ev_lost", 3)];
    assert!(
        !store
            .tag_version(det(&scope, 9), &tags, &lost)
            .await
            .unwrap()
    );
    assert_eq!(
        store.inbox().await.unwrap().len(),
        2,
        "no event for a missing version"
    );
}

fn det(scope: &Scope, index: u64) -> VersionAt<'_> {
    VersionAt {
        scope,
        collection: "det",
        index,
    }
}

fn r1(metric: &str) -> MetricAt<'_> {
    MetricAt {
        team: "ml",
        project: "vision",
        run: "r1",
        metric,
    }
}

async fn runs_metrics_and_fires(store: &Store) {
    let run = |id: &str, at| Run {
        id: id.into(),
        name: format!("run {id}"),
        creator: "alice".into(),
        created_at: at,
        state: RunState::Running,
    };
    store
        .insert_run("ml", "vision", &run("r1", 1))
        .await
        .unwrap();
    store
        .insert_run("ml", "vision", &run("r2", 2))
        .await
        .unwrap();
    assert_eq!(
        store.run("ml", "vision", "r1").await.unwrap(),
        Some(run("r1", 1))
    );
    assert_eq!(store.run("ml", "audio", "r1").await.unwrap(), None);
    assert_eq!(store.runs("ml", "vision").await.unwrap().len(), 2);
    let r2 = RunAt {
        team: "ml",
        project: "vision",
        id: "r2",
    };
    let (running, failed) = (RunState::Running, RunState::Failed);
    assert!(store.set_run_state(r2, running, failed).await.unwrap());
    assert!(
        !store
            .set_run_state(r2, running, RunState::Finished)
            .await
            .unwrap(),
        "a run no longer in the state named stays as it is"
    );
    let gone = RunAt { id: "r9", ..r2 };
    assert!(!store.set_run_state(gone, running, failed).await.unwrap());
    let stored = store.run("ml", "vision", "r2").await.unwrap().unwrap();
    assert_eq!(stored.state, failed);
    for (i, value) in [1.0, 2.0, 3.0].into_iter().enumerate() {
        let kept = store.push_metric(r1("loss"), value, 2).await.unwrap();
        assert_eq!(kept.len(), (i + 1).min(2));
    }
    store.push_metric(r1("acc"), 0.5, 2).await.unwrap();
    assert_eq!(
        store.metrics("ml", "vision", "r1").await.unwrap(),
        vec![
            ("acc".to_string(), vec![0.5]),
            ("loss".to_string(), vec![2.0, 3.0])
        ]
    );
    let automation = handle();
    assert!(
        store
            .claim_run_fire((&automation, "r1"), 1_000, 500)
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_run_fire((&automation, "r1"), 1_400, 500)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_run_fire((&automation, "r2"), 1_400, 500)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_run_fire((&automation, "r1"), 1_600, 500)
            .await
            .unwrap()
    );
    let mut fires = store.run_fires(&automation).await.unwrap();
    fires.sort();
    assert_eq!(
        fires,
        [("r1".to_string(), 1_600), ("r2".to_string(), 1_400)]
    );
}

async fn inbox_and_outbox(store: &Store) {
    store
        .insert_events(&[event("e1", 1), event("e2", 2)])
        .await
        .unwrap();
    store.insert_events(&[]).await.unwrap();
    let inbox = store.inbox().await.unwrap();
    assert_eq!(inbox, vec![event("e1", 1), event("e2", 2)]);
    assert!(store.take_event("e1").await.unwrap());
    assert!(!store.take_event("e1").await.unwrap());
    assert_eq!(store.inbox().await.unwrap().len(), 1);

    // Past any lease a write took (the host that writes a delivery holds
    // it while it sends it at once).
    let base = crate::ids::now_ms() + 3_600_000;
    assert_eq!(store.first_due().await.unwrap(), None);
    for (id, due) in [("d1", 100), ("d2", 200), ("d3", 300), ("d4", 900)] {
        store
            .insert_delivery(&delivery(id, base + due))
            .await
            .unwrap();
    }
    assert_eq!(store.pending_deliveries().await.unwrap(), 4);
    assert_eq!(store.first_due().await.unwrap(), Some(base + 100));
    let none = |_: &str| false;
    let (due, next) = store.due_deliveries(base + 50, 10, &none).await.unwrap();
    assert!(due.is_empty());
    assert_eq!(next, Some(base + 100));
    let (due, _) = store.due_deliveries(base + 300, 2, &none).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["d1", "d2"], "oldest due first, at most the limit");
    // What this host holds is not handed out again.
    let held = |id: &str| id == "d1" || id == "d2";
    let (due, next) = store.due_deliveries(base + 300, 10, &held).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["d3"]);
    assert_eq!(next, Some(base + 900));

    let first = delivery("d1", base + 100);
    assert!(store.delivery_waits(&first).await.unwrap());
    store.renew_lease(&first).await.unwrap();
    let retry = Delivery {
        attempts: 1,
        due_ms: base + 1_000,
        ..first.clone()
    };
    store.finish_delivery(&first, Some(&retry)).await.unwrap();
    assert!(!store.delivery_waits(&first).await.unwrap());
    assert!(store.delivery_waits(&retry).await.unwrap());
    store.finish_delivery(&retry, None).await.unwrap();
    assert_eq!(store.pending_deliveries().await.unwrap(), 3);
    assert_eq!(store.first_due().await.unwrap(), Some(base + 200));

    // A webhook enabled again: what waits for it later is due now, bodies
    // and all; what is due already, and other webhooks', stay as they are.
    // (Hours on, past the leases the scans above took.)
    let later = base + 10 * 3_600_000;
    let other = Delivery {
        webhook: WebhookRef {
            team: "ml".into(),
            name: "other".into(),
        },
        ..delivery("r3", later + 150)
    };
    store.insert_delivery(&other).await.unwrap();
    for (id, due) in [("r1", later + 100), ("r2", later + 200)] {
        store.insert_delivery(&delivery(id, due)).await.unwrap();
    }
    let ci = delivery("d0", 0).webhook;
    assert_eq!(store.release_deliveries(&ci, later).await.unwrap(), 2);
    let (due, next) = store.due_deliveries(later, 10, &none).await.unwrap();
    let mut ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["d2", "d3", "d4", "r1", "r2"]);
    assert_eq!(next, Some(later + 150), "r3 waits");
    assert!(
        due.iter()
            .all(|d| d.body_sealed == delivery("d0", 0).body_sealed)
    );
    assert!(
        due.iter()
            .filter(|d| d.id.as_str().starts_with('r'))
            .all(|d| d.due_ms == later)
    );
    assert_eq!(store.release_deliveries(&ci, later).await.unwrap(), 0);
}

/// A delivery is handed out only once the commit that queued it is
/// durable, so nothing reaches a receiver for state a crash could take:
/// on PostgreSQL a row is seen only once its transaction has committed;
/// on the embedded store a scan syncs what was written first.
async fn nothing_is_due_before_its_commit(store: &Store) {
    let none = |_: &str| false;
    // Past the lease the writing host takes.
    let later = crate::ids::now_ms() + 7_200_000;
    let tx = store.begin().await.unwrap();
    tx.insert_delivery(&delivery("d1", 1)).await.unwrap();
    // Asked outside the transaction, as the dispatcher asks.
    let (due, _) = store.due_deliveries(later, 10, &none).await.unwrap();
    assert!(due.is_empty(), "due before its transaction committed");
    tx.commit().await.unwrap();
    let (due, _) = store.due_deliveries(later, 10, &none).await.unwrap();
    assert_eq!(due.len(), 1);
}

async fn executions_and_attempts(store: &Store) {
    let automation = handle();
    for (id, at) in [("x1", 1), ("x2", 2), ("x3", 3)] {
        store.put_execution(&execution(id, at)).await.unwrap();
    }
    assert_eq!(
        store.execution(&automation, &"x2".into()).await.unwrap(),
        Some(execution("x2", 2))
    );
    assert_eq!(
        store.execution(&automation, &"x9".into()).await.unwrap(),
        None
    );
    let ids = |list: Vec<Execution>| list.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.executions(&automation, 10).await.unwrap()),
        ["x3", "x2", "x1"],
        "newest first"
    );
    assert_eq!(
        ids(store.executions(&automation, 2).await.unwrap()),
        ["x3", "x2"]
    );
    let attempt = Attempt {
        at_ms: 5,
        status: Some(500),
        latency_ms: 1.5,
        error: Some("the endpoint answered 500".into()),
        next_attempt_at_ms: Some(10),
    };
    let recorded = store
        .record_attempt(failed(&automation, &"x1".into(), Some("gave up"), &attempt))
        .await;
    assert!(recorded.unwrap());
    let missing = store
        .record_attempt(failed(&automation, &"x9".into(), None, &attempt))
        .await;
    assert!(!missing.unwrap());
    let x1 = store
        .execution(&automation, &"x1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(x1.status, Status::Failed);
    assert_eq!(x1.error.as_deref(), Some("gave up"));
    assert_eq!(x1.attempts, vec![attempt]);

    let skipped = Execution {
        status: Status::Skipped,
        skipped: Some(Skipped {
            reason: SkipReason::Cooldown,
            message: "too soon".into(),
        }),
        ..execution("x4", 4)
    };
    store
        .put_executions(std::slice::from_ref(&skipped))
        .await
        .unwrap();
    assert_eq!(
        store.execution(&automation, &"x4".into()).await.unwrap(),
        Some(skipped)
    );
}

/// An automation's firing times: what `admit` leaves is kept, what it
/// refuses changes nothing, a transaction sees its own admissions, and
/// they hold once it commits. (PostgreSQL's hold at once, outside the
/// batch's transaction, so that hosts firing one automation do not wait
/// on each other's batches; the embedded store's commit with it.)
async fn firings_are_admitted_one_at_a_time(store: &Store) {
    let automation = handle();
    let once_only = |fires: &mut Vec<u64>| match fires.len() {
        0 => {
            fires.push(7);
            Ok(())
        }
        n => Err(Skipped {
            reason: SkipReason::RateLimit,
            message: format!("{n} already"),
        }),
    };
    assert_eq!(store.fires(&automation).await.unwrap(), Vec::<u64>::new());
    let tx = store.begin().await.unwrap();
    assert_eq!(tx.admit_fire(&automation, &once_only).await.unwrap(), None);
    let held = tx.admit_fire(&automation, &once_only).await.unwrap();
    assert_eq!(held.unwrap().message, "1 already");
    tx.commit().await.unwrap();
    assert_eq!(store.fires(&automation).await.unwrap(), [7]);
    let held = store.admit_fire(&automation, &once_only).await.unwrap();
    assert_eq!(held.map(|s| s.reason), Some(SkipReason::RateLimit));
    assert_eq!(store.fires(&automation).await.unwrap(), [7]);
}

/// The delivery path writes whole batches: each row of a batch lands as
/// the single-row write would have, and the answers line up with the input.
async fn batches_write_set_wise(store: &Store) {
    store
        .insert_events(&[event("e1", 1), event("e2", 2), event("e3", 3)])
        .await
        .unwrap();
    assert!(store.take_event("e2").await.unwrap());
    let taken = store.take_events(&["e1", "e2", "e3", "e9"]).await.unwrap();
    assert_eq!(taken, [true, false, true, false]);
    assert_eq!(store.take_events(&[]).await.unwrap(), Vec::<bool>::new());
    assert!(store.inbox().await.unwrap().is_empty());

    let automation = handle();
    let executions = [execution("x1", 1), execution("x2", 2)];
    store.put_executions(&executions).await.unwrap();
    store.put_executions(&[]).await.unwrap();
    let base = crate::ids::now_ms() + 3_600_000;
    let (d1, d2, d3) = (
        delivery("d1", base),
        delivery("d2", base),
        delivery("d3", base),
    );
    store
        .insert_deliveries(&[d1.clone(), d2.clone(), d3.clone()])
        .await
        .unwrap();
    store.insert_deliveries(&[]).await.unwrap();
    assert_eq!(store.pending_deliveries().await.unwrap(), 3);

    let retry = Delivery {
        attempts: 1,
        due_ms: base + 1_000,
        ..d2.clone()
    };
    let finished = [(&d1, None), (&d2, Some(&retry)), (&d3, None)];
    store.finish_deliveries(&finished).await.unwrap();
    store.finish_deliveries(&[]).await.unwrap();
    assert_eq!(store.pending_deliveries().await.unwrap(), 1);
    assert!(store.delivery_waits(&retry).await.unwrap());
    assert!(!store.delivery_waits(&d1).await.unwrap());

    let attempt = |status| Attempt {
        at_ms: 5,
        status: Some(status),
        latency_ms: 1.0,
        error: None,
        next_attempt_at_ms: None,
    };
    let (ok, busy) = (attempt(200), attempt(503));
    let [x1, x2, x9] = ["x1", "x2", "x9"].map(ExecutionId::from);
    let done = AttemptFor {
        status: Status::Finished,
        ..failed(&automation, &x1, None, &ok)
    };
    let batch = [
        done,
        failed(&automation, &x9, None, &busy),
        failed(&automation, &x2, Some("busy"), &busy),
    ];
    assert_eq!(
        store.record_attempts(&batch).await.unwrap(),
        [true, false, true]
    );
    assert_eq!(
        store.record_attempts(&[]).await.unwrap(),
        Vec::<bool>::new()
    );
    let x1 = store
        .execution(&automation, &"x1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((x1.status, x1.attempts), (Status::Finished, vec![ok]));
    let x2 = store
        .execution(&automation, &"x2".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(x2.error.as_deref(), Some("busy"));
    assert_eq!(x2.attempts, vec![busy]);
}

/// `write_fired` writes what the events it took fired and nothing for an
/// event already taken; `write_outcomes` lands as its three writes would.
async fn joined_writes_land_as_their_parts(store: &Store) {
    store
        .insert_events(&[event("f1", 1), event("f2", 2)])
        .await
        .unwrap();
    assert!(store.take_event("f2").await.unwrap(), "taken elsewhere");
    let far = crate::ids::now_ms() + 3_600_000;
    let fired = |id: &str, n: usize| {
        let d = Delivery {
            execution_id: format!("fx_{id}").into(),
            ..delivery(&format!("fd_{id}"), far)
        };
        (n, execution(&format!("fx_{id}"), 5), Some(d))
    };
    let taken = store
        .write_fired(
            &["f1", "f2", "f9"],
            &[fired("a", 0), fired("b", 1), fired("c", 0)],
        )
        .await
        .unwrap();
    assert_eq!(taken, [true, false, false]);
    let automation = handle();
    let found = |id: &str| {
        let id = ExecutionId::from(id);
        let automation = automation.clone();
        async move { store.execution(&automation, &id).await.unwrap() }
    };
    assert!(found("fx_a").await.is_some() && found("fx_c").await.is_some());
    assert!(
        found("fx_b").await.is_none(),
        "its event was taken elsewhere"
    );
    let waiting = |d: &str| Delivery {
        execution_id: format!("fx_{}", &d[3..]).into(),
        ..delivery(d, far)
    };
    assert!(store.delivery_waits(&waiting("fd_a")).await.unwrap());
    assert!(!store.delivery_waits(&waiting("fd_b")).await.unwrap());
    assert_eq!(
        store.write_fired(&[], &[]).await.unwrap(),
        Vec::<bool>::new()
    );

    let (a, c) = (waiting("fd_a"), waiting("fd_c"));
    let again = Delivery {
        attempts: 1,
        due_ms: far + 1_000,
        ..c.clone()
    };
    let ok = Attempt {
        at_ms: 6,
        status: Some(200),
        latency_ms: 1.0,
        error: None,
        next_attempt_at_ms: None,
    };
    let (xa, xc) = (ExecutionId::from("fx_a"), ExecutionId::from("fx_c"));
    let done = AttemptFor {
        status: Status::Finished,
        ..failed(&automation, &xa, None, &ok)
    };
    let busy = failed(&automation, &xc, Some("busy"), &ok);
    store
        .write_outcomes(&[(&a, None), (&c, Some(&again))], &[done, busy], &[])
        .await
        .unwrap();
    assert!(!store.delivery_waits(&a).await.unwrap(), "sent for good");
    assert!(store.delivery_waits(&again).await.unwrap(), "rescheduled");
    let xa = found("fx_a").await.unwrap();
    assert_eq!(
        (xa.status, xa.attempts),
        (Status::Finished, vec![ok.clone()])
    );
    assert_eq!(found("fx_c").await.unwrap().error.as_deref(), Some("busy"));
    let caused = [event("f3", 3)];
    store
        .write_outcomes(&[(&again, None)], &[], &caused)
        .await
        .unwrap();
    assert!(!store.delivery_waits(&again).await.unwrap());
    assert_eq!(store.inbox().await.unwrap().len(), 1, "the event it caused");
    assert!(store.take_event("f3").await.unwrap());
}

/// Every write to what hosts keep moves the stamp of what was read from
/// it by the time it returns, or its transaction commits; a write to one
/// record leaves what was read from others kept.
async fn config_writes_move_their_records_stamps(store: &Store) {
    let stamp = |paths: &[&str]| store.changes().stamp(paths);
    let hook = ["webhooks/ml/ci", "secrets/ml"];
    let scope_path = format!("automations/{}", project_scope().parts().join("/"));
    let scope = scope_path.as_str();
    let secret = Secret {
        name: "SIGN".into(),
        sealed: "aa".into(),
        created_at: 1,
        updated_at: 1,
    };
    let webhook = webhook("ci", "http://a/");
    let on_tag = automation("on-tag", tag_event(), "ci");
    let before = stamp(&hook);
    store.put_secret("ml", &secret).await.unwrap();
    let after_secret = stamp(&hook);
    assert_ne!(after_secret, before, "a secret of its team written");
    store.put_webhook("ml", &webhook).await.unwrap();
    assert_ne!(stamp(&hook), after_secret, "the webhook written");
    let automations = stamp(&[scope]);
    store.save_automation(None, &on_tag).await.unwrap();
    let after_automation = stamp(&[scope]);
    assert_ne!(after_automation, automations, "an automation saved");
    assert!(
        store
            .delete_automation(&project_scope(), "on-tag")
            .await
            .unwrap()
    );
    assert_ne!(stamp(&[scope]), after_automation, "an automation deleted");

    // Access changing leaves the delivery path's records kept. (On a
    // shared store this host hears its own writes again from the database
    // a moment later: let those arrive first, and the access writes' too.)
    let settle = || tokio::time::sleep(std::time::Duration::from_millis(300));
    settle().await;
    let (hook_now, scope_now) = (stamp(&hook), stamp(&[scope]));
    store.insert_user(&user("u9", "carol", 9)).await.unwrap();
    let carol = |role| Member {
        user_id: "u9".into(),
        user: "carol".into(),
        role,
        added_at: 1,
    };
    let team = Group {
        name: "access-only".into(),
        description: String::new(),
        created_at: 1,
    };
    let admin = carol(Role::Admin);
    assert!(
        store
            .insert_group(GroupKind::Team, &team, &admin)
            .await
            .unwrap()
    );
    let demoted = carol(Role::Member);
    store
        .put_member(GroupKind::Team, "access-only", &demoted)
        .await
        .unwrap();
    settle().await;
    assert_eq!(stamp(&hook), hook_now, "a membership leaves webhooks kept");
    assert_eq!(stamp(&[scope]), scope_now, "and automations");

    let tx = store.begin().await.unwrap();
    tx.put_webhook(
        "ml",
        &Webhook {
            url: "http://b/".into(),
            ..webhook
        },
    )
    .await
    .unwrap();
    let uncommitted = stamp(&hook);
    tx.commit().await.unwrap();
    assert_ne!(
        stamp(&hook),
        uncommitted,
        "moved when the transaction committed"
    );
}

fn failed<'a>(
    automation: &'a Handle,
    execution_id: &'a ExecutionId,
    error: Option<&'a str>,
    attempt: &'a Attempt,
) -> AttemptFor<'a> {
    AttemptFor {
        automation,
        execution_id,
        status: Status::Failed,
        error,
        attempt,
    }
}

fn usage_row(day: &str, totals: Totals) -> UsageRow {
    let (day, model, key_id) = (day.to_string(), "m".to_string(), "k1".to_string());
    UsageRow {
        day,
        model,
        key_id,
        deployment: String::new(),
        totals,
    }
}

async fn cached_answers_expire_and_are_trimmed(store: &Store) {
    assert_eq!(store.cached("a", 0).await.unwrap(), None);
    store.cache("a", b"first", 1_000).await.unwrap();
    store.cache("a", b"answer", 2_000).await.unwrap();
    store.cache("b", b"bee", 3_000).await.unwrap();
    store.cache("c", b"sea", 500).await.unwrap();
    assert_eq!(
        store.cached("a", 1_500).await.unwrap().as_deref(),
        Some(&b"answer"[..])
    );
    assert_eq!(store.cached("a", 2_000).await.unwrap(), None, "expired");
    // At 600, c has expired; of a (6 bytes) and b (3), b expires last and
    // is kept first: 8 bytes hold b alone.
    assert_eq!(store.trim_cache(600, 8).await.unwrap(), 2);
    assert_eq!(store.cached("a", 600).await.unwrap(), None);
    assert_eq!(
        store.cached("b", 600).await.unwrap().as_deref(),
        Some(&b"bee"[..])
    );
    assert_eq!(store.trim_cache(600, 8).await.unwrap(), 0);
}

async fn usage_adds_up(store: &Store) {
    // Costs in quarters add up exactly, as floats.
    let totals = |n| Totals {
        requests: n,
        prompt_tokens: 10 * n,
        completion_tokens: n,
        total_tokens: 11 * n,
        cost_usd: 0.25 * n as f64,
        cache_hits: n,
        cached_tokens: 4 * n,
    };
    for (day, n) in [("2026-01-02", 1), ("2026-01-01", 2), ("2026-01-02", 3)] {
        let row = usage_row(day, totals(n));
        store.add_usage("ml/vision", &row).await.unwrap();
    }
    let other = usage_row("2026-01-01", totals(9));
    store.add_usage("other", &other).await.unwrap();
    let rows = store.usage("ml/vision").await.unwrap();
    let got: Vec<(&str, Totals)> = rows.iter().map(|r| (r.day.as_str(), r.totals)).collect();
    assert_eq!(got, [("2026-01-01", totals(2)), ("2026-01-02", totals(4))]);
    // A route's deployment is a row of its own.
    let routed = UsageRow {
        deployment: "east".into(),
        ..usage_row("2026-01-02", totals(5))
    };
    store.add_usage("ml/vision", &routed).await.unwrap();
    store.add_usage("ml/vision", &routed).await.unwrap();
    let rows = store.usage("ml/vision").await.unwrap();
    let east: Vec<&UsageRow> = rows.iter().filter(|r| r.deployment == "east").collect();
    assert_eq!(east.len(), 1, "{rows:?}");
    assert_eq!(east[0].totals, totals(10));
    assert_eq!(rows.len(), 3);
}

async fn uploaded_plugins(store: &Store) {
    let plugin = |version: &str, wasm: &[u8]| StoredPlugin {
        name: "greeter".into(),
        kind: "payload-template".into(),
        version: version.into(),
        sha256: format!("sha-of-{version}"),
        settings: json!({"grant": {}}),
        wasm: wasm.to_vec(),
        uploaded_at_ms: 1,
    };
    store.put_plugin(&plugin("1.0.0", b"\0asm1")).await.unwrap();
    store.put_plugin(&plugin("1.1.0", b"\0asm2")).await.unwrap();
    assert_eq!(
        store.plugin("greeter").await.unwrap(),
        Some(plugin("1.1.0", b"\0asm2"))
    );
    let digests = store.plugin_digests().await.unwrap();
    assert_eq!(
        digests,
        [("greeter".to_string(), "sha-of-1.1.0".to_string())]
    );
    assert!(store.delete_plugin("greeter").await.unwrap());
    assert!(!store.delete_plugin("greeter").await.unwrap());
    assert_eq!(store.plugin("greeter").await.unwrap(), None);
}

async fn idempotency_keys(store: &Store) {
    use crate::model::Idempotent;
    use crate::store::Claim;
    let request = |at_ms| Idempotent {
        fingerprint: "f".into(),
        at_ms,
        status: None,
        body: None,
    };
    let claim = async |at_ms, lapsed| store.claim_idempotency("k", &request(at_ms), lapsed).await;
    assert_eq!(claim(10, 0).await.unwrap(), Claim::Claimed);
    assert_eq!(claim(11, 0).await.unwrap(), Claim::Held(request(10)));
    let answered = Idempotent {
        status: Some(201),
        body: Some("{}".into()),
        ..request(10)
    };
    store
        .settle_idempotency("k", Some(&answered))
        .await
        .unwrap();
    assert_eq!(claim(12, 0).await.unwrap(), Claim::Held(answered));
    // Lapsed: the next claim takes it over.
    assert_eq!(claim(20, 15).await.unwrap(), Claim::Claimed);
    store.settle_idempotency("k", None).await.unwrap();
    assert_eq!(claim(21, 0).await.unwrap(), Claim::Claimed);
    assert_eq!(store.purge_idempotency(22).await.unwrap(), 1);
    assert_eq!(claim(23, 0).await.unwrap(), Claim::Claimed);
}

async fn circuits_and_pace(store: &Store) {
    use crate::model::{Circuit, Health};
    assert_eq!(store.health("ml", "ci").await.unwrap(), None);
    let open = Health {
        circuit: Circuit::Open {
            until_ms: 5,
            cooloff_ms: 5,
            reason: "down".into(),
            failures: 3,
        },
        failing_since_ms: Some(2),
    };
    store.put_health("ml", "ci", &open).await.unwrap();
    let closed = Health {
        circuit: Circuit::Closed,
        failing_since_ms: None,
    };
    store.put_health("ml", "other", &closed).await.unwrap();
    assert_eq!(store.health("ml", "ci").await.unwrap(), Some(open));
    assert_eq!(store.health("ml", "other").await.unwrap(), Some(closed));
    // Slots 100 µs apart, never before now, and per webhook.
    let slot = |name: &str, now| {
        let webhook = WebhookRef {
            team: "ml".into(),
            name: name.into(),
        };
        async move { store.pace_slot(&webhook, 100, now).await }
    };
    assert_eq!(slot("ci", 1_000).await.unwrap(), 1_000);
    assert_eq!(slot("ci", 1_000).await.unwrap(), 1_100);
    assert_eq!(slot("ci", 1_050).await.unwrap(), 1_200);
    assert_eq!(slot("other", 1_050).await.unwrap(), 1_050);
    assert_eq!(slot("ci", 5_000).await.unwrap(), 5_000);
}

async fn a_transaction_lands_whole_or_not_at_all(store: &Store) {
    let member = Member {
        user_id: "u1".into(),
        user: "alice".into(),
        role: Role::Admin,
        added_at: 1,
    };
    let team = Group {
        name: "ml".into(),
        description: String::new(),
        created_at: 1,
    };
    // Dropped without a commit: nothing of it is kept.
    {
        let tx = store.begin().await.unwrap();
        assert!(tx.insert_user(&user("u1", "alice", 1)).await.unwrap());
        assert!(
            tx.insert_group(GroupKind::Team, &team, &member)
                .await
                .unwrap()
        );
        tx.insert_events(&[event("e1", 1)]).await.unwrap();
        // The transaction reads its own writes.
        assert!(tx.user("u1").await.unwrap().is_some());
    }
    assert_eq!(store.user("u1").await.unwrap(), None);
    assert_eq!(store.group(GroupKind::Team, "ml").await.unwrap(), None);
    assert!(store.inbox().await.unwrap().is_empty());

    // Committed: every write of it, across aggregates.
    let tx = store.begin().await.unwrap();
    tx.insert_user(&user("u1", "alice", 1)).await.unwrap();
    tx.insert_group(GroupKind::Team, &team, &member)
        .await
        .unwrap();
    tx.insert_events(&[event("e1", 1)]).await.unwrap();
    tx.insert_delivery(&delivery("d1", 5)).await.unwrap();
    tx.commit().await.unwrap();
    store.durable().await.unwrap();
    assert!(store.user("u1").await.unwrap().is_some());
    assert_eq!(
        store.members(GroupKind::Team, "ml").await.unwrap(),
        vec![member]
    );
    assert_eq!(store.inbox().await.unwrap().len(), 1);
    assert_eq!(store.pending_deliveries().await.unwrap(), 1);
}

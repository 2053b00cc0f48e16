//! The store's contract: one trait per aggregate, and [`Records`], their sum.
//!
//! Each engine implements every trait, one file per aggregate. Every
//! operation is atomic on its own; a [`super::Transaction`] makes several
//! atomic together.

use async_trait::async_trait;

use crate::model::{
    ApiKey, Attempt, Automation, Collection, Delivery, Event, EventType, Execution, ExecutionId,
    Group, GroupKind, Handle, Health, Idempotent, LabelledVersion, Member, Project, RateLimits,
    Run, RunState, Scope, Secret, Session, Skipped, Status, StoredPlugin, UsageRow, User, Version,
    Webhook, WebhookRef,
};

use super::Result;

/// One run, by id.
#[derive(Debug, Clone, Copy)]
pub struct RunAt<'a> {
    /// The owning team.
    pub team: &'a str,
    /// The project.
    pub project: &'a str,
    /// The run's id.
    pub id: &'a str,
}

/// One version of a collection, by index.
#[derive(Debug, Clone, Copy)]
pub struct VersionAt<'a> {
    /// The project or registry.
    pub scope: &'a Scope,
    /// The collection's name.
    pub collection: &'a str,
    /// The version's index (`v3` is 3).
    pub index: u64,
}

/// One metric of one run.
#[derive(Debug, Clone, Copy)]
pub struct MetricAt<'a> {
    /// The team that owns the project.
    pub team: &'a str,
    /// The project.
    pub project: &'a str,
    /// The run's id.
    pub run: &'a str,
    /// The metric's name.
    pub metric: &'a str,
}

/// A delivery that leaves the outbox, and its retry (if any).
pub type Finished<'a> = (&'a Delivery, Option<&'a Delivery>);

/// An attempt to add to an execution, with the status and error it leaves.
#[derive(Debug, Clone, Copy)]
pub struct AttemptFor<'a> {
    /// The automation the execution belongs to.
    pub automation: &'a Handle,
    /// The execution's id.
    pub execution_id: &'a ExecutionId,
    /// The execution's status after this attempt.
    pub status: Status,
    /// The execution's error after this attempt.
    pub error: Option<&'a str>,
    /// The attempt.
    pub attempt: &'a Attempt,
}

/// Deliveries due, and when the next one not yet due falls due.
pub type Due = (Vec<Delivery>, Option<u64>);

/// A run's metrics with the values kept, by name.
pub type Metrics = Vec<(String, Vec<f64>)>;

/// Which delivery ids a scan passes over unread.
pub type Skip<'a> = &'a (dyn for<'k> Fn(&'k str) -> bool + Sync);

/// Store-wide facts and housekeeping.
#[async_trait]
pub trait MetaRecords: Send + Sync {
    /// A store-wide fact, if set.
    async fn meta(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Sets a store-wide fact.
    async fn set_meta(&self, key: &str, value: &[u8]) -> Result<()>;

    /// How many unreadable records have been set aside.
    async fn quarantined(&self) -> Result<usize>;
}

/// Users and their API keys.
#[async_trait]
pub trait UserRecords: Send + Sync {
    /// Whether any user exists.
    async fn has_users(&self) -> Result<bool>;

    /// Adds a user; `false` if the name is taken.
    async fn insert_user(&self, user: &User) -> Result<bool>;

    /// The user with this id.
    async fn user(&self, id: &str) -> Result<Option<User>>;

    /// The user with this name.
    async fn user_named(&self, name: &str) -> Result<Option<User>>;

    /// Every user, oldest first.
    async fn users(&self) -> Result<Vec<User>>;

    /// Adds a key under the SHA-256 (hex) of its secret value.
    async fn insert_key(&self, hash: &str, key: &ApiKey) -> Result<()>;

    /// The key whose secret hashes to `hash`.
    async fn key(&self, hash: &str) -> Result<Option<ApiKey>>;

    /// A user's keys.
    async fn keys_of(&self, user_id: &str) -> Result<Vec<ApiKey>>;

    /// The stored hash of one of a user's keys (for copying a store).
    async fn key_hash(&self, user_id: &str, key_id: &str) -> Result<Option<String>>;

    /// Removes one of a user's keys; `false` if they have no such key.
    async fn delete_key(&self, user_id: &str, key_id: &str) -> Result<bool>;
}

/// The web console's sessions.
#[async_trait]
pub trait SessionRecords: Send + Sync {
    /// Adds a session.
    async fn insert_session(&self, hash: &str, session: &Session) -> Result<()>;

    /// The session whose cookie hashes to `hash`, expired or not.
    async fn session(&self, hash: &str) -> Result<Option<Session>>;

    /// Removes a session; `false` if there was none.
    async fn delete_session(&self, hash: &str) -> Result<bool>;

    /// Removes every session signed in with the key `key_id`; how many.
    async fn delete_sessions_of_key(&self, key_id: &str) -> Result<usize>;

    /// Removes every session that expired at or before `now` (unix
    /// seconds); how many.
    async fn delete_expired_sessions(&self, now: u64) -> Result<usize>;
}

/// Teams and registries, their members and roles, and projects.
#[async_trait]
pub trait GroupRecords: Send + Sync {
    /// Adds a group with its first member; `false` if the name is taken.
    async fn insert_group(&self, kind: GroupKind, group: &Group, first: &Member) -> Result<bool>;

    /// A group.
    async fn group(&self, kind: GroupKind, name: &str) -> Result<Option<Group>>;

    /// Every group of a kind, by name.
    async fn groups(&self, kind: GroupKind) -> Result<Vec<Group>>;

    /// A user's membership of a group.
    async fn member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<Option<Member>>;

    /// A group's members.
    async fn members(&self, kind: GroupKind, group: &str) -> Result<Vec<Member>>;

    /// The groups of a kind a user belongs to, with the membership.
    async fn memberships(&self, kind: GroupKind, user_id: &str) -> Result<Vec<(Group, Member)>>;

    /// Adds a member or changes their role.
    async fn put_member(&self, kind: GroupKind, group: &str, member: &Member) -> Result<()>;

    /// Removes a member; `false` if they were not one.
    async fn delete_member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<bool>;

    /// Adds a project; `false` if its team has one of that name.
    async fn insert_project(&self, project: &Project) -> Result<bool>;

    /// A project.
    async fn project(&self, team: &str, name: &str) -> Result<Option<Project>>;

    /// A team's projects, by name.
    async fn projects(&self, team: &str) -> Result<Vec<Project>>;

    /// Sets a project's inference limits; `false` if there is no project.
    async fn set_project_limits(&self, team: &str, name: &str, limits: &RateLimits)
    -> Result<bool>;

    /// Removes a project record; `false` if there was none.
    async fn delete_project(&self, team: &str, name: &str) -> Result<bool>;
}

/// Teams' secrets (sealed by the caller) and the webhooks that carry them.
#[async_trait]
pub trait WebhookRecords: Send + Sync {
    /// Creates or replaces a secret.
    async fn put_secret(&self, team: &str, secret: &Secret) -> Result<()>;

    /// A secret.
    async fn secret(&self, team: &str, name: &str) -> Result<Option<Secret>>;

    /// A team's secrets, by name.
    async fn secrets(&self, team: &str) -> Result<Vec<Secret>>;

    /// Removes a secret; `false` if there was none.
    async fn delete_secret(&self, team: &str, name: &str) -> Result<bool>;

    /// Adds a webhook; `false` if the team has one of that name.
    async fn insert_webhook(&self, team: &str, webhook: &Webhook) -> Result<bool>;

    /// Replaces a webhook.
    async fn put_webhook(&self, team: &str, webhook: &Webhook) -> Result<()>;

    /// A webhook.
    async fn webhook(&self, team: &str, name: &str) -> Result<Option<Webhook>>;

    /// A team's webhooks, by name.
    async fn webhooks(&self, team: &str) -> Result<Vec<Webhook>>;

    /// Removes a webhook; `false` if there was none.
    async fn delete_webhook(&self, team: &str, name: &str) -> Result<bool>;
}

/// Automations, indexed by trigger (scope and event type) and by webhook.
#[async_trait]
pub trait AutomationRecords: Send + Sync {
    /// Saves `automation`, replacing the one named `replacing` in its scope
    /// (a rename when the names differ); `false` if its name is taken by
    /// another automation.
    async fn save_automation(
        &self,
        replacing: Option<&str>,
        automation: &Automation,
    ) -> Result<bool>;

    /// An automation.
    async fn automation(&self, scope: &Scope, name: &str) -> Result<Option<Automation>>;

    /// A scope's automations, by name.
    async fn automations(&self, scope: &Scope) -> Result<Vec<Automation>>;

    /// Every automation of every scope (to find those a plugin serves).
    async fn all_automations(&self) -> Result<Vec<Automation>>;

    /// The active automations in `scope` listening for `event`, by index.
    async fn triggered(&self, scope: &Scope, event: EventType) -> Result<Vec<Automation>>;

    /// Whether any automation in `scope` listens for `event`.
    async fn listens(&self, scope: &Scope, event: EventType) -> Result<bool>;

    /// The automations that call webhook `team/name`.
    async fn automations_using(&self, team: &str, webhook: &str) -> Result<Vec<Handle>>;

    /// Removes an automation; `false` if there was none.
    async fn delete_automation(&self, scope: &Scope, name: &str) -> Result<bool>;

    /// When `automation` fired, as its cooldown and rate limit keep them
    /// (unix ms, oldest first).
    async fn fires(&self, automation: &Handle) -> Result<Vec<u64>>;

    /// Lets `admit` decide on `automation`'s firing times and keeps them as
    /// it leaves them, atomically: concurrent callers, on any host, take
    /// turns. Returns what `admit` held back, if it did.
    async fn admit_fire(&self, automation: &Handle, admit: Admit<'_>) -> Result<Option<Skipped>>;
}

/// Decides whether an automation fires, given its firing times, which it
/// may change (see `automation::throttle`).
pub type Admit<'a> = &'a (dyn Fn(&mut Vec<u64>) -> std::result::Result<(), Skipped> + Send + Sync);

/// Collections, versions and their labels (aliases and tags).
#[async_trait]
pub trait ArtifactRecords: Send + Sync {
    /// Adds a collection; `false` if the scope has one of that name.
    async fn insert_collection(&self, scope: &Scope, collection: &Collection) -> Result<bool>;

    /// A collection.
    async fn collection(&self, scope: &Scope, name: &str) -> Result<Option<Collection>>;

    /// Removes a collection with its versions, aliases and tags; `false`
    /// if there was none.
    async fn delete_collection(&self, scope: &Scope, name: &str) -> Result<bool>;

    /// A scope's collections, by name.
    async fn collections(&self, scope: &Scope) -> Result<Vec<Collection>>;

    /// Counts one more version of a collection and returns its index, or
    /// `None` when there is no such collection.
    async fn next_version(&self, scope: &Scope, collection: &str) -> Result<Option<u64>>;

    /// Adds a version (its index from [`Records::next_version`]).
    async fn insert_version(&self, scope: &Scope, version: &Version) -> Result<()>;

    /// A version, without its labels.
    async fn version(&self, scope: &Scope, collection: &str, index: u64)
    -> Result<Option<Version>>;

    /// A version with its aliases and tags.
    async fn labelled_version(
        &self,
        scope: &Scope,
        collection: &str,
        index: u64,
    ) -> Result<Option<LabelledVersion>>;

    /// A collection's versions with their labels, oldest first.
    async fn versions(&self, scope: &Scope, collection: &str) -> Result<Vec<LabelledVersion>>;

    /// Gives `alias` to version `index` (which the caller has found), taking
    /// it from whichever version of the collection held it. Returns the
    /// index of that version, if another held it.
    async fn set_alias(&self, version: VersionAt<'_>, alias: &str) -> Result<Option<u64>>;

    /// Adds `tag` to version `index` (which the caller has found), once.
    async fn add_tag(&self, version: VersionAt<'_>, tag: &str) -> Result<()>;

    /// Adds `tags` to version `index`, each once, and puts `events` (theirs)
    /// in the inbox: atomically, and on PostgreSQL in one statement rather
    /// than a transaction of five round trips. `false`, writing nothing,
    /// when there is no such version.
    async fn tag_version(
        &self,
        version: VersionAt<'_>,
        tags: &[String],
        events: &[Event],
    ) -> Result<bool>;
}

/// Runs, their metrics, and run automations' firings.
#[async_trait]
pub trait RunRecords: Send + Sync {
    /// Adds a run to a project.
    async fn insert_run(&self, team: &str, project: &str, run: &Run) -> Result<()>;

    /// A run.
    async fn run(&self, team: &str, project: &str, id: &str) -> Result<Option<Run>>;

    /// A project's runs.
    async fn runs(&self, team: &str, project: &str) -> Result<Vec<Run>>;

    /// Appends `value` to a run's metric, keeping the newest `keep`; returns
    /// the values kept, oldest first.
    async fn push_metric(&self, at: MetricAt<'_>, value: f64, keep: usize) -> Result<Vec<f64>>;

    /// Every metric of a run with its values kept, by name.
    async fn metrics(&self, team: &str, project: &str, run: &str) -> Result<Metrics>;

    /// Moves a run from state `from` to `to`; `false` if it was not in
    /// `from` (or is not there).
    async fn set_run_state(&self, run: RunAt<'_>, from: RunState, to: RunState) -> Result<bool>;

    /// When `automation` last fired for each run, by run id.
    async fn run_fires(&self, automation: &Handle) -> Result<Vec<(String, u64)>>;

    /// Records that automation `fire.0` fired for run `fire.1` at `now` (ms),
    /// unless it did within `window` ms before; `true` if this one counts.
    async fn claim_run_fire(&self, fire: (&Handle, &str), now_ms: u64, window: u64)
    -> Result<bool>;
}

/// The delivery path: the event inbox, the outbox, executions and their attempts.
#[async_trait]
pub trait DeliveryRecords: Send + Sync {
    /// Puts events in the inbox.
    async fn insert_events(&self, events: &[Event]) -> Result<()>;

    /// The events in the inbox, oldest first; unreadable ones are set aside.
    async fn inbox(&self) -> Result<Vec<Event>>;

    /// Takes events out of the inbox, in one statement: for each id, `false`
    /// if it had already left.
    async fn take_events(&self, ids: &[&str]) -> Result<Vec<bool>>;

    /// Takes one event out of the inbox; `false` if it had already left.
    async fn take_event(&self, id: &str) -> Result<bool> {
        Ok(self.take_events(&[id]).await?.first() == Some(&true))
    }

    /// Queues deliveries, in one statement.
    async fn insert_deliveries(&self, deliveries: &[Delivery]) -> Result<()>;

    /// Queues one delivery.
    async fn insert_delivery(&self, delivery: &Delivery) -> Result<()> {
        self.insert_deliveries(std::slice::from_ref(delivery)).await
    }

    /// Up to `limit` deliveries due at `now_ms`, oldest due first, leaving
    /// out (unread) those whose id `skip` names, and when the next one not
    /// yet due falls due. Unreadable ones are set aside.
    async fn due_deliveries(&self, now_ms: u64, limit: usize, skip: Skip<'_>) -> Result<Due>;

    /// Whether `delivery` still waits as it was read (not yet recorded).
    async fn delivery_waits(&self, delivery: &Delivery) -> Result<bool>;

    /// Extends this host's hold on a delivery it is still sending (see
    /// [`Engine::lease`]).
    async fn renew_lease(&self, delivery: &Delivery) -> Result<()>;

    /// Takes each delivery out of the outbox, putting its retry (if any) in
    /// its place, in as few statements as the engine can.
    async fn finish_deliveries(&self, finished: &[Finished<'_>]) -> Result<()>;

    /// Takes `delivery` out of the outbox, putting `next` (its retry) in.
    async fn finish_delivery(&self, delivery: &Delivery, next: Option<&Delivery>) -> Result<()> {
        self.finish_deliveries(&[(delivery, next)]).await
    }

    /// Makes every delivery to `webhook` that waits past `now_ms` (held
    /// while it was disabled, or for a retry) due at `now_ms`; how many.
    /// Deliveries another host is sending are left to it.
    async fn release_deliveries(&self, webhook: &WebhookRef, now_ms: u64) -> Result<usize>;

    /// How many deliveries wait.
    async fn pending_deliveries(&self) -> Result<usize>;

    /// When the delivery due first is due (unix ms), if any waits.
    async fn first_due(&self) -> Result<Option<u64>>;

    /// Creates or replaces executions, in one statement.
    async fn put_executions(&self, executions: &[Execution]) -> Result<()>;

    /// Creates or replaces an execution.
    async fn put_execution(&self, execution: &Execution) -> Result<()> {
        self.put_executions(std::slice::from_ref(execution)).await
    }

    /// One execution.
    async fn execution(&self, automation: &Handle, id: &ExecutionId) -> Result<Option<Execution>>;

    /// An automation's executions, newest first, at most `limit`;
    /// unreadable ones are set aside.
    async fn executions(&self, automation: &Handle, limit: usize) -> Result<Vec<Execution>>;

    /// Adds each attempt to its execution and sets the execution's status
    /// and error, in one statement. An execution that cannot be read is set
    /// aside; for each, `false` then, or when there is none.
    async fn record_attempts(&self, new: &[AttemptFor<'_>]) -> Result<Vec<bool>>;

    /// Adds one attempt (see [`DeliveryRecords::record_attempts`]).
    async fn record_attempt(&self, new: AttemptFor<'_>) -> Result<bool> {
        Ok(self.record_attempts(&[new]).await?.first() == Some(&true))
    }
}

/// Inference usage totals.
#[async_trait]
pub trait UsageRecords: Send + Sync {
    /// Adds to the totals of (scope, day, model, key).
    async fn add_usage(&self, scope: &str, add: &UsageRow) -> Result<()>;

    /// Every usage row of `scope`, oldest day first.
    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>>;
}

/// Uploaded plugins.
#[async_trait]
pub trait PluginRecords: Send + Sync {
    /// Creates or replaces an uploaded plugin.
    async fn put_plugin(&self, plugin: &StoredPlugin) -> Result<()>;

    /// The name and SHA-256 of every uploaded plugin: cheap to poll.
    async fn plugin_digests(&self) -> Result<Vec<(String, String)>>;

    /// One uploaded plugin, component included.
    async fn plugin(&self, name: &str) -> Result<Option<StoredPlugin>>;

    /// Removes an uploaded plugin; `false` if there was none.
    async fn delete_plugin(&self, name: &str) -> Result<bool>;
}

/// What a claim on an idempotency key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free (or had lapsed): it is this request's now.
    Claimed,
    /// Another request holds it, answered or not.
    Held(Idempotent),
}

/// Idempotency keys (`Idempotency-Key`), by caller and key.
#[async_trait]
pub trait IdempotencyRecords: Send + Sync {
    /// Claims `key` for `request` (status `None`) unless a request claimed
    /// it since `lapsed_before_ms`.
    async fn claim_idempotency(
        &self,
        key: &str,
        request: &Idempotent,
        lapsed_before_ms: u64,
    ) -> Result<Claim>;

    /// Keeps the answer to the request that claimed `key`; with `None`,
    /// lets the key go (the request may be sent again).
    async fn settle_idempotency(&self, key: &str, answered: Option<&Idempotent>) -> Result<()>;

    /// Forgets keys claimed before `before_ms`; how many.
    async fn purge_idempotency(&self, before_ms: u64) -> Result<usize>;
}

/// What protects receivers: each webhook's circuit, and its pace.
#[async_trait]
pub trait ReceiverRecords: Send + Sync {
    /// The health (circuit, failing since) last written for a webhook.
    async fn health(&self, team: &str, webhook: &str) -> Result<Option<Health>>;

    /// Writes a webhook's health.
    async fn put_health(&self, team: &str, webhook: &str, health: &Health) -> Result<()>;

    /// Takes the next send slot of a webhook paced to one send per
    /// `interval_us`: the unix µs its send may start (not before `now_us`).
    /// Shared by every host on the store.
    async fn pace_slot(&self, webhook: &WebhookRef, interval_us: u64, now_us: u64) -> Result<u64>;
}

/// A claim on a rate limit: up to `want`, and at least `need` or nothing,
/// of `bucket`'s `limit`, counting the claims made in `window` (unix ms,
/// after its start, up to its end); the claim is made at the window's end.
#[derive(Debug, Clone, Copy)]
pub struct LimitClaim<'a> {
    /// The limit's bucket, e.g. `k:<key>:rpm`.
    pub bucket: &'a str,
    /// What the limit allows in a window.
    pub limit: u64,
    /// The window counted (unix ms): after its start, up to its end.
    pub window: (u64, u64),
    /// The least worth having.
    pub need: u64,
    /// The most to take.
    pub want: u64,
}

/// What a claim on a rate limit got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// How much of the limit is now this host's (0: refused).
    pub granted: u64,
    /// What was counted in the window before this claim.
    pub used: i64,
    /// When the oldest claim in the window was made (unix ms).
    pub oldest_ms: Option<u64>,
}

/// Inference rate limits and budgets: claims on each limit's window, shared
/// by every host on the store.
#[async_trait]
pub trait LimitRecords: Send + Sync {
    /// Makes `claim`, atomically across hosts.
    async fn claim_limit(&self, claim: LimitClaim<'_>) -> Result<Granted>;

    /// Corrects claims: `(bucket, made at ms, amount)`, the amount negative
    /// for what was given back.
    async fn adjust_limits(&self, corrections: &[(String, u64, i64)]) -> Result<()>;

    /// Forgets claims made before `before_ms`, except on buckets whose
    /// names end with `except`; how many.
    async fn purge_limits(&self, before_ms: u64, except: Option<&str>) -> Result<usize>;
}

/// The inference response cache: answers by the hash of what was asked,
/// each until it expires, shared by every host on the store.
#[async_trait]
pub trait CacheRecords: Send + Sync {
    /// The answer kept under `key`, unless it expired by `now_ms`.
    async fn cached(&self, key: &str, now_ms: u64) -> Result<Option<Vec<u8>>>;

    /// Keeps `answer` under `key` until `expires_ms`.
    async fn cache(&self, key: &str, answer: &[u8], expires_ms: u64) -> Result<()>;

    /// Forgets answers expired by `now_ms`, then the soonest to expire
    /// until the rest take at most `max_bytes`; how many.
    async fn trim_cache(&self, now_ms: u64, max_bytes: u64) -> Result<usize>;
}

/// Declares `Records` as the sum of the aggregates, for every type that
/// implements them all (the list is written once).
macro_rules! sum_of {
    ($($aggregate:ident),+) => {
        /// Every operation of every aggregate, in or out of a transaction.
        pub trait Records: $($aggregate +)+ {}

        impl<T: $($aggregate +)+ ?Sized> Records for T {}
    };
}

sum_of!(
    MetaRecords,
    UserRecords,
    SessionRecords,
    GroupRecords,
    WebhookRecords,
    AutomationRecords,
    ArtifactRecords,
    RunRecords,
    DeliveryRecords,
    UsageRecords,
    LimitRecords,
    CacheRecords,
    PluginRecords,
    IdempotencyRecords,
    ReceiverRecords
);

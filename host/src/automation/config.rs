//! What the delivery path reads of the configuration for every event, kept
//! in memory: the automations an event type triggers in a scope, a webhook
//! with its secrets opened, and an automation's template with its secret
//! references resolved. An entry serves while the records it was read from
//! stay unchanged (`store::Changes`: the automations of its scope, its
//! webhook, its team's secrets), whichever host writes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::automations::Automation;
use super::secret_refs::{self, Rewrite, Uncarried};
use super::webhooks::{self, Revealed, Webhook};
use crate::domain::seal::Sealer;
use crate::error::Result;
use crate::model::{EventType, Scope};
use crate::store::{Kept, Store, changes};

/// What a webhook with its secrets opened is read from: the webhook, and
/// its team's secrets.
fn webhook_paths(team: &str, name: &str) -> [String; 2] {
    [
        changes::path("webhooks", &[team, name]),
        changes::path("secrets", &[team]),
    ]
}

/// A webhook as a send needs it.
pub struct Opened {
    /// The record.
    pub webhook: Webhook,
    /// Its secrets, opened (a disabled webhook's too: its deliveries are
    /// rendered and held until it is enabled again).
    pub secrets: Revealed,
}

/// The automations an event type triggers in a scope.
pub type Triggered = Arc<Vec<Automation>>;

/// A template with its `$NAME` secret references as `${NAME}` variables,
/// or the reference its webhook cannot carry.
pub type Resolved = Arc<std::result::Result<String, Uncarried>>;

/// The cache. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct ConfigCache {
    store: Store,
    sealer: Sealer,
    triggered: Arc<Kept<(Scope, EventType), Triggered>>,
    webhooks: Arc<Kept<(String, String), Arc<Opened>>>,
    templates: Arc<Kept<(Scope, String), Resolved>>,
}

impl ConfigCache {
    /// An empty cache over `store`.
    pub fn new(store: Store, sealer: Sealer) -> ConfigCache {
        ConfigCache {
            store,
            sealer,
            triggered: Arc::default(),
            webhooks: Arc::default(),
            templates: Arc::default(),
        }
    }

    /// The active automations of `scope` that listen for `event`.
    pub async fn triggered(&self, scope: &Scope, event: EventType) -> Result<Triggered> {
        let scope_path = changes::path("automations", &[&scope.parts().join("/")]);
        let (key, epoch) = (
            (scope.clone(), event),
            self.store.changes().stamp(&[&scope_path]),
        );
        if let Some(hit) = self.triggered.get(&key, epoch) {
            return Ok(hit);
        }
        let found = Arc::new(self.store.triggered(scope, event).await?);
        self.triggered.keep(key, epoch, found.clone());
        Ok(found)
    }

    /// Webhook `team/name` with its secrets opened. What fails (no such
    /// webhook, a secret gone) is not kept: the next call asks again.
    pub async fn webhook(&self, team: &str, name: &str) -> Result<Arc<Opened>> {
        let (key, epoch) = (
            (team.to_string(), name.to_string()),
            self.store.changes().stamp(&webhook_paths(team, name)),
        );
        if let Some(hit) = self.webhooks.get(&key, epoch) {
            return Ok(hit);
        }
        let webhook = webhooks::get(&self.store, team, name).await?;
        let secrets = webhook.reveal(&self.store, &self.sealer, team).await?;
        let opened = Arc::new(Opened { webhook, secrets });
        self.webhooks.keep(key, epoch, opened.clone());
        Ok(opened)
    }

    /// `automation`'s payload template, if it has one, with its secret
    /// references resolved against what its webhook carries (`carried`)
    /// and the team's secrets (see `secret_refs`): the same for every event
    /// until the automation, its webhook or a secret of its team changes.
    pub async fn template(
        &self,
        automation: &Automation,
        carried: &BTreeMap<String, String>,
    ) -> Result<Option<Resolved>> {
        let Some(template) = &automation.payload else {
            return Ok(None);
        };
        let key = (automation.scope.clone(), automation.name.clone());
        let scope_path = changes::path("automations", &[&automation.scope.parts().join("/")]);
        let [hook, secrets] = webhook_paths(&automation.webhook.team, &automation.webhook.name);
        let epoch = self.store.changes().stamp(&[&scope_path, &hook, &secrets]);
        if let Some(hit) = self.templates.get(&key, epoch) {
            return Ok(Some(hit));
        }
        let (team, webhook) = (&automation.webhook.team, &automation.webhook.name);
        let resolved = Arc::new(
            secret_refs::resolve_in_team(
                &self.store,
                team,
                template,
                webhook,
                carried,
                Rewrite::Variable,
            )
            .await?,
        );
        self.templates.keep(key, epoch, resolved.clone());
        Ok(Some(resolved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::secrets;
    use crate::model::Webhook;

    /// A write through the store moves the epoch, so the next read sees it.
    #[tokio::test]
    async fn a_write_to_a_secret_or_webhook_is_seen_at_once() {
        let (_dir, store, sealer) = Sealer::scratch();
        let cache = ConfigCache::new(store.clone(), sealer.clone());
        secrets::put(&store, &sealer, "ml", "TOKEN", "one")
            .await
            .unwrap();
        let webhook = |url: &str| Webhook {
            access_token_secret: Some("TOKEN".into()),
            ..crate::store::contract::webhook("ci", url)
        };
        store
            .put_webhook("ml", &webhook("http://a/"))
            .await
            .unwrap();
        let first = cache.webhook("ml", "ci").await.unwrap();
        assert_eq!(first.webhook.url, "http://a/");
        let token = |o: &Opened| o.secrets.token.clone();
        assert_eq!(token(&first).as_deref(), Some("one"));
        let again = cache.webhook("ml", "ci").await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "served from the cache");

        store
            .put_webhook("ml", &webhook("http://b/"))
            .await
            .unwrap();
        assert_eq!(
            cache.webhook("ml", "ci").await.unwrap().webhook.url,
            "http://b/"
        );
        secrets::put(&store, &sealer, "ml", "TOKEN", "two")
            .await
            .unwrap();
        let now = cache.webhook("ml", "ci").await.unwrap();
        assert_eq!(token(&now).as_deref(), Some("two"));
        assert!(secrets::delete(&store, "ml", "TOKEN").await.is_ok());
        assert!(
            cache.webhook("ml", "ci").await.is_err(),
            "a secret gone is a conflict"
        );
    }
}

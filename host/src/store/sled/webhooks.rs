//! Teams' secrets (sealed by the caller) and the webhooks that carry them.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::keys::prefix;
use crate::model::{Secret, Webhook};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl WebhookRecords for Sled {
    async fn put_secret(&self, team: &str, secret: &Secret) -> Result<()> {
        self.replace(T::Secrets, prefix(&[team, &secret.name]), secret)
            .await
    }

    async fn secret(&self, team: &str, name: &str) -> Result<Option<Secret>> {
        self.get_json(T::Secrets, prefix(&[team, name]).as_ref())
    }

    async fn secrets(&self, team: &str) -> Result<Vec<Secret>> {
        self.scan_json(T::Secrets, prefix(&[team]).as_ref())
    }

    async fn delete_secret(&self, team: &str, name: &str) -> Result<bool> {
        self.remove(T::Secrets, prefix(&[team, name])).await
    }

    async fn insert_webhook(&self, team: &str, webhook: &Webhook) -> Result<bool> {
        self.insert_new(T::Webhooks, prefix(&[team, &webhook.name]), webhook)
            .await
    }

    async fn put_webhook(&self, team: &str, webhook: &Webhook) -> Result<()> {
        self.replace(T::Webhooks, prefix(&[team, &webhook.name]), webhook)
            .await
    }

    async fn webhook(&self, team: &str, name: &str) -> Result<Option<Webhook>> {
        self.get_json(T::Webhooks, prefix(&[team, name]).as_ref())
    }

    async fn webhooks(&self, team: &str) -> Result<Vec<Webhook>> {
        self.scan_json(T::Webhooks, prefix(&[team]).as_ref())
    }

    async fn delete_webhook(&self, team: &str, name: &str) -> Result<bool> {
        self.remove(T::Webhooks, prefix(&[team, name])).await
    }
}

//! Automations, indexed by trigger (scope and event type) and by webhook.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::keys::prefix;
use super::shared::{last_segment, scoped, trigger_key, webhook_key};
use crate::model::{Automation, EventType, Handle, Scope, Skipped, State};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl AutomationRecords for Sled {
    async fn save_automation(
        &self,
        replacing: Option<&str>,
        automation: &Automation,
    ) -> Result<bool> {
        let scope = &automation.scope;
        let new_key = scoped(scope, &[&automation.name]).into_bytes();
        let w = self.writer().await;
        if replacing != Some(automation.name.as_str()) && w.get(T::Automations, &new_key)?.is_some()
        {
            return Ok(false);
        }
        if let Some(old_name) = replacing {
            let old_key = scoped(scope, &[old_name]).into_bytes();
            if let Some(old) = w.get_json::<Automation>(T::Automations, &old_key)? {
                w.delete(T::AutomationTriggers, trigger_key(&old).into_bytes());
                w.delete(T::WebhookAutomations, webhook_key(&old).into_bytes());
            }
            w.delete(T::Automations, old_key);
        }
        w.put_json(T::Automations, new_key, automation)?;
        w.put(
            T::AutomationTriggers,
            trigger_key(automation).into_bytes(),
            Vec::new(),
        );
        w.put_json(
            T::WebhookAutomations,
            webhook_key(automation).into_bytes(),
            &automation.handle(),
        )?;
        w.finish()?;
        Ok(true)
    }

    async fn automation(&self, scope: &Scope, name: &str) -> Result<Option<Automation>> {
        self.get_json(T::Automations, scoped(scope, &[name]).as_ref())
    }

    async fn automations(&self, scope: &Scope) -> Result<Vec<Automation>> {
        self.scan_json(T::Automations, scoped(scope, &[]).as_ref())
    }

    async fn all_automations(&self) -> Result<Vec<Automation>> {
        self.scan_json(T::Automations, &[])
    }

    async fn triggered(&self, scope: &Scope, event: EventType) -> Result<Vec<Automation>> {
        let mut out = Vec::new();
        for (key, _) in self.scan(
            T::AutomationTriggers,
            scoped(scope, &[event.as_str()]).as_ref(),
        )? {
            if let Some(automation) = self.automation(scope, last_segment(&key)).await?
                && automation.state == State::Active
            {
                out.push(automation);
            }
        }
        Ok(out)
    }

    async fn listens(&self, scope: &Scope, event: EventType) -> Result<bool> {
        Ok(!self
            .scan(
                T::AutomationTriggers,
                scoped(scope, &[event.as_str()]).as_ref(),
            )?
            .is_empty())
    }

    async fn automations_using(&self, team: &str, webhook: &str) -> Result<Vec<Handle>> {
        self.scan_json(T::WebhookAutomations, prefix(&[team, webhook]).as_ref())
    }

    async fn delete_automation(&self, scope: &Scope, name: &str) -> Result<bool> {
        let key = scoped(scope, &[name]).into_bytes();
        let w = self.writer().await;
        let Some(old) = w.get_json::<Automation>(T::Automations, &key)? else {
            return Ok(false);
        };
        w.delete(T::Automations, key);
        w.delete(T::AutomationTriggers, trigger_key(&old).into_bytes());
        w.delete(T::WebhookAutomations, webhook_key(&old).into_bytes());
        w.finish()?;
        Ok(true)
    }

    async fn fires(&self, automation: &Handle) -> Result<Vec<u64>> {
        let key = scoped(&automation.scope, &[&automation.name]);
        Ok(self
            .get_json(T::AutomationFires, key.as_ref())?
            .unwrap_or_default())
    }

    async fn admit_fire(&self, automation: &Handle, admit: Admit<'_>) -> Result<Option<Skipped>> {
        let key = scoped(&automation.scope, &[&automation.name]).into_bytes();
        let w = self.writer().await;
        let mut fires: Vec<u64> = w.get_json(T::AutomationFires, &key)?.unwrap_or_default();
        if let Err(skipped) = admit(&mut fires) {
            return Ok(Some(skipped));
        }
        w.put_json(T::AutomationFires, key, &fires)?;
        w.finish()?;
        Ok(None)
    }
}

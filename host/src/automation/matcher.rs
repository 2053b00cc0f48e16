//! From event to deliveries: find the automations listening (by index, not by
//! scanning), ask the filter plugin, render the payload with the template
//! plugin, and write executions and deliveries to the outbox in the same
//! transaction that takes the event out of the inbox.

use std::collections::BTreeMap;

use serde_json::Value;
use sled::Transactional;

use super::automations::{self, Automation, FILTER_PLUGIN, Handle};
use super::events::Event;
use super::outbox::{self, Delivery, Execution, Status};
use super::secret_refs::{self, Rewrite, Uncarried};
use super::webhooks;
use crate::app::App;
use crate::error::{Error, Result};
use crate::ids;
use crate::plugin::PluginError;
use crate::plugin::template::Variable;
use crate::store::tx::{encode, finish};

/// A run automation fires at most once per run in this long.
pub const RUN_REFIRE_MS: u64 = 24 * 60 * 60 * 1000;

/// What to write for one automation that fired.
struct Fired {
    execution: Execution,
    delivery: Option<Delivery>,
    run_fired: Option<Vec<u8>>,
}

/// Matches one event and queues its deliveries; the event leaves the inbox
/// in the same transaction, which writes nothing if it already left, so an
/// event matched twice (by its request and by the sweep) fires once.
/// Returns the deliveries queued, for the dispatcher once they are durable.
pub async fn process(app: &App, event: &Event) -> Result<Vec<Delivery>> {
    let mut fired = Vec::new();
    for automation in automations::triggered(&app.store, &event.scope, &event.event_type)? {
        if let Some(f) = fire(app, &automation, event).await? {
            fired.push(f);
        }
    }
    let now = ids::now_ms();
    let t = &app.store.trees;
    let result = (&t.event_inbox, &t.executions, &t.outbox, &t.run_fired).transaction(
        |(inbox, executions, outbox, run_fired)| {
            // Someone else (the request, or the sweep) matched it first.
            if inbox.remove(event.id.as_bytes())?.is_none() {
                return Ok(false);
            }
            for f in &fired {
                let key = outbox::execution_key(&f.execution.automation, &f.execution.id);
                executions.insert(key.as_ref(), encode(&f.execution)?)?;
                if let Some(delivery) = &f.delivery {
                    outbox.insert(delivery.key(), encode(delivery)?)?;
                }
                if let Some(key) = &f.run_fired {
                    run_fired.insert(key.as_slice(), &now.to_be_bytes())?;
                }
            }
            Ok(true)
        },
    );
    if !finish(result)? {
        return Ok(Vec::new());
    }
    Ok(fired.into_iter().filter_map(|f| f.delivery).collect())
}

/// Events older than this in the inbox are the sweep's: their action's own
/// request either failed to match them or is gone.
pub const SWEEP_AGE_MS: u64 = 2_000;

/// Matches every event in the inbox older than `min_age_ms`, oldest first:
/// at start, everything a crash left; afterwards, events whose matching hit
/// a full plugin queue. Returns how many were matched.
pub async fn sweep_inbox(app: &App, min_age_ms: u64) -> Result<usize> {
    let events: Vec<Event> = app.store.scan_readable(&app.store.trees.event_inbox, [])?;
    let now = ids::now_ms();
    let mut matched = 0;
    let mut deliveries = Vec::new();
    for event in events
        .iter()
        .filter(|e| now.saturating_sub(e.at_ms) >= min_age_ms)
    {
        match process(app, event).await {
            Ok(queued) => {
                deliveries.extend(queued);
                matched += 1;
            }
            // A full plugin queue holds every later event back too, in order.
            Err(e @ Error::Unavailable(_)) => {
                tracing::warn!(event = %event.id, error = %e, "event left in the inbox for the next sweep");
                break;
            }
            // Anything else is this event's own: the others go on.
            Err(e) => {
                tracing::error!(event = %event.id, error = %e, "matching an event failed; it stays in the inbox");
            }
        }
    }
    hand_over(app, deliveries).await?;
    Ok(matched)
}

/// Sweeps the inbox every `interval`.
pub fn spawn_sweeper(app: App, interval: std::time::Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            if let Err(e) = sweep_inbox(&app, SWEEP_AGE_MS).await {
                tracing::error!(error = %e, "sweeping the event inbox failed");
            }
        }
    });
}

/// Matches the events an action just wrote, makes the outcome durable, and
/// hands the deliveries to the dispatcher. Call before answering the action.
/// An event that cannot be matched now (the plugin queue is full) stays in
/// the inbox for the sweep: the action has happened, and its event is not
/// lost.
pub async fn dispatch(app: &App, events: &[Event]) -> Result<()> {
    let mut deliveries = Vec::new();
    for event in events {
        match process(app, event).await {
            Ok(queued) => deliveries.extend(queued),
            Err(e) => {
                tracing::warn!(event = %event.id, error = %e, "event left in the inbox for the sweep");
            }
        }
    }
    hand_over(app, deliveries).await
}

/// Flushes, then gives the deliveries to the dispatcher.
async fn hand_over(app: &App, deliveries: Vec<Delivery>) -> Result<()> {
    app.store.durable().await?;
    for delivery in deliveries {
        app.dispatcher.submit(delivery);
    }
    Ok(())
}

/// Whether `automation` fires for `event`, and what to write if it does.
async fn fire(app: &App, automation: &Automation, event: &Event) -> Result<Option<Fired>> {
    let filter = automation
        .event
        .filter()
        .to_wit()
        .map_err(|m| Error::invalid("event", m))?;
    let handle = Handle {
        scope: automation.scope.clone(),
        name: automation.name.clone(),
    };
    let mut execution = Execution {
        id: ids::ordered_id(),
        delivery_id: format!("dlv_{}", ids::random_hex(12)),
        automation: handle.clone(),
        webhook: automation.webhook.clone(),
        status: Status::Pending,
        error: None,
        event: event.clone(),
        payload: None,
        attempts: Vec::new(),
        body_sealed: None,
        created_at_ms: event.at_ms,
        updated_at_ms: ids::now_ms(),
    };
    let failed = |mut execution: Execution, why: String| {
        execution.status = Status::Failed;
        execution.error = Some(why);
        Ok(Some(Fired {
            execution,
            delivery: None,
            run_fired: None,
        }))
    };
    match app
        .plugins
        .matches(FILTER_PLUGIN, filter, event.filter_view().to_wit())
        .await
    {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        // A full queue is transient: the event stays in the inbox for the sweep.
        Err(PluginError::Queue(message)) => return Err(Error::Unavailable(message)),
        Err(e) => return failed(execution, format!("the filter failed: {e}")),
    }
    let run_fired = match &event.run {
        Some(run) => {
            let key = handle.scope.key(&[&handle.name, &run.id]).into_bytes();
            if fired_recently(app, &key, event.at_ms)? {
                return Ok(None);
            }
            Some(key)
        }
        None => None,
    };
    let webhook = match webhooks::get(
        &app.store,
        &automation.webhook.team,
        &automation.webhook.name,
    ) {
        Ok(w) => w,
        Err(e) => return failed(execution, e.to_string()),
    };
    if let Some(reason) = &webhook.disabled_reason {
        return failed(
            execution,
            format!("webhook '{}' is disabled: {reason}", webhook.name),
        );
    }
    let secrets = match webhook.reveal(&app.store, &app.sealer, &automation.webhook.team) {
        Ok(s) => s.by_name,
        Err(e) => return failed(execution, e.to_string()),
    };
    let template = match &automation.payload {
        Some(template) => match with_secret_variables(app, automation, template, &secrets)? {
            Ok(template) => Some(template),
            Err(uncarried) => return failed(execution, uncarried.to_string()),
        },
        None => None,
    };
    let body = match render(app, automation, template, event, &secrets).await {
        Ok(body) => body,
        Err(PluginError::Queue(message)) => return Err(Error::Unavailable(message)),
        Err(e) => return failed(execution, format!("rendering the payload failed: {e}")),
    };
    execution.payload = Some(redact(&body, &secrets));
    let sealed = hex::encode(
        app.sealer
            .seal(execution.delivery_id.as_bytes(), body.as_bytes())?,
    );
    execution.body_sealed = Some(sealed.clone());
    let delivery = Delivery {
        id: execution.delivery_id.clone(),
        execution: handle,
        execution_id: execution.id.clone(),
        webhook: automation.webhook.clone(),
        body_sealed: sealed,
        attempts: 0,
        due_ms: ids::now_ms(),
    };
    Ok(Some(Fired {
        execution,
        delivery: Some(delivery),
        run_fired,
    }))
}

fn fired_recently(app: &App, key: &[u8], now_ms: u64) -> Result<bool> {
    let last = app
        .store
        .trees
        .run_fired
        .get(key)
        .map_err(anyhow::Error::from)?;
    Ok(last
        .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
        .map(u64::from_be_bytes)
        .is_some_and(|at| now_ms.saturating_sub(at) < RUN_REFIRE_MS))
}

/// The template with its `$NAME` secret references as `${NAME}` variables;
/// a secret the webhook no longer carries fails the execution, rather than
/// sending the literal text.
fn with_secret_variables(
    app: &App,
    automation: &Automation,
    template: &str,
    secrets: &BTreeMap<String, String>,
) -> Result<std::result::Result<String, Uncarried>> {
    let team = &automation.webhook.team;
    secret_refs::resolve(
        template,
        &automation.webhook.name,
        secrets,
        |name| crate::secrets::exists(&app.store, team, name),
        Rewrite::Variable,
    )
}

/// The payload: the automation's template rendered by its plugin, or, with no
/// template, every variable as one JSON object.
async fn render(
    app: &App,
    automation: &Automation,
    template: Option<String>,
    event: &Event,
    secrets: &BTreeMap<String, String>,
) -> std::result::Result<String, PluginError> {
    let variables = event.variables();
    let Some(template) = template else {
        return Ok(Value::Object(
            variables
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
        .to_string());
    };
    let mut vars: Vec<Variable> = variables
        .into_iter()
        .map(|(name, value)| Variable {
            name: name.to_string(),
            value: value.to_string(),
        })
        .collect();
    vars.extend(secrets.iter().map(|(name, value)| Variable {
        name: name.clone(),
        value: Value::String(value.clone()).to_string(),
    }));
    app.plugins
        .render(&automation.template_plugin, template, vars)
        .await
}

/// `body` with every secret value (as it appears inside a JSON string)
/// replaced by `[REDACTED]`, for the history.
fn redact(body: &str, secrets: &BTreeMap<String, String>) -> String {
    let mut out = body.to_string();
    for value in secrets.values().filter(|v| !v.is_empty()) {
        let quoted = Value::String(value.clone()).to_string();
        out = out.replace(&quoted[1..quoted.len() - 1], "[REDACTED]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_catches_escaped_values() {
        let secrets = BTreeMap::from([("T".to_string(), "a\"b".to_string())]);
        assert_eq!(
            redact(r#"{"x":"a\"b!"}"#, &secrets),
            r#"{"x":"[REDACTED]!"}"#
        );
    }
}

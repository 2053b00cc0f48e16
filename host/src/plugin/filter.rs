//! Calls into `event-filter` plugins, of either interface version: the
//! host's [`FilterSpec`] and [`EventSpec`] in the plugin's own types. What
//! 0.1.0 cannot carry (a collection regex) is refused for a 0.1.0 filter.

use std::sync::Arc;

use super::backend::v2_error;
use super::bindings::Filter;
use super::bindings::since_v0_1_0::filter::exports::switchyard::plugin::filter as wit;
use super::bindings::since_v0_2_0::filter::exports::switchyard::plugin::filter as wit2;
use super::call::call;
use super::input::{EventSpec, FilterSpec};
use super::loaded::{Bound, Plugin};
use super::registry::Plugins;
use super::{Kind, PluginError};

/// What a filter said of an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// The event does not fire the automation.
    NoMatch,
    /// It fires; for a metric condition, what fired (a 0.1.0 filter does
    /// not say).
    Matched(Option<MetricFired>),
}

impl Verdict {
    /// Whether the event fires the automation.
    pub fn matched(&self) -> bool {
        matches!(self, Verdict::Matched(_))
    }

    /// What fired, when the filter said.
    pub fn fired(&self) -> Option<MetricFired> {
        match self {
            Verdict::Matched(fired) => *fired,
            Verdict::NoMatch => None,
        }
    }
}

/// What fired a metric condition: the values `${metric_value}`,
/// `${metric_previous_value}` and `${metric_zscore}` render.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MetricFired {
    /// The aggregate (or, for a z-score, the latest value) that fired.
    pub value: f64,
    /// The prior window's aggregate, for a change.
    pub previous: Option<f64>,
    /// The z-score, for a z-score condition.
    pub zscore: Option<f64>,
}

impl Plugins {
    /// Whether `event` matches `config`, by the filter plugin `name`, on the
    /// plugin work queue.
    pub async fn matches(
        self: &Arc<Self>,
        name: &str,
        team: &str,
        config: FilterSpec,
        event: EventSpec,
    ) -> Result<Verdict, PluginError> {
        self.on_queue(self.matches_in_batch(name, team, &config, &event))
            .await
    }

    /// [`Plugins::matches`] inside a [`Plugins::batch`], which holds the
    /// queue's place for the whole batch.
    pub async fn matches_in_batch(
        &self,
        name: &str,
        team: &str,
        config: &FilterSpec,
        event: &EventSpec,
    ) -> Result<Verdict, PluginError> {
        let plugin = self.get_kind(name, Kind::EventFilter)?;
        self.matches_with(&plugin, team, config, event).await
    }

    /// Checks a filter configuration (e.g. that its regexes compile) with
    /// `plugin`, loaded or not.
    pub async fn validate_filter_on(
        self: &Arc<Self>,
        plugin: Arc<Plugin>,
        team: &str,
        config: FilterSpec,
    ) -> Result<(), PluginError> {
        let (this, team) = (self.clone(), team.to_string());
        self.on_queue(async move {
            call(&this.runtime, &plugin, &team, async |store, bound| {
                let checked = match bound {
                    Bound::Filter(Filter::V0_1_0(instance)) => match v1(&plugin, &config) {
                        Ok(config) => instance
                            .switchyard_plugin_filter()
                            .call_validate(&mut *store, &config)
                            .await?
                            .map_err(|e| plugin.reported(e)),
                        Err(e) => Err(e),
                    },
                    Bound::Filter(Filter::V0_2_0(instance)) => match v2(&plugin, &config) {
                        Ok(config) => instance
                            .switchyard_plugin_filter()
                            .call_validate(&mut *store, &config)
                            .await?
                            .map_err(|e| plugin.reported(v2_error(e))),
                        Err(e) => Err(e),
                    },
                    Bound::Template(_) => Err(not_a_filter(&plugin)),
                };
                Ok(checked)
            })
            .await
        })
        .await
    }

    /// Filters with a given plugin, loaded or not, for `team`, on the
    /// current task.
    pub async fn matches_with(
        &self,
        plugin: &Plugin,
        team: &str,
        config: &FilterSpec,
        event: &EventSpec,
    ) -> Result<Verdict, PluginError> {
        call(&self.runtime, plugin, team, async |store, bound| {
            let matched = match bound {
                Bound::Filter(Filter::V0_1_0(instance)) => match v1(plugin, config) {
                    Ok(config) => instance
                        .switchyard_plugin_filter()
                        .call_matches(&mut *store, &config, &event.to_wit())
                        .await?
                        .map(|matched| match matched {
                            true => Verdict::Matched(None),
                            false => Verdict::NoMatch,
                        })
                        .map_err(|e| plugin.reported(e)),
                    Err(e) => Err(e),
                },
                Bound::Filter(Filter::V0_2_0(instance)) => match v2(plugin, config) {
                    Ok(config) => instance
                        .switchyard_plugin_filter()
                        .call_matches(&mut *store, &config, &event.to_wit2())
                        .await?
                        .map(verdict)
                        .map_err(|e| plugin.reported(v2_error(e))),
                    Err(e) => Err(e),
                },
                Bound::Template(_) => Err(not_a_filter(plugin)),
            };
            Ok(matched)
        })
        .await
    }
}

/// `spec` as `plugin`'s invalid input, when it cannot be said in WIT.
fn refused(plugin: &Plugin, message: String) -> PluginError {
    PluginError::Reported {
        plugin: plugin.id(),
        code: "invalid-config".into(),
        message,
        position: None,
    }
}

/// `spec` in 0.1.0's terms.
fn v1(plugin: &Plugin, spec: &FilterSpec) -> Result<wit::FilterConfig, PluginError> {
    spec.to_wit().map_err(|m| refused(plugin, m))
}

/// `spec` in 0.2.0's terms.
fn v2(plugin: &Plugin, spec: &FilterSpec) -> Result<wit2::FilterConfig, PluginError> {
    spec.to_wit2().map_err(|m| refused(plugin, m))
}

/// A 0.2.0 verdict in the host's terms.
fn verdict(verdict: wit2::Verdict) -> Verdict {
    match verdict {
        wit2::Verdict::NoMatch => Verdict::NoMatch,
        wit2::Verdict::Matched(fired) => Verdict::Matched(fired.map(|f| MetricFired {
            value: f.value,
            previous: f.previous,
            zscore: f.zscore,
        })),
    }
}

fn not_a_filter(plugin: &Plugin) -> PluginError {
    PluginError::NotLoaded {
        name: plugin.name.clone(),
        kind: Kind::EventFilter,
    }
}

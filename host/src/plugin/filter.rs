//! Calls into `event-filter` plugins, of either interface version: the
//! host's [`FilterSpec`] and [`EventSpec`] in the plugin's own types. What
//! 0.1.0 cannot carry (a collection regex) is refused for a 0.1.0 filter.

use std::sync::Arc;

use super::backend::v2_error;
use super::bindings::v0_1_0::filter::exports::switchyard::plugin::filter as wit;
use super::bindings::v0_2_0::filter::exports::switchyard::plugin::filter as wit2;
use super::call::call;
use super::input::{EventSpec, FilterSpec};
use super::loaded::{Bound, Plugin};
use super::registry::Plugins;
use super::{Kind, PluginError};

use wit::{Aggregation, Comparison, FilterConfig};

impl Plugins {
    /// Whether `event` matches `config`, by the filter plugin `name`, on the
    /// plugin work queue.
    pub async fn matches(
        self: &Arc<Self>,
        name: &str,
        team: &str,
        config: FilterSpec,
        event: EventSpec,
    ) -> Result<bool, PluginError> {
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
    ) -> Result<bool, PluginError> {
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
                    Bound::Filter(instance) => match v1(&plugin, &config) {
                        Ok(config) => instance
                            .switchyard_plugin_filter()
                            .call_validate(&mut *store, &config)
                            .await?
                            .map_err(|e| plugin.reported(e)),
                        Err(e) => Err(e),
                    },
                    Bound::Filter2(instance) => match v2(&plugin, &config) {
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
    ) -> Result<bool, PluginError> {
        call(&self.runtime, plugin, team, async |store, bound| {
            let matched = match bound {
                Bound::Filter(instance) => match v1(plugin, config) {
                    Ok(config) => instance
                        .switchyard_plugin_filter()
                        .call_matches(&mut *store, &config, &event.to_wit())
                        .await?
                        .map_err(|e| plugin.reported(e)),
                    Err(e) => Err(e),
                },
                Bound::Filter2(instance) => match v2(plugin, config) {
                    Ok(config) => instance
                        .switchyard_plugin_filter()
                        .call_matches(&mut *store, &config, &event_v2(event))
                        .await?
                        .map(|verdict| matches!(verdict, wit2::Verdict::Matched(_)))
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
fn v1(plugin: &Plugin, spec: &FilterSpec) -> Result<FilterConfig, PluginError> {
    spec.to_wit().map_err(|m| refused(plugin, m))
}

/// `spec` in 0.2.0's terms: 0.1.0's, and what only 0.2.0 carries.
fn v2(plugin: &Plugin, spec: &FilterSpec) -> Result<wit2::FilterConfig, PluginError> {
    let older = FilterSpec {
        collection_regex: None,
        ..spec.clone()
    };
    let mut config = config_v2(&v1(plugin, &older)?);
    config.collection_regex.clone_from(&spec.collection_regex);
    Ok(config)
}

/// A 0.1.0 filter configuration in 0.2.0's terms.
fn config_v2(config: &FilterConfig) -> wit2::FilterConfig {
    wit2::FilterConfig {
        alias_regex: config.alias_regex.clone(),
        tag_regex: config.tag_regex.clone(),
        collection_regex: None,
        run_creator: config.run_creator.clone(),
        run_name_regex: config.run_name_regex.clone(),
        metric: config.metric.as_ref().map(|m| wit2::MetricCondition {
            name: m.name.clone(),
            test: wit2::MetricTest::Threshold(wit2::ThresholdCondition {
                window: m.window,
                aggregation: match m.aggregation {
                    Aggregation::Average => wit2::Aggregation::Average,
                    Aggregation::Min => wit2::Aggregation::Min,
                    Aggregation::Max => wit2::Aggregation::Max,
                },
                comparison: match m.comparison {
                    Comparison::Gt => wit2::Comparison::Gt,
                    Comparison::Gte => wit2::Comparison::Gte,
                    Comparison::Lt => wit2::Comparison::Lt,
                    Comparison::Lte => wit2::Comparison::Lte,
                    Comparison::Eq => wit2::Comparison::Eq,
                    Comparison::Ne => wit2::Comparison::Ne,
                },
                threshold: m.threshold,
            }),
        }),
    }
}

/// An event in 0.2.0's terms.
fn event_v2(event: &EventSpec) -> wit2::Event {
    wit2::Event {
        event_type: event.event_type.clone(),
        alias: event.alias.clone(),
        tag: event.tag.clone(),
        collection: event.collection.clone(),
        run_creator: event.run_creator.clone(),
        run_name: event.run_name.clone(),
        metric_name: event.metric_name.clone(),
        metric_values: event.metric_values.clone(),
    }
}

fn not_a_filter(plugin: &Plugin) -> PluginError {
    PluginError::NotLoaded {
        name: plugin.name.clone(),
        kind: Kind::EventFilter,
    }
}

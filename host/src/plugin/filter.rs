//! Calls into `event-filter` plugins.

use std::sync::Arc;

use super::bindings::v0_1_0::filter::exports::switchyard::plugin::filter as wit;
use super::call::call;
use super::loaded::{Bound, Plugin};
use super::registry::Plugins;
use super::{Kind, PluginError};

pub use wit::{Aggregation, Comparison, Event, FilterConfig, MetricCondition};

impl Plugins {
    /// Whether `event` matches `config`, by the filter plugin `name`, on the
    /// plugin work queue.
    pub async fn matches(
        self: &Arc<Self>,
        name: &str,
        team: &str,
        config: FilterConfig,
        event: Event,
    ) -> Result<bool, PluginError> {
        self.on_queue(self.matches_in_batch(name, team, config, event))
            .await
    }

    /// [`Plugins::matches`] inside a [`Plugins::batch`], which holds the
    /// queue's place for the whole batch.
    pub async fn matches_in_batch(
        &self,
        name: &str,
        team: &str,
        config: FilterConfig,
        event: Event,
    ) -> Result<bool, PluginError> {
        let plugin = self.get_kind(name, Kind::EventFilter)?;
        self.matches_with(&plugin, team, &config, &event).await
    }

    /// Checks a filter configuration (e.g. that its regexes compile) with
    /// `plugin`, loaded or not.
    pub async fn validate_filter_on(
        self: &Arc<Self>,
        plugin: Arc<Plugin>,
        team: &str,
        config: FilterConfig,
    ) -> Result<(), PluginError> {
        let (this, team) = (self.clone(), team.to_string());
        self.on_queue(async move {
            call(&this.runtime, &plugin, &team, async |store, bound| {
                let Bound::Filter(instance) = bound else {
                    return Ok(Err(not_a_filter(&plugin)));
                };
                let result = instance
                    .switchyard_plugin_filter()
                    .call_validate(&mut *store, &config)
                    .await?;
                Ok(result.map_err(|e| plugin.reported(e)))
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
        config: &FilterConfig,
        event: &Event,
    ) -> Result<bool, PluginError> {
        call(&self.runtime, plugin, team, async |store, bound| {
            let Bound::Filter(instance) = bound else {
                return Ok(Err(not_a_filter(plugin)));
            };
            let result = instance
                .switchyard_plugin_filter()
                .call_matches(&mut *store, config, event)
                .await?;
            Ok(result.map_err(|e| plugin.reported(e)))
        })
        .await
    }
}

fn not_a_filter(plugin: &Plugin) -> PluginError {
    PluginError::NotLoaded {
        name: plugin.name.clone(),
        kind: Kind::EventFilter,
    }
}

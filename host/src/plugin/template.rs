//! Calls into `payload-template` plugins.

use std::sync::Arc;

use super::bindings::since_v0_1_0::template::exports::switchyard::plugin::template as wit;
use super::call::call;
use super::loaded::{Bound, Plugin};
use super::registry::Plugins;
use super::{Kind, PluginError};

pub use wit::Variable;

impl Plugins {
    /// Renders `template` with the payload-template plugin `name` for
    /// `team`, on the plugin work queue.
    pub async fn render(
        self: &Arc<Self>,
        name: &str,
        team: &str,
        template: String,
        vars: Vec<Variable>,
    ) -> Result<String, PluginError> {
        self.on_queue(self.render_in_batch(name, team, template, vars))
            .await
    }

    /// [`Plugins::render`] inside a [`Plugins::batch`], which holds the
    /// queue's place for the whole batch.
    pub async fn render_in_batch(
        &self,
        name: &str,
        team: &str,
        template: String,
        vars: Vec<Variable>,
    ) -> Result<String, PluginError> {
        let plugin = self.get_kind(name, Kind::PayloadTemplate)?;
        self.render_with(&plugin, team, &template, &vars).await
    }

    /// Checks `template` against the variable names `known` with `plugin`,
    /// loaded or not (a replacement being checked before it is swapped in);
    /// returns the names it uses.
    pub async fn validate_template_on(
        self: &Arc<Self>,
        plugin: Arc<Plugin>,
        team: &str,
        template: String,
        known: Vec<String>,
    ) -> Result<Vec<String>, PluginError> {
        let (this, team) = (self.clone(), team.to_string());
        self.on_queue(async move {
            call(&this.runtime, &plugin, &team, async |store, bound| {
                let Bound::Template(instance) = bound else {
                    return Ok(Err(not_a_template(&plugin)));
                };
                let result = instance
                    .switchyard_plugin_template()
                    .call_validate(&mut *store, &template, &known)
                    .await?;
                Ok(result.map_err(|e| plugin.reported(e)))
            })
            .await
        })
        .await
    }

    /// Renders with a given plugin, loaded or not, for `team`, on the
    /// current task.
    pub async fn render_with(
        &self,
        plugin: &Plugin,
        team: &str,
        template: &str,
        vars: &[Variable],
    ) -> Result<String, PluginError> {
        call(&self.runtime, plugin, team, async |store, bound| {
            let Bound::Template(instance) = bound else {
                return Ok(Err(not_a_template(plugin)));
            };
            let result = instance
                .switchyard_plugin_template()
                .call_render(&mut *store, template, vars)
                .await?;
            Ok(result.map_err(|e| plugin.reported(e)))
        })
        .await
    }
}

fn not_a_template(plugin: &Plugin) -> PluginError {
    PluginError::NotLoaded {
        name: plugin.name.clone(),
        kind: Kind::PayloadTemplate,
    }
}

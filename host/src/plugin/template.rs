//! Calls into `payload-template` plugins.

use std::sync::Arc;

use super::bindings::v0_1_0::template::exports::switchyard::plugin::template as wit;
use super::call::call;
use super::registry::{Plugin, Plugins, Pre};
use super::{Kind, PluginError};

pub use wit::Variable;

impl Plugins {
    /// Renders `template` with the payload-template plugin `name`, on the
    /// plugin work queue.
    pub async fn render(
        self: &Arc<Self>,
        name: &str,
        template: String,
        vars: Vec<Variable>,
    ) -> Result<String, PluginError> {
        let plugin = self.get_kind(name, Kind::PayloadTemplate)?;
        let this = self.clone();
        self.on_queue(async move { this.render_with(&plugin, &template, &vars).await })
            .await
    }

    /// Checks `template` against the variable names `known`, with the plugin
    /// `name`; returns the names it uses.
    pub async fn validate_template(
        self: &Arc<Self>,
        name: &str,
        template: String,
        known: Vec<String>,
    ) -> Result<Vec<String>, PluginError> {
        let plugin = self.get_kind(name, Kind::PayloadTemplate)?;
        self.validate_template_on(plugin, template, known).await
    }

    /// [`Plugins::validate_template`] with a given plugin, loaded or not
    /// (a replacement being checked before it is swapped in).
    pub async fn validate_template_on(
        self: &Arc<Self>,
        plugin: Arc<Plugin>,
        template: String,
        known: Vec<String>,
    ) -> Result<Vec<String>, PluginError> {
        let this = self.clone();
        self.on_queue(async move {
            let Pre::Template(pre) = &plugin.pre else {
                return Err(not_a_template(&plugin));
            };
            call(&this.runtime, &plugin, async |store| {
                let instance = pre.instantiate_async(&mut *store).await?;
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

    /// Renders with a given plugin, loaded or not, on the current task.
    pub async fn render_with(
        &self,
        plugin: &Plugin,
        template: &str,
        vars: &[Variable],
    ) -> Result<String, PluginError> {
        let Pre::Template(pre) = &plugin.pre else {
            return Err(not_a_template(plugin));
        };
        call(&self.runtime, plugin, async |store| {
            let instance = pre.instantiate_async(&mut *store).await?;
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

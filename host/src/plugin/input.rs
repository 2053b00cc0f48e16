//! JSON forms of plugin inputs, shared by the operator invoke API and
//! `switchyard plugin check`, so both take exactly the same documents.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::filter::{Aggregation, Comparison, Event, FilterConfig, MetricCondition};
use super::template::Variable;
pub use crate::model::MetricSpec;
use crate::nesting;

/// Longest payload template a plugin is given, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;
/// Longest regular expression a filter is given, in bytes.
pub const MAX_REGEX_BYTES: usize = 1024;

/// Input for a payload template: the template and its variables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateInput {
    /// The payload template.
    pub template: String,
    /// Variable values, any JSON.
    #[serde(default)]
    pub variables: BTreeMap<String, Value>,
}

impl TemplateInput {
    /// Refuses a template too large to hand to a plugin.
    pub fn check(&self) -> Result<(), String> {
        check_template(&self.template)
    }

    /// The variables in the WIT form (values as JSON text).
    pub fn variables(&self) -> Vec<Variable> {
        self.variables
            .iter()
            .map(|(name, value)| Variable {
                name: name.clone(),
                value: value.to_string(),
            })
            .collect()
    }
}

/// Input for an event filter: the automation's filter and an event.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterInput {
    /// The filter.
    pub config: FilterSpec,
    /// The event.
    pub event: EventSpec,
}

/// An automation's event filter.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSpec {
    /// Regex an added alias must match.
    pub alias_regex: Option<String>,
    /// Regex an added tag must match.
    pub tag_regex: Option<String>,
    /// The run's creator.
    pub run_creator: Option<String>,
    /// Regex the run's name must match.
    pub run_name_regex: Option<String>,
    /// A run-metric threshold.
    pub metric: Option<MetricSpec>,
}

/// What a filter sees of an event.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// E.g. `ADD_ARTIFACT_ALIAS`.
    pub event_type: String,
    /// The alias added.
    pub alias: Option<String>,
    /// The tag added.
    pub tag: Option<String>,
    /// The run's creator.
    pub run_creator: Option<String>,
    /// The run's name.
    pub run_name: Option<String>,
    /// The metric logged.
    pub metric_name: Option<String>,
    /// Its values, oldest first.
    #[serde(default)]
    pub metric_values: Vec<f64>,
}

/// Refuses a payload template over [`MAX_TEMPLATE_BYTES`], or one that
/// nests arrays and objects deeper than requests may.
pub fn check_template(template: &str) -> Result<(), String> {
    if template.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "the payload template is {} bytes; the limit is {MAX_TEMPLATE_BYTES}",
            template.len()
        ));
    }
    if nesting::depth(template.as_bytes()) > nesting::MAX_DEPTH {
        return Err(format!(
            "the payload template nests arrays and objects more than {} levels deep; flatten it",
            nesting::MAX_DEPTH
        ));
    }
    Ok(())
}

impl FilterSpec {
    /// The WIT form; errors name the bad field. Regexes over
    /// [`MAX_REGEX_BYTES`] are refused here, before any plugin sees them.
    pub fn to_wit(&self) -> Result<FilterConfig, String> {
        for (field, regex) in [
            ("alias_regex", &self.alias_regex),
            ("tag_regex", &self.tag_regex),
            ("run_name_regex", &self.run_name_regex),
        ] {
            if let Some(regex) = regex
                && regex.len() > MAX_REGEX_BYTES
            {
                return Err(format!(
                    "{field} is {} bytes; the limit is {MAX_REGEX_BYTES}",
                    regex.len()
                ));
            }
        }
        Ok(FilterConfig {
            alias_regex: self.alias_regex.clone(),
            tag_regex: self.tag_regex.clone(),
            run_creator: self.run_creator.clone(),
            run_name_regex: self.run_name_regex.clone(),
            metric: self.metric.as_ref().map(MetricSpec::to_wit).transpose()?,
        })
    }
}

impl MetricSpec {
    fn to_wit(&self) -> Result<MetricCondition, String> {
        let aggregation = match self.aggregation.as_str() {
            "average" => Aggregation::Average,
            "min" => Aggregation::Min,
            "max" => Aggregation::Max,
            other => {
                return Err(format!(
                    "metric.aggregation '{other}' is not one of average, min, max"
                ));
            }
        };
        let comparison = match self.comparison.as_str() {
            ">" => Comparison::Gt,
            ">=" => Comparison::Gte,
            "<" => Comparison::Lt,
            "<=" => Comparison::Lte,
            "==" => Comparison::Eq,
            "!=" => Comparison::Ne,
            other => {
                return Err(format!(
                    "metric.comparison '{other}' is not one of >, >=, <, <=, ==, !="
                ));
            }
        };
        Ok(MetricCondition {
            name: self.name.clone(),
            window: self.window,
            aggregation,
            comparison,
            threshold: self.threshold,
        })
    }
}

impl EventSpec {
    /// The WIT form.
    pub fn to_wit(&self) -> Event {
        Event {
            event_type: self.event_type.clone(),
            alias: self.alias.clone(),
            tag: self.tag.clone(),
            run_creator: self.run_creator.clone(),
            run_name: self.run_name.clone(),
            metric_name: self.metric_name.clone(),
            metric_values: self.metric_values.clone(),
        }
    }
}

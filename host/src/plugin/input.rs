//! JSON forms of plugin inputs, shared by the operator invoke API and
//! `switchyard plugin check`, so both take exactly the same documents.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::bindings::v0_1_0::filter::exports::switchyard::plugin::filter::{
    Aggregation, Comparison, Event, FilterConfig, MetricCondition,
};
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
    /// Regex the event's collection must match (needs a 0.2.0 filter).
    pub collection_regex: Option<String>,
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
    /// The collection an artifact event happened in.
    pub collection: Option<String>,
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
    /// Refuses regexes over [`MAX_REGEX_BYTES`], and a metric condition
    /// with an unknown aggregation or comparison, before any plugin sees
    /// them, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if let Some(metric) = &self.metric {
            metric.to_wit()?;
        }
        for (field, regex) in [
            ("alias_regex", &self.alias_regex),
            ("tag_regex", &self.tag_regex),
            ("collection_regex", &self.collection_regex),
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
        Ok(())
    }

    /// The 0.1.0 WIT form; errors name the bad field, or what 0.1.0 cannot
    /// carry.
    pub fn to_wit(&self) -> Result<FilterConfig, String> {
        self.check()?;
        if self.collection_regex.is_some() {
            return Err(
                "collection_regex needs an event filter built against switchyard:plugin@0.2.0"
                    .into(),
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A 0.1.0 filter cannot be asked about collections: the refusal says
    /// which field needs which interface.
    #[test]
    fn a_collection_regex_needs_a_0_2_0_filter() {
        let spec = FilterSpec {
            collection_regex: Some("^det".into()),
            ..FilterSpec::default()
        };
        assert!(spec.check().is_ok());
        let refused = spec.to_wit().unwrap_err();
        assert!(
            refused.contains("collection_regex") && refused.contains("@0.2.0"),
            "{refused}"
        );
        let long = FilterSpec {
            collection_regex: Some("a".repeat(MAX_REGEX_BYTES + 1)),
            ..FilterSpec::default()
        };
        assert!(long.check().unwrap_err().starts_with("collection_regex is"));
    }
}

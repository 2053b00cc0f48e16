//! JSON forms of plugin inputs, shared by the operator invoke API and
//! `switchyard plugin check`, so both take exactly the same documents.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::bindings::since_v0_1_0::filter::exports::switchyard::plugin::filter::{
    Aggregation, Comparison, Event, FilterConfig, MetricCondition,
};
use super::bindings::since_v0_2_0::filter::exports::switchyard::plugin::filter as wit2;
use super::template::Variable;
pub use crate::model::{MetricChangeSpec, MetricSpec, MetricZscoreSpec};
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
    /// A run-metric condition.
    pub metric: Option<MetricTest>,
}

/// A run-metric condition of any kind; in JSON, the fields tell which.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(untagged)]
pub enum MetricTest {
    /// `aggregation(last window values) comparison threshold`.
    Threshold(MetricSpec),
    /// The current window's aggregate against the prior window's.
    Change(MetricChangeSpec),
    /// The latest value's z-score.
    Zscore(MetricZscoreSpec),
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
    /// with an unknown aggregation, comparison or direction, before any
    /// plugin sees them, naming the field.
    pub fn check(&self) -> Result<(), String> {
        self.to_wit2().map(drop)
    }

    /// Refuses regexes over [`MAX_REGEX_BYTES`], naming the field.
    fn check_regexes(&self) -> Result<(), String> {
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
        let needs_0_2_0 = |what: &str| {
            format!("{what} needs an event filter built against switchyard:plugin@0.2.0")
        };
        if self.collection_regex.is_some() {
            return Err(needs_0_2_0("collection_regex"));
        }
        let metric = match &self.metric {
            None => None,
            Some(MetricTest::Threshold(spec)) => Some(spec.to_wit()?),
            Some(MetricTest::Change(_)) => return Err(needs_0_2_0("a metric change condition")),
            Some(MetricTest::Zscore(_)) => return Err(needs_0_2_0("a metric z-score condition")),
        };
        Ok(FilterConfig {
            alias_regex: self.alias_regex.clone(),
            tag_regex: self.tag_regex.clone(),
            run_creator: self.run_creator.clone(),
            run_name_regex: self.run_name_regex.clone(),
            metric,
        })
    }

    /// The 0.2.0 WIT form; errors name the bad field. Every check is made
    /// here once: the matcher calls this per event and automation.
    pub fn to_wit2(&self) -> Result<wit2::FilterConfig, String> {
        self.check_regexes()?;
        Ok(wit2::FilterConfig {
            alias_regex: self.alias_regex.clone(),
            tag_regex: self.tag_regex.clone(),
            collection_regex: self.collection_regex.clone(),
            run_creator: self.run_creator.clone(),
            run_name_regex: self.run_name_regex.clone(),
            metric: self.metric.as_ref().map(MetricTest::to_wit2).transpose()?,
        })
    }
}

impl MetricTest {
    /// The metric the condition is on.
    pub fn name(&self) -> &str {
        match self {
            MetricTest::Threshold(m) => &m.name,
            MetricTest::Change(m) => &m.name,
            MetricTest::Zscore(m) => &m.name,
        }
    }

    fn to_wit2(&self) -> Result<wit2::MetricCondition, String> {
        let test = match self {
            MetricTest::Threshold(m) => wit2::MetricTest::Threshold(wit2::ThresholdCondition {
                window: m.window,
                aggregation: aggregation(&m.aggregation)?,
                comparison: comparison(&m.comparison)?,
                threshold: m.threshold,
            }),
            MetricTest::Change(m) => wit2::MetricTest::Change(wit2::ChangeCondition {
                window: m.window,
                prior_window: m.prior_window,
                aggregation: aggregation(&m.aggregation)?,
                change_type: one_of("change_type", &m.change_type, CHANGE_TYPES)?,
                direction: one_of("direction", &m.direction, CHANGE_DIRECTIONS)?,
                amount: m.amount,
            }),
            MetricTest::Zscore(m) => wit2::MetricTest::Zscore(wit2::ZscoreCondition {
                window: m.window,
                direction: one_of("direction", &m.direction, ZSCORE_DIRECTIONS)?,
                threshold: m.threshold,
            }),
        };
        Ok(wit2::MetricCondition {
            name: self.name().to_string(),
            test,
        })
    }
}

impl MetricSpec {
    /// The 0.1.0 form of a threshold.
    fn to_wit(&self) -> Result<MetricCondition, String> {
        let aggregation = match aggregation(&self.aggregation)? {
            wit2::Aggregation::Average => Aggregation::Average,
            wit2::Aggregation::Min => Aggregation::Min,
            wit2::Aggregation::Max => Aggregation::Max,
        };
        let comparison = match comparison(&self.comparison)? {
            wit2::Comparison::Gt => Comparison::Gt,
            wit2::Comparison::Gte => Comparison::Gte,
            wit2::Comparison::Lt => Comparison::Lt,
            wit2::Comparison::Lte => Comparison::Lte,
            wit2::Comparison::Eq => Comparison::Eq,
            wit2::Comparison::Ne => Comparison::Ne,
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

const AGGREGATIONS: &[(&str, wit2::Aggregation)] = &[
    ("average", wit2::Aggregation::Average),
    ("min", wit2::Aggregation::Min),
    ("max", wit2::Aggregation::Max),
];
const COMPARISONS: &[(&str, wit2::Comparison)] = &[
    (">", wit2::Comparison::Gt),
    (">=", wit2::Comparison::Gte),
    ("<", wit2::Comparison::Lt),
    ("<=", wit2::Comparison::Lte),
    ("==", wit2::Comparison::Eq),
    ("!=", wit2::Comparison::Ne),
];
const CHANGE_TYPES: &[(&str, wit2::ChangeType)] = &[
    ("absolute", wit2::ChangeType::Absolute),
    ("relative", wit2::ChangeType::Relative),
];
const CHANGE_DIRECTIONS: &[(&str, wit2::ChangeDirection)] = &[
    ("increase", wit2::ChangeDirection::Increase),
    ("decrease", wit2::ChangeDirection::Decrease),
    ("any", wit2::ChangeDirection::Any),
];
const ZSCORE_DIRECTIONS: &[(&str, wit2::ZscoreDirection)] = &[
    ("above", wit2::ZscoreDirection::Above),
    ("below", wit2::ZscoreDirection::Below),
    ("any", wit2::ZscoreDirection::Any),
];

fn aggregation(name: &str) -> Result<wit2::Aggregation, String> {
    one_of("aggregation", name, AGGREGATIONS)
}

fn comparison(name: &str) -> Result<wit2::Comparison, String> {
    one_of("comparison", name, COMPARISONS)
}

/// The value `name` names among `choices`, or an error naming
/// `metric.{field}` and what it may be.
fn one_of<T: Copy>(field: &str, name: &str, choices: &[(&str, T)]) -> Result<T, String> {
    match choices.iter().find(|(n, _)| *n == name) {
        Some((_, value)) => Ok(*value),
        None => {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            Err(format!(
                "metric.{field} '{name}' is not one of {}",
                names.join(", ")
            ))
        }
    }
}

impl EventSpec {
    /// The 0.1.0 WIT form.
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

    /// The 0.2.0 WIT form.
    pub fn to_wit2(&self) -> wit2::Event {
        wit2::Event {
            event_type: self.event_type.clone(),
            alias: self.alias.clone(),
            tag: self.tag.clone(),
            collection: self.collection.clone(),
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

    /// The JSON fields tell the kinds of metric condition apart, and 0.1.0
    /// is refused the two it cannot carry, naming what it lacks.
    #[test]
    fn change_and_zscore_conditions_need_a_0_2_0_filter() {
        let spec: FilterSpec = serde_json::from_value(serde_json::json!({"metric":
            {"name": "acc", "change_type": "relative", "amount": 0.1}}))
        .unwrap();
        assert!(matches!(spec.metric, Some(MetricTest::Change(_))));
        let refused = spec.to_wit().unwrap_err();
        assert!(
            refused.contains("change") && refused.contains("@0.2.0"),
            "{refused}"
        );
        assert!(spec.to_wit2().is_ok());
        let zscore: FilterSpec =
            serde_json::from_value(serde_json::json!({"metric": {"name": "loss"}})).unwrap();
        assert!(matches!(zscore.metric, Some(MetricTest::Zscore(_))));
        assert!(zscore.to_wit().unwrap_err().contains("z-score"));
        let threshold: FilterSpec = serde_json::from_value(serde_json::json!({"metric":
            {"name": "loss", "comparison": "<", "threshold": 1}}))
        .unwrap();
        assert!(threshold.to_wit().is_ok() && threshold.to_wit2().is_ok());
    }
}

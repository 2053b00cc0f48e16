//! A Switchyard event-filter plugin.
//!
//! An event matches when every condition the automation sets holds: the
//! alias, tag and run-name regexes, the run's creator, and the metric
//! threshold. Change `matches` to decide differently; `eprintln!` goes to the
//! host's log.

wit_bindgen::generate!({ path: "wit", world: "event-filter" });

use exports::switchyard::plugin::filter::{
    Aggregation, Comparison, Event, FilterConfig, Guest, MetricCondition,
};
use regex::Regex;
use switchyard::plugin::types::PluginError;

struct Plugin;

/// Each regex of `config` with its field's name and what it is matched against.
fn regexes<'a>(
    config: &'a FilterConfig,
    event: Option<&'a Event>,
) -> [(&'static str, Option<&'a String>, Option<&'a String>); 3] {
    [
        ("alias-regex", config.alias_regex.as_ref(), event.and_then(|e| e.alias.as_ref())),
        ("tag-regex", config.tag_regex.as_ref(), event.and_then(|e| e.tag.as_ref())),
        ("run-name-regex", config.run_name_regex.as_ref(), event.and_then(|e| e.run_name.as_ref())),
    ]
}

fn compile(field: &str, pattern: &str) -> Result<Regex, PluginError> {
    Regex::new(pattern).map_err(|e| PluginError {
        code: "invalid-regex".into(),
        message: format!("{field} is not a valid regular expression: {e}"),
        position: None,
    })
}

fn metric_holds(metric: &MetricCondition, event: &Event) -> bool {
    let start = event.metric_values.len().saturating_sub(metric.window as usize);
    let values = &event.metric_values[start..];
    if event.metric_name.as_deref() != Some(metric.name.as_str()) || values.is_empty() {
        return false;
    }
    let value = match metric.aggregation {
        Aggregation::Average => values.iter().sum::<f64>() / values.len() as f64,
        Aggregation::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        Aggregation::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    };
    let threshold = metric.threshold;
    match metric.comparison {
        Comparison::Gt => value > threshold,
        Comparison::Gte => value >= threshold,
        Comparison::Lt => value < threshold,
        Comparison::Lte => value <= threshold,
        Comparison::Eq => value == threshold,
        Comparison::Ne => value != threshold,
    }
}

impl Guest for Plugin {
    fn validate(config: FilterConfig) -> Result<(), PluginError> {
        for (field, pattern, _) in regexes(&config, None) {
            if let Some(pattern) = pattern {
                compile(field, pattern)?;
            }
        }
        Ok(())
    }

    fn matches(config: FilterConfig, event: Event) -> Result<bool, PluginError> {
        for (field, pattern, value) in regexes(&config, Some(&event)) {
            if let Some(pattern) = pattern {
                let regex = compile(field, pattern)?;
                if !value.is_some_and(|v| regex.is_match(v)) {
                    return Ok(false);
                }
            }
        }
        if config.run_creator.is_some() && config.run_creator != event.run_creator {
            return Ok(false);
        }
        Ok(config.metric.as_ref().is_none_or(|m| metric_holds(m, &event)))
    }
}

export!(Plugin);

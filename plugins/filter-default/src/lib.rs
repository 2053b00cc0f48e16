//! `filter-default`: decides whether an event matches an automation.
//!
//! Regexes are unanchored searches (anchor with `^…$` to match whole names)
//! and are limited in compiled size, so a hostile pattern cannot exhaust the
//! plugin. A metric condition aggregates the last `window` values (or all of
//! them, when fewer were logged) and compares the result with the threshold.

wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "event-filter" });

use exports::switchyard::plugin::filter::{
    Aggregation, Comparison, Event, FilterConfig, Guest, MetricCondition,
};
use switchyard::plugin::types::PluginError;

const REGEX_SIZE_LIMIT: usize = 256 * 1024;
const MAX_WINDOW: u32 = 10_000;

struct FilterDefault;

impl Guest for FilterDefault {
    fn validate(config: FilterConfig) -> Result<(), PluginError> {
        for (field, pattern) in regexes(&config) {
            compile(field, pattern)?;
        }
        if let Some(metric) = &config.metric {
            check_metric(metric)?;
        }
        Ok(())
    }

    fn matches(config: FilterConfig, event: Event) -> Result<bool, PluginError> {
        Ok(
            text_matches("alias_regex", &config.alias_regex, &event.alias)?
                && text_matches("tag_regex", &config.tag_regex, &event.tag)?
                && text_matches("run_name_regex", &config.run_name_regex, &event.run_name)?
                && config
                    .run_creator
                    .as_ref()
                    .is_none_or(|c| event.run_creator.as_ref() == Some(c))
                && match &config.metric {
                    None => true,
                    Some(metric) => metric_matches(metric, &event)?,
                },
        )
    }
}

fn regexes(config: &FilterConfig) -> impl Iterator<Item = (&'static str, &str)> {
    [
        ("alias_regex", &config.alias_regex),
        ("tag_regex", &config.tag_regex),
        ("run_name_regex", &config.run_name_regex),
    ]
    .into_iter()
    .filter_map(|(field, pattern)| pattern.as_deref().map(|p| (field, p)))
}

fn compile(field: &str, pattern: &str) -> Result<regex::Regex, PluginError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| PluginError {
            code: "invalid-regex".into(),
            message: format!("{field} is not a valid regular expression: {e}"),
            position: None,
        })
}

/// A configured regex matches only an event that has the text and matches it.
fn text_matches(
    field: &str,
    pattern: &Option<String>,
    text: &Option<String>,
) -> Result<bool, PluginError> {
    match (pattern, text) {
        (None, _) => Ok(true),
        (Some(_), None) => Ok(false),
        (Some(pattern), Some(text)) => Ok(compile(field, pattern)?.is_match(text)),
    }
}

fn check_metric(metric: &MetricCondition) -> Result<(), PluginError> {
    let invalid = |message: String| PluginError {
        code: "invalid-config".into(),
        message,
        position: None,
    };
    if metric.name.trim().is_empty() {
        return Err(invalid("metric.name must not be empty".into()));
    }
    if metric.window == 0 || metric.window > MAX_WINDOW {
        return Err(invalid(format!(
            "metric.window must be between 1 and {MAX_WINDOW}"
        )));
    }
    if !metric.threshold.is_finite() {
        return Err(invalid("metric.threshold must be a finite number".into()));
    }
    Ok(())
}

fn metric_matches(metric: &MetricCondition, event: &Event) -> Result<bool, PluginError> {
    check_metric(metric)?;
    if event.metric_name.as_deref() != Some(metric.name.as_str()) {
        return Ok(false);
    }
    let skip = event
        .metric_values
        .len()
        .saturating_sub(metric.window as usize);
    let window = &event.metric_values[skip..];
    let Some(value) = aggregate(metric.aggregation, window) else {
        return Ok(false);
    };
    let t = metric.threshold;
    Ok(match metric.comparison {
        Comparison::Gt => value > t,
        Comparison::Gte => value >= t,
        Comparison::Lt => value < t,
        Comparison::Lte => value <= t,
        Comparison::Eq => value == t,
        Comparison::Ne => value != t,
    })
}

fn aggregate(how: Aggregation, values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(match how {
        Aggregation::Average => values.iter().sum::<f64>() / values.len() as f64,
        Aggregation::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        Aggregation::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

export!(FilterDefault);

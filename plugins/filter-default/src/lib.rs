//! `filter-default`: decides whether an event matches an automation.
//!
//! Regexes are unanchored searches (anchor with `^…$` to match whole names)
//! and are limited in compiled size, so a hostile pattern cannot exhaust the
//! plugin. A run-metric condition is one of three tests (see `metric.rs`):
//! a threshold on the aggregate of the last values, a change between two
//! windows, or the latest value's z-score.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "event-filter" });

mod metric;

use exports::switchyard::plugin::filter::{
    Event, FilterConfig, Fired, Guest, MetricCondition, MetricTest, Verdict,
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

    fn matches(config: FilterConfig, event: Event) -> Result<Verdict, PluginError> {
        let texts = text_matches("alias_regex", &config.alias_regex, &event.alias)?
            && text_matches("tag_regex", &config.tag_regex, &event.tag)?
            && text_matches(
                "collection_regex",
                &config.collection_regex,
                &event.collection,
            )?
            && text_matches("run_name_regex", &config.run_name_regex, &event.run_name)?
            && config
                .run_creator
                .as_ref()
                .is_none_or(|c| event.run_creator.as_ref() == Some(c));
        if !texts {
            return Ok(Verdict::NoMatch);
        }
        let Some(metric) = &config.metric else {
            return Ok(Verdict::Matched(None));
        };
        check_metric(metric)?;
        if event.metric_name.as_deref() != Some(metric.name.as_str()) {
            return Ok(Verdict::NoMatch);
        }
        Ok(match metric::test(&metric.test, &event.metric_values) {
            Some(fired) => Verdict::Matched(Some(fired)),
            None => Verdict::NoMatch,
        })
    }
}

fn regexes(config: &FilterConfig) -> impl Iterator<Item = (&'static str, &str)> {
    [
        ("alias_regex", &config.alias_regex),
        ("tag_regex", &config.tag_regex),
        ("collection_regex", &config.collection_regex),
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
    let windows = match &metric.test {
        MetricTest::Threshold(t) => vec![("window", t.window)],
        MetricTest::Change(c) => vec![("window", c.window), ("prior_window", c.prior_window)],
        MetricTest::Zscore(z) => vec![("window", z.window)],
    };
    for (field, window) in windows {
        if window == 0 || window > MAX_WINDOW {
            return Err(invalid(format!(
                "metric.{field} must be between 1 and {MAX_WINDOW}"
            )));
        }
    }
    let (field, value, positive) = match &metric.test {
        MetricTest::Threshold(t) => ("threshold", t.threshold, false),
        MetricTest::Change(c) => ("amount", c.amount, true),
        MetricTest::Zscore(z) => ("threshold", z.threshold, true),
    };
    if !value.is_finite() || (positive && value <= 0.0) {
        let what = if positive {
            "a number above 0"
        } else {
            "a finite number"
        };
        return Err(invalid(format!("metric.{field} must be {what}")));
    }
    Ok(())
}

/// What fired, as the host renders it.
fn fired(value: f64, previous: Option<f64>, zscore: Option<f64>) -> Fired {
    Fired {
        value,
        previous,
        zscore,
    }
}

// Natively (for the unit tests) there is nothing to export to.
#[cfg(target_arch = "wasm32")]
export!(FilterDefault);

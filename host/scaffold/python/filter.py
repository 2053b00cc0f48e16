"""A Switchyard event-filter plugin.

An event matches when every condition the automation sets holds: the alias,
tag and run-name regexes, the run's creator, and the metric threshold.
Change `matches` to decide differently; `print()` goes to the host's log.
"""

import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.filter import Aggregation, Comparison
from wit_world.imports.types import PluginError

# (field in errors, attribute of the config, attribute of the event)
REGEXES = (
    ("alias-regex", "alias_regex", "alias"),
    ("tag-regex", "tag_regex", "tag"),
    ("run-name-regex", "run_name_regex", "run_name"),
)


class Filter(exports.Filter):
    def validate(self, config) -> None:
        for field, attribute, _ in REGEXES:
            pattern = getattr(config, attribute)
            if pattern is None:
                continue
            try:
                re.compile(pattern)
            except re.error as e:
                raise Err(PluginError("invalid-regex", f"{field} is not a valid regular expression: {e}", None))

    def matches(self, config, event) -> bool:
        self.validate(config)
        for _, attribute, seen in REGEXES:
            pattern, value = getattr(config, attribute), getattr(event, seen)
            if pattern is not None and (value is None or re.search(pattern, value) is None):
                return False
        if config.run_creator is not None and config.run_creator != event.run_creator:
            return False
        metric = config.metric
        if metric is None:
            return True
        if event.metric_name != metric.name or not event.metric_values:
            return False
        values = event.metric_values[-metric.window :]
        value = {
            Aggregation.AVERAGE: sum(values) / len(values),
            Aggregation.MIN: min(values),
            Aggregation.MAX: max(values),
        }[metric.aggregation]
        threshold = metric.threshold
        return {
            Comparison.GT: value > threshold,
            Comparison.GTE: value >= threshold,
            Comparison.LT: value < threshold,
            Comparison.LTE: value <= threshold,
            Comparison.EQ: value == threshold,
            Comparison.NE: value != threshold,
        }[metric.comparison]

// A Switchyard event-filter plugin.
//
// An event matches when every condition the automation sets holds: the
// alias, tag and run-name regexes, the run's creator, and the metric
// threshold. Change `matches` to decide differently; `console.log` goes to
// the host's log.

// [field in errors, property of the config, property of the event]
const REGEXES = [
  ["alias-regex", "aliasRegex", "alias"],
  ["tag-regex", "tagRegex", "tag"],
  ["run-name-regex", "runNameRegex", "runName"],
];

const AGGREGATE = {
  average: (values) => values.reduce((a, b) => a + b, 0) / values.length,
  min: (values) => Math.min(...values),
  max: (values) => Math.max(...values),
};

const COMPARE = {
  gt: (a, b) => a > b,
  gte: (a, b) => a >= b,
  lt: (a, b) => a < b,
  lte: (a, b) => a <= b,
  eq: (a, b) => a === b,
  ne: (a, b) => a !== b,
};

export const filter = {
  validate(config) {
    for (const [field, property] of REGEXES) {
      const pattern = config[property];
      if (pattern == null) continue;
      try {
        new RegExp(pattern);
      } catch (e) {
        throw {
          code: "invalid-regex",
          message: `${field} is not a valid regular expression: ${e.message}`,
          position: undefined,
        };
      }
    }
  },

  matches(config, event) {
    filter.validate(config);
    for (const [, property, seen] of REGEXES) {
      const pattern = config[property];
      const value = event[seen];
      if (pattern != null && (value == null || !new RegExp(pattern).test(value))) return false;
    }
    if (config.runCreator != null && config.runCreator !== event.runCreator) return false;
    const metric = config.metric;
    if (metric == null) return true;
    if (event.metricName !== metric.name || event.metricValues.length === 0) return false;
    const values = [...event.metricValues].slice(-metric.window);
    return COMPARE[metric.comparison](AGGREGATE[metric.aggregation](values), metric.threshold);
  },
};

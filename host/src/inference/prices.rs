//! What answers cost in USD: `[[inference.prices]]` per model, and a
//! route's deployment's own price over its model's.
//!
//! Costs are counted in nano-USD (10⁻⁹ USD) where they are added up in a
//! limit, so that a cheap model's few tokens still count.

use std::collections::HashMap;

use crate::cfg::{DEFAULT_MAX_OUTPUT_TOKENS, InferenceConfig, PriceConfig};

/// Nano-USD in one USD.
pub const NANOS: f64 = 1e9;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Price {
    /// Prompt tokens.
    pub input: f64,
    /// Generated tokens.
    pub output: f64,
    /// Prompt tokens served from the upstream's cache.
    pub cached_input: f64,
    /// Prompt tokens written to the upstream's cache.
    pub cache_write: f64,
}

/// What an answer used, as it is priced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Prompt tokens, all of them.
    pub prompt: u64,
    /// Of those, read from the upstream's cache.
    pub cached: u64,
    /// Of those, written to the upstream's cache.
    pub written: u64,
    /// Generated tokens.
    pub completion: u64,
}

impl Price {
    fn of(entry: &PriceConfig) -> Price {
        Price {
            input: entry.input_per_mtok,
            output: entry.output_per_mtok,
            cached_input: entry.cached_input_per_mtok.unwrap_or(entry.input_per_mtok),
            cache_write: entry.cache_write_per_mtok.unwrap_or(entry.input_per_mtok),
        }
    }

    /// The cost of `used`, in USD: the prompt's tokens read from or written
    /// to the upstream's cache at their own prices, the rest at the input
    /// price.
    pub fn usd(&self, used: Tokens) -> f64 {
        let cached = used.cached.min(used.prompt);
        let written = used.written.min(used.prompt - cached);
        ((used.prompt - cached - written) as f64 * self.input
            + cached as f64 * self.cached_input
            + written as f64 * self.cache_write
            + used.completion as f64 * self.output)
            / 1e6
    }

    /// The larger of each price.
    fn max(self, other: Price) -> Price {
        Price {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cached_input: self.cached_input.max(other.cached_input),
            cache_write: self.cache_write.max(other.cache_write),
        }
    }
}

/// USD as nano-USD, rounded up: a budget never counts less than was spent.
/// (Rounded to the pico-dollar first, so that 0.03 is 30,000,000, not one
/// more for the float's last bit.)
pub fn nanos(usd: f64) -> u64 {
    ((usd * NANOS * 1e3).round() / 1e3).ceil().max(0.0) as u64
}

/// The price table.
#[derive(Debug, Default)]
pub struct Prices {
    models: HashMap<String, Price>,
    /// Route's model → deployment's name → the deployment's price.
    deployments: HashMap<String, HashMap<String, Price>>,
    /// Model id → the most any way of serving it charges (see
    /// [`Prices::most`]), made once rather than per request.
    most: HashMap<String, Price>,
    /// Model or route id → its output cap, where one is set.
    caps: HashMap<String, u32>,
}

impl Prices {
    /// The table `cfg` sets.
    pub fn new(cfg: &InferenceConfig) -> Prices {
        let models: HashMap<String, Price> = cfg
            .prices
            .iter()
            .map(|p| (p.model.clone(), Price::of(p)))
            .collect();
        let mut deployments = HashMap::new();
        for route in &cfg.routes {
            for d in &route.deployments {
                let base = models.get(&d.model).copied();
                let own = [
                    d.input_per_mtok,
                    d.output_per_mtok,
                    d.cached_input_per_mtok,
                    d.cache_write_per_mtok,
                ];
                if base.is_none() && own.iter().all(Option::is_none) {
                    continue;
                }
                let base = base.unwrap_or_default();
                let input = d.input_per_mtok.unwrap_or(base.input);
                // A prompt-cache price not set follows the deployment's own
                // input price, if it sets one, else the model's.
                let cache_price = |own: Option<f64>, model: f64| {
                    own.unwrap_or(if d.input_per_mtok.is_some() {
                        input
                    } else {
                        model
                    })
                };
                let price = Price {
                    input,
                    output: d.output_per_mtok.unwrap_or(base.output),
                    cached_input: cache_price(d.cached_input_per_mtok, base.cached_input),
                    cache_write: cache_price(d.cache_write_per_mtok, base.cache_write),
                };
                (deployments.entry(route.model.clone()))
                    .or_insert_with(HashMap::new)
                    .insert(d.name().to_string(), price);
            }
        }
        let mut most = models.clone();
        for (route, priced) in &deployments {
            let highest = priced.values().copied().chain(models.get(route).copied());
            if let Some(price) = highest.reduce(Price::max) {
                most.insert(route.clone(), price);
            }
        }
        let priced = (cfg.prices.iter()).filter_map(|p| Some((&p.model, p.max_output_tokens?)));
        let routed = (cfg.routes.iter()).filter_map(|r| Some((&r.model, r.max_output_tokens?)));
        let caps = priced
            .chain(routed)
            .map(|(model, cap)| (model.clone(), cap.get()))
            .collect();
        Prices {
            models,
            deployments,
            most,
            caps,
        }
    }

    /// The most one choice of an answer from `model` may generate: its
    /// route's `max_output_tokens`, its price entry's, or
    /// [`DEFAULT_MAX_OUTPUT_TOKENS`].
    pub fn output_cap(&self, model: &str) -> u32 {
        self.caps
            .get(model)
            .copied()
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)
    }

    /// The price of an answer to `model` from the route's `deployment`
    /// (`""` for a model without a route): the deployment's own, its
    /// model's, or (a fallback) the model it names; then `model`'s.
    pub fn of(&self, model: &str, deployment: &str) -> Option<Price> {
        (self.deployments.get(model))
            .and_then(|d| d.get(deployment))
            .or_else(|| self.models.get(deployment))
            .or_else(|| self.models.get(model))
            .copied()
    }

    /// The most one token of a request to `model` may cost, whichever
    /// deployment serves it: what a request is admitted against.
    pub fn most(&self, model: &str) -> Option<Price> {
        self.most.get(model).copied()
    }

    /// Which of `models` have no price.
    pub fn unpriced<'a>(&self, models: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
        models.filter(|m| self.most(m).is_none()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices(toml: &str) -> Prices {
        Prices::new(&crate::cfg::Config::parse(toml).unwrap().inference)
    }

    #[test]
    fn a_deployment_price_overrides_its_model_and_the_route_admits_at_the_highest() {
        let p = prices(
            r#"
[[inference.prices]]
model = "mini"
input_per_mtok = 0.15
output_per_mtok = 0.60
cached_input_per_mtok = 0.075
[[inference.routes]]
model = "chat"
deployments = [{ model = "mini", name = "east" }, { model = "mini", name = "west", output_per_mtok = 2.0 }]
"#,
        );
        let east = p.of("chat", "east").unwrap();
        let used = |prompt, cached, written, completion| Tokens {
            prompt,
            cached,
            written,
            completion,
        };
        assert_eq!(east.usd(used(1_000_000, 0, 0, 1_000_000)), 0.75);
        assert_eq!(east.usd(used(1_000_000, 500_000, 0, 0)), 0.1125);
        // Writes default to the input price; a read and a write never
        // count more tokens than the prompt had.
        assert_eq!(east.usd(used(1_000_000, 0, 1_000_000, 0)), 0.15);
        let both = east.usd(used(1_000, 800, 800, 0));
        assert!((both - 0.000_09).abs() < 1e-15, "{both}");
        let west = p.of("chat", "west").unwrap();
        assert_eq!(west.output, 2.0);
        assert_eq!(p.most("chat").unwrap().output, 2.0);
        assert_eq!(p.of("mini", "").unwrap().input, 0.15);
        assert!(p.of("other", "").is_none());
        assert_eq!(p.unpriced(["mini", "chat", "other"].into_iter()), ["other"]);
        assert_eq!(nanos(0.000_000_001_5), 2);
        assert_eq!(nanos(5.0 * 1000.0 / 1e6 + 5.0 * 5000.0 / 1e6), 30_000_000);
    }

    #[test]
    fn a_route_caps_output_over_its_model_and_others_get_the_default() {
        let p = prices(
            r#"
[[inference.prices]]
model = "mini"
input_per_mtok = 0.15
output_per_mtok = 0.60
max_output_tokens = 16384
[[inference.routes]]
model = "chat"
max_output_tokens = 1000
deployments = [{ model = "mini" }]
"#,
        );
        assert_eq!(p.output_cap("mini"), 16_384);
        assert_eq!(p.output_cap("chat"), 1_000);
        assert_eq!(p.output_cap("other"), DEFAULT_MAX_OUTPUT_TOKENS);
        let zero = "[[inference.prices]]\nmodel = \"m\"\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\nmax_output_tokens = 0";
        let e = format!("{:#}", crate::cfg::Config::parse(zero).unwrap_err());
        assert!(
            e.contains("max_output_tokens") && e.contains("nonzero"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_price_is_refused_naming_it() {
        let bad =
            "[[inference.prices]]\nmodel = \"m\"\ninput_per_mtok = -1.0\noutput_per_mtok = 1.0";
        let e = crate::cfg::Config::parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("input_per_mtok = -1") && e.contains("'m'"),
            "{e}"
        );
        let twice = "[[inference.prices]]\nmodel = \"m\"\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n[[inference.prices]]\nmodel = \"m\"\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0";
        let e = crate::cfg::Config::parse(twice).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
    }
}

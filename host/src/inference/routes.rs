//! `[[inference.routes]]`: one model id served by several deployments,
//! tried in turn with retries, cooldowns and fallbacks, as LiteLLM's
//! router does.
//!
//! A deployment that answers 429 or 5xx, cannot be reached or times out is
//! put in cooldown for `cooldown_s` and the next one is tried; a client
//! error (another 4xx, a refused field) is the client's and is answered at
//! once. A stream falls over only until its first piece is sent on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cfg::{RouteConfig, RouteStrategy};
use crate::plugin::CallError;

/// One deployment to try: the model id it is served under, its name, and
/// its route's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// The model id a backend serves it under.
    pub model: String,
    /// Its name, for the `x-switchyard-deployment` header, usage and logs.
    pub name: String,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// How long it is passed over after failing.
    pub cooldown: Duration,
}

/// The routes, and which deployments are cooling down.
#[derive(Default)]
pub struct Routes {
    routes: HashMap<String, RouteConfig>,
    cooling: Mutex<HashMap<String, Instant>>,
}

/// Fallbacks are followed one level deep: a fallback's own fallbacks are
/// not, so routes cannot loop.
const FALLBACK_DEPTH: usize = 1;

impl Routes {
    /// The routes of the configuration.
    pub fn new(routes: &[RouteConfig]) -> Routes {
        Routes {
            routes: routes
                .iter()
                .map(|r| (r.model.clone(), r.clone()))
                .collect(),
            cooling: Mutex::default(),
        }
    }

    /// The model ids routes serve.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// Whether `model` is a route's.
    pub fn has(&self, model: &str) -> bool {
        self.routes.contains_key(model)
    }

    /// The deployments to try for `model`, in order, fallbacks last; `None`
    /// when `model` is no route's. Deployments cooling down are left out.
    pub fn plan(&self, model: &str) -> Option<Vec<Deployment>> {
        self.plan_at(model, 0)
    }

    fn plan_at(&self, model: &str, depth: usize) -> Option<Vec<Deployment>> {
        let route = self.routes.get(model)?;
        let mut order: Vec<usize> = (0..route.deployments.len()).collect();
        if route.strategy == RouteStrategy::Weighted
            && let Some(first) = weighted_pick(route)
        {
            order.retain(|i| *i != first);
            order.insert(0, first);
        }
        let now = Instant::now();
        let cooling = self.cooling.lock().unwrap_or_else(|p| p.into_inner());
        let tries = route.retries.map_or(usize::MAX, |r| r.saturating_add(1));
        let mut plan: Vec<Deployment> = order
            .into_iter()
            .map(|i| &route.deployments[i])
            .filter(|d| cooling.get(d.name()).is_none_or(|until| *until <= now))
            .take(tries)
            .map(|d| Deployment {
                model: d.model.clone(),
                name: d.name().to_string(),
                timeout: Duration::from_millis(route.timeout_ms),
                cooldown: Duration::from_secs(route.cooldown_s),
            })
            .collect();
        drop(cooling);
        for fallback in &route.fallbacks {
            match self.routes.contains_key(fallback) {
                true if depth < FALLBACK_DEPTH => {
                    plan.extend(self.plan_at(fallback, depth + 1).unwrap_or_default());
                }
                true => {}
                false => plan.push(Deployment {
                    model: fallback.clone(),
                    name: fallback.clone(),
                    timeout: Duration::from_millis(route.timeout_ms),
                    cooldown: Duration::ZERO,
                }),
            }
        }
        Some(plan)
    }

    /// Passes over `deployment` for its cooldown.
    pub fn cool(&self, deployment: &Deployment) {
        if deployment.cooldown.is_zero() {
            return;
        }
        tracing::warn!(deployment = %deployment.name, cooldown_s = deployment.cooldown.as_secs(), "deployment failed; cooling down");
        self.cooling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                deployment.name.clone(),
                Instant::now() + deployment.cooldown,
            );
    }

    /// When the first of `model`'s deployments is tried again.
    pub fn next_ready(&self, model: &str) -> Option<Duration> {
        let route = self.routes.get(model)?;
        let cooling = self.cooling.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        route
            .deployments
            .iter()
            .filter_map(|d| cooling.get(d.name()))
            .map(|until| until.saturating_duration_since(now))
            .min()
    }
}

/// A deployment by weight, at random.
fn weighted_pick(route: &RouteConfig) -> Option<usize> {
    let total: u64 = route.deployments.iter().map(|d| u64::from(d.weight)).sum();
    if total == 0 {
        return None;
    }
    let mut bytes = [0u8; 8];
    crate::ids::fill_random(&mut bytes);
    let mut pick = u64::from_le_bytes(bytes) % total;
    for (i, d) in route.deployments.iter().enumerate() {
        let weight = u64::from(d.weight);
        if pick < weight {
            return Some(i);
        }
        pick -= weight;
    }
    None
}

/// Whether a failed call is the deployment's fault, so the next one is
/// worth trying: a 429 or 5xx from the upstream, no answer, a timeout, a
/// trap. An upstream's other 4xx, or a refusal of the request, is not.
pub fn retryable(error: &CallError) -> bool {
    match error {
        CallError::Failed(_) | CallError::TimedOut(_) => true,
        CallError::Reported { code, status, .. } if code == "upstream-failed" => {
            // No status: the upstream was not reached.
            status.is_none_or(|s| s == 429 || s >= 500)
        }
        // Nobody waits for another deployment's answer.
        CallError::Reported { .. } | CallError::Left { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfg::DeploymentConfig;

    fn route(strategy: RouteStrategy, retries: Option<usize>) -> RouteConfig {
        let deployment = |model: &str, weight| DeploymentConfig {
            model: model.into(),
            name: None,
            weight,
            input_per_mtok: None,
            output_per_mtok: None,
            cached_input_per_mtok: None,
            cache_write_per_mtok: None,
        };
        RouteConfig {
            model: "chat".into(),
            deployments: vec![deployment("a", 1), deployment("b", 0), deployment("c", 1)],
            strategy,
            retries,
            timeout_ms: 1_000,
            cooldown_s: 60,
            fallbacks: vec!["backup".into()],
            cache: true,
            max_output_tokens: None,
        }
    }

    fn names(plan: &[Deployment]) -> Vec<&str> {
        plan.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn plans_follow_order_retries_cooldowns_and_fallbacks() {
        let routes = Routes::new(&[route(RouteStrategy::Ordered, None)]);
        assert!(routes.plan("other").is_none());
        let plan = routes.plan("chat").unwrap();
        assert_eq!(names(&plan), ["a", "b", "c", "backup"]);
        routes.cool(&plan[0]);
        assert_eq!(names(&routes.plan("chat").unwrap()), ["b", "c", "backup"]);
        assert!(routes.next_ready("chat").unwrap() > Duration::from_secs(59));
        let limited = Routes::new(&[route(RouteStrategy::Ordered, Some(1))]);
        assert_eq!(names(&limited.plan("chat").unwrap()), ["a", "b", "backup"]);
    }

    #[test]
    fn weighted_routes_never_pick_a_weightless_deployment_first() {
        let routes = Routes::new(&[route(RouteStrategy::Weighted, None)]);
        let mut firsts = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let plan = routes.plan("chat").unwrap();
            assert_eq!(plan.len(), 4);
            firsts.insert(plan[0].name.clone());
        }
        assert_eq!(firsts.into_iter().collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn only_the_deployments_faults_are_retried() {
        let reported = |status: Option<u16>| CallError::Reported {
            code: "upstream-failed".into(),
            message: "the upstream failed".into(),
            status,
        };
        assert!(retryable(&reported(Some(503))));
        assert!(retryable(&reported(Some(429))));
        assert!(retryable(&reported(None)), "not reached");
        assert!(!retryable(&reported(Some(400))));
        assert!(!retryable(&reported(Some(404))));
        assert!(!retryable(&CallError::Reported {
            code: "unsupported".into(),
            message: "tools".into(),
            status: None,
        }));
        assert!(retryable(&CallError::TimedOut("slow".into())));
    }
}

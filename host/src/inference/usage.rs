//! Token usage, per team, project, API key, model and day.
//!
//! One record per (scope, day, model, key) holds running totals, added to
//! atomically by the store, so concurrent requests never lose a count.

use crate::error::Result;
pub use crate::model::{Totals, UsageRow as Row};
use crate::store::Store;

/// Who a request is billed to.
#[derive(Debug, Clone)]
pub struct Account {
    /// `team/project`, or `~user` for requests without a project header.
    pub scope: String,
    /// The API key's id.
    pub key_id: String,
    /// Whose rate limits and budgets the request counts against.
    pub limits: super::limits::Owners,
}

impl Account {
    /// Whose data the request carries: the team of a project scope, or the
    /// user of a personal one.
    pub fn team(&self) -> &str {
        self.scope.split('/').next().unwrap_or_default()
    }
}

/// The usage scope of a team's project.
pub fn project_scope(team: &str, project: &str) -> String {
    format!("{team}/{project}")
}

/// The usage scope of a user's requests sent without a project header.
/// `~` cannot start a team name, so the two kinds of scope never collide.
pub fn personal_scope(user: &str) -> String {
    format!("~{user}")
}

/// What one answer used.
#[derive(Debug, Clone, Copy, Default)]
pub struct Used {
    /// Prompt tokens.
    pub prompt: u32,
    /// Generated tokens.
    pub completion: u32,
    /// Of the prompt tokens, those the upstream read from its cache.
    pub cached: u32,
    /// Its cost in USD at the price table (0 for a model without a price).
    pub cost_usd: f64,
    /// Whether it was answered from the response cache (at no cost).
    pub cache_hit: bool,
}

impl Used {
    /// What `answer` used, at `price`. A backend that reports no prompt
    /// tokens did not learn them (every prompt has some: an upstream that
    /// sends no usage, a stream the client left before its usage came), so
    /// the prompt is counted as admission estimated it, at most `most`; and
    /// if it reports nothing generated either, `most`'s output too. An
    /// answer never costs less than it may have.
    pub fn of<A: super::ask::Ask>(
        answer: &A::Answer,
        price: Option<super::prices::Price>,
        most: super::limits::Estimate,
    ) -> Used {
        let (prompt, completion) = A::tokens(answer);
        let (cached, written) = A::cached_tokens(answer);
        let tokens = match (prompt, completion) {
            (0, 0) => super::prices::Tokens {
                prompt: most.prompt,
                completion: most.output,
                ..Default::default()
            },
            (0, completion) => super::prices::Tokens {
                prompt: most.prompt,
                completion: completion.into(),
                ..Default::default()
            },
            _ => super::prices::Tokens {
                prompt: prompt.into(),
                cached: cached.into(),
                written: written.into(),
                completion: completion.into(),
            },
        };
        Used::priced(tokens, price)
    }

    /// What a call stopped when its client left used: its prompt as
    /// admission estimated it (the upstream's count comes at the end, which
    /// never came), and a token for each of the `pieces` it had streamed,
    /// at most what it was admitted to generate.
    pub fn left(
        most: super::limits::Estimate,
        pieces: u32,
        price: Option<super::prices::Price>,
    ) -> Used {
        let tokens = super::prices::Tokens {
            prompt: most.prompt,
            completion: most.output.min(pieces.into()),
            ..Default::default()
        };
        Used::priced(tokens, price)
    }

    /// `tokens` as used, at `price`.
    fn priced(tokens: super::prices::Tokens, price: Option<super::prices::Price>) -> Used {
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Used {
            prompt: clamp(tokens.prompt),
            completion: clamp(tokens.completion),
            cached: clamp(tokens.cached.min(tokens.prompt)),
            cost_usd: price.map_or(0.0, |p| p.usd(tokens)),
            cache_hit: false,
        }
    }

    /// As limits count it.
    pub fn need(&self) -> super::limits::Need {
        super::limits::Need {
            tokens: u64::from(self.prompt) + u64::from(self.completion),
            nanos: super::prices::nanos(self.cost_usd),
        }
    }
}

/// Adds one finished request for `model` (and the route's deployment that
/// served it, or `""`), with what it used.
pub async fn record(
    store: &Store,
    account: &Account,
    (model, deployment): (&str, &str),
    used: &Used,
) -> Result<()> {
    let Used {
        prompt, completion, ..
    } = *used;
    let totals = Totals {
        requests: 1,
        prompt_tokens: prompt.into(),
        completion_tokens: completion.into(),
        total_tokens: u64::from(prompt) + u64::from(completion),
        cost_usd: used.cost_usd,
        cache_hits: u64::from(used.cache_hit),
        cached_tokens: used.cached.into(),
    };
    let (day, model) = (day(crate::ids::now_ms() / 1000), model.to_string());
    let add = Row {
        day,
        model,
        key_id: account.key_id.clone(),
        deployment: deployment.to_string(),
        totals,
    };
    Ok(store.add_usage(&account.scope, &add).await?)
}

/// Every row for `scope`, oldest day first.
pub async fn rows(store: &Store, scope: &str) -> Result<Vec<Row>> {
    Ok(store.usage(scope).await?)
}

/// Totals of `rows` grouped by `key`.
pub fn group_by(
    rows: &[Row],
    key: impl Fn(&Row) -> &str,
) -> std::collections::BTreeMap<String, Totals> {
    let mut groups = std::collections::BTreeMap::<String, Totals>::new();
    for row in rows {
        groups
            .entry(key(row).to_string())
            .or_default()
            .add(&row.totals);
    }
    groups
}

/// The sum of `rows`.
pub fn total(rows: &[Row]) -> Totals {
    let mut sum = Totals::default();
    for row in rows {
        sum.add(&row.totals);
    }
    sum
}

/// `YYYY-MM-DD` for unix seconds (UTC).
fn day(secs: u64) -> String {
    let (y, m, d) = crate::ids::civil(secs / 86_400);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_are_civil_dates() {
        assert_eq!(super::day(0), "1970-01-01");
        assert_eq!(super::day(1_795_305_600), "2026-11-22");
        assert_eq!(super::day(951_782_400), "2000-02-29");
    }
}

//! Tokens per day as a bar chart, drawn on the server as SVG (no chart
//! library, no script): the geometry here, the markup in
//! `usage_chart.html`, escaped like every page.

use crate::inference::usage::{self, Row};

/// Days the chart shows at most (the most recent with use).
const DAYS: usize = 30;
/// Its size in SVG units.
const WIDTH: u64 = 600;
const HEIGHT: u64 = 160;
/// Room under the bars for the day labels.
const LABELS: u64 = 16;

/// One day's bar.
pub struct Bar {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// `MM-DD`, under the bar.
    pub short_day: String,
    /// Its tokens.
    pub tokens: u64,
    /// What they cost, `$0.12`.
    pub cost: String,
    /// Geometry, in SVG units.
    pub x: u64,
    pub y: u64,
    pub w: u64,
    pub h: u64,
    pub label_x: u64,
}

/// A usage chart: bars by day, and the totals.
pub struct Chart {
    /// The bars, oldest first.
    pub bars: Vec<Bar>,
    /// The largest day's tokens.
    pub max: u64,
    /// All tokens and requests.
    pub total: u64,
    pub requests: u64,
    /// All they cost, `$0.12`.
    pub cost: String,
    /// The project to name in the empty state, if any.
    pub project: Option<String>,
    pub width: u64,
    pub height: u64,
}

impl Chart {
    /// The chart of `rows` (usage of one scope).
    pub fn of(rows: &[Row], project: Option<String>) -> Chart {
        let by_day = usage::group_by(rows, |r| &r.day);
        let days: Vec<(String, u64, f64)> = by_day
            .into_iter()
            .map(|(day, totals)| (day, totals.total_tokens, totals.cost_usd))
            .collect();
        let days = &days[days.len().saturating_sub(DAYS)..];
        let max = days.iter().map(|(_, t, _)| *t).max().unwrap_or(0).max(1);
        let slot = WIDTH / DAYS as u64;
        let room = HEIGHT - LABELS;
        let bars = days
            .iter()
            .enumerate()
            .map(|(i, (day, tokens, cost))| {
                let h = (tokens * room).div_ceil(max).max(1);
                let x = i as u64 * slot + 2;
                Bar {
                    short_day: day.get(5..).unwrap_or(day).to_string(),
                    day: day.clone(),
                    tokens: *tokens,
                    cost: dollars(*cost),
                    x,
                    y: room - h,
                    w: slot - 4,
                    h,
                    label_x: x + (slot - 4) / 2,
                }
            })
            .collect();
        let total = usage::total(rows);
        Chart {
            bars,
            max,
            total: total.total_tokens,
            requests: total.requests,
            cost: dollars(total.cost_usd),
            project,
            width: WIDTH,
            height: HEIGHT,
        }
    }
}

/// USD to the cent, or to the millionth below a cent.
fn dollars(usd: f64) -> String {
    if usd == 0.0 || usd >= 0.01 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.6}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Totals;

    fn row(day: &str, tokens: u64) -> Row {
        Row {
            day: day.into(),
            model: "m".into(),
            key_id: "k".into(),
            deployment: String::new(),
            totals: Totals {
                requests: 1,
                prompt_tokens: 0,
                completion_tokens: tokens,
                total_tokens: tokens,
                cost_usd: tokens as f64 / 100.0,
                cache_hits: 0,
                cached_tokens: 0,
            },
        }
    }

    #[test]
    fn bars_scale_to_the_busiest_day_and_days_add_up() {
        let rows = [
            row("2026-11-24", 50),
            row("2026-11-25", 100),
            row("2026-11-25", 100),
        ];
        let chart = Chart::of(&rows, None);
        assert_eq!(chart.bars.len(), 2);
        assert_eq!(chart.max, 200);
        assert_eq!(chart.total, 250);
        assert_eq!(
            (chart.cost.as_str(), chart.bars[1].cost.as_str()),
            ("$2.50", "$2.00")
        );
        let room = HEIGHT - LABELS;
        assert_eq!(chart.bars[1].h, room, "the busiest day fills the height");
        assert_eq!(chart.bars[0].h, room / 4);
        assert_eq!(
            chart.bars[0].y + chart.bars[0].h,
            room,
            "bars stand on one line"
        );
        assert_eq!(chart.bars[0].short_day, "11-24");
    }
}

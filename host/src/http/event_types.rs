//! `/v1/event-types`: the event catalog, for anyone signed in (receivers
//! generate their handlers from its schemas).

use super::Caller;
use crate::automation::catalog;

pub async fn list(Caller(_): Caller) -> axum::Json<serde_json::Value> {
    super::list_of(catalog::all())
}

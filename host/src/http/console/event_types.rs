//! `GET /event-types`: the event catalog for people: each event type, where
//! automations on it live, what it fills, and its default payload.

use askama::Template;

use super::{Nav, Shown, Viewer};
use crate::automation::catalog::{self, EventTypeInfo};

#[derive(Template)]
#[template(path = "console/event_types.html")]
struct EventTypesPage {
    nav: Option<Nav>,
    /// Each type, with its example payload as indented JSON.
    types: Vec<(EventTypeInfo, String)>,
}

/// `GET /event-types`.
pub async fn list(viewer: Viewer) -> Shown {
    let types = catalog::all()
        .into_iter()
        .map(|info| {
            let example = serde_json::to_string_pretty(&info.example).unwrap_or_default();
            (info, example)
        })
        .collect();
    super::ok(&EventTypesPage {
        nav: Some(viewer.nav()),
        types,
    })
}

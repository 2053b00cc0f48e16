//! A project or a registry as the console addresses it: one set of pages
//! serves `/teams/{team}/projects/{project}/…` and `/registries/{registry}/…`,
//! the scope read from the path as the API's handlers read it.

use std::collections::HashMap;

use crate::automation::automations::Scope;
use crate::error::Result;
use crate::http::scope::scope;

/// A project or a registry, with where its pages are.
pub struct Place {
    /// The scope.
    pub scope: Scope,
    /// The console path of its page.
    pub base: String,
    /// Its name in headings, e.g. "Project ml/vision".
    pub title: String,
}

impl Place {
    /// The place a route's path names.
    pub fn of(params: &HashMap<String, String>) -> Result<Place> {
        Ok(Place::from(scope(params)?))
    }

    /// Whether it is a project (runs and usage belong to projects).
    pub fn is_project(&self) -> bool {
        matches!(self.scope, Scope::Project { .. })
    }

    /// The events its automations may listen for, with their words.
    pub fn events(&self) -> &'static [(&'static str, &'static str)] {
        const ALIAS: (&str, &str) = (
            "ADD_ARTIFACT_ALIAS",
            "An alias is added to an artifact version",
        );
        const CREATED: (&str, &str) = ("CREATE_ARTIFACT", "A new artifact version is created");
        const MOVED: (&str, &str) = (
            "UPDATE_ARTIFACT_ALIAS",
            "An alias moves from one artifact version to another",
        );
        const TAG: (&str, &str) = ("ADD_ARTIFACT_TAG", "A tag is added to an artifact version");
        match self.scope {
            Scope::Project { .. } => &[
                CREATED,
                ALIAS,
                MOVED,
                TAG,
                ("RUN_METRIC_THRESHOLD", "A run metric crosses a threshold"),
                (
                    "RUN_METRIC_CHANGE",
                    "A run metric changes against its prior window",
                ),
                (
                    "RUN_METRIC_ZSCORE",
                    "A run metric's z-score passes a threshold",
                ),
                ("RUN_STATE", "A run ends: finished, failed or crashed"),
            ],
            Scope::Registry { .. } => &[
                CREATED,
                ALIAS,
                MOVED,
                TAG,
                ("LINK_ARTIFACT", "A version is linked into the registry"),
            ],
            Scope::Collection { .. } => &[CREATED, ALIAS, MOVED, TAG],
            Scope::Team { .. } => &[
                (
                    "WEBHOOK_DISABLED",
                    "One of the team's webhooks is switched off",
                ),
                (
                    "DELIVERY_EXHAUSTED",
                    "A delivery to one of the team's webhooks fails for good",
                ),
                (
                    "WEBHOOK_CIRCUIT_OPENED",
                    "One of the team's webhooks keeps failing: its circuit opens",
                ),
                ("WEBHOOK_RECOVERED", "One of the team's webhooks recovers"),
            ],
        }
    }
}

impl From<Scope> for Place {
    fn from(scope: Scope) -> Place {
        let (base, title) = match &scope {
            Scope::Project { team, project } => (
                format!("/teams/{team}/projects/{project}"),
                format!("Project {team}/{project}"),
            ),
            Scope::Registry { registry } => (
                format!("/registries/{registry}"),
                format!("Registry {registry}"),
            ),
            Scope::Collection { collection, .. } => {
                let parent = Place::from(scope.parent());
                (
                    format!("{}/collections/{collection}", parent.base),
                    format!("Collection {collection} of {}", parent.title),
                )
            }
            Scope::Team { team } => (format!("/teams/{team}"), format!("Team {team}")),
        };
        Place { scope, base, title }
    }
}

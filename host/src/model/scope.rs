//! Where things happen: a registry, a team's project, one collection of
//! either, or a team itself (what happens to its webhooks).

use serde::{Deserialize, Serialize};

/// A registry or a project: where collections live and automations listen;
/// or one collection of either, where an automation may listen alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Scope {
    /// Every collection of a registry, present and future.
    Registry {
        /// The registry's name.
        registry: String,
    },
    /// Every collection and run of a project, present and future.
    Project {
        /// The owning team.
        team: String,
        /// The project's name.
        project: String,
    },
    /// One collection of a registry (`registry` set) or of a project
    /// (`team` and `project` set): W&B's collection scope. Made only by
    /// [`Scope::collection`].
    Collection {
        /// The registry, for a registry's collection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        registry: Option<String>,
        /// The owning team, for a project's collection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        team: Option<String>,
        /// The project, for a project's collection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        project: Option<String>,
        /// The collection's name.
        collection: String,
    },
    /// A team: where automations listen for what happens to its own
    /// webhooks (the operational events).
    Team {
        /// The team's name.
        team: String,
    },
}

impl Scope {
    /// A project scope.
    pub fn project(team: &str, project: &str) -> Scope {
        Scope::Project {
            team: team.to_string(),
            project: project.to_string(),
        }
    }

    /// Collection `name` of `parent`, a registry or project (of a
    /// collection scope, its parent's).
    pub fn collection(parent: &Scope, name: &str) -> Scope {
        let (registry, team, project) = match parent.parent() {
            Scope::Registry { registry } => (Some(registry), None, None),
            Scope::Project { team, project } => (None, Some(team), Some(project)),
            Scope::Collection { .. } | Scope::Team { .. } => {
                unreachable!("collections are a registry's or a project's")
            }
        };
        Scope::Collection {
            registry,
            team,
            project,
            collection: name.to_string(),
        }
    }

    /// The registry or project: itself, or a collection's owner.
    pub fn parent(&self) -> Scope {
        match self {
            Scope::Collection {
                registry: Some(registry),
                ..
            } => Scope::Registry {
                registry: registry.clone(),
            },
            Scope::Collection { team, project, .. } => Scope::project(
                team.as_deref().unwrap_or_default(),
                project.as_deref().unwrap_or_default(),
            ),
            scope => scope.clone(),
        }
    }

    /// Whether it is a project, or a project's collection.
    pub fn in_project(&self) -> bool {
        matches!(self.parent(), Scope::Project { .. })
    }

    /// `registry 'x'`, `project 'team/x'` or `collection 'c' of …`, for
    /// messages.
    pub fn describe(&self) -> String {
        match self {
            Scope::Registry { registry } => format!("registry '{registry}'"),
            Scope::Project { team, project } => format!("project '{team}/{project}'"),
            Scope::Collection { collection, .. } => {
                format!("collection '{collection}' of {}", self.parent().describe())
            }
            Scope::Team { team } => format!("team '{team}'"),
        }
    }

    /// The scope as its parts: `["r", registry]`, `["p", team, project]`,
    /// `["t", team]`, or `["c"]` and its parent's parts and the collection. Names cannot
    /// hold `/` or NUL, so the parts never run into each other.
    pub fn parts(&self) -> Vec<&str> {
        match self {
            Scope::Team { team } => vec!["t", team],
            Scope::Registry { registry } => vec!["r", registry],
            Scope::Project { team, project } => vec!["p", team, project],
            Scope::Collection {
                registry: Some(registry),
                collection,
                ..
            } => vec!["c", "r", registry, collection],
            Scope::Collection {
                team,
                project,
                collection,
                ..
            } => vec![
                "c",
                "p",
                team.as_deref().unwrap_or_default(),
                project.as_deref().unwrap_or_default(),
                collection,
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_scope_knows_its_parent_and_its_parts() {
        let project = Scope::project("ml", "vision");
        let detector = Scope::collection(&project, "detector");
        assert_eq!(detector.parent(), project);
        assert_eq!(detector.parts(), ["c", "p", "ml", "vision", "detector"]);
        assert_eq!(
            serde_json::to_value(&detector).unwrap(),
            serde_json::json!({"type": "collection", "team": "ml", "project": "vision",
                "collection": "detector"})
        );
        let registry = Scope::Registry {
            registry: "models".into(),
        };
        let models = Scope::collection(&registry, "detectors");
        assert_eq!(models.parts(), ["c", "r", "models", "detectors"]);
        assert_eq!(
            models.describe(),
            "collection 'detectors' of registry 'models'"
        );
        assert_eq!(Scope::collection(&models, "other").parent(), registry);
    }
}

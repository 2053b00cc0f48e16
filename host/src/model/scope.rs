//! Where things happen: a registry, or a team's project.

use serde::{Deserialize, Serialize};

/// A registry or a project: where collections live and automations listen.
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
}

impl Scope {
    /// A project scope.
    pub fn project(team: &str, project: &str) -> Scope {
        Scope::Project {
            team: team.to_string(),
            project: project.to_string(),
        }
    }

    /// `registry 'x'` or `project 'team/x'`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Scope::Registry { registry } => format!("registry '{registry}'"),
            Scope::Project { team, project } => format!("project '{team}/{project}'"),
        }
    }

    /// The scope as its parts: `["r", registry]` or `["p", team, project]`.
    /// Names cannot hold `/` or NUL, so the parts never run into each other.
    pub fn parts(&self) -> Vec<&str> {
        match self {
            Scope::Registry { registry } => vec!["r", registry],
            Scope::Project { team, project } => vec!["p", team, project],
        }
    }
}

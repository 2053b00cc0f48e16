//! Reading a registry or project scope from a route's path parameters, so
//! one handler serves `/v1/registries/{registry}/…` and
//! `/v1/teams/{team}/projects/{project}/…` alike.

use std::collections::HashMap;

use axum::extract::Path;

use crate::error::{Error, Result};
use crate::model::Scope;

/// The path parameters of a scoped route.
pub type Params = Path<HashMap<String, String>>;

/// A named path parameter.
pub fn param(params: &HashMap<String, String>, name: &str) -> Result<String> {
    params
        .get(name)
        .cloned()
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("route lacks {{{name}}}")))
}

/// The scope the route addresses.
pub fn scope(params: &HashMap<String, String>) -> Result<Scope> {
    Ok(match params.get("registry") {
        Some(registry) => Scope::Registry {
            registry: registry.clone(),
        },
        None => Scope::Project {
            team: param(params, "team")?,
            project: param(params, "project")?,
        },
    })
}

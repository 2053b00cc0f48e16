//! Who may act where: the caller, checked against the registry or project
//! a route addresses, in one extractor, so that one handler serves
//! `/v1/registries/{registry}/…` and `/v1/teams/{team}/projects/{project}/…`
//! alike and none can skip the check.

use std::collections::HashMap;
use std::marker::PhantomData;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use super::Caller;
use crate::app::App;
use crate::domain::auth::User;
use crate::domain::groups::{self, Role};
use crate::error::{Error, Result};
use crate::model::Scope;

/// The role a route needs: [`AsMember`] or [`AsAdmin`].
pub trait Need: Send + Sync {
    /// The least role that may act.
    const ROLE: Role;
}

/// Members of the registry, or of the project's team, may act.
pub struct AsMember;

/// Only its admins (and operators) may act.
pub struct AsAdmin;

impl Need for AsMember {
    const ROLE: Role = Role::Member;
}

impl Need for AsAdmin {
    const ROLE: Role = Role::Admin;
}

/// The caller, let into the scope the route addresses with at least the
/// role `N` names. An outsider gets the same 404 as for a scope that does
/// not exist.
pub struct InScope<N: Need> {
    /// Who.
    pub user: User,
    /// Where.
    pub scope: Scope,
    params: HashMap<String, String>,
    need: PhantomData<N>,
}

impl<N: Need> InScope<N> {
    /// A named path parameter of the route (`collection`, `name`, …).
    pub fn param(&self, name: &str) -> Result<String> {
        param(&self.params, name)
    }
}

impl<N: Need> FromRequestParts<App> for InScope<N> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self> {
        let (user, params) = caller_and_params(parts, app).await?;
        let scope = scope(&params)?;
        groups::authorize(&app.store, &user, &scope, N::ROLE).await?;
        Ok(InScope {
            user,
            scope,
            params,
            need: PhantomData,
        })
    }
}

/// The caller, let into the team `/v1/teams/{team}/…` addresses with at
/// least the role `N` names; an outsider gets the same 404 as for a team
/// that does not exist.
pub struct InTeam<N: Need> {
    /// Who.
    pub user: User,
    /// The team.
    pub team: String,
    params: HashMap<String, String>,
    need: PhantomData<N>,
}

impl<N: Need> InTeam<N> {
    /// A named path parameter of the route (`name`, …).
    pub fn param(&self, name: &str) -> Result<String> {
        param(&self.params, name)
    }
}

impl<N: Need> FromRequestParts<App> for InTeam<N> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self> {
        let (user, params) = caller_and_params(parts, app).await?;
        let team = param(&params, "team")?;
        groups::require_team(&app.store, &user, &team, N::ROLE).await?;
        Ok(InTeam {
            user,
            team,
            params,
            need: PhantomData,
        })
    }
}

/// The authenticated caller and the route's path parameters.
async fn caller_and_params(
    parts: &mut Parts,
    app: &App,
) -> Result<(User, HashMap<String, String>)> {
    let Caller(user) = Caller::from_request_parts(parts, app).await?;
    let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, app)
        .await
        .map_err(|e| Error::InvalidRequest {
            message: format!(
                "the request URL could not be read ({}); percent-encode names as UTF-8",
                e.body_text()
            ),
            param: None,
        })?;
    Ok((user, params))
}

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

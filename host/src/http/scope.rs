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
use crate::domain::groups::Role;
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

/// Where a route acts: a registry or project ([`Scope`]), a [`Team`], or the
/// [`Host`] itself.
pub trait Place: Sized + Send {
    /// The place the route's `params` name, once `user` is let in there
    /// with at least `role`; an outsider gets the same 404 as for a place
    /// that does not exist.
    fn enter(
        app: &App,
        user: &User,
        params: &PathParams,
        role: Role,
    ) -> impl Future<Output = Result<Self>> + Send;
}

impl Place for Scope {
    async fn enter(app: &App, user: &User, params: &PathParams, role: Role) -> Result<Self> {
        let scope = scope(params)?;
        app.access.authorize(user, &scope, role).await?;
        Ok(scope)
    }
}

/// Where automations listen: a registry or project, or one collection of
/// either (`…/collections/{collection}/automations`), W&B's collection
/// scope. Saving an automation needs the collection; reading does not, so
/// that those of a deleted collection show why they are disabled.
#[derive(Debug, Clone)]
pub struct Listening(pub Scope);

impl Place for Listening {
    async fn enter(app: &App, user: &User, params: &PathParams, role: Role) -> Result<Self> {
        let mut scope = scope(params)?;
        if let Some(collection) = params.get("collection") {
            scope = Scope::collection(&scope, collection);
        }
        app.access.authorize(user, &scope, role).await?;
        Ok(Listening(scope))
    }
}

impl std::ops::Deref for Listening {
    type Target = Scope;

    fn deref(&self) -> &Scope {
        &self.0
    }
}

/// The caller where automations listen.
pub type InListening<N> = In<Listening, N>;

/// The team `/v1/teams/{team}/…` addresses, by name.
#[derive(Debug, Clone)]
pub struct Team(pub String);

impl Place for Team {
    async fn enter(app: &App, user: &User, params: &PathParams, role: Role) -> Result<Self> {
        let team = param(params, "team")?;
        app.access.require_team(user, &team, role).await?;
        Ok(Team(team))
    }
}

impl std::ops::Deref for Team {
    type Target = String;

    fn deref(&self) -> &String {
        &self.0
    }
}

impl std::fmt::Display for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host itself, for its operators: whatever role a route needs, only
/// operators are let in.
pub struct Host;

impl Place for Host {
    async fn enter(_: &App, user: &User, _: &PathParams, _: Role) -> Result<Self> {
        if !user.operator {
            let why = "only an operator may administer this host; use an operator's API key";
            return Err(Error::PermissionDenied(why.into()));
        }
        Ok(Host)
    }
}

/// An operator, acting on the host.
pub type Operator = In<Host, AsAdmin>;

/// The caller, let into the place `P` the route addresses with at least the
/// role `N` names, and the host's parts.
pub struct In<P: Place, N: Need> {
    /// The host's parts.
    pub app: App,
    /// Who.
    pub user: User,
    /// Where.
    pub place: P,
    params: HashMap<String, String>,
    need: PhantomData<N>,
}

/// The caller in a registry or project.
pub type InScope<N> = In<Scope, N>;

/// The caller in a team.
pub type InTeam<N> = In<Team, N>;

impl<P: Place, N: Need> In<P, N> {
    /// The route's path parameters as `T`: a struct naming those the
    /// handler reads (`collection`, `version`, …); the place's own are
    /// in [`In::place`].
    pub fn path<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        let pairs = self.params.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let params = serde::de::value::MapDeserializer::<_, serde::de::value::Error>::new(pairs);
        // The routes name what the handlers read: a mismatch is a bug.
        T::deserialize(params)
            .map_err(|e| Error::Internal(anyhow::anyhow!("route parameters: {e}")))
    }
}

impl<P: Place, N: Need> FromRequestParts<App> for In<P, N> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self> {
        let (user, params) = caller_and_params(parts, app).await?;
        let place = P::enter(app, &user, &params, N::ROLE).await?;
        Ok(In {
            app: app.clone(),
            user,
            place,
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
    Ok((user, path_params(parts, app).await?))
}

/// The route's path parameters, or a 400 that says the URL could not be read.
pub async fn path_params(parts: &mut Parts, app: &App) -> Result<PathParams> {
    let Path(params) = Path::<PathParams>::from_request_parts(parts, app)
        .await
        .map_err(|e| Error::InvalidRequest {
            message: format!(
                "the request URL could not be read ({}); percent-encode names as UTF-8",
                e.body_text()
            ),
            param: None,
        })?;
    Ok(params)
}

/// A route's path parameters, by name.
pub type PathParams = HashMap<String, String>;

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
    Ok(match (params.get("registry"), params.get("project")) {
        (Some(registry), _) => Scope::Registry {
            registry: registry.clone(),
        },
        (None, Some(project)) => Scope::Project {
            team: param(params, "team")?,
            project: project.clone(),
        },
        (None, None) => Scope::Team {
            team: param(params, "team")?,
        },
    })
}

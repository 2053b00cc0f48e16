//! The reads every request makes to let its caller in (the key and its
//! user, the caller's role in the group, the project), kept while the
//! record they were read from stands (`store::Changes`): on PostgreSQL they
//! were four round trips per request. Only what lets a caller in is kept,
//! never a refusal, so what is created works at once; what takes access
//! away (a key revoked, a member removed or demoted) drops that one entry
//! when it commits, and on other hosts when PostgreSQL's notice arrives.

use crate::domain::auth::{self, ApiKey, User};
use crate::domain::groups::{self, Role};
use crate::domain::projects;
use crate::error::Result;
use crate::model::{GroupKind, Scope};
use crate::store::changes::path;
use crate::store::{Kept, Store};

/// The cache. One per host, shared by its requests.
pub struct Access {
    store: Store,
    keys: Kept<String, (User, ApiKey)>,
    roles: Kept<(GroupKind, String, String), Role>,
    projects: Kept<(String, String), projects::Project>,
}

impl Access {
    /// An empty cache over `store`.
    pub fn new(store: Store) -> Access {
        Access {
            store,
            keys: Kept::default(),
            roles: Kept::default(),
            projects: Kept::default(),
        }
    }

    /// [`auth::authenticate_key`], kept by the key's hash.
    pub async fn authenticate_key(&self, key: &str) -> Result<(User, ApiKey)> {
        let hash = auth::hash_key(key);
        let epoch = self.store.changes().stamp(&[&path("api_keys", &[&hash])]);
        if let Some(hit) = self.keys.get(&hash, epoch) {
            auth::check_expiry(&hit.1)?;
            return Ok(hit);
        }
        let found = auth::authenticate_key(&self.store, key).await?;
        self.keys.keep(hash, epoch, found.clone());
        Ok(found)
    }

    /// Requires `need` of `user` in a scope: the registry role, or the
    /// role in the project's team (and the project must exist). A scope
    /// the user cannot see is 404. The one way a scope is authorised, for
    /// the API and the console alike; the role itself is
    /// [`groups::require`]'s.
    pub async fn authorize(&self, user: &User, scope: &Scope, need: Role) -> Result<()> {
        match scope {
            Scope::Registry { registry } => {
                self.require(GroupKind::Registry, user, registry, need)
                    .await?;
            }
            Scope::Project { team, project } => {
                self.require(GroupKind::Team, user, team, need).await?;
                self.project(team, project).await?;
            }
            // The collection itself need not exist: the automations of one
            // deleted stay readable, disabled, saying why.
            Scope::Collection { .. } => {
                Box::pin(self.authorize(user, &scope.parent(), need)).await?;
            }
            Scope::Team { team } => {
                self.require(GroupKind::Team, user, team, need).await?;
            }
        }
        Ok(())
    }

    /// [`projects::get`], kept: callers check the caller's role first.
    pub async fn project(&self, team: &str, name: &str) -> Result<projects::Project> {
        let (key, epoch) = (
            (team.to_string(), name.to_string()),
            self.store
                .changes()
                .stamp(&[&path("projects", &[team, name])]),
        );
        if let Some(hit) = self.projects.get(&key, epoch) {
            return Ok(hit);
        }
        let project = projects::get(&self.store, team, name).await?;
        self.projects.keep(key, epoch, project.clone());
        Ok(project)
    }

    /// [`groups::require`] for a team, kept.
    pub async fn require_team(&self, user: &User, team: &str, need: Role) -> Result<Role> {
        self.require(GroupKind::Team, user, team, need).await
    }

    /// [`groups::require`], kept: a role kept that falls short asks the
    /// store again, for its exact answer.
    pub async fn require(
        &self,
        kind: GroupKind,
        user: &User,
        name: &str,
        need: Role,
    ) -> Result<Role> {
        let member = path("members", &[kind.noun(), name, user.id.as_str()]);
        let epoch = self.store.changes().stamp(&[&member]);
        let key = (kind, name.to_string(), user.id.clone());
        if let Some(role) = self.roles.get(&key, epoch)
            && role >= need
        {
            return Ok(role);
        }
        let role = groups::require(&self.store, kind, user, name, need).await?;
        self.roles.keep(key, epoch, role);
        Ok(role)
    }
}

//! Who may act: users, their API keys, and the teams and registries they
//! belong to with a role.

use serde::{Deserialize, Serialize};

/// A person or machine that calls the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// Stable id.
    pub id: String,
    /// Display name, unique.
    pub name: String,
    /// Operators administer the whole instance.
    pub operator: bool,
    /// Unix seconds.
    pub created_at: u64,
}

/// What is stored of an API key: never the key itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Stable id, used to revoke.
    pub id: String,
    /// The owner.
    pub user_id: String,
    /// A label chosen by the owner.
    pub name: String,
    /// The first characters of the key, to tell keys apart in a listing.
    pub prefix: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The model ids it may use; `None` for every model.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// The projects (`team/project`) it may bill; `None` for every project
    /// its user belongs to.
    #[serde(default)]
    pub projects: Option<Vec<String>>,
    /// Unix seconds after which it lets no one in; `None` for never.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// Its own rate limits and daily budget.
    #[serde(flatten)]
    pub limits: RateLimits,
}

/// Inference limits of a key or a project, counted as OpenAI counts them.
/// `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RateLimits {
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens (prompt + completion) per minute.
    #[serde(default)]
    pub tpm: Option<u64>,
    /// Tokens per UTC day.
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    /// USD per UTC day, at `[[inference.prices]]`.
    #[serde(default)]
    pub usd_per_day: Option<f64>,
    /// USD per UTC month.
    #[serde(default)]
    pub usd_per_month: Option<f64>,
}

impl RateLimits {
    /// Whether no limit is set.
    pub fn is_none(&self) -> bool {
        *self == RateLimits::default()
    }
}

/// A signed-in console session, stored under the SHA-256 of its cookie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Whose session it is.
    pub user_id: String,
    /// The API key it was signed in with: revoking the key ends it.
    #[serde(default)]
    pub key_id: String,
    /// The token every form of the session carries (CSRF protection).
    pub csrf: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds after which it no longer signs anyone in.
    pub expires_at: u64,
}

/// Which kind of group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// A team: owns projects, secrets and webhooks.
    Team,
    /// A registry: holds collections shared across teams; its admins manage
    /// its automations.
    Registry,
}

impl GroupKind {
    /// `team` or `registry`.
    pub fn noun(self) -> &'static str {
        match self {
            GroupKind::Team => "team",
            GroupKind::Registry => "registry",
        }
    }
}

/// A member's role in a team or registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads the group's objects.
    Member,
    /// Also manages members, secrets, webhooks and automations.
    Admin,
}

impl Role {
    /// `member` or `admin`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Admin => "admin",
        }
    }
}

/// A team or registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// Unique name among groups of its kind.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A user's membership of a team or registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// The user's id.
    pub user_id: String,
    /// The user's name.
    pub user: String,
    /// Their role.
    pub role: Role,
    /// Unix seconds.
    pub added_at: u64,
}

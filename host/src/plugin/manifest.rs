//! Plugin manifests: `NAME.toml` beside `NAME.wasm` in the plugins directory.
//! The upload API takes the same fields as query parameters.
//!
//! ```toml
//! kind = "payload-template"   # or "event-filter", "model-backend"
//! version = "1.0.0"
//! [limits]                    # optional; defaults depend on the kind
//! memory_mb = 32
//! cpu_ms = 50
//! timeout_ms = 500
//! [backend]                   # model backends only: what they are granted
//! env = { UPSTREAM_URL = "https://api.example.com/v1" }
//! allow_hosts = ["api.example.com:443"]
//! api_key_env = "EXAMPLE_API_KEY"
//! per_call = true
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Kind, Limits};

/// A parsed manifest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `payload-template` or `event-filter`.
    pub kind: String,
    /// A version label, shown in listings and errors.
    pub version: String,
    /// Overrides of the kind's default limits.
    #[serde(default)]
    pub limits: LimitOverrides,
    /// A model backend's grant.
    #[serde(default)]
    pub backend: Option<BackendGrant>,
}

/// What a model backend is granted beyond WASI basics. Nothing by default:
/// no environment, no network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackendGrant {
    /// Its configuration, given to it as environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `host:port` authorities it may call over `wasi:http`.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The host's environment variable holding the credential the host adds
    /// to its requests as `Authorization: Bearer …`; the backend never sees it.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A fresh instance for every call, so calls run side by side (for
    /// stateless proxies), instead of one long-lived instance that loads its
    /// weights once and serves one call at a time.
    #[serde(default)]
    pub per_call: bool,
    /// The forward proxy its requests go through (`http://host:port`), if
    /// any: `[delivery] proxy`, for upstreams that ask for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
}

impl BackendGrant {
    /// Checks the grant's values. An error names the field that is wrong.
    pub fn validate(&self) -> Result<(), GrantError> {
        let error = |field, message| Err(GrantError { field, message });
        for key in self.env.keys() {
            if key.is_empty() || key.contains(['=', '\0']) {
                return error(
                    "env",
                    format!("'{key}' is not a valid environment variable name"),
                );
            }
        }
        for host in &self.allow_hosts {
            let port = host.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
            if !matches!(port, Some((h, Ok(_))) if !h.is_empty()) {
                return error(
                    "allow_hosts",
                    format!("'{host}' is not host:port, e.g. api.example.com:443"),
                );
            }
        }
        match &self.api_key_env {
            Some(_) if self.allow_hosts.is_empty() => error(
                "api_key_env",
                "api_key_env needs allow_hosts: a credential is only sent to allowed hosts".into(),
            ),
            // The host's own keys (bootstrap, master) must not be sendable.
            Some(var) if var.starts_with("SWITCHYARD_") => error(
                "api_key_env",
                format!(
                    "'{var}' is one of the host's own variables; name the upstream's credential"
                ),
            ),
            _ => Ok(()),
        }
    }
}

/// A grant field with a bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct GrantError {
    /// `env`, `allow_hosts` or `api_key_env`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// Limits an operator may set; unset ones take the kind's default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Memory cap in MiB.
    pub memory_mb: Option<u64>,
    /// CPU budget per call in ms.
    pub cpu_ms: Option<u64>,
    /// Wall-clock budget per call in ms.
    pub timeout_ms: Option<u64>,
}

impl LimitOverrides {
    /// The limits for `kind` with these overrides applied.
    pub fn apply(&self, kind: Kind) -> Limits {
        let default = Limits::default_for(kind);
        Limits {
            memory_bytes: self
                .memory_mb
                .map_or(default.memory_bytes, |mb| mb.saturating_mul(1 << 20)),
            cpu_ms: self.cpu_ms.unwrap_or(default.cpu_ms),
            timeout_ms: self.timeout_ms.unwrap_or(default.timeout_ms),
        }
    }
}

impl Manifest {
    /// Parses manifest text.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| e.to_string())?;
        let kind = manifest.kind()?;
        validate_version(&manifest.version)?;
        match &manifest.backend {
            Some(_) if kind != Kind::ModelBackend => {
                return Err(format!(
                    "[backend] is only for model-backend plugins, and this one is a {kind}"
                ));
            }
            Some(grant) => grant.validate().map_err(|e| format!("[backend] {e}"))?,
            None => {}
        }
        Ok(manifest)
    }

    /// The kind, parsed.
    pub fn kind(&self) -> Result<Kind, String> {
        self.kind.parse()
    }
}

/// Plugin names: 1 to 64 of `a-z`, `0-9` and `-`, starting with a letter or digit.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a valid plugin name: use 1 to 64 lowercase letters, digits and '-'"
        ))
    }
}

/// Versions: 1 to 64 printable characters without spaces.
pub fn validate_version(version: &str) -> Result<(), String> {
    if (1..=64).contains(&version.len()) && version.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(format!(
            "'{version}' is not a valid version: use 1 to 64 printable characters, e.g. 1.0.0"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_manifest_with_limits() {
        let m =
            Manifest::parse("kind = \"event-filter\"\nversion = \"2.0\"\n[limits]\nmemory_mb = 8")
                .unwrap();
        let limits = m.limits.apply(m.kind().unwrap());
        assert_eq!(limits.memory_bytes, 8 << 20);
        assert_eq!(limits.cpu_ms, Limits::default_for(Kind::EventFilter).cpu_ms);
    }

    #[test]
    fn rejects_unknown_kinds_and_fields() {
        assert!(
            Manifest::parse("kind = \"printer\"\nversion = \"1\"")
                .unwrap_err()
                .contains("printer")
        );
        assert!(
            Manifest::parse("kind = \"event-filter\"\nversion = \"1\"\ncolour = 1")
                .unwrap_err()
                .contains("colour")
        );
    }

    #[test]
    fn backend_grants_are_checked() {
        let m = Manifest::parse(
            "kind = \"model-backend\"\nversion = \"1\"\n[backend]\nenv = { A = \"b\" }\nallow_hosts = [\"api.example.com:443\"]\napi_key_env = \"KEY\"",
        )
        .unwrap();
        let grant = m.backend.unwrap();
        assert_eq!(grant.env["A"], "b");
        assert!(!grant.per_call);
        for (bad, says) in [
            (
                "kind = \"event-filter\"\nversion = \"1\"\n[backend]",
                "only for model-backend",
            ),
            (
                "kind = \"model-backend\"\nversion = \"1\"\n[backend]\nallow_hosts = [\"api.example.com\"]",
                "host:port",
            ),
            (
                "kind = \"model-backend\"\nversion = \"1\"\n[backend]\napi_key_env = \"K\"",
                "needs allow_hosts",
            ),
            (
                "kind = \"model-backend\"\nversion = \"1\"\n[backend]\nnetwork = true",
                "network",
            ),
        ] {
            let error = Manifest::parse(bad).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("discord-adapter").is_ok());
        for bad in ["", "Discord", "../x", "-x", &"a".repeat(65)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}

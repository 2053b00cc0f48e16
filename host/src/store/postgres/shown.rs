//! What of the store's URL may be shown, and to whom.
//!
//! Nothing that leaves the process names the database: clients are told
//! only that the store is unavailable. The log names where the database is
//! (host, port, database) and never a credential, whichever form the URL
//! carries it in: `user:password@`, or query parameters such as
//! `?password=`, `sslpassword`, `sslkey`.

use url::Url;

/// Query parameters whose values are credentials (or point at them).
const CREDENTIALS: &[&str] = &[
    "password",
    "sslpassword",
    "sslkey",
    "sslcert",
    "sslrootcert",
    "passfile",
];

/// `host:port/database` of `url`, for the log: no user, no credentials.
pub fn location(url: &str) -> String {
    let Ok(parsed) = Url::parse(url) else {
        return "a PostgreSQL server (the URL does not parse)".into();
    };
    let query = |key: &str| {
        parsed
            .query_pairs()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    };
    let host = match parsed.host_str().filter(|h| !h.is_empty()) {
        Some(host) => host.to_string(),
        None => query("host").unwrap_or_else(|| "localhost".into()),
    };
    let port = parsed
        .port()
        .map(|p| p.to_string())
        .or_else(|| query("port"))
        .unwrap_or_else(|| "5432".into());
    let database = parsed.path().trim_start_matches('/');
    let database = match database {
        "" => query("dbname").unwrap_or_default(),
        name => percent_decoded(name),
    };
    format!("PostgreSQL at {host}:{port}/{database}")
}

/// `text` with every credential that `url` carries replaced by `****`: for
/// driver messages, which may quote what they were given.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_string();
    for secret in credentials(url) {
        if secret.len() >= 3 {
            out = out.replace(&secret, "****");
        }
    }
    out
}

/// The credential values `url` holds, raw and percent-decoded.
fn credentials(url: &str) -> Vec<String> {
    let Ok(parsed) = Url::parse(url) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    if let Some(password) = parsed.password() {
        found.push(password.to_string());
        found.push(percent_decoded(password));
    }
    for (key, value) in parsed.query_pairs() {
        if CREDENTIALS.contains(&key.as_ref()) {
            found.push(value.into_owned());
        }
    }
    // Raw query values too, as they were written.
    for pair in parsed.query().unwrap_or("").split('&') {
        if let Some((key, value)) = pair.split_once('=')
            && CREDENTIALS.contains(&key)
        {
            found.push(value.to_string());
        }
    }
    // Longest first, so a value is not half-replaced by a shorter one.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (URL, the location the log shows, a credential it holds).
    const FORMS: &[(&str, &str, &str)] = &[
        (
            "postgres://app:hunter2@db:5432/sy",
            "PostgreSQL at db:5432/sy",
            "hunter2",
        ),
        (
            "postgres://postgres@127.0.0.1:5432/db?password=s3cr%21t",
            "PostgreSQL at 127.0.0.1:5432/db",
            "s3cr!t",
        ),
        (
            "postgresql://u:p%40ss%2Fword@db/sy?sslmode=require",
            "PostgreSQL at db:5432/sy",
            "p@ss/word",
        ),
        (
            "postgres://db:6432/sy?sslpassword=keypass&sslkey=/etc/keys/client.key",
            "PostgreSQL at db:6432/sy",
            "keypass",
        ),
        (
            "postgres://db:6432/sy?sslkey=/etc/keys/client.key",
            "PostgreSQL at db:6432/sy",
            "/etc/keys/client.key",
        ),
        (
            "postgres:///sy?host=/var/run/postgresql&user=app&password=sockpw",
            "PostgreSQL at /var/run/postgresql:5432/sy",
            "sockpw",
        ),
        (
            "postgres://app@db?dbname=other&password=pw-in-query",
            "PostgreSQL at db:5432/other",
            "pw-in-query",
        ),
    ];

    #[test]
    fn the_location_never_holds_a_user_or_credential() {
        for (url, shown, secret) in FORMS {
            let location = location(url);
            assert_eq!(&location, shown, "{url}");
            assert!(!location.contains(secret), "{url}: {location}");
            assert!(!location.contains("app@"), "{url}: {location}");
        }
    }

    #[test]
    fn driver_messages_lose_every_credential_form() {
        for (url, _, secret) in FORMS {
            let raw_password = Url::parse(url)
                .unwrap()
                .password()
                .unwrap_or("")
                .to_string();
            let message = format!("error connecting to {url}: {secret} refused ({raw_password})");
            let clean = scrub(&message, url);
            assert!(!clean.contains(secret), "{url}: {clean}");
            if raw_password.len() >= 3 {
                assert!(!clean.contains(&raw_password), "{url}: {clean}");
            }
        }
    }

    #[test]
    fn a_url_that_does_not_parse_shows_nothing_of_itself() {
        let location = location("postgres://app:pw@[broken");
        assert!(!location.contains("pw"), "{location}");
    }
}

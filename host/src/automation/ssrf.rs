//! Server-side request forgery guard for webhook targets.
//!
//! A webhook may not point at the host's own network: loopback, private,
//! link-local (cloud metadata lives at 169.254.169.254), shared (CGNAT),
//! unspecified, multicast or documentation addresses, nor at local names
//! such as `localhost`. Operators allow specific ranges with
//! `webhooks.allow_private`. URLs are checked when saved; the delivery engine
//! checks the addresses a name resolves to at send time, which defeats DNS
//! rebinding.

use std::net::IpAddr;

use ipnet::IpNet;
use url::{Host, Url};

/// Longest webhook URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Whether `ip` is outside the public internet.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
                || a == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
        }
    }
}

/// Whether `ip` may be called, given the operator's allow-list.
pub fn allowed(ip: IpAddr, allow: &[IpNet]) -> bool {
    !is_internal(ip) || allow.iter().any(|net| net.contains(&ip))
}

/// Parses and checks a webhook URL. The error says what is wrong and how to fix it.
pub fn check_url(raw: &str, allow: &[IpNet]) -> Result<Url, String> {
    if raw.len() > MAX_URL_LEN {
        return Err(format!(
            "the URL is {} bytes; the limit is {MAX_URL_LEN}",
            raw.len()
        ));
    }
    let url = Url::parse(raw).map_err(|e| format!("'{raw}' is not a valid URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the URL scheme must be http or https, not '{}'",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("put credentials in an access-token secret, not in the URL".into());
    }
    let refused = |what: String| {
        format!(
            "{what} is an internal address; webhooks may only call public hosts (an operator can allow ranges with webhooks.allow_private)"
        )
    };
    match url.host() {
        None => Err("the URL has no host".into()),
        Some(Host::Ipv4(ip)) if !allowed(IpAddr::V4(ip), allow) => Err(refused(ip.to_string())),
        Some(Host::Ipv6(ip)) if !allowed(IpAddr::V6(ip), allow) => Err(refused(ip.to_string())),
        Some(Host::Domain(name)) if is_local_name(name) && !allows_loopback(allow) => {
            Err(refused(format!("'{name}'")))
        }
        Some(_) => Ok(url),
    }
}

fn is_local_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || [".localhost", ".local", ".internal", ".localdomain"]
            .iter()
            .any(|s| name.ends_with(s))
}

fn allows_loopback(allow: &[IpNet]) -> bool {
    allow
        .iter()
        .any(|net| net.contains(&IpAddr::from([127, 0, 0, 1])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_targets_are_refused() {
        for url in [
            "http://127.0.0.1:8080/x",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://172.16.5.5/",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://localhost:9000/",
            "http://printer.local/",
            "http://metadata.google.internal/",
        ] {
            assert!(check_url(url, &[]).is_err(), "{url}");
        }
    }

    #[test]
    fn public_targets_and_allow_listed_ranges_pass() {
        assert!(check_url("https://hooks.slack.com/services/x", &[]).is_ok());
        assert!(check_url("http://93.184.216.34/", &[]).is_ok());
        let allow: Vec<IpNet> = vec!["127.0.0.0/8".parse().unwrap()];
        assert!(check_url("http://127.0.0.1:9000/hook", &allow).is_ok());
        assert!(check_url("http://localhost:9000/hook", &allow).is_ok());
        assert!(check_url("http://10.0.0.1/", &allow).is_err());
    }

    #[test]
    fn bad_urls_say_why() {
        assert!(
            check_url("ftp://example.com/", &[])
                .unwrap_err()
                .contains("http or https")
        );
        assert!(
            check_url("not a url", &[])
                .unwrap_err()
                .contains("not a valid URL")
        );
        assert!(
            check_url("https://user:pw@example.com/", &[])
                .unwrap_err()
                .contains("credentials")
        );
    }
}

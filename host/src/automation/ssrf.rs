//! Server-side request forgery guard for webhook targets.
//!
//! A webhook may not point at the host's own network: loopback, private,
//! link-local (cloud metadata lives at 169.254.169.254), shared (CGNAT),
//! unspecified, multicast or documentation addresses, nor at local names
//! such as `localhost`. Operators allow specific ranges with
//! `webhooks.allow_private`. URLs are checked when saved; the delivery engine
//! checks the addresses a name resolves to at send time, which defeats DNS
//! rebinding.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use url::{Host, Url};

/// Longest webhook URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Whether `ip` is outside the public internet. An IPv6 address that
/// carries an IPv4 one (mapped, compatible, NAT64, 6to4) is judged by it too.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6) || embedded_v4(v6).is_some_and(is_internal_v4),
    }
}

fn is_internal_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved, and broadcast
}

fn is_internal_v6(v6: Ipv6Addr) -> bool {
    let [first, second, ..] = v6.segments();
    v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated, still routed by some)
        || (first == 0x2001 && second == 0x0db8) // documentation
        || (first == 0x2001 && second == 0) // Teredo: hides an IPv4 address
        || (first == 0x0100 && v6.segments()[1..4] == [0, 0, 0]) // discard
}

/// The IPv4 address inside an IPv6 one, for the forms that route to it:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
/// `64:ff9b::/96` and `64:ff9b:1::/48`, and 6to4 `2002::/16`.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(low),
        [0, 0, 0, 0, 0, 0, ..] if !v6.is_loopback() && !v6.is_unspecified() => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] | [0x64, 0xff9b, 1, ..] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Whether `ip` may be called, given the operator's allow-list. An
/// IPv4-mapped IPv6 address is the IPv4 address it maps, for the list too.
pub fn allowed(ip: IpAddr, allow: &[IpNet]) -> bool {
    if let IpAddr::V6(v6) = ip
        && let Some(v4) = v6.to_ipv4_mapped()
    {
        return allowed(IpAddr::V4(v4), allow);
    }
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
        Some(Host::Domain(name)) if !name_allowed(name, allow) => Err(format!(
            "'{name}' is an internal name; webhooks may only call public hosts ({})",
            if is_localhost(name) {
                "an operator can allow loopback with webhooks.allow_private = [\"127.0.0.0/8\"]"
            } else {
                "names under .localhost, .local, .internal and .localdomain are never called"
            }
        )),
        Some(_) => Ok(url),
    }
}

/// Local names are refused whatever the allow-list says, but for
/// `localhost` itself once loopback is allowed. Where a name resolves is
/// checked again at send time.
fn name_allowed(name: &str, allow: &[IpNet]) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if is_localhost(&name) {
        return allow
            .iter()
            .any(|net| net.contains(&IpAddr::from([127, 0, 0, 1])));
    }
    !name.is_empty()
        && ![".localhost", ".local", ".internal", ".localdomain"]
            .iter()
            .any(|s| name.ends_with(s))
}

fn is_localhost(name: &str) -> bool {
    name.trim_end_matches('.').eq_ignore_ascii_case("localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form of a target, and whether it passes with no allow-list and
    /// with loopback allowed (`127.0.0.0/8`, as the tests configure).
    const TABLE: &[(&str, bool, bool)] = &[
        // Public names and addresses.
        ("https://hooks.slack.com/services/x", true, true),
        ("http://93.184.216.34/", true, true),
        ("http://[2606:4700::1111]/", true, true),
        // Loopback in every spelling.
        ("http://127.0.0.1:8080/x", false, true),
        ("http://127.1/", false, true),
        ("http://2130706433/", false, true),
        ("http://0x7f000001/", false, true),
        ("http://0177.0.0.1/", false, true),
        ("http://[::1]/", false, false),
        ("http://[::ffff:127.0.0.1]/", false, true),
        ("http://[::ffff:7f00:1]/", false, true),
        ("http://[::127.0.0.1]/", false, false),
        ("http://[64:ff9b::7f00:1]/", false, false),
        // Names.
        ("http://localhost:9000/", false, true),
        ("http://LOCALHOST./", false, true),
        ("http://api.localhost/", false, false),
        ("http://printer.local/", false, false),
        ("http://metadata.google.internal/", false, false),
        ("http://db.internal./", false, false),
        ("http://box.localdomain/", false, false),
        // Private, link-local (cloud metadata), and other special ranges.
        ("http://10.1.2.3/", false, false),
        ("http://192.168.0.1/", false, false),
        ("http://172.16.5.5/", false, false),
        ("http://169.254.169.254/latest/meta-data", false, false),
        ("http://[::ffff:169.254.169.254]/", false, false),
        ("http://[::ffff:a9fe:a9fe]/", false, false),
        ("http://[64:ff9b::a9fe:a9fe]/", false, false),
        ("http://[64:ff9b:1::a9fe:a9fe]/", false, false),
        ("http://[2002:a9fe:a9fe::1]/", false, false),
        ("http://[2002:0a00:0001::1]/", false, false),
        (
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            false,
            false,
        ),
        ("http://100.64.0.1/", false, false),
        ("http://0.0.0.0/", false, false),
        ("http://198.18.0.1/", false, false),
        ("http://198.19.255.255/", false, false),
        ("http://240.0.0.1/", false, false),
        ("http://255.255.255.255/", false, false),
        ("http://192.0.0.8/", false, false),
        ("http://224.0.0.1/", false, false),
        ("http://[fd00::1]/", false, false),
        ("http://[fe80::1]/", false, false),
        ("http://[fec0::1]/", false, false),
        ("http://[ff02::1]/", false, false),
        ("http://[2001:db8::1]/", false, false),
    ];

    #[test]
    fn every_form_of_target_is_judged_with_and_without_an_allow_list() {
        let loopback: Vec<IpNet> = vec!["127.0.0.0/8".parse().unwrap()];
        for &(url, bare, with_loopback) in TABLE {
            assert_eq!(
                check_url(url, &[]).is_ok(),
                bare,
                "{url} with no allow-list"
            );
            assert_eq!(
                check_url(url, &loopback).is_ok(),
                with_loopback,
                "{url} with 127.0.0.0/8 allowed"
            );
        }
    }

    #[test]
    fn allowing_a_range_opens_only_that_range() {
        let allow: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        assert!(check_url("http://10.0.0.1/", &allow).is_ok());
        assert!(check_url("http://[::ffff:10.0.0.1]/", &allow).is_ok());
        assert!(check_url("http://192.168.0.1/", &allow).is_err());
        assert!(check_url("http://localhost/", &allow).is_err());
        assert!(check_url("http://x.internal/", &allow).is_err());
    }

    #[test]
    fn resolved_addresses_are_judged_the_same_way() {
        let loopback: Vec<IpNet> = vec!["127.0.0.0/8".parse().unwrap()];
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(!allowed(mapped, &[]));
        assert!(allowed(mapped, &loopback));
        assert!(!allowed("64:ff9b::a9fe:a9fe".parse().unwrap(), &loopback));
    }

    #[test]
    fn bad_urls_say_why() {
        let cases = [
            ("ftp://example.com/", "http or https"),
            ("not a url", "not a valid URL"),
            ("https://user:pw@example.com/", "credentials"),
            ("http://x.internal/", "never called"),
        ];
        for (url, why) in cases {
            let error = check_url(url, &[]).unwrap_err();
            assert!(error.contains(why), "{url}: {error}");
        }
    }
}

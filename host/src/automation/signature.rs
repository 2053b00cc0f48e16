//! Signatures: `X-Service-Signature` (hex HMAC-SHA256 of the exact body
//! bytes, keyed with the webhook's signing secret), and optionally the
//! Standard Webhooks headers (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC of "id.timestamp.body">`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const HEADER: &str = "x-service-signature";

/// The hex HMAC-SHA256 of `body` under `key`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The Standard Webhooks `webhook-signature` value. A `whsec_`-prefixed
/// secret is base64 after the prefix, as that spec defines; any other
/// secret is used as raw bytes.
pub fn standard(secret: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let key = secret
        .strip_prefix(b"whsec_")
        .and_then(|b64| STANDARD.decode(b64).ok())
        .unwrap_or_else(|| secret.to_vec());
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC accepts any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rfc_4231_case_2() {
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn standard_webhooks_example_verifies() {
        // The example from the Standard Webhooks specification.
        let secret = b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            standard(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}

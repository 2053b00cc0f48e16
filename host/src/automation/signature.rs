//! Signatures: `X-Service-Signature` (hex HMAC-SHA256 of the exact body
//! bytes, keyed with the webhook's signing secret), and optionally the
//! Standard Webhooks headers (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC of "id.timestamp.body">`, and for an
//! Ed25519 key `v1a,<base64 signature of the same>`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer, SigningKey};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const HEADER: &str = "x-service-signature";
/// The header that carries the previous secret's signature while a
/// rotation overlaps.
pub const PREVIOUS_HEADER: &str = "x-service-signature-previous";

/// The prefix of a Standard Webhooks asymmetric secret key.
const SECRET_KEY_PREFIX: &str = "whsk_";
/// The prefix of a Standard Webhooks public key.
const PUBLIC_KEY_PREFIX: &str = "whpk_";

/// What one request is signed with, current key first; while a rotation
/// overlaps, the previous key too.
#[derive(Default)]
pub struct Keys<'a> {
    /// HMAC secrets (`X-Service-Signature`, and `v1` when Standard
    /// Webhooks headers are on).
    pub hmac: Vec<&'a [u8]>,
    /// Ed25519 keys (`v1a`).
    pub ed25519: Vec<&'a SigningKey>,
}

/// An Ed25519 key from a secret's value: `whsk_` and the base64 of its
/// 32-byte seed (or of the seed and the public key, 64 bytes).
pub fn ed25519_key(secret: &str) -> Result<SigningKey, String> {
    let wrong = || {
        "is not an Ed25519 key: it must be 'whsk_' and the base64 of a 32-byte seed; \
         have the host make one with PUT /v1/teams/{team}/secrets/{name} {\"generate\": \"ed25519\"}"
            .to_string()
    };
    let bytes = secret
        .strip_prefix(SECRET_KEY_PREFIX)
        .and_then(|b64| STANDARD.decode(b64.trim()).ok())
        .ok_or_else(wrong)?;
    let seed: [u8; 32] = match bytes.len() {
        32 | 64 => bytes[..32].try_into().map_err(|_| wrong())?,
        _ => return Err(wrong()),
    };
    Ok(SigningKey::from_bytes(&seed))
}

/// A new Ed25519 secret key, as [`ed25519_key`] reads it.
pub fn new_ed25519_secret() -> String {
    let mut seed = [0u8; 32];
    crate::ids::fill_random(&mut seed);
    format!("{SECRET_KEY_PREFIX}{}", STANDARD.encode(seed))
}

/// The public key receivers verify `v1a` signatures with: `whpk_` and
/// the base64 of its 32 bytes.
pub fn public_key(key: &SigningKey) -> String {
    let public = key.verifying_key();
    format!("{PUBLIC_KEY_PREFIX}{}", STANDARD.encode(public.as_bytes()))
}

/// The Standard Webhooks `v1a` signature of a request.
pub fn standard_ed25519(key: &SigningKey, id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut signed = format!("{id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    let signature = key.sign(&signed);
    format!("v1a,{}", STANDARD.encode(signature.to_bytes()))
}

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

    /// RFC 8032's first test vector: its seed gives its public key and
    /// signs the empty message as the RFC says.
    #[test]
    fn ed25519_matches_rfc_8032_test_1() {
        let seed = hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
            .unwrap();
        let key = ed25519_key(&format!("whsk_{}", STANDARD.encode(&seed))).unwrap();
        let public =
            hex::decode("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
                .unwrap();
        assert_eq!(
            public_key(&key),
            format!("whpk_{}", STANDARD.encode(public))
        );
        let signature = key.sign(b"").to_bytes();
        assert_eq!(
            hex::encode(signature),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
        for wrong in ["whsec_AAAA", "whsk_not base64", "whsk_AAAA"] {
            assert!(ed25519_key(wrong).is_err(), "{wrong}");
        }
        let made = new_ed25519_secret();
        assert!(ed25519_key(&made).is_ok(), "{made}");
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

//! The `X-Service-Signature` header: hex HMAC-SHA256 of the exact body bytes,
//! keyed with the webhook's signing secret.

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
}

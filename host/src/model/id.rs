//! Typed ids for the records that travel the delivery path, so a delivery
//! id cannot be passed where an execution id is meant. Each is an `Arc<str>`:
//! a delivery, its execution and every attempt share one id without a copy.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// As text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// As bytes: the key a body is sealed under.
            pub fn as_bytes(&self) -> &[u8] {
                self.0.as_bytes()
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> $name {
                $name(id.into())
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> $name {
                $name(id.into())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Maps keyed by the id are looked up by `&str`.
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                String::deserialize(d).map($name::from)
            }
        }
    };
}

id_type!(
    /// A delivery's id: sent as `X-Service-Delivery` on every attempt, and
    /// the key its body is sealed under.
    DeliveryId
);

id_type!(
    /// An execution's id: ordered by time.
    ExecutionId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_its_text_on_the_wire() {
        let id = DeliveryId::from("d-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""d-1""#);
        let back: DeliveryId = serde_json::from_str(r#""d-1""#).unwrap();
        assert_eq!(back, id);
        assert_eq!(id.to_string(), "d-1");
    }
}

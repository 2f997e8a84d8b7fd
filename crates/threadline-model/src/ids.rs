//! Identifiers: W3C trace and span ids, and the tenant every row belongs to.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a trace id, span id or tenant id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{what} must be {expected} bytes, got {actual}")]
    WrongLength {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("{what} must not be all zeros")]
    AllZero { what: &'static str },
    #[error("{what} is not valid hex: {value:?}")]
    NotHex { what: &'static str, value: String },
    #[error("tenant id {value:?} is invalid: use 1 to 64 characters from [A-Za-z0-9_.-]")]
    BadTenant { value: String },
}

macro_rules! fixed_id {
    ($name:ident, $len:expr, $what:expr) => {
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub [u8; $len]);

        impl $name {
            pub const LEN: usize = $len;

            /// Accepts exactly `LEN` bytes that are not all zero, as OTLP requires.
            pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdError> {
                let arr: [u8; $len] = bytes.try_into().map_err(|_| IdError::WrongLength {
                    what: $what,
                    expected: $len,
                    actual: bytes.len(),
                })?;
                if arr.iter().all(|b| *b == 0) {
                    return Err(IdError::AllZero { what: $what });
                }
                Ok(Self(arr))
            }

            pub fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }

            /// Lowercase hex, the form every API prints.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            /// Hex in either case, as OTLP/JSON and W3C allow.
            fn from_str(s: &str) -> Result<Self, IdError> {
                let bytes = hex::decode(s).map_err(|_| IdError::NotHex {
                    what: $what,
                    value: s.chars().take(80).collect(),
                })?;
                Self::from_bytes(&bytes)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }
    };
}

fixed_id!(TraceId, 16, "trace id");
fixed_id!(SpanId, 8, "span id");

/// The tenant a row belongs to. Decided by the API key, never by the payload.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct TenantId(String);

impl TenantId {
    /// The tenant used when the server runs without API keys.
    pub const DEFAULT: &'static str = "default";

    pub fn new(value: &str) -> Result<Self, IdError> {
        let ok = !value.is_empty()
            && value.len() <= 64
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if ok {
            Ok(Self(value.to_owned()))
        } else {
            Err(IdError::BadTenant {
                value: value.chars().take(80).collect(),
            })
        }
    }

    pub fn default_tenant() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_id_parses_either_case_and_prints_lowercase() {
        let id: TraceId = "5B8EFFF798038103D269B633813FC60C".parse().unwrap();
        assert_eq!(id.to_hex(), "5b8efff798038103d269b633813fc60c");
    }

    #[test]
    fn ids_refuse_zero_and_wrong_length() {
        assert_eq!(
            SpanId::from_bytes(&[0; 8]),
            Err(IdError::AllZero { what: "span id" })
        );
        assert!(matches!(
            TraceId::from_bytes(&[1; 8]),
            Err(IdError::WrongLength {
                expected: 16,
                actual: 8,
                ..
            })
        ));
        assert!("zz".parse::<SpanId>().is_err());
    }

    #[test]
    fn tenant_ids_are_restricted() {
        assert!(TenantId::new("acme-prod_1").is_ok());
        assert!(TenantId::new("").is_err());
        assert!(TenantId::new("a b").is_err());
    }
}

//! API keys → tenants. Keys are hashed at startup and compared in constant time against
//! every configured key (no early exit), so neither timing nor logs reveal them.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use threadline_model::TenantId;

use crate::config::TenantKeys;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing API key: send Authorization: Bearer <key>")]
    Missing,
    #[error("malformed Authorization header: expected \"Bearer <key>\"")]
    Malformed,
    #[error("invalid API key")]
    Invalid,
}

/// Decides the tenant of a request from its `Authorization` header.
pub struct Authenticator {
    /// (SHA-256 of the key, tenant). Empty = single-tenant mode without keys.
    keys: Vec<([u8; 32], TenantId)>,
}

impl Authenticator {
    pub fn new(tenants: &[TenantKeys]) -> Self {
        let keys = tenants
            .iter()
            .flat_map(|t| {
                t.api_keys
                    .iter()
                    .map(move |k| (digest(k), t.tenant.clone()))
            })
            .collect();
        Self { keys }
    }

    /// True when requests must carry an API key (tenants are configured).
    pub(crate) fn required(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The tenant of a JSON API request, from its `Authorization` header.
    pub(crate) fn tenant_of(
        &self,
        headers: &axum::http::HeaderMap,
    ) -> Result<TenantId, crate::error::ApiError> {
        let authorization = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        Ok(self.authenticate(authorization)?)
    }

    pub fn authenticate(&self, authorization: Option<&str>) -> Result<TenantId, AuthError> {
        if self.keys.is_empty() {
            return Ok(TenantId::default_tenant());
        }
        let header = authorization.ok_or(AuthError::Missing)?;
        let (scheme, key) = header.trim().split_once(' ').ok_or(AuthError::Malformed)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthError::Malformed);
        }
        let presented = digest(key.trim());
        let mut found: Option<&TenantId> = None;
        for (candidate, tenant) in &self.keys {
            if bool::from(candidate.ct_eq(&presented)) {
                found = Some(tenant);
            }
        }
        found.cloned().ok_or(AuthError::Invalid)
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        Authenticator::new(&[
            TenantKeys {
                tenant: TenantId::new("acme").unwrap(),
                api_keys: vec!["acme-key-0123456789".into()],
            },
            TenantKeys {
                tenant: TenantId::new("globex").unwrap(),
                api_keys: vec!["globex-key-0123456789".into()],
            },
        ])
    }

    #[test]
    fn keys_decide_the_tenant() {
        let a = auth();
        assert_eq!(
            a.authenticate(Some("Bearer acme-key-0123456789"))
                .unwrap()
                .as_str(),
            "acme"
        );
        assert_eq!(
            a.authenticate(Some("bearer globex-key-0123456789"))
                .unwrap()
                .as_str(),
            "globex"
        );
        assert_eq!(a.authenticate(Some("Bearer nope")), Err(AuthError::Invalid));
        assert_eq!(a.authenticate(None), Err(AuthError::Missing));
        assert_eq!(a.authenticate(Some("Basic abc")), Err(AuthError::Malformed));
    }

    #[test]
    fn without_keys_everything_is_the_default_tenant() {
        let a = Authenticator::new(&[]);
        assert_eq!(a.authenticate(None).unwrap().as_str(), TenantId::DEFAULT);
    }
}

//! API keys → tenants, or the operator. Keys are hashed at startup and compared in
//! constant time against every configured key (no early exit), so neither timing nor
//! logs reveal them. A tenant's key reads and writes that tenant's data only; an
//! operator key (`[operator] api_keys`) reads server-wide figures (the health
//! endpoint's counters, `/metrics`' internals) and no tenant's data.

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
    #[error("an operator key reads server-wide figures only (/api/v1/health, /metrics): use a tenant's key")]
    OperatorKey,
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A tenant's key, or anyone on a server without keys (the default tenant).
    Tenant(TenantId),
    /// An operator key.
    Operator,
    /// No key, on a server that has them.
    Anonymous,
}

/// Decides the tenant of a request from its `Authorization` header.
pub struct Authenticator {
    /// (SHA-256 of the key, tenant). Empty = single-tenant mode without keys.
    keys: Vec<([u8; 32], TenantId)>,
    /// SHA-256 of the operator keys.
    operator: Vec<[u8; 32]>,
}

impl Authenticator {
    pub fn new(tenants: &[TenantKeys], operator_keys: &[String]) -> Self {
        let keys = tenants
            .iter()
            .flat_map(|t| {
                t.api_keys
                    .iter()
                    .map(move |k| (digest(k), t.tenant.clone()))
            })
            .collect();
        Self {
            keys,
            operator: operator_keys.iter().map(|k| digest(k)).collect(),
        }
    }

    /// Who sends `authorization`. On a server without tenant keys everyone is the
    /// default tenant, unless they present an operator key.
    pub(crate) fn caller(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        match self.authenticate(authorization) {
            Ok(tenant) => Ok(Caller::Tenant(tenant)),
            Err(AuthError::OperatorKey) => Ok(Caller::Operator),
            Err(AuthError::Missing) => Ok(Caller::Anonymous),
            Err(e) => Err(e),
        }
    }

    /// True when requests must carry an API key (tenants are configured).
    pub(crate) fn required(&self) -> bool {
        !self.keys.is_empty()
    }

    pub fn authenticate(&self, authorization: Option<&str>) -> Result<TenantId, AuthError> {
        if self.keys.is_empty() && (self.operator.is_empty() || authorization.is_none()) {
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
        let mut operator = false;
        for candidate in &self.operator {
            operator |= bool::from(candidate.ct_eq(&presented));
        }
        match (found, operator) {
            (Some(tenant), _) => Ok(tenant.clone()),
            (None, true) => Err(AuthError::OperatorKey),
            // Without tenant keys, any other key is the default tenant's, as no key is.
            (None, false) if self.keys.is_empty() => Ok(TenantId::default_tenant()),
            (None, false) => Err(AuthError::Invalid),
        }
    }
}

/// A request's `Authorization` header, when it is text.
pub(crate) fn authorization(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        Authenticator::new(
            &[
                TenantKeys {
                    tenant: TenantId::new("acme").unwrap(),
                    api_keys: vec!["acme-key-0123456789".into()],
                },
                TenantKeys {
                    tenant: TenantId::new("globex").unwrap(),
                    api_keys: vec!["globex-key-0123456789".into()],
                },
            ],
            &["operator-key-0123456789".to_owned()],
        )
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
        assert_eq!(
            a.authenticate(Some("Bearer operator-key-0123456789")),
            Err(AuthError::OperatorKey)
        );
        assert_eq!(
            a.caller(Some("Bearer operator-key-0123456789")),
            Ok(Caller::Operator)
        );
        assert_eq!(a.caller(None), Ok(Caller::Anonymous));
        assert_eq!(a.caller(Some("Bearer nope")), Err(AuthError::Invalid));
    }

    /// A server without tenant keys serves the default tenant to all; an operator key
    /// there is still the operator.
    #[test]
    fn without_tenant_keys_an_operator_key_is_still_the_operator() {
        let a = Authenticator::new(&[], &["operator-key-0123456789".to_owned()]);
        assert_eq!(
            a.caller(None),
            Ok(Caller::Tenant(TenantId::default_tenant()))
        );
        assert_eq!(
            a.caller(Some("Bearer operator-key-0123456789")),
            Ok(Caller::Operator)
        );
    }

    #[test]
    fn without_keys_everything_is_the_default_tenant() {
        let a = Authenticator::new(&[], &[]);
        assert_eq!(a.authenticate(None).unwrap().as_str(), TenantId::DEFAULT);
    }
}

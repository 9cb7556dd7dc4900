//! E2B's signed file URLs (`Sandbox.download_url` / `upload_url` of a sandbox created `secure`):
//! `/files?path=..&username=..&signature=v1_..&signature_expiration=..` works without headers, so
//! a browser or `curl` can fetch it. The signature is SHA-256 over
//! `path:operation:username:envd-token[:expiration]`, base64 without padding, prefixed `v1_`; it
//! names the sandbox by its token, so a request carrying one needs no sandbox id header either.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::registry::constant_time_eq;

/// What a signed URL allows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operation {
    Read,
    Write,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// The signature parameters of a `/files` request.
pub(crate) struct Signed<'a> {
    pub(crate) path: &'a str,
    pub(crate) username: Option<&'a str>,
    pub(crate) signature: &'a str,
    pub(crate) expiration: Option<i64>,
}

impl Signed<'_> {
    /// Whether the signature was made with `token` for `operation` (not yet checking expiry).
    pub(crate) fn made_with(&self, operation: Operation, token: &str) -> bool {
        let user = self.username.unwrap_or_default();
        let raw = match self.expiration {
            Some(at) => format!("{}:{}:{user}:{token}:{at}", self.path, operation.as_str()),
            None => format!("{}:{}:{user}:{token}", self.path, operation.as_str()),
        };
        let digest = Sha256::digest(raw.as_bytes());
        let expected = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
        );
        constant_time_eq(expected.as_bytes(), self.signature.as_bytes())
    }

    /// 401 with envd's message once the expiration has passed.
    pub(crate) fn check_expiry(&self) -> Result<(), ApiError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        match self.expiration {
            Some(at) if at < now => Err(ApiError::unauthorized("signature is already expired")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(signature: &str, expiration: Option<i64>) -> Signed<'_> {
        Signed {
            path: "/home/user/a.txt",
            username: Some("user"),
            signature,
            expiration,
        }
    }

    #[test]
    fn a_signature_matches_only_its_token_operation_and_expiry() {
        // sha256("/home/user/a.txt:read:user:tok"), base64 without padding, as E2B's SDKs make it.
        let digest = Sha256::digest(b"/home/user/a.txt:read:user:tok");
        let good = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
        );
        assert!(signed(&good, None).made_with(Operation::Read, "tok"));
        assert!(!signed(&good, None).made_with(Operation::Write, "tok"));
        assert!(!signed(&good, None).made_with(Operation::Read, "other"));
        assert!(!signed(&good, Some(1)).made_with(Operation::Read, "tok"));
    }

    #[test]
    fn an_expired_signature_is_refused_with_envds_message() {
        let error = signed("v1_x", Some(1)).check_expiry().unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::UNAUTHORIZED);
        assert!(format!("{error:?}").contains("signature is already expired"));
        assert!(signed("v1_x", Some(i64::MAX)).check_expiry().is_ok());
        assert!(signed("v1_x", None).check_expiry().is_ok());
    }
}

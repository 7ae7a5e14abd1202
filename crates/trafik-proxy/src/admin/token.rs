//! The admin API's bearer token: required of every request when configured, which `check`
//! insists on for an admin address other than loopback.

use std::fmt;
use std::sync::Arc;

use http::{Request, header};
use subtle::ConstantTimeEq;

/// A secret every admin request must present as `Authorization: Bearer TOKEN`. Its `Debug`
/// hides the value, so a logged plan does not leak it.
#[derive(Clone)]
pub struct AdminToken(Arc<str>);

impl AdminToken {
    pub fn new(token: &str) -> Self {
        AdminToken(token.into())
    }

    /// Whether `request` carries this token; compared in constant time, so the answer's timing
    /// tells nothing about how much of a guess was right.
    pub fn admits<B>(&self, request: &Request<B>) -> bool {
        let Some(presented) = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
        else {
            return false;
        };
        presented.as_bytes().ct_eq(self.0.as_bytes()).into()
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = AdminToken::new("s3cret-token");
        let with = |value: &str| {
            Request::get("/status")
                .header(header::AUTHORIZATION, value)
                .body(())
                .unwrap()
        };
        assert!(token.admits(&with("Bearer s3cret-token")));
        assert!(token.admits(&with("bearer s3cret-token")));
        for wrong in [
            "Bearer s3cret",
            "Bearer s3cret-token2",
            "Basic s3cret-token",
            "s3cret-token",
        ] {
            assert!(!token.admits(&with(wrong)), "{wrong}");
        }
        assert!(!token.admits(&Request::get("/status").body(()).unwrap()));
        assert_eq!(format!("{token:?}"), "AdminToken(…)");
    }
}

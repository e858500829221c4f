//! Authentication as kube-apiserver's union authenticator does it here: the
//! verified client certificate first (CN = user, O = groups), then a bearer
//! token from the table the test sets; anything else is a 401. Certificates
//! revoked by serial are refused on every request, so a test can rotate a
//! node's certificate and see the old one stop working.

use std::collections::{HashMap, HashSet};

use crate::identity::User;

/// What the TLS layer learned about the peer's certificate, once per connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    pub user: User,
    pub serial: u64,
}

/// Reads CN, every O and the serial of a DER certificate (already verified
/// against the CA by rustls).
pub fn peer_cert(der: &[u8]) -> Option<PeerCert> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    let raw = cert.raw_serial();
    let trimmed: Vec<u8> = raw.iter().copied().skip_while(|b| *b == 0).collect();
    if trimmed.len() > 8 {
        return None;
    }
    let serial = trimmed
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    Some(PeerCert {
        user: User { name, groups },
        serial,
    })
}

/// The `Authorization: Bearer` token, if the header carries one.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let h = header?.trim();
    let (scheme, token) = h.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Who the request is from, or None (→ 401). `system:authenticated` is added
/// as kube-apiserver adds it.
pub fn authenticate(
    cert: Option<&PeerCert>,
    revoked: &HashSet<u64>,
    authorization: Option<&str>,
    tokens: &HashMap<String, User>,
) -> Option<User> {
    let user = match cert.filter(|c| !revoked.contains(&c.serial)) {
        Some(c) => Some(c.user.clone()),
        None => bearer(authorization).and_then(|t| tokens.get(t).cloned()),
    };
    user.map(|mut u| {
        if !u.groups.iter().any(|g| g == "system:authenticated") {
            u.groups.push("system:authenticated".to_string());
        }
        u
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn certificate_first_then_token_and_revocation() {
        let tokens: HashMap<String, User> =
            [("t".to_string(), User::new("admin", &["system:masters"]))]
                .into_iter()
                .collect();
        let cert = PeerCert {
            user: User::new("system:node:a", &["system:nodes"]),
            serial: 7,
        };
        let none = HashSet::new();
        let u = authenticate(Some(&cert), &none, Some("Bearer t"), &tokens).unwrap();
        assert_eq!(u.name, "system:node:a");
        let revoked: HashSet<u64> = [7].into_iter().collect();
        assert_eq!(
            authenticate(Some(&cert), &revoked, Some("Bearer t"), &tokens)
                .unwrap()
                .name,
            "admin"
        );
        assert!(authenticate(Some(&cert), &revoked, None, &tokens).is_none());
        assert!(authenticate(None, &none, Some("Bearer nope"), &tokens).is_none());
    }
}

//! Which Node the agent writes: `--node-name`, else the `system:node:NAME`
//! subject of a node credential (kubelet's client certificate, as the Node
//! authorizer reads it: user `system:node:NAME`, group `system:nodes`).
//! Any other credential needs `--node-name`: a hostname guess could
//! overwrite another Node.

/// The user name prefix of node identities.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// Why the Node's name is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("--node-name {0:?} is not a valid Node name (a DNS subdomain: lowercase letters, digits, '-' and '.', at most 253)")]
    Invalid(String),
    #[error("the kubeconfig's credential is not a node credential (its client certificate's subject is {0:?}, not system:node:NAME): give --node-name")]
    NotNodeCertificate(String),
    #[error("the kubeconfig's credential does not name a Node (a token, or a certificate without a subject): give --node-name")]
    NoSubject,
}

/// A Node name is a DNS subdomain.
pub fn valid_node_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The Node's name from the flag, else from the client certificate's
/// subject common name (`cert_cn`; `None` for a token credential).
pub fn node_name(flag: Option<&str>, cert_cn: Option<&str>) -> Result<String, NameError> {
    if let Some(f) = flag {
        return if valid_node_name(f) {
            Ok(f.to_string())
        } else {
            Err(NameError::Invalid(crate::text::clean_capped(f, 80)))
        };
    }
    let cn = cert_cn.ok_or(NameError::NoSubject)?;
    match cn.strip_prefix(NODE_USER_PREFIX) {
        Some(n) if valid_node_name(n) => Ok(n.to_string()),
        _ => Err(NameError::NotNodeCertificate(crate::text::clean_capped(
            cn, 80,
        ))),
    }
}

/// One DER element: (tag, content, rest).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (usize::from(first), b)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &b[n..])
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// id-at-commonName, 2.5.4.3.
const CN_OID: [u8; 3] = [0x55, 0x04, 0x03];

/// The subject common name of a DER X.509 certificate (the first CN; as
/// the API server's x509 authenticator reads the user name). Just enough
/// DER for that: the certificate was verified by the API server, not here.
pub fn subject_common_name(der: &[u8]) -> Option<String> {
    let (SEQUENCE, cert, _) = tlv(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = tlv(cert)? else {
        return None;
    };
    let mut rest = tbs;
    let (tag, _, r) = tlv(rest)?;
    // [0] EXPLICIT version, when present.
    if tag == 0xa0 {
        rest = r;
    }
    // serial, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (SEQUENCE, mut rdns, _) = tlv(rest)? else {
        return None;
    };
    while !rdns.is_empty() {
        let (tag, mut set, r) = tlv(rdns)?;
        rdns = r;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (tag, atv, r) = tlv(set)?;
            set = r;
            if tag != SEQUENCE {
                return None;
            }
            let (OID, oid, value) = tlv(atv)? else {
                return None;
            };
            if oid == CN_OID {
                let (_, v, _) = tlv(value)?;
                return std::str::from_utf8(v).ok().map(str::to_string);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with_cn(cn: &str) -> Vec<u8> {
        let mut p =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::OrganizationName, "system:nodes");
        dn.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        p.self_signed(&key)
            .unwrap_or_else(|e| panic!("{e}"))
            .der()
            .to_vec()
    }

    #[test]
    fn the_common_name_of_a_real_certificate() {
        let der = cert_with_cn("system:node:worker-1");
        assert_eq!(
            subject_common_name(&der).as_deref(),
            Some("system:node:worker-1")
        );
        let der = cert_with_cn("admin");
        assert_eq!(subject_common_name(&der).as_deref(), Some("admin"));
        // Truncated or garbage DER: none, never a panic.
        for cut in [0, 1, 10, der.len() / 2, der.len() - 1] {
            let _ = subject_common_name(&der[..cut]);
        }
        assert_eq!(subject_common_name(b"\x30\x84\xff\xff\xff\xff"), None);
    }

    #[test]
    fn node_names() {
        type Case<'a> = (Option<&'a str>, Option<&'a str>, Result<&'a str, &'a str>);
        let cases: Vec<Case> = vec![
            (Some("worker-1"), None, Ok("worker-1")),
            // The flag wins: the API server refuses a mismatch (403), and the agent says so.
            (
                Some("worker-2"),
                Some("system:node:worker-1"),
                Ok("worker-2"),
            ),
            (None, Some("system:node:worker-1"), Ok("worker-1")),
            (None, Some("system:node:w.example.com"), Ok("w.example.com")),
            (Some("Worker_1"), None, Err("not a valid Node name")),
            (None, Some("admin"), Err("not a node credential")),
            (None, Some("system:node:"), Err("not a node credential")),
            (None, Some("system:node:Bad"), Err("not a node credential")),
            (None, None, Err("give --node-name")),
        ];
        for (flag, cn, want) in cases {
            match (node_name(flag, cn), want) {
                (Ok(n), Ok(w)) => assert_eq!(n, w),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, _) => panic!("{flag:?} {cn:?}: {got:?}"),
            }
        }
    }
}

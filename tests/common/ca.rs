//! A throwaway CA for tests that need certificates `tls init` does not
//! make (names in SANs only, the wrong usage, a name only in the CN).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// A CA whose `ca.pem` is in `dir`, and the certificates it signs there.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "sandbox-readiness test CA");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            dir: dir.to_path_buf(),
        }
    }

    /// Writes `NAME.pem` and `NAME-key.pem`: common name `cn`, these SANs,
    /// this extended key usage.
    pub fn leaf(&self, name: &str, cn: &str, sans: Vec<SanType>, usage: ExtendedKeyUsagePurpose) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        std::fs::write(self.dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(
            self.dir.join(format!("{name}-key.pem")),
            key.serialize_pem(),
        )
        .unwrap();
    }
}

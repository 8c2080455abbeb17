//! Certificates made at test time (rcgen): a CA and a server certificate it signed, so that a
//! client given the CA (`sslrootcert`) can verify the server's name (`sslmode=verify-full`).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA certificate and a server certificate with its private key, all PEM.
pub struct TestCertificates {
    /// The CA's certificate: what a client trusts (`sslrootcert`).
    pub ca_pem: String,
    /// The server's certificate, signed by the CA.
    pub server_cert_pem: String,
    /// The server's private key (PKCS#8).
    pub server_key_pem: String,
}

/// A fresh CA and a server certificate for `names` (DNS names or IP addresses, e.g.
/// `["localhost", "127.0.0.1"]`); a connection by any other name fails verification.
///
/// # Panics
/// When rcgen refuses a name or fails to sign (never with valid names).
pub fn certificates(names: &[&str]) -> TestCertificates {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Carmy test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut server = CertificateParams::new(names).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "Carmy test server");
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert_pem = server.signed_by(&server_key, &issuer).unwrap().pem();
    TestCertificates {
        ca_pem,
        server_cert_pem,
        server_key_pem: server_key.serialize_pem(),
    }
}

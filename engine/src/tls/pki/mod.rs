//! Keys and certificates, made by the engine itself whatever stack serves them: the key
//! specs and their backends (`certkey`), X.509 building and parsing (`x509`), the signature
//! and KEM tables (`ids`), and the `tls certs` command (`certs`).

pub mod certkey;
pub mod certs;
pub mod ids;
pub mod x509;

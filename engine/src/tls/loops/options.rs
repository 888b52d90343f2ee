//! The command-line options `tls server` and `tls client` share, and their translation into
//! the typed `Protocol` every stack is configured with.

use crate::out::Result;
pub use crate::tls::record::Events;
use crate::tls::stack::{Protocol, Stack, TlsVersion, VerifyMode};
use std::path::PathBuf;

/// Protocol options, the same flags on client and server.
#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct TlsOpts {
    /// TLS stack that runs the connections (the names `info` lists in tls_stacks).
    #[arg(long, default_value = "openssl")]
    pub stack: String,
    /// Key-exchange groups, stack names, colon or comma separated (e.g. X25519MLKEM768).
    #[arg(long)]
    pub groups: Option<String>,
    /// Signature algorithms, stack names (e.g. mldsa44, rsa_pss_rsae_sha256,
    /// ecdsa_secp256r1_sha256).
    #[arg(long)]
    pub sigalgs: Option<String>,
    /// Protocol version, both minimum and maximum: 1.2 or 1.3.
    #[arg(long, default_value = "1.3")]
    pub tls_version: String,
    /// TLS 1.2 cipher list (OpenSSL syntax), e.g. ECDHE-RSA-AES128-GCM-SHA256.
    #[arg(long)]
    pub ciphers: Option<String>,
    /// TLS 1.3 cipher suites, e.g. TLS_AES_128_GCM_SHA256.
    #[arg(long)]
    pub ciphersuites: Option<String>,
    /// OpenSSL security level 0-5 (default: OpenSSL's, 2; lowered automatically to 1 for
    /// --dh-bits 1024 on the server and to what RSA key exchange ciphers need).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=5))]
    pub security_level: Option<u32>,
    /// Append TLS secrets in SSLKEYLOGFILE format to this file (for Wireshark); created
    /// with mode 0600, and an existing file is set to 0600.
    #[arg(long)]
    pub keylog: Option<PathBuf>,
    /// Per-message events in connection records: on (default: both directions), sent (only
    /// what this side sent) or off.
    #[arg(long, default_value = "on")]
    pub events: String,
    /// Client: send key shares for these groups (a subset of --groups, stack names, colon or
    /// comma separated); default: the stack's choice (what `info` says it can send is in
    /// `tls_stacks[].key_shares`).
    #[arg(long, requires = "groups")]
    pub key_shares: Option<String>,
    /// Client: how the server's chain and name are judged: require (a chain that does not
    /// validate under --ca ends the handshake) or report (the handshake goes on; the record
    /// says whether the chain validated and why not).
    #[arg(long, default_value = "require")]
    pub verify: String,
    /// Socket read/write timeout in seconds, 1-86400 (bounds every wait on the peer).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub io_timeout: u64,
}

/// Items of a `:` or `,` separated list; an empty list is refused.
pub fn list(flag: &str, text: &Option<String>) -> Result<Option<Vec<String>>> {
    let Some(text) = text else { return Ok(None) };
    let items: Vec<String> = text
        .split([':', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if items.is_empty() {
        crate::bail!(Usage, "{flag} {text:?} names nothing");
    }
    Ok(Some(items))
}

impl TlsOpts {
    pub fn stack(&self) -> Result<&'static dyn Stack> {
        crate::tls::registry::find(&self.stack)
    }

    pub fn version(&self) -> Result<TlsVersion> {
        TlsVersion::parse(&self.tls_version)
    }

    pub fn events(&self) -> Result<Events> {
        match self.events.as_str() {
            "on" => Ok(Events::All),
            "sent" => Ok(Events::Sent),
            "off" => Ok(Events::Off),
            v => crate::bail!(Usage, "--events {v:?}: use on, sent or off"),
        }
    }

    pub fn events_on(&self) -> Result<bool> {
        Ok(self.events()? != Events::Off)
    }

    pub fn protocol(&self) -> Result<Protocol> {
        Ok(Protocol {
            version: self.version()?,
            groups: list("--groups", &self.groups)?,
            sigalgs: list("--sigalgs", &self.sigalgs)?,
            ciphers: self.ciphers.clone(),
            ciphersuites: list("--ciphersuites", &self.ciphersuites)?,
            security_level: self.security_level,
            keylog: self.keylog.clone(),
            key_shares: self.key_shares()?,
            verify: VerifyMode::parse(&self.verify)?,
        })
    }

    /// `--key-shares`, each name one of `--groups`.
    fn key_shares(&self) -> Result<Option<Vec<String>>> {
        let Some(shares) = list("--key-shares", &self.key_shares)? else {
            return Ok(None);
        };
        let groups = list("--groups", &self.groups)?.unwrap_or_default();
        for s in &shares {
            if !groups.iter().any(|g| g.eq_ignore_ascii_case(s)) {
                crate::bail!(
                    Usage,
                    "--key-shares {s:?} is not one of --groups {:?}",
                    groups.join(":")
                );
            }
        }
        Ok(Some(shares))
    }

    /// Refuse the options only a client takes (for the server commands).
    pub fn server_only(&self) -> Result<()> {
        if self.key_shares.is_some() {
            crate::bail!(Usage, "--key-shares is a client option");
        }
        if VerifyMode::parse(&self.verify)? != VerifyMode::Require {
            crate::bail!(Usage, "--verify is a client option");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_split_on_colons_and_commas() {
        let l = list("--groups", &Some("X25519MLKEM768:x25519,P-256".into())).unwrap();
        assert_eq!(l.unwrap(), ["X25519MLKEM768", "x25519", "P-256"]);
        assert!(list("--groups", &Some(":,".into())).is_err());
        assert_eq!(list("--groups", &None).unwrap(), None);
    }

    fn opts(groups: Option<&str>, shares: Option<&str>) -> TlsOpts {
        TlsOpts {
            stack: "openssl".into(),
            groups: groups.map(String::from),
            sigalgs: None,
            tls_version: "1.3".into(),
            ciphers: None,
            ciphersuites: None,
            security_level: None,
            keylog: None,
            events: "on".into(),
            key_shares: shares.map(String::from),
            verify: "require".into(),
            io_timeout: 30,
        }
    }

    #[test]
    fn key_shares_must_be_offered_groups() {
        let p = opts(Some("X25519MLKEM768:x25519"), Some("x25519mlkem768,X25519"))
            .protocol()
            .unwrap();
        assert_eq!(p.key_shares.unwrap(), ["x25519mlkem768", "X25519"]);
        let e = opts(Some("X25519"), Some("P-256")).protocol().unwrap_err();
        assert!(e.message().contains("not one of --groups"), "{e}");
        assert!(opts(Some("X25519"), Some("X25519")).server_only().is_err());
        assert!(opts(Some("X25519"), None).server_only().is_ok());
        let mut o = opts(None, None);
        o.verify = "report".into();
        assert_eq!(o.protocol().unwrap().verify, VerifyMode::Report);
        assert!(o.server_only().is_err());
        o.verify = "maybe".into();
        assert!(o.protocol().is_err());
    }
}

//! The registry: every TLS stack a program of the engine can run, found by the name
//! `--stack` gives. The one module besides a stack's own folder that names concrete stacks.

use super::stack::{Stack, StackInfo};
use crate::out::Result;

/// The stacks linked into the library: the one place a stack of the library is added.
pub fn library() -> Vec<&'static dyn Stack> {
    vec![
        &super::stacks::openssl::OpenSsl,
        &super::stacks::rustls::RUSTLS,
        &super::stacks::rustls::RUSTLS_AWS_LC_RS,
    ]
}

/// Every TLS stack this program can run: the library's and those the program added.
pub fn registered() -> Vec<&'static dyn Stack> {
    let mut stacks = library();
    stacks.extend(ADDED.get().copied().unwrap_or_default().iter().copied());
    #[cfg(test)]
    stacks.extend(super::stacks::openssl::fake::STACKS);
    stacks
}

/// Stacks a program adds to the library's (a program linking a library under another
/// licence: `cli::run`). Set once, before any command runs.
static ADDED: std::sync::OnceLock<&'static [&'static dyn Stack]> = std::sync::OnceLock::new();

pub fn add(stacks: &'static [&'static dyn Stack]) {
    let _ = ADDED.set(stacks);
}

/// The stack `--stack NAME` names.
pub fn find(name: &str) -> Result<&'static dyn Stack> {
    let stacks = registered();
    if let Some(s) = stacks.iter().find(|s| s.name() == name) {
        return Ok(*s);
    }
    let names: Vec<&str> = stacks.iter().map(|s| s.name()).collect();
    crate::bail!(
        Usage,
        "--stack {name:?} is not a TLS stack of this engine; registered: {}",
        names.join(", ")
    )
}

/// What every registered stack can do (`info.tls_stacks`).
pub fn stacks_info() -> Result<Vec<StackInfo>> {
    registered().iter().map(|s| s.describe()).collect()
}

/// Every key spec the certificate builder can make certificates of, whatever stack serves
/// them (`info.certificate_key_types`): every stack's CA key types, and every liboqs
/// signature of the table, those too large for any stack's limits included.
pub fn certificate_key_types(stacks: &[StackInfo]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let liboqs = super::pki::ids::SIGS.iter().map(|s| s.liboqs.to_string());
    for spec in stacks
        .iter()
        .flat_map(|s| s.ca_key_types.iter().cloned())
        .chain(liboqs)
    {
        let makeable = super::pki::certkey::KeySpec::parse(&spec).is_ok_and(|k| k.available());
        if makeable && !out.contains(&spec) {
            out.push(spec);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_finds_stacks_by_name_and_lists_them_when_it_cannot() {
        assert_eq!(find("openssl").map(|s| s.name()).ok(), Some("openssl"));
        let names: Vec<&str> = registered().iter().map(|s| s.name()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            names.len(),
            "duplicate stack names: {names:?}"
        );
        match find("gnutls") {
            Err(crate::out::Error::Usage(m)) => {
                assert!(m.contains("\"gnutls\"") && m.contains("openssl"), "{m}")
            }
            other => panic!("{:?}", other.map(|s| s.name())),
        }
    }
}

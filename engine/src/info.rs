//! `info`: what this engine was built with, so every result can carry it: library versions,
//! the algorithms each backend provides, what each TLS stack can negotiate, and a hash of
//! the executable itself (`build_id`) so the lab can refuse to mix builds.

use crate::out::{emit, Result, PROTOCOL};
use crate::primitives::backend::cstr;
use crate::primitives::{oqs, ossl};
use crate::tls::{registry, stacks};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {}

/// SHA-256 (hex) of the running executable, read through /proc/self/exe.
pub fn build_id() -> Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open("/proc/self/exe")
        .map_err(|e| crate::err!(Io, "cannot read /proc/self/exe for build_id: {e}"))?;
    let mut h = openssl::sha::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| crate::err!(Io, "reading /proc/self/exe for build_id: {e}"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish().iter().map(|b| format!("{b:02x}")).collect())
}

/// The OpenSSL library: its build, its providers' algorithms, and the TLS groups and
/// signature schemes with their code points.
fn openssl() -> serde_json::Value {
    let provided = ossl::provided();
    json!({
        "version_text": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_VERSION) }),
        "version_number": format!("{:#x}", unsafe { openssl_sys::OpenSSL_version_num() }),
        "built_on": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_BUILT_ON) }),
        "cflags": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_CFLAGS) }),
        "kems": provided["kems"],
        "signatures": provided["signatures"],
        "keymgmt": provided["keymgmt"],
        "tls_groups": stacks::openssl::caps::tls_groups_json(),
        "tls_sigalgs": stacks::openssl::caps::tls_sigalgs_json(),
    })
}

pub fn run(_a: Args) -> Result<()> {
    let (kems, sigs) = oqs::algorithms();
    let tls_stacks = registry::stacks_info()?;
    emit(&json!({
        "type": "info",
        "protocol": PROTOCOL,
        "engine_version": env!("CARGO_PKG_VERSION"),
        "build_id": build_id()?,
        "certificate_key_types": registry::certificate_key_types(&tls_stacks),
        "tls_stacks": tls_stacks,
        "openssl": openssl(),
        "liboqs": {
            "version": cstr(unsafe { oqs_sys::common::OQS_version() }),
            "kems": kems,
            "sigs": sigs,
        },
        "build": {
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "target_arch": std::env::consts::ARCH,
        },
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_lists_ml_kem_and_the_hybrid_groups() {
        let v = openssl();
        let kems: Vec<&str> = v["kems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["name"].as_str().unwrap())
            .collect();
        assert!(kems.contains(&"ML-KEM-768"), "{kems:?}");
        let ids: Vec<u64> = v["tls_groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["id"].as_u64().unwrap())
            .collect();
        assert!(ids.contains(&0x11ec), "{ids:?}");
    }

    #[test]
    fn build_id_is_the_sha256_of_the_executable() {
        let id = build_id().unwrap();
        assert_eq!(id.len(), 64);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let expect: String = openssl::sha::sha256(&exe)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(id, expect);
    }

    #[test]
    fn tls_stacks_describe_the_openssl_stack() {
        let stacks = serde_json::to_value(registry::stacks_info().unwrap()).unwrap();
        let openssl = stacks
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "openssl")
            .unwrap();
        assert!(openssl["implementation"]
            .as_str()
            .unwrap()
            .starts_with("OpenSSL 3.5.4"));
        let group = |name: &str| {
            openssl["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["name"] == name)
                .cloned()
        };
        assert_eq!(group("X25519MLKEM768").unwrap()["code"], 0x11ec);
        assert_eq!(group("P-256").unwrap()["code"], 23);
        assert_eq!(group("secp256r1").unwrap()["code"], 23);
        let sig = openssl["sigalgs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "mldsa44")
            .unwrap();
        assert_eq!(
            (sig["code"].as_u64(), &sig["versions"]),
            (Some(0x0904), &json!(["1.3"]))
        );
        assert!(openssl["limits"]["max_cert_list_bytes"].as_u64().unwrap() >= 100 * 1024);
        assert_eq!(openssl["message_events"], true);
    }
}

//! What CPU features OpenSSL itself uses: its capability vector `OPENSSL_ia32cap_P`, which
//! OpenSSL fills from CPUID (masked by the `OPENSSL_ia32cap` environment variable) in the
//! ELF `.init` section, i.e. before `main`. So the mask must be in the environment when the
//! engine starts; the engine only reads back what OpenSSL ended up with.

use serde_json::{json, Value};

/// OpenSSL 3.5's `OPENSSL_IA32CAP_P_MAX_INDEXES`.
pub const WORDS: usize = 10;

#[cfg(target_arch = "x86_64")]
extern "C" {
    // Hidden in libcrypto, but visible to us because libcrypto is linked statically.
    static OPENSSL_ia32cap_P: [u32; WORDS];
}

/// The ten 32-bit words of OpenSSL's capability vector (all zero off x86_64).
pub fn words() -> [u32; WORDS] {
    // Make sure libcrypto is initialised (the vector is set up in .init anyway).
    openssl_sys::init();
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a plain array OpenSSL writes once during start-up, before main.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!(OPENSSL_ia32cap_P)) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        [0; WORDS]
    }
}

/// The vector in the format of `openssl info -cpusettings` (five 64-bit words), so the two
/// can be compared character for character.
pub fn as_env_string(w: &[u32; WORDS]) -> String {
    (0..WORDS / 2)
        .map(|i| {
            format!(
                "0x{:016x}",
                (w[2 * i] as u64) | ((w[2 * i + 1] as u64) << 32)
            )
        })
        .collect::<Vec<_>>()
        .join(":")
}

fn bit(w: &[u32; WORDS], word: usize, b: u32) -> bool {
    w[word] & (1 << b) != 0
}

/// Feature flags relevant to symmetric ciphers, decoded with OpenSSL's own bit layout:
/// word 1 = CPUID(1).ECX, word 2 = CPUID(7).EBX, word 3 = CPUID(7).ECX.
pub fn features(w: &[u32; WORDS]) -> Value {
    json!({
        "ssse3": bit(w, 1, 9),
        "pclmulqdq": bit(w, 1, 1),
        "aesni": bit(w, 1, 25),
        "avx": bit(w, 1, 28),
        "avx2": bit(w, 2, 5),
        "bmi2": bit(w, 2, 8),
        "avx512f": bit(w, 2, 16),
        "avx512dq": bit(w, 2, 17),
        "adx": bit(w, 2, 19),
        "sha_ni": bit(w, 2, 29),
        "avx512bw": bit(w, 2, 30),
        "avx512vl": bit(w, 2, 31),
        "vaes": bit(w, 3, 9),
        "vpclmulqdq": bit(w, 3, 10),
    })
}

/// Which AES-GCM code path OpenSSL 3.5.4 selects with this vector, following
/// `ossl_prov_aes_hw_gcm` (cipher_aes_gcm_hw_aesni.inc) and `ossl_vaes_vpclmulqdq_capable`
/// (aes-gcm-avx512.pl): the VAES path needs VAES, VPCLMULQDQ and AVX-512 F/DQ/BW/VL and is
/// taken even when the AES-NI bit is masked; otherwise AES-NI; otherwise software AES
/// (vpaes with SSSE3) with GHASH by PCLMULQDQ if present, else 4-bit tables.
pub fn aes_gcm_path(w: &[u32; WORDS]) -> &'static str {
    let vaes = bit(w, 3, 9)
        && bit(w, 3, 10)
        && bit(w, 2, 31)
        && bit(w, 2, 30)
        && bit(w, 2, 17)
        && bit(w, 2, 16);
    if vaes {
        "vaes-vpclmulqdq-avx512"
    } else if bit(w, 1, 25) {
        "aesni+pclmulqdq"
    } else if bit(w, 1, 9) {
        if bit(w, 1, 1) {
            "vpaes(ssse3)+ghash-clmul"
        } else {
            "vpaes(ssse3)+ghash-4bit"
        }
    } else if bit(w, 1, 1) {
        "aes-c+ghash-clmul"
    } else {
        "aes-c+ghash-4bit"
    }
}

pub fn record() -> Value {
    let w = words();
    json!({
        "type": "cpu",
        "arch": std::env::consts::ARCH,
        "ia32cap_env": std::env::var("OPENSSL_ia32cap").ok(),
        "openssl_ia32cap": as_env_string(&w),
        "words": w.to_vec(),
        "features": features(&w),
        "aes_gcm_path": aes_gcm_path(&w),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_string_matches_openssl_format() {
        let mut w = [0u32; WORDS];
        w[0] = 0x078bffff;
        w[1] = 0xfffa3203;
        let s = as_env_string(&w);
        assert!(s.starts_with("0xfffa3203078bffff:0x0000000000000000"));
        assert_eq!(s.split(':').count(), 5);
    }

    #[test]
    fn features_decode_openssl_bits() {
        let mut w = [0u32; WORDS];
        w[1] = 1 << 25; // AES-NI = bit 57 of the first 64-bit word
        w[3] = 1 << 9; // VAES = bit 41 of the second 64-bit word
        let f = features(&w);
        assert_eq!(f["aesni"], true);
        assert_eq!(f["vaes"], true);
        assert_eq!(f["pclmulqdq"], false);
        assert_eq!(aes_gcm_path(&w), "aesni+pclmulqdq");
    }
}

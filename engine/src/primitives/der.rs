//! Minimal DER writer for the encodings liboqs does not produce itself: the
//! SubjectPublicKeyInfo and PKCS#8 structures that oqs-provider and the IETF drafts use for
//! post-quantum keys (AlgorithmIdentifier = the algorithm's OID with absent parameters).

use crate::out::Result;

fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    push_len(&mut out, content.len());
    out.extend_from_slice(content);
    out
}

/// DER of an OBJECT IDENTIFIER given in dotted form ("2.16.840.1.101.3.4.4.2").
pub fn oid(dotted: &str) -> Result<Vec<u8>> {
    let arcs: Vec<u64> = dotted
        .split('.')
        .map(|a| a.parse::<u64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| crate::err!(Usage, "--oid {dotted:?} is not a dotted OID"))?;
    if arcs.len() < 2 || arcs[0] > 2 || (arcs[0] < 2 && arcs[1] >= 40) {
        crate::bail!(Usage, "--oid {dotted:?} is not a valid OID");
    }
    let mut body = Vec::new();
    let mut encode = |mut v: u64| {
        let mut tmp = vec![(v & 0x7f) as u8];
        v >>= 7;
        while v > 0 {
            tmp.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        tmp.reverse();
        body.extend_from_slice(&tmp);
    };
    encode(arcs[0] * 40 + arcs[1]);
    for &a in &arcs[2..] {
        encode(a);
    }
    Ok(tlv(0x06, &body))
}

/// SubjectPublicKeyInfo ::= SEQUENCE { AlgorithmIdentifier { oid }, BIT STRING (raw key) }.
pub fn spki(oid_der: &[u8], public_key: &[u8]) -> Vec<u8> {
    let alg = tlv(0x30, oid_der);
    let mut bits = Vec::with_capacity(public_key.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(public_key);
    let mut body = alg;
    body.extend(tlv(0x03, &bits));
    tlv(0x30, &body)
}

/// PKCS#8 PrivateKeyInfo ::= SEQUENCE { INTEGER 0, AlgorithmIdentifier, OCTET STRING (key) }.
pub fn pkcs8(oid_der: &[u8], secret_key: &[u8]) -> Vec<u8> {
    let mut body = tlv(0x02, &[0]);
    body.extend(tlv(0x30, oid_der));
    body.extend(tlv(0x04, secret_key));
    tlv(0x30, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oid_encoding_matches_known_der() {
        // id-ml-kem-768, from FIPS 203's OID registration (NIST CSOR).
        assert_eq!(
            oid("2.16.840.1.101.3.4.4.2").unwrap(),
            [0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x04, 0x02]
        );
        assert!(oid("1.2.x").is_err());
        assert!(oid("3.1").is_err());
    }

    #[test]
    fn long_lengths() {
        let v = tlv(0x04, &vec![0u8; 300]);
        assert_eq!(&v[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(v.len(), 304);
    }
}

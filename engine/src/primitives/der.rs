//! Minimal DER for the encodings liboqs does not produce itself: the SubjectPublicKeyInfo
//! and PKCS#8 structures that oqs-provider and the IETF drafts use for post-quantum keys
//! (AlgorithmIdentifier = the algorithm's OID with absent parameters), the pieces of X.509
//! certificates the certificate builder writes, and a reader of one element at a time.

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

/// One DER element: tag, length, contents.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
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

/// The dotted form of an OBJECT IDENTIFIER's contents.
pub fn oid_text(contents: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut v: u64 = 0;
    for &b in contents {
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (v / 40).min(2);
                arcs.push(first);
                arcs.push(v - first * 40);
            } else {
                arcs.push(v);
            }
            v = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

pub const SEQUENCE: u8 = 0x30;
pub const SET: u8 = 0x31;
pub const BOOLEAN: u8 = 0x01;
pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const NULL: u8 = 0x05;
pub const OBJECT_IDENTIFIER: u8 = 0x06;
pub const UTF8_STRING: u8 = 0x0c;
pub const PRINTABLE_STRING: u8 = 0x13;
pub const UTC_TIME: u8 = 0x17;
pub const GENERALIZED_TIME: u8 = 0x18;

/// A SEQUENCE of already encoded elements.
pub fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

/// A non-negative INTEGER from big-endian magnitude bytes (minimal, with a 0 byte where the
/// top bit would make it negative).
pub fn unsigned_integer(magnitude: &[u8]) -> Vec<u8> {
    let skip = magnitude.iter().take_while(|b| **b == 0).count();
    let m = &magnitude[skip..];
    let mut body = Vec::with_capacity(m.len() + 1);
    if m.first().is_none_or(|b| b & 0x80 != 0) {
        body.push(0);
    }
    body.extend_from_slice(m);
    tlv(INTEGER, &body)
}

/// A BIT STRING of whole bytes (no unused bits).
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(bytes.len() + 1);
    body.push(0);
    body.extend_from_slice(bytes);
    tlv(BIT_STRING, &body)
}

/// One element read from the front of `input`: (tag, contents, the rest after it); None if
/// `input` does not start with a whole element (single-byte tags, lengths up to 4 bytes).
pub fn read(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The whole first element of `input` (tag and length included).
pub fn first_element(input: &[u8]) -> Option<&[u8]> {
    let (_, _, rest) = read(input)?;
    Some(&input[..input.len() - rest.len()])
}

/// SubjectPublicKeyInfo ::= SEQUENCE { AlgorithmIdentifier { oid }, BIT STRING (raw key) }.
pub fn spki(oid_der: &[u8], public_key: &[u8]) -> Vec<u8> {
    let alg = tlv(0x30, oid_der);
    let mut body = alg;
    body.extend(bit_string(public_key));
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
    fn oid_text_reads_what_oid_writes() {
        for dotted in [
            "2.16.840.1.101.3.4.3.17",
            "1.3.9999.8.1.3",
            "1.2.840.113549.1.1.11",
        ] {
            assert_eq!(oid_text(&oid(dotted).unwrap()[2..]), dotted);
        }
    }

    #[test]
    fn integers_are_minimal_and_non_negative() {
        assert_eq!(unsigned_integer(&[0, 0, 5]), [0x02, 1, 5]);
        assert_eq!(unsigned_integer(&[0x80]), [0x02, 2, 0, 0x80]);
        assert_eq!(unsigned_integer(&[]), [0x02, 1, 0]);
    }

    #[test]
    fn reader_walks_what_the_writer_wrote() {
        let s = sequence(&[&tlv(OCTET_STRING, &[1, 2]), &tlv(NULL, &[])]);
        let (tag, body, rest) = read(&s).unwrap();
        assert_eq!((tag, rest.len()), (SEQUENCE, 0));
        let (tag, octets, rest) = read(body).unwrap();
        assert_eq!((tag, octets), (OCTET_STRING, &[1u8, 2][..]));
        assert_eq!(read(rest).unwrap().0, NULL);
        assert_eq!(first_element(body).unwrap(), &[OCTET_STRING, 2, 1, 2]);
        assert!(read(&[0x30, 0x05, 0]).is_none());
        let long = tlv(OCTET_STRING, &[7u8; 300]);
        assert_eq!(read(&long).unwrap().1.len(), 300);
    }

    #[test]
    fn long_lengths() {
        let v = tlv(0x04, &vec![0u8; 300]);
        assert_eq!(&v[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(v.len(), 304);
    }
}

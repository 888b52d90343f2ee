//! One X.509 certificate builder for every algorithm and every stack: the DER of a root CA
//! and of a leaf certificate, signed with any `CertKey` (OpenSSL or liboqs), and the few
//! reads of a certificate the engine needs (its signed part, signature, subject, key).
//!
//! The content is what a small CA issues (and what the OpenSSL X509 API produced here
//! before): v3, a 159-bit random serial, names of C, O and CN, UTCTime validity from now,
//! and the extensions of RFC 5280 a TLS client checks:
//! - root: basicConstraints critical CA:TRUE, keyUsage critical keyCertSign and cRLSign,
//!   subjectKeyIdentifier;
//! - leaf: basicConstraints critical (not a CA), keyUsage critical digitalSignature (and
//!   keyEncipherment for RSA keys, for TLS 1.2 RSA key exchange), extKeyUsage serverAuth
//!   and/or clientAuth, subjectAltName (the CN first, then DNS names and IP addresses),
//!   subjectKeyIdentifier, authorityKeyIdentifier (the issuer's key identifier).
//!
//! - intermediate CA: as the root, with authorityKeyIdentifier (its issuer's key identifier).
//!
//! Key identifiers are the SHA-1 of the subjectPublicKey bits (RFC 5280 4.2.1.2 method 1).
//!
//! `padded` grows a leaf to a requested DER size with more subjectAltName DNS names, as a
//! multi-domain certificate (a CDN's or a hosting provider's, listing its customers' names)
//! carries: the one way pqlab sets a chain's size independently of its algorithms.

use crate::out::Result;
use crate::primitives::der::{self, sequence, tlv};
use crate::tls::pki::certkey::{self, CertKey};
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a leaf certificate is for (its extended key usage).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Purpose {
    Server,
    Client,
    Both,
}

/// A Name of country, organisation and common name (PrintableString for C, UTF8String
/// otherwise, as OpenSSL's default string mask writes them).
pub fn name(country: &str, organisation: &str, common_name: &str) -> Result<Vec<u8>> {
    let rdn = |oid: &str, tag: u8, value: &str| -> Result<Vec<u8>> {
        let atv = sequence(&[&der::oid(oid)?, &tlv(tag, value.as_bytes())]);
        Ok(tlv(der::SET, &atv))
    };
    Ok(sequence(&[
        &rdn("2.5.4.6", der::PRINTABLE_STRING, country)?,
        &rdn("2.5.4.10", der::UTF8_STRING, organisation)?,
        &rdn("2.5.4.3", der::UTF8_STRING, common_name)?,
    ]))
}

/// UTCTime (years 1950-2049) or GeneralizedTime of a moment, to the second.
fn time(t: SystemTime) -> Vec<u8> {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem / 60 % 60, rem % 60);
    if (1950..2050).contains(&y) {
        let text = format!("{:02}{m:02}{d:02}{hh:02}{mm:02}{ss:02}Z", y % 100);
        tlv(der::UTC_TIME, text.as_bytes())
    } else {
        let text = format!("{y:04}{m:02}{d:02}{hh:02}{mm:02}{ss:02}Z");
        tlv(der::GENERALIZED_TIME, text.as_bytes())
    }
}

/// Proleptic Gregorian date of a day count from 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn extension(oid: &str, critical: bool, value: &[u8]) -> Result<Vec<u8>> {
    let oid = der::oid(oid)?;
    let value = tlv(der::OCTET_STRING, value);
    Ok(if critical {
        sequence(&[&oid, &tlv(der::BOOLEAN, &[0xff]), &value])
    } else {
        sequence(&[&oid, &value])
    })
}

/// The key identifier of a SubjectPublicKeyInfo: SHA-1 of its public key bits.
pub fn key_identifier(spki: &[u8]) -> Result<Vec<u8>> {
    let bits = certkey::spki_key_bits(spki)
        .ok_or_else(|| crate::err!(Library, "unreadable SubjectPublicKeyInfo"))?;
    Ok(openssl::sha::sha1(bits).to_vec())
}

fn random_serial() -> Result<Vec<u8>> {
    // 158 random bits, positive and always 20 octets (RFC 5280: at most 20), as CAs do: the
    // top byte is kept in 0x40..0x7f, so a certificate's size never shrinks by a byte when
    // the random serial happens to start with a zero byte, and sizes are predictable.
    let mut bytes = [0u8; 20];
    openssl::rand::rand_bytes(&mut bytes)?;
    bytes[0] = (bytes[0] & 0x3f) | 0x40;
    Ok(der::unsigned_integer(&bytes))
}

/// What differs between a root and a leaf.
pub struct Profile<'a> {
    pub subject: Vec<u8>,
    /// The issuer's Name and key identifier, or None for a self-signed root.
    pub issuer: Option<(&'a [u8], &'a [u8])>,
    pub ca: bool,
    pub purpose: Purpose,
    /// Subject alternative names (DNS names or IP addresses); empty for a CA.
    pub san: Vec<String>,
}

/// A certificate for `subject_key`, signed by `signer` (the same key for a root).
pub fn build(
    profile: &Profile<'_>,
    subject_key: &CertKey,
    signer: &CertKey,
    days: u32,
) -> Result<Vec<u8>> {
    let spki = subject_key.spki()?;
    let ski = key_identifier(&spki)?;
    let mut exts = Vec::new();
    if profile.ca {
        exts.push(extension(
            "2.5.29.19",
            true,
            &sequence(&[&tlv(der::BOOLEAN, &[0xff])]),
        )?);
        // keyCertSign (bit 5) and cRLSign (bit 6).
        exts.push(extension(
            "2.5.29.15",
            true,
            &[der::BIT_STRING, 2, 1, 0x06],
        )?);
    } else {
        exts.push(extension("2.5.29.19", true, &sequence(&[]))?);
        // digitalSignature (bit 0), keyEncipherment (bit 2) for RSA.
        let ku: &[u8] = if subject_key.is_rsa() {
            &[der::BIT_STRING, 2, 5, 0xa0]
        } else {
            &[der::BIT_STRING, 2, 7, 0x80]
        };
        exts.push(extension("2.5.29.15", true, ku)?);
        let mut usages = Vec::new();
        if profile.purpose != Purpose::Client {
            usages.push(der::oid("1.3.6.1.5.5.7.3.1")?);
        }
        if profile.purpose != Purpose::Server {
            usages.push(der::oid("1.3.6.1.5.5.7.3.2")?);
        }
        exts.push(extension(
            "2.5.29.37",
            false,
            &tlv(der::SEQUENCE, &usages.concat()),
        )?);
        let mut names = Vec::new();
        for s in &profile.san {
            match s.parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => names.push(tlv(0x87, &a.octets())),
                Ok(IpAddr::V6(a)) => names.push(tlv(0x87, &a.octets())),
                Err(_) => names.push(tlv(0x82, s.as_bytes())),
            }
        }
        exts.push(extension(
            "2.5.29.17",
            false,
            &tlv(der::SEQUENCE, &names.concat()),
        )?);
    }
    exts.push(extension(
        "2.5.29.14",
        false,
        &tlv(der::OCTET_STRING, &ski),
    )?);
    if let Some((_, issuer_key_id)) = profile.issuer {
        exts.push(extension(
            "2.5.29.35",
            false,
            &sequence(&[&tlv(0x80, issuer_key_id)]),
        )?);
    }
    let now = SystemTime::now();
    let validity = sequence(&[
        &time(now),
        &time(now + Duration::from_secs(u64::from(days) * 86_400)),
    ]);
    let sig_alg = signer.signature_algorithm()?;
    let issuer = profile.issuer.map_or(&profile.subject[..], |(n, _)| n);
    let tbs = sequence(&[
        &tlv(0xa0, &der::unsigned_integer(&[2])),
        &random_serial()?,
        &sig_alg,
        issuer,
        &validity,
        &profile.subject,
        &spki,
        &tlv(0xa3, &tlv(der::SEQUENCE, &exts.concat())),
    ]);
    let signature = signer.sign(&tbs)?;
    Ok(sequence(&[&tbs, &sig_alg, &der::bit_string(&signature)]))
}

/// A DNS name of exactly `len` characters (1-63) for the `index`th padding entry: a
/// customer's host name under pqlab.test when there is room for one, else letters.
fn padding_name(index: usize, len: usize) -> String {
    const SUFFIX: &str = ".pqlab.test";
    let head = format!("site{index:04}");
    if len < head.len() + SUFFIX.len() + 1 {
        return (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    }
    let mut name = head;
    name.push('-');
    let fill = len - name.len() - SUFFIX.len();
    name.extend((0..fill).map(|i| (b'a' + ((index + i) % 26) as u8) as char));
    name.push_str(SUFFIX);
    name
}

/// The encoded bytes padding names of `content` bytes in all take, as names (each encoded
/// as a 2-byte header and 1-63 characters): full names of 63 characters and one shorter.
fn padding_names(content: usize) -> Vec<String> {
    const FULL: usize = 2 + 63;
    let mut names = Vec::new();
    let mut left = content;
    while left > FULL + 2 {
        names.push(padding_name(names.len(), 63));
        left -= FULL;
    }
    if left > FULL {
        // Two names share the rest, so neither is below 1 character.
        names.push(padding_name(names.len(), left / 2 - 2));
        left -= left / 2;
    }
    if left >= 3 {
        names.push(padding_name(names.len(), left - 2));
    }
    names
}

/// A leaf certificate of `target` DER bytes (or as close as the encoding allows: within 2
/// bytes), grown from `profile` with subjectAltName DNS names; None when the certificate
/// without padding is already larger than `target`. Names are added, the certificate is
/// signed and measured, and the padding corrected until the size is reached (DER length
/// fields grow at 128 and 256 bytes, and ECDSA or Falcon signatures vary by a few bytes).
pub fn padded(
    profile: &Profile<'_>,
    subject_key: &CertKey,
    signer: &CertKey,
    days: u32,
    target: usize,
) -> Result<Option<(Vec<u8>, usize)>> {
    let mut cert = build(profile, subject_key, signer, days)?;
    if cert.len() > target {
        return Ok(None);
    }
    let mut content = 0usize;
    let mut best = (cert.len().abs_diff(target), cert.clone(), 0usize);
    for _ in 0..16 {
        if cert.len() == target {
            break;
        }
        content = (content + target).saturating_sub(cert.len());
        let mut padded = Profile {
            subject: profile.subject.clone(),
            issuer: profile.issuer,
            ca: profile.ca,
            purpose: profile.purpose,
            san: profile.san.clone(),
        };
        let names = padding_names(content);
        let count = names.len();
        padded.san.extend(names);
        cert = build(&padded, subject_key, signer, days)?;
        if cert.len().abs_diff(target) < best.0 {
            best = (cert.len().abs_diff(target), cert.clone(), count);
        }
    }
    if best.0 > 2 {
        crate::bail!(
            Check,
            "could not pad the certificate to {target} bytes (closest {} bytes)",
            best.1.len()
        );
    }
    Ok(Some((best.1, best.2)))
}

/// The parts of a certificate the engine reads (slices of its DER).
pub struct Parsed<'a> {
    pub tbs: &'a [u8],
    pub signature_algorithm: &'a [u8],
    pub signature: &'a [u8],
    pub subject: &'a [u8],
    pub spki: &'a [u8],
    /// The subjectKeyIdentifier extension's value, when present.
    pub key_identifier: Option<&'a [u8]>,
}

fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, body, rest) = der::read(input)?;
    (t == tag).then_some((body, rest))
}

pub fn parse(cert: &[u8]) -> Result<Parsed<'_>> {
    parse_inner(cert).ok_or_else(|| crate::err!(Usage, "not an X.509 certificate (DER)"))
}

fn parse_inner(cert: &[u8]) -> Option<Parsed<'_>> {
    let (body, _) = expect(cert, der::SEQUENCE)?;
    let tbs = der::first_element(body)?;
    let (tbs_body, rest) = expect(body, der::SEQUENCE)?;
    let signature_algorithm = der::first_element(rest)?;
    let (_, _, rest) = der::read(rest)?;
    let (bits, _) = expect(rest, der::BIT_STRING)?;
    let signature = bits.split_first()?.1;
    // TBSCertificate: [0] version, serial, signature, issuer, validity, subject, spki, ...
    let mut fields = tbs_body;
    let mut next = || -> Option<(u8, &[u8], &[u8])> {
        let (tag, inner, rest) = der::read(fields)?;
        let whole = &fields[..fields.len() - rest.len()];
        fields = rest;
        Some((tag, inner, whole))
    };
    let (mut tag, _, _) = next()?;
    if tag == 0xa0 {
        (tag, _, _) = next()?; // the serial
    }
    debug_assert_eq!(tag, der::INTEGER);
    let _sig = next()?;
    let _issuer = next()?;
    let _validity = next()?;
    let (_, _, subject) = next()?;
    let (_, _, spki) = next()?;
    let mut key_identifier = None;
    while let Some((tag, inner, _)) = next() {
        if tag != 0xa3 {
            continue;
        }
        let (mut exts, _) = expect(inner, der::SEQUENCE)?;
        while let Some((_, ext, rest)) = der::read(exts) {
            exts = rest;
            let (oid_tag, oid, after) = der::read(ext)?;
            if oid_tag == der::OBJECT_IDENTIFIER && oid == [0x55, 0x1d, 0x0e] {
                let value = match der::read(after)? {
                    (der::BOOLEAN, _, v) => der::read(v)?.1,
                    (_, v, _) => v,
                };
                key_identifier = expect(value, der::OCTET_STRING).map(|(k, _)| k);
            }
        }
    }
    Some(Parsed {
        tbs,
        signature_algorithm,
        signature,
        subject,
        spki,
        key_identifier,
    })
}

/// Whether `cert` is signed by the key of `issuer_spki` (stack-neutral: liboqs or OpenSSL).
pub fn signed_by(cert: &[u8], issuer_spki: &[u8]) -> Result<bool> {
    let p = parse(cert)?;
    certkey::verify(issuer_spki, p.signature_algorithm, p.tbs, p.signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_follow_the_calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_819), (2027, 1, 1));
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_661);
        assert_eq!(time(t), tlv(der::UTC_TIME, b"000229010101Z"));
        let t = UNIX_EPOCH + Duration::from_secs(2_556_143_999 + 86_400 * 365 * 1000);
        assert_eq!(time(t)[0], der::GENERALIZED_TIME);
    }
}

//! Certificates for the initializer's HTTPS endpoint: a long-lived CA (kept in its own Secret,
//! never mounted) and a serving certificate for the Service's DNS names, rotated well before it
//! expires. No IO here; only key generation draws randomness.
//!
//! The CA's PEM is the webhook configuration's `caBundle`. When the CA is replaced, the bundle
//! carries the new CA and the one it replaced together, so that the API server (and the probe)
//! trust the pods still serving a certificate of the old CA until they load the new one; the old
//! CA leaves the bundle with [`Ca::retire_previous`] once every pod serves the new one.
//!
//! The serving key also keys the initialized-by mark (`initializer_mark`: a key derived from it
//! signs every object the initializer changes, and the operator checks the marks with the same
//! derivation, [`mark_keys`]). A new serving certificate comes with a new key, and the pods load
//! it a little later (kubelet refreshes a mounted Secret within a minute or so, then the SDK's
//! next poll): [`retire`] keeps the key it replaced, accepted for marks stamped up to
//! [`RETIRED_MARK_KEY_GRACE`] after the replacement, in the CA Secret (never mounted), so that a
//! restarted or newly elected operator knows it too.

use std::collections::BTreeMap;

use initializer_mark::{Keys, MarkKey, Retired};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use x509_parser::extensions::GeneralName;

/// A certificate or key that could not be made or read (what failed, and why).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// The result of a certificate operation.
pub type Result<T> = std::result::Result<T, TlsError>;

/// Lifetime of the CA: ten years.
pub const CA_LIFETIME: SignedDuration = SignedDuration::from_hours(24 * 3652);
/// Lifetime of a serving certificate: one year.
pub const SERVING_LIFETIME: SignedDuration = SignedDuration::from_hours(24 * 365);
/// Certificates are backdated by this much to tolerate clock skew between machines.
const BACKDATE: SignedDuration = SignedDuration::from_mins(5);
/// How long after the serving key is replaced marks made with the replaced key's mark key are
/// still accepted (by their time stamp): the pods sign with the old key until they have loaded
/// the new one, kubelet's refresh of the mounted Secret (about a minute by default) plus the
/// SDK's poll. A pod that keeps the old key longer has its marks refused: the objects count as
/// missed, the safe way to be wrong. Past it, a key replaced because it leaked is worthless.
pub const RETIRED_MARK_KEY_GRACE: SignedDuration = SignedDuration::from_mins(10);
/// The CA Secret's entry holding the replaced serving key's mark key (32 bytes; not the TLS
/// key).
pub const RETIRED_MARK_KEY: &str = "initialized-by-retired.key";
/// The CA Secret's entry holding the last time stamp (Unix seconds) that key is accepted for.
pub const RETIRED_MARK_KEY_UNTIL: &str = "initialized-by-retired.until";

/// The CA certificate and key, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Ca {
    /// Certificate (PEM): the current CA's first, then, while a rotation is under way, the
    /// certificate of the CA it replaced (still trusted, its key gone).
    pub cert_pem: String,
    /// Private key (PEM) of the current CA.
    pub key_pem: String,
}

/// The certificate blocks of a PEM text, each with its markers.
pub fn certificate_blocks(pem: &str) -> Vec<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let end = start + len + END.len();
        blocks.push(&rest[start..end]);
        rest = &rest[end..];
    }
    blocks
}

impl Ca {
    /// The current CA's certificate (PEM).
    pub fn current_pem(&self) -> String {
        certificate_blocks(&self.cert_pem)
            .first()
            .map_or_else(|| self.cert_pem.clone(), |b| format!("{b}\n"))
    }

    /// Whether the bundle still trusts a CA this one replaced.
    pub fn has_previous(&self) -> bool {
        certificate_blocks(&self.cert_pem).len() > 1
    }

    /// This CA trusting only itself: for once every pod serves a certificate it signed.
    pub fn retire_previous(&self) -> Ca {
        Ca {
            cert_pem: self.current_pem(),
            key_pem: self.key_pem.clone(),
        }
    }

    /// A new CA replacing this one: `next`, trusting this one's certificate too while the
    /// pods move to certificates of `next` (an unreadable or expired certificate is dropped).
    pub fn replaced_by(&self, next: Ca, now: Timestamp) -> Ca {
        let current = self.current_pem();
        let usable = inspect(&current).is_ok_and(|info| info.not_after > now);
        Ca {
            cert_pem: if usable {
                format!("{}{current}", next.cert_pem)
            } else {
                next.cert_pem
            },
            key_pem: next.key_pem,
        }
    }
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// Everything the desired objects need: the CA and a serving certificate it signed.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    /// The CA.
    pub ca: Ca,
    /// Serving certificate (PEM).
    pub cert_pem: String,
    /// Serving key (PEM).
    pub key_pem: String,
    /// The mark key of the serving key this one replaced, while marks it made are accepted
    /// ([`retire`]); kept in the CA Secret.
    pub retired_mark_key: Option<Retired>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// What matters about a certificate for rotation decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: Timestamp,
    /// End of validity.
    pub not_after: Timestamp,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// DER of the issuer's distinguished name.
    pub issuer: Vec<u8>,
    /// DER of the subject's distinguished name.
    pub subject: Vec<u8>,
}

/// The DNS names the serving certificate must cover for Service `service` in `namespace`.
pub fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_string(),
    ]
}

/// Reads validity, names and issuer from a PEM certificate.
pub fn inspect(cert_pem: &str) -> Result<CertInfo> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| TlsError(format!("failed to read PEM: {e}")))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| TlsError(format!("failed to parse certificate: {e}")))?;
    let ts = |t: i64| {
        Timestamp::from_second(t).map_err(|e| TlsError(format!("failed to read validity: {e}")))
    };
    let mut dns = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(n) = name {
                dns.push((*n).to_string());
            }
        }
    }
    Ok(CertInfo {
        not_before: ts(cert.validity().not_before.timestamp())?,
        not_after: ts(cert.validity().not_after.timestamp())?,
        dns_names: dns,
        issuer: cert.issuer().as_raw().to_vec(),
        subject: cert.subject().as_raw().to_vec(),
    })
}

/// True when less than a third of the certificate's lifetime remains at `now`.
pub fn nearly_expired(info: &CertInfo, now: Timestamp) -> bool {
    let life = info.not_after.duration_since(info.not_before);
    let left = info.not_after.duration_since(now);
    left.as_secs() * 3 < life.as_secs()
}

/// True when the CA must be replaced: unreadable or with less than a third of its life left.
pub fn ca_needs_rotation(ca: &Ca, now: Timestamp) -> bool {
    KeyPair::from_pem(&ca.key_pem).is_err()
        || inspect(&ca.cert_pem)
            .ok()
            .is_none_or(|info| nearly_expired(&info, now))
}

/// True when the serving certificate must be reissued: unreadable, less than a third of its life
/// left, different DNS names, or not issued by the current CA.
pub fn needs_rotation(material: &TlsMaterial, now: Timestamp, names: &[String]) -> bool {
    let Ok(info) = inspect(&material.cert_pem) else {
        return true;
    };
    let Ok(ca) = inspect(&material.ca.cert_pem) else {
        return true;
    };
    let mut have = info.dns_names.clone();
    have.sort();
    let mut want = names.to_vec();
    want.sort();
    KeyPair::from_pem(&material.key_pem).is_err()
        || nearly_expired(&info, now)
        || have != want
        || info.issuer != ca.subject
}

fn offset(t: Timestamp) -> Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(t.as_second())
        .map_err(|e| TlsError(format!("failed to convert time: {e}")))
}

fn rcgen_err(what: &str) -> impl Fn(rcgen::Error) -> TlsError + '_ {
    move |e| TlsError(format!("failed to {what}: {e}"))
}

/// Makes a new CA valid from `now` for [`CA_LIFETIME`]. Its common name carries a random suffix
/// so that a replaced CA never has the same subject as the one before.
pub fn new_ca(now: Timestamp) -> Result<Ca> {
    let key = KeyPair::generate().map_err(rcgen_err("generate the CA key"))?;
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err("prepare the CA"))?;
    let suffix: u64 = rand::random();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("initializer-operator CA {suffix:016x}"),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = offset(now - BACKDATE)?;
    params.not_after = offset(now + CA_LIFETIME)?;
    let cert = params.self_signed(&key).map_err(rcgen_err("sign the CA"))?;
    Ok(Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Issues a serving certificate for `names`, signed by `ca`, valid from `now` for
/// [`SERVING_LIFETIME`].
pub fn issue(ca: &Ca, names: &[String], now: Timestamp) -> Result<TlsMaterial> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(rcgen_err("read the CA key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca.current_pem(), ca_key)
        .map_err(rcgen_err("read the CA certificate"))?;
    let key = KeyPair::generate().map_err(rcgen_err("generate the serving key"))?;
    let mut params = CertificateParams::new(names.to_vec())
        .map_err(rcgen_err("prepare the serving certificate"))?;
    if let Some(first) = names.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, first.clone());
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = offset(now - BACKDATE)?;
    params.not_after = offset(now + SERVING_LIFETIME)?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(rcgen_err("sign the serving certificate"))?;
    Ok(TlsMaterial {
        ca: ca.clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        retired_mark_key: None,
    })
}

/// Keeps what is still good and replaces what is not: the CA when it is missing or nearly
/// expired (a replaced CA stays in the bundle, see [`Ca::replaced_by`]), the serving certificate
/// when [`needs_rotation`] says so (which a new CA implies).
pub fn ensure(
    ca: Option<Ca>,
    serving: Option<(String, String)>,
    names: &[String],
    now: Timestamp,
) -> Result<TlsMaterial> {
    let ca = match ca {
        Some(ca) if !ca_needs_rotation(&ca, now) => ca,
        Some(old) => old.replaced_by(new_ca(now)?, now),
        None => new_ca(now)?,
    };
    if let Some((cert_pem, key_pem)) = serving {
        let current = TlsMaterial {
            ca: ca.clone(),
            cert_pem,
            key_pem,
            retired_mark_key: None,
        };
        if !needs_rotation(&current, now, names) {
            return Ok(current);
        }
    }
    issue(&ca, names, now)
}

/// The mark key to keep as retired once [`ensure`] has run: when the serving key changed from
/// `before` (the key read from the Secret), the replaced key's, accepted for marks stamped up to
/// [`RETIRED_MARK_KEY_GRACE`] from `now`; otherwise the one `kept` so far (an unreadable or absent
/// old key signed nothing, so there is nothing new to keep).
pub fn retire(
    before: Option<&str>,
    after: &TlsMaterial,
    kept: Option<Retired>,
    now: Timestamp,
) -> Option<Retired> {
    match before {
        Some(old) if old != after.key_pem => MarkKey::from_serving_key_pem(old.as_bytes())
            .ok()
            .map(|key| Retired {
                key,
                until: now
                    .checked_add(RETIRED_MARK_KEY_GRACE)
                    .unwrap_or(now)
                    .as_second(),
            }),
        _ => kept,
    }
}

/// The keys the initializer's marks are checked with: the serving key's, and the retired one.
pub fn mark_keys(material: &TlsMaterial) -> Keys {
    Keys {
        current: MarkKey::from_serving_key_pem(material.key_pem.as_bytes()).ok(),
        previous: material.retired_mark_key.clone(),
    }
}

/// The CA Secret's entries for a retired mark key.
pub fn retired_entries(retired: &Retired) -> [(String, ByteString); 2] {
    [
        (
            RETIRED_MARK_KEY.to_string(),
            ByteString(retired.key.to_bytes().to_vec()),
        ),
        (
            RETIRED_MARK_KEY_UNTIL.to_string(),
            ByteString(retired.until.to_string().into_bytes()),
        ),
    ]
}

/// The retired mark key a CA Secret's data holds, if both entries are there and well formed.
pub fn retired_from(data: &BTreeMap<String, ByteString>) -> Option<Retired> {
    let key: [u8; 32] = data.get(RETIRED_MARK_KEY)?.0.as_slice().try_into().ok()?;
    let until = std::str::from_utf8(&data.get(RETIRED_MARK_KEY_UNTIL)?.0)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Retired {
        key: MarkKey::from_bytes(key),
        until,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn names() -> Vec<String> {
        dns_names("sidecar", "initializer-system")
    }

    /// The next reconcile's [`ensure`], handed all of `material` as it stands at `at`.
    fn ensure_again(material: &TlsMaterial, at: Timestamp) -> TlsMaterial {
        let serving = (material.cert_pem.clone(), material.key_pem.clone());
        ensure(Some(material.ca.clone()), Some(serving), &names(), at).unwrap()
    }

    #[test]
    fn a_fresh_certificate_covers_the_service_names_and_is_signed_by_the_ca() {
        let ca = new_ca(now()).unwrap();
        let m = issue(&ca, &names(), now()).unwrap();
        let info = inspect(&m.cert_pem).unwrap();
        assert_eq!(info.dns_names, names());
        assert!(
            info.dns_names
                .contains(&"sidecar.initializer-system.svc".to_string())
        );
        assert_eq!(info.issuer, inspect(&ca.cert_pem).unwrap().subject);
        let life = info.not_after.duration_since(now());
        assert!(life > SignedDuration::from_hours(24 * 364));
        assert!(!needs_rotation(&m, now(), &names()));
    }

    #[test]
    fn certificates_rotate_when_less_than_a_third_of_their_life_remains() {
        let ca = new_ca(now()).unwrap();
        let m = issue(&ca, &names(), now()).unwrap();
        assert!(!needs_rotation(
            &m,
            now() + SignedDuration::from_hours(24 * 200),
            &names()
        ));
        assert!(needs_rotation(
            &m,
            now() + SignedDuration::from_hours(24 * 250),
            &names()
        ));
        assert!(needs_rotation(
            &m,
            now() + SignedDuration::from_hours(24 * 400),
            &names()
        ));
    }

    #[test]
    fn certificates_rotate_when_the_names_change() {
        let ca = new_ca(now()).unwrap();
        let m = issue(&ca, &names(), now()).unwrap();
        assert!(needs_rotation(
            &m,
            now(),
            &dns_names("sidecar", "elsewhere")
        ));
    }

    #[test]
    fn certificates_rotate_when_the_ca_changes() {
        let m = issue(&new_ca(now()).unwrap(), &names(), now()).unwrap();
        let other = TlsMaterial {
            ca: new_ca(now()).unwrap(),
            ..m.clone()
        };
        assert!(needs_rotation(&other, now(), &names()));
    }

    #[test]
    fn garbage_is_replaced_rather_than_trusted() {
        let m = TlsMaterial {
            ca: Ca {
                cert_pem: "not a cert".into(),
                key_pem: "not a key".into(),
            },
            cert_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
            key_pem: String::new(),
            retired_mark_key: None,
        };
        assert!(needs_rotation(&m, now(), &names()));
        assert!(ca_needs_rotation(&m.ca, now()));
        let fixed = ensure(Some(m.ca), Some((m.cert_pem, m.key_pem)), &names(), now()).unwrap();
        assert!(!needs_rotation(&fixed, now(), &names()));
    }

    #[test]
    fn ensure_keeps_good_material_and_rotates_the_rest() {
        let first = ensure(None, None, &names(), now()).unwrap();
        let kept = ensure_again(&first, now() + SignedDuration::from_hours(24 * 30));
        assert_eq!(kept, first);
        let rotated = ensure_again(&first, now() + SignedDuration::from_hours(24 * 300));
        assert_eq!(rotated.ca, first.ca);
        assert_ne!(rotated.cert_pem, first.cert_pem);
    }

    #[test]
    fn a_replaced_ca_stays_in_the_bundle_until_retired() {
        let first = ensure(None, None, &names(), now()).unwrap();
        assert!(!first.ca.has_previous());
        let later = now() + SignedDuration::from_hours(24 * 365 * 7);
        let rotated = ensure_again(&first, later);
        // Both CAs are trusted, the new one first; the serving certificate is the new CA's.
        let blocks = certificate_blocks(&rotated.ca.cert_pem);
        assert_eq!(blocks.len(), 2);
        assert_eq!(format!("{}\n", blocks[1]), first.ca.cert_pem);
        assert_ne!(rotated.ca.current_pem(), first.ca.cert_pem);
        let new_subject = inspect(&rotated.ca.current_pem()).unwrap().subject;
        assert_eq!(inspect(&rotated.cert_pem).unwrap().issuer, new_subject);
        // The next reconcile keeps it as it is, and issues from the current CA.
        let kept = ensure_again(&rotated, later);
        assert_eq!(kept, rotated);
        let reissued = issue(&rotated.ca, &names(), later).unwrap();
        assert_eq!(inspect(&reissued.cert_pem).unwrap().issuer, new_subject);
        // Retired once every pod serves the new CA's certificate.
        let retired = rotated.ca.retire_previous();
        assert!(!retired.has_previous());
        assert_eq!(retired.current_pem(), rotated.ca.current_pem());
        // Another rotation replaces the oldest: the bundle never holds more than two.
        let again = rotated.ca.replaced_by(new_ca(later).unwrap(), later);
        assert_eq!(certificate_blocks(&again.cert_pem).len(), 2);
        assert_eq!(
            format!("{}\n", certificate_blocks(&again.cert_pem)[1]),
            rotated.ca.current_pem()
        );
    }

    #[test]
    fn an_unreadable_or_expired_ca_is_not_kept_in_the_bundle() {
        let garbage = Ca {
            cert_pem: "not a cert".into(),
            key_pem: "not a key".into(),
        };
        let next = new_ca(now()).unwrap();
        assert_eq!(garbage.replaced_by(next.clone(), now()), next);
        let old = new_ca(now()).unwrap();
        let after_its_life = now() + CA_LIFETIME + SignedDuration::from_hours(24);
        assert_eq!(old.replaced_by(next.clone(), after_its_life), next);
    }

    #[test]
    fn a_replaced_serving_key_keeps_signing_valid_marks_for_the_grace_period() {
        let first = ensure(None, None, &names(), now()).unwrap();
        let keys = mark_keys(&first);
        assert!(keys.current.is_some() && keys.previous.is_none());
        let later = now() + SignedDuration::from_hours(24 * 300);
        let rotated = ensure_again(&first, later);
        assert_ne!(rotated.key_pem, first.key_pem);
        let retired = retire(Some(&first.key_pem), &rotated, None, later).unwrap();
        assert_eq!(Some(&retired.key), keys.current.as_ref());
        assert_eq!(retired.until, (later + RETIRED_MARK_KEY_GRACE).as_second());
        let rotated = TlsMaterial {
            retired_mark_key: Some(retired.clone()),
            ..rotated
        };
        let now_keys = mark_keys(&rotated);
        assert_ne!(now_keys.current, keys.current);
        assert_eq!(now_keys.previous.as_ref(), Some(&retired));
        // Kept while the serving key stays; replaced at the next rotation; nothing to retire
        // when there was no key before.
        assert_eq!(
            retire(
                Some(&rotated.key_pem),
                &rotated,
                Some(retired.clone()),
                later
            ),
            Some(retired.clone())
        );
        assert_eq!(
            retire(None, &rotated, Some(retired.clone()), later),
            Some(retired.clone())
        );
        assert_eq!(
            retire(Some("garbage"), &rotated, Some(retired.clone()), later),
            None
        );
        // And it survives the round trip through the CA Secret.
        let data: BTreeMap<String, ByteString> = retired_entries(&retired).into_iter().collect();
        assert_eq!(retired_from(&data), Some(retired));
        assert_eq!(retired_from(&BTreeMap::new()), None);
    }

    #[test]
    fn the_ca_is_replaced_near_the_end_of_its_life() {
        let ca = new_ca(now()).unwrap();
        assert!(!ca_needs_rotation(
            &ca,
            now() + SignedDuration::from_hours(24 * 365 * 5)
        ));
        assert!(ca_needs_rotation(
            &ca,
            now() + SignedDuration::from_hours(24 * 365 * 7)
        ));
    }
}

//! initializer-mark: the `initializer.dev/initialized-by` mark, which the SDK writes on every
//! object a handler changed and the operator reads when it counts the objects created without
//! the initializer during an outage. Pure: no IO, no clock; the callers pass the key and times.
//!
//! Any object author can write an annotation, so a mark that only names the initializer proves
//! nothing: an author could hide an object from the missed count by writing it. A mark is
//! therefore signed: `<initializer>[/<generation>]/t=<unix seconds>/<MAC>`, the MAC an
//! HMAC-SHA256 (base64url, no padding) over the initializer's name and generation, the time
//! stamp, and the object's identity as the initializer saw it at admission (namespace, API group,
//! resource, and the name, or the `generateName` when the API server had not chosen a name yet).
//!
//! The key is derived from the initializer's serving key (`tls.key` of the TLS Secret the
//! operator issues and the pods mount): only the operator and the initializer's pods hold it,
//! and both already read it, so no new secret has to be distributed. It is derived with its own
//! label ([`MarkKey::from_serving_key_der`]), so the TLS key itself never keys a MAC.
//!
//! The operator accepts a mark on a stored object when the MAC is right for that object's
//! namespace, group, resource and name (or `generateName`), and the time stamp is within
//! [`WINDOW_SECONDS`] of the object's `creationTimestamp` (which the API server sets; an author
//! cannot choose it). What that leaves an attacker is replay: copying a genuine mark onto another
//! object of the same namespace, resource and name (the first one deleted), or of the same
//! `generateName`, created within [`WINDOW_SECONDS`] of when the genuine one was signed.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject as _;

/// The annotation holding the marks, one entry per initializer, separated by commas.
pub const ANNOTATION: &str = "initializer.dev/initialized-by";

/// How far a mark's time stamp may be from the object's `creationTimestamp`, in seconds (either
/// way). The initializer stamps the time it saw the create; the API server sets the creation
/// time just after, on its own clock: the bound covers the admission chain and clock skew
/// between the initializer's node and the API server's. It is also the replay bound (see the
/// crate's documentation).
pub const WINDOW_SECONDS: i64 = 10;

/// The label of the key derivation: what separates the mark's key from the TLS key.
const KEY_LABEL: &[u8] = b"initializer.dev/initialized-by key v1";
/// The first field of every MAC'd message: what separates this MAC from any other use of the key.
const MAC_LABEL: &[u8] = b"initializer.dev/initialized-by mark v1";
/// The prefix of the time stamp field.
const TIME_PREFIX: &str = "t=";
/// Bytes of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// The key marks are signed with: derived from the initializer's serving key, never the serving
/// key itself.
#[derive(Clone, PartialEq, Eq)]
pub struct MarkKey([u8; TAG_LEN]);

impl std::fmt::Debug for MarkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MarkKey(..)")
    }
}

/// Why a serving key could not give a mark key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError(String);

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failed to read the serving key: {}", self.0)
    }
}

impl std::error::Error for KeyError {}

impl MarkKey {
    /// HMAC-SHA256 keyed with the serving key's DER over a fixed label: a key that reveals
    /// nothing of the serving key and is used for nothing else.
    pub fn from_serving_key_der(der: &[u8]) -> Self {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, der), KEY_LABEL);
        let mut bytes = [0u8; TAG_LEN];
        bytes.copy_from_slice(tag.as_ref());
        Self(bytes)
    }

    /// The key of the first private key in a PEM text (`tls.key`: PKCS#8, PKCS#1 or SEC1), read
    /// as rustls reads it when the SDK serves with it.
    pub fn from_serving_key_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| KeyError(e.to_string()))?;
        Ok(Self::from_serving_key_der(key.secret_der()))
    }

    /// A key kept as bytes (the operator keeps the key it replaced, see [`Retired`]).
    pub fn from_bytes(bytes: [u8; TAG_LEN]) -> Self {
        Self(bytes)
    }

    /// The key's bytes, to keep it.
    pub fn to_bytes(&self) -> [u8; TAG_LEN] {
        self.0
    }

    fn hmac(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.0)
    }
}

/// How the object was named when the initializer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named<'a> {
    /// Its name.
    Name(&'a str),
    /// No name yet: its `generateName` (the API server picks the name after admission).
    GenerateName(&'a str),
}

/// What a mark is bound to: the object as the initializer saw it at admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity<'a> {
    /// The namespace; empty for cluster-scoped objects.
    pub namespace: &'a str,
    /// The API group (empty for the core group). The version is left out: every version of a
    /// resource holds the same objects.
    pub group: &'a str,
    /// The resource (plural, `deployments`): what the operator lists. The kind is not used: a
    /// metadata-only list does not carry it.
    pub resource: &'a str,
    /// The name, or the `generateName` when the name is empty.
    pub named: Named<'a>,
}

impl<'a> Identity<'a> {
    /// The identity of an object at admission: its name, or its `generateName` when the name is
    /// empty.
    pub fn at_admission(
        namespace: &'a str,
        group: &'a str,
        resource: &'a str,
        name: &'a str,
        generate_name: &'a str,
    ) -> Self {
        let named = if name.is_empty() {
            Named::GenerateName(generate_name)
        } else {
            Named::Name(name)
        };
        Self {
            namespace,
            group,
            resource,
            named,
        }
    }
}

/// The MAC'd message: a label, then every field with its length, so that no two different
/// tuples give the same bytes.
fn message(initializer: &str, generation: &str, identity: &Identity<'_>, time: i64) -> Vec<u8> {
    let (tag, name) = match identity.named {
        Named::Name(n) => ("name", n),
        Named::GenerateName(g) => ("generateName", g),
    };
    let time = time.to_string();
    let fields = [
        initializer,
        generation,
        identity.namespace,
        identity.group,
        identity.resource,
        tag,
        name,
        &time,
    ];
    let mut out =
        Vec::with_capacity(MAC_LABEL.len() + fields.iter().map(|f| f.len() + 4).sum::<usize>());
    out.extend_from_slice(MAC_LABEL);
    for field in fields {
        let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(field.as_bytes());
    }
    out
}

/// The head of an entry: `<initializer>/<generation>`, or `<initializer>`.
fn head(initializer: &str, generation: Option<i64>) -> String {
    match generation {
        Some(generation) => format!("{initializer}/{generation}"),
        None => initializer.to_owned(),
    }
}

/// The signed entry `<initializer>[/<generation>]/t=<time>/<MAC>` for an object the initializer
/// changed, seen with `identity`, stamped `time` (Unix seconds).
pub fn sign(
    key: &MarkKey,
    initializer: &str,
    generation: Option<i64>,
    identity: &Identity<'_>,
    time: i64,
) -> String {
    let generation_text = generation.map(|g| g.to_string()).unwrap_or_default();
    let tag = hmac::sign(
        &key.hmac(),
        &message(initializer, &generation_text, identity, time),
    );
    format!(
        "{}/{TIME_PREFIX}{time}/{}",
        head(initializer, generation),
        URL_SAFE_NO_PAD.encode(tag.as_ref())
    )
}

/// The entry an initializer without a key writes (`<initializer>[/<generation>]`): it names the
/// initializer for people, and the operator does not trust it.
pub fn unsigned(initializer: &str, generation: Option<i64>) -> String {
    head(initializer, generation)
}

/// The entries of the annotation's value.
pub fn entries(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// The initializer an entry names (signed or not).
pub fn entry_name(entry: &str) -> &str {
    entry.trim().split('/').next().unwrap_or_default()
}

/// One entry, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The initializer it names.
    pub initializer: &'a str,
    /// The generation, as written.
    pub generation: Option<&'a str>,
    /// The time stamp and MAC; `None` for an unsigned entry.
    pub signature: Option<Signature<'a>>,
}

/// The signed part of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature<'a> {
    /// The time stamp (Unix seconds).
    pub time: i64,
    /// The MAC, base64url.
    pub mac: &'a str,
}

impl<'a> Entry<'a> {
    /// Parses `<initializer>[/<generation>][/t=<time>/<MAC>]`; `None` when it is neither form.
    pub fn parse(entry: &'a str) -> Option<Self> {
        let parts: Vec<&str> = entry.trim().split('/').collect();
        let signed = parts.len() >= 3 && parts[parts.len() - 2].starts_with(TIME_PREFIX);
        let (head, signature) = if signed {
            let time = parts[parts.len() - 2].strip_prefix(TIME_PREFIX)?;
            if time.is_empty() || !time.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let signature = Signature {
                time: time.parse().ok()?,
                mac: parts[parts.len() - 1],
            };
            (&parts[..parts.len() - 2], Some(signature))
        } else {
            (&parts[..], None)
        };
        let (initializer, generation) = match head {
            [name] => (*name, None),
            [name, generation] => (*name, Some(*generation)),
            _ => return None,
        };
        if initializer.is_empty() || generation.is_some_and(str::is_empty) {
            return None;
        }
        Some(Self {
            initializer,
            generation,
            signature,
        })
    }
}

/// A key the initializer signed with until it was replaced (a new serving certificate comes with
/// a new key): accepted for marks stamped at or before `until`, which leaves the pods time to
/// load the new key, and no more (a key replaced because it leaked is worthless soon after).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    /// The key.
    pub key: MarkKey,
    /// The last time stamp (Unix seconds) it is accepted for.
    pub until: i64,
}

/// The keys a mark may have been made with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    /// The key of the serving key in force.
    pub current: Option<MarkKey>,
    /// The key it replaced, while that is still accepted.
    pub previous: Option<Retired>,
}

impl Keys {
    /// Keys holding only `current`.
    pub fn current(key: MarkKey) -> Self {
        Self {
            current: Some(key),
            previous: None,
        }
    }

    /// The keys that may have signed a mark stamped `time`.
    fn for_time(&self, time: i64) -> impl Iterator<Item = &MarkKey> {
        self.current.iter().chain(
            self.previous
                .iter()
                .filter(move |r| time <= r.until)
                .map(|r| &r.key),
        )
    }
}

/// What the operator knows of a stored object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored<'a> {
    /// The namespace; empty for cluster-scoped objects.
    pub namespace: &'a str,
    /// The API group it was listed from.
    pub group: &'a str,
    /// The resource it was listed from.
    pub resource: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its `generateName` (empty when none).
    pub generate_name: &'a str,
    /// Its `creationTimestamp` (Unix seconds).
    pub created: i64,
}

impl Stored<'_> {
    /// The identities the initializer may have seen it with: its name, and its `generateName`
    /// when it has one (the name did not exist yet at admission).
    fn identities(&self) -> impl Iterator<Item = Identity<'_>> {
        let with = |named| Identity {
            namespace: self.namespace,
            group: self.group,
            resource: self.resource,
            named,
        };
        std::iter::once(with(Named::Name(self.name))).chain(
            (!self.generate_name.is_empty()).then(|| with(Named::GenerateName(self.generate_name))),
        )
    }
}

/// Why a mark was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No entry names the initializer.
    Absent,
    /// The entry is not signed (`<name>/<generation>`: anyone can write it).
    Unsigned,
    /// The entry names the initializer but is neither form.
    Malformed,
    /// The time stamp is more than [`WINDOW_SECONDS`] from the object's creation.
    OutsideWindow,
    /// No key the operator holds made this MAC for this object.
    BadMac,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Absent => "no mark",
            Self::Unsigned => "an unsigned mark",
            Self::Malformed => "a malformed mark",
            Self::OutsideWindow => "a mark stamped too far from the object's creation",
            Self::BadMac => "a mark with a wrong MAC",
        })
    }
}

/// Whether `entry` is a mark `initializer` made, with one of `keys`, for `object`.
pub fn verify_entry(
    keys: &Keys,
    initializer: &str,
    entry: &str,
    object: &Stored<'_>,
) -> Result<(), Refusal> {
    if entry_name(entry) != initializer {
        return Err(Refusal::Absent);
    }
    let parsed = Entry::parse(entry).ok_or(Refusal::Malformed)?;
    let signature = parsed.signature.ok_or(Refusal::Unsigned)?;
    if object.created.abs_diff(signature.time) > WINDOW_SECONDS.unsigned_abs() {
        return Err(Refusal::OutsideWindow);
    }
    let tag = URL_SAFE_NO_PAD
        .decode(signature.mac)
        .map_err(|_| Refusal::BadMac)?;
    let generation = parsed.generation.unwrap_or_default();
    let valid = keys.for_time(signature.time).any(|key| {
        let key = key.hmac();
        object.identities().any(|identity| {
            let message = message(initializer, generation, &identity, signature.time);
            hmac::verify(&key, &message, &tag).is_ok()
        })
    });
    if valid { Ok(()) } else { Err(Refusal::BadMac) }
}

/// Whether the annotation's value (`None`: no annotation) holds a mark `initializer` made for
/// `object`; otherwise why the entry naming it (the last one, if several) was refused.
pub fn verify(
    keys: &Keys,
    initializer: &str,
    value: Option<&str>,
    object: &Stored<'_>,
) -> Result<(), Refusal> {
    let mut refusal = Refusal::Absent;
    for entry in entries(value.unwrap_or_default()) {
        if entry_name(entry) != initializer {
            continue;
        }
        match verify_entry(keys, initializer, entry, object) {
            Ok(()) => return Ok(()),
            Err(why) => refusal = why,
        }
    }
    Err(refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_790_000_000;

    fn key(seed: u8) -> MarkKey {
        MarkKey::from_serving_key_der(&[seed; 48])
    }

    fn stored<'a>(name: &'a str, generate_name: &'a str, created: i64) -> Stored<'a> {
        Stored {
            namespace: "apps",
            group: "apps",
            resource: "deployments",
            name,
            generate_name,
            created,
        }
    }

    fn named(name: &str) -> Identity<'_> {
        Identity::at_admission("apps", "apps", "deployments", name, "")
    }

    #[test]
    fn a_signed_mark_verifies_for_its_object_and_reads_back() {
        let keys = Keys::current(key(1));
        let mark = sign(&key(1), "sidecar", Some(3), &named("web"), NOW);
        assert!(mark.starts_with(&format!("sidecar/3/t={NOW}/")), "{mark}");
        // Fits in the comma-separated annotation: base64url, no padding.
        assert!(
            !mark.contains([',', '+', ' ']) && mark.matches('=').count() == 1,
            "{mark}"
        );
        assert_eq!(
            verify_entry(&keys, "sidecar", &mark, &stored("web", "", NOW + 1)),
            Ok(())
        );
        let entry = Entry::parse(&mark).unwrap();
        assert_eq!(entry.initializer, "sidecar");
        assert_eq!(entry.generation, Some("3"));
        assert_eq!(entry.signature.unwrap().time, NOW);
        let without_generation = sign(&key(1), "sidecar", None, &named("web"), NOW);
        assert!(without_generation.starts_with(&format!("sidecar/t={NOW}/")));
        assert_eq!(
            verify_entry(
                &keys,
                "sidecar",
                &without_generation,
                &stored("web", "", NOW)
            ),
            Ok(())
        );
    }

    #[test]
    fn a_mark_made_for_another_name_namespace_group_or_resource_is_refused() {
        let keys = Keys::current(key(1));
        let mark = sign(&key(1), "sidecar", Some(3), &named("web"), NOW);
        let object = stored("web", "", NOW);
        for other in [
            Stored {
                name: "web2",
                ..object
            },
            Stored {
                namespace: "other",
                ..object
            },
            Stored {
                group: "",
                ..object
            },
            Stored {
                resource: "statefulsets",
                ..object
            },
        ] {
            assert_eq!(
                verify_entry(&keys, "sidecar", &mark, &other),
                Err(Refusal::BadMac),
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_mark_whose_text_was_edited_is_refused() {
        let keys = Keys::current(key(1));
        let mark = sign(&key(1), "sidecar", Some(3), &named("web"), NOW);
        let object = stored("web", "", NOW);
        let other_generation = mark.replacen("sidecar/3/", "sidecar/4/", 1);
        let other_time = mark.replacen(&format!("t={NOW}"), &format!("t={}", NOW + 1), 1);
        for edited in [other_generation, other_time] {
            assert_eq!(
                verify_entry(&keys, "sidecar", &edited, &object),
                Err(Refusal::BadMac),
                "{edited}"
            );
        }
        // Another initializer's name on this initializer's MAC.
        let renamed = mark.replacen("sidecar/", "proxy/", 1);
        assert_eq!(
            verify_entry(&keys, "proxy", &renamed, &object),
            Err(Refusal::BadMac)
        );
    }

    #[test]
    fn a_mark_stamped_outside_the_window_is_refused() {
        let keys = Keys::current(key(1));
        let mark = sign(&key(1), "sidecar", Some(3), &named("web"), NOW);
        for (created, ok) in [
            (NOW - WINDOW_SECONDS - 1, false),
            (NOW - WINDOW_SECONDS, true),
            (NOW, true),
            (NOW + WINDOW_SECONDS, true),
            (NOW + WINDOW_SECONDS + 1, false),
        ] {
            let verdict = verify_entry(&keys, "sidecar", &mark, &stored("web", "", created));
            assert_eq!(
                verdict,
                if ok {
                    Ok(())
                } else {
                    Err(Refusal::OutsideWindow)
                },
                "{created}"
            );
        }
    }

    #[test]
    fn a_mark_made_with_another_key_or_with_no_key_held_is_refused() {
        let mark = sign(&key(2), "sidecar", Some(3), &named("web"), NOW);
        let object = stored("web", "", NOW);
        assert_eq!(
            verify_entry(&Keys::current(key(1)), "sidecar", &mark, &object),
            Err(Refusal::BadMac)
        );
        assert_eq!(
            verify_entry(&Keys::default(), "sidecar", &mark, &object),
            Err(Refusal::BadMac)
        );
        // The serving key itself (not the derived key) does not make valid marks either.
        let raw = MarkKey::from_bytes([1; 32]);
        let forged = sign(&raw, "sidecar", Some(3), &named("web"), NOW);
        assert_eq!(
            verify_entry(&Keys::current(key(1)), "sidecar", &forged, &object),
            Err(Refusal::BadMac)
        );
    }

    #[test]
    fn the_previous_key_is_accepted_only_for_marks_stamped_before_its_end() {
        let keys = Keys {
            current: Some(key(1)),
            previous: Some(Retired {
                key: key(2),
                until: NOW,
            }),
        };
        let old = sign(&key(2), "sidecar", Some(3), &named("web"), NOW);
        assert_eq!(
            verify_entry(&keys, "sidecar", &old, &stored("web", "", NOW)),
            Ok(())
        );
        let late = sign(&key(2), "sidecar", Some(3), &named("web"), NOW + 1);
        assert_eq!(
            verify_entry(&keys, "sidecar", &late, &stored("web", "", NOW + 1)),
            Err(Refusal::BadMac)
        );
        let new = sign(&key(1), "sidecar", Some(3), &named("web"), NOW + 1);
        assert_eq!(
            verify_entry(&keys, "sidecar", &new, &stored("web", "", NOW + 1)),
            Ok(())
        );
    }

    #[test]
    fn a_mark_made_before_the_name_was_chosen_verifies_by_generate_name() {
        let keys = Keys::current(key(1));
        let at_admission = Identity::at_admission("apps", "apps", "deployments", "", "web-");
        assert_eq!(at_admission.named, Named::GenerateName("web-"));
        let mark = sign(&key(1), "sidecar", Some(3), &at_admission, NOW);
        assert_eq!(
            verify_entry(&keys, "sidecar", &mark, &stored("web-x7k2p", "web-", NOW)),
            Ok(())
        );
        // Not on an object that has no such generateName, even one named like it.
        assert_eq!(
            verify_entry(&keys, "sidecar", &mark, &stored("web-", "", NOW)),
            Err(Refusal::BadMac)
        );
        assert_eq!(
            verify_entry(&keys, "sidecar", &mark, &stored("web-x7k2p", "api-", NOW)),
            Err(Refusal::BadMac)
        );
    }

    #[test]
    fn unsigned_and_malformed_marks_are_refused() {
        let keys = Keys::current(key(1));
        let object = stored("web", "", NOW);
        for (entry, why) in [
            ("sidecar", Refusal::Unsigned),
            ("sidecar/3", Refusal::Unsigned),
            ("sidecar/3/t=abc/xyz", Refusal::Malformed),
            ("sidecar/3/4/t=1/xyz", Refusal::Malformed),
            ("sidecar//t=1/xyz", Refusal::Malformed),
            ("sidecar/3/x/y/z", Refusal::Malformed),
            (&format!("sidecar/3/t={NOW}/not-base64!"), Refusal::BadMac),
            (&format!("sidecar/3/t={NOW}/"), Refusal::BadMac),
            (
                &format!("sidecar/3/t={NOW}/{}", URL_SAFE_NO_PAD.encode([0u8; 32])),
                Refusal::BadMac,
            ),
        ] {
            assert_eq!(
                verify_entry(&keys, "sidecar", entry, &object),
                Err(why),
                "{entry}"
            );
        }
        assert_eq!(unsigned("sidecar", Some(3)), "sidecar/3");
        assert_eq!(unsigned("sidecar", None), "sidecar");
    }

    #[test]
    fn the_annotation_is_searched_for_a_valid_entry_of_the_initializer() {
        let keys = Keys::current(key(1));
        let object = stored("web", "", NOW);
        let good = sign(&key(1), "sidecar", Some(3), &named("web"), NOW);
        let value = format!("proxy/2/t={NOW}/abc, sidecar/1,{good}");
        assert_eq!(verify(&keys, "sidecar", Some(&value), &object), Ok(()));
        assert_eq!(
            verify(&keys, "sidecar", Some("proxy/2, sidecar/3"), &object),
            Err(Refusal::Unsigned)
        );
        assert_eq!(
            verify(&keys, "sidecar", Some("sidecar-2/1"), &object),
            Err(Refusal::Absent)
        );
        assert_eq!(
            verify(&keys, "sidecar", None, &object),
            Err(Refusal::Absent)
        );
        // Another initializer's valid mark is not this one's.
        assert_eq!(
            verify(&keys, "proxy", Some(&good), &object),
            Err(Refusal::Absent)
        );
    }

    #[test]
    fn the_key_comes_from_the_pem_as_rustls_reads_it() {
        // A PKCS#8 block among other text, as in a tls.key with a certificate before it.
        let der = [7u8; 40];
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
             -----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        assert_eq!(
            MarkKey::from_serving_key_pem(pem.as_bytes()).unwrap(),
            MarkKey::from_serving_key_der(&der)
        );
        assert!(MarkKey::from_serving_key_pem(b"no key here").is_err());
        assert_ne!(key(1), key(2));
        assert_eq!(format!("{:?}", key(1)), "MarkKey(..)");
        assert_eq!(
            MarkKey::from_bytes(key(1).to_bytes()),
            key(1),
            "kept and read back"
        );
    }
}

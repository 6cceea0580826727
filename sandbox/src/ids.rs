//! Random identifiers the server makes up: object uids, admission request uids and the suffix
//! `generateName` and the Deployment controller append.

use rand::Rng;

/// A random version-4 UUID, as `metadata.uid` and `AdmissionReview.request.uid` carry.
pub fn new_uid() -> String {
    let mut rng = rand::rng();
    let a: u32 = rng.random();
    let b: u16 = rng.random();
    let c: u16 = rng.random::<u16>() & 0x0fff;
    let d: u16 = (rng.random::<u16>() & 0x3fff) | 0x8000;
    let e: u64 = rng.random::<u64>() & 0xffff_ffff_ffff;
    format!("{a:08x}-{b:04x}-4{c:03x}-{d:04x}-{e:012x}")
}

/// The characters Kubernetes spells generated names and hashes with (no vowels, no `0`, `1`, `3`:
/// nothing that reads as a word).
pub const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Five characters from [`SAFE_ALPHABET`], as `generateName` and controllers' pod names append.
pub fn name_suffix() -> String {
    let mut rng = rand::rng();
    (0..5)
        .map(|_| SAFE_ALPHABET[rng.random_range(0..SAFE_ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_look_like_version_4_uuids_and_differ() {
        let a = new_uid();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_uid());
    }

    #[test]
    fn name_suffixes_have_five_characters_without_vowels() {
        let s = name_suffix();
        assert_eq!(s.len(), 5);
        assert!(!s.contains(['a', 'e', 'i', 'o', 'u']));
    }
}

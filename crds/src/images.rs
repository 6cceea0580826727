//! Image names shared by the bundle, the kind recipe and the sandbox's image map, and the
//! two ways a reference names an image's content: a tag, which can move, and a digest, which
//! cannot (what a release pins).

use std::fmt;

/// Registry and organisation every image lives under.
pub const REGISTRY: &str = "ghcr.io/initializer-dev";
/// Tag of every image: the workspace version.
pub const TAG: &str = env!("CARGO_PKG_VERSION");

/// Binary (and image repository) name of the operator.
pub const OPERATOR: &str = "initializer-operator";
/// Binary (and image repository) name of the built-in preset initializer.
pub const PRESET_INITIALIZER: &str = "preset-initializer";
/// Binaries of the example initializers.
pub const EXAMPLE_INITIALIZERS: [&str; 4] = [
    "sidecar-initializer",
    "test-certs-initializer",
    "proxy-initializer",
    "secret-guard-initializer",
];

/// Full image reference of one of our binaries: `ghcr.io/initializer-dev/<binary>:<version>`.
pub fn image(binary: &str) -> String {
    format!("{REGISTRY}/{binary}:{TAG}")
}

/// What a [`Reference`] names after its repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// `:tag`: whatever the registry serves under that tag now.
    Tag(String),
    /// `@sha256:…`: exactly that content.
    Digest(String),
}

/// An image reference split as a chart's values hold it: `repository:tag` or
/// `repository@sha256:<64 hex digits>`. A reference with both a tag and a digest, or with
/// neither, is not one: a release names every image by exactly one of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Registry host (and port), then the path: `127.0.0.1:5000/initializer-dev/preset-initializer`.
    pub repository: String,
    /// Its tag or its digest.
    pub pin: Pin,
}

impl Reference {
    /// Parses `text`, or `None` when it is not `repository:tag` or `repository@sha256:…`.
    pub fn parse(text: &str) -> Option<Self> {
        let (repository, pin) = match text.split_once('@') {
            Some((repository, digest)) => {
                let hex = digest.strip_prefix("sha256:")?;
                let lower_hex = hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                (hex.len() == 64 && lower_hex).then_some(())?;
                (repository, Pin::Digest(digest.to_string()))
            }
            None => {
                let (repository, tag) = text.rsplit_once(':')?;
                // A colon before the last slash is a registry's port, not a tag.
                (!tag.is_empty() && !tag.contains('/')).then_some(())?;
                (repository, Pin::Tag(tag.to_string()))
            }
        };
        let last = repository.rsplit('/').next().unwrap_or_default();
        (!repository.is_empty() && !last.is_empty() && !last.contains(':')).then(|| Self {
            repository: repository.to_string(),
            pin,
        })
    }

    /// The digest, when the reference is pinned to one.
    pub fn digest(&self) -> Option<&str> {
        match &self.pin {
            Pin::Digest(digest) => Some(digest),
            Pin::Tag(_) => None,
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pin {
            Pin::Tag(tag) => write!(f, "{}:{tag}", self.repository),
            Pin::Digest(digest) => write!(f, "{}@{digest}", self.repository),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_reference_is_a_repository_and_a_tag_or_a_digest() {
        let tagged = Reference::parse("localhost:5000/op:1.2").unwrap();
        assert_eq!(tagged.repository, "localhost:5000/op");
        assert_eq!(tagged.pin, Pin::Tag("1.2".to_string()));
        assert_eq!(tagged.digest(), None);
        let pinned = Reference::parse(&format!("127.0.0.1:5000/a/op@{DIGEST}")).unwrap();
        assert_eq!(pinned.repository, "127.0.0.1:5000/a/op");
        assert_eq!(pinned.digest(), Some(DIGEST));
        for text in [
            "localhost:5000/op:1.2",
            &format!("127.0.0.1:5000/a/op@{DIGEST}"),
        ] {
            assert_eq!(Reference::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn what_names_no_content_or_two_is_not_a_reference() {
        let upper = DIGEST.to_uppercase().replace("SHA256", "sha256");
        for text in [
            "localhost:5000/op",
            "op",
            "op:",
            ":1.2",
            "op@sha256:abc",
            "op@sha512:0123",
            &format!("op@{upper}"),
            &format!("op:1.2@{DIGEST}"),
            &format!("@{DIGEST}"),
        ] {
            assert_eq!(Reference::parse(text), None, "{text}");
        }
    }

    #[test]
    fn image_names_follow_registry_binary_tag() {
        assert_eq!(
            image(OPERATOR),
            format!(
                "ghcr.io/initializer-dev/initializer-operator:{}",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}

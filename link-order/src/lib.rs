//! Hot functions first: what a build script calls to have the linker place the functions a
//! profile saw run (`make link-order` records them) together at the start of `.text`.
//!
//! Why: the kernel maps a binary's code 64 KiB at a time around each page it faults in, so code
//! that runs spread thinly over a large binary makes most of it resident. An initializer runs a
//! small part of its code, scattered over all of it; packed together, that part is about all
//! that stays resident (the figures: `docs/src/design/2026-11-sdk-overhead.md`).
//!
//! Two opt-in switches, both set by the image build:
//! - `INITIALIZER_LINK_ORDER=1`: the ordering. It needs lld's `--symbol-ordering-file`, so it
//!   applies on x86_64-unknown-linux-gnu with rustc's default linker (lld) only; with another
//!   target or a linker of one's own (GNU ld and mold have no such option) the build warns and
//!   links as usual.
//! - `INITIALIZER_PACK_RELOCS=1`: with the ordering, the relative relocations packed
//!   (`-z pack-relative-relocs`). The loader then reads a few KiB of them at start instead of
//!   the hundreds of KiB that stayed resident; the binary needs glibc 2.36 or later to start (Debian 12,
//!   the image's base). `make bench` sets it when the machine's glibc has it.
//!
//! A list from an older build only loses its effect: names it gives that the binary no longer
//! has are skipped. The features cargo unifies across the packages of one build take part in the
//! symbols' names, so a list holds for a build of its package alone, the way its image is built:
//! `make link-order` records it from such a build (the directory does not matter).

use std::path::Path;

/// The variable that turns the ordering on.
pub const SWITCH: &str = "INITIALIZER_LINK_ORDER";

/// The variable that also packs the relative relocations.
pub const PACK_RELOCS: &str = "INITIALIZER_PACK_RELOCS";

/// The only target whose default linker is known to read an ordering file.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// The list's file name, in the package's directory.
pub const LIST: &str = "link-order.txt";

/// What the build environment says, as far as the plan needs it.
#[derive(Debug, Clone, Default)]
pub struct Build<'a> {
    /// `INITIALIZER_LINK_ORDER`.
    pub switch: Option<&'a str>,
    /// `INITIALIZER_PACK_RELOCS`.
    pub pack_relocs: Option<&'a str>,
    /// The target triple.
    pub target: &'a str,
    /// A linker chosen in cargo's configuration (`RUSTC_LINKER`) or rustflags (`-C linker`,
    /// `-fuse-ld`), which may not read the list.
    pub own_linker: bool,
}

/// What a build script asks of cargo for this package's binaries.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Link as usual.
    Off,
    /// Asked for where the linker may not read the list: say why, link as usual.
    Unsupported { why: String },
    /// Pass the list to the linker.
    Order { link_args: Vec<String> },
}

/// The plan for `build`, with the list at `list`.
pub fn plan(build: &Build<'_>, list: &Path) -> Plan {
    if build.switch != Some("1") {
        return Plan::Off;
    }
    if build.target != TARGET {
        return Plan::Unsupported {
            why: format!(
                "on {}: only {TARGET}'s default linker is known to read a symbol ordering file",
                build.target
            ),
        };
    }
    if build.own_linker {
        return Plan::Unsupported {
            why: "with a linker of one's own: only lld, rustc's default here, reads a symbol ordering file".to_owned(),
        };
    }
    let mut link_args = vec![
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        // Names from an older build are expected; they are skipped either way.
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    if build.pack_relocs == Some("1") {
        link_args.push("-Wl,-z,pack-relative-relocs".to_owned());
    }
    Plan::Order { link_args }
}

/// Whether cargo's configuration or rustflags choose a linker.
fn own_linker() -> bool {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    std::env::var_os("RUSTC_LINKER").is_some()
        || flags.split('\x1f').any(|flag| {
            flag.contains("-fuse-ld=")
                || flag.starts_with("-Clinker=")
                || flag.starts_with("linker=")
        })
}

/// Called from the `build.rs` of the package at `package` (its directory relative to the
/// workspace root): the list is `<package>/link-order.txt`.
///
/// The linker gets the list's path relative to the workspace root, where cargo runs rustc for a
/// workspace member, so the link is the same in any checkout (an image build's included).
pub fn apply(package: &str) {
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed={SWITCH}");
    println!("cargo:rerun-if-env-changed={PACK_RELOCS}");
    let switch = std::env::var(SWITCH).ok();
    let pack_relocs = std::env::var(PACK_RELOCS).ok();
    let target = std::env::var("TARGET").unwrap_or_default();
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let build = Build {
        switch: switch.as_deref(),
        pack_relocs: pack_relocs.as_deref(),
        target: &target,
        own_linker: own_linker(),
    };
    match plan(&build, &Path::new(package).join(LIST)) {
        Plan::Off => {}
        Plan::Unsupported { why } => println!("cargo:warning={SWITCH}=1 is ignored {why}"),
        // The list's path given to the linker would not lead to it.
        Plan::Order { .. } if !Path::new(&manifest_dir).ends_with(package) => println!(
            "cargo:warning={SWITCH}=1 is ignored: this package is at {manifest_dir}, not at {package} in its workspace"
        ),
        Plan::Order { link_args } => {
            for arg in link_args {
                println!("cargo:rustc-link-arg-bins={arg}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST_PATH: &str = "initializers/preset/link-order.txt";

    fn on(switch: &str) -> Build<'_> {
        Build {
            switch: Some(switch),
            target: TARGET,
            ..Build::default()
        }
    }

    #[test]
    fn only_the_switch_set_to_one_turns_it_on() {
        let list = Path::new(LIST_PATH);
        let off = Build {
            target: TARGET,
            ..Build::default()
        };
        assert_eq!(plan(&off, list), Plan::Off);
        assert_eq!(plan(&on("0"), list), Plan::Off);
        assert_eq!(plan(&on("yes"), list), Plan::Off);
        assert_eq!(
            plan(&on("1"), list),
            Plan::Order {
                link_args: vec![
                    format!("-Wl,--symbol-ordering-file={LIST_PATH}"),
                    "-Wl,--no-warn-symbol-ordering".to_owned(),
                ]
            }
        );
    }

    #[test]
    fn relocations_are_packed_only_when_asked_as_well() {
        let list = Path::new(LIST_PATH);
        let packed = Build {
            pack_relocs: Some("1"),
            ..on("1")
        };
        assert!(matches!(
            plan(&packed, list),
            Plan::Order { link_args }
                if link_args.last().map(String::as_str) == Some("-Wl,-z,pack-relative-relocs")
        ));
        // Packing alone does nothing: it rides on the ordered link.
        let alone = Build {
            switch: None,
            pack_relocs: Some("1"),
            target: TARGET,
            own_linker: false,
        };
        assert_eq!(plan(&alone, list), Plan::Off);
    }

    #[test]
    fn other_targets_and_own_linkers_link_as_usual() {
        let list = Path::new(LIST_PATH);
        let arm = Build {
            target: "aarch64-unknown-linux-gnu",
            ..on("1")
        };
        assert!(matches!(plan(&arm, list), Plan::Unsupported { why } if why.contains("aarch64")));
        let mold = Build {
            own_linker: true,
            ..on("1")
        };
        assert!(matches!(plan(&mold, list), Plan::Unsupported { why } if why.contains("linker")));
    }
}

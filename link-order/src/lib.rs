//! Hot functions first: what a build script calls to have the linker place the functions a
//! profile saw run (`make link-order` records them) together at the start of `.text`.
//!
//! Why: the kernel maps a binary's code 64 KiB at a time around each page it faults in, so code
//! that runs spread thinly over a large binary makes most of it resident. The preset
//! initializer runs 1.3 MiB of functions scattered over 8.5 MiB of code, and 6.2 MiB of it was
//! resident; packed, 2.8 MiB is.
//!
//! The same switch packs the relative relocations (`-z pack-relative-relocs`): the loader then
//! reads a few KiB of them at start instead of 620 KiB, which stayed resident. The binary then
//! needs glibc 2.36 or later (Debian 12, the image's base).
//!
//! Opt-in (`INITIALIZER_LINK_ORDER=1`, which `make bench` and the image build set) because it
//! needs a linker that reads `--symbol-ordering-file` (lld, mold): rustc's default on
//! x86_64-unknown-linux-gnu, not GNU ld. Other targets build as usual, with a warning. A list
//! from an older build only loses its effect: names it gives that the binary no longer has are
//! skipped. The features cargo unifies across the packages of one build take part in the
//! symbols' names, so a list holds for a build of its package alone, the way its image is built:
//! `make link-order` records it from such a build (the directory does not matter).

use std::path::Path;

/// The variable that turns the ordering on.
pub const SWITCH: &str = "INITIALIZER_LINK_ORDER";

/// The only target whose default linker is known to read an ordering file.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// What a build script asks of cargo for this package's binaries.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Link as usual.
    Off,
    /// Asked for on a target whose default linker may not read the list: say so, link as usual.
    Unsupported { target: String },
    /// Pass the list to the linker.
    Order { link_args: Vec<String> },
}

/// The plan for `target`, with the switch set to `switch` and the list at `list`.
pub fn plan(switch: Option<&str>, target: &str, list: &Path) -> Plan {
    if switch != Some("1") {
        return Plan::Off;
    }
    if target != TARGET {
        return Plan::Unsupported {
            target: target.to_owned(),
        };
    }
    Plan::Order {
        link_args: vec![
            format!("-Wl,--symbol-ordering-file={}", list.display()),
            // Names from an older build are expected; they are skipped either way.
            "-Wl,--no-warn-symbol-ordering".to_owned(),
            "-Wl,-z,pack-relative-relocs".to_owned(),
        ],
    }
}

/// The list's file name, in the package's directory.
pub const LIST: &str = "link-order.txt";

/// Called from the `build.rs` of the package at `package` (its directory relative to the
/// workspace root): the list is `<package>/link-order.txt`.
///
/// The linker gets the list's path relative to the workspace root, where cargo runs rustc for a
/// workspace member, so the link is the same in any checkout (an image build's included).
pub fn apply(package: &str) {
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed={SWITCH}");
    let switch = std::env::var(SWITCH).ok();
    let target = std::env::var("TARGET").unwrap_or_default();
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    if switch.as_deref() == Some("1") && !Path::new(&manifest_dir).ends_with(package) {
        println!(
            "cargo:warning={SWITCH}=1 is ignored: this package is at {manifest_dir}, not at {package} in its workspace"
        );
        return;
    }
    match plan(switch.as_deref(), &target, &Path::new(package).join(LIST)) {
        Plan::Off => {}
        Plan::Unsupported { target } => println!(
            "cargo:warning={SWITCH}=1 is ignored on {target}: only {TARGET}'s default linker is known to read a symbol ordering file"
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

    #[test]
    fn only_the_switch_set_to_one_turns_it_on() {
        let list = Path::new("initializers/preset/link-order.txt");
        assert_eq!(plan(None, TARGET, list), Plan::Off);
        assert_eq!(plan(Some("0"), TARGET, list), Plan::Off);
        assert_eq!(plan(Some("yes"), TARGET, list), Plan::Off);
        assert_eq!(
            plan(Some("1"), TARGET, list),
            Plan::Order {
                link_args: vec![
                    "-Wl,--symbol-ordering-file=initializers/preset/link-order.txt".to_owned(),
                    "-Wl,--no-warn-symbol-ordering".to_owned(),
                    "-Wl,-z,pack-relative-relocs".to_owned(),
                ]
            }
        );
    }

    #[test]
    fn other_targets_link_as_usual() {
        assert_eq!(
            plan(
                Some("1"),
                "aarch64-unknown-linux-gnu",
                Path::new("/w/link-order.txt")
            ),
            Plan::Unsupported {
                target: "aarch64-unknown-linux-gnu".to_owned()
            }
        );
    }
}

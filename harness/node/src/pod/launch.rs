//! What a container runs: its executable, arguments and working directory, from its spec, its
//! image's executable and where its volumes live; and why it runs nothing when its image maps
//! to no executable. The worker reads the image map and starts the process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

use crate::Error;
use crate::env;
use crate::imagemap::ImageMap;
use crate::volume::Mounts;

/// The process a container starts as, before its environment is added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entrypoint {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
}

/// Why `image` runs nothing: the image map failed to load, the image is not in `file`, or the
/// node has no image map.
pub(super) fn unmapped(images: &Result<ImageMap, Error>, file: Option<&Path>) -> String {
    match (images, file) {
        (Err(e), _) => e.to_string(),
        (Ok(_), Some(file)) => format!("image is not in the sandbox image map {}", file.display()),
        (Ok(_), None) => "the sandbox has no image map".into(),
    }
}

/// The container's environment with values under a mount path pointing at the volume's
/// directory on the host.
pub(super) fn mounted_env(
    mut env: BTreeMap<String, String>,
    mounts: &Mounts,
) -> BTreeMap<String, String> {
    for v in env.values_mut() {
        *v = mounts.rewrite(v);
    }
    env
}

/// What `spec` runs. The image's executable (`image_program`) is the entrypoint: `command[0]`
/// names it unless it is itself a mapped executable; `command[1..]` and `args` follow, with
/// `$(VAR)` expanded from `env` and mount paths rewritten. The working directory is
/// `workingDir` (rewritten the same way), else the pod's directory.
pub(super) fn entrypoint(
    spec: &Container,
    image_program: PathBuf,
    images: &ImageMap,
    env: &BTreeMap<String, String>,
    mounts: &Mounts,
    pod_dir: &Path,
) -> Entrypoint {
    let command = spec.command.as_deref().unwrap_or_default();
    let (program, rest) = match command.split_first() {
        Some((first, rest)) => {
            let first = PathBuf::from(mounts.rewrite(&env::expand(first, env)));
            let program = if images.contains_executable(&first) {
                first
            } else {
                image_program
            };
            (program, rest)
        }
        None => (image_program, &[][..]),
    };
    let args = rest
        .iter()
        .chain(spec.args.iter().flatten())
        .map(|a| mounts.rewrite(&env::expand(a, env)))
        .collect();
    let cwd = match spec.working_dir.as_deref().filter(|w| !w.is_empty()) {
        Some(w) => PathBuf::from(mounts.rewrite(w)),
        None => pod_dir.to_path_buf(),
    };
    Entrypoint { program, args, cwd }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::VolumeMount;

    use super::*;

    const MAP: &str = "example/app: /opt/app\nexample/tool: /opt/tool\n";

    fn images() -> ImageMap {
        ImageMap::parse(MAP, Path::new("/")).unwrap()
    }

    fn mounts() -> Mounts {
        let spec = Container {
            volume_mounts: Some(vec![VolumeMount {
                name: "config".into(),
                mount_path: "/etc/app".into(),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        };
        Mounts::of(
            &spec,
            &BTreeMap::from([("config".to_owned(), PathBuf::from("/pods/p/volumes/config"))]),
        )
    }

    fn spec(command: &[&str], args: &[&str]) -> Container {
        let strings = |s: &[&str]| Some(s.iter().map(|s| (*s).to_owned()).collect());
        Container {
            name: "app".into(),
            command: if command.is_empty() {
                None
            } else {
                strings(command)
            },
            args: if args.is_empty() { None } else { strings(args) },
            ..Container::default()
        }
    }

    fn run(spec: &Container, env: &BTreeMap<String, String>) -> Entrypoint {
        entrypoint(
            spec,
            PathBuf::from("/opt/app"),
            &images(),
            env,
            &mounts(),
            Path::new("/pods/p"),
        )
    }

    #[test]
    fn without_a_command_the_image_runs_with_the_args_in_the_pod_directory() {
        let e = run(&spec(&[], &["--port", "8443"]), &BTreeMap::new());
        assert_eq!(
            e,
            Entrypoint {
                program: PathBuf::from("/opt/app"),
                args: vec!["--port".into(), "8443".into()],
                cwd: PathBuf::from("/pods/p"),
            }
        );
    }

    #[test]
    fn the_first_command_word_is_replaced_by_the_images_executable_unless_it_is_mapped() {
        let e = run(&spec(&["/usr/bin/app", "serve"], &["-v"]), &BTreeMap::new());
        assert_eq!(e.program, PathBuf::from("/opt/app"));
        assert_eq!(e.args, ["serve", "-v"]);
        let e = run(&spec(&["/opt/tool", "check"], &[]), &BTreeMap::new());
        assert_eq!(e.program, PathBuf::from("/opt/tool"));
        assert_eq!(e.args, ["check"]);
    }

    #[test]
    fn arguments_expand_variables_and_follow_mounts() {
        let env = BTreeMap::from([("CONFIG".to_owned(), "/etc/app/config.yaml".to_owned())]);
        let mut s = spec(
            &["app", "--config=$(CONFIG)"],
            &["/etc/app/extra", "/etc/other"],
        );
        s.working_dir = Some("/etc/app".into());
        let e = run(&s, &env);
        assert_eq!(
            e.args,
            [
                // Only a value that is a mount path or under one is rewritten.
                "--config=/etc/app/config.yaml",
                "/pods/p/volumes/config/extra",
                "/etc/other",
            ]
        );
        assert_eq!(e.cwd, PathBuf::from("/pods/p/volumes/config"));
    }

    #[test]
    fn environment_values_under_a_mount_point_at_the_volume() {
        let env = BTreeMap::from([
            ("CONFIG".to_owned(), "/etc/app/config.yaml".to_owned()),
            ("MODE".to_owned(), "fast".to_owned()),
        ]);
        let env = mounted_env(env, &mounts());
        assert_eq!(env["CONFIG"], "/pods/p/volumes/config/config.yaml");
        assert_eq!(env["MODE"], "fast");
    }

    #[test]
    fn an_unmapped_image_says_which_map_was_looked_at() {
        let file = Path::new("/etc/images.yaml");
        assert_eq!(
            unmapped(&Ok(images()), Some(file)),
            "image is not in the sandbox image map /etc/images.yaml"
        );
        assert_eq!(
            unmapped(&Ok(ImageMap::default()), None),
            "the sandbox has no image map"
        );
        assert_eq!(
            unmapped(&Err(Error::ImageMap("bad yaml".into())), Some(file)),
            "failed to load image map: bad yaml"
        );
    }
}

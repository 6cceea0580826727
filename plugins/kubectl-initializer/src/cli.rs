//! The command line, in kubectl's conventions: `--kubeconfig` (else `KUBECONFIG`, else
//! `~/.kube/config`), `--context`, `-n/--namespace`, `-o json|yaml`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::output::Format;

/// Inspect and operate Initializers (initializer.dev): status, break-glass suspend and resume,
/// a probe now, and why an object was or was not intercepted.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-initializer",
    bin_name = "kubectl initializer",
    version
)]
#[command(
    after_help = "Exit status: 0 on success; 1 when anything failed (an unknown Initializer \
or object, an API error, a failed probe, --wait running out of time, `diff`'s two engines \
disagreeing); 2 for a malformed command line; 3 when `diff` cannot know a change offline (an \
Initializer with its own image is called for an object). Errors are printed on stderr."
)]
pub struct Cli {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Namespace of the object for `why KIND/NAME` and of files without one (default: the
    /// context's namespace; for `diff`, which reads no kubeconfig, `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Output format: text (a table or sentences), json or yaml.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// The operator's namespace (default: found from its pods, labelled
    /// app.kubernetes.io/name=initializer-operator; for `diff`, initializer-system); needed for
    /// an Initializer that is not registered and for a preset's compiled policy.
    #[arg(long, global = true, value_name = "NAMESPACE")]
    pub operator_namespace: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every Initializer (or one) with its phase, registration, health, last probe and the
    /// serving certificate's expiry, as the operator reports them in the status.
    Status {
        /// Only this Initializer.
        name: Option<String>,
    },
    /// Break-glass: set the annotation initializer.dev/break-glass, so the operator removes the
    /// webhook configuration and keeps it removed (the workload keeps running). Server-side
    /// apply with the field manager `kubectl-initializer`: a GitOps sync of the spec, even one
    /// that states `suspend: false` and forces, leaves it in place.
    Suspend(Suspend),
    /// Remove the break-glass annotation and clear spec.suspend: the operator registers the
    /// configuration again once the initializer is ready and answering. A spec.suspend that a
    /// GitOps tool applies comes back at its next sync: clear it where the spec comes from.
    Resume(Switch),
    /// Run one probe now and print the answer and its latency.
    ///
    /// The probe is the operator's own synthetic dry-run AdmissionReview (a CREATE of a minimal
    /// object of the first rule's kind), POSTed through the API server's service proxy:
    /// POST /api/v1/namespaces/NS/services/https:SERVICE:443/proxy/initialize, to the Service the
    /// registered configuration names (or, when none is registered, the one the operator deploys).
    /// The latency includes the hop through the API server. Unlike the operator's probe, this
    /// path reaches one ready endpoint chosen by the API server, and the API server's proxy does
    /// not verify the serving certificate against the caBundle: `status` shows the operator's
    /// last verified probe. Exits 1 when the answer is not a well-formed review.
    Probe {
        /// The Initializer.
        name: String,
        /// How long to wait for the answer (default: the Initializer's timeoutSeconds).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
    },
    /// For each Initializer, whether an object is intercepted and, if not, exactly why: rule,
    /// namespace selector, object selector, annotation gate, mandatory exclusion, or not
    /// registered right now.
    ///
    /// Evaluated against the live MutatingWebhookConfiguration (the truth) and the Initializer's
    /// spec (for the annotation gate and to tell the user's selectors from the operator's
    /// mandatory exclusions); for an Initializer that is not registered, also against the
    /// configuration the operator would register.
    Why {
        /// The object, as KIND/NAME (`deployment/nginx`, `pods/web-0`, `deployments.apps/x`),
        /// in -n NAMESPACE.
        object: Option<String>,
        /// A file with the object (YAML or JSON; `-` for stdin), as it would be created.
        #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "object")]
        filename: Option<PathBuf>,
        /// The operation to evaluate.
        #[arg(long, default_value = "CREATE", value_parser = ["CREATE", "UPDATE", "DELETE", "CONNECT"])]
        operation: String,
    },
    /// The exact change an Initializer would make to the objects of a manifest, offline, as a
    /// unified diff of their YAML (`-o json|yaml`: also as JSON patches).
    ///
    /// The files hold the Initializer (apiVersion initializer.dev/v1alpha1) and the objects to
    /// create, in any order and in as many files and YAML documents as you like; each
    /// Initializer is applied alone to every other object. For a preset, the change is computed
    /// twice, by the preset initializer's own code within the scope the operator would register
    /// and by the MutatingAdmissionPolicy compiled from the preset (run by the compiler's
    /// interpreter); the two must agree, and when they do not both changes are printed and the
    /// exit status is 1. An object left alone says why (rule, namespace or object selector,
    /// annotation gate, mandatory exclusion, the preset's selector, or everything already
    /// there). An Initializer with its own image is code: whether it is called is known, what
    /// it changes is not (exit status 3).
    ///
    /// Nothing is read from a cluster: namespaces are taken to have only the label
    /// kubernetes.io/metadata.name (add more with --namespace-labels), objects without a
    /// namespace are in -n (default `default`), and the operator in --operator-namespace
    /// (default initializer-system). Each assumption is printed.
    Diff(DiffArgs),
}

/// Arguments of `diff`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).multiple(true).args(["filenames", "files"])))]
pub struct DiffArgs {
    /// A file with the Initializer and the objects (YAML or JSON, several documents, `List`s;
    /// `-` for stdin); repeat it, or name the files after the flags.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filenames: Vec<PathBuf>,
    /// More files, as with -f.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Labels every namespace is taken to have besides kubernetes.io/metadata.name, as
    /// KEY=VALUE (comma-separated or repeated): what a spec.namespaces.selector reads.
    #[arg(long, value_name = "KEY=VALUE", value_delimiter = ',', value_parser = parse_label)]
    pub namespace_labels: Vec<(String, String)>,
}

impl DiffArgs {
    /// Every file, `-f` ones first.
    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.filenames.iter().chain(&self.files)
    }
}

/// A label as `KEY=VALUE`.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!(
            "failed to read {text:?} as a label: write KEY=VALUE"
        )),
    }
}

/// Arguments of `suspend`.
#[derive(Debug, clap::Args)]
pub struct Suspend {
    #[command(flatten)]
    pub switch: Switch,
    /// Why, kept as the annotation's value for whoever looks next (the operator reads only
    /// whether the annotation is there).
    #[arg(long, default_value = "")]
    pub reason: String,
}

/// Arguments of `suspend` and `resume`.
#[derive(Debug, clap::Args)]
pub struct Switch {
    /// The Initializer.
    pub name: String,
    /// Wait until the operator reports the change (suspended and deregistered; or registered).
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// A duration as kubectl writes one: `90s`, `2m`, `500ms`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("failed to read {text:?} as a duration (use 30s, 2m or 500ms)"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!(
            "failed to read {text:?} as a duration (use 30s, 2m or 500ms)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kubectl_flags_are_global_and_come_before_or_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "kubectl-initializer",
            "--context",
            "kind-a",
            "why",
            "deployment/nginx",
            "-n",
            "shop",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.context.as_deref(), Some("kind-a"));
        assert_eq!(cli.namespace.as_deref(), Some("shop"));
        assert_eq!(cli.output, Format::Json);
        assert!(
            matches!(cli.command, Command::Why { ref object, .. } if object.as_deref() == Some("deployment/nginx"))
        );
    }

    #[test]
    fn an_unknown_format_or_both_an_object_and_a_file_are_refused() {
        assert!(Cli::try_parse_from(["k", "status", "-o", "wide"]).is_err());
        assert!(Cli::try_parse_from(["k", "why", "pod/x", "-f", "x.yaml"]).is_err());
        assert!(Cli::try_parse_from(["k", "why", "pod/x", "--operation", "PATCH"]).is_err());
    }

    #[test]
    fn diff_takes_files_after_f_or_alone_and_labels_as_key_value() {
        let cli = Cli::try_parse_from([
            "k",
            "diff",
            "-f",
            "initializer.yaml",
            "app.yaml",
            "more.yaml",
            "--namespace-labels",
            "team=web,env=prod",
            "--namespace-labels",
            "zone=a",
        ])
        .unwrap();
        let Command::Diff(args) = cli.command else {
            panic!("not diff: {:?}", cli.command);
        };
        let paths: Vec<String> = args.paths().map(|p| p.display().to_string()).collect();
        assert_eq!(paths, ["initializer.yaml", "app.yaml", "more.yaml"]);
        assert_eq!(
            args.namespace_labels,
            [
                ("team".to_string(), "web".to_string()),
                ("env".to_string(), "prod".to_string()),
                ("zone".to_string(), "a".to_string())
            ]
        );
        assert!(Cli::try_parse_from(["k", "diff", "-f", "a.yaml", "-f", "b.yaml"]).is_ok());
        assert!(
            Cli::try_parse_from(["k", "diff"]).is_err(),
            "a file is required"
        );
        assert!(
            Cli::try_parse_from(["k", "diff", "a.yaml", "--namespace-labels", "nolabel"]).is_err()
        );
    }

    #[test]
    fn durations_read_as_kubectl_writes_them() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3h").is_err());
    }
}

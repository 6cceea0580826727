//! Prints the API reference of the `Initializer` CRD as Markdown (`make generate` writes it to
//! `docs/api.md`), rendered from the same CustomResourceDefinition `crdgen` prints.

use std::process::ExitCode;

fn main() -> ExitCode {
    match initializer_crds::apidoc::initializer_reference() {
        Ok(doc) => {
            print!("{doc}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}

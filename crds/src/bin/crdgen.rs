//! Prints the `Initializer` CustomResourceDefinition as YAML (`make generate` writes it to
//! `crds/manifests/initializer.dev_initializers.yaml`).

fn main() -> Result<(), serde_saphyr::SerializeError> {
    print!("{}", initializer_crds::crd_yaml()?);
    Ok(())
}

//! `preset-initializer`: the built-in initializer driven only by config.yaml (a PresetConfig).

fn main() -> Result<(), kube_initializer::Error> {
    preset_initializer::initializer().main()
}

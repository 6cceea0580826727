//! Detects whether `kubectl` is on PATH, so the kubectl-driven tests are ignored (with a reason)
//! where it is absent instead of failing.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_kubectl)");
    println!("cargo::rerun-if-env-changed=PATH");
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join("kubectl").is_file()))
        .unwrap_or(false);
    if found {
        println!("cargo::rustc-cfg=has_kubectl");
    }
}

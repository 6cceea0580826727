//! `make cluster`: the real control plane (etcd, kube-apiserver, kube-controller-manager and
//! the node agent, in a network namespace of their own) with the operator installed from the
//! bundle, up until Ctrl-C. Prints the `export KUBECONFIG=...` that reaches it through the port
//! forward on 127.0.0.1; on Ctrl-C every process stops and the namespace is removed.

use anyhow::Context;
use initializer_e2e::env::Env;
use initializer_e2e::target::TargetChoice;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    initializer_telemetry::Logging::new()
        .filter("CLUSTER_LOG", "warn,kube_client=off")
        .stderr()
        .init();
    let env = tokio::select! {
        env = Env::start_with(TargetChoice::Real) => env.context("failed to start the cluster")?,
        _ = tokio::signal::ctrl_c() => return Ok(()),
    };
    let kubeconfig = env.kubeconfig_path().display().to_string();
    println!(
        "\nThe real control plane is up, with the operator installed in namespace {}.\n\n\
         export KUBECONFIG={kubeconfig}\n\
         kubectl get nodes,pods -A\n\
         kubectl apply -f examples/sidecar-initializer.yaml\n\
         kubectl get initializers -w\n\
         kubectl describe initializer sidecar\n\n\
         Components' logs are in {}; Ctrl-C stops everything.",
        env.operator_namespace,
        std::path::Path::new(&kubeconfig)
            .parent()
            .map(|dir| dir.join("logs").display().to_string())
            .unwrap_or_default()
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        err = env.target.failure() => eprintln!("cluster: {err:#}"),
    }
    eprintln!("cluster: stopping");
    env.shutdown().await;
    Ok(())
}

//! The probe calls the initializer as the API server does (every ready endpoint dialled, TLS
//! verified against the configuration's caBundle): a certificate the API server would reject and
//! a handler that panics under a fail-closed policy are never registered, one hung pod of two is
//! caught within a probe period, and a replaced CA stays trusted until every pod serves the new
//! one. The test initializer's switches (`TEST_INITIALIZER_*`) make the pods misbehave.

use std::time::{Duration, Instant};

use initializer_crds::Initializer;
use initializer_test_support::wait_until as wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::support::TestCluster;
use crate::{
    NS, configuration, create, create_registered, guard, initializer, is_ready, patch_spec,
    pods_of, start, wait_configuration_where, wait_pods, wait_ready_pod, wait_registered,
};

on_backends!(sandbox and real:
    a_certificate_the_api_server_would_reject_is_never_registered,
    a_handler_that_panics_under_a_fail_closed_policy_is_never_registered,
    one_hung_pod_of_two_is_caught_within_a_probe_period,
    a_replaced_ca_stays_trusted_until_every_pod_serves_the_new_one,
);

/// The certificate and key the test initializer serves instead of the mounted ones.
const CERT_ENV: &str = "TEST_INITIALIZER_CERT_PEM";

const KEY_ENV: &str = "TEST_INITIALIZER_KEY_PEM";

/// The guard `name` with `env` set on its pods (the test initializer's switches).
fn guard_with_env(name: &str, env: &[(&str, &str)]) -> Initializer {
    let mut init = guard(name);
    init.spec.env = env
        .iter()
        .map(|(name, value)| k8s_openapi::api::core::v1::EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            ..Default::default()
        })
        .collect();
    init
}

/// The `Responding` condition's reason and the last probe error of Initializer `name`.
async fn responding(client: &Client, name: &str) -> Option<(String, String)> {
    let status = initializer(client, name).await?.status?;
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Responding")?
        .reason
        .clone();
    let error = status
        .details
        .get("lastProbeError")
        .cloned()
        .unwrap_or_default();
    Some((reason, error))
}

/// Waits up to `timeout` until the probes of `name` fail with `reason` and an error containing
/// `part`, checking all along that the configuration never appears.
async fn wait_for_probe_failure(
    client: &Client,
    name: &str,
    reason: &str,
    part: &str,
    timeout: Duration,
) {
    let configuration_name = format!("initializer-{name}");
    let took = wait_for(
        &format!("probes of {name} failing with {reason} ({part:?})"),
        timeout,
        || {
            let (c, configuration_name) = (client.clone(), configuration_name.clone());
            async move {
                assert!(
                    configuration(&c, &configuration_name).await.is_none(),
                    "{configuration_name} was registered although every call to it would fail"
                );
                responding(&c, name)
                    .await
                    .is_some_and(|(r, error)| r == reason && error.contains(part))
            }
        },
    )
    .await;
    let (_, error) = responding(client, name).await.unwrap();
    println!("{name}: {reason} after {took:?}: {error}");
}

/// Patches the env of the guard `name`'s pods.
async fn set_guard_env(client: &Client, name: &str, env: &[(&str, &str)]) {
    let env: Vec<_> = env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    patch_spec(&Api::all(client.clone()), name, json!({"env": env})).await;
}

async fn a_certificate_the_api_server_would_reject_is_never_registered(cluster: &TestCluster) {
    use initializer_operator::{naming, tls};
    let (client, _operator) = start(cluster).await;
    let names = naming::names("pinned");
    let dns = tls::dns_names(&names.base, NS);
    let now = jiff::Timestamp::now();
    // Signed by a CA the configuration's caBundle does not carry.
    let stranger = tls::issue(&tls::new_ca(now).unwrap(), &dns, now).unwrap();
    let env: [(&str, &str); 2] = [(CERT_ENV, &stranger.cert_pem), (KEY_ENV, &stranger.key_pem)];
    create(&client, &guard_with_env("pinned", &env)).await;
    wait_for_probe_failure(
        &client,
        "pinned",
        "CertificateRejected",
        "UnknownIssuer",
        Duration::from_secs(90),
    )
    .await;
    // The path the probe used to take verifies nothing: through the API server's service
    // proxy the same pod answers well, which is how a wrong caBundle used to pass.
    assert!(answers_through_the_service_proxy(&client, "pinned").await);

    // The operator's CA, but a certificate for another name, then an expired one.
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get(&names.ca_secret)
        .await
        .unwrap();
    let data = secret.data.unwrap();
    let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
    let ca = tls::Ca {
        cert_pem: text("ca.crt"),
        key_pem: text("ca.key"),
    };
    let other_name = tls::issue(&ca, &tls::dns_names("someone-else", NS), now).unwrap();
    set_guard_env(
        &client,
        "pinned",
        &[
            (CERT_ENV, &other_name.cert_pem),
            (KEY_ENV, &other_name.key_pem),
        ],
    )
    .await;
    wait_for_probe_failure(
        &client,
        "pinned",
        "CertificateRejected",
        "not valid for name",
        Duration::from_secs(90),
    )
    .await;
    let long_ago = now - jiff::SignedDuration::from_hours(24 * 400);
    let expired = tls::issue(&ca, &dns, long_ago).unwrap();
    set_guard_env(
        &client,
        "pinned",
        &[(CERT_ENV, &expired.cert_pem), (KEY_ENV, &expired.key_pem)],
    )
    .await;
    wait_for_probe_failure(
        &client,
        "pinned",
        "CertificateRejected",
        "expired",
        Duration::from_secs(90),
    )
    .await;
    assert!(answers_through_the_service_proxy(&client, "pinned").await);

    // Serving the operator's own certificate again, it is registered.
    set_guard_env(&client, "pinned", &[]).await;
    wait_registered(
        &client,
        "pinned",
        "registration with the operator's certificate",
        Duration::from_secs(90),
    )
    .await;
}

async fn a_handler_that_panics_under_a_fail_closed_policy_is_never_registered(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    create(
        &client,
        &guard_with_env("panicky", &[("TEST_INITIALIZER_MODE", "panic")]),
    )
    .await;
    // The SDK denies with code 500 for a handler that panics under the guard's fail-closed
    // policy: registered, it would refuse every Secret in the cluster. The status says so
    // within a few probes of the pod being ready, whatever the earlier probes said (no ready
    // endpoint yet).
    wait_ready_pod(&client, "panicky").await;
    wait_for_probe_failure(
        &client,
        "panicky",
        "InternalError",
        "panic",
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        configuration(&client, "initializer-panicky")
            .await
            .is_none()
    );
}

async fn one_hung_pod_of_two_is_caught_within_a_probe_period(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let mut pair = guard("pair");
    pair.spec.replicas = 2;
    create_registered(&client, &pair).await;
    wait_pods(
        &client,
        "pair",
        "two ready pods",
        Duration::from_secs(60),
        |items| items.len() == 2 && items.iter().all(is_ready),
    )
    .await;
    // Both pods answered: the probe's latency with every endpoint dialled.
    wait_for("a good probe of both pods", Duration::from_secs(10), || {
        let c = client.clone();
        async move {
            responding(&c, "pair")
                .await
                .is_some_and(|(reason, _)| reason == "ProbeSucceeded")
        }
    })
    .await;
    measure_probe_latency(cluster, &client, "pair").await;

    let hung = pods_of(&client, "pair").await.remove(1);
    let ip = hung.status.as_ref().unwrap().pod_ip.clone().unwrap();
    cluster.freeze(NS, &hung.name_any()).await.unwrap();
    // The next probe round dials both and fails: the configuration steps out of the path
    // (degraded, then removed) within a probe period and the latency budget, not by chance.
    let what = "the configuration out of the path";
    let took = wait_configuration_where(
        &client,
        "initializer-pair",
        what,
        Duration::from_secs(3),
        |c| c.is_none_or(|c| initializer_operator::build::is_degraded(&c)),
    )
    .await;
    println!(
        "one hung pod of two took the configuration out of the path {took:?} after the freeze"
    );
    // The status follows the configuration's change (it is written after it), naming the pod.
    let endpoint = format!("{ip}:");
    wait_for(
        "the status to name the hung endpoint",
        Duration::from_secs(5),
        || {
            let (c, endpoint) = (client.clone(), endpoint.clone());
            async move {
                responding(&c, "pair").await.is_some_and(|(reason, error)| {
                    reason == "ProbeTimedOut" && error.contains(&endpoint)
                })
            }
        },
    )
    .await;
    cluster.thaw(NS, &hung.name_any()).await.unwrap();
}

async fn a_replaced_ca_stays_trusted_until_every_pod_serves_the_new_one(cluster: &TestCluster) {
    use base64::Engine as _;
    use initializer_operator::{naming, tls};
    let (client, _operator) = start(cluster).await;
    let names = naming::names("rotating");
    let dns = tls::dns_names(&names.base, NS);
    let now = jiff::Timestamp::now();
    // A CA seven years into its ten (due for replacement), and pods serving its certificate.
    let aged = tls::new_ca(now - jiff::SignedDuration::from_hours(24 * 365 * 7)).unwrap();
    let served = tls::issue(&aged, &dns, now).unwrap();
    let env: [(&str, &str); 2] = [(CERT_ENV, &served.cert_pem), (KEY_ENV, &served.key_pem)];
    create(&client, &guard_with_env("rotating", &env)).await;
    wait_for_probe_failure(
        &client,
        "rotating",
        "CertificateRejected",
        "UnknownIssuer",
        Duration::from_secs(90),
    )
    .await;
    // The operator finds the aged CA in its Secret, as after seven years of use: it replaces
    // it, and the pods still serving the aged CA's certificate must keep working.
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let aged_data = json!({"data": {
        "ca.crt": b64(&aged.cert_pem),
        "ca.key": b64(&aged.key_pem),
    }});
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let bundle = |c: MutatingWebhookConfiguration| {
        let hook = c.webhooks.unwrap().remove(0);
        String::from_utf8(hook.client_config.ca_bundle.unwrap().0).unwrap()
    };
    let took = wait_for(
        "registration with the aged CA's certificate",
        Duration::from_secs(60),
        || {
            let (c, secrets, aged_data) = (client.clone(), secrets.clone(), aged_data.clone());
            let (ca_secret, aged_pem) = (names.ca_secret.clone(), aged.cert_pem.clone());
            async move {
                if configuration(&c, "initializer-rotating").await.is_some() {
                    return true;
                }
                // A reconcile that read the Secret before the patch writes it back as it was:
                // patch again until the operator has seen the aged CA.
                let seen = secrets
                    .get(&ca_secret)
                    .await
                    .unwrap()
                    .data
                    .is_some_and(|d| {
                        d.get("ca.crt")
                            .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(&aged_pem))
                    });
                if !seen {
                    secrets
                        .patch(
                            &ca_secret,
                            &PatchParams::default(),
                            &Patch::Merge(&aged_data),
                        )
                        .await
                        .unwrap();
                }
                false
            }
        },
    )
    .await;
    let rotated = bundle(
        configuration(&client, "initializer-rotating")
            .await
            .unwrap(),
    );
    let blocks = tls::certificate_blocks(&rotated);
    assert_eq!(blocks.len(), 2, "the new CA and the aged one: {rotated}");
    assert_eq!(format!("{}\n", blocks[1]), aged.cert_pem);
    let new_ca = format!("{}\n", blocks[0]);
    println!("registered {took:?} after the CA was replaced, trusting both CAs");
    // The pods move to the operator's certificate (signed by the new CA): once the probe sees
    // every ready pod serving it, the aged CA leaves the bundle.
    set_guard_env(&client, "rotating", &[]).await;
    let what = "the aged CA to leave the bundle";
    let took = wait_configuration_where(
        &client,
        "initializer-rotating",
        what,
        Duration::from_secs(90),
        |c| c.is_some_and(|config| bundle(config) == new_ca),
    )
    .await;
    println!("the aged CA left the bundle {took:?} after the pods moved to the new certificate");
}

/// Whether the initializer `name` answers a probe review well when it is POSTed through the
/// API server's service proxy (the probe's former path), with the test's client.
async fn answers_through_the_service_proxy(client: &Client, name: &str) -> bool {
    use initializer_operator::probe;
    let target = probe::target_for(&guard(name).spec.rules);
    let body = serde_json::to_vec(&probe::review(&target, "through-the-proxy", "test")).unwrap();
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{NS}/services/https:{name}:443/proxy/initialize"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .unwrap();
    match client.request_text(request).await {
        Ok(text) => probe::check_answer(text.as_bytes(), "through-the-proxy").is_ok(),
        Err(e) => {
            println!("the service proxy failed: {e}");
            false
        }
    }
}

/// Prints the latency of the operator's probe (every ready endpoint dialled directly, TLS
/// verified against the caBundle; the same code and connector the operator runs) next to that
/// of the probe it replaced (a POST through the API server's service proxy), on the same
/// cluster and pods.
async fn measure_probe_latency(cluster: &TestCluster, client: &Client, name: &str) {
    use initializer_operator::probe;
    let slices =
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client.clone(), NS)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
            .await
            .unwrap()
            .items;
    let endpoints: Vec<_> = slices.iter().flat_map(probe::ready_addresses).collect();
    let config = configuration(client, &format!("initializer-{name}"))
        .await
        .unwrap();
    let bundle = config.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .unwrap()
        .0;
    let target = probe::target_for(&guard(name).spec.rules);
    let connector = cluster.probe_connector();
    let mut direct = Vec::new();
    for _ in 0..10 {
        let outcome = probe::probe(
            &connector,
            &probe::Round {
                service: name,
                namespace: NS,
                ca_bundle: &bundle,
                endpoints: &endpoints,
                target: &target,
                user: "test",
                budget: Duration::from_secs(2),
            },
        )
        .await;
        assert!(outcome.ok, "{outcome:?}");
        direct.push(outcome.latency.as_millis());
    }
    let path = format!("/api/v1/namespaces/{NS}/services/https:{name}:443/proxy/initialize");
    let mut proxied = Vec::new();
    for i in 0..10 {
        let body = serde_json::to_vec(&probe::review(&target, &format!("m{i}"), "test")).unwrap();
        let request = http::Request::post(&path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap();
        let started = Instant::now();
        client.request_text(request).await.unwrap();
        proxied.push(started.elapsed().as_millis());
    }
    direct.sort_unstable();
    proxied.sort_unstable();
    println!(
        "probe latency (ms), sorted: direct to all {} endpoints {direct:?}; one endpoint through the API server's service proxy (before) {proxied:?}",
        endpoints.len()
    );
}

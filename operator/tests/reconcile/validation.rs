//! Refusals: a spec the operator refuses is marked Invalid with the reason and never deployed
//! or registered, and rules the API server would refuse are refused first (or, reaching what is
//! protected, never stored: the CRD's CEL agrees with the validator's table).

use initializer_crds::Initializer;
use kube::Api;
use kube::api::PostParams;

use crate::support::{TestCluster, refusal};
use crate::{NS, configuration, guard, start, wait_for_event};

on_backends!(sandbox and real:
    a_refused_spec_is_marked_invalid_and_never_registered,
    rules_the_api_server_would_refuse_are_marked_invalid_and_protected_ones_never_stored,
);

async fn a_refused_spec_is_marked_invalid_and_never_registered(cluster: &TestCluster) {
    let (client, _operator) = start(cluster).await;
    let mut bad = guard("bad");
    bad.spec.namespaces = Some(initializer_crds::NamespaceScope {
        include: vec![NS.to_string()],
        ..Default::default()
    });
    let (valid, message) = refusal::create_and_wait_invalid(&client, &bad).await;
    assert_eq!(valid, "False");
    assert!(message.contains("operator's namespace"), "{message}");
    wait_for_event(&client, "Refused", "").await;
    assert!(configuration(&client, "initializer-bad").await.is_none());
    assert!(
        refusal::nothing_deployed(&client, NS, "bad").await,
        "nothing is deployed for a refused spec"
    );
}

async fn rules_the_api_server_would_refuse_are_marked_invalid_and_protected_ones_never_stored(
    cluster: &TestCluster,
) {
    let (client, _operator) = start(cluster).await;
    let api: Api<Initializer> = Api::all(client.clone());

    // The CRD's CEL rule refuses a wildcard reaching serviceaccounts/token at the API server.
    let mut token = guard("token");
    token.spec.rules[0].resources = vec!["serviceaccounts/*".into()];
    match api.create(&PostParams::default(), &token).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("must not intercept"), "{status:?}");
        }
        other => panic!("a rule reaching serviceaccounts/token was stored: {other:?}"),
    }
    // The API server's CEL evaluation of the generated rule agrees with the table the validator
    // reads (dry runs: nothing is stored).
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for (group, resource) in [
        ("", "*/*"),
        ("", "*"),
        ("", "nodes/status"),
        ("", "pods/*"),
        ("", "serviceaccounts"),
        ("*", "clusterroles"),
        ("*", "*/token"),
        ("*", "pods"),
        ("*", "deployments/scale"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("flowcontrol.apiserver.k8s.io", "anything"),
        ("apps", "*/*"),
    ] {
        let mut case = guard("case");
        case.spec.rules[0].api_groups = vec![group.into()];
        case.spec.rules[0].resources = vec![resource.into()];
        let protected = !initializer_crds::protected_reached(&[group.into()], resource).is_empty();
        match api.create(&dry_run, &case).await {
            Err(kube::Error::Api(status)) if protected && status.code == 422 => {
                assert!(status.message.contains("must not intercept"), "{status:?}")
            }
            Ok(_) if !protected => {}
            other => panic!("{group:?} {resource}: protected {protected}, got {other:?}"),
        }
    }

    // `*` beside another version passes the schema, but a webhook configuration with it would
    // be refused with a 422: the operator refuses the spec first.
    let mut versions = guard("versions");
    versions.spec.rules[0].api_versions = vec!["*".into(), "v1".into()];
    let (valid, message) = refusal::create_and_wait_invalid(&client, &versions).await;
    assert_eq!(valid, "False");
    assert!(message.contains("spec.rules[0].apiVersions"), "{message}");
    assert!(
        configuration(&client, "initializer-versions")
            .await
            .is_none()
    );
    assert!(
        refusal::nothing_deployed(&client, NS, "versions").await,
        "nothing is deployed for a refused spec"
    );
}

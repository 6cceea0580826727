//! CustomResourceDefinitions: serving, defaults and pruning, schema and CEL refusals, versions,
//! deletion, field validation and printer columns.

use initializer_e2e::conformance::Scoped;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{
    CONTROLLER_TIMEOUT, api_code, api_message, create, eventually, get_table, install_widgets,
    install_widgets_with, merge, merge_status, namespaced_crd, post, refused, widget, widget_crd,
    widget_resource,
};
use crate::target::Target;

pub async fn a_crd_serves_its_resource_with_defaults_status_and_established_condition(
    t: &Target,
) -> anyhow::Result<()> {
    let widgets = install_widgets(t).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client());
    let crd = crds.get(&format!("widgets.{}", t.group())).await?;
    let status = crd.status.unwrap();
    let conds = status.conditions.unwrap();
    for ty in ["NamesAccepted", "Established"] {
        assert!(
            conds.iter().any(|c| c.type_ == ty && c.status == "True"),
            "{ty} missing from {conds:?}"
        );
    }
    assert_eq!(status.accepted_names.unwrap().plural, "widgets");
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1", t.group()), "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"color": "red", "unknown": 1}, "status": {"phase": "ignored-on-create"}
    }))?;
    let created = create(&widgets, &w).await?;
    assert_eq!(created.data["spec"]["size"], 3);
    assert!(created.data["spec"].get("unknown").is_none());
    assert!(created.data.get("status").is_none());
    assert_eq!(created.metadata.generation, Some(1));
    let status = merge_status(&widgets, "w", json!({"status": {"phase": "Ready"}})).await?;
    assert_eq!(status.data["status"]["phase"], "Ready");
    let discovery = kube::Discovery::new(t.client()).run().await?;
    assert!(discovery.has_group(&t.group()));
    Ok(())
}

pub async fn a_crd_schema_rejects_invalid_objects_as_invalid(t: &Target) -> anyhow::Result<()> {
    let widgets = install_widgets(t).await?;
    let err = refused(
        create(
            &widgets,
            &widget(t, "w", json!({"color": "green", "size": 11})),
        )
        .await,
    )?;
    assert_eq!(api_code(&err), (422, "Invalid".into()));
    // Both fields are reported, in no particular order.
    let message = api_message(&err);
    assert!(
        message.starts_with(&format!("Widget.{} \"w\" is invalid: [", t.group())),
        "{message}"
    );
    for part in [
        "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"",
        "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    let err = refused(create(&widgets, &widget(t, "w", json!({"size": 2}))).await)?;
    assert_eq!(
        api_message(&err),
        format!(
            "Widget.{} \"w\" is invalid: spec.color: Required value",
            t.group()
        )
    );
    Ok(())
}

/// A CRD whose spec carries CEL rules: one with a message, one without, one on a field.
fn gadget_crd(group: &str) -> Value {
    namespaced_crd(
        group,
        "Gadget",
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                        {"rule": "self.max < 100"}
                    ],
                    "properties": {
                        "min": {"type": "integer"},
                        "max": {"type": "integer"},
                        "name": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                {"rule": "self.startsWith('g-')", "message": "must start with g-", "reason": "FieldValueForbidden"}
                            ]
                        },
                        "mode": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": "mode is immutable"}
                            ]
                        }
                    }
                }
            }
        }),
        json!({}),
    )
}

async fn install_gadgets(t: &Target) -> anyhow::Result<Api<DynamicObject>> {
    t.install_crd(gadget_crd(&t.group())).await?;
    Ok(Api::namespaced_with(
        t.client(),
        t.namespace(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(&t.group(), "v1", "Gadget"),
            "gadgets",
        ),
    ))
}

fn gadget(t: &Target, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{}/v1", t.group()), "kind": "Gadget",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// CEL refusals: 422 `Invalid`, the rule's message (or the rule itself) under the field's path,
/// one cause per failed rule, with the reason a rule names.
pub async fn cel_validation_refusals_are_invalid_with_the_rule_message(
    t: &Target,
) -> anyhow::Result<()> {
    let gadgets = install_gadgets(t).await?;
    create(
        &gadgets,
        &gadget(t, "ok", json!({"min": 1, "max": 2, "name": "g-1"})),
    )
    .await?;
    let err = refused(create(&gadgets, &gadget(t, "bad", json!({"min": 200, "max": 150}))).await)?;
    assert_eq!(api_code(&err), (422, "Invalid".into()));
    assert_eq!(
        api_message(&err),
        format!(
            "Gadget.{} \"bad\" is invalid: [spec: Invalid value: min must not exceed max, spec: Invalid value: failed rule: self.max < 100]",
            t.group()
        )
    );
    if let kube::Error::Api(s) = &err {
        let details = s.details.as_ref().expect("details");
        assert_eq!(details.name, "bad");
        assert_eq!(details.group, t.group());
        assert_eq!(details.kind, "Gadget");
        let causes: Vec<(&str, &str, &str)> = details
            .causes
            .iter()
            .map(|c| (c.reason.as_str(), c.field.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(
            causes,
            vec![
                (
                    "FieldValueInvalid",
                    "spec",
                    "Invalid value: min must not exceed max"
                ),
                (
                    "FieldValueInvalid",
                    "spec",
                    "Invalid value: failed rule: self.max < 100"
                ),
            ]
        );
    }
    let err = refused(
        create(
            &gadgets,
            &gadget(t, "named", json!({"min": 1, "max": 2, "name": "x"})),
        )
        .await,
    )?;
    assert_eq!(
        api_message(&err),
        format!(
            "Gadget.{} \"named\" is invalid: spec.name: Forbidden: must start with g-",
            t.group()
        )
    );
    if let kube::Error::Api(s) = &err {
        let cause = &s.details.as_ref().expect("details").causes[0];
        assert_eq!(cause.reason, "FieldValueForbidden");
        assert_eq!(cause.field, "spec.name");
    }
    Ok(())
}

/// Transition rules (`oldSelf`) apply on update only.
pub async fn cel_transition_rules_compare_with_the_old_object(t: &Target) -> anyhow::Result<()> {
    let gadgets = install_gadgets(t).await?;
    create(
        &gadgets,
        &gadget(t, "g", json!({"min": 1, "max": 2, "mode": "fast"})),
    )
    .await?;
    let err = refused(merge(&gadgets, "g", json!({"spec": {"mode": "slow"}})).await)?;
    assert_eq!(api_code(&err), (422, "Invalid".into()));
    assert_eq!(
        api_message(&err),
        format!(
            "Gadget.{} \"g\" is invalid: spec.mode: Invalid value: \"slow\": mode is immutable",
            t.group()
        )
    );
    merge(&gadgets, "g", json!({"spec": {"min": 1, "max": 1}})).await?;
    // A rule that cannot be evaluated refuses too, saying why and which rule.
    let err = refused(merge(&gadgets, "g", json!({"spec": {"min": null}})).await)?;
    assert_eq!(
        api_message(&err),
        format!(
            "Gadget.{} \"g\" is invalid: spec: Invalid value: \"object\": no such key: min evaluating rule: min must not exceed max",
            t.group()
        )
    );
    Ok(())
}

pub async fn deleting_a_crd_removes_its_objects_and_its_endpoint(t: &Target) -> anyhow::Result<()> {
    let (widgets, _) = install_widgets_with(t, "w", json!({"color": "red"})).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client());
    crds.delete(&format!("widgets.{}", t.group()), &DeleteParams::default())
        .await?;
    assert!(
        eventually(CONTROLLER_TIMEOUT, || async {
            matches!(widgets.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 404)
        })
        .await
    );
    assert!(
        eventually(CONTROLLER_TIMEOUT, || async {
            matches!(
                crds.get_opt(&format!("widgets.{}", t.group())).await,
                Ok(None)
            )
        })
        .await
    );
    Ok(())
}

pub async fn every_served_crd_version_reads_the_same_objects(t: &Target) -> anyhow::Result<()> {
    let mut crd = widget_crd(&t.group());
    let mut beta = crd["spec"]["versions"][0].clone();
    beta["name"] = json!("v1beta1");
    beta["storage"] = json!(false);
    crd["spec"]["versions"].as_array_mut().unwrap().push(beta);
    t.install_crd(crd).await?;
    let beta_api: Api<DynamicObject> = Api::namespaced_with(
        t.client(),
        t.namespace(),
        &widget_resource(&t.group(), "v1beta1"),
    );
    let w: DynamicObject = serde_json::from_value(
        json!({"apiVersion": format!("{}/v1beta1", t.group()), "kind": "Widget", "metadata": {"name": "w"}, "spec": {"color": "red"}}),
    )?;
    create(&beta_api, &w).await?;
    let v1 = Api::<DynamicObject>::namespaced_with(
        t.client(),
        t.namespace(),
        &widget_resource(&t.group(), "v1"),
    )
    .get("w")
    .await?;
    assert_eq!(v1.types.unwrap().api_version, format!("{}/v1", t.group()));
    assert_eq!(v1.data["spec"]["color"], "red");
    Ok(())
}

pub async fn strict_field_validation_refuses_unknown_fields_of_custom_resources(
    t: &Target,
) -> anyhow::Result<()> {
    let widgets = install_widgets(t).await?;
    let w = json!({
        "apiVersion": format!("{}/v1", t.group()), "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"color": "red", "colour": "typo"}
    });
    let (code, status) = post(
        &t.client(),
        &format!(
            "/apis/{}/v1/namespaces/{}/widgets?fieldValidation=Strict",
            t.group(),
            t.namespace()
        ),
        w.clone(),
    )
    .await?;
    assert_eq!(
        (code, status["reason"].as_str()),
        (400, Some("BadRequest")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.colour\""
    );
    // Server-side apply types the patch by the schema first: an undeclared field fails that
    // with a 500, Strict or not.
    for validation in [None, Some(kube::api::ValidationDirective::Strict)] {
        let pp = PatchParams {
            field_validation: validation,
            ..PatchParams::apply("tester")
        };
        let err = refused(widgets.patch("w", &pp, &Patch::Apply(&w)).await)?;
        assert_eq!(api_code(&err).0, 500);
        assert_eq!(
            api_message(&err),
            format!(
                "failed to create typed patch object (/w; {}/v1, Kind=Widget): .spec.colour: field not declared in schema",
                t.group()
            )
        );
    }
    assert!(widgets.get_opt("w").await?.is_none());
    // Without Strict (`Warn` is the default), unknown fields are pruned.
    let created = create(&widgets, &serde_json::from_value(w)?).await?;
    assert!(created.data["spec"].get("colour").is_none());
    assert_eq!(created.data["spec"]["color"], "red");
    Ok(())
}

pub async fn crd_tables_show_printer_columns(t: &Target) -> anyhow::Result<()> {
    let widgets = install_widgets(t).await?;
    create(
        &widgets,
        &widget(t, "w", json!({"color": "red", "size": 4})),
    )
    .await?;
    merge_status(&widgets, "w", json!({"status": {"phase": "Ready"}})).await?;
    let (code, table) = get_table(
        &t.client(),
        &format!(
            "/apis/{}/v1/namespaces/{}/widgets",
            t.group(),
            t.namespace()
        ),
    )
    .await?;
    assert_eq!(code, 200);
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    // additionalPrinterColumns replace the default Age column.
    assert_eq!(cols, vec!["Name", "Size", "Phase"]);
    assert_eq!(table["rows"][0]["cells"][0], "w");
    assert_eq!(table["rows"][0]["cells"][1], 4);
    assert_eq!(table["rows"][0]["cells"][2], "Ready");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    Ok(())
}

//! Short and long secrets, as the "How initializers work" article describes the policy.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::Secret;
use kube_initializer::testing::{Tester, review};
use secret_guard_initializer::{SecretGuard, initializer};
use serde_json::json;

fn secret(value: serde_json::Value) -> Secret {
    serde_json::from_value(value).unwrap()
}

fn tester() -> Tester {
    Tester::new(initializer(SecretGuard::default()))
}

#[tokio::test]
async fn a_short_value_is_refused_and_the_message_names_the_key() {
    // "cGFzc3dvcmQ=" is base64 for "password": 8 characters.
    let s = secret(json!({"metadata": {"name": "db"}, "data": {
        "password": "cGFzc3dvcmQ=",
        "token": "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo="
    }}));
    let answer = tester().call(&review(&s)).await.unwrap();
    assert!(!answer.allowed());
    assert_eq!(answer.code(), Some(403));
    let message = answer.message().unwrap();
    assert!(message.contains(r#"key "password" has 8"#), "{message}");
    assert!(!message.contains("token"), "{message}");
    assert!(message.contains("at least 20 characters"), "{message}");
}

#[tokio::test]
async fn short_string_data_is_refused_too() {
    let s = secret(json!({"metadata": {"name": "db"}, "stringData": {"user": "admin"}}));
    let answer = tester().call(&review(&s)).await.unwrap();
    assert!(!answer.allowed());
    assert!(answer.message().unwrap().contains(r#"key "user" has 5"#));
}

#[tokio::test]
async fn long_values_are_admitted_unchanged() {
    let s = secret(json!({"metadata": {"name": "db"},
        "data": {"token": "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo="},
        "stringData": {"password": "correct horse battery staple"}}));
    let answer = tester().call(&review(&s)).await.unwrap();
    assert!(answer.allowed());
    assert!(answer.patch().is_none());
}

#[tokio::test]
async fn a_value_of_exactly_the_minimum_length_is_admitted() {
    let s = secret(json!({"metadata": {"name": "db"}, "stringData": {"k": "x".repeat(20)}}));
    assert!(tester().call(&review(&s)).await.unwrap().allowed());
    let s = secret(json!({"metadata": {"name": "db"}, "stringData": {"k": "x".repeat(19)}}));
    assert!(!tester().call(&review(&s)).await.unwrap().allowed());
}

#[tokio::test]
async fn other_secret_types_are_not_checked() {
    let s = secret(
        json!({"metadata": {"name": "sa"}, "type": "kubernetes.io/service-account-token",
        "data": {"namespace": "ZGVmYXVsdA=="}}),
    );
    assert!(tester().call(&review(&s)).await.unwrap().allowed());
}

#[tokio::test]
async fn updates_are_checked_and_deletes_are_not() {
    let short = secret(json!({"metadata": {"name": "db"}, "stringData": {"password": "hunter2"}}));
    let long =
        secret(json!({"metadata": {"name": "db"}, "stringData": {"password": "x".repeat(30)}}));
    assert!(
        !tester()
            .call(&review(&short).update(&long))
            .await
            .unwrap()
            .allowed()
    );
    assert!(
        tester()
            .call(&review(&short).delete())
            .await
            .unwrap()
            .allowed()
    );
}

#[tokio::test]
async fn the_minimum_length_is_configurable() {
    let guard = SecretGuard {
        min_length: 4,
        ..SecretGuard::default()
    };
    let s = secret(json!({"metadata": {"name": "db"}, "stringData": {"pin": "12345"}}));
    assert!(
        Tester::new(initializer(guard))
            .call(&review(&s))
            .await
            .unwrap()
            .allowed()
    );
}

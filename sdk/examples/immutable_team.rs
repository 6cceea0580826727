//! `immutable-team`: refuses an UPDATE that changes a Deployment's `team` label. A complete
//! initializer that reads the old object, with `?` turning both a malformed old object
//! (`serde_json::Error`, 400) and a message (`String`, 403) into the refusal.
//!
//! `cargo run -p kube-initializer --example immutable_team -- --tls-dir ... --listen ...`

use k8s_openapi::api::apps::v1::Deployment;
use kube_initializer::{Denial, Initializer, Review};

fn team(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .labels
        .as_ref()?
        .get("team")
        .map(String::as_str)
}

fn team_is_immutable(new: &mut Deployment, review: &Review) -> Result<(), Denial> {
    let Some(old) = review.old_object::<Deployment>().transpose()? else {
        return Ok(()); // a CREATE: nothing to compare with
    };
    if team(&old) != team(new) {
        Err(format!(
            "the team label is immutable: it was {:?}",
            team(&old).unwrap_or("unset")
        ))?;
    }
    Ok(())
}

fn main() -> Result<(), kube_initializer::Error> {
    Initializer::new("immutable-team")
        .handle(team_is_immutable)
        .main()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_initializer::testing::{Tester, review};

    fn deployment(team: &str) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "labels": {"team": team}}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_changed_team_is_refused_and_an_unchanged_one_admitted() {
        let tester = Tester::new(Initializer::new("immutable-team").handle(team_is_immutable));
        let moved = review(&deployment("b")).update(&deployment("a"));
        let answer = tester.call(&moved).await.unwrap();
        assert!(!answer.allowed());
        assert_eq!(answer.code(), Some(403));
        assert_eq!(
            answer.message(),
            Some("the team label is immutable: it was \"a\"")
        );
        let same = review(&deployment("a")).update(&deployment("a"));
        assert!(tester.call(&same).await.unwrap().allowed());
        assert!(
            tester
                .call(&review(&deployment("a")))
                .await
                .unwrap()
                .allowed()
        );
    }

    #[tokio::test]
    async fn a_malformed_old_object_is_refused_with_400() {
        let tester = Tester::new(Initializer::new("immutable-team").handle(team_is_immutable));
        let old = serde_json::json!({"metadata": {"name": "web", "labels": "not a map"}});
        let answer = tester
            .call(&review(&deployment("a")).update(&old))
            .await
            .unwrap();
        assert!(!answer.allowed());
        assert_eq!(answer.code(), Some(400));
        assert!(
            answer
                .message()
                .unwrap_or_default()
                .starts_with("failed to decode the request"),
            "{:?}",
            answer.message()
        );
    }
}

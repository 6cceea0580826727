//! A small evaluator for the CEL subset CRD validation rules (`x-kubernetes-validations`) use:
//! literals, lists, maps, field access, indexing, `has()`, `!`, `-`, arithmetic, comparisons,
//! `in`, `&&`, `||` (with CEL's error absorption), `?:`, the macros `all`, `exists`,
//! `exists_one`, `map`, `filter`, and the functions `size`, `startsWith`, `endsWith`, `contains`,
//! `matches`, `lowerAscii`, `upperAscii`, `int`, `string`, `double`.
//!
//! Values are JSON values; integers and doubles compare by numeric value. What is outside the
//! subset is a compile error, reported like a failed rule.
//!
//! `parse` turns a rule into an expression tree, `eval` evaluates it over JSON values.

mod eval;
mod parse;

use serde_json::Value;

use parse::Expr;

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct Program(Expr);

/// Parses a rule.
pub fn compile(src: &str) -> Result<Program, String> {
    parse::parse(src).map(Program)
}

impl Program {
    /// Evaluates with `self` (and `oldSelf` when given) bound; the rule must yield a bool.
    pub fn check(&self, this: &Value, old: Option<&Value>) -> Result<bool, String> {
        let mut env: eval::Env = vec![("self".into(), this.clone())];
        if let Some(o) = old {
            env.push(("oldSelf".into(), o.clone()));
        }
        eval::truth(eval::eval(&self.0, &mut env))
    }

    /// Whether the rule refers to `oldSelf` (a transition rule, checked only on updates).
    pub fn uses_old_self(src: &str) -> bool {
        src.contains("oldSelf")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(rule: &str, this: Value) -> Result<bool, String> {
        compile(rule)?.check(&this, None)
    }

    #[test]
    fn has_and_inequality_express_exactly_one_of() {
        let rule = "has(self.inline) != has(self.configMapRef)";
        assert_eq!(check(rule, json!({"inline": "x"})), Ok(true));
        assert_eq!(check(rule, json!({})), Ok(false));
        assert_eq!(
            check(rule, json!({"inline": "x", "configMapRef": {}})),
            Ok(false)
        );
    }

    #[test]
    fn exists_with_in_lists_refuses_protected_names() {
        let rule = "!self.resources.exists(r, r in ['leases', 'events'])";
        assert_eq!(check(rule, json!({"resources": ["pods"]})), Ok(true));
        assert_eq!(
            check(rule, json!({"resources": ["pods", "events"]})),
            Ok(false)
        );
    }

    #[test]
    fn absent_fields_are_absorbed_by_short_circuits() {
        let rule = "!has(self.health) || !has(self.health.latencyBudgetMillis) || self.health.latencyBudgetMillis <= self.timeoutSeconds * 1000";
        assert_eq!(check(rule, json!({"timeoutSeconds": 5})), Ok(true));
        assert_eq!(
            check(
                rule,
                json!({"timeoutSeconds": 5, "health": {"latencyBudgetMillis": 6000}})
            ),
            Ok(false)
        );
        assert_eq!(
            check(
                rule,
                json!({"timeoutSeconds": 5, "health": {"latencyBudgetMillis": 100}})
            ),
            Ok(true)
        );
    }

    #[test]
    fn functions_macros_and_ternaries_work() {
        assert_eq!(
            check(
                "self.name.startsWith('a') && size(self.name) == 3",
                json!({"name": "abc"})
            ),
            Ok(true)
        );
        assert_eq!(
            check(
                "self.items.all(i, i > 0) && self.items.exists_one(i, i == 2)",
                json!({"items": [1, 2, 3]})
            ),
            Ok(true)
        );
        assert_eq!(
            check(
                "self.items.map(i, i * 2).filter(i, i > 2).size() == 2",
                json!({"items": [1, 2, 3]})
            ),
            Ok(true)
        );
        assert_eq!(
            check("(self.a > 1 ? 'big' : 'small') == 'small'", json!({"a": 1})),
            Ok(true)
        );
        assert_eq!(
            check("self.s.matches('^[a-z]+$')", json!({"s": "abc"})),
            Ok(true)
        );
        assert_eq!(check("'k' in self.m", json!({"m": {"k": 1}})), Ok(true));
    }

    #[test]
    fn errors_are_reported_not_panicked() {
        assert!(check("self.missing == 1", json!({})).is_err());
        assert!(compile("self.(").is_err());
        assert!(check("1 / 0 == 1", json!({})).is_err());
    }

    #[test]
    fn transition_rules_see_old_self() {
        let p = compile("self == oldSelf").unwrap();
        assert_eq!(p.check(&json!("a"), Some(&json!("a"))), Ok(true));
        assert_eq!(p.check(&json!("b"), Some(&json!("a"))), Ok(false));
    }
}

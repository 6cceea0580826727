//! The evaluator: an [`Expr`] over JSON values, with CEL's numeric comparisons, error
//! absorption in `&&`/`||`, macros and functions.

use serde_json::{Map, Value, json};

use super::parse::Expr;

/// Variables in scope: `self`, `oldSelf` and macro variables, innermost last.
pub(super) type Env = Vec<(String, Value)>;

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn arith(op: &str, a: &Value, b: &Value) -> Result<Value, String> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return match op {
            "+" => x
                .checked_add(y)
                .map(|v| json!(v))
                .ok_or_else(|| "integer overflow".into()),
            "-" => x
                .checked_sub(y)
                .map(|v| json!(v))
                .ok_or_else(|| "integer overflow".into()),
            "*" => x
                .checked_mul(y)
                .map(|v| json!(v))
                .ok_or_else(|| "integer overflow".into()),
            "/" if y != 0 => Ok(json!(x / y)),
            "%" if y != 0 => Ok(json!(x % y)),
            _ => Err("division by zero".into()),
        };
    }
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return Ok(match op {
            "+" => json!(x + y),
            "-" => json!(x - y),
            "*" => json!(x * y),
            "/" => json!(x / y),
            _ => return Err("no such overload".into()),
        });
    }
    match (op, a, b) {
        ("+", Value::String(x), Value::String(y)) => Ok(Value::String(format!("{x}{y}"))),
        ("+", Value::Array(x), Value::Array(y)) => {
            Ok(Value::Array(x.iter().chain(y).cloned().collect()))
        }
        _ => Err(format!("no such overload for {op}")),
    }
}

fn compare(a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => num(a)
            .zip(num(b))
            .and_then(|(x, y)| x.partial_cmp(&y))
            .ok_or_else(|| "cannot compare".into()),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        _ => Err("no such overload for comparison".into()),
    }
}

pub(super) fn truth(v: Result<Value, String>) -> Result<bool, String> {
    match v? {
        Value::Bool(b) => Ok(b),
        other => Err(format!("expected a bool, got {other}")),
    }
}

/// `&&` (`decisive` false) and `||` (`decisive` true): either side equal to `decisive` decides
/// the result, and CEL absorbs an error on the other side when it does.
fn logical(a: &Expr, b: &Expr, env: &mut Env, decisive: bool) -> Result<Value, String> {
    let l = truth(eval(a, env));
    if l == Ok(decisive) {
        return Ok(json!(decisive));
    }
    match (l, truth(eval(b, env))) {
        (_, Ok(r)) if r == decisive => Ok(json!(decisive)),
        (Err(e), _) | (_, Err(e)) => Err(e),
        _ => Ok(json!(!decisive)),
    }
}

pub(super) fn eval(e: &Expr, env: &mut Env) -> Result<Value, String> {
    match e {
        Expr::Lit(v) => Ok(v.clone()),
        Expr::Ident(name) => env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("undeclared reference to {name}")),
        Expr::List(items) => Ok(Value::Array(
            items
                .iter()
                .map(|i| eval(i, env))
                .collect::<Result<_, _>>()?,
        )),
        Expr::MapLit(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                let key = match eval(k, env)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                m.insert(key, eval(v, env)?);
            }
            Ok(Value::Object(m))
        }
        Expr::Field(obj, f) => match eval(obj, env)? {
            Value::Object(m) => m.get(f).cloned().ok_or_else(|| format!("no such key: {f}")),
            other => Err(format!("no field {f} on {other}")),
        },
        Expr::Index(obj, idx) => {
            let (o, i) = (eval(obj, env)?, eval(idx, env)?);
            match (&o, &i) {
                (Value::Array(a), Value::Number(n)) => {
                    let k = n.as_u64().ok_or("bad index")? as usize;
                    a.get(k).cloned().ok_or_else(|| "index out of range".into())
                }
                (Value::Object(m), Value::String(k)) => {
                    m.get(k).cloned().ok_or_else(|| format!("no such key: {k}"))
                }
                _ => Err("no such overload for index".into()),
            }
        }
        Expr::Has(obj, f) => match eval(obj, env)? {
            Value::Object(m) => Ok(json!(m.get(f).is_some_and(|v| !v.is_null()))),
            _ => Err(format!("has() on a non-object for {f}")),
        },
        Expr::Unary("!", x) => Ok(json!(!truth(eval(x, env))?)),
        Expr::Unary(_, x) => match eval(x, env)? {
            Value::Number(n) if n.is_i64() => Ok(json!(-n.as_i64().unwrap_or(0))),
            Value::Number(n) => Ok(json!(-n.as_f64().unwrap_or(0.0))),
            _ => Err("no such overload for -".into()),
        },
        Expr::Binary("&&", a, b) => logical(a, b, env, false),
        Expr::Binary("||", a, b) => logical(a, b, env, true),
        Expr::Binary(op, a, b) => {
            let (l, r) = (eval(a, env)?, eval(b, env)?);
            match *op {
                "==" => Ok(json!(equal(&l, &r))),
                "!=" => Ok(json!(!equal(&l, &r))),
                "<" => Ok(json!(compare(&l, &r)?.is_lt())),
                "<=" => Ok(json!(compare(&l, &r)?.is_le())),
                ">" => Ok(json!(compare(&l, &r)?.is_gt())),
                ">=" => Ok(json!(compare(&l, &r)?.is_ge())),
                "in" => match &r {
                    Value::Array(items) => Ok(json!(items.iter().any(|i| equal(i, &l)))),
                    Value::Object(m) => Ok(json!(l.as_str().is_some_and(|k| m.contains_key(k)))),
                    _ => Err("no such overload for in".into()),
                },
                _ => arith(op, &l, &r),
            }
        }
        Expr::Cond(c, a, b) => {
            if truth(eval(c, env))? {
                eval(a, env)
            } else {
                eval(b, env)
            }
        }
        Expr::Call(target, name, args) => call(target.as_deref(), name, args, env),
    }
}

fn items_of(v: Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Object(m) => Ok(m.keys().map(|k| Value::String(k.clone())).collect()),
        other => Err(format!("cannot iterate over {other}")),
    }
}

fn call(target: Option<&Expr>, name: &str, args: &[Expr], env: &mut Env) -> Result<Value, String> {
    if let (Some(t), "all" | "exists" | "exists_one" | "map" | "filter") = (target, name) {
        let [Expr::Ident(var), body] = args else {
            return Err(format!("{name}() needs a variable and an expression"));
        };
        let items = items_of(eval(t, env)?)?;
        let mut hits = 0usize;
        let mut mapped = Vec::new();
        let mut first_err = None;
        for item in items {
            env.push((var.clone(), item.clone()));
            let r = eval(body, env);
            env.pop();
            match name {
                "map" => mapped.push(r?),
                _ => match truth(r) {
                    Ok(true) => {
                        hits += 1;
                        if name == "filter" {
                            mapped.push(item);
                        }
                        if name == "exists" {
                            return Ok(json!(true));
                        }
                    }
                    Ok(false) => {
                        if name == "all" {
                            return Ok(json!(false));
                        }
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                },
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        return Ok(match name {
            "all" => json!(true),
            "exists" => json!(false),
            "exists_one" => json!(hits == 1),
            _ => Value::Array(mapped),
        });
    }
    let mut vals = Vec::new();
    if let Some(t) = target {
        vals.push(eval(t, env)?);
    }
    for a in args {
        vals.push(eval(a, env)?);
    }
    let s = |i: usize| {
        vals.get(i)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{name}() needs a string"))
    };
    match (name, vals.len()) {
        ("size", 1) => match &vals[0] {
            Value::String(x) => Ok(json!(x.chars().count())),
            Value::Array(a) => Ok(json!(a.len())),
            Value::Object(m) => Ok(json!(m.len())),
            _ => Err("no such overload for size".into()),
        },
        ("startsWith", 2) => Ok(json!(s(0)?.starts_with(s(1)?))),
        ("endsWith", 2) => Ok(json!(s(0)?.ends_with(s(1)?))),
        ("contains", 2) => Ok(json!(s(0)?.contains(s(1)?))),
        ("matches", 2) => {
            let re = regex::Regex::new(s(1)?).map_err(|e| format!("bad regex: {e}"))?;
            Ok(json!(re.is_match(s(0)?)))
        }
        ("lowerAscii", 1) => Ok(json!(s(0)?.to_ascii_lowercase())),
        ("upperAscii", 1) => Ok(json!(s(0)?.to_ascii_uppercase())),
        ("string", 1) => Ok(match &vals[0] {
            Value::String(x) => json!(x),
            other => json!(other.to_string()),
        }),
        ("int", 1) => match &vals[0] {
            Value::Number(n) => Ok(json!(n.as_f64().unwrap_or(0.0) as i64)),
            Value::String(x) => x
                .parse::<i64>()
                .map(|v| json!(v))
                .map_err(|e| e.to_string()),
            _ => Err("no such overload for int".into()),
        },
        ("double", 1) => match &vals[0] {
            Value::Number(n) => Ok(json!(n.as_f64().unwrap_or(0.0))),
            Value::String(x) => x
                .parse::<f64>()
                .map(|v| json!(v))
                .map_err(|e| e.to_string()),
            _ => Err("no such overload for double".into()),
        },
        _ => Err(format!("undeclared function {name}/{}", vals.len())),
    }
}

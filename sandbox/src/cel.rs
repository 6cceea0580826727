//! A small evaluator for the CEL subset CRD validation rules (`x-kubernetes-validations`) use:
//! literals, lists, maps, field access, indexing, `has()`, `!`, `-`, arithmetic, comparisons,
//! `in`, `&&`, `||` (with CEL's error absorption), `?:`, the macros `all`, `exists`,
//! `exists_one`, `map`, `filter`, and the functions `size`, `startsWith`, `endsWith`, `contains`,
//! `matches`, `lowerAscii`, `upperAscii`, `int`, `string`, `double`.
//!
//! Values are JSON values; integers and doubles compare by numeric value. What is outside the
//! subset is a compile error, reported like a failed rule.

use serde_json::{Map, Value, json};

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
enum Expr {
    Lit(Value),
    Ident(String),
    List(Vec<Expr>),
    MapLit(Vec<(Expr, Expr)>),
    Field(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Has(Box<Expr>, String),
    Call(Option<Box<Expr>>, String, Vec<Expr>),
    Unary(&'static str, Box<Expr>),
    Binary(&'static str, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Ident(String),
    Op(&'static str),
}

const OPS: &[&str] = &[
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":", ".", ",",
    "(", ")", "[", "]", "{", "}",
];

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            if i < chars.len() && (chars[i] == 'u' || chars[i] == 'U') {
                i += 1;
            }
            if text.contains('.') {
                out.push(Tok::Float(
                    text.parse().map_err(|_| format!("bad number {text}"))?,
                ));
            } else {
                out.push(Tok::Int(
                    text.parse().map_err(|_| format!("bad number {text}"))?,
                ));
            }
            continue;
        }
        if c == '\'' || c == '"' {
            let quote = c;
            i += 1;
            let mut s = String::new();
            while i < chars.len() && chars[i] != quote {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                    s.push(match chars[i] {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                } else {
                    s.push(chars[i]);
                }
                i += 1;
            }
            if i >= chars.len() {
                return Err("unterminated string".into());
            }
            i += 1;
            out.push(Tok::Str(s));
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        let Some(op) = OPS.iter().find(|op| rest.starts_with(**op)) else {
            return Err(format!("unexpected character {c:?}"));
        };
        out.push(Tok::Op(op));
        i += op.len();
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), String> {
        if self.eat(op) {
            Ok(())
        } else {
            Err(format!("expected {op:?} at token {}", self.pos))
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let c = self.or()?;
        if self.eat("?") {
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            return Ok(Expr::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut l = self.and()?;
        while self.eat("||") {
            l = Expr::Binary("||", Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut l = self.rel()?;
        while self.eat("&&") {
            l = Expr::Binary("&&", Box::new(l), Box::new(self.rel()?));
        }
        Ok(l)
    }

    fn rel(&mut self) -> Result<Expr, String> {
        let mut l = self.add()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o @ ("==" | "!=" | "<" | "<=" | ">" | ">="))) => *o,
                Some(Tok::Ident(i)) if i == "in" => "in",
                _ => return Ok(l),
            };
            self.pos += 1;
            l = Expr::Binary(op, Box::new(l), Box::new(self.add()?));
        }
    }

    fn add(&mut self) -> Result<Expr, String> {
        let mut l = self.mul()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o @ ("+" | "-"))) => *o,
                _ => return Ok(l),
            };
            self.pos += 1;
            l = Expr::Binary(op, Box::new(l), Box::new(self.mul()?));
        }
    }

    fn mul(&mut self) -> Result<Expr, String> {
        let mut l = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o @ ("*" | "/" | "%"))) => *o,
                _ => return Ok(l),
            };
            self.pos += 1;
            l = Expr::Binary(op, Box::new(l), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("!") {
            return Ok(Expr::Unary("!", Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(Expr::Unary("-", Box::new(self.unary()?)));
        }
        self.member()
    }

    fn args(&mut self, close: &str) -> Result<Vec<Expr>, String> {
        let mut args = Vec::new();
        if self.eat(close) {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(close) {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }

    fn member(&mut self) -> Result<Expr, String> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let Some(Tok::Ident(name)) = self.peek().cloned() else {
                    return Err("expected a field name".into());
                };
                self.pos += 1;
                if self.eat("(") {
                    let args = self.args(")")?;
                    e = Expr::Call(Some(Box::new(e)), name, args);
                } else {
                    e = Expr::Field(Box::new(e), name);
                }
            } else if self.eat("[") {
                let idx = self.expr()?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(idx));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let Some(tok) = self.peek().cloned() else {
            return Err("unexpected end of expression".into());
        };
        self.pos += 1;
        match tok {
            Tok::Int(n) => Ok(Expr::Lit(json!(n))),
            Tok::Float(f) => Ok(Expr::Lit(json!(f))),
            Tok::Str(s) => Ok(Expr::Lit(Value::String(s))),
            Tok::Ident(id) => match id.as_str() {
                "true" => Ok(Expr::Lit(json!(true))),
                "false" => Ok(Expr::Lit(json!(false))),
                "null" => Ok(Expr::Lit(Value::Null)),
                "has" if self.eat("(") => {
                    let arg = self.expr()?;
                    self.expect(")")?;
                    match arg {
                        Expr::Field(obj, f) => Ok(Expr::Has(obj, f)),
                        _ => Err("has() needs a field selection".into()),
                    }
                }
                _ => {
                    if self.eat("(") {
                        let args = self.args(")")?;
                        Ok(Expr::Call(None, id, args))
                    } else {
                        Ok(Expr::Ident(id))
                    }
                }
            },
            Tok::Op("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Op("[") => Ok(Expr::List(self.args("]")?)),
            Tok::Op("{") => {
                let mut entries = Vec::new();
                if !self.eat("}") {
                    loop {
                        let k = self.expr()?;
                        self.expect(":")?;
                        let v = self.expr()?;
                        entries.push((k, v));
                        if self.eat("}") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Expr::MapLit(entries))
            }
            Tok::Op(o) => Err(format!("unexpected {o:?}")),
        }
    }
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct Program(Expr);

/// Parses a rule.
pub fn compile(src: &str) -> Result<Program, String> {
    let mut p = Parser {
        toks: lex(src)?,
        pos: 0,
    };
    let e = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected input after position {}", p.pos));
    }
    Ok(Program(e))
}

type Env<'a> = Vec<(String, Value)>;

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

fn truth(v: Result<Value, String>) -> Result<bool, String> {
    match v? {
        Value::Bool(b) => Ok(b),
        other => Err(format!("expected a bool, got {other}")),
    }
}

fn eval(e: &Expr, env: &mut Env<'_>) -> Result<Value, String> {
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
        Expr::Binary("&&", a, b) => {
            // CEL absorbs an error when the other side decides the result.
            let l = truth(eval(a, env));
            if l == Ok(false) {
                return Ok(json!(false));
            }
            let r = truth(eval(b, env));
            match (l, r) {
                (_, Ok(false)) => Ok(json!(false)),
                (Ok(true), Ok(true)) => Ok(json!(true)),
                (Err(e), _) | (_, Err(e)) => Err(e),
                _ => Ok(json!(false)),
            }
        }
        Expr::Binary("||", a, b) => {
            let l = truth(eval(a, env));
            if l == Ok(true) {
                return Ok(json!(true));
            }
            let r = truth(eval(b, env));
            match (l, r) {
                (_, Ok(true)) => Ok(json!(true)),
                (Ok(false), Ok(false)) => Ok(json!(false)),
                (Err(e), _) | (_, Err(e)) => Err(e),
                _ => Ok(json!(false)),
            }
        }
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

fn call(
    target: Option<&Expr>,
    name: &str,
    args: &[Expr],
    env: &mut Env<'_>,
) -> Result<Value, String> {
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

impl Program {
    /// Evaluates with `self` (and `oldSelf` when given) bound; the rule must yield a bool.
    pub fn check(&self, this: &Value, old: Option<&Value>) -> Result<bool, String> {
        let mut env: Env<'_> = vec![("self".into(), this.clone())];
        if let Some(o) = old {
            env.push(("oldSelf".into(), o.clone()));
        }
        truth(eval(&self.0, &mut env))
    }

    /// Whether the rule refers to `oldSelf` (a transition rule, checked only on updates).
    pub fn uses_old_self(src: &str) -> bool {
        src.contains("oldSelf")
    }
}

#[cfg(test)]
mod tests {
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

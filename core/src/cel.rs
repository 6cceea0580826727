//! A compile check for the CEL expressions of `spec.fallback`: syntax (CEL's grammar,
//! including the optional-field syntax Kubernetes enables) and references (every identifier is
//! a variable a ValidatingAdmissionPolicy declares, a macro's bound variable, a type name or a
//! function namespace). It runs before anything is deployed, on every API server; the API
//! server itself then checks the same expressions with its own compiler (a dry-run apply of the
//! policy) where it serves ValidatingAdmissionPolicy.
//!
//! It does not type-check: `object.spec.replicas + 'x'` passes here and fails on the API server.

use std::fmt;

/// Variables a ValidatingAdmissionPolicy's expressions may use.
pub const VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "authorizer",
    "variables",
];

const TYPES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "type",
    "null_type",
    "dyn",
];

/// Prefixes of namespaced functions (`optional.of`, `cel.bind`, `math.greatest`, ...).
const NAMESPACES: &[&str] = &[
    "optional", "cel", "math", "sets", "strings", "base64", "format", "lists",
];

/// Member calls that bind variables: `list.all(x, p)`, `map.exists(k, v, p)`, ...
const MACROS: &[&str] = &[
    "all",
    "exists",
    "exists_one",
    "existsOne",
    "map",
    "filter",
    "transformList",
    "transformMap",
    "transformMapEntry",
    "sortBy",
    "bind",
];

/// CEL's reserved words beside the literals (`true`, `false`, `null`) and `in`.
pub const RESERVED: &[&str] = &[
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Whether `name` is a word of the language rather than a name: a literal, `in`, or reserved.
pub fn is_keyword(name: &str) -> bool {
    matches!(name, "true" | "false" | "null" | "in") || RESERVED.contains(&name)
}

/// Why an expression does not compile, with the character offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    /// Character offset into the expression.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.at)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Lit,
    Op(&'static str),
    End,
}

const OPS: &[&str] = &[
    "&&", "||", "==", "!=", "<=", ">=", ".?", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":",
    ".", ",", "(", ")", "[", "]", "{", "}",
];

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, CompileError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |at: usize, message: &str| CompileError {
        at,
        message: message.to_string(),
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        // String and bytes literals, with optional r/b prefixes.
        let mut j = i;
        let mut raw = false;
        while j < chars.len() && j - i < 2 && matches!(chars[j], 'r' | 'R' | 'b' | 'B') {
            raw |= matches!(chars[j], 'r' | 'R');
            j += 1;
        }
        if j < chars.len() && (chars[j] == '"' || chars[j] == '\'') {
            let quote = chars[j];
            let triple = chars.get(j + 1) == Some(&quote) && chars.get(j + 2) == Some(&quote);
            let mut k = if triple { j + 3 } else { j + 1 };
            loop {
                match chars.get(k) {
                    None => return Err(err(start, "unterminated string literal")),
                    Some('\\') if !raw => k += 2,
                    Some('\n') if !triple => {
                        return Err(err(start, "unterminated string literal"));
                    }
                    Some(q) if *q == quote => {
                        if !triple {
                            k += 1;
                            break;
                        }
                        if chars.get(k + 1) == Some(&quote) && chars.get(k + 2) == Some(&quote) {
                            k += 3;
                            break;
                        }
                        k += 1;
                    }
                    Some(_) => k += 1,
                }
            }
            out.push((start, Tok::Lit));
            i = k;
            continue;
        }
        let after_operand = matches!(
            out.last(),
            Some((_, Tok::Ident(_) | Tok::Lit | Tok::Op(")" | "]" | "}")))
        );
        let number_start = c.is_ascii_digit()
            || (c == '.' && !after_operand && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()));
        if number_start {
            let mut k = i;
            if c == '0' && matches!(chars.get(i + 1), Some('x' | 'X')) {
                k += 2;
                while k < chars.len() && chars[k].is_ascii_hexdigit() {
                    k += 1;
                }
            } else {
                while k < chars.len() && chars[k].is_ascii_digit() {
                    k += 1;
                }
                if chars.get(k) == Some(&'.') && chars.get(k + 1).is_some_and(char::is_ascii_digit)
                {
                    k += 1;
                    while k < chars.len() && chars[k].is_ascii_digit() {
                        k += 1;
                    }
                }
                if matches!(chars.get(k), Some('e' | 'E')) {
                    k += 1;
                    if matches!(chars.get(k), Some('+' | '-')) {
                        k += 1;
                    }
                    if !chars.get(k).is_some_and(char::is_ascii_digit) {
                        return Err(err(start, "malformed number"));
                    }
                    while k < chars.len() && chars[k].is_ascii_digit() {
                        k += 1;
                    }
                }
            }
            if matches!(chars.get(k), Some('u' | 'U')) {
                k += 1;
            }
            if chars
                .get(k)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                return Err(err(start, "malformed number"));
            }
            out.push((start, Tok::Lit));
            i = k;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let mut k = i;
            while k < chars.len() && (chars[k].is_ascii_alphanumeric() || chars[k] == '_') {
                k += 1;
            }
            let word: String = chars[i..k].iter().collect();
            out.push((start, Tok::Ident(word)));
            i = k;
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        match OPS.iter().find(|op| rest.starts_with(**op)) {
            Some(op) => {
                out.push((start, Tok::Op(op)));
                i += op.chars().count();
            }
            None => return Err(err(start, &format!("unexpected character {c:?}"))),
        }
    }
    out.push((chars.len(), Tok::End));
    Ok(out)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    scope: Vec<String>,
    declared: Vec<String>,
    depth: usize,
}

type Parsed = Result<(), CompileError>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].1
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        &self.toks[(self.pos + ahead).min(self.toks.len() - 1)].1
    }

    fn at(&self) -> usize {
        self.toks[self.pos.min(self.toks.len() - 1)].0
    }

    fn fail<T>(&self, message: impl Into<String>) -> Result<T, CompileError> {
        Err(CompileError {
            at: self.at(),
            message: message.into(),
        })
    }

    fn eat(&mut self, op: &str) -> bool {
        if *self.peek() == Tok::Op(static_op(op)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Parsed {
        if self.eat(op) {
            Ok(())
        } else {
            self.fail(format!("expected {op:?}, found {}", describe(self.peek())))
        }
    }

    fn expr(&mut self) -> Parsed {
        self.depth += 1;
        if self.depth > 100 {
            return self.fail("the expression is nested too deeply");
        }
        self.or()?;
        if self.eat("?") {
            self.or()?;
            self.expect(":")?;
            self.expr()?;
        }
        self.depth -= 1;
        Ok(())
    }

    fn or(&mut self) -> Parsed {
        self.and()?;
        while self.eat("||") {
            self.and()?;
        }
        Ok(())
    }

    fn and(&mut self) -> Parsed {
        self.relation()?;
        while self.eat("&&") {
            self.relation()?;
        }
        Ok(())
    }

    fn relation(&mut self) -> Parsed {
        self.addition()?;
        loop {
            let is_rel = matches!(self.peek(), Tok::Op("<" | "<=" | ">" | ">=" | "==" | "!="))
                || *self.peek() == Tok::Ident("in".into());
            if !is_rel {
                return Ok(());
            }
            self.pos += 1;
            self.addition()?;
        }
    }

    fn addition(&mut self) -> Parsed {
        self.multiplication()?;
        while self.eat("+") || self.eat("-") {
            self.multiplication()?;
        }
        Ok(())
    }

    fn multiplication(&mut self) -> Parsed {
        self.unary()?;
        while self.eat("*") || self.eat("/") || self.eat("%") {
            self.unary()?;
        }
        Ok(())
    }

    fn unary(&mut self) -> Parsed {
        if self.eat("!") || self.eat("-") {
            return self.unary();
        }
        self.member()
    }

    fn member(&mut self) -> Parsed {
        self.primary()?;
        loop {
            if self.eat(".") || self.eat(".?") {
                let Tok::Ident(name) = self.peek().clone() else {
                    return self.fail(format!(
                        "expected a field or method name, found {}",
                        describe(self.peek())
                    ));
                };
                self.pos += 1;
                if self.eat("(") {
                    let binds = MACROS.contains(&name.as_str());
                    self.args(")", binds)?;
                }
            } else if self.eat("[") {
                self.eat("?");
                self.expr()?;
                self.expect("]")?;
            } else {
                return Ok(());
            }
        }
    }

    /// Arguments up to `close`; for a macro, leading bare identifiers followed by a comma are
    /// bound variables, in scope for the arguments after them.
    fn args(&mut self, close: &str, binds: bool) -> Parsed {
        let scope = self.scope.len();
        let mut first = true;
        while !self.eat(close) {
            if !first {
                if !self.eat(",") {
                    return self.fail(format!(
                        "expected \",\" or {close:?}, found {}",
                        describe(self.peek())
                    ));
                }
                if self.eat(close) {
                    break;
                }
            }
            first = false;
            if binds
                && let Tok::Ident(name) = self.peek().clone()
                && *self.peek_at(1) == Tok::Op(",")
            {
                if RESERVED.contains(&name.as_str()) {
                    return self.fail(format!("{name:?} is a reserved word"));
                }
                self.scope.push(name);
                self.pos += 1;
                continue;
            }
            self.expr()?;
        }
        self.scope.truncate(scope);
        Ok(())
    }

    fn primary(&mut self) -> Parsed {
        let leading_dot = self.eat(".");
        match self.peek().clone() {
            Tok::Lit => {
                self.pos += 1;
                Ok(())
            }
            Tok::Ident(name) => {
                self.pos += 1;
                match name.as_str() {
                    "true" | "false" | "null" => return Ok(()),
                    "in" => return self.fail("unexpected \"in\""),
                    reserved if RESERVED.contains(&reserved) => {
                        return self.fail(format!("{name:?} is a reserved word"));
                    }
                    _ => {}
                }
                if name == "has" && *self.peek() == Tok::Op("(") {
                    self.pos += 1;
                    self.member()?;
                    return self.expect(")");
                }
                if self.eat("(") {
                    // A global function; CEL resolves unknown ones at compile time, and so does
                    // the API server, but their list varies by version: leave it to it.
                    return self.args(")", false);
                }
                let namespaced = NAMESPACES.contains(&name.as_str())
                    && *self.peek() == Tok::Op(".")
                    && matches!(self.peek_at(1), Tok::Ident(_))
                    && *self.peek_at(2) == Tok::Op("(");
                let known = self.scope.contains(&name)
                    || self.declared.contains(&name)
                    || TYPES.contains(&name.as_str())
                    || namespaced;
                if !known {
                    self.pos -= 1;
                    return self.fail(format!(
                        "undeclared reference to {name:?} (the variables are {})",
                        self.declared.join(", ")
                    ));
                }
                if *self.peek() == Tok::Op("{")
                    && name.chars().next().is_some_and(char::is_uppercase)
                {
                    self.pos += 1;
                    return self.map_entries();
                }
                Ok(())
            }
            Tok::Op("(") if !leading_dot => {
                self.pos += 1;
                self.expr()?;
                self.expect(")")
            }
            Tok::Op("[") if !leading_dot => {
                self.pos += 1;
                self.elements("]", Self::expr)
            }
            Tok::Op("{") if !leading_dot => {
                self.pos += 1;
                self.map_entries()
            }
            other => self.fail(format!("unexpected {}", describe(&other))),
        }
    }

    fn map_entries(&mut self) -> Parsed {
        self.elements("}", |parser| {
            parser.expr()?;
            parser.expect(":")?;
            parser.expr()
        })
    }

    /// The elements of a list or map literal up to `close`, each parsed by `element`:
    /// comma-separated, a trailing comma allowed, each optionally marked optional (`?`).
    fn elements(&mut self, close: &str, mut element: impl FnMut(&mut Self) -> Parsed) -> Parsed {
        let mut first = true;
        while !self.eat(close) {
            if !first {
                self.expect(",")?;
                if self.eat(close) {
                    break;
                }
            }
            first = false;
            self.eat("?");
            element(self)?;
        }
        Ok(())
    }
}

fn static_op(op: &str) -> &'static str {
    OPS.iter().find(|o| **o == op).copied().unwrap_or("")
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Ident(name) => format!("{name:?}"),
        Tok::Lit => "a literal".to_string(),
        Tok::Op(op) => format!("{op:?}"),
        Tok::End => "the end of the expression".to_string(),
    }
}

/// Checks one expression: its syntax, and that every identifier is one of `declared`, a bound
/// variable, a type name or a function namespace.
pub fn check(expression: &str, declared: &[&str]) -> Result<(), CompileError> {
    if expression.trim().is_empty() {
        return Err(CompileError {
            at: 0,
            message: "the expression is empty".into(),
        });
    }
    let mut parser = Parser {
        toks: lex(expression)?,
        pos: 0,
        scope: Vec::new(),
        declared: declared.iter().map(|d| d.to_string()).collect(),
        depth: 0,
    };
    parser.expr()?;
    if *parser.peek() != Tok::End {
        return parser.fail(format!(
            "unexpected {} after the expression",
            describe(parser.peek())
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(e: &str) {
        assert_eq!(check(e, VARIABLES), Ok(()), "{e}");
    }

    fn bad(e: &str, why: &str) {
        let err = check(e, VARIABLES).expect_err(e);
        assert!(err.message.contains(why), "{e}: {err}");
    }

    #[test]
    fn the_secret_guard_fallback_compiles() {
        ok(
            "!has(object.data) || (has(object.type) && object.type != 'Opaque') || object.data.all(k, size(object.data[k].replace('=', '')) >= 27)",
        );
        ok(
            "'secret ' + object.metadata.name + ' refused: ' + object.data.filter(k, size(object.data[k]) < 27).join(', ')",
        );
    }

    #[test]
    fn kubernetes_expressions_compile() {
        for e in [
            "object.spec.replicas <= 5",
            "object.metadata.name.startsWith('app-') && !(object.metadata.name in ['app-x'])",
            "has(object.spec.template) ? object.spec.template.spec.containers.size() > 0 : true",
            "object.spec.containers.exists_one(c, c.name == 'main')",
            "object.spec.containers.map(c, c.image).all(i, !i.endsWith(':latest'))",
            "object.?metadata.?labels.orValue({}).size() < 10",
            "object.data.all(k, v, size(v) > 0)",
            "cel.bind(n, object.metadata.name, n.size() < 64)",
            "type(object.spec) == map && 0x1F > 3u && 1.5e3 > .5",
            "request.userInfo.username != 'system:anonymous' // why",
            "[1, 2, 3,].size() == 3 && {'a': 1}.size() == 1",
            r#"r'raw\d' != b"bytes" && '''multi
line''' != """#,
            "authorizer.group('apps').resource('deployments').check('create').allowed()",
            "isQuantity('1Gi') && quantity('1Gi').isGreaterThan(quantity('1Mi'))",
        ] {
            ok(e);
        }
    }

    #[test]
    fn syntax_errors_are_refused_with_a_position() {
        bad("object.data.all(k, ", "unexpected");
        bad("object.spec.replicas <=", "unexpected the end");
        bad("'unterminated", "unterminated string");
        bad("object.metadata.name == 'a' 'b'", "after the expression");
        bad("(object.spec", "expected \")\"");
        bad("object.spec.replicas # 2", "unexpected character");
        bad("object.", "expected a field or method name");
        bad("12abc > 1", "malformed number");
        bad("   ", "empty");
        let err = check("object.x ==", VARIABLES).unwrap_err();
        assert_eq!(err.at, 11);
    }

    #[test]
    fn undeclared_references_and_reserved_words_are_refused() {
        bad("objct.data.size() > 0", "undeclared reference to \"objct\"");
        bad(
            "object.data.all(k, size(value) > 1)",
            "undeclared reference to \"value\"",
        );
        bad(
            "k == 1 && object.data.all(k, true)",
            "undeclared reference to \"k\"",
        );
        bad("if(object)", "reserved word");
    }
}

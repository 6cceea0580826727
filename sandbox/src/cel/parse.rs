//! The parser: the rule's text lexed into tokens, then a recursive-descent parse into [`Expr`].

use serde_json::{Value, json};

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Expr {
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
        self.chain(&["||"], Self::and)
    }

    fn and(&mut self) -> Result<Expr, String> {
        self.chain(&["&&"], Self::rel)
    }

    fn rel(&mut self) -> Result<Expr, String> {
        self.chain(&["==", "!=", "<", "<=", ">", ">=", "in"], Self::add)
    }

    fn add(&mut self) -> Result<Expr, String> {
        self.chain(&["+", "-"], Self::mul)
    }

    fn mul(&mut self) -> Result<Expr, String> {
        self.chain(&["*", "/", "%"], Self::unary)
    }

    /// One precedence level: `operand (op operand)*` for the operators `ops`, left-associative.
    fn chain(
        &mut self,
        ops: &[&'static str],
        operand: fn(&mut Self) -> Result<Expr, String>,
    ) -> Result<Expr, String> {
        let mut l = operand(self)?;
        while let Some(op) = self.peek_operator(ops) {
            self.pos += 1;
            l = Expr::Binary(op, Box::new(l), Box::new(operand(self)?));
        }
        Ok(l)
    }

    /// The next token, if it is one of the binary operators `ops` (`in` is an identifier token).
    fn peek_operator(&self, ops: &[&'static str]) -> Option<&'static str> {
        let text = match self.peek()? {
            Tok::Op(o) => *o,
            Tok::Ident(i) if i == "in" => "in",
            _ => return None,
        };
        ops.iter().copied().find(|op| *op == text)
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

/// Parses a whole rule; input left after one expression is an error.
pub(super) fn parse(src: &str) -> Result<Expr, String> {
    let mut p = Parser {
        toks: lex(src)?,
        pos: 0,
    };
    let e = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected input after position {}", p.pos));
    }
    Ok(e)
}

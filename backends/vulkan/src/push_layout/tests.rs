//! The declared layouts against the shaders: each kernel's source is read with its includes,
//! keeping the lines its defines select (a small preprocessor: `#if`, `#ifdef`, `#ifndef`,
//! `#elif`, `#else`, `#endif`, object-like `#define`s), and its one push-constant block is
//! compared field by field with [`KernelId::push_layout`].

use super::{mismatch, Field, Kind, Layout};
use crate::catalogue::KernelId;
use std::collections::HashMap;
use std::path::Path;

/// Reads a file of `shaders/` by its path there.
fn read_shader(name: &str) -> Result<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders").join(name);
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The preprocessor's state: macros, and one entry per open conditional (whether its
/// enclosing text is kept, whether its current branch is, whether a branch was taken).
struct Pre<'r> {
    macros: HashMap<String, String>,
    read: &'r dyn Fn(&str) -> Result<String, String>,
    out: String,
}

impl Pre<'_> {
    fn active(stack: &[(bool, bool, bool)]) -> bool {
        stack.last().is_none_or(|&(outer, on, _)| outer && on)
    }

    fn file(&mut self, name: &str) -> Result<(), String> {
        let text = (self.read)(name)?;
        let mut stack: Vec<(bool, bool, bool)> = Vec::new();
        for line in text.lines() {
            let t = line.trim();
            let Some(d) = t.strip_prefix('#') else {
                if Self::active(&stack) {
                    self.out.push_str(line);
                    self.out.push('\n');
                }
                continue;
            };
            let d = d.split("//").next().unwrap_or("").trim();
            let (word, rest) = d.split_once(char::is_whitespace).unwrap_or((d, ""));
            let rest = rest.trim();
            let on = Self::active(&stack);
            match word {
                "if" | "ifdef" | "ifndef" => {
                    let v = match word {
                        "ifdef" => self.macros.contains_key(rest),
                        "ifndef" => !self.macros.contains_key(rest),
                        _ => on && self.eval(rest)? != 0,
                    };
                    stack.push((on, v, v));
                }
                "elif" => {
                    let (outer, _, taken) = stack.pop().ok_or("#elif without #if")?;
                    let v = !taken && outer && self.eval(rest)? != 0;
                    stack.push((outer, v, taken || v));
                }
                "else" => {
                    let (outer, _, taken) = stack.pop().ok_or("#else without #if")?;
                    stack.push((outer, !taken, true));
                }
                "endif" => {
                    stack.pop().ok_or("#endif without #if")?;
                }
                "define" if on => {
                    let (name, value) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                    if !name.contains('(') {
                        self.macros.insert(name.to_string(), value.trim().to_string());
                    }
                }
                "undef" if on => {
                    self.macros.remove(rest);
                }
                "include" if on => {
                    let inc = rest.trim_matches('"').to_string();
                    self.file(&inc)?;
                }
                _ => {}
            }
        }
        match stack.is_empty() {
            true => Ok(()),
            false => Err(format!("{name}: unterminated #if")),
        }
    }

    /// The value of a condition, as the C preprocessor computes it (unknown names are 0).
    fn eval(&self, expr: &str) -> Result<i64, String> {
        let tokens = tokenize(expr);
        let mut at = 0;
        let v = self.or(&tokens, &mut at)?;
        match at == tokens.len() {
            true => Ok(v),
            false => Err(format!("cannot read condition {expr:?}")),
        }
    }

    fn or(&self, t: &[String], at: &mut usize) -> Result<i64, String> {
        let mut v = self.and(t, at)?;
        while t.get(*at).is_some_and(|x| x == "||") {
            *at += 1;
            let r = self.and(t, at)?;
            v = (v != 0 || r != 0) as i64;
        }
        Ok(v)
    }

    fn and(&self, t: &[String], at: &mut usize) -> Result<i64, String> {
        let mut v = self.compare(t, at)?;
        while t.get(*at).is_some_and(|x| x == "&&") {
            *at += 1;
            let r = self.compare(t, at)?;
            v = (v != 0 && r != 0) as i64;
        }
        Ok(v)
    }

    fn compare(&self, t: &[String], at: &mut usize) -> Result<i64, String> {
        let l = self.unary(t, at)?;
        let Some(op) = t.get(*at).filter(|x| ["==", "!=", "<", ">", "<=", ">="].contains(&x.as_str())) else {
            return Ok(l);
        };
        let op = op.clone();
        *at += 1;
        let r = self.unary(t, at)?;
        Ok(match op.as_str() {
            "==" => l == r,
            "!=" => l != r,
            "<" => l < r,
            ">" => l > r,
            "<=" => l <= r,
            _ => l >= r,
        } as i64)
    }

    fn unary(&self, t: &[String], at: &mut usize) -> Result<i64, String> {
        let tok = t.get(*at).ok_or("condition ends early")?.clone();
        *at += 1;
        match tok.as_str() {
            "!" => Ok((self.unary(t, at)? == 0) as i64),
            "(" => {
                let v = self.or(t, at)?;
                match t.get(*at).map(String::as_str) {
                    Some(")") => {
                        *at += 1;
                        Ok(v)
                    }
                    _ => Err("unbalanced parentheses".into()),
                }
            }
            "defined" => {
                let paren = t.get(*at).is_some_and(|x| x == "(");
                let name = t.get(*at + paren as usize).ok_or("defined of nothing")?;
                *at += 1 + 2 * paren as usize;
                Ok(self.macros.contains_key(name) as i64)
            }
            n if n.chars().all(|c| c.is_ascii_digit()) => n.parse().map_err(|e| format!("{n}: {e}")),
            name => match self.macros.get(name) {
                Some(v) if v.is_empty() => Ok(0),
                Some(v) => self.eval(v),
                None => Ok(0),
            },
        }
    }
}

/// A condition's tokens: names, numbers, operators and parentheses.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            out.push(cs[start..i].iter().collect());
        } else {
            let two: String = cs[i..(i + 2).min(cs.len())].iter().collect();
            let op = if ["&&", "||", "==", "!=", "<=", ">="].contains(&two.as_str()) { two } else { c.to_string() };
            i += op.len();
            out.push(op);
        }
    }
    out
}

/// The fields of the one push-constant block of `source` compiled with `defines`.
fn push_block(
    source: &str,
    defines: &[(&str, String)],
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Vec<(String, Kind)>, String> {
    let macros = defines.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let mut pre = Pre { macros, read, out: String::new() };
    pre.file(source)?;
    let mut text = pre.out;
    // Blocks declared through a macro (`ARGS_STRUCT {`): expand those that declare one.
    for (name, value) in &pre.macros {
        if value.contains("push_constant") {
            text = text.replace(&format!("{name} {{"), &format!("{value} {{"));
        }
    }
    let starts: Vec<usize> = text.match_indices("layout(push_constant)").map(|(i, _)| i).collect();
    let [start] = starts[..] else { return Err(format!("{source}: {} push-constant blocks", starts.len())) };
    let open = start + text[start..].find('{').ok_or("no block")?;
    let close = open + text[open..].find('}').ok_or("unclosed block")?;
    let body: String =
        text[open + 1..close].lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join(" ");
    body.split(';')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            let mut w = d.split_whitespace();
            let (ty, name) = (w.next().unwrap_or(""), w.next().ok_or(format!("{source}: field {d:?}"))?);
            let kind = match ty {
                "uint" => Kind::U32,
                "float" => Kind::F32,
                _ => Kind::Addr,
            };
            Ok((name.to_string(), kind))
        })
        .collect()
}

fn fields(layout: Layout) -> Vec<(String, Kind)> {
    layout.iter().map(|f| (f.name.to_string(), f.kind)).collect()
}

#[test]
fn every_kernels_declared_push_constants_are_its_shaders() {
    let mut wrong = Vec::new();
    for k in KernelId::all() {
        let found = push_block(k.source(), &k.defines(), &read_shader).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        if found != fields(k.push_layout()) {
            wrong.push(format!("{}: the shader declares {found:?}", k.name()));
        }
    }
    assert!(
        wrong.is_empty(),
        "push constants declared in push_layout.rs differ from the shaders:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_reads_the_block_the_defines_select_and_catches_a_moved_field() {
    let files = |name: &str| {
        match name {
        "k.comp" => Ok("#include \"p.glsl\"\nvoid main() {}\n".to_string()),
        "p.glsl" => Ok("#ifndef B\n#define B 0\n#endif\n#if defined(A) && A && !B\n\
                        layout(push_constant) uniform P { Floats x; uint n; // count\n float eps; } p;\n\
                        #elif B || (A == 3)\n#define ARGS layout(push_constant) uniform P\nARGS { uint n; Floats x; } p;\n\
                        #else\nstruct Q { uint n; };\n#endif\n"
            .to_string()),
        other => Err(format!("no {other}")),
    }
    };
    let kinds = |d: &[(&str, String)]| push_block("k.comp", d, &files);
    let first = vec![("x".to_string(), Kind::Addr), ("n".into(), Kind::U32), ("eps".into(), Kind::F32)];
    assert_eq!(kinds(&[("A", "1".into())]).unwrap(), first);
    let second = vec![("n".to_string(), Kind::U32), ("x".into(), Kind::Addr)];
    assert_eq!(kinds(&[("A", "1".into()), ("B", "1".into())]).unwrap(), second);
    assert_eq!(kinds(&[("A", "2".into())]).unwrap(), first);
    assert!(kinds(&[("A", "0".into())]).is_err(), "no block selected");
    assert!(kinds(&[]).is_err(), "no block selected");
    // Pushes: the declared fields in order, extra fields after them allowed.
    const L: Layout = &[Field { name: "x", kind: Kind::Addr }, Field { name: "n", kind: Kind::U32 }];
    assert_eq!(mismatch(L, &[Kind::Addr, Kind::U32, Kind::F32]), None);
    assert!(mismatch(L, &[Kind::U32, Kind::Addr]).unwrap().contains("`x`"));
    assert!(mismatch(L, &[Kind::Addr]).unwrap().contains("not pushed"));
}

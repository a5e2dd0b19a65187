//! A crate's module graph from its sources, and the import cycles in it.
//!
//! Each file under `src/` is a module (`a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs`
//! are the root). Module `m` depends on `n` when `m` names `n` or an item in it through a `crate::`,
//! `super::` or `self::` path, in a `use` tree or in code; inline modules belong to their file, so a
//! `mod tests { use super::*; }` is no dependency. A parent declaring `mod child` is none either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One dependency of a module, and the first place that makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// `file:line`.
    pub at: String,
    /// The path as written, `::`-joined.
    pub path: String,
}

/// A set of modules that depend on each other, with the edges between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub modules: Vec<String>,
    pub edges: Vec<Edge>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.modules.join(" <-> "))?;
        for e in &self.edges {
            writeln!(f, "    {} -> {}: {} ({})", e.from, e.to, e.path, e.at)?;
        }
        Ok(())
    }
}

/// The module of a source file at `rel` (relative to `src/`), as path segments; the root is empty.
pub fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    let Some(last) = segs.pop() else { return segs };
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    let is_root = segs.is_empty() && (stem == "lib" || stem == "main");
    if !is_root && stem != "mod" {
        segs.push(stem.to_string());
    }
    segs
}

/// The cycles among the modules of a crate given as `(path relative to src/, source)` pairs.
pub fn cycles(files: &[(PathBuf, String)]) -> Vec<Cycle> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(rel, _)| module_of(rel)).collect();
    let mut edges: BTreeMap<(String, String), Edge> = BTreeMap::new();
    for (rel, text) in files {
        let from = module_of(rel);
        for (line, path, abs) in references(&from, text) {
            let to = owner(&modules, &abs);
            if to != from {
                let (from, to) = (name(&from), name(&to));
                let at = format!("{}:{line}", rel.display());
                edges.entry((from.clone(), to.clone())).or_insert(Edge { from, to, at, path });
            }
        }
    }
    let names: Vec<String> = modules.iter().map(|m| name(m)).collect();
    strongly_connected(&names, &edges)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .map(|modules| {
            let inside: BTreeSet<&String> = modules.iter().collect();
            let edges = edges.values().filter(|e| inside.contains(&e.from) && inside.contains(&e.to)).cloned().collect();
            Cycle { modules, edges }
        })
        .collect()
}

/// Every `.rs` file under `src`, as [`cycles`] takes them.
pub fn read_sources(src: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).expect("under src").to_path_buf();
                out.push((rel, std::fs::read_to_string(&path)?));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// The file module that holds `abs`: its longest prefix that is one.
fn owner(modules: &BTreeSet<Vec<String>>, abs: &[String]) -> Vec<String> {
    (0..=abs.len()).rev().map(|n| abs[..n].to_vec()).find(|p| modules.contains(p)).unwrap_or_default()
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Dollar,
    Other,
}

/// Tokens with their line, without comments, strings and character literals.
fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips to just past `end` (a byte string), counting lines; for strings, `\` escapes a byte.
    let skip_to = |i: &mut usize, line: &mut usize, end: &[u8], escapes: bool| {
        while *i < b.len() && !b[*i..].starts_with(end) {
            if b[*i] == b'\n' {
                *line += 1;
            }
            *i += if escapes && b[*i] == b'\\' { 2 } else { 1 };
        }
        *i = (*i + end.len()).min(b.len());
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => skip_to(&mut i, &mut line, b"\n", false),
            b'/' if b.get(i + 1) == Some(&b'*') => {
                // Block comments nest.
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(b[i] == b'\n');
                        i += 1;
                    }
                }
            }
            b'"' => {
                i += 1;
                skip_to(&mut i, &mut line, b"\"", true);
            }
            b'\'' => {
                // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    skip_to(&mut i, &mut line, b"'", true);
                } else if let Some(len) = text[i + 1..].chars().next().map(char::len_utf8).filter(|&n| b.get(i + 1 + n) == Some(&b'\'')) {
                    i += len + 2;
                } else {
                    i += 1;
                }
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push((Tok::PathSep, line));
                i += 2;
            }
            b'{' | b'}' | b',' | b';' | b'*' | b'$' => {
                let t = match c {
                    b'{' => Tok::Open,
                    b'}' => Tok::Close,
                    b',' => Tok::Comma,
                    b';' => Tok::Semi,
                    b'*' => Tok::Star,
                    _ => Tok::Dollar,
                };
                out.push((t, line));
                i += 1;
            }
            c if c == b'_' || c.is_ascii_alphanumeric() || c >= 0x80 => {
                let start = i;
                while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric() || b[i] >= 0x80) {
                    i += 1;
                }
                let word = &text[start..i];
                // Raw and byte strings: r"..", r#".."#, b"..", br#".."#.
                if matches!(word, "r" | "b" | "br" | "c" | "cr") && matches!(b.get(i), Some(b'"') | Some(b'#')) {
                    let hashes = b[i..].iter().take_while(|&&h| h == b'#').count();
                    if b.get(i + hashes) == Some(&b'"') {
                        i += hashes + 1;
                        let end = format!("\"{}", "#".repeat(hashes));
                        skip_to(&mut i, &mut line, end.as_bytes(), !word.contains('r'));
                        continue;
                    }
                }
                if word.as_bytes()[0].is_ascii_digit() {
                    out.push((Tok::Other, line));
                } else {
                    out.push((Tok::Ident(word.to_string()), line));
                }
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                out.push((Tok::Other, line));
                i += 1;
            }
        }
    }
    out
}

/// Every `crate::`, `super::` or `self::` path in a file of module `file`: its line, the path as
/// written, and the absolute module path it names.
fn references(file: &[String], text: &str) -> Vec<(usize, String, Vec<String>)> {
    let toks = tokens(text);
    let ident = |k: usize| match toks.get(k) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let mut out = Vec::new();
    // Inline modules open here: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut k = 0;
    while k < toks.len() {
        let here = || file.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect::<Vec<_>>();
        match &toks[k].0 {
            Tok::Open => depth += 1,
            Tok::Close => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Tok::Ident(w) if w == "mod" && toks.get(k + 2).is_some_and(|t| t.0 == Tok::Open) => {
                if let Some(n) = ident(k + 1) {
                    inline.push((n.to_string(), depth + 1));
                }
            }
            Tok::Ident(w) if w == "use" => {
                let line = toks[k].1;
                let mut paths = Vec::new();
                k = use_tree(&toks, k + 1, Vec::new(), &mut paths);
                for p in paths {
                    if let Some(abs) = resolve(&here(), &p) {
                        out.push((line, p.join("::"), abs));
                    }
                }
                continue;
            }
            Tok::Ident(w) if matches!(w.as_str(), "crate" | "super" | "self") => {
                // `$crate` is another crate's macro; `pub(in crate::x)` is a visibility.
                let after_sep = k > 0 && matches!(toks[k - 1].0, Tok::Dollar | Tok::PathSep);
                let in_vis = k > 0 && ident(k - 1) == Some("in");
                if !after_sep && !in_vis && toks.get(k + 1).is_some_and(|t| t.0 == Tok::PathSep) {
                    let mut p = vec![w.clone()];
                    let mut j = k + 1;
                    while toks.get(j).is_some_and(|t| t.0 == Tok::PathSep) {
                        match ident(j + 1) {
                            Some(s) => p.push(s.to_string()),
                            None => break,
                        }
                        j += 2;
                    }
                    if let Some(abs) = resolve(&here(), &p) {
                        out.push((toks[k].1, p.join("::"), abs));
                    }
                    k = j;
                    continue;
                }
            }
            _ => {}
        }
        k += 1;
    }
    out
}

/// Expands the use tree starting at `k` into full paths; returns the index after it.
fn use_tree(toks: &[(Tok, usize)], mut k: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        match toks.get(k).map(|t| &t.0) {
            Some(Tok::PathSep) => k += 1,
            Some(Tok::Ident(s)) if s == "as" => {
                // `as name`: the path is complete.
                out.push(prefix);
                return k + 2;
            }
            Some(Tok::Ident(s)) => {
                // `{self, ..}` names the prefix itself.
                if s != "self" || prefix.is_empty() {
                    prefix.push(s.clone());
                }
                k += 1;
            }
            Some(Tok::Star) => {
                out.push(prefix);
                return k + 1;
            }
            Some(Tok::Open) => {
                k += 1;
                while !matches!(toks.get(k).map(|t| &t.0), Some(Tok::Close) | None) {
                    k = use_tree(toks, k, prefix.clone(), out);
                    if toks.get(k).is_some_and(|t| t.0 == Tok::Comma) {
                        k += 1;
                    }
                }
                return k + 1;
            }
            _ => {
                out.push(prefix);
                return k;
            }
        }
    }
}

/// The absolute path a `crate::`/`super::`/`self::` path names from module `here`, or None for
/// other paths (external crates, relative names).
fn resolve(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut segs = path.iter().peekable();
    let mut base = match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            Vec::new()
        }
        Some("self") => {
            segs.next();
            here.to_vec()
        }
        Some("super") => here.to_vec(),
        _ => return None,
    };
    while segs.peek().is_some_and(|s| *s == "super") {
        segs.next();
        base.pop();
    }
    base.extend(segs.cloned());
    Some(base)
}

/// Tarjan's strongly connected components of the graph, each sorted.
fn strongly_connected(nodes: &[String], edges: &BTreeMap<(String, String), Edge>) -> Vec<Vec<String>> {
    struct State<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.next.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            scc.sort();
            s.out.push(scc);
        }
    }
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from.as_str()).or_default().push(to.as_str());
    }
    let mut s = State { next, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), out: Vec::new() };
    for v in nodes {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> Vec<Cycle> {
        cycles(&files.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect::<Vec<_>>())
    }

    fn members(c: &[Cycle]) -> Vec<Vec<&str>> {
        c.iter().map(|c| c.modules.iter().map(|m| m.as_str()).collect()).collect()
    }

    #[test]
    fn module_paths() {
        assert_eq!(module_of(Path::new("lib.rs")), Vec::<String>::new());
        assert_eq!(module_of(Path::new("a.rs")), ["a"]);
        assert_eq!(module_of(Path::new("a/mod.rs")), ["a"]);
        assert_eq!(module_of(Path::new("a/b.rs")), ["a", "b"]);
        assert_eq!(module_of(Path::new("a/lib.rs")), ["a", "lib"]);
    }

    #[test]
    fn use_and_paths_in_code_make_cycles() {
        let c = crate_of(&[("lib.rs", "mod a; mod b;"), ("a.rs", "use crate::b::{X, y::Z};"), ("b.rs", "fn f() { crate::a::g(); }")]);
        assert_eq!(members(&c), [["a", "b"]]);
        assert_eq!(c[0].edges.len(), 2);
        assert_eq!(c[0].edges[0].at, "a.rs:1");
        assert_eq!(c[0].edges[1].path, "crate::a::g");
    }

    #[test]
    fn child_using_parent_through_super() {
        let c = crate_of(&[("lib.rs", ""), ("p.rs", "mod c;\nuse crate::p::c::Thing;"), ("p/c.rs", "use super::*;")]);
        assert_eq!(members(&c), [["p", "p::c"]]);
        // Declaring `mod c` alone is no edge.
        let c = crate_of(&[("lib.rs", ""), ("p.rs", "mod c; pub use c::Thing;"), ("p/c.rs", "use super::Other;")]);
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn inline_modules_belong_to_their_file() {
        let c = crate_of(&[
            ("lib.rs", ""),
            ("a.rs", "use crate::b::X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    mod deep { use super::super::Y; }\n}\n"),
            ("b.rs", "pub struct X;"),
        ]);
        assert!(c.is_empty(), "{c:?}");
        // ..but `super::` from an inline module of b is b's parent only one level up.
        let c = crate_of(&[("lib.rs", ""), ("a.rs", "use crate::b::X;"), ("b.rs", "mod inner { use super::super::a::Y; }")]);
        assert_eq!(members(&c), [["a", "b"]]);
    }

    #[test]
    fn comments_strings_and_macros_are_no_references() {
        let c = crate_of(&[
            ("lib.rs", ""),
            ("a.rs", "use crate::b::X;"),
            (
                "b.rs",
                "//! [`crate::a::Y`]\n/* crate::a::Y /* nested */ crate::a::Y */\nconst S: &str = \"crate::a::Y\";\nconst R: &str = r#\"crate::a::\"Y\"#;\nconst B: &[u8] = b\"\\\"crate::a::Y\";\nconst C: char = '\"';\nmacro_rules! m { () => { $crate::a::Y } }\npub(in crate::a) fn f<'a>(x: &'a u8) {}",
            ),
        ]);
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn three_module_cycle_and_root() {
        let c =
            crate_of(&[("lib.rs", "pub struct E;"), ("a.rs", "use crate::b::X;"), ("b.rs", "use crate::c::X;"), ("c.rs", "use crate::{a::Y, E};")]);
        assert_eq!(members(&c), [["a", "b", "c"]]);
        // Everything may use the root; a root that uses a child back is a cycle.
        let c = crate_of(&[("lib.rs", "fn f() { crate::a::g() }"), ("a.rs", "use crate::E;")]);
        assert_eq!(members(&c), [["a", "crate"]]);
    }
}

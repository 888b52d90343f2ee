//! The engine's module structure, read from its source: every `use crate::…` / `super::…`
//! path (and a child module's name) is an edge from the module whose file holds it to the
//! module it names. The graph must have no circle, no module may use one of a higher layer
//! (`LAYERS`), no module of `tls` but the registry may name a stack of `tls::stacks` other
//! than its own, and the crate root only declares. Test code (`#[cfg(test)]` items and the
//! test-only modules they declare) is left out: tests may use whatever they test with.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of the engine, lowest first: a module may use its own layer and those below.
/// A module belongs to the longest entry that is it or one of its ancestors; a module no
/// entry covers is an error (a new module is placed here when it is added). `crate` is the
/// root alone.
const LAYERS: &[(&str, u32)] = &[
    // The base every command uses: errors and output, clocks, counting, files.
    ("crate::out", 0),
    ("crate::cputime", 0),
    ("crate::heap", 0),
    ("crate::paint", 0),
    ("crate::secrets", 0),
    ("crate::lifecycle", 0),
    // Measurements below TLS.
    ("crate::primitives", 1),
    ("crate::aead", 1),
    ("crate::dhparams", 1),
    ("crate::capture", 1),
    ("crate::linkem", 1),
    // TLS, from what any stack uses to the commands.
    ("crate::tls::http", 2),
    ("crate::tls::pki", 2),
    ("crate::tls::record", 3),
    ("crate::tls::transport", 4),
    ("crate::tls::stack", 5),
    ("crate::tls::stacks", 6),
    ("crate::tls::registry", 7),
    ("crate::tls::loops", 8),
    ("crate::tls::commands", 9),
    ("crate::tls::contract", 9),
    ("crate::tls", 9),
    ("crate::info", 10),
    ("crate::cli", 11),
    ("crate", 12),
];

type Graph = BTreeMap<String, BTreeSet<String>>;

// ---------------------------------------------------------------------------------------
// Reading the source.

/// The source without comments, string and character literals (each replaced by a space),
/// so that braces and paths are code.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(n) = raw_string_len(rest) {
            i += n;
            out.push(' ');
        } else if b[i] == b'"' || rest.starts_with("b\"") {
            i += if b[i] == b'"' { 1 } else { 2 };
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if let Some(n) = char_literal_len(rest) {
            i += n;
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start of `s`.
fn raw_string_len(s: &str) -> Option<usize> {
    let after_r = s.strip_prefix("br").or_else(|| s.strip_prefix('r'))?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)?;
    Some(s.len() - body.len() + end + close.len())
}

/// The length of a character literal (`'x'`, `'\n'`, `'\u{1F600}'`) at the start of `s`;
/// None for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let body = s.strip_prefix('\'')?;
    if let Some(esc) = body.strip_prefix('\\') {
        let end = esc.find('\'')?;
        return Some(2 + end + 1);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..]
        .starts_with('\'')
        .then(|| 1 + c.len_utf8() + 1)
}

/// `code` without the `#[cfg(test)]` items: a `mod x;`, a `mod x { … }`, or any other item
/// or statement up to its `;` or its closing brace.
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let semi = item.find(';').unwrap_or(item.len());
        let brace = item.find('{').unwrap_or(item.len());
        let end = if semi < brace {
            semi + 1
        } else {
            let mut depth = 0usize;
            let mut end = item.len();
            for (i, c) in item.char_indices().skip(brace) {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The child modules a file declares (`mod x;`, `pub mod x;`).
fn declared_children(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for stmt in code.split(';') {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let [.., m, name] = words.as_slice() {
            if *m == "mod" && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// Whether `code` holds an inline module (`mod x {`).
fn inline_module(code: &str) -> bool {
    let words: Vec<&str> = code.split_whitespace().collect();
    words
        .windows(3)
        .any(|w| w[0] == "mod" && (w[2] == "{" || w[1].ends_with('{')))
}

/// Every path a `use` tree names, expanded: `use a::{b, c::{d, self}}` gives `a::b`,
/// `a::c::d`, `a::c`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        let path = path.trim_end_matches("::*").trim_end_matches("::self");
        return vec![path.to_string()];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let mut out = Vec::new();
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        for sub in expand_use(p) {
            if sub == "self" || sub.is_empty() {
                out.push(prefix.to_string());
            } else if prefix.is_empty() {
                out.push(sub);
            } else {
                out.push(format!("{prefix}::{sub}"));
            }
        }
    }
    out
}

/// Every path in `code` that starts at `crate`, `super` or `self`, or at one of `children`
/// (the module's own child modules), as written: `use` trees expanded, other paths read
/// up to their last `::` segment.
fn paths(code: &str, children: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = String::new();
    // `use` statements first (their trees), then every other path in what is left.
    let mut tail = code;
    while let Some(at) = find_word(tail, "use") {
        rest.push_str(&tail[..at]);
        let stmt = &tail[at + 3..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        out.extend(expand_use(&stmt[..end]));
        tail = &stmt[(end + 1).min(stmt.len())..];
    }
    rest.push_str(tail);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let bytes: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            let mut j = i;
            loop {
                while j < bytes.len() && is_ident(bytes[j]) {
                    j += 1;
                }
                if j + 2 < bytes.len()
                    && bytes[j] == ':'
                    && bytes[j + 1] == ':'
                    && is_ident(bytes[j + 2])
                {
                    j += 2;
                } else {
                    break;
                }
            }
            let path: String = bytes[i..j].iter().collect();
            let first = path.split("::").next().unwrap_or("");
            if path.contains("::")
                && (["crate", "super", "self"].contains(&first)
                    || children.iter().any(|c| c == first))
            {
                out.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out.into_iter()
        .filter(|p| {
            let first = p.split("::").next().unwrap_or("");
            ["crate", "super", "self"].contains(&first) || children.iter().any(|c| c == first)
        })
        .collect()
}

/// Where `word` occurs as a whole word in `s`.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(k) = s[from..].find(word) {
        let at = from + k;
        let before = s[..at].chars().next_back();
        let after = s[at + word.len()..].chars().next();
        if !before.is_some_and(is_ident) && !after.is_some_and(is_ident) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// `path` as written in module `module` made absolute (`crate::…`).
fn absolute(module: &str, path: &str) -> Option<String> {
    let mut segs: Vec<&str> = module.split("::").collect();
    let mut parts = path.split("::").peekable();
    match *parts.peek()? {
        "crate" => {
            segs = vec!["crate"];
            parts.next();
        }
        "self" => {
            parts.next();
        }
        "super" => {
            while parts.peek() == Some(&"super") {
                parts.next();
                if segs.len() < 2 {
                    return None;
                }
                segs.pop();
            }
        }
        _ => {} // a child module of `module`
    }
    let mut out: Vec<&str> = segs;
    out.extend(parts);
    Some(out.join("::"))
}

/// The module `path` (absolute) lands in: its longest prefix that is a module.
fn target<'a>(modules: &'a BTreeSet<String>, path: &str) -> Option<&'a String> {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len())
        .rev()
        .find_map(|n| modules.get(&segs[..n].join("::")))
}

/// The files of the crate under `src` by module (`crate`, `crate::tls::stack`), reached
/// from `lib.rs` through the declarations that are not test code, each with its code
/// (comments, literals and test items removed).
fn crate_modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![("crate".to_string(), src.join("lib.rs"), src.to_path_buf())];
    while let Some((module, file, dir)) = todo.pop() {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let code = without_test_items(&code_only(&text));
        // `super::` inside an inline module would be read as the file's: there are none.
        assert!(
            !inline_module(&code),
            "{}: an inline module outside test code; give it a file",
            file.display()
        );
        for child in declared_children(&code) {
            let (path, child_dir) = child_file(&dir, &child);
            todo.push((format!("{module}::{child}"), path, child_dir));
        }
        out.insert(module, code);
    }
    out
}

fn child_file(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        (flat, dir.join(name))
    } else {
        (dir.join(name).join("mod.rs"), dir.join(name))
    }
}

/// The module graph of `modules` (module -> its code): an edge for every path a module's
/// code names in another module. Paths that land in the crate root are its macros
/// (`crate::bail!`) and re-exports, not a module's code: no edge.
fn graph(modules: &BTreeMap<String, String>) -> Graph {
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut g = Graph::new();
    for (module, code) in modules {
        let children = declared_children(code);
        let edges = g.entry(module.clone()).or_default();
        for p in paths(code, &children) {
            let Some(abs) = absolute(module, &p) else {
                continue;
            };
            if let Some(t) = target(&names, &abs) {
                if t != module && t != "crate" {
                    edges.insert(t.clone());
                }
            }
        }
    }
    g
}

// ---------------------------------------------------------------------------------------
// The checks.

/// Every circle of `g`: its strongly connected components of more than one module, each as
/// the modules in it.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iteratively small enough to recurse: the crate has ~80 modules.
    struct State<'a> {
        g: &'a Graph,
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
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The layer of `module` in `layers`, by its longest covering entry (an entry covers its
/// module and the modules inside it; `crate` covers only the root).
fn layer(layers: &[(&str, u32)], module: &str) -> Option<u32> {
    layers
        .iter()
        .filter(|(m, _)| module == *m || (*m != "crate" && module.starts_with(&format!("{m}::"))))
        .max_by_key(|(m, _)| m.len())
        .map(|(_, l)| *l)
}

/// Every edge of `g` that climbs (to a higher layer), and every module no layer covers.
fn climbs(g: &Graph, layers: &[(&str, u32)]) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in g {
        let Some(lf) = layer(layers, from) else {
            out.push(format!("{from} is in no layer"));
            continue;
        };
        for to in tos {
            match layer(layers, to) {
                Some(lt) if lt > lf => {
                    out.push(format!("{from} (layer {lf}) uses {to} (layer {lt})"))
                }
                _ => {}
            }
        }
    }
    out
}

/// Every module of `crate::tls` that names a concrete stack (`crate::tls::stacks::NAME`)
/// although it is neither the registry nor inside that stack's folder.
fn stack_namers(g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in g {
        if !from.starts_with("crate::tls") || from == "crate::tls::registry" {
            continue;
        }
        for to in tos {
            let Some(rest) = to.strip_prefix("crate::tls::stacks::") else {
                continue;
            };
            let own = format!("crate::tls::stacks::{}", rest.split("::").next().unwrap());
            if from != &own && !from.starts_with(&format!("{own}::")) {
                out.push(format!("{from} names {to}"));
            }
        }
    }
    out
}

fn engine_graph() -> (BTreeMap<String, String>, Graph) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = crate_modules(&src);
    let g = graph(&modules);
    (modules, g)
}

// ---------------------------------------------------------------------------------------
// The engine.

#[test]
fn the_engine_has_no_module_circle() {
    let (modules, g) = engine_graph();
    let found = circles(&g);
    assert!(found.is_empty(), "module circles: {found:#?}");
    // The reading found the engine's modules and their uses (not an empty graph).
    assert!(modules.len() > 50, "{:?}", modules.keys());
    assert!(g["crate::tls::loops::server"].contains("crate::tls::stack"));
    assert!(g["crate::info"].contains("crate::tls::registry"));
}

#[test]
fn no_engine_module_uses_one_of_a_higher_layer() {
    let (_, g) = engine_graph();
    let found = climbs(&g, LAYERS);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn only_the_registry_and_a_stack_s_own_folder_name_the_stack() {
    let (_, g) = engine_graph();
    let found = stack_namers(&g);
    assert!(found.is_empty(), "{found:#?}");
    // The registry does name them: the check reads the edges it should.
    assert!(g
        .get("crate::tls::registry")
        .into_iter()
        .flatten()
        .any(|m| m.starts_with("crate::tls::stacks::")));
}

#[test]
fn the_crate_root_only_declares() {
    let (modules, g) = engine_graph();
    let root = &modules["crate"];
    for stmt in root.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        assert!(
            stmt.starts_with("pub mod ") || stmt.starts_with("mod ") || stmt == "pub use libc",
            "lib.rs holds more than declarations: {stmt:?}"
        );
    }
    assert!(g["crate"].is_empty(), "{:?}", g["crate"]);
}

// ---------------------------------------------------------------------------------------
// The checker, on made-up code.

fn made_up(files: &[(&str, &str)]) -> Graph {
    let modules: BTreeMap<String, String> = files
        .iter()
        .map(|(m, src)| (m.to_string(), without_test_items(&code_only(src))))
        .collect();
    graph(&modules)
}

#[test]
fn an_injected_circle_is_found() {
    let g = made_up(&[
        ("crate", "pub mod a; pub mod b; pub mod c;"),
        ("crate::a", "use crate::b::Thing;"),
        ("crate::b", "fn f() { super::c::g() }"),
        ("crate::c", "use crate::{a::{self, X}};"),
    ]);
    assert_eq!(circles(&g), vec![vec!["crate::a", "crate::b", "crate::c"]]);
    // Without the closing edge, no circle.
    let g = made_up(&[
        ("crate", "pub mod a; pub mod b; pub mod c;"),
        ("crate::a", "use crate::b::Thing;"),
        ("crate::b", "fn f() { super::c::g() }"),
        (
            "crate::c",
            "// use crate::a::X;\nconst S: &str = \"crate::a::X\";",
        ),
    ]);
    assert!(circles(&g).is_empty(), "{g:?}");
}

#[test]
fn a_climbing_module_and_a_module_in_no_layer_are_found() {
    let g = made_up(&[
        ("crate", "pub mod low; pub mod high; pub mod stray;"),
        ("crate::low", "use crate::high::Top;"),
        ("crate::high", "use crate::low::Bottom;"),
        ("crate::stray", ""),
    ]);
    let layers = [("crate::low", 0), ("crate::high", 1), ("crate", 2)];
    assert_eq!(
        climbs(&g, &layers),
        vec![
            "crate::low (layer 0) uses crate::high (layer 1)",
            "crate::stray is in no layer",
        ]
    );
}

#[test]
fn test_code_comments_and_strings_make_no_edge_and_children_do() {
    let g = made_up(&[
        ("crate", "pub mod a; pub mod b;"),
        (
            "crate::a",
            "mod inner;\n/* crate::b */ #[cfg(test)]\nmod tests { use crate::b::X; }\n\
             #[cfg(test)]\nmod helpers;\nfn f() { let _ = \"super::b\"; let _c = '{'; inner::g(); }",
        ),
        ("crate::a::inner", "pub fn g() {}"),
        ("crate::b", ""),
    ]);
    assert_eq!(
        g["crate::a"],
        BTreeSet::from(["crate::a::inner".to_string()])
    );
}

#[test]
fn an_inline_module_is_seen() {
    assert!(inline_module("pub mod testing {\n use super::*; }"));
    assert!(inline_module("mod t{ }"));
    assert!(!inline_module(
        "pub mod testing;\nfn f() { let module = 1; }"
    ));
}

#[test]
fn a_module_naming_another_stack_is_found() {
    let g = made_up(&[
        ("crate", "pub mod tls;"),
        (
            "crate::tls",
            "pub mod loops; pub mod registry; pub mod stacks;",
        ),
        ("crate::tls::stacks", "pub mod one; pub mod two;"),
        (
            "crate::tls::stacks::one",
            "use crate::tls::stacks::two::Two;",
        ),
        ("crate::tls::stacks::two", ""),
        (
            "crate::tls::registry",
            "use super::stacks::{one::One, two::Two};",
        ),
        (
            "crate::tls::loops",
            "fn f() { crate::tls::stacks::one::ffi(); }",
        ),
    ]);
    assert_eq!(
        stack_namers(&g),
        vec![
            "crate::tls::loops names crate::tls::stacks::one",
            "crate::tls::stacks::one names crate::tls::stacks::two",
        ]
    );
}

//! The order of the house, checked: ARCHITECTURE.md's tier table against the imports of `src/`.
//!
//! Every file of `src/` belongs to one tier of the table (the most specific entry naming it: a
//! file, or a directory for all the files under it). A file may import from its own tier and
//! the tiers below, never from a higher one; no two files may import each other, directly or
//! round a longer loop (a `mod.rs` and the files of its own directory aside: a module and its
//! children are one room). An import is a `use` of the crate's own paths (`crate::`, `super::`,
//! `self::`) or such a path written in code; comments and the `mod tests` at a file's end are
//! not read. A room the document seals ("`store/` is used only by ...") is checked too.
//!
//! `cargo test --test cli layers -- --nocapture` prints the graph: files, imports between
//! files, cycles and upward imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One import of one file: where it is and what it names.
#[derive(Debug, Clone)]
struct Import {
    from: String,
    line: usize,
    to: String,
    path: String,
}

#[test]
fn every_import_goes_down_the_tiers_of_architecture_md_and_no_files_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let table = tiers(&markdown);
    let files = source_files(&root.join("src"));
    let mut problems = table_problems(&table, &files);

    let tier_of: BTreeMap<&str, (usize, &str)> =
        files.iter().filter_map(|f| entry_for(&table, f).map(|(tier, name, _)| (f.as_str(), (tier, name)))).collect();
    let modules: BTreeMap<Vec<String>, String> = files.iter().map(|f| (module_path(f), f.clone())).collect();
    let imports: Vec<Import> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root.join("src").join(f)).unwrap();
            imports_of(f, &text, &modules)
        })
        .collect();

    let mut upward = Vec::new();
    for import in &imports {
        let (Some(&(from_tier, from_name)), Some(&(to_tier, to_name))) =
            (tier_of.get(import.from.as_str()), tier_of.get(import.to.as_str()))
        else {
            continue;
        };
        if to_tier > from_tier {
            upward.push(format!(
                "upward import: src/{}:{} uses {} (src/{}, tier {to_tier} {to_name}) from tier {from_tier} ({from_name})",
                import.from, import.line, import.path, import.to
            ));
        }
    }
    let cycles = cycles(&files, &imports);
    let mut sealed_uses = Vec::new();
    for (sealed, users) in sealed_rooms(&markdown) {
        for import in &imports {
            let inside = |f: &str, entry: &str| f == entry || entry.ends_with('/') && f.starts_with(entry);
            if inside(&import.to, &sealed)
                && !inside(&import.from, &sealed)
                && !users.iter().any(|u| inside(&import.from, u))
            {
                sealed_uses.push(format!(
                    "sealed room: src/{}:{} uses {} (src/{}), but ARCHITECTURE.md says `{sealed}` is used only by {}",
                    import.from,
                    import.line,
                    import.path,
                    import.to,
                    users.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }

    let edges: BTreeSet<(&str, &str)> = imports.iter().map(|i| (i.from.as_str(), i.to.as_str())).collect();
    println!(
        "{} files, {} imports between files, {} cycles, {} upward imports, {} imports into a sealed room",
        files.len(),
        edges.len(),
        cycles.len(),
        upward.len(),
        sealed_uses.len()
    );
    for (from, to) in &edges {
        println!("  src/{from} -> src/{to}");
    }
    problems.extend(upward);
    problems.extend(sealed_uses);
    problems.extend(cycles);
    for problem in &problems {
        println!("{problem}");
    }
    assert!(problems.is_empty(), "the order of ARCHITECTURE.md does not hold:\n{}", problems.join("\n"));
}

/// The tier table of ARCHITECTURE.md: (tier, name, entries), an entry being a file (`spec.rs`)
/// or a directory (`store/`) relative to `src/`, written in backticks in the table's third
/// column (the rows whose first cell is a number).
fn tiers(markdown: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut table = Vec::new();
    for line in markdown.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        let [tier, name, modules, ..] = cells[..] else { continue };
        let Ok(tier) = tier.parse::<usize>() else { continue };
        let entries = modules.split('`').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>();
        table.push((tier, name.to_string(), entries));
    }
    assert!(!table.is_empty(), "ARCHITECTURE.md has no tier table (| tier | name | modules | ... |)");
    table
}

/// The rooms ARCHITECTURE.md seals: a line "`store/` is used only by `context.rs` and
/// `workspace/`." gives (`store/`, [`context.rs`, `workspace/`]).
fn sealed_rooms(markdown: &str) -> Vec<(String, Vec<String>)> {
    markdown
        .lines()
        .filter(|l| l.contains(" is used only by "))
        .filter_map(|line| {
            let mut entries = line.split('`').skip(1).step_by(2).map(str::to_string);
            Some((entries.next()?, entries.collect()))
        })
        .collect()
}

/// Every `.rs` file under `src/`, relative to it, with `/` separators.
fn source_files(src: &Path) -> Vec<String> {
    fn walk(dir: &Path, src: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut files = Vec::new();
    walk(src, src, &mut files);
    files.sort();
    files
}

/// The table's entry that places `file`: a file entry, else the longest directory entry.
fn entry_for<'a>(table: &'a [(usize, String, Vec<String>)], file: &str) -> Option<(usize, &'a str, &'a str)> {
    let mut best: Option<(usize, &str, &str)> = None;
    for (tier, name, entries) in table {
        for entry in entries {
            let fits = entry == file || (entry.ends_with('/') && file.starts_with(entry.as_str()));
            if fits && best.is_none_or(|(_, _, e)| entry.len() > e.len()) {
                best = Some((*tier, name, entry));
            }
        }
    }
    best
}

/// Where the table and `src/` differ: a file no entry places, an entry naming nothing, an
/// entry written twice.
fn table_problems(table: &[(usize, String, Vec<String>)], files: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (tier, _, entries) in table {
        for entry in entries {
            if !seen.insert(entry.clone()) {
                problems.push(format!("ARCHITECTURE.md: `{entry}` is in the table twice"));
            }
            let exists = if entry.ends_with('/') {
                files.iter().any(|f| f.starts_with(entry.as_str()))
            } else {
                files.contains(entry)
            };
            if !exists {
                problems.push(format!("ARCHITECTURE.md: tier {tier} names `{entry}`, which is not in src/"));
            }
        }
    }
    for file in files {
        if entry_for(table, file).is_none() {
            problems.push(format!("ARCHITECTURE.md: src/{file} is in no tier of the table"));
        }
    }
    problems
}

/// The module path of a file: `store/lease.rs` is `store::lease`, `store/mod.rs` is `store`,
/// `lib.rs` (and `main.rs`, a crate of its own that names nothing of this one by `crate::`)
/// the root.
fn module_path(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The text a file's imports are read from: comments removed, and the `#[cfg(test)] mod
/// tests { ... }` at its end cut off (a test module may reach anywhere).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("mod tests {") {
            break;
        }
        let line = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Every path of this crate a file names, resolved to the file of the module it reaches.
fn imports_of(file: &str, text: &str, modules: &BTreeMap<Vec<String>, String>) -> Vec<Import> {
    let code = code_of(text);
    let here = module_path(file);
    let is_mod_file = file.ends_with("mod.rs") || file == "lib.rs";
    // `super` of a file is its parent module; `self` the module itself.
    let parent: Vec<String> = if is_mod_file { here.clone() } else { here[..here.len().saturating_sub(1)].to_vec() };
    let parent_of_mod: Vec<String> = parent[..parent.len().saturating_sub(1)].to_vec();
    let mut found = Vec::new();
    let mut add = |path: String, line: usize| {
        let mut segments: Vec<String> = path.split("::").map(str::to_string).collect();
        let mut base = match segments.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            // In the crate root, its modules are in scope by their names.
            Some(first) if file == "lib.rs" && modules.contains_key(&vec![first.to_string()]) => {
                segments.insert(0, "crate".into());
                Vec::new()
            }
            Some("self") => here.clone(),
            Some("super") => {
                let mut base = if is_mod_file { parent_of_mod.clone() } else { parent.clone() };
                let mut ups = segments.iter().skip(1).take_while(|s| *s == "super").count();
                while ups > 0 {
                    base.pop();
                    ups -= 1;
                }
                segments.retain(|s| s != "super");
                segments.insert(0, String::new());
                base
            }
            _ => return,
        };
        let rest: Vec<String> = segments.into_iter().skip(1).collect();
        // The longest prefix of the full path that is a file's module.
        let mut best = (modules.get(&base).cloned(), 0);
        for (i, segment) in rest.iter().enumerate() {
            base.push(segment.clone());
            if let Some(target) = modules.get(&base) {
                best = (Some(target.clone()), i + 1);
            }
        }
        if let (Some(to), _) = best {
            if to != file {
                found.push(Import { from: file.to_string(), line, to, path });
            }
        }
    };

    let line_of = |offset: usize| code[..offset].matches('\n').count() + 1;
    // `use` trees, braces expanded.
    let mut in_use = Vec::new();
    let mut at = 0;
    while let Some(start) = code[at..].find("use ").map(|i| i + at) {
        at = start + 4;
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = code[start..].find(';').map(|i| i + start) else { break };
        let tree = code[start + 4..end].split_whitespace().collect::<Vec<_>>().join(" ");
        for path in expand_use(&tree) {
            add(path, line_of(start));
        }
        in_use.push(start..end);
        at = end;
    }
    // Paths written in code (in the crate root, also those that begin with a module's name).
    let roots: Vec<String> = if file == "lib.rs" {
        modules.keys().filter(|m| m.len() == 1).map(|m| format!("{}::", m[0])).collect()
    } else {
        Vec::new()
    };
    for keyword in ["crate::", "super::", "self::"].into_iter().chain(roots.iter().map(String::as_str)) {
        let mut at = 0;
        while let Some(start) = code[at..].find(keyword).map(|i| i + at) {
            at = start + keyword.len();
            if in_use.iter().any(|r| r.contains(&start)) {
                continue;
            }
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String =
                code[start..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            add(path.trim_end_matches(':').to_string(), line_of(start));
        }
    }
    found
}

/// `crate::{a::{self, B}, c}` as `crate::a`, `crate::a::B`, `crate::c`.
fn expand_use(tree: &str) -> Vec<String> {
    fn go(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim().trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let prefix = join(prefix, head);
            let mut depth = 0;
            let mut part = String::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        go(&prefix, &part, out);
                        part.clear();
                        continue;
                    }
                    _ => {}
                }
                part.push(c);
            }
            go(&prefix, &part, out);
        } else if !tree.is_empty() {
            // `a::B as C` names `a::B`.
            let tree = tree.split_whitespace().next().unwrap_or(tree);
            let path = join(prefix, tree);
            out.push(path.trim_end_matches("::self").trim_end_matches("::*").to_string());
        }
    }
    fn join(prefix: &str, tail: &str) -> String {
        match (prefix.is_empty(), tail.is_empty()) {
            (true, _) => tail.to_string(),
            (_, true) => prefix.to_string(),
            _ => format!("{prefix}::{tail}"),
        }
    }
    let mut out = Vec::new();
    go("", tree, &mut out);
    out
}

/// Each set of files that import each other (a strongly connected component of more than one
/// file), edges between a `mod.rs` and the files of its own directory left out, with the
/// imports that close it.
fn cycles(files: &[String], imports: &[Import]) -> Vec<String> {
    let own_room = |a: &str, b: &str| {
        let dir_of_mod = |m: &str| m.strip_suffix("mod.rs").map(str::to_string);
        let within = |m: &str, f: &str| dir_of_mod(m).is_some_and(|d| f.starts_with(&d) && f != m);
        within(a, b) || within(b, a)
    };
    let index: BTreeMap<&str, usize> = files.iter().enumerate().map(|(i, f)| (f.as_str(), i)).collect();
    let mut next: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); files.len()];
    for import in imports {
        if own_room(&import.from, &import.to) {
            continue;
        }
        if let (Some(&a), Some(&b)) = (index.get(import.from.as_str()), index.get(import.to.as_str())) {
            next[a].insert(b);
        }
    }
    // Tarjan's strongly connected components.
    struct Walk<'a> {
        next: &'a [BTreeSet<usize>],
        order: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk<'_>, v: usize) {
        w.order[v] = Some(w.counter);
        w.low[v] = w.counter;
        w.counter += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &u in w.next[v].clone().iter() {
            match w.order[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(o) if w.on_stack[u] => w.low[v] = w.low[v].min(o),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.order[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                component.push(u);
                if u == v {
                    break;
                }
            }
            w.components.push(component);
        }
    }
    let mut walk = Walk {
        next: &next,
        order: vec![None; files.len()],
        low: vec![0; files.len()],
        on_stack: vec![false; files.len()],
        stack: Vec::new(),
        counter: 0,
        components: Vec::new(),
    };
    for v in 0..files.len() {
        if walk.order[v].is_none() {
            visit(&mut walk, v);
        }
    }
    let mut found = Vec::new();
    for component in walk.components.iter().filter(|c| c.len() > 1) {
        let members: BTreeSet<&str> = component.iter().map(|&i| files[i].as_str()).collect();
        let mut closing: Vec<String> = imports
            .iter()
            .filter(|i| members.contains(i.from.as_str()) && members.contains(i.to.as_str()))
            .filter(|i| !own_room(&i.from, &i.to))
            .map(|i| format!("src/{}:{} uses {}", i.from, i.line, i.path))
            .collect();
        closing.dedup();
        found.push(format!(
            "import cycle of {} files ({}): {}",
            members.len(),
            members.iter().map(|m| format!("src/{m}")).collect::<Vec<_>>().join(", "),
            closing.join("; ")
        ));
    }
    found
}

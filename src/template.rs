//! Template variables in spec strings: ``{{ var `/self/instId` }}`` (back-quotes or double
//! quotes, any spacing). Unlike the reference, which ran Go's text/template over the JSON *text*
//! with every infrakit function, this renders inside parsed JSON string values, knows only
//! `var` and the three variables below, and treats an unknown or undefined variable as an
//! error rather than `<no value>`. Terraform's own `${...}` and `%{...}` pass through.
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use serde_json::Value;

use crate::text::short;

/// The variables a template may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // named as the templates name them: instId, logicalId, attachId
pub enum Var {
    InstId,
    LogicalId,
    AttachId,
}

impl Var {
    fn parse(name: &str) -> Option<Var> {
        match name {
            "/self/instId" => Some(Var::InstId),
            "/self/logicalId" => Some(Var::LogicalId),
            "/self/dedicated/attachId" => Some(Var::AttachId),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Var::InstId => "/self/instId",
            Var::LogicalId => "/self/logicalId",
            Var::AttachId => "/self/dedicated/attachId",
        }
    }
}

/// Values for one instance. `None` means the variable is undefined for it.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    pub inst_id: String,
    pub logical_id: Option<String>,
    pub attach_id: Option<String>,
}

impl Vars {
    fn get(&self, var: Var) -> Result<&str, String> {
        match var {
            Var::InstId => Ok(&self.inst_id),
            Var::LogicalId => self.logical_id.as_deref().ok_or_else(|| {
                "`/self/logicalId` is undefined: this instance has no logical ID (give --logical-id or LogicalID)"
                    .to_string()
            }),
            Var::AttachId => self.attach_id.as_deref().ok_or_else(|| {
                "`/self/dedicated/attachId` is undefined: the spec has no `@dedicated` resource".to_string()
            }),
        }
    }
}

enum Part<'a> {
    Text(&'a str),
    Var(Var),
}

/// Splits a string into text and variables; an error names the first bad expression.
fn parse(s: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        parts.push(Part::Text(&rest[..start]));
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| "unclosed `{{` in template".to_string())?;
        parts.push(Part::Var(parse_action(after[..end].trim())?));
        rest = &after[end + 2..];
    }
    parts.push(Part::Text(rest));
    Ok(parts)
}

fn parse_action(action: &str) -> Result<Var, String> {
    let (func, arg) = action.split_once(char::is_whitespace).unwrap_or((action, ""));
    if func != "var" {
        return Err(format!(
            "unsupported template function `{}`: only ``{{{{ var `/self/instId` }}}}`` is supported",
            short(func)
        ));
    }
    let arg = arg.trim();
    let name = ['"', '`']
        .iter()
        .find_map(|q| arg.strip_prefix(*q)?.strip_suffix(*q))
        .ok_or_else(|| format!("template `{{{{ {} }}}}` needs one quoted variable name", short(action)))?;
    Var::parse(name).ok_or_else(|| {
        format!(
            "unknown template variable `{}`: known are `/self/instId`, `/self/logicalId`, `/self/dedicated/attachId`",
            short(name)
        )
    })
}

/// Checks every template in a string without rendering it: for `validate`.
pub fn check(s: &str) -> Result<(), String> {
    parse(s).map(drop)
}

/// Renders one string.
pub fn render_str(s: &str, vars: &Vars) -> Result<String, String> {
    if !s.contains("{{") {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    for part in parse(s)? {
        match part {
            Part::Text(t) => out.push_str(t),
            Part::Var(v) => out.push_str(vars.get(v)?),
        }
    }
    Ok(out)
}

/// Renders every string value in `value` in place. The error carries the JSON pointer (relative
/// to `value`) of the offending string.
pub fn render_value(value: &mut Value, vars: &Vars) -> Result<(), (String, String)> {
    walk_strings(value, String::new(), &mut |ptr, s| {
        if s.contains("{{") {
            *s = render_str(s, vars).map_err(|e| (ptr.to_string(), e))?;
        }
        Ok(())
    })
}

/// Checks every string value in `value`; returns (pointer, message) for each bad one.
pub fn check_value(value: &mut Value) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let _ = walk_strings(value, String::new(), &mut |ptr, s| {
        if let Err(e) = check(s) {
            problems.push((ptr.to_string(), e));
        }
        Ok(())
    });
    problems
}

type Visit<'f> = dyn FnMut(&str, &mut String) -> Result<(), (String, String)> + 'f;

fn walk_strings(value: &mut Value, ptr: String, f: &mut Visit<'_>) -> Result<(), (String, String)> {
    match value {
        Value::String(s) => f(&ptr, s),
        Value::Array(items) => {
            items.iter_mut().enumerate().try_for_each(|(i, v)| walk_strings(v, format!("{ptr}/{i}"), f))
        }
        Value::Object(map) => {
            map.iter_mut().try_for_each(|(k, v)| walk_strings(v, format!("{ptr}/{}", pointer_escape(k)), f))
        }
        _ => Ok(()),
    }
}

/// Escapes one JSON-pointer token (RFC 6901).
pub fn pointer_escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

impl std::fmt::Display for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> Vars {
        Vars { inst_id: "id".into(), logical_id: Some("mgr1".into()), attach_id: Some("some-attach-id".into()) }
    }

    // C-14: renderInstVars.
    #[test]
    fn renders_all_three_variables_with_either_quote() {
        let mut v = json!({
            "attachId": "{{ var `/self/dedicated/attachId` }}",
            "id": "{{ var \"/self/instId\" }}",
            "logicalId": "{{var `/self/logicalId`}}",
            "key": "val",
            "list": ["x-{{ var `/self/instId` }}-y"]
        });
        render_value(&mut v, &vars()).unwrap();
        assert_eq!(
            v,
            json!({"attachId": "some-attach-id", "id": "id", "logicalId": "mgr1", "key": "val", "list": ["x-id-y"]})
        );
    }

    #[test]
    fn terraform_interpolation_passes_through() {
        let s = "${aws_eip.{{ var `/self/instId` }}-ip.id} %{ if true }x%{ endif }";
        assert_eq!(render_str(s, &vars()).unwrap(), "${aws_eip.id-ip.id} %{ if true }x%{ endif }");
    }

    // Rendered values with quotes, backslashes or newlines stay valid JSON (reference bug 22).
    #[test]
    fn values_with_quotes_are_safe() {
        let v = Vars { inst_id: "a\"b\\c\n".into(), ..vars() };
        let mut j = json!({"k": "{{ var `/self/instId` }}"});
        render_value(&mut j, &v).unwrap();
        assert_eq!(j["k"], "a\"b\\c\n");
    }

    // N-13 fixed: an undefined variable is an error, not `<no value>`.
    #[test]
    fn undefined_and_unknown_variables_are_errors() {
        let v = Vars { inst_id: "id".into(), logical_id: None, attach_id: None };
        let mut j = json!({"a": {"b": ["{{ var `/self/logicalId` }}"]}});
        let (ptr, msg) = render_value(&mut j, &v).unwrap_err();
        assert_eq!(ptr, "/a/b/0");
        assert!(msg.contains("no logical ID"), "{msg}");
        assert!(render_str("{{ var `/self/dedicated/attachId` }}", &v).is_err());
        assert!(check("{{ var `/self/foo` }}").unwrap_err().contains("unknown template variable"));
        assert!(check("{{ include `file:///etc/passwd` }}").unwrap_err().contains("unsupported template function"));
        assert!(check("{{ var `/self/instId` ").unwrap_err().contains("unclosed"));
        assert!(check("{{ var /self/instId }}").unwrap_err().contains("quoted"));
    }

    #[test]
    fn check_value_reports_every_bad_string() {
        let mut j = json!({"a": "{{ nope }}", "b": ["ok", "{{ var `/x` }}"]});
        let problems = check_value(&mut j);
        let ptrs: Vec<_> = problems.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(ptrs, ["/a", "/b/1"]);
    }
}

//! `Properties.Flavor`: the members' Init and Tags, merged as InfraKit's vanilla flavor did.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{get_ci, RESERVED_TAGS};

/// The flavor's Init (lines joined by newlines) and Tags.
pub(super) fn flavor_parts(props: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> (String, BTreeMap<String, String>) {
    let mut tags = BTreeMap::new();
    let Some(props) = props else { return (String::new(), tags) };
    let Some(props) = props.as_object() else {
        problem("/Properties/Flavor/Properties", "the flavor's `Properties` must be an object".into());
        return (String::new(), tags);
    };
    let init = match get_ci(props, "Init") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(lines)) if lines.iter().all(Value::is_string) => {
            lines.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n")
        }
        Some(_) => {
            problem("/Properties/Flavor/Properties/Init", "`Init` must be a string or a list of strings".into());
            String::new()
        }
    };
    match get_ci(props, "Tags") {
        None | Some(Value::Null) => {}
        Some(Value::Object(t)) => {
            for (k, v) in t {
                if RESERVED_TAGS.contains(&k.as_str()) {
                    problem(
                        &format!("/Properties/Flavor/Properties/Tags/{k}"),
                        format!("`{k}` is infrakit-tf's own tag: a flavor may not set it"),
                    );
                    continue;
                }
                match v.as_str() {
                    Some(v) => {
                        tags.insert(k.clone(), v.to_string());
                    }
                    None => problem(
                        &format!("/Properties/Flavor/Properties/Tags/{k}"),
                        "a tag's value must be a string".into(),
                    ),
                }
            }
        }
        Some(_) => problem("/Properties/Flavor/Properties/Tags", "`Tags` must be an object of strings".into()),
    }
    (init, tags)
}

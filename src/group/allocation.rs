//! `Properties.Allocation`: how many members, or which.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{get_ci, MAX_SIZE};
use crate::names;

/// How many members, or which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocation {
    /// Cattle: this many interchangeable members.
    Size(u64),
    /// Pets: one member per logical ID.
    LogicalIds(Vec<String>),
}

pub(super) fn allocation(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Allocation> {
    let Some(Value::Object(a)) = value else {
        problem("/Properties/Allocation", "a group spec needs `Allocation`: `{\"Size\": N}` or `{\"LogicalIDs\": [...]}`".into());
        return None;
    };
    match (get_ci(a, "Size"), get_ci(a, "LogicalIDs")) {
        (Some(_), Some(_)) => {
            problem("/Properties/Allocation", "give `Size` or `LogicalIDs`, not both".into());
            None
        }
        (None, None) => {
            problem("/Properties/Allocation", "give `Size` (cattle) or `LogicalIDs` (pets)".into());
            None
        }
        (Some(size), None) => match size.as_u64() {
            Some(n) if n <= MAX_SIZE => Some(Allocation::Size(n)),
            Some(_) => {
                problem("/Properties/Allocation/Size", format!("`Size` must be at most {MAX_SIZE}"));
                None
            }
            None => {
                problem("/Properties/Allocation/Size", "`Size` must be a whole number, 0 or more".into());
                None
            }
        },
        (None, Some(Value::Array(ids))) => {
            let mut seen = BTreeSet::new();
            let mut out = Vec::new();
            for (i, lid) in ids.iter().enumerate() {
                let at = format!("/Properties/Allocation/LogicalIDs/{i}");
                match lid.as_str() {
                    None => problem(&at, "each logical ID must be a string".into()),
                    Some(s) => {
                        if let Err(e) = names::check_logical_id(s) {
                            problem(&at, e);
                        } else if !seen.insert(s) {
                            problem(&at, format!("logical ID `{}` is listed twice", crate::text::short(s)));
                        } else {
                            out.push(s.to_string());
                        }
                    }
                }
            }
            if ids.len() as u64 > MAX_SIZE {
                problem("/Properties/Allocation/LogicalIDs", format!("at most {MAX_SIZE} logical IDs"));
                return None;
            }
            (out.len() == ids.len()).then_some(Allocation::LogicalIds(out))
        }
        (None, Some(_)) => {
            problem("/Properties/Allocation/LogicalIDs", "`LogicalIDs` must be a list of strings".into());
            None
        }
    }
}

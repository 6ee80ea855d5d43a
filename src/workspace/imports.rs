//! The import-blocks file ([`names::IMPORT_FILE`]): written by `import`, carried out by the
//! next apply, removed once applied.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use crate::directory::Directory;
use crate::fsio::Perms;
use crate::journal::{self, FileOp};
use crate::names;

/// Settles a leftover import-blocks file in `path` before terraform runs there: one left by an
/// import that was interrupted, or whose failure could not be undone. A block whose target a
/// managed file declares is kept, so that the next apply adopts that object rather than create
/// a second one (a block whose object is already in state does nothing). A block whose target
/// is gone is dropped: terraform refuses it. Returns how many blocks are kept.
pub(super) fn carry_out(path: &Path) -> Result<usize> {
    let (kept, op) = carried_out(path)?;
    journal::commit(path, &Vec::from_iter(op))?;
    Ok(kept)
}

/// What settling the import-blocks file in `path` keeps, and the change of that file it
/// takes (none when every block stays), for the caller to carry out.
pub(super) fn carried_out(path: &Path) -> Result<(usize, Option<FileOp>)> {
    if !path.join(names::IMPORT_FILE).exists() {
        return Ok((0, None));
    }
    let listing = Directory::open(path)?;
    let mut declared = BTreeSet::new();
    for f in listing.managed() {
        let Ok(doc) = listing.read_doc(f.name) else { continue };
        declared.extend(crate::tfconfig::addresses(&doc));
    }
    Ok(keeping(path, |to| declared.contains(to)))
}

/// The import blocks in `path` whose target `keep` keeps: how many, and the change of the
/// file that drops the others (none when every block stays; its removal when none does).
pub(super) fn keeping(path: &Path, keep: impl Fn(&str) -> bool) -> (usize, Option<FileOp>) {
    let Ok(bytes) = crate::fsio::read(path.join(names::IMPORT_FILE)) else { return (0, None) };
    let blocks: Vec<Value> = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|doc| doc.get("import")?.as_array().cloned())
        .unwrap_or_default();
    let total = blocks.len();
    let kept: Vec<Value> =
        blocks.into_iter().filter(|b| b.get("to").and_then(Value::as_str).is_some_and(&keep)).collect();
    let name = names::IMPORT_FILE.to_string();
    let op = if kept.is_empty() {
        Some(FileOp { name, after: None })
    } else if kept.len() < total {
        let doc = serde_json::json!({ "import": kept });
        Some(FileOp { name, after: Some((crate::tfconfig::to_bytes(&doc), Perms::Public)) })
    } else {
        None
    };
    (kept.len(), op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsio;

    fn put(dir: &Path, name: &str, doc: Value) {
        fsio::write_atomic(&dir.join(name), &crate::tfconfig::to_bytes(&doc), Perms::Public).unwrap();
    }

    fn blocks(dir: &Path) -> Option<Value> {
        crate::fsio::read(dir.join(names::IMPORT_FILE)).ok().map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn settling_keeps_the_import_blocks_of_declared_resources_only() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let to = |addr: &str| serde_json::json!({"to": addr, "id": "x"});
        put(d, "instance-1.tf.json", serde_json::json!({"resource": {"aws_instance": {"instance-1": {}}}}));
        put(d, "main.tf.json", serde_json::json!({"resource": {"aws_vpc": {"net": {}}}}));
        put(
            d,
            names::IMPORT_FILE,
            serde_json::json!({"import": [to("aws_instance.instance-1"), to("aws_instance.instance-2"), to("aws_vpc.net")]}),
        );
        assert_eq!(carry_out(d).unwrap(), 1, "only managed files declare what an import adopts");
        assert_eq!(blocks(d), Some(serde_json::json!({"import": [to("aws_instance.instance-1")]})));
        assert_eq!(carry_out(d).unwrap(), 1, "settling again changes nothing");

        fsio::remove(&d.join("instance-1.tf.json")).unwrap();
        assert_eq!(carry_out(d).unwrap(), 0);
        assert_eq!(blocks(d), None, "no block left: the file goes");
        assert_eq!(carry_out(d).unwrap(), 0, "no file: nothing to do");
    }
}

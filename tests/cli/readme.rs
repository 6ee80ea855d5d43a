//! README tells the truth: its exit-code table is the one in code.

use infrakit_tf::exit::Code;

#[test]
fn readme_lists_every_exit_code() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for (code, _) in Code::TABLE {
        let row = format!("| {} |", *code as u8);
        assert!(readme.contains(&row), "README has no exit-code row `{row}`");
    }
}

//! README tells the truth: its exit-code table is the one in code.

use infrakit_tf::exit::Code;

/// README's "Exit codes" table is the one in code, row by row: every code, in order, with
/// its meaning word for word, and no other row.
#[test]
fn readme_exit_code_table_is_the_one_in_code() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme.split("\n## Exit codes\n").nth(1).expect("README has an `## Exit codes` section");
    let section = section.split("\n## ").next().unwrap();
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| code ")).collect();
    let expected: Vec<String> = Code::ALL.iter().map(|c| format!("| {} | {} |", *c as u8, c.meaning())).collect();
    assert_eq!(rows, expected, "README's exit-code table differs from src/exit.rs");
}

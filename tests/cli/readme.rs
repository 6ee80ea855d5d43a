//! The guide tells the truth: its exit-code table is the one in code.

use infrakit_tf::exit::Code;

/// The guide's "Exit codes" table (docs/exit-codes-and-environment.md, which README links) is
/// the one in code, row by row: every code, in order, with its meaning word for word, and no
/// other row.
#[test]
fn exit_code_table_is_the_one_in_code() {
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/exit-codes-and-environment.md");
    let readme = std::fs::read_to_string(page).unwrap();
    let section = readme.split("\n## Exit codes\n").nth(1).expect("the page has an `## Exit codes` section");
    let section = section.split("\n## ").next().unwrap();
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| code ")).collect();
    let expected: Vec<String> = Code::ALL.iter().map(|c| format!("| {} | {} |", *c as u8, c.meaning())).collect();
    assert_eq!(rows, expected, "the guide's exit-code table differs from src/exit.rs");
}

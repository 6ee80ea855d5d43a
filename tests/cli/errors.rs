//! Bad input: one clear `error:` line, a documented exit code, no panic, and nothing written,
//! moved or deleted, inside or outside the directory. The cases are data in `tests/cmd/`
//! (`provision-*`, `validate-*`, `destroy-*`, `label-*`, `describe-bad-tag`, `*-missing-directory`:
//! each its exact stderr, and nothing changed); here are those whose input is made by code.

use infrakit_tf::exit::Code;

use crate::support::{Scratch, VM_ONLY};

// A value quoted in an error is shortened: a huge logical ID, name, scope or path makes a short
// message, not one as large as itself; and nothing is written.
#[test]
fn huge_values_make_short_errors() {
    let s = Scratch::new();
    let arg = "x".repeat(100_000); // Linux takes at most 128 KiB in one argument
    let huge = "y".repeat(1 << 20);
    let vm = |extra: &str| [r#"{"Properties": {"resource": {"aws_instance": {"h": {}}"#, extra, "}}}"].concat();
    let specs = [
        format!(r#"{{"Properties": {{"resource": {{"aws_instance": {{"h": {{}}}}}}}}, "LogicalID": "{huge}/"}}"#),
        vm(&format!(r#", "-{huge}": {{"d": {{}}}}"#)),
        vm(&format!(r#", "x": {{"{huge}!": {{}}}}"#)),
        vm(&format!(r#", "x": {{"d": {{"@scope": "@{huge}"}}}}"#)),
        vm(&format!(r#", "x": {{"d": {{"@scope": "{huge}!"}}}}"#)),
        vm(&format!(r#", "x": {{"d": {{"v": "{{{{ var `/{huge}` }}}}"}}}}"#)),
        vm(&format!(r#", "x": {{"d": {{"v": "{{{{ {huge} }}}}"}}}}"#)),
        format!(r#"{{"Properties": {{"resource": {{"aws_instance": {{"h": {{}}}}}}}}, "{huge}": 1}}"#),
        format!(
            r#"{{"Properties": {{"resource": {{"aws_instance": {{"h": {{}}}}, "x": {{"{huge}": {{}}}}}}}}, "LogicalID": "1a"}}"#
        ),
    ];
    let spec = s.write_outside("vm.json", VM_ONLY);
    let mut runs = vec![s.run(&["provision", "--no-apply", &spec, "--logical-id", &arg]).code(Code::Invalid)];
    for (i, text) in specs.iter().enumerate() {
        let path = s.write_outside(&format!("huge-{i}.json"), text);
        let before = s.snapshot();
        runs.push(s.run(&["provision", "--no-apply", &path]).code(Code::Invalid));
        assert!(s.snapshot() == before, "spec {i} changed files");
        runs.push(s.run(&["validate", &path]).code(Code::Invalid));
    }
    // A spec path too long for the system: an I/O error that quotes the path.
    runs.push(s.run(&["validate", &format!("{arg}.json")]).code(Code::Error));
    for run in &runs {
        assert!(run.stderr.len() < 2048, "{} bytes on stderr: {}", run.stderr.len(), &run.stderr[..2048]);
        assert!(run.stderr.contains(" bytes"), "the size of the value is said: {run:#?}");
        assert!(!run.stderr.contains("panicked"));
    }
    assert_eq!(s.files(), Vec::<String>::new());
}

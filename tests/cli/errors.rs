//! Bad input: one clear `error:` line, a documented exit code, no panic, and nothing written,
//! moved or deleted, inside or outside the directory.

use crate::support::{Scratch, SCOPED, VM_ONLY};

const USAGE: i32 = 2;
const INVALID: i32 = 3;
const NOT_FOUND: i32 = 4;
const NOT_CONFIRMED: i32 = 6;

/// Runs `args` (with `{spec}` replaced by a spec file holding `spec`) on a directory holding
/// one provisioned instance, and checks the failure: its code, that stderr's one error line
/// contains `says`, and that no file anywhere changed.
#[track_caller]
fn fails(spec: &str, args: &[&str], code: i32, says: &str) {
    let s = Scratch::new();
    let vm = s.write_outside("vm.json", SCOPED);
    let id = s.run(&["provision", "--no-apply", &vm]).ok().stdout.trim().to_string();
    let spec_path = s.write_outside("spec.json", spec);
    let args: Vec<String> = args.iter().map(|a| a.replace("{spec}", &spec_path).replace("{id}", &id)).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let before = s.snapshot();
    let run = s.run(&args);
    assert_eq!(run.code, code, "{args:?}: {run:#?}");
    assert!(!run.stderr.contains("panicked"), "{run:#?}");
    let errors = run.error_lines();
    assert_eq!(errors.len(), 1, "{args:?}: want one error line: {run:#?}");
    assert!(errors[0].contains(says), "{args:?}: {:?} does not say {says:?}", errors[0]);
    assert_eq!(run.stdout, "", "no data on failure");
    assert!(s.snapshot() == before, "{args:?} changed files");
}

#[test]
fn malformed_specs() {
    let p = ["provision", "--no-apply", "{spec}"];
    fails("{{}", &p, INVALID, "not valid JSON");
    fails(r#"{"Properties": {"resource": {"aws_instance": {"h": {}}}}"#, &p, INVALID, "not valid JSON: EOF");
    fails(r#"{"Properties": {}}"#, &p, INVALID, "no `resource` section");
    fails(r#"{"Properties": {"resource": {"aws_ebs_volume": {"d": {}}}}}"#, &p, INVALID, "no VM");
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {}}, "google_compute_instance": {"b": {}}}}}"#,
        &p,
        INVALID,
        "2 VMs (aws_instance.a, google_compute_instance.b)",
    );
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {"@scope": 5}}}}}"#,
        &p,
        INVALID,
        "`@scope` must be a string",
    );
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {"x": ["{{ var `/self/ip` }}"]}}}}}"#,
        &p,
        INVALID,
        "/Properties/resource/aws_instance/a/x/0: unknown template variable `/self/ip`",
    );
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {}}}}, "Init": "{{ include `x` }}"}"#,
        &p,
        INVALID,
        "/Init: unsupported template function `include`",
    );
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {"x": "{{ var `/self/logicalId` }}"}}}}}"#,
        &p,
        INVALID,
        "`/self/logicalId` is undefined",
    );
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {}}}}, "Tags": ["x"]}"#,
        &p,
        INVALID,
        "`Tags` must be an object",
    );
    fails(r#"[1, 2]"#, &p, INVALID, "must be a JSON object");
}

#[test]
fn names_that_would_escape_the_directory() {
    let p = ["provision", "--no-apply", "{spec}"];
    let scoped = |scope: &str| {
        format!(
            r#"{{"Properties": {{"resource": {{"aws_instance": {{"a": {{}}}}, "x_disk": {{"d": {{"@scope": "{scope}"}}}}}}}}}}"#
        )
    };
    fails(&scoped("../../x"), &p, INVALID, "global scope `../../x` must be letters");
    fails(&scoped("@dedicated-../x"), &p, INVALID, "dedicated scope ID `../x` must be letters");
    fails(&scoped("@dedicated-a/b"), &p, INVALID, "dedicated scope ID `a/b`");
    fails(&scoped(".hidden"), &p, INVALID, "global scope `.hidden`");
    fails(
        VM_ONLY,
        &["provision", "--no-apply", "{spec}", "--logical-id", "../x"],
        INVALID,
        "logical ID `../x` must not contain `/`",
    );
    fails(VM_ONLY, &["provision", "--no-apply", "{spec}", "--logical-id", ".x"], INVALID, "must not start with `.`");
    fails(
        r#"{"Properties": {"resource": {"aws_instance": {"a": {}}}}, "LogicalID": "a\u0000b"}"#,
        &p,
        INVALID,
        "logical ID",
    );
    fails(VM_ONLY, &["destroy", "--no-apply", "../../etc/foo", "--yes"], USAGE, "IDs look like `instance-<digits>`");
    let long = "x".repeat(250);
    fails(VM_ONLY, &["provision", "--no-apply", "{spec}", "--logical-id", &long], INVALID, "is too long");
    fails(&scoped(&long), &p, INVALID, "global scope is too long (250 bytes, at most 200)");
    fails(VM_ONLY, &["label", "--no-apply", "../x", "a=b"], USAGE, "is not an instance ID");
}

#[test]
fn unknown_ids_and_bad_arguments() {
    fails(VM_ONLY, &["destroy", "--no-apply", "instance-1", "--yes"], NOT_FOUND, "no such instance in");
    fails(VM_ONLY, &["destroy", "--no-apply", "{id}", "instance-2", "--yes"], NOT_FOUND, "instance-2");
    fails(VM_ONLY, &["label", "--no-apply", "instance-1", "a=b"], NOT_FOUND, "no such instance");
    fails(VM_ONLY, &["label", "--no-apply", "{id}", "novalue"], USAGE, "expected K=V");
    fails(VM_ONLY, &["provision", "--no-apply", "{spec}", "--tag", "=v"], USAGE, "expected K=V");
    fails(VM_ONLY, &["describe", "--tag", "x"], USAGE, "expected K=V");
    fails(VM_ONLY, &["destroy", "--no-apply", "{id}", "--reason", "whim", "--yes"], USAGE, "invalid value 'whim'");
    fails(VM_ONLY, &["provision", "--no-apply", "missing.json"], NOT_FOUND, "spec file `missing.json` does not exist");
    fails(VM_ONLY, &["validate", "missing.json"], NOT_FOUND, "does not exist");
    fails(VM_ONLY, &["provision", "--no-apply", "{spec}", "--lock-timeout", "soon"], USAGE, "not a duration");
    fails(VM_ONLY, &["provision", "--no-apply", "."], INVALID, "spec `.` is a directory");
    fails("\u{0}", &["provision", "--no-apply", "{spec}"], INVALID, "not valid JSON");
}

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
    let mut runs = vec![s.run(&["provision", "--no-apply", &spec, "--logical-id", &arg]).code(INVALID)];
    for (i, text) in specs.iter().enumerate() {
        let path = s.write_outside(&format!("huge-{i}.json"), text);
        let before = s.snapshot();
        runs.push(s.run(&["provision", "--no-apply", &path]).code(INVALID));
        assert!(s.snapshot() == before, "spec {i} changed files");
        runs.push(s.run(&["validate", &path]).code(INVALID));
    }
    // A spec path too long for the system: an I/O error that quotes the path.
    runs.push(s.run(&["validate", &format!("{arg}.json")]).code(1));
    for run in &runs {
        assert!(run.stderr.len() < 2048, "{} bytes on stderr: {}", run.stderr.len(), &run.stderr[..2048]);
        assert!(run.stderr.contains(" bytes"), "the size of the value is said: {run:#?}");
        assert!(!run.stderr.contains("panicked"));
    }
    assert_eq!(s.files(), Vec::<String>::new());
}

// Without a terminal, destroy never prompts: it asks for --yes and removes nothing.
#[test]
fn destroy_needs_yes_without_a_terminal() {
    fails(VM_ONLY, &["destroy", "--no-apply", "{id}"], NOT_CONFIRMED, "not confirmed: destroy instance-");
    let s = Scratch::new();
    let run = s.run(&["destroy", "--no-apply", "instance-1"]);
    assert_eq!(run.code, NOT_FOUND, "unknown IDs are reported before asking: {run:#?}");
}

#[test]
fn missing_directory() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    std::fs::remove_dir(&s.dir).unwrap();
    let before = s.snapshot();
    for args in [
        vec!["provision", "--no-apply", spec.as_str()],
        vec!["describe"],
        vec!["destroy", "--no-apply", "instance-1", "--yes"],
        vec!["label", "--no-apply", "instance-1", "a=b"],
    ] {
        let run = s.run(&args).code(NOT_FOUND);
        assert_eq!(run.error_lines().len(), 1, "{run:#?}");
        assert!(run.error_lines()[0].contains("does not exist"), "{run:#?}");
        assert!(run.stderr.contains("hint: create it, or point --dir"), "{run:#?}");
    }
    assert!(s.snapshot() == before);
}

// validate lists every problem, each with its location, and exits 3; valid specs exit 0.
#[test]
fn validate_reports_every_problem() {
    let s = Scratch::new();
    let bad = s.write_outside(
        "bad.json",
        r#"{"Properties": {"resource": {"aws_instance": {"a": {"@scope": 5}},
            "x": {"d": {"@scope": "@Default"}, "e": {"v": "{{ var `/nope` }}"}}}}, "Init": 7}"#,
    );
    let run = s.run(&["validate", &bad]).code(INVALID);
    let problems: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("problem:")).collect();
    assert_eq!(problems.len(), 4, "{run:#?}");
    for want in [
        "/Init: `Init` must be a string",
        "/Properties/resource/aws_instance/a/@scope",
        "/Properties/resource/x/e/v: unknown template variable `/nope`",
        "/Properties/resource/x/d/@scope: unknown scope `@Default`",
    ] {
        assert!(problems.iter().any(|p| p.contains(want)), "missing {want}: {problems:#?}");
    }
    assert!(run.error_lines()[0].contains("has 4 problems"), "{run:#?}");
    let json = s.run(&["validate", &bad, "--output", "json"]).code(INVALID).json();
    assert_eq!(json["valid"], false);
    assert_eq!(json["problems"].as_array().unwrap().len(), 4);
    assert_eq!(json["problems"][0]["pointer"], "/Init");

    let good = s.write_outside("good.json", SCOPED);
    let run = s.run(&["validate", &good]).ok();
    assert!(run.stderr.contains("is valid: VM aws_instance.host"), "{run:#?}");
    let json = s.run(&["validate", &good, "--output", "json"]).ok().json();
    assert_eq!((json["valid"].as_bool(), json["vm"].as_str()), (Some(true), Some("aws_instance.host")));
    assert_eq!(s.run_stdin(&["validate", "-"], SCOPED).code, 0);
}

// A VM type declared on the command line or in the environment is known to every command.
#[test]
fn declared_vm_types() {
    let s = Scratch::new();
    let spec = s.write_outside(
        "spec.json",
        r#"{"Properties": {"resource": {"fakecloud_instance": {"vm": {}}}}, "Init": "boot"}"#,
    );
    s.run(&["validate", &spec]).code(INVALID);
    s.run(&["validate", &spec, "--vm-type", "fakecloud_instance"]).ok();
    let run = s
        .run_with(&["provision", "--no-apply", &spec], None, &[("INFRAKIT_TF_VM_TYPES", "other,fakecloud_instance")])
        .ok();
    let id = run.stdout.trim();
    let vm = &s.read(&format!("{id}.tf.json.new"))["resource"]["fakecloud_instance"][id];
    assert_eq!((vm["user_data"].as_str(), vm["tags"]["infrakit.instance.name"].as_str()), (Some("boot"), Some(id)));
}

#[test]
fn spec_that_is_not_text() {
    let s = Scratch::new();
    let path = s.root.path().join("bin.json");
    crate::support::put(&path, &[0xff, 0xfe, b'{']).unwrap();
    let run = s.run(&["validate", path.to_str().unwrap()]).code(INVALID);
    assert!(run.error_lines()[0].contains("is not UTF-8 text"), "{run:#?}");
}

// Scripts read validate's JSON report whatever is wrong with the spec, even when it cannot be
// read at all; the exit code still tells an invalid spec (3) from a missing one (4).
#[test]
fn validate_reports_unreadable_specs_in_json() {
    let s = Scratch::new();
    let binary = s.root.path().join("bin.json");
    crate::support::put(&binary, &[0xff, 0xfe, b'{']).unwrap();
    let missing = s.root.path().join("missing.json");
    for (path, code, says) in [
        (binary.as_path(), INVALID, "is not UTF-8 text"),
        (missing.as_path(), NOT_FOUND, "does not exist"),
        (s.dir.as_path(), INVALID, "is a directory"),
    ] {
        let path = path.to_str().unwrap();
        let run = s.run(&["validate", path, "--output", "json"]).code(code);
        let report = run.json();
        assert_eq!((report["spec"].as_str(), report["valid"].as_bool()), (Some(path), Some(false)), "{run:#?}");
        assert_eq!(report["problems"].as_array().map(Vec::len), Some(1), "{run:#?}");
        assert_eq!(report["problems"][0]["pointer"], "", "{run:#?}");
        assert!(report["problems"][0]["message"].as_str().unwrap().contains(says), "{run:#?}");
        assert_eq!((report["vm"].is_null(), report["resources"].as_u64()), (true, Some(0)), "{run:#?}");
        assert_eq!(run.error_lines().len(), 1, "{run:#?}");
        assert!(run.error_lines()[0].contains(says), "{run:#?}");
    }
}

// A second pet with the same logical ID would define its resources twice.
#[test]
fn duplicate_logical_id() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let id = s.run(&["provision", "--no-apply", &spec, "--logical-id", "db1"]).ok().stdout;
    let before = s.snapshot();
    let run = s.run(&["provision", "--no-apply", &spec, "--logical-id", "db1"]).code(INVALID);
    assert!(run.error_lines()[0].contains(&format!("logical ID `db1` is already used by {}", id.trim())), "{run:#?}");
    assert!(s.snapshot() == before);
}

// Names that only expansion can judge are checked by validate too.
#[test]
fn validate_runs_the_expansion_checks() {
    let s = Scratch::new();
    let spec = s.write_outside(
        "pet.json",
        r#"{"Properties": {"resource": {"aws_instance": {"h": {}}, "x": {"d": {"@scope": "@dedicated"}}}}, "LogicalID": "1db:x"}"#,
    );
    let run = s.run(&["validate", &spec]).code(INVALID);
    assert!(run.error_lines()[0].contains("which Terraform rejects"), "{run:#?}");
    // A pet spec naming /self/logicalId validates without a logical ID (it comes at provision).
    let pet = s.write_outside(
        "pet2.json",
        r#"{"Properties": {"resource": {"aws_instance": {"h": {"name": "{{ var `/self/logicalId` }}"}}}}}"#,
    );
    s.run(&["validate", &pet]).ok();
}

#[test]
fn instance_ids_do_not_overflow() {
    let s = Scratch::new();
    s.write("instance-18446744073709551615.tf.json", r#"{"resource": {}}"#);
    let spec = s.write_outside("spec.json", VM_ONLY);
    let before = s.snapshot();
    let run = s.run(&["provision", "--no-apply", &spec]).code(INVALID);
    assert!(run.error_lines()[0].contains("no instance ID is left after `instance-18446744073709551615`"), "{run:#?}");
    assert!(s.snapshot() == before);
}

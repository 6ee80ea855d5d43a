//! Decoding recorded output: Terraform 1.11 (recorded here) and OpenTofu 1.8 shapes.

use super::*;

const TF_APPLY: &str = r#"{"@level":"info","@message":"Terraform 1.11.4","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:00.861275Z","terraform":"1.11.4","type":"version","ui":"1.2"}
{"@level":"info","@message":"terraform_data.ok: Plan to create","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:00.866474Z","change":{"resource":{"addr":"terraform_data.ok","module":"","resource":"terraform_data.ok","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"ok","resource_key":null},"action":"create"},"type":"planned_change"}
{"@level":"info","@message":"Plan: 3 to add, 0 to change, 0 to destroy.","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:00.866558Z","changes":{"add":3,"change":0,"import":0,"remove":0,"operation":"plan"},"type":"change_summary"}
{"@level":"info","@message":"terraform_data.slow: Creating...","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:00.867877Z","hook":{"resource":{"addr":"terraform_data.slow","module":"","resource":"terraform_data.slow","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"slow","resource_key":null},"action":"create"},"type":"apply_start"}
{"@level":"info","@message":"terraform_data.bad: Creation errored after 0s","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:00.870834Z","hook":{"resource":{"addr":"terraform_data.bad","module":"","resource":"terraform_data.bad","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"bad","resource_key":null},"action":"create","elapsed_seconds":0},"type":"apply_errored"}
{"@level":"info","@message":"terraform_data.slow: Still creating... [10s elapsed]","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:10.868498Z","hook":{"resource":{"addr":"terraform_data.slow","module":"","resource":"terraform_data.slow","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"slow","resource_key":null},"action":"create","elapsed_seconds":10},"type":"apply_progress"}
{"@level":"info","@message":"terraform_data.slow: Creation complete after 11s [id=b74f2c5a-0718-2e29-c403-58070ed0bdb5]","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:11.871928Z","hook":{"resource":{"addr":"terraform_data.slow","module":"","resource":"terraform_data.slow","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"slow","resource_key":null},"action":"create","id_key":"id","id_value":"b74f2c5a-0718-2e29-c403-58070ed0bdb5","elapsed_seconds":11},"type":"apply_complete"}
{"@level":"error","@message":"Error: local-exec provisioner error","@module":"terraform.ui","@timestamp":"2026-11-22T19:34:11.873597Z","diagnostic":{"severity":"error","summary":"local-exec provisioner error","detail":"Error running command 'echo boom; false': exit status 1. Output: boom\n","address":"terraform_data.bad","range":{"filename":"main.tf.json","start":{"line":1,"column":230,"byte":229},"end":{"line":1,"column":242,"byte":241}},"snippet":null},"type":"diagnostic"}"#;

const TOFU_APPLY: &str = r#"{"@level":"info","@message":"OpenTofu 1.8.3","@module":"tofu.ui","@timestamp":"2024-10-10T10:00:00.000000Z","tofu":"1.8.3","type":"version","ui":"1.2"}
{"@level":"info","@message":"terraform_data.vm: Plan to create","@module":"tofu.ui","@timestamp":"2024-10-10T10:00:00.100000Z","change":{"resource":{"addr":"terraform_data.vm","module":"","resource":"terraform_data.vm","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"vm","resource_key":null},"action":"create"},"type":"planned_change"}
{"@level":"info","@message":"Plan: 1 to add, 0 to change, 0 to destroy.","@module":"tofu.ui","@timestamp":"2024-10-10T10:00:00.100000Z","changes":{"add":1,"change":0,"import":0,"remove":0,"forget":0,"operation":"plan"},"type":"change_summary"}
{"@level":"info","@message":"terraform_data.vm: Creation complete after 0s [id=x]","@module":"tofu.ui","@timestamp":"2024-10-10T10:00:00.200000Z","hook":{"resource":{"addr":"terraform_data.vm","module":"","resource":"terraform_data.vm","implied_provider":"terraform","resource_type":"terraform_data","resource_name":"vm","resource_key":null},"action":"create","id_key":"id","id_value":"x","elapsed_seconds":0},"type":"apply_complete"}
{"@level":"info","@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","@module":"tofu.ui","@timestamp":"2024-10-10T10:00:00.300000Z","changes":{"add":1,"change":0,"import":0,"remove":0,"forget":0,"operation":"apply"},"type":"change_summary"}"#;

fn events(text: &str) -> Vec<Event> {
    text.lines().map(|l| parse_line(l).unwrap_or_else(|| panic!("did not parse: {l}"))).collect()
}

#[test]
fn terraform_stream() {
    let e = events(TF_APPLY);
    assert!(matches!(&e[0], Event::Message { text, .. } if text == "Terraform 1.11.4"));
    assert_eq!(e[1], Event::PlannedChange(ResourceChange { address: "terraform_data.ok".into(), action: Action::Create }));
    assert_eq!(e[2], Event::Summary(Changes { add: 3, change: 0, remove: 0, import: 0, operation: Operation::Plan }));
    assert_eq!(e[3], Event::ApplyStart { address: "terraform_data.slow".into(), action: Action::Create });
    assert_eq!(e[4], Event::ApplyErrored { address: "terraform_data.bad".into(), action: Action::Create, elapsed: 0 });
    assert_eq!(e[5], Event::ApplyProgress { address: "terraform_data.slow".into(), action: Action::Create, elapsed: 10 });
    assert_eq!(e[6], Event::ApplyComplete {
            address: "terraform_data.slow".into(),
            action: Action::Create,
            elapsed: 11,
            id: Some("b74f2c5a-0718-2e29-c403-58070ed0bdb5".into())
        });
    let Event::Diagnostic(d) = &e[7] else { panic!("{:?}", e[7]) };
    assert!(d.is_error());
    assert_eq!(d.summary, "local-exec provisioner error");
    assert_eq!(d.address.as_deref(), Some("terraform_data.bad"));
    assert!(d.detail.starts_with("Error running command"));
}

#[test]
fn opentofu_stream() {
    let e = events(TOFU_APPLY);
    assert!(matches!(&e[0], Event::Message { text, .. } if text == "OpenTofu 1.8.3"));
    assert_eq!(e[2], Event::Summary(Changes { add: 1, operation: Operation::Plan, ..Changes::default() }));
    assert_eq!(e[4], Event::Summary(Changes { add: 1, operation: Operation::Apply, ..Changes::default() }));
}

#[test]
fn garbage_is_not_an_event() {
    assert_eq!(parse_line("panic: runtime error"), None);
    assert_eq!(parse_line(""), None);
    assert!(matches!(
        parse_line(r#"{"type":"new_thing","@level":"info","@message":"m","extra":{}}"#),
        Some(Event::Message { .. })
    ));
}

// Seen while reviewing the tfoutput fuzz target's calls (the fuzzer did not reach numbers this
// large): the progress bar's length, add + change + remove, overflowed (a panic in debug builds).
#[test]
fn huge_counts_do_not_overflow() {
    let line = r#"{"type":"change_summary","changes":{"add":18446744073709551615,"change":1,"remove":1}}"#;
    let Some(Event::Summary(changes)) = parse_line(line) else { panic!("not a summary") };
    assert_eq!(changes.total(), u64::MAX);
}

#[test]
fn versions() {
    assert_eq!(parse_version(r#"{"terraform_version":"1.11.4","platform":"linux_amd64","provider_selections":{},"terraform_outdated":false}"#).as_deref(), Some("1.11.4"));
    // OpenTofu keeps the key.
    assert_eq!(
        parse_version(r#"{"terraform_version":"1.8.3","platform":"linux_amd64","provider_selections":{}}"#).as_deref(),
        Some("1.8.3")
    );
    assert_eq!(parse_version("Terraform v0.11.14"), None);
}

#[test]
fn state_with_modules_taint_and_sensitive_values() {
    let json = r#"{"format_version":"1.0","terraform_version":"1.11.4","values":{"root_module":{"resources":[
        {"address":"terraform_data.bad","mode":"managed","type":"terraform_data","name":"bad","values":{"id":"38b1","input":null},"sensitive_values":{},"tainted":true},
        {"address":"aws_instance.instance-1","mode":"managed","type":"aws_instance","name":"instance-1","values":{"id":"i-1","private_ip":"10.0.0.5","public_ip":"","password":"x","ipv6_addresses":[]},"sensitive_values":{"password":true,"private_ip":true}},
        {"address":"data.aws_ami.x","mode":"data","type":"aws_ami","name":"x","values":{}}],
        "child_modules":[{"address":"module.m","resources":[{"address":"module.m.terraform_data.y","mode":"managed","type":"terraform_data","name":"y","values":{"id":"y1"}}]}]}}}"#;
    let state = parse_state(json).unwrap();
    assert_eq!(
        state.keys().collect::<Vec<_>>(),
        ["aws_instance.instance-1", "module.m.terraform_data.y", "terraform_data.bad"]
    );
    assert!(state["terraform_data.bad"].tainted);
    let attrs = state["aws_instance.instance-1"].key_attributes();
    assert_eq!(attrs.get("id").map(String::as_str), Some("i-1"));
    assert_eq!(attrs.get("private_ip").map(String::as_str), Some("(sensitive)"));
    assert!(!attrs.contains_key("password") && !attrs.contains_key("public_ip"), "{attrs:?}");
    assert!(parse_state(r#"{"format_version":"1.0"}"#).unwrap().is_empty());
}

#[test]
fn a_saved_plans_data_reads_come_from_its_prior_state() {
    let plan = r#"{"prior_state": {"values": {"root_module": {"resources": [
        {"address": "data.fakecloud_instances.infrakit_tf_lookup_0", "mode": "data", "values": {"ids": ["i-1"]}},
        {"address": "fakecloud_instance.a", "mode": "managed", "values": {"id": "i-9"}}]}}}}"#;
    let reads = parse_plan_reads(plan).unwrap();
    assert_eq!(reads.len(), 1);
    assert_eq!(reads["data.fakecloud_instances.infrakit_tf_lookup_0"]["ids"][0], "i-1");
    assert!(parse_plan_reads("{}").unwrap().is_empty(), "no data source read");
}

#[test]
fn an_emergency_state_dump_is_its_own_event() {
    let line = r#"{"@level":"info","@message":"Emergency state dump","@module":"terraform.ui","type":"log","state":{"version":4,"serial":3,"lineage":"abc","resources":[]}}"#;
    match parse_line(line) {
        Some(Event::StateDump(state)) => assert_eq!(state["lineage"], "abc"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_state_documents_managed_resources_are_read_without_terraform() {
    let state = r#"{"version": 4, "serial": 3, "resources": [
        {"mode": "managed", "type": "fakecloud_instance", "name": "instance-1", "instances": [{"attributes": {"id": "i-1"}}]},
        {"mode": "data", "type": "fakecloud_instances", "name": "x", "instances": [{"attributes": {"id": "d"}}]},
        {"module": "module.net", "mode": "managed", "type": "aws_subnet", "name": "a", "instances": [{"index_key": 0, "attributes": {"id": "s-0"}}, {"index_key": 1, "attributes": {"id": "s-1"}}]},
        {"mode": "managed", "type": "fakecloud_instance", "name": "instance-2", "instances": [{"status": "tainted", "attributes": {"id": "i-2"}}]},
        {"mode": "managed", "type": "fakecloud_instance", "name": "instance-3", "instances": [{"deposed": "00aa", "status": "tainted", "attributes": {"id": "i-3"}}]}
    ]}"#;
    let r = raw_state_resources(state).unwrap();
    assert_eq!(r.len(), 4, "data sources are not resources: {r:?}");
    assert_eq!((r[0].tainted, r[2].address.as_str(), r[2].tainted), (false, "fakecloud_instance.instance-2", true));
    assert_eq!((r[3].current, r[3].deposed, r[3].tainted), (false, true, false), "only a deposed object: {r:?}");
    assert_eq!((r[0].address.as_str(), r[0].root, r[0].ids.clone()), ("fakecloud_instance.instance-1", true, vec!["i-1".to_string()]));
    assert_eq!((r[1].address.as_str(), r[1].root, r[1].ids.len()), ("module.net.aws_subnet.a", false, 2));
    assert!(raw_state_resources("{").is_err());
    assert!(raw_state_resources(r#"{"version": 4}"#).unwrap().is_empty());
}

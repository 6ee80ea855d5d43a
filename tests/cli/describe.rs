//! `describe`: one row per instance, filters, table and JSON.
//! Reference case IDs (`I-03`, `N-09`, ...) are those of `docs/reference/infrakit-cases.md`;
//! bug numbers, those of `docs/reference/infrakit-behaviour.md` §14.

use serde_json::json;

use crate::support::Scratch;

fn three_instances() -> Scratch {
    let s = Scratch::new();
    s.write(
        "instance-1.tf.json",
        r#"{"resource": {"softlayer_virtual_guest": {"instance-1": {"tags": ["tag1:val1", "tagShared:valShared"]}}}}"#,
    );
    s.write("instance-2.tf.json", r#"{"resource": {"azurerm_virtual_machine": {"instance-2": {"tags": {"tag2": "val2", "tagShared": "valShared"}}}}}"#);
    s.write("instance-3.tf.json.new", r#"{"resource": {"aws_instance": {"instance-3": {"tags": {"tag3": "val3"}}}, "aws_eip": {"instance-3-ip": {}}}}"#);
    s
}

fn ids(s: &Scratch, filter: &[&str]) -> Vec<String> {
    let mut args = vec!["describe", "--output", "json"];
    for f in filter {
        args.extend(["--tag", f]);
    }
    let rows = s.run(&args).ok().json();
    rows.as_array().unwrap().iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect()
}

// I-03 and N-10 (fixed): AND semantics, case-sensitive, and a missing key never matches.
#[test]
fn filters_are_and_and_exact() {
    let s = three_instances();
    assert_eq!(ids(&s, &[]), ["instance-1", "instance-2", "instance-3"]);
    assert_eq!(ids(&s, &["tag1=val1"]), ["instance-1"]);
    assert_eq!(ids(&s, &["tag1=val1", "tagShared=valShared"]), ["instance-1"]);
    assert_eq!(ids(&s, &["tagShared=valShared"]), ["instance-1", "instance-2"]);
    assert_eq!(ids(&s, &["tag1=val1", "tagShared=valShared", "foo=bar"]), Vec::<String>::new());
    assert_eq!(ids(&s, &["TAG2=val2"]), Vec::<String>::new());
    assert_eq!(ids(&s, &["absent="]), Vec::<String>::new());
}

// N-09 and bug 6 fixed: a sibling resource or a `.new` twin never makes a second row.
#[test]
fn one_row_per_instance() {
    let s = three_instances();
    s.write(
        "instance-1.tf.json.new",
        r#"{"resource": {"softlayer_virtual_guest": {"instance-1": {"tags": ["tag1:newer"]}}}}"#,
    );
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(rows.as_array().unwrap().len(), 3);
    assert_eq!(rows[0]["Tags"], json!({"tag1": "newer"}), "the queued twin is the current definition");
    assert_eq!(rows[0]["status"], "queued");
    assert_eq!(rows[1]["status"], "pending", "live, and not in the (empty) state");
}

#[test]
fn properties_only_when_asked() {
    let s = three_instances();
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert!(rows[2].get("Properties").is_none());
    let rows = s.run(&["describe", "--output", "json", "--properties"]).ok().json();
    assert_eq!(rows[2]["Properties"], json!({"tags": {"tag3": "val3"}}));
    assert_eq!(rows[2]["vm"], "aws_instance.instance-3");
    assert_eq!(rows[2]["file"], "instance-3.tf.json.new");
}

// A file that vanishes between listing and reading (a concurrent promotion or destroy) is
// read from its twin, or the instance is skipped; it is never reported broken. Another thread
// promotes `instance-1`'s queued twin over its live file and queues and drops `instance-3`'s,
// as apply and destroy do (each file appears whole, by rename), while describe runs again and
// again: every run lists instance-1 and instance-2, and none warns or shows a row `invalid`.
#[test]
fn files_vanishing_under_describe() {
    let s = three_instances();
    let queued = r#"{"resource": {"softlayer_virtual_guest": {"instance-1": {"tags": ["tag1:queued"]}}}}"#;
    let instance_3 = std::fs::read(s.dir.join("instance-3.tf.json.new")).unwrap();
    let put = |name: &str, bytes: &[u8]| {
        let tmp = s.root.path().join("tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, s.dir.join(name)).unwrap();
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                put("instance-1.tf.json.new", queued.as_bytes());
                std::fs::remove_file(s.dir.join("instance-3.tf.json.new")).unwrap();
                std::fs::rename(s.dir.join("instance-1.tf.json.new"), s.dir.join("instance-1.tf.json")).unwrap();
                put("instance-3.tf.json.new", &instance_3);
            }
        });
        for _ in 0..100 {
            let run = s.run(&["describe", "--output", "json"]).ok();
            assert!(!run.stderr.contains("warning"), "{run:#?}");
            let rows = run.json();
            let ids: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["ID"].as_str().unwrap()).collect();
            // instance-2 is never touched; instance-1's live file is only ever replaced, but
            // whether a listing racing a rename returns the name is the file system's business
            // (POSIX leaves it unspecified), so it is not asserted here: the unit test
            // `directory::tests::files_vanishing_between_listing_and_reading` pins the fallback.
            assert!(ids.contains(&"instance-2") && ids.len() <= 3, "{rows}");
            for row in rows.as_array().unwrap() {
                assert_ne!(row["status"], "invalid", "{rows}");
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

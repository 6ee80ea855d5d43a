//! `completions/` and `man/` are generated from the clap definition; this test fails when the
//! committed copies are stale. Regenerate with `UPDATE_GENERATED=1 cargo test --test cli generated`.

use std::collections::BTreeMap;
use std::path::Path;

use clap_complete::Shell;
use infrakit_tf::cli::command;

fn generated() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for (shell, name) in
        [(Shell::Bash, "infrakit-tf.bash"), (Shell::Zsh, "_infrakit-tf"), (Shell::Fish, "infrakit-tf.fish")]
    {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut command(), "infrakit-tf", &mut out);
        files.insert(format!("completions/{name}"), out);
    }
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|sub| sub.get_name() != "help").cloned());
    for page in pages {
        let man = clap_mangen::Man::new(page.clone());
        let mut out = Vec::new();
        man.render(&mut out).unwrap();
        files.insert(format!("man/{}", man.get_filename()), with_values_in_synopsis(&out, &page));
    }
    files
}

/// `page` with its SYNOPSIS line written anew: clap_mangen's names each option without its
/// value (`[--dir]`), where a man page reads `[--dir DIR]`.
fn with_values_in_synopsis(page: &[u8], cmd: &clap::Command) -> Vec<u8> {
    let roff = |text: &str| text.replace('-', "\\-");
    let mut line = format!("\\fB{}\\fR", roff(cmd.get_bin_name().unwrap_or(cmd.get_name())));
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
        let name = match (arg.get_short(), arg.get_long()) {
            (Some(short), Some(long)) => format!("\\fB\\-{short}\\fR|\\fB\\-\\-{}\\fR", roff(long)),
            (Some(short), None) => format!("\\fB\\-{short}\\fR"),
            (None, Some(long)) => format!("\\fB\\-\\-{}\\fR", roff(long)),
            (None, None) => continue,
        };
        let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
        let value = match arg.get_value_names() {
            Some(names) if takes_value => format!(" \\fI{}\\fR", names.join(" ")),
            _ => String::new(),
        };
        line.push_str(&format!(" [{name}{value}]"));
    }
    for arg in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let value = arg.get_value_names().map_or_else(|| arg.get_id().to_string(), |n| n.join(" "));
        let (open, close) = if arg.is_required_set() { ("<", ">") } else { ("[", "]") };
        let many = if arg.get_num_args().is_some_and(|n| n.max_values() > 1) { "..." } else { "" };
        line.push_str(&format!(" {open}\\fI{}\\fR{close}{many}", roff(&value)));
    }
    if cmd.has_subcommands() {
        line.push_str(" <\\fIsubcommand\\fR>");
    }
    let text = String::from_utf8(page.to_vec()).unwrap();
    let mut out = Vec::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(l) = lines.next() {
        out.push(l.to_string());
        if l == ".SH SYNOPSIS\n" {
            lines.next(); // clap_mangen's line
            out.push(format!("{line}\n"));
        }
    }
    out.concat().into_bytes()
}

#[test]
fn completions_and_man_pages_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for (rel, bytes) in generated() {
        let path = root.join(&rel);
        if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            if update {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            } else {
                stale.push(rel);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "stale generated files {stale:?}: run `UPDATE_GENERATED=1 cargo test --test cli generated`"
    );
    let man = std::fs::read_to_string(root.join("man/infrakit-tf.1")).unwrap();
    assert!(man.contains("Exit codes:"), "the main page documents exit codes");
    let provision = std::fs::read_to_string(root.join("man/infrakit-tf-provision.1")).unwrap();
    assert!(provision.contains("[\\fB\\-\\-dir\\fR \\fIDIR\\fR]"), "SYNOPSIS shows each option's value");
    assert!(!provision.contains("\\-\\-max\\-destroy"), "a reconcile option on provision's page");
}

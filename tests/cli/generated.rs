//! `completions/` and `man/` are generated from the clap definition; this test fails when the
//! committed copies are stale. Regenerate with `UPDATE_GENERATED=1 cargo test --test cli generated`.

use std::collections::BTreeMap;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;
use infrakit_tf::cli::Cli;

fn generated() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for (shell, name) in
        [(Shell::Bash, "infrakit-tf.bash"), (Shell::Zsh, "_infrakit-tf"), (Shell::Fish, "infrakit-tf.fish")]
    {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "infrakit-tf", &mut out);
        files.insert(format!("completions/{name}"), out);
    }
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().cloned());
    for page in pages {
        let man = clap_mangen::Man::new(page);
        let mut out = Vec::new();
        man.render(&mut out).unwrap();
        files.insert(format!("man/{}", man.get_filename()), out);
    }
    files
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
}

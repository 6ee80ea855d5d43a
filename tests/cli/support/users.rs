//! Another local user: running a script as `nobody` (CI runs as root), in a directory every
//! user may write, as `/tmp` is.

use crate::support::Scratch;

/// Runs `script` with `sh -c` as another local user (`nobody`: CI runs as root), in `cwd`:
/// (exit code, stdout and stderr).
pub fn as_nobody(script: &str, cwd: &std::path::Path) -> (i32, String) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c", script])
        .current_dir(cwd)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// A temporary directory every user may write, as `/tmp` is (1777), for one test.
pub fn shared_tmp(s: &Scratch) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let tmp = s.root.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Another user must reach it: the scratch root is 0700 by default.
    std::fs::set_permissions(s.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

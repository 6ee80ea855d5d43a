//! A scripted fake `terraform` (STYLE 17: fakes only for faults): what a real terraform will
//! not do on demand, such as garbage output, a crash mid-stream or a version too old.

use crate::support::Scratch;

/// A fake terraform: `version -json` answers `version`, `init` succeeds, `apply` runs `apply`.
/// Each command line it gets is logged to `<path>.calls` once that file exists (`record`).
pub fn fake(s: &Scratch, version: &str, apply: &str) -> String {
    let path = s.root.path().join("fake-terraform");
    let script = format!(
        "#!/bin/sh\n[ -e \"$0.calls\" ] && echo \"$*\" >> \"$0.calls\"\ncase \"$1\" in\n  version) echo '{{\"terraform_version\":\"{version}\"}}' ;;\n  init) exit 0 ;;\n  apply) {apply} ;;\n  *) exit 3 ;;\nesac\n"
    );
    crate::support::write_executable(&path, &script);
    path.to_str().unwrap().to_string()
}

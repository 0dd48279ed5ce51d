//! Puts the source revision into `jitterscope --version`: `git describe` of the checkout being
//! built (with `-dirty` for uncommitted changes), else `JITTERSCOPE_REVISION` (for builds from
//! a tarball, such as a package's), else "unknown".

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=JITTERSCOPE_REVISION");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A new commit or checkout moves HEAD or the ref it names; the index changes with staging.
    for f in [".git/HEAD", ".git/index"] {
        let p = root.join(f);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    if let Ok(head) = std::fs::read_to_string(root.join(".git/HEAD")) {
        if let Some(r) = head.strip_prefix("ref: ") {
            let p = root.join(".git").join(r.trim());
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    let rev = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("JITTERSCOPE_REVISION").ok())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=JITTERSCOPE_REVISION={rev}");
}

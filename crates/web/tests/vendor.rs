//! The browser libraries in `web/vendor` are exactly what `web/package-lock.json` installs:
//! `scripts/web-assets.sh --check` installs the lockfile with `npm ci` (which verifies each
//! package's integrity hash) into a scratch directory and compares.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn vendored_web_libraries_match_the_lockfile() {
    if jitterscope_testkit::which("npm", &[]).is_none() {
        jitterscope_testkit::skip(
            "vendored_web_libraries_match_the_lockfile",
            "npm is not installed (scripts/setup-test.sh installs it)",
        );
        return;
    }
    let o = Command::new("bash")
        .arg(root().join("scripts/web-assets.sh"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn every_embedded_library_is_listed_with_its_licence() {
    let sources = std::fs::read_to_string(root().join("web/vendor/SOURCES.tsv")).unwrap();
    let assets = std::fs::read_to_string(root().join("crates/web/src/assets.rs")).unwrap();
    let mut n = 0;
    for line in sources.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "{line}");
        assert!(
            assets.contains(&format!("web/vendor/{}\"", f[0])),
            "{} is vendored but not embedded",
            f[0]
        );
        let lic = root().join(format!("web/vendor/licenses/{}.txt", f[1]));
        assert!(lic.is_file(), "no licence for {}", f[1]);
        n += 1;
    }
    // And everything embedded from web/vendor is listed.
    assert_eq!(assets.matches("web/vendor/").count(), n);
}

//! The man pages and completion scripts come from the CLI definition: a page for every command
//! listed by `--help`, pages that groff renders without warnings, and a bash completion that
//! completes commands and options when bash runs it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run, text};

const TIMEOUT: Duration = Duration::from_secs(20);

/// The commands `jitterscope --help` lists (less `help`).
fn commands() -> Vec<String> {
    let o = run(&["--help"], TIMEOUT);
    let help = text(&o.stdout);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn a_man_page_for_every_command_that_groff_renders_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["manpages", dir.path().to_str().unwrap()], TIMEOUT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let cmds = commands();
    assert!(cmds.len() >= 14, "{cmds:?}");
    for c in cmds
        .iter()
        .map(|c| format!("jitterscope-{c}"))
        .chain(["jitterscope".into()])
    {
        let page = dir.path().join(format!("{c}.1"));
        let roff = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{c}.1: {e}"));
        assert!(roff.contains(".TH"), "{c}.1 has no title");
    }
    // Nested commands get theirs too, titled by the whole invocation.
    let check = std::fs::read_to_string(dir.path().join("jitterscope-lab-check.1")).unwrap();
    assert!(check.contains("jitterscope\\-lab\\-check"), "{check}");
    let record = std::fs::read_to_string(dir.path().join("jitterscope-record.1")).unwrap();
    for opt in ["\\-\\-profile\\-stack", "\\-\\-interval", "\\-\\-retain"] {
        assert!(record.contains(opt), "record's page lacks {opt}");
    }
    // The configuration file's page, with every option of the file.
    let toml = std::fs::read_to_string(dir.path().join("jitterscope.toml.5")).unwrap();
    for opt in [
        "profile\\-hz",
        "JITTERSCOPE_PROFILE_HZ",
        "metrics\\-max\\-age",
    ] {
        assert!(toml.contains(opt), "jitterscope.toml(5) lacks {opt}");
    }
    if jitterscope_testkit::which("groff", &[]).is_none() {
        jitterscope_testkit::skip(
            "a_man_page_for_every_command_that_groff_renders_cleanly (rendering)",
            "groff is not installed",
        );
        return;
    }
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let o = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "{}: {}",
            p.display(),
            text(&o.stderr)
        );
    }
}

#[test]
fn bash_completes_commands_and_options() {
    let o = run(&["completions", "bash"], TIMEOUT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), &o.stdout).unwrap();
    let complete = |words: &str| {
        let n = words.split_whitespace().count();
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD={}; COMP_LINE='{words}'; \
                 COMP_POINT=${{#COMP_LINE}}; _jitterscope jitterscope \"${{COMP_WORDS[-1]}}\" \
                 \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.path().display(),
                n - 1
            ))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(complete("jitterscope rec"), ["record"]);
    assert_eq!(complete("jitterscope top-"), ["top-functions"]);
    let opts = complete("jitterscope record --profile-");
    assert_eq!(opts, ["--profile-hz", "--profile-stack"], "{opts:?}");
    // The other shells' scripts are generated from the same definition.
    for sh in ["zsh", "fish"] {
        let o = run(&["completions", sh], TIMEOUT);
        assert!(o.status.success());
        assert!(text(&o.stdout).contains("profile-stack"), "{sh}");
    }
    let o = run(&["completions", "tcsh"], TIMEOUT);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

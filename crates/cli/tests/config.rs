//! The configuration file: precedence (flags, then JITTERSCOPE_* variables, then the file, then
//! the defaults), one-line errors naming file, line and key, and the example file generated from
//! the same definitions as the flags.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{cmd, run_command, s, text};

const TIMEOUT: Duration = Duration::from_secs(20);

fn js(config: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = cmd();
    c.env("JITTERSCOPE_CONFIG", config).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_command(c, TIMEOUT)
}

fn write(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// The line of `config check`'s output for option `key` in its `[record]` table.
fn effective<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .skip_while(|l| *l != "[record]")
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
}

#[test]
fn the_checked_in_example_is_what_the_definitions_generate() {
    let o = js(Path::new("/dev/null"), &[], &["config", "example"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let file = common::workspace_root().join("deploy/jitterscope.toml");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text(&o.stdout),
        "deploy/jitterscope.toml is out of date: `jitterscope config example > deploy/jitterscope.toml`"
    );
}

#[test]
fn the_example_with_every_default_uncommented_checks_and_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let example =
        std::fs::read_to_string(common::workspace_root().join("deploy/jitterscope.toml")).unwrap();
    // Uncomment every option that shows a real default (not a <PLACEHOLDER>).
    let body: String = example
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(kv) if kv.contains(" = ") && !kv.contains("\"<") && !kv.starts_with(' ') => {
                kv.to_string()
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let n = body
        .lines()
        .filter(|l| l.contains(" = ") && !l.starts_with('#'))
        .count();
    assert!(n >= 16, "{n} options uncommented:\n{body}");
    let f = write(t.path(), "all.toml", &body);
    let o = js(&f, &[], &["config", "check"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let plain = text(&js(Path::new("/dev/null"), &[], &["config", "check"]).stdout);
    for key in [
        "interval",
        "retain",
        "max-size",
        "profile-hz",
        "profile-stack",
        "no-tracers",
    ] {
        let (a, b) = (effective(&out, key), effective(&plain, key));
        assert_eq!(a.split("  #").next(), b.split("  #").next(), "{key}");
        assert!(
            a.contains("all.toml:"),
            "{a}: the value should come from the file"
        );
    }
}

#[test]
fn flags_win_over_the_environment_which_wins_over_the_file() {
    let t = tempfile::tempdir().unwrap();
    let f = write(
        t.path(),
        "js.toml",
        "[record]\ninterval = \"500ms\"\nprofile_hz = 49\n\n[serve]\nlisten = \"127.0.0.1:9700\"\n",
    );
    let out = text(&js(&f, &[], &["config", "check"]).stdout);
    assert!(
        effective(&out, "interval").starts_with("interval = \"500ms\"  # "),
        "{out}"
    );
    assert!(effective(&out, "interval").ends_with("js.toml:2"), "{out}");
    assert!(
        effective(&out, "profile-hz").starts_with("profile-hz = 49"),
        "{out}"
    );
    assert!(effective(&out, "retain").ends_with("# default"), "{out}");
    assert!(out.contains("listen = \"127.0.0.1:9700\"  # "), "{out}");
    let out = text(&js(&f, &[("JITTERSCOPE_INTERVAL", "2s")], &["config", "check"]).stdout);
    assert_eq!(
        effective(&out, "interval"),
        "interval = \"2s\"  # env JITTERSCOPE_INTERVAL"
    );

    // And the recorder runs with them.
    let store = t.path().join("store");
    let rec = |env: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec![
            "record",
            "--dir",
            s(&store),
            "--duration",
            "1s",
            "--no-tracers",
            "--profile-hz",
            "0",
        ];
        args.extend_from_slice(extra);
        let o = js(&f, env, &args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stderr)
    };
    assert!(rec(&[], &[]).contains("recording every 500ms"));
    assert!(rec(&[("JITTERSCOPE_INTERVAL", "250ms")], &[]).contains("recording every 250ms"));
    assert!(rec(
        &[("JITTERSCOPE_INTERVAL", "250ms")],
        &["--interval", "200ms"]
    )
    .contains("recording every 200ms"));
}

#[test]
fn a_bad_file_is_one_line_naming_file_line_and_key() {
    let t = tempfile::tempdir().unwrap();
    for (body, want) in [
        (
            "[record]\n\nbogus = 1\n",
            ":3: unknown key `bogus` in [record]",
        ),
        (
            "[record]\ninterval = \"5ms\"\n",
            ":2: interval: --interval must be between 100ms and 1h",
        ),
        ("[record]\nretain = \"30s\"\n", ":2: retain: --retain 30s"),
        (
            "[record]\nprofile-hz = \"abc\"\n",
            ":2: profile-hz: invalid value 'abc'",
        ),
        (
            "[record]\nno-tracers = \"yes\"\n",
            ":2: no-tracers: expected true or false",
        ),
        (
            "[record]\ntracers = \"tlb,nope\"\n",
            ":2: tracers: invalid value 'nope'",
        ),
        (
            "[serve]\nlisten = [1, 2]\n",
            ":2: listen: takes one value, not a list",
        ),
        ("[recrd]\nx = 1\n", ":1: unknown section [recrd]"),
        ("interval = \"1s\"\n", ":1: `interval` is outside any table"),
        ("[record]\ninterval = \n", ":2: not valid TOML"),
    ] {
        let f = write(t.path(), "bad.toml", body);
        for args in [
            &["config", "check"][..],
            &["record", "--duration", "1s"][..],
        ] {
            let o = js(&f, &[], args);
            assert_eq!(o.status.code(), Some(1), "{body:?} {args:?}");
            let err = text(&o.stderr);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with(&format!("jitterscope: error: {}{want}", f.display())),
                "{body:?}: {err}"
            );
        }
    }
    // Readers do not depend on the file: `dump` still works while it is being fixed.
    let f = write(t.path(), "bad.toml", "[recrd]\n");
    let o = js(&f, &[], &["dump", "--list"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // A file named explicitly must exist.
    let o = js(&t.path().join("missing.toml"), &[], &["config", "check"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("cannot read the configuration file"));
}

#[test]
fn an_option_s_older_name_still_reads() {
    // `syscall-tracers` was renamed `on-demand-tracers` when runqlat became one of them.
    let t = tempfile::tempdir().unwrap();
    let f = write(
        t.path(),
        "old.toml",
        "[record]\nsyscall-tracers = \"always\"\n",
    );
    let o = js(&f, &[], &["config", "check"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        effective(&out, "on-demand-tracers").starts_with("on-demand-tracers = \"always\""),
        "{out}"
    );
}

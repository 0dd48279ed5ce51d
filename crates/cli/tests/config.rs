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
    // A file named explicitly must exist.
    let o = js(&t.path().join("missing.toml"), &[], &["config", "check"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("cannot read the configuration file"));
}

/// Every reader: `dump`, `events`, `diagnose`, `top`, `replay`, `flame`, `top-functions`,
/// `store check` and `fleet`. The store directory (and fleet's ClickHouse) come from the file
/// alone; a missing or invalid file stops each of them with the file's one-line error.
const READERS: &[&[&str]] = &[
    &[
        "dump",
        "--from",
        "1h ago",
        "--select",
        "cpu.usr_pct",
        "--format",
        "json",
    ],
    &["events", "--since", "1h"],
    &["diagnose", "--since", "1h"],
    &["top", "--json-once"],
    &["replay", "--json-once"],
    &["flame", "--from", "1h ago", "--folded"],
    &["top-functions", "--from", "1h ago"],
    &["store", "check"],
    &["fleet", "episodes"],
];

#[test]
fn every_reader_reads_the_store_the_file_names_and_stops_on_a_bad_file() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("recorded");
    // The recorder too takes its directory from the file.
    let f = write(
        t.path(),
        "js.toml",
        &format!(
            "[record]\ndir = {:?}\nno-tracers = true\nprofile-hz = 0\nnice = 0\nno-mlock = true\n\n[serve]\nclickhouse = \"http://127.0.0.1:9/?database=jsfleet\"\n",
            store.display()
        ),
    );
    let o = js(&f, &[], &["record", "--duration", "3s"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(store.is_dir(), "record did not write the file's dir");
    for args in READERS {
        let o = js(&f, &[], args);
        let err = text(&o.stderr);
        if args[0] == "fleet" {
            // Nothing listens there: the error names the file's ClickHouse.
            assert!(err.contains("127.0.0.1:9"), "{args:?}: {err}");
            continue;
        }
        if args[0] == "flame" || args[0] == "top-functions" {
            // Recorded without the profiler: the store was found and read.
            assert!(
                err.contains("no stack samples recorded between"),
                "{args:?}: {err}"
            );
            continue;
        }
        assert!(
            o.status.success(),
            "{args:?} with the file's dir: {err}{}",
            text(&o.stdout)
        );
        assert!(!err.contains("no store at"), "{args:?}: {err}");
    }
    // serve serves the recorder's store, having no dir of its own in the file.
    let o = js(&f, &[], &["config", "check"]);
    let out = text(&o.stdout);
    let serve_dir = out
        .lines()
        .skip_while(|l| *l != "[serve]")
        .find(|l| l.starts_with("dir = "))
        .unwrap_or_else(|| panic!("no serve dir in {out}"));
    assert!(
        serve_dir.contains(&store.display().to_string()),
        "{serve_dir}"
    );
    // The environment still wins over the file, and a flag over both.
    let o = js(
        &f,
        &[("JITTERSCOPE_DIR", "/nonexistent/js")],
        &["events", "--since", "1h"],
    );
    assert!(
        text(&o.stderr).contains("no store at /nonexistent/js"),
        "{}",
        text(&o.stderr)
    );
    let o = js(
        &f,
        &[("JITTERSCOPE_DIR", "/nonexistent/js")],
        &["events", "--since", "1h", "--dir", s(&store)],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));

    let missing = t.path().join("missing.toml");
    let invalid = write(t.path(), "invalid.toml", "[record]\ndir = 7\nbogus = 1\n");
    for args in READERS {
        for (file, want) in [
            (&missing, "cannot read the configuration file".to_string()),
            (
                &invalid,
                format!("{}:3: unknown key `bogus`", invalid.display()),
            ),
        ] {
            // As a flag too: every command lists --config.
            let mut with_flag = vec!["--config", s(file)];
            with_flag.extend_from_slice(args);
            for argv in [args.to_vec(), with_flag] {
                let o = js(file, &[], &argv);
                let err = text(&o.stderr);
                assert_eq!(o.status.code(), Some(1), "{argv:?}: {err}");
                assert_eq!(err.lines().count(), 1, "{argv:?}: {err}");
                assert!(err.contains(&want), "{argv:?}: {err}");
            }
        }
    }
}

#[test]
fn config_check_refuses_what_record_and_serve_would_refuse_or_ignore() {
    let t = tempfile::tempdir().unwrap();
    for (body, want) in [
        (
            "[record]\nno-tracers = true\ntracers = \"reclaim\"\n",
            ":3: tracers: the argument '--no-tracers' cannot be used with '--tracers",
        ),
        (
            "[record]\nremote-write = \"http://vm:8428/api/v1/write\"\nremote-write-user = \"u\"\n",
            ":3: remote-write-user: --remote-write-user needs --remote-write-password-file",
        ),
        (
            "[serve]\nlisten = \"0.0.0.0:9630\"\n",
            ":2: listen: --listen 0.0.0.0:9630 is not a loopback address",
        ),
    ] {
        let f = write(t.path(), "bad.toml", body);
        for args in [
            &["config", "check"][..],
            &["record", "--duration", "1s"][..],
        ] {
            let o = js(&f, &[], args);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{body:?} {args:?}: {err}");
            assert!(
                err.starts_with(&format!("jitterscope: error: {}{want}", f.display())),
                "{body:?} {args:?}: {err}"
            );
            assert!(!err.contains("hunter2"), "the password is repeated: {err}");
        }
    }

    // An exporter whose URL cannot work, or carries a password: config check refuses it;
    // the recorder records without that exporter and says why (a typo must not leave the
    // host without its recorder), never repeating the password.
    for (body, want) in [
        (
            "[record]\nremote-write = \"ftp://x\"\n",
            ":2: --remote-write ftp://x: the engine is reached over HTTP",
        ),
        (
            "[record]\nclickhouse = \"http://u:hunter2@ch:8123/\"\n",
            ":2: --clickhouse http://…@ch:8123/: credentials in a URL",
        ),
        (
            "[record]\nremote-write = \"http://vm:8428/api/v1/write?access_token=hunter2\"\n",
            ":2: --remote-write http://vm:8428/api/v1/write?access_token=…: the query parameter `access_token` holds a secret",
        ),
    ] {
        let f = write(t.path(), "url.toml", body);
        let o = js(&f, &[], &["config", "check"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{body:?}: {err}");
        assert!(
            err.starts_with(&format!("jitterscope: error: {}{want}", f.display())),
            "{body:?}: {err}"
        );
        assert!(!err.contains("hunter2"), "the password is repeated: {err}");
        let store = t.path().join("url-store");
        let o = js(
            &f,
            &[],
            &["record", "--duration", "2s", "--no-tracers", "--nice", "0", "--no-mlock", "--profile-hz", "0", "--dir", s(&store)],
        );
        let err = text(&o.stderr);
        assert!(o.status.success(), "{body:?}: {err}");
        assert!(!err.contains("hunter2"), "the password is repeated: {err}");
        if body.contains("hunter2") {
            assert!(err.contains("credentials in a URL") || err.contains("holds a secret"), "{err}");
            assert!(err.contains("(recording goes on)"), "{err}");
        }
    }

    // Options that do nothing without another: config check names each, with its line, and
    // fails; the recorder says the same at start and records.
    let f = write(
        t.path(),
        "ignored.toml",
        "[record]\nremote-write-top = 25\nclickhouse-inventory-every = \"5m\"\nprofile-hz = 0\nprofile-stack = 4096\n\n[serve]\nclickhouse-user = \"u\"\nclickhouse-password-file = \"/etc/hostname\"\n",
    );
    let o = js(&f, &[], &["config", "check"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let p = f.display();
    for want in [
        format!("{p}:2: remote-write-top: does nothing without remote-write"),
        format!("{p}:3: clickhouse-inventory-every: does nothing without clickhouse"),
        format!("{p}:5: profile-stack: does nothing with profile-hz = 0"),
        format!("{p}:8: clickhouse-user: does nothing without clickhouse"),
    ] {
        assert!(err.contains(&want), "no `{want}` in:\n{err}");
    }
    // One that comes from the environment is named by its variable.
    let o = js(
        &f,
        &[("JITTERSCOPE_REMOTE_WRITE_FLUSH", "9s")],
        &["config", "check"],
    );
    assert!(
        text(&o.stderr).contains(
            "JITTERSCOPE_REMOTE_WRITE_FLUSH: remote-write-flush: does nothing without remote-write"
        ),
        "{}",
        text(&o.stderr)
    );
    let store = t.path().join("store");
    let o = js(
        &f,
        &[],
        &[
            "record",
            "--duration",
            "1s",
            "--no-tracers",
            "--nice",
            "0",
            "--no-mlock",
            "--dir",
            s(&store),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!(
            "{p}:2: remote-write-top: does nothing without remote-write"
        )),
        "{}",
        text(&o.stderr)
    );
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

/// A bad value from a variable names the variable, on one line, with the usage-error code: the
/// user typed no `--profile-hz`, and an error about the flag sent them looking for one.
#[test]
fn a_bad_variable_is_named() {
    let t = tempfile::tempdir().unwrap();
    let none = Path::new("/dev/null");
    for (env, args, needle) in [
        (
            ("JITTERSCOPE_PROFILE_HZ", "abc"),
            vec!["record", "--dir", s(t.path())],
            "JITTERSCOPE_PROFILE_HZ=\"abc\": invalid value 'abc' for '--profile-hz",
        ),
        (
            ("JITTERSCOPE_METRICS_TOP_PROCESSES", "many"),
            vec!["serve", "--dir", s(t.path())],
            "JITTERSCOPE_METRICS_TOP_PROCESSES=\"many\"",
        ),
    ] {
        let o = js(none, &[env], &args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{env:?} {args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("jitterscope: error: "), "{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    // Typed on the command line, the flag is blamed, as clap does.
    let o = js(
        none,
        &[],
        &["record", "--dir", s(t.path()), "--profile-hz", "abc"],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: invalid value 'abc' for '--profile-hz"),
        "{err}"
    );
}

//! The configuration file, `/etc/jitterscope/jitterscope.toml`: one table per long-running
//! command (`[record]`, `[serve]`), whose keys are that command's long options.
//!
//! Precedence is flags, then `JITTERSCOPE_<OPTION>` environment variables, then the file, then
//! the built-in defaults. That is exactly clap's own order of command line, `env` and default
//! value, so the file's values are installed as the options' default values and the
//! environment variables as their `env`, on the same clap definition that parses the command
//! line: the file accepts exactly what the flags accept, checked by the same value parsers.
//! The commented example file is generated from that definition too, so it cannot drift.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, Args, Command, Subcommand};

/// Where the file is read from unless `--config` or `JITTERSCOPE_CONFIG` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/jitterscope/jitterscope.toml";

/// The commands the file configures: the long-running ones a service manager starts.
pub const SECTIONS: &[&str] = &["record", "serve"];

/// The file to read: `--config P` / `--config=P` on the command line (found before clap runs,
/// because the file changes what clap accepts), else `$JITTERSCOPE_CONFIG`, else
/// [`DEFAULT_PATH`] if it exists. The flag and the variable name a file that must exist.
pub fn locate(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(p) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            return Some(PathBuf::from(p));
        }
    }
    if let Some(p) = std::env::var_os("JITTERSCOPE_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let p = PathBuf::from(DEFAULT_PATH);
    p.exists().then_some(p)
}

/// `JITTERSCOPE_<OPTION>` for an option id (`profile_hz` → `JITTERSCOPE_PROFILE_HZ`).
pub fn env_name(id: &str) -> String {
    format!("JITTERSCOPE_{}", id.replace('-', "_").to_uppercase())
}

/// The options of a section: every argument with a long name, less help and version.
fn options(sub: &Command) -> impl Iterator<Item = &Arg> {
    sub.get_arguments()
        .filter(|a| a.get_long().is_some() && !matches!(a.get_id().as_str(), "help" | "version"))
}

fn is_flag(a: &Arg) -> bool {
    matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
}

fn takes_many(a: &Arg) -> bool {
    matches!(a.get_action(), ArgAction::Append)
        || a.get_num_args().is_some_and(|n| n.max_values() > 1)
}

/// The values the file gives: section → option id → (raw values, line).
type Values = BTreeMap<String, BTreeMap<String, (Vec<String>, usize)>>;

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Reads and checks `path` against the definition `cmd`; every error is one line naming the
/// file, the line and the key.
fn read(cmd: &Command, path: &Path) -> Result<Values> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let p = path.display();
    let doc = toml_edit::Document::parse(text.as_str()).map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(&text, s.start));
        let msg = e.message().trim().replace('\n', " ");
        anyhow::anyhow!("{p}:{line}: not valid TOML: {msg}")
    })?;
    let mut out = Values::new();
    for (name, item) in doc.iter() {
        let line = doc
            .key(name)
            .and_then(|k| k.span())
            .map_or(0, |s| line_of(&text, s.start));
        let Some(table) = item.as_table_like() else {
            bail!("{p}:{line}: `{name}` is outside any table: put it under [record] or [serve]");
        };
        let Some(sub) = SECTIONS
            .contains(&name)
            .then(|| cmd.find_subcommand(name))
            .flatten()
        else {
            bail!(
                "{p}:{line}: unknown section [{name}] (the file has {})",
                SECTIONS
                    .iter()
                    .map(|s| format!("[{s}]"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            );
        };

        let section = out.entry(name.to_string()).or_default();
        for (key, value) in table.iter() {
            let line = table
                .key(key)
                .and_then(|k| k.span())
                .or_else(|| value.span())
                .map_or(line, |s| line_of(&text, s.start));
            let long = key.replace('_', "-");
            // An option's older name (a clap alias) still reads: a config file must not stop
            // working when an option is renamed.
            let Some(arg) = options(sub).find(|a| {
                a.get_long() == Some(long.as_str())
                    || a.get_all_aliases()
                        .is_some_and(|al| al.contains(&long.as_str()))
            }) else {
                bail!("{p}:{line}: unknown key `{key}` in [{name}] (`jitterscope config example` lists them)");
            };
            let raw = raw_values(arg, value)
                .map_err(|why| anyhow::anyhow!("{p}:{line}: {key}: {why}"))?;
            // The option's own value parser decides, as it does for the flag.
            let mut argv: Vec<String> = vec!["jitterscope".into(), name.into()];
            if is_flag(arg) {
                if raw[0] == "true" {
                    argv.push(format!("--{long}"));
                }
            } else {
                for v in &raw {
                    argv.push(format!("--{long}={v}"));
                }
            }
            let checked = cmd
                .clone()
                .try_get_matches_from(&argv)
                .map_err(|e| {
                    let why = e.to_string();
                    why.lines()
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches("error: ")
                        .to_string()
                })
                .and_then(|m| semantic(name, &m).map_err(|e| format!("{e:#}")));
            if let Err(why) = checked {
                bail!("{p}:{line}: {key}: {why}");
            }
            section.insert(arg.get_id().to_string(), (raw, line));
        }
    }
    Ok(out)
}

/// The checks a command makes on its values beyond clap's parsers (bounds that depend on
/// what the value means, such as `--retain` at least 1m).
fn semantic(section: &str, m: &clap::ArgMatches) -> Result<()> {
    use clap::FromArgMatches;
    let Some((_, m)) = m.subcommand() else {
        return Ok(());
    };
    match section {
        "record" => crate::record::validate(&crate::record::RecordArgs::from_arg_matches(m)?),
        _ => Ok(()),
    }
}

/// The file's value as the strings a command line would carry.
fn raw_values(arg: &Arg, v: &toml_edit::Item) -> Result<Vec<String>, String> {
    let scalar = |v: &toml_edit::Value| -> Result<String, String> {
        match v {
            toml_edit::Value::String(s) => Ok(s.value().clone()),
            toml_edit::Value::Integer(i) => Ok(i.value().to_string()),
            toml_edit::Value::Float(f) => Ok(f.value().to_string()),
            toml_edit::Value::Boolean(b) => Ok(b.value().to_string()),
            _ => Err("expected a string, a number or true/false".into()),
        }
    };
    let Some(v) = v.as_value() else {
        return Err("expected a value, not a table".into());
    };
    if is_flag(arg) {
        return match v.as_bool() {
            Some(b) => Ok(vec![b.to_string()]),
            None => Err("expected true or false".into()),
        };
    }
    match v.as_array() {
        Some(a) if takes_many(arg) => a.iter().map(scalar).collect(),
        Some(_) => Err("takes one value, not a list".into()),
        None => Ok(vec![scalar(v)?]),
    }
}

/// Installs the environment variables and the file's values (if any) into the definition.
pub fn apply(mut cmd: Command, file: Option<&Path>) -> Result<(Command, Values)> {
    let values = match file {
        Some(p) => read(&cmd, p)?,
        None => Values::new(),
    };
    for &sec in SECTIONS {
        let given = values.get(sec).cloned().unwrap_or_default();
        cmd = cmd.mut_subcommand(sec, |mut sub| {
            let ids: Vec<String> = options(&sub).map(|a| a.get_id().to_string()).collect();
            for id in ids {
                let from_file = given.get(&id).map(|(v, _)| v.clone());
                sub = sub.mut_arg(id.as_str(), |a| {
                    let a = a.env(env_name(&id));
                    match from_file {
                        Some(v) => a.default_values(v),
                        None => a,
                    }
                });
            }
            sub
        });
    }
    Ok((cmd, values))
}

/// Arguments of `config`.
#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    cmd: ConfigCmd,
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Check the configuration file (`--config`, $JITTERSCOPE_CONFIG or /etc/jitterscope/jitterscope.toml)
    /// and print the effective configuration of record and serve, with where each value comes from.
    Check,
    /// Print a commented example file with every option of record and serve and its default.
    Example,
}

pub fn run(a: ConfigArgs, cmd: Command, file: Option<&Path>, values: &Values) -> Result<()> {
    match a.cmd {
        ConfigCmd::Example => {
            print!("{}", example(&cmd));
            Ok(())
        }
        ConfigCmd::Check => {
            print!("{}", effective(&cmd, file, values)?);
            Ok(())
        }
    }
}

fn toml_value(arg: &Arg, raw: &[String]) -> String {
    let one = |s: &str| {
        if is_flag(arg) || s.parse::<i64>().is_ok() {
            s.to_string()
        } else {
            toml_edit::Value::from(s).to_string().trim().to_string()
        }
    };
    if takes_many(arg) {
        format!(
            "[{}]",
            raw.iter().map(|s| one(s)).collect::<Vec<_>>().join(", ")
        )
    } else {
        raw.first().map(|s| one(s)).unwrap_or_default()
    }
}

/// The effective configuration as a TOML file, each value commented with its source.
fn effective(cmd: &Command, file: Option<&Path>, values: &Values) -> Result<String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# effective configuration; precedence: flags, JITTERSCOPE_* environment, {}, defaults",
        file.map_or_else(
            || format!("{DEFAULT_PATH} (absent)"),
            |p| p.display().to_string()
        )
    );
    for &sec in SECTIONS {
        let m = cmd
            .clone()
            .try_get_matches_from(["jitterscope", sec])
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().lines().next().unwrap_or("")))?;
        let (_, m) = m.subcommand().context("no subcommand")?;
        let sub = cmd.find_subcommand(sec).context("no such section")?;
        let _ = writeln!(out, "\n[{sec}]");
        for arg in options(sub) {
            let id = arg.get_id().as_str();
            let long = arg.get_long().unwrap_or(id);
            let raw: Vec<String> = m
                .get_raw(id)
                .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            let source = match m.value_source(id) {
                Some(ValueSource::EnvVariable) => format!("env {}", env_name(id)),
                Some(ValueSource::DefaultValue) => match values.get(sec).and_then(|s| s.get(id)) {
                    Some((_, line)) => format!(
                        "{}:{line}",
                        file.map_or_else(String::new, |p| p.display().to_string())
                    ),
                    None => "default".into(),
                },
                _ => "default".into(),
            };
            if raw.is_empty() {
                let _ = writeln!(out, "#{long} =  # unset");
            } else {
                let _ = writeln!(out, "{long} = {}  # {source}", toml_value(arg, &raw));
            }
        }
    }
    Ok(out)
}

/// The commented example file: every option of every section, its help and its default.
pub fn example(cmd: &Command) -> String {
    let mut out = String::from(
        "# jitterscope's configuration file: /etc/jitterscope/jitterscope.toml (or --config FILE,\n\
         # or $JITTERSCOPE_CONFIG). Generated by `jitterscope config example`.\n\
         #\n\
         # Each table holds one command's options, named as its long flags. Flags win over\n\
         # JITTERSCOPE_<OPTION> environment variables (JITTERSCOPE_PROFILE_HZ=49), which win over\n\
         # this file, which wins over the defaults shown here. `jitterscope config check`\n\
         # validates the file and prints the effective configuration.\n",
    );
    for &sec in SECTIONS {
        let Some(sub) = cmd.find_subcommand(sec) else {
            continue;
        };
        let _ = writeln!(out, "\n[{sec}]");
        for arg in options(sub) {
            let long = arg.get_long().unwrap_or_default();
            out.push('\n');
            let (help, default) = described(arg);
            for l in help.lines() {
                for w in wrap(l, 92) {
                    let _ = writeln!(out, "# {w}");
                }
            }
            if let Some(d) = default {
                let _ = writeln!(out, "#{long} = {d}");
            } else {
                let placeholder = arg
                    .get_value_names()
                    .and_then(|n| n.first())
                    .map_or_else(|| long.to_uppercase(), |n| n.to_string());
                let _ = writeln!(out, "#{long} = \"<{placeholder}>\"");
            }
        }
    }
    out.lines()
        .map(|l| l.trim_end())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// What the example file and the man page say of an option: its help, and its default as a
/// TOML value (`false` for a switch; `None` when it has none).
fn described(arg: &Arg) -> (String, Option<String>) {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let default = if is_flag(arg) {
        Some("false".to_string())
    } else if defaults.is_empty() {
        None
    } else {
        Some(toml_value(arg, &defaults))
    };
    (help, default)
}

/// `jitterscope.toml(5)`: the file's format, precedence and every option, in roff.
pub fn man_page(cmd: &Command) -> String {
    // roff: a line starting with . or ' is a request, and - is a hyphen, not a minus.
    let esc = |t: &str| {
        let t = t.replace('\\', "\\e").replace('-', "\\-");
        if t.starts_with('.') || t.starts_with('\'') {
            format!("\\&{t}")
        } else {
            t
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        ".TH jitterscope.toml 5 \"\" \"jitterscope {}\"",
        crate::VERSION
    );
    let _ = writeln!(
        out,
        ".SH NAME\njitterscope.toml \\- configuration file of jitterscope record and serve"
    );
    let _ = writeln!(out, ".SH SYNOPSIS\n{}", esc(DEFAULT_PATH));
    let _ = writeln!(
        out,
        ".SH DESCRIPTION\n{}\n.PP\n{}\n.PP\n{}",
        esc("A TOML file with one table per long\u{2011}running command, [record] and [serve], whose keys are that command's long options without the leading dashes (profile-hz or profile_hz). A value is written as on the command line: a string, a number, true or false for a switch, or a list for an option that takes several."),
        esc("Precedence: a command-line flag wins over the environment variable JITTERSCOPE_<OPTION> (JITTERSCOPE_PROFILE_HZ=49), which wins over this file, which wins over the built-in default. --config FILE or JITTERSCOPE_CONFIG names another file; without them the default path is read if it exists."),
        esc("An unknown key or a bad value stops record and serve with a one-line error naming the file, line and key; other commands ignore the file. jitterscope config check validates the file and prints the effective configuration with the source of each value; jitterscope config example prints a commented file with every option."),
    );
    for &sec in SECTIONS {
        let Some(sub) = cmd.find_subcommand(sec) else {
            continue;
        };
        let _ = writeln!(out, ".SH [{}]", sec.to_uppercase());
        for arg in options(sub) {
            let long = arg.get_long().unwrap_or_default();
            let (help, default) = described(arg);
            let default = default.map_or_else(String::new, |d| format!(" (default: {d})"));
            let _ = writeln!(
                out,
                ".TP\n\\fB{}\\fR{}\n{}\n.br\nEnvironment: {}",
                esc(long),
                esc(&default),
                esc(&format!(
                    "{}.",
                    help.replace('\n', " ").trim_end_matches('.')
                )),
                esc(&env_name(arg.get_id().as_str()))
            );
        }
    }
    let _ = writeln!(
        out,
        ".SH SEE ALSO\njitterscope\\-record(1), jitterscope\\-serve(1), jitterscope\\-config(1)"
    );
    out
}

/// Words of `text` in lines of at most `width` characters (a longer word gets its own line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for w in text.split_whitespace() {
        let cur = lines.last_mut().expect("never empty");
        if !cur.is_empty() && cur.chars().count() + 1 + w.chars().count() > width {
            lines.push(w.to_string());
        } else {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(w);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_count_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }

    #[test]
    fn wraps_on_words() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("", 5), [""]);
        assert_eq!(wrap("abcdefgh x", 3), ["abcdefgh", "x"]);
    }

    #[test]
    fn env_names() {
        assert_eq!(env_name("profile_hz"), "JITTERSCOPE_PROFILE_HZ");
        assert_eq!(env_name("dir"), "JITTERSCOPE_DIR");
    }

    #[test]
    fn config_flag_is_found_before_clap() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            locate(&a(&["js", "record", "--config", "/x.toml"])),
            Some(PathBuf::from("/x.toml"))
        );
        assert_eq!(
            locate(&a(&["js", "--config=/y.toml", "serve"])),
            Some(PathBuf::from("/y.toml"))
        );
    }
}

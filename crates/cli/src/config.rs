//! The configuration file, `/etc/jitterscope/jitterscope.toml`: one table per long-running
//! command (`[record]`, `[serve]`), whose keys are that command's long options.
//!
//! Precedence is flags, then `JITTERSCOPE_<OPTION>` environment variables, then the file, then
//! the built-in defaults. That is exactly clap's own order of command line, `env` and default
//! value, so the file's values are installed as the options' default values and the
//! environment variables as their `env`, on the same clap definition that parses the command
//! line: the file accepts exactly what the flags accept, checked by the same value parsers.
//! The commented example file is generated from that definition too, so it cannot drift.
//!
//! The other commands read the recorder's store, so they take its `dir` from the file too
//! (`[record]`, else `[serve]`), and `fleet` the ClickHouse of `[serve]` or `[record]`, at
//! the same precedence. A file that is named but missing, or that does not check, stops every
//! command: a reader that silently ignored it would read another store than the recorder's.

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
            // Alone first, so a bad value is blamed on its own line; the checks that involve
            // other options follow, on the whole section.
            let checked = cmd.clone().try_get_matches_from(&argv);
            match checked {
                // An option that needs another (a user needs a password file) is checked with
                // the whole section below.
                Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {}
                Err(e) => bail!("{p}:{line}: {key}: {}", first_line(&e.to_string())),
                Ok(_) => {}
            }
            section.insert(arg.get_id().to_string(), (raw, line));
        }
        let line = doc
            .key(name)
            .and_then(|k| k.span())
            .map_or(0, |s| line_of(&text, s.start));
        check_section(cmd, path, name, section, line)?;
    }
    Ok(out)
}

/// A bad value that came from a `JITTERSCOPE_<OPTION>` variable, as one line that names the
/// variable: clap blames the flag, which the user never typed (`JITTERSCOPE_PROFILE_HZ=abc`
/// read "invalid value 'abc' for '--profile-hz'"). None for any other error.
pub fn env_error(cmd: &Command, argv: &[std::ffi::OsString], e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let flag = format!("--{long}");
    let typed = argv.iter().filter_map(|a| a.to_str()).any(|a| {
        a == flag
            || a.strip_prefix(flag.as_str())
                .is_some_and(|r| r.starts_with('='))
    });
    if typed {
        return None;
    }
    fn env_of(cmd: &Command, long: &str) -> Option<String> {
        cmd.get_arguments()
            .filter(|a| a.get_long() == Some(long))
            .find_map(|a| a.get_env().and_then(|e| e.to_str()).map(str::to_string))
            .or_else(|| cmd.get_subcommands().find_map(|c| env_of(c, long)))
    }
    let env = env_of(cmd, long)?;
    let value = std::env::var(&env).ok()?;
    Some(format!("{env}={value:?}: {}", first_line(&e.to_string())))
}

/// A clap error as one line, without its `error: ` and its usage and help lines (some
/// errors list what they are about on the lines after the first).
fn first_line(e: &str) -> String {
    e.lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_string()
}

/// The arguments a command line would carry for the file's values of one section.
fn argv_of(
    cmd: &Command,
    name: &str,
    section: &BTreeMap<String, (Vec<String>, usize)>,
) -> Vec<String> {
    let mut argv: Vec<String> = vec!["jitterscope".into(), name.into()];
    let Some(sub) = cmd.find_subcommand(name) else {
        return argv;
    };
    for (id, (raw, _)) in section {
        let Some(arg) = options(sub).find(|a| a.get_id().as_str() == id) else {
            continue;
        };
        let long = arg.get_long().unwrap_or(id);
        if is_flag(arg) {
            if raw.first().map(String::as_str) == Some("true") {
                argv.push(format!("--{long}"));
            }
        } else {
            for v in raw {
                argv.push(format!("--{long}={v}"));
            }
        }
    }
    argv
}

/// The section's values together, as the command would get them from flags: conflicts
/// (`no-tracers` with `tracers`), options that need one another, and the command's own checks
/// (a URL that cannot work). The error names the file, the line and the key it involves (the
/// later one when it involves two).
fn check_section(
    cmd: &Command,
    path: &Path,
    name: &str,
    section: &BTreeMap<String, (Vec<String>, usize)>,
    header_line: usize,
) -> Result<()> {
    let problem = |section: &BTreeMap<String, (Vec<String>, usize)>| -> Option<String> {
        let argv = argv_of(cmd, name, section);
        match cmd.clone().try_get_matches_from(&argv) {
            Err(e) => Some(first_line(&e.to_string())),
            Ok(m) => semantic(name, &m).err().map(|e| format!("{e:#}")),
        }
    };
    let Some(why) = problem(section) else {
        return Ok(());
    };
    let sub = cmd.find_subcommand(name);
    // A message that names none of the file's keys (`--remote-write-user` needs a password
    // file, and the message names the file option) is blamed on the key without which the
    // section checks, the last one in the file first.
    let (key, line) = blame(sub, section, &why)
        .or_else(|| {
            let mut keys: Vec<(&String, usize)> =
                section.iter().map(|(id, (_, l))| (id, *l)).collect();
            keys.sort_by_key(|(_, l)| std::cmp::Reverse(*l));
            keys.into_iter().find_map(|(id, line)| {
                let mut without = section.clone();
                without.remove(id);
                problem(&without).is_none().then(|| {
                    let long = sub
                        .and_then(|c| options(c).find(|a| a.get_id() == id))
                        .and_then(|a| a.get_long())
                        .unwrap_or(id);
                    (long.to_string(), line)
                })
            })
        })
        .unwrap_or_else(|| (String::new(), header_line));
    let p = path.display();
    if key.is_empty() {
        bail!("{p}:{line}: [{name}]: {why}");
    }
    bail!("{p}:{line}: {key}: {why}")
}

/// Of the section's keys, the one an error message names as a flag (`--no-tracers`), the
/// last in the file when it names several: with two options in conflict, the one that came
/// second is the one that contradicts.
fn blame(
    sub: Option<&Command>,
    section: &BTreeMap<String, (Vec<String>, usize)>,
    why: &str,
) -> Option<(String, usize)> {
    let sub = sub?;
    section
        .iter()
        .filter_map(|(id, (_, line))| {
            let long = options(sub)
                .find(|a| a.get_id().as_str() == id)?
                .get_long()?;
            names_flag(why, long).then(|| (long.to_string(), *line))
        })
        .max_by_key(|(_, line)| *line)
}

/// Whether `text` names `--long` as a whole flag (not `--remote-write` in
/// `--remote-write-label`).
fn names_flag(text: &str, long: &str) -> bool {
    let flag = format!("--{long}");
    text.match_indices(&flag).any(|(at, _)| {
        !text[at + flag.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// The checks a command makes on its values beyond clap's parsers (bounds that depend on
/// what the value means, such as `--retain` at least 1m).
fn semantic(section: &str, m: &clap::ArgMatches) -> Result<()> {
    let Some((_, m)) = m.subcommand() else {
        return Ok(());
    };
    semantic_sub(section, m)
}

/// [`semantic`] on the section command's own matches.
fn semantic_sub(section: &str, m: &clap::ArgMatches) -> Result<()> {
    use clap::FromArgMatches;
    match section {
        "record" => crate::record::validate(&crate::record::RecordArgs::from_arg_matches(m)?),
        "serve" => crate::serve::validate(&crate::serve::ServeArgs::from_arg_matches(m)?),
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

/// The commands that read the store but are not configured by a table of their own: they
/// take the store directory (and `fleet` the ClickHouse) from the recorder's and the
/// server's tables. `lab` is not one: its `--dir` is where a run keeps its own recording.
const NOT_READERS: &[&str] = &[
    "record",
    "serve",
    "config",
    "lab",
    "completions",
    "manpages",
];

/// The reader options that come from the tables, and the tables they come from, first first:
/// the store the recorder writes, and the ClickHouse the server queries or else the one the
/// recorder pushes to.
const READER_KEYS: &[(&str, &[&str])] = &[
    ("dir", &["record", "serve"]),
    ("clickhouse", &["serve", "record"]),
];

/// The ClickHouse credentials go with the URL they were given for.
const CLICKHOUSE_CREDENTIALS: &[&str] = &["clickhouse_user", "clickhouse_password_file"];

/// For a reader, the file's value of option `id`, with its section and line. Credentials
/// come from the section whose `clickhouse` the reader takes, never one from each.
fn reader_value<'v>(
    values: &'v Values,
    id: &str,
) -> Option<(&'v Vec<String>, &'static str, usize)> {
    let key = if CLICKHOUSE_CREDENTIALS.contains(&id) {
        "clickhouse"
    } else {
        id
    };
    let (_, from) = READER_KEYS.iter().find(|(k, _)| *k == key)?;
    let sec = from
        .iter()
        .find(|s| values.get(**s).is_some_and(|v| v.contains_key(key)))?;
    values.get(*sec)?.get(id).map(|(v, l)| (v, *sec, *l))
}

/// Installs the file's reader keys into every reader command, below their flags and their
/// environment variables, recursively (`fleet episodes`).
fn install_readers(mut cmd: Command, values: &Values) -> Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| !NOT_READERS.contains(&n.as_str()))
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name.as_str(), |mut sub| {
            let ids: Vec<String> = sub
                .get_arguments()
                .map(|a| a.get_id().to_string())
                .filter(|id| {
                    READER_KEYS.iter().any(|(k, _)| k == id)
                        || CLICKHOUSE_CREDENTIALS.contains(&id.as_str())
                })
                .collect();
            for id in ids {
                let given = reader_value(values, &id).map(|(v, _, _)| v.clone());
                sub = sub.mut_arg(id.as_str(), |a| {
                    let a = if a.get_env().is_none() {
                        a.env(env_name(&id))
                    } else {
                        a
                    };
                    match given {
                        // clap checks required options before it fills in defaults.
                        Some(v) => a.default_values(v).required(false),
                        None => a,
                    }
                });
            }
            install_readers(sub, values)
        });
    }
    cmd
}

/// Installs the environment variables and the file's values (if any) into the definition.
pub fn apply(mut cmd: Command, file: Option<&Path>) -> Result<(Command, Values)> {
    let values = match file {
        Some(p) => read(&cmd, p)?,
        None => Values::new(),
    };
    cmd = install_readers(cmd, &values);
    for &sec in SECTIONS {
        let mut given = values.get(sec).cloned().unwrap_or_default();
        // serve serves the recorder's store: without a `dir` of its own, the recorder's.
        if sec == "serve" && !given.contains_key("dir") {
            if let Some(d) = values.get("record").and_then(|r| r.get("dir")) {
                given.insert("dir".into(), d.clone());
            }
        }
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

/// Options that do nothing unless another option says so: (section, option, the condition,
/// what to say). The recorder would take them and ignore them; `config check` refuses them
/// and `record`/`serve` warn, so a setting that looks active but is not is never silent.
type Needs = (
    &'static str,
    &'static [&'static str],
    fn(&Raw) -> bool,
    &'static str,
);

/// The raw values of the options a command got, by id (none: unset).
pub struct Raw<'m>(&'m clap::ArgMatches);

impl Raw<'_> {
    fn get(&self, id: &str) -> Option<String> {
        self.0
            .try_get_raw(id)
            .ok()
            .flatten()
            .and_then(|mut v| v.next())
            .map(|v| v.to_string_lossy().into_owned())
    }
    fn set(&self, id: &str) -> bool {
        self.get(id).is_some()
    }
    fn flag(&self, id: &str) -> bool {
        self.0.try_get_one::<bool>(id).ok().flatten() == Some(&true)
    }
}

const NEEDS: &[Needs] = &[
    (
        "record",
        &[
            "remote_write_label",
            "remote_write_header",
            "remote_write_select",
            "remote_write_top",
            "remote_write_flush",
            "remote_write_bearer_token_file",
            "remote_write_user",
            "remote_write_password_file",
            "remote_write_ca_file",
        ],
        |r| r.set("remote_write"),
        "does nothing without remote-write",
    ),
    (
        "record",
        &[
            "clickhouse_retain",
            "clickhouse_user",
            "clickhouse_password_file",
            "clickhouse_inventory_every",
        ],
        |r| r.set("clickhouse"),
        "does nothing without clickhouse",
    ),
    (
        "record",
        &["profile_stack", "no_profile_python"],
        |r| r.get("profile_hz").as_deref() != Some("0"),
        "does nothing with profile-hz = 0 (the profiler off)",
    ),
    (
        "record",
        &["syscall_tracers", "census_every"],
        |r| !r.flag("no_tracers"),
        "does nothing with no-tracers = true",
    ),
    (
        "record",
        &["census_every"],
        |r| r.get("syscall_tracers").as_deref() != Some("always"),
        "does nothing with on-demand-tracers = \"always\" (the tracers stay attached)",
    ),
    (
        "serve",
        &[
            "clickhouse_user",
            "clickhouse_password_file",
            "fleet_host_url",
        ],
        |r| r.set("clickhouse"),
        "does nothing without clickhouse",
    ),
];

/// The options of `section` that are set (`given`) but do nothing, with why.
pub fn ignored(
    section: &str,
    m: &clap::ArgMatches,
    given: impl Fn(&str) -> bool,
) -> Vec<(&'static str, &'static str)> {
    let raw = Raw(m);
    let mut out = Vec::new();
    for (sec, ids, holds, why) in NEEDS {
        if *sec != section || holds(&raw) {
            continue;
        }
        for id in ids.iter() {
            if given(id) && !out.iter().any(|(i, _)| i == id) {
                out.push((*id, *why));
            }
        }
    }
    out
}

/// Whether option `id` of `section` was given on the command line, or given another value
/// than its built-in default in the environment or the file (a file value is a default value
/// to clap). The example file with its defaults uncommented changes nothing, and says nothing.
fn given_in(m: &clap::ArgMatches, values: &Values, section: &str, id: &str) -> bool {
    let differs = || {
        let raw: Vec<String> = m
            .get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let pristine = <crate::Cli as clap::CommandFactory>::command();
        let default: Vec<String> = pristine
            .find_subcommand(section)
            .and_then(|sub| options(sub).find(|a| a.get_id().as_str() == id))
            .map(|a| {
                if is_flag(a) && a.get_default_values().is_empty() {
                    vec!["false".to_string()]
                } else {
                    a.get_default_values()
                        .iter()
                        .map(|v| v.to_string_lossy().into_owned())
                        .collect()
                }
            })
            .unwrap_or_default();
        raw != default
    };
    match m.value_source(id) {
        Some(ValueSource::CommandLine) => true,
        Some(ValueSource::EnvVariable) => differs(),
        Some(ValueSource::DefaultValue) => {
            values.get(section).is_some_and(|s| s.contains_key(id)) && differs()
        }
        _ => false,
    }
}

/// What `record` or `serve` says at start of the options it was given that do nothing, each
/// with where it was given.
pub fn ignored_notes(
    cmd: &Command,
    section: &str,
    m: &clap::ArgMatches,
    file: Option<&Path>,
    values: &Values,
) -> Vec<String> {
    let Some(sub) = cmd.find_subcommand(section) else {
        return Vec::new();
    };
    ignored(section, m, |id| given_in(m, values, section, id))
        .into_iter()
        .map(|(id, why)| {
            let long = options(sub)
                .find(|a| a.get_id().as_str() == id)
                .and_then(|a| a.get_long())
                .unwrap_or(id);
            format!("{}{long}: {why}", origin(m, values, file, section, id))
        })
        .collect()
}

/// Where option `id` came from, as a prefix of a message (`/etc/…/jitterscope.toml:12: `,
/// `JITTERSCOPE_X: `, or nothing for the command line).
fn origin(
    m: &clap::ArgMatches,
    values: &Values,
    file: Option<&Path>,
    section: &str,
    id: &str,
) -> String {
    match m.value_source(id) {
        Some(ValueSource::EnvVariable) => format!("{}: ", env_name(id)),
        Some(ValueSource::DefaultValue) => {
            match (file, values.get(section).and_then(|s| s.get(id))) {
                (Some(p), Some((_, line))) => format!("{}:{line}: ", p.display()),
                _ => String::new(),
            }
        }
        _ => String::new(),
    }
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
            let problems = problems(&cmd, file, values);
            if problems.is_empty() {
                print!("{}", effective(&cmd, file, values)?);
                return Ok(());
            }
            for p in &problems {
                crate::logline::emit(crate::logline::Level::Error, p);
            }
            bail!(
                "{} problem{} in the configuration: record and serve would refuse or ignore {}",
                problems.len(),
                if problems.len() == 1 { "" } else { "s" },
                if problems.len() == 1 { "it" } else { "them" }
            )
        }
    }
}

/// What `record` and `serve` would refuse or ignore in the effective configuration (the file
/// with the environment over it, no flags): each a line naming where the value came from.
/// The file alone was checked when it was read.
fn problems(cmd: &Command, file: Option<&Path>, values: &Values) -> Vec<String> {
    let mut out = Vec::new();
    for &sec in SECTIONS {
        let m = match cmd.clone().try_get_matches_from(["jitterscope", sec]) {
            Ok(m) => m,
            Err(e) => {
                out.push(format!("[{sec}]: {}", first_line(&e.to_string())));
                continue;
            }
        };
        let Some((_, m)) = m.subcommand() else {
            continue;
        };
        if let Err(e) = semantic_sub(sec, m) {
            let why = format!("{e:#}");
            // Blamed on an option the message names, where it was given.
            let at = cmd.find_subcommand(sec).and_then(|sub| {
                options(sub)
                    .filter(|a| a.get_long().is_some_and(|l| names_flag(&why, l)))
                    .map(|a| origin(m, values, file, sec, a.get_id().as_str()))
                    .find(|o| !o.is_empty())
            });
            out.push(format!("{}[{sec}]: {why}", at.unwrap_or_default()));
        }
        if sec == "record" {
            // Exporters the recorder would record without (a URL that cannot work or that
            // carries a password): it starts and says so, but the configuration is wrong.
            use clap::FromArgMatches;
            if let Ok(a) = crate::record::RecordArgs::from_arg_matches(m) {
                for p in a.url_problems() {
                    let at = ["remote_write", "clickhouse"]
                        .into_iter()
                        .find(|id| p.starts_with(&format!("--{}", id.replace('_', "-"))))
                        .map(|id| origin(m, values, file, sec, id))
                        .unwrap_or_default();
                    out.push(format!("{at}{}", p));
                }
            }
        }
        out.extend(ignored_notes(cmd, sec, m, file, values));
    }
    out
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
                Some(ValueSource::DefaultValue) => {
                    let f = file.map_or_else(String::new, |p| p.display().to_string());
                    match values.get(sec).and_then(|s| s.get(id)) {
                        Some((_, line)) => format!("{f}:{line}"),
                        // serve's dir taken from the recorder's.
                        None => match values.get("record").and_then(|r| r.get(id)) {
                            Some((_, line)) if sec == "serve" && id == "dir" => {
                                format!("{f}:{line} ([record] dir)")
                            }
                            _ => "default".into(),
                        },
                    }
                }
                _ => "default".into(),
            };
            if raw.is_empty() {
                let _ = writeln!(out, "#{long} =  # unset");
            } else {
                let _ = writeln!(out, "{long} = {}  # {source}", toml_value(arg, &raw));
            }
        }
    }
    // What the readers take from the tables above (dump, diagnose, top, events, fleet, ...).
    let _ = writeln!(
        out,
        "\n# the readers (dump, diagnose, events, top, replay, flame, store, fleet) read:"
    );
    for (id, _) in READER_KEYS {
        let env = env_name(id);
        let (value, source) = match std::env::var(&env) {
            Ok(v) if !v.is_empty() => (v, format!("env {env}")),
            _ => match reader_value(values, id) {
                Some((v, sec, line)) => (
                    v.first().cloned().unwrap_or_default(),
                    format!(
                        "[{sec}] {}:{line}",
                        file.map_or_else(String::new, |p| p.display().to_string())
                    ),
                ),
                None if *id == "dir" => (crate::DEFAULT_DIR.to_string(), "default".into()),
                None => {
                    let _ = writeln!(out, "#   {id} =  # unset");
                    continue;
                }
            },
        };
        let _ = writeln!(
            out,
            "#   {id} = {}  # {source}",
            toml_edit::Value::from(value.as_str()).to_string().trim()
        );
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
        esc("The other commands read the recorder's store: they take dir from [record] (else [serve]), and fleet takes clickhouse and its credentials from [serve] (else [record]), below their own flags and the environment. An unknown key, a bad value or a combination record or serve would refuse stops every command with a one-line error naming the file, line and key, as does a file named by --config or JITTERSCOPE_CONFIG that does not exist. jitterscope config check also refuses options that would do nothing (remote-write-top without remote-write), which record and serve only warn about, and prints the effective configuration with the source of each value; jitterscope config example prints a commented file with every option."),
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

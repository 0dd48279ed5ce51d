//! Man pages and shell completions, generated from the same clap definition that parses the
//! command line, so they cannot drift from it: `jitterscope completions SHELL` prints a
//! completion script, `jitterscope manpages DIR` writes one page per (sub)command.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Command, CommandFactory};
use clap_complete::Shell;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManpagesArgs {
    /// Directory to write the pages into (created if missing): jitterscope.1,
    /// jitterscope-<command>[-<subcommand>].1 for every command, and jitterscope.toml.5.
    dir: PathBuf,
}

pub fn completions(a: CompletionsArgs) -> Result<()> {
    let (mut cmd, _) = crate::config::apply(crate::Cli::command(), None)?;
    clap_complete::generate(a.shell, &mut cmd, "jitterscope", &mut std::io::stdout());
    Ok(())
}

pub fn manpages(a: ManpagesArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    // With the environment variables installed, each option's page names its JITTERSCOPE_*.
    let (mut cmd, _) = crate::config::apply(crate::Cli::command(), None)?;
    cmd.build();
    let mut n = write_pages(&cmd, "jitterscope", &a.dir)?;
    let path = a.dir.join("jitterscope.toml.5");
    std::fs::write(&path, crate::config::man_page(&cmd))
        .with_context(|| format!("writing {}", path.display()))?;
    n += 1;
    eprintln!("wrote {n} man pages to {}", a.dir.display());
    Ok(())
}

/// Writes the page of `cmd`, named `name`, and those of its subcommands; returns how many.
fn write_pages(cmd: &Command, name: &str, dir: &Path) -> Result<usize> {
    // A subcommand's page is titled by its full invocation name, as git's are
    // (jitterscope-lab-check(1)), and its usage line shows the whole command.
    let page = cmd
        .clone()
        .name(name.to_string())
        .bin_name(name.replace('-', " "));
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        n += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(n)
}

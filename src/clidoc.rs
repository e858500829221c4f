//! The CLI reference as Markdown, rendered from a `clap::Command` tree, so
//! `docs/reference/cli.md` (this crate's binary) and
//! `docs/reference/controller-cli.md` (the controller's) are generated from
//! the definitions they describe. Only the binaries' tests call it (the
//! shipped binaries never reference it, so the linker drops it); they
//! compare the committed file with [`markdown`] through [`check_or_write`].

use std::{fmt::Write as _, path::Path};

use clap::{Arg, ArgAction, Command};

/// The variable that makes [`check_or_write`] rewrite the file instead of
/// comparing it.
pub const REGENERATE_ENV: &str = "SR_REGENERATE_DOCS";

/// Renders `cmd` and every visible subcommand, depth first: a heading per
/// command (`## name sub`), its description, and a table of its arguments
/// (flag, environment variable, default, description). `preamble` goes
/// right after the title.
pub fn markdown(mut cmd: Command, title: &str, preamble: &str) -> String {
    cmd.build();
    let mut out = format!("# {title}\n\n{preamble}\n");
    render(&cmd, &[], &mut out);
    out
}

fn render(cmd: &Command, parents: &[&str], out: &mut String) {
    let mut path: Vec<&str> = parents.to_vec();
    path.push(cmd.get_name());
    let _ = writeln!(out, "\n## {}\n", path.join(" "));
    let about = cmd
        .get_long_about()
        .or_else(|| cmd.get_about())
        .map(|a| sentence(&a.to_string()))
        .unwrap_or_default();
    if !about.is_empty() {
        let _ = writeln!(out, "{about}\n");
    }
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        // Global flags are listed once, on the command that declares them.
        .filter(|a| parents.is_empty() || !a.is_global_set())
        .collect();
    if !args.is_empty() {
        out.push_str("| argument | environment | default | description |\n|---|---|---|---|\n");
        for a in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                cell(&flag(a)),
                a.get_env()
                    .map(|e| format!("`{}`", e.to_string_lossy()))
                    .unwrap_or_else(|| "—".into()),
                cell(&default(a)),
                cell(&description(a)),
            );
        }
    }
    let subs: Vec<&Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    if !subs.is_empty() {
        let names: Vec<String> = subs.iter().map(|s| format!("`{}`", s.get_name())).collect();
        let _ = writeln!(out, "\nSubcommands: {}.", names.join(", "));
    }
    for sub in subs {
        render(sub, &path, out);
    }
}

fn takes_value(a: &Arg) -> bool {
    !matches!(
        a.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
    )
}

fn flag(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| a.get_id().as_str().to_ascii_uppercase());
    if a.is_positional() {
        return format!("`{value}`");
    }
    let mut s = String::new();
    if let Some(short) = a.get_short() {
        let _ = write!(s, "`-{short}`, ");
    }
    if let Some(long) = a.get_long() {
        if takes_value(a) {
            let _ = write!(s, "`--{long} {value}`");
        } else {
            let _ = write!(s, "`--{long}`");
        }
    }
    if let Some(aliases) = a.get_visible_aliases() {
        for alias in aliases {
            let _ = write!(s, " (alias `--{alias}`)");
        }
    }
    s
}

fn default(a: &Arg) -> String {
    if !takes_value(a) {
        return "off".into();
    }
    let d: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    if d.is_empty() {
        "—".into()
    } else {
        d.join(", ")
    }
}

fn description(a: &Arg) -> String {
    let mut s = a
        .get_long_help()
        .or_else(|| a.get_help())
        .map(|h| sentence(&h.to_string()))
        .unwrap_or_default();
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if takes_value(a) && !possible.is_empty() {
        let _ = write!(s, " One of {}.", possible.join(", "));
    }
    if a.is_required_set() {
        s.push_str(" Required.");
    }
    if matches!(a.get_action(), ArgAction::Append) && !s.contains("repeatable") {
        s.push_str(" Repeatable.");
    }
    s.trim().to_string()
}

/// One line, ending in a full stop (clap drops a one-line help's own), so
/// what [`description`] appends reads as the next sentence.
fn sentence(s: &str) -> String {
    let mut line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if !line.is_empty() && !line.ends_with(['.', '!', '?', ':']) {
        line.push('.');
    }
    line
}

/// A table cell: pipes escaped, so a `FILE|-` value name stays one cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Compares `path` with `rendered`; with [`REGENERATE_ENV`]`=1` writes it
/// instead. The error says which file differs and how to rewrite it.
pub fn check_or_write(path: &Path, rendered: &str) -> Result<(), String> {
    if std::env::var_os(REGENERATE_ENV).is_some_and(|v| v == "1") {
        return std::fs::write(path, rendered)
            .map_err(|e| format!("cannot write {}: {e}", path.display()));
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    if committed == rendered {
        Ok(())
    } else {
        Err(format!(
            "{} is not what the CLI definitions render; run the test again with {REGENERATE_ENV}=1 to rewrite it, and commit the result",
            path.display()
        ))
    }
}

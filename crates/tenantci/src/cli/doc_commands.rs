//! The docs' command lines against the parser: every `tenantci …` line in a fenced code block
//! of `docs/**/*.md` and `README.md` must parse with the current flags, so renaming a flag
//! without its runbook fails the build.
//!
//! Docs show synopses, not only literal commands: `[--opt X]` groups, `...`, `<placeholder>`,
//! `$VAR` and upper-case value names (`DIR`, `N`). Brackets and ellipses are dropped; a value
//! that is a placeholder may fail its parser, and a synopsis may leave out required flags or
//! list alternatives. What must never happen is a flag or subcommand the CLI does not know,
//! or a literal value it refuses.
//!
//! Test-only: nothing here ships in the binary.

use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// One `tenantci …` command from a fenced block, continuation lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocCommand {
    /// 1-based line of the command's first line.
    pub line: usize,
    pub text: String,
}

/// The commands in one markdown document, in order.
pub fn commands_in(markdown: &str) -> Vec<DocCommand> {
    let mut found = Vec::new();
    let mut fenced = false;
    let mut pending: Option<DocCommand> = None;
    for (index, raw) in markdown.lines().enumerate() {
        if raw.trim_start().starts_with("```") {
            fenced = !fenced;
            pending = None;
            continue;
        }
        if !fenced {
            continue;
        }
        let mut current = match pending.take() {
            Some(mut p) => {
                p.text.push(' ');
                p.text.push_str(raw.trim());
                p
            }
            None => DocCommand {
                line: index + 1,
                text: raw.trim().to_string(),
            },
        };
        if let Some(stripped) = current.text.strip_suffix('\\') {
            current.text = stripped.trim_end().to_string();
            pending = Some(current);
            continue;
        }
        if let Some(text) = tenantci_invocation(&current.text) {
            found.push(DocCommand {
                line: current.line,
                text,
            });
        }
    }
    found
}

/// The command when the line runs tenantci (after a `$ ` prompt, `VAR=value` assignments or
/// `sudo`), cut at the first shell operator or comment.
fn tenantci_invocation(line: &str) -> Option<String> {
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let mut rest = line;
    loop {
        let (word, tail) = rest.split_once(' ').unwrap_or((rest, ""));
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        });
        if assignment || word == "sudo" {
            rest = tail.trim_start();
            continue;
        }
        if word != "tenantci" {
            return None;
        }
        break;
    }
    let end = [" | ", " > ", " >> ", " && ", " ; ", " # ", " 2>"]
        .iter()
        .filter_map(|op| rest.find(op))
        .min()
        .unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

/// Shell words of a synopsis: quotes removed, `[`, `]`, `(`, `)`, `|` and `...` dropped.
pub fn words(command: &str) -> Vec<String> {
    let command = collapse_placeholders(command);
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
        .into_iter()
        .map(|w| {
            w.trim_start_matches(['[', '('])
                .trim_end_matches("...")
                .trim_end_matches([']', ')'])
                .trim_end_matches("...")
                .to_string()
        })
        .filter(|w| !w.is_empty() && w != "|" && w != "...")
        .collect()
}

/// `<nats reachable from pods>` as one word `<x>`: a placeholder may hold spaces.
fn collapse_placeholders(command: &str) -> String {
    let mut out = String::new();
    let mut rest = command;
    while let Some(start) = rest.find('<') {
        let Some(len) = rest[start..].find('>') else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str("<x>");
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

/// A value the docs leave for the reader to fill in.
fn is_placeholder(value: &str) -> bool {
    value.starts_with('$')
        || value.contains('<')
        || (value.chars().any(|c| c.is_ascii_uppercase())
            && value
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '-'))
}

/// Why clap refuses the command, or None when it parses (as far as a synopsis can). A
/// placeholder value its parser refuses is dropped with its flag and the rest parsed again,
/// so a flag after it is still checked.
pub fn problem(cli: &clap::Command, command: &str) -> Option<String> {
    let mut words = words(command);
    loop {
        let err = cli.clone().try_get_matches_from(&words).err()?;
        match err.kind() {
            ErrorKind::MissingRequiredArgument
            | ErrorKind::MissingSubcommand
            | ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            | ErrorKind::ArgumentConflict => return None,
            ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
                if let Some(ContextValue::String(v)) = err.get(ContextKind::InvalidValue)
                    && is_placeholder(v)
                    && let Some(at) = words.iter().position(|w| w == v)
                {
                    let from = if at > 0 && words[at - 1].starts_with('-') {
                        at - 1
                    } else {
                        at
                    };
                    words.drain(from..=at);
                    continue;
                }
            }
            _ => {}
        }
        let rendered = err.render().to_string();
        return Some(rendered.lines().next().unwrap_or_default().to_string());
    }
}

/// `file:line: command: problem` for every command in `files` that does not parse.
pub fn check(cli: &clap::Command, files: &[PathBuf]) -> (usize, Vec<String>) {
    let mut count = 0;
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for c in commands_in(&text) {
            count += 1;
            if let Some(p) = problem(cli, &c.text) {
                problems.push(format!("{}:{}: `{}`: {p}", file.display(), c.line, c.text));
            }
        }
    }
    (count, problems)
}

/// README.md and every markdown file under docs/.
pub fn doc_files(repo: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo.join("README.md")];
    walk(&repo.join("docs"), &mut files);
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn every_tenantci_line_in_the_docs_parses_with_the_current_flags() {
        let (count, problems) = check(&super::super::Cli::command(), &doc_files(&repo()));
        assert!(
            count >= 20,
            "only {count} commands found: is the extractor broken?"
        );
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// The positive control: the runbook's own `bootstrap runner` block with one flag renamed
    /// is reported, naming the flag and the line; the block as written is not.
    #[test]
    fn a_renamed_flag_in_a_runbook_is_reported() {
        let cli = super::super::Cli::command();
        let runbook =
            std::fs::read_to_string(repo().join("docs/runbooks/gitlab-runner.md")).unwrap();
        let first = &commands_in(&runbook)[0];
        assert!(first.text.contains("--runner-token-file"), "{first:?}");
        assert_eq!(problem(&cli, &first.text), None);
        let renamed = runbook.replacen("--runner-token-file", "--runner-token-path", 1);
        let broken = &commands_in(&renamed)[0];
        assert_eq!(broken.line, first.line);
        let p = problem(&cli, &broken.text).expect("the renamed flag is reported");
        assert!(p.contains("--runner-token-path"), "{p}");

        let snippet = "text\n```sh\n$ tenantci runner check \\\n  --konfig /x # comment\n```\n";
        let found = commands_in(snippet);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 3);
        assert!(problem(&cli, &found[0].text).unwrap().contains("--konfig"));
        let mangled = "```\ntenantci runnr check --config /x\n```\n";
        assert!(problem(&cli, &commands_in(mangled)[0].text).is_some());
    }

    #[test]
    fn synopsis_notation_is_read_as_the_reader_would() {
        assert_eq!(
            words("tenantci x [--a 'b c'] [--p N]... (--s DIR | --n FILE) ..."),
            [
                "tenantci", "x", "--a", "b c", "--p", "N", "--s", "DIR", "--n", "FILE"
            ]
        );
        assert_eq!(
            tenantci_invocation("A=1 B=x sudo tenantci man > out # c"),
            Some("tenantci man".to_string())
        );
        assert_eq!(words("a nats://<b c>:4222"), ["a", "nats://<x>:4222"]);
        assert_eq!(tenantci_invocation("echo tenantci"), None);
        assert_eq!(tenantci_invocation("# tenantci man"), None);
        // Outside fenced blocks nothing counts: prose may quote partial commands.
        assert!(commands_in("tenantci --bogus\n").is_empty());
        assert!(is_placeholder("$TOKEN") && is_placeholder("N") && !is_placeholder("2"));
    }
}

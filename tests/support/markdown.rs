//! The repository's Markdown as tests read it: the pages under docs/ and
//! their fenced code blocks with the line each starts at. Shared by the
//! unit tier's documentation checks (tests/unit/docs.rs) and the examples
//! applied to the real control plane (tests/integration/docs_examples.rs).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            markdown_under(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

pub fn docs_pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    markdown_under(&root().join("docs"), &mut pages);
    assert!(pages.len() > 20, "docs/ has only {} pages", pages.len());
    pages
}

/// Fenced blocks of `lang`: (line of the opening fence, 1-based; body).
pub fn fenced(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed.starts_with("```") => {
                let info = trimmed.trim_start_matches('`').trim();
                open = Some((i + 1, info == lang, String::new()));
            }
            None => {}
            Some((start, wanted, body)) => {
                if trimmed.starts_with("```") {
                    if *wanted {
                        blocks.push((*start, std::mem::take(body)));
                    }
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    blocks
}

pub fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

//! The manual's links: every relative link and `#anchor` in `README.md` and `docs/*.md` resolves.
//!
//! A link is `[text](target)` or `![alt](target)` outside code (fenced blocks and inline spans), or a
//! reference definition `[label]: target`. Targets with a scheme (`https://`, `mailto:`) are not
//! checked. A path is relative to the file it is in and must exist (a file or a folder); an anchor
//! must name a heading of the Markdown file it points into (the file itself for a bare `#anchor`),
//! spelled as GitHub spells it: the heading's text lowercased, spaces to `-`, punctuation dropped
//! except `-` and `_`, and `-1`, `-2`… after a repeated one. Run by `cargo xtask test` (the workspace's
//! unit tests).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Markdown files whose links are checked: `README.md` and `docs/*.md`.
pub fn manual_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    files.extend(docs);
    files
}

/// Every link of `files` that does not resolve, as `file:line: target: why`.
pub fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let mut anchors: HashMap<PathBuf, Vec<String>> = HashMap::new();
    let mut problems = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) => {
                problems.push(format!("{}: cannot read: {e}", file.display()));
                continue;
            }
        };
        for (line, target) in links(&text) {
            let at = format!("{}:{line}: {target}", file.display());
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap_or(Path::new(".")).join(path)
            };
            if !dest.exists() {
                problems.push(format!("{at}: no such file {}", dest.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if dest.extension().is_none_or(|e| e != "md") {
                problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                continue;
            }
            let key = dest.canonicalize().unwrap_or(dest.clone());
            let known = anchors.entry(key).or_insert_with(|| {
                std::fs::read_to_string(&dest)
                    .map(|t| heading_anchors(&t))
                    .unwrap_or_default()
            });
            if !known.iter().any(|a| a == anchor) {
                problems.push(format!("{at}: no heading #{anchor} in {}", dest.display()));
            }
        }
    }
    problems
}

/// The link targets of a Markdown text with their line numbers, code left out.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        if let Some(target) = reference_definition(&line) {
            if !has_scheme(target) {
                out.push((n, target.to_string()));
            }
            continue;
        }
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            // The target runs to the parenthesis that closes it (one level of nesting allowed).
            let mut depth = 0;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map(|(i, _)| i);
            let Some(end) = end else { break };
            // A title after the target (`(path "title")`) is not part of it.
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() && !has_scheme(target) {
                out.push((n, target.to_string()));
            }
            rest = &rest[end..];
        }
    }
    out
}

/// Lines outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The line with its inline code spans (`` `…` ``, ``` ``…`` ```) blanked out.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let delimiter = "`".repeat(ticks);
        let after = &rest[start + ticks..];
        match after.find(&delimiter) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                // An unclosed span is literal text.
                out.push_str(&rest[start..start + ticks]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `[label]: target` at the start of a line.
fn reference_definition(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = line.strip_prefix('[')?;
    let close = rest.find("]:")?;
    if close == 0 || rest[..close].contains('[') {
        return None;
    }
    rest[close + 2..].split_whitespace().next()
}

fn has_scheme(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// The anchors GitHub gives a Markdown text's headings, in order.
pub fn heading_anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with([' ', '\t']) {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim_end();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// GitHub's anchor for a heading: its text (a link's label for a link) lowercased, spaces to `-`,
/// punctuation dropped except `-` and `_`.
pub fn slug(title: &str) -> String {
    let mut text = String::new();
    let mut rest = title;
    // `[label](target)` shows as its label.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_of_the_readme_and_the_manual_resolves() {
        let root = crate::workspace_root();
        let files = manual_files(&root);
        assert!(files.len() > 5, "too few Markdown files found: {files:?}");
        let broken = broken_links(&files);
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    }

    #[test]
    fn anchors_are_spelled_as_github_spells_them() {
        assert_eq!(slug("HTTP/3"), "http3");
        assert_eq!(slug("HTTP/1.1"), "http11");
        assert_eq!(slug("Fortio's query arguments"), "fortios-query-arguments");
        assert_eq!(
            slug("What was verified, and what not"),
            "what-was-verified-and-what-not"
        );
        assert_eq!(slug("`--check`: a start"), "--check-a-start");
        assert_eq!(slug("snake_case and µs"), "snake_case-and-µs");
        assert_eq!(slug("See [Flags](flags.md) too"), "see-flags-too");
        assert_eq!(
            heading_anchors("# A\n## Measured\n```\n# not a heading\n```\n### Measured\n#nope\n"),
            ["a", "measured", "measured-1"]
        );
    }

    #[test]
    fn a_broken_link_or_anchor_is_reported() {
        let dir = std::env::temp_dir().join(format!("statico-doclinks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(
            dir.join("README.md"),
            "# Top\n\
             [good](docs/a.md#http3) [good too](#top) ![img](docs/) [web](https://example.invalid/x)\n\
             [no file](docs/missing.md) [no anchor](docs/a.md#http-3)\n\
             `[in code](nowhere.md)`\n\
             ```\n[in a block](nowhere.md)\n```\n\
             [ref]: docs/gone.md\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("docs/a.md"),
            "# A\n## HTTP/3\n[back](../README.md#top) [self](#a)\n",
        )
        .unwrap();
        let broken = broken_links(&manual_files(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(broken.len(), 3, "{broken:#?}");
        assert!(
            broken[0].contains("README.md:3: docs/missing.md: no such file"),
            "{}",
            broken[0]
        );
        assert!(
            broken[1].contains("README.md:3: docs/a.md#http-3: no heading #http-3"),
            "{}",
            broken[1]
        );
        assert!(
            broken[2].contains("README.md:8: docs/gone.md: no such file"),
            "{}",
            broken[2]
        );
    }
}

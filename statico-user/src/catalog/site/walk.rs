//! The walk of a site's tree: which files a site serves, and what it leaves out and why.
//!
//! The rules (the README's Static sites section states them for users):
//! - **symlinks** are followed wherever they lead (`--symlinks follow`, the default, as nginx's
//!   `disable_symlinks off`, Caddy and Apache do: packaged sites link shared files such as Debian's
//!   `/usr/share/javascript/…`), or only while they stay inside the root (`--symlinks inside`). A
//!   dangling link and a directory inside itself (a loop) are left out either way;
//! - **dot-names** (`.git`, `.env`, `.htpasswd`) are hidden, and so is anything a symlink reaches
//!   through one, except `/.well-known/` at the root (RFC 8615: `security.txt`, ACME challenges, app
//!   links); `--dotfiles serve` serves them all;
//! - **what cannot be read** is left out: the walk runs with the privileges the site is served with
//!   (with `--user`, the catalog runs it as that user), so a root-only file that a link planted in a
//!   tree others can write leads to stays unserved.
//!
//! Every file left out is counted by reason ([`LeftOut`], on the start-up and SIGHUP lines) and
//! listed with `-v`.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

/// `--symlinks`: where a symlink may lead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Symlinks {
    /// Wherever it leads
    #[default]
    Follow,
    /// Only to a file or directory inside the root
    Inside,
}

/// `--dotfiles`: whether names starting with a dot are served (`/.well-known/` always is).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Dotfiles {
    /// Hidden, except /.well-known/
    #[default]
    Hide,
    /// Served like any other name
    Serve,
}

/// The directory every server serves although its name starts with a dot (RFC 8615).
const WELL_KNOWN: &str = ".well-known";

/// A file found by the walk: its URL path (`/a/b.html`) and where it is.
pub(super) struct Found {
    pub url: String,
    pub path: PathBuf,
    pub modified: SystemTime,
    pub size: u64,
}

/// Why a name was left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    DotName,
    Dangling,
    Loop,
    OutOfRoot,
    Unreadable,
}

impl Why {
    /// How `-v` names it.
    pub fn describe(self) -> &'static str {
        match self {
            Why::DotName => "a dot-name (hidden)",
            Why::Dangling => "a dangling symlink",
            Why::Loop => "a symlink loop",
            Why::OutOfRoot => "a symlink out of the root (--symlinks inside)",
            Why::Unreadable => "unreadable",
        }
    }
}

/// What a walk left out, by reason, and the symlinks out of the root it followed.
#[derive(Clone, Debug, Default)]
pub struct LeftOut {
    /// Every path left out, with why (listed with `-v`).
    pub paths: Vec<(PathBuf, Why)>,
    /// Symlinks that lead out of the root and were followed.
    pub followed_out: usize,
    /// The user the walk read as (`--user`), for the message.
    pub reader: Option<String>,
}

impl LeftOut {
    fn count(&self, why: Why) -> usize {
        self.paths.iter().filter(|(_, w)| *w == why).count()
    }
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: usize, one: &str, many: &str| match n {
            1 => format!("1 {one}"),
            n => format!("{n} {many}"),
        };
        let unreadable = match &self.reader {
            Some(user) => format!("unreadable as {user}"),
            None => "unreadable".into(),
        };
        let parts = [
            (
                Why::DotName,
                "dot-name hidden",
                "dot-names hidden".to_string(),
            ),
            (
                Why::Dangling,
                "dangling symlink",
                "dangling symlinks".into(),
            ),
            (Why::Loop, "symlink loop", "symlink loops".into()),
            (
                Why::OutOfRoot,
                "symlink out of the root refused",
                "symlinks out of the root refused".into(),
            ),
            (
                Why::Unreadable,
                &format!("file {unreadable}"),
                format!("files {unreadable}"),
            ),
        ];
        let mut said: Vec<String> = parts
            .iter()
            .filter_map(|(why, one, many)| {
                let n = self.count(*why);
                (n > 0).then(|| plural(n, one, many))
            })
            .collect();
        if said.is_empty() {
            said.push("nothing left out".into());
        }
        let followed = plural(
            self.followed_out,
            "symlink out of the root followed",
            "symlinks out of the root followed",
        );
        write!(f, "{}; {followed}", said.join(", "))
    }
}

/// One walk of a tree (see the module doc).
pub(super) struct Walk<'a> {
    root: &'a Path,
    symlinks: Symlinks,
    dotfiles: Dotfiles,
    pub found: Vec<Found>,
    pub left: LeftOut,
    /// The directories being walked, from the root down (a loop is a directory inside itself).
    ancestors: Vec<PathBuf>,
}

impl<'a> Walk<'a> {
    /// Walks `root` (canonical); an unreadable root is an error, anything below it is counted.
    pub fn run(root: &'a Path, symlinks: Symlinks, dotfiles: Dotfiles) -> Result<Walk<'a>> {
        let mut walk = Walk {
            root,
            symlinks,
            dotfiles,
            found: Vec::new(),
            left: LeftOut::default(),
            ancestors: vec![root.to_path_buf()],
        };
        let entries =
            std::fs::read_dir(root).with_context(|| format!("cannot list {}", root.display()))?;
        walk.entries(entries, "")?;
        Ok(walk)
    }

    fn entries(&mut self, entries: std::fs::ReadDir, url: &str) -> Result<()> {
        let mut entries: Vec<_> = entries.collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue; // not UTF-8: no URL could name it
            };
            if self.hidden(&name, url.is_empty()) {
                self.leave_out(entry.path(), Why::DotName)?;
                continue;
            }
            self.entry(&entry.path(), &format!("{url}/{name}"))?;
        }
        Ok(())
    }

    /// A dot-name that is not served (see [`Dotfiles`]); `/.well-known` at the root is.
    fn hidden(&self, name: &str, at_root: bool) -> bool {
        name.starts_with('.') && self.dotfiles == Dotfiles::Hide && !(at_root && name == WELL_KNOWN)
    }

    /// Counts `path` as left out, and why (a walk goes on after it).
    fn leave_out(&mut self, path: PathBuf, why: Why) -> Result<()> {
        self.left.paths.push((path, why));
        Ok(())
    }

    /// One name of a directory: followed to what it is, then walked or kept.
    fn entry(&mut self, path: &Path, url: &str) -> Result<()> {
        let real = match path.canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return self.leave_out(path.to_path_buf(), Why::Unreadable);
            }
            Err(_) => return self.leave_out(path.to_path_buf(), Why::Dangling),
        };
        if let Some(why) = self.refused_target(&real) {
            return self.leave_out(path.to_path_buf(), why);
        }
        if !real.starts_with(self.root) && path.is_symlink() {
            self.left.followed_out += 1;
        }
        let Ok(meta) = std::fs::metadata(&real) else {
            return self.leave_out(path.to_path_buf(), Why::Unreadable);
        };
        if meta.is_dir() {
            self.directory(path, real, url)
        } else if meta.is_file() {
            self.file(path, real, &meta, url)
        } else {
            Ok(()) // sockets, devices, FIFOs: nothing to serve
        }
    }

    /// Where a name leads, if that is refused: out of the root with `--symlinks inside`, or through a
    /// hidden name (a symlink to `.git/config` is as hidden as the file).
    fn refused_target(&self, real: &Path) -> Option<Why> {
        let inside = real.strip_prefix(self.root).ok();
        if inside.is_none() && self.symlinks == Symlinks::Inside {
            return Some(Why::OutOfRoot);
        }
        let through = inside.unwrap_or(real);
        let mut names = through.components().filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        });
        let first = names.next();
        let hidden_first = first.is_some_and(|n| self.hidden(n, inside.is_some()));
        (hidden_first || names.any(|n| self.hidden(n, false))).then_some(Why::DotName)
    }

    fn directory(&mut self, path: &Path, real: PathBuf, url: &str) -> Result<()> {
        if self.ancestors.contains(&real) {
            return self.leave_out(path.to_path_buf(), Why::Loop);
        }
        let entries = match std::fs::read_dir(&real) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return self.leave_out(path.to_path_buf(), Why::Unreadable);
            }
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", real.display())),
        };
        self.ancestors.push(real);
        let walked = self.entries(entries, url);
        self.ancestors.pop();
        walked
    }

    /// A regular file is kept if it can be opened (with the walk's privileges).
    fn file(
        &mut self,
        path: &Path,
        real: PathBuf,
        meta: &std::fs::Metadata,
        url: &str,
    ) -> Result<()> {
        if std::fs::File::open(&real).is_err() {
            return self.leave_out(path.to_path_buf(), Why::Unreadable);
        }
        // Whole seconds, as `Last-Modified` and `If-Modified-Since` have them.
        let secs = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        self.found.push(Found {
            url: url.to_string(),
            path: real,
            modified: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
            size: meta.len(),
        });
        Ok(())
    }
}

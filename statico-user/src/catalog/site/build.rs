//! Building a [`Site`] from a directory: the walk ([`super::walk`]: what is served and what is left
//! out), each file's variants (precompressed siblings `x.br`/`x.zst`/`x.gz` taken as
//! they are, otherwise compressed here, kept only where smaller), identical bodies stored once, and
//! every header block prepared.
//!
//! Compression levels are chosen for start-up time on a large site (see the README's static-site
//! section for the measured figures): brotli quality 5, zstd level 9, gzip level 6, files compressed
//! in parallel on every CPU.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use super::request::Coding;
use super::store;
use super::walk::{Dotfiles, Found, LeftOut, Symlinks, Walk};
use super::{File, Site, Target, Variant};
use crate::catalog::sink::FileAt;

/// What `--root` and its companion flags ask for.
#[derive(Clone, Debug, Default)]
pub struct SiteOptions {
    pub root: PathBuf,
    /// `--cache-control`: the value of every file's `Cache-Control`.
    pub cache_control: Option<String>,
    /// `--cache-control-for GLOB=VALUE`, in order: the first glob matching a path gives its value.
    pub cache_rules: Vec<(String, String)>,
    /// The user's `-H` fields, on every answer.
    pub headers: Vec<(String, String)>,
    /// `--spa-fallback`: a file (relative to the root) that answers unknown paths with 200.
    pub spa_fallback: Option<String>,
    /// `--max-site-size`: most bytes kept in memory (bodies of every variant, shared ones once).
    pub max_size: u64,
    /// `--symlinks`: where a symlink may lead.
    pub symlinks: Symlinks,
    /// `--dotfiles`: whether dot-names are served.
    pub dotfiles: Dotfiles,
    /// `--user`: the user the site is read as (for the message; the catalog sets the privileges).
    pub reader: Option<String>,
    /// `-v`: list every path the walk left out.
    pub list_left_out: bool,
}

/// What a build did, for the start-up line.
#[derive(Clone, Debug, Default)]
pub struct BuildStats {
    pub files: usize,
    pub identity_bytes: u64,
    pub compressed_bytes: u64,
    /// Bodies that were identical to one already stored.
    pub shared: usize,
    /// The bodies lie in a sealed memfd (sent with `sendfile` where the runtime can).
    pub sealed: bool,
    pub took: Duration,
    /// What the walk left out, and the symlinks out of the root it followed.
    pub left_out: LeftOut,
}

impl std::fmt::Display for BuildStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} files, {} bytes (+ {} compressed), {} identical bodies shared, {}, built in {} ms; {}",
            self.files,
            self.identity_bytes,
            self.compressed_bytes,
            self.shared,
            if self.sealed {
                "stored in a sealed memfd"
            } else {
                "stored on the heap"
            },
            self.took.as_millis(),
            self.left_out
        )
    }
}

/// Files smaller than this are not compressed.
const MIN_COMPRESS: usize = 256;

/// Builds the site under `opts.root`.
pub fn build(opts: &SiteOptions) -> Result<Site> {
    let started = Instant::now();
    let root = opts
        .root
        .canonicalize()
        .with_context(|| format!("--root {}: cannot open it", opts.root.display()))?;
    if !root.is_dir() {
        bail!("--root {}: not a directory", opts.root.display());
    }
    let Walk {
        found, mut left, ..
    } = Walk::run(&root, opts.symlinks, opts.dotfiles)?;
    left.reader = opts.reader.clone();
    if found.is_empty() {
        bail!("--root {}: no file to serve in it", opts.root.display());
    }
    // Before reading anything: the files alone must fit (their variants are checked once made).
    let sizes = found.iter().map(|f| (f.size, f.path.clone())).collect();
    check_size(opts, found.iter().map(|f| f.size).sum(), sizes)?;
    let files = read_and_compress(&found)?;
    let mut site = assemble(opts, found, files)?;
    site.stats.took = started.elapsed();
    site.stats.left_out = left;
    Ok(site)
}

/// A file's bodies: identity and the compressed ones worth keeping, keyed by coding.
type Bodies = Vec<(Coding, Vec<u8>)>;

/// Reads every file and makes its compressed variants, in parallel.
fn read_and_compress(found: &[Found]) -> Result<Vec<Bodies>> {
    let by_path: HashMap<&Path, usize> = found
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.as_path(), i))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = found.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = found
            .chunks(chunk)
            .map(|part| {
                let by_path = &by_path;
                scope.spawn(move || {
                    part.iter()
                        .map(|f| bodies(f, by_path))
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(found.len());
        for w in workers {
            all.extend(
                w.join()
                    .map_err(|_| anyhow::anyhow!("a compression thread panicked"))??,
            );
        }
        Ok(all)
    })
}

/// One file's bodies: a precompressed sibling if the tree has one, else compressed here if the type
/// compresses; each kept only if smaller than identity.
fn bodies(f: &Found, siblings: &HashMap<&Path, usize>) -> Result<Bodies> {
    let identity =
        std::fs::read(&f.path).with_context(|| format!("cannot read {}", f.path.display()))?;
    let mut out = Vec::new();
    let compressible = identity.len() >= MIN_COMPRESS && compresses(&f.url);
    for coding in Coding::COMPRESSED {
        let sibling = PathBuf::from(format!("{}.{}", f.path.display(), coding.suffix()));
        let body = if siblings.contains_key(sibling.as_path()) {
            std::fs::read(&sibling).with_context(|| format!("cannot read {}", sibling.display()))?
        } else if compressible {
            compress(coding, &identity)?
        } else {
            continue;
        };
        if !body.is_empty() && body.len() < identity.len() {
            out.push((coding, body));
        }
    }
    out.insert(0, (Coding::Identity, identity));
    Ok(out)
}

/// Text and the structured formats compress; images, archives and fonts mostly do not.
fn compresses(url: &str) -> bool {
    let mime = mime_guess::from_path(url).first_or_octet_stream();
    let essence = mime.essence_str();
    mime.type_() == mime_guess::mime::TEXT
        || [
            "javascript",
            "json",
            "xml",
            "svg",
            "wasm",
            "x-font-ttf",
            "vnd.ms-fontobject",
        ]
        .iter()
        .any(|k| essence.contains(k))
}

fn compress(coding: Coding, data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    Ok(match coding {
        Coding::Identity => data.to_vec(),
        Coding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(data)?;
            e.finish()?
        }
        Coding::Brotli => {
            let mut out = Vec::new();
            let params = brotli::enc::BrotliEncoderParams {
                quality: 5,
                lgwin: 22,
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &data[..], &mut out, &params)?;
            out
        }
        #[cfg(target_os = "linux")]
        Coding::Zstd => zstd::bulk::compress(data, 9)?,
        #[cfg(not(target_os = "linux"))]
        Coding::Zstd => Vec::new(), // built without zstd: no variant
    })
}

/// Stores the bodies (identical ones once), prepares every header block, and maps URLs to files.
fn assemble(opts: &SiteOptions, found: Vec<Found>, all: Vec<Bodies>) -> Result<Site> {
    let mut stats = BuildStats::default();
    let (stored, store) = store_bodies(&found, all, &mut stats)?;
    let mut paths = HashMap::new();
    let mut files = Vec::with_capacity(found.len());
    let mut sizes = Vec::new();
    for (f, bodies) in found.iter().zip(stored) {
        let has_variants = bodies.len() > 1;
        let mut total = 0;
        let variants = bodies
            .into_iter()
            .map(|(coding, hash, slot)| {
                let body = store.body(slot);
                total += body.0.len() as u64;
                variant(opts, &f.url, coding, hash, body, f.modified, has_variants)
            })
            .collect();
        sizes.push((total, f.path.clone()));
        let index = files.len() as u32;
        files.push(File {
            variants,
            modified: f.modified,
        });
        add_paths(&mut paths, &f.url, index);
    }
    stats.files = files.len();
    stats.sealed = store.is_sealed_file();
    check_size(opts, stats.identity_bytes + stats.compressed_bytes, sizes)?;
    let not_found = not_found_page(&paths, &files);
    let spa = spa_fallback(opts, &paths)?;
    let common = common_fields(opts);
    Ok(Site {
        generation: 0,
        paths,
        files,
        not_found,
        spa,
        common: render(&common),
        common_pairs: pairs(&common),
        stats,
    })
}

/// Each file's bodies as (coding, content hash, slot in the store).
type Stored = Vec<Vec<(Coding, u128, store::Slot)>>;

/// Moves every body into the store, identical ones once (same content hash and length).
fn store_bodies(
    found: &[Found],
    all: Vec<Bodies>,
    stats: &mut BuildStats,
) -> Result<(Stored, store::Store)> {
    let mut writer = store::Writer::new();
    let mut seen: HashMap<u128, (store::Slot, usize)> = HashMap::new();
    let mut stored = Vec::with_capacity(all.len());
    let mut uses = 0;
    for (f, bodies) in found.iter().zip(all) {
        let mut slots = Vec::with_capacity(bodies.len());
        for (coding, body) in bodies {
            let hash = xxhash_rust::xxh3::xxh3_128(&body);
            let len = body.len();
            let slot = match seen.get(&hash) {
                Some(&(_, l)) if l != len => bail!(
                    "{}: two different bodies with one content hash",
                    f.path.display()
                ),
                Some(&(slot, _)) => slot,
                None => {
                    match coding {
                        Coding::Identity => stats.identity_bytes += len as u64,
                        _ => stats.compressed_bytes += len as u64,
                    }
                    let slot = writer.add(body)?;
                    seen.insert(hash, (slot, len));
                    slot
                }
            };
            uses += 1;
            slots.push((coding, hash, slot));
        }
        stored.push(slots);
    }
    stats.shared = uses - seen.len();
    Ok((stored, writer.finish()?))
}

/// `/a/b.html`, and for an `index.html` its directory: `/a/` (and `/a` → 308).
fn add_paths(paths: &mut HashMap<Box<str>, Target>, url: &str, index: u32) {
    paths.insert(url.into(), Target::File(index));
    if let Some(dir) = url.strip_suffix("index.html") {
        paths.insert(dir.into(), Target::File(index));
        if dir.len() > 1 {
            paths
                .entry(dir.trim_end_matches('/').into())
                .or_insert(Target::Directory);
        }
    }
    // Every directory without its slash redirects, even one without an index (then `/dir/` is 404).
    let mut at = url.len();
    while let Some(slash) = url[..at].rfind('/') {
        if slash == 0 {
            break;
        }
        paths
            .entry(url[..slash].into())
            .or_insert(Target::Directory);
        at = slash;
    }
}

fn check_size(opts: &SiteOptions, kept: u64, mut sizes: Vec<(u64, PathBuf)>) -> Result<()> {
    if kept <= opts.max_size {
        return Ok(());
    }
    sizes.sort_by_key(|s| std::cmp::Reverse(s.0));
    let biggest: Vec<String> = sizes
        .iter()
        .take(3)
        .map(|(n, p)| format!("{} ({n} bytes)", p.display()))
        .collect();
    bail!(
        "--root {}: the site takes {kept} bytes in memory, over --max-site-size {}; the biggest files: {}",
        opts.root.display(),
        opts.max_size,
        biggest.join(", ")
    )
}

/// One variant's header blocks.
fn variant(
    opts: &SiteOptions,
    url: &str,
    coding: Coding,
    hash: u128,
    (body, file): (Bytes, Option<FileAt>),
    modified: SystemTime,
    has_variants: bool,
) -> Variant {
    let etag: Box<str> = match coding {
        Coding::Identity => format!("\"{:016x}\"", hash as u64),
        c => format!("\"{:016x}-{}\"", hash as u64, c.suffix()),
    }
    .into();
    let mut caching = vec![("ETag", etag.to_string())];
    caching.push((
        "Last-Modified",
        String::from_utf8_lossy(&crate::catalog::response::http_date(modified)).into_owned(),
    ));
    let rule = opts
        .cache_rules
        .iter()
        .find(|(glob, _)| glob_matches(glob, url));
    if let Some(cc) = rule.map(|(_, v)| v).or(opts.cache_control.as_ref()) {
        caching.push(("Cache-Control", cc.clone()));
    }
    if has_variants {
        caching.push(("Vary", "Accept-Encoding".into()));
    }
    let mut all = vec![("Content-Type", content_type(url))];
    if coding != Coding::Identity {
        all.push(("Content-Encoding", coding.token().into()));
    }
    all.extend(caching.iter().cloned());
    all.push(("Accept-Ranges", "bytes".into()));
    Variant {
        coding,
        body,
        file,
        etag,
        fields: render(&all),
        fields_304: render(&caching),
        pairs: pairs(&all),
        pairs_304: pairs(&caching),
    }
}

/// Header fields as (name, value) pairs, for HTTP/2.
fn pairs(fields: &[(&str, String)]) -> Box<[(Box<str>, Box<str>)]> {
    fields
        .iter()
        .map(|(n, v)| ((*n).into(), v.as_str().into()))
        .collect()
}

fn render(fields: &[(&str, String)]) -> Box<[u8]> {
    fields
        .iter()
        .flat_map(|(n, v)| [n.as_bytes(), b": ", v.as_bytes(), b"\r\n"].concat())
        .collect()
}

/// From the extension; text types are declared UTF-8.
fn content_type(url: &str) -> String {
    let mime = mime_guess::from_path(url).first_or_octet_stream();
    let textual = mime.type_() == mime_guess::mime::TEXT
        || ["javascript", "json", "xml"]
            .iter()
            .any(|k| mime.subtype().as_str().contains(k));
    if textual && mime.get_param("charset").is_none() {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    }
}

/// `-H` fields and `Server`, on every answer.
fn common_fields(opts: &SiteOptions) -> Vec<(&str, String)> {
    let mut fields: Vec<(&str, String)> = opts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    if !opts
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("server"))
    {
        fields.push(("Server", crate::catalog::response::SERVER.into()));
    }
    fields
}

/// Whether `glob` matches the URL path `url`: `*` matches any run of characters, `/` included; a glob
/// without a leading `/` matches at any depth (`*.css` is every CSS file).
pub(super) fn glob_matches(glob: &str, url: &str) -> bool {
    let glob = if glob.starts_with('/') || glob.starts_with('*') {
        glob.to_string()
    } else {
        format!("*/{glob}")
    };
    if !glob.contains('*') {
        return glob == url;
    }
    let parts: Vec<&str> = glob.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !url.starts_with(first) || url.len() < first.len() + last.len() || !url.ends_with(last) {
        return false;
    }
    let mut rest = &url[first.len()..url.len() - last.len()];
    for middle in &parts[1..parts.len().saturating_sub(1)] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// `404.html` from the root if there is one, else a short built-in page.
fn not_found_page(paths: &HashMap<Box<str>, Target>, files: &[File]) -> File {
    if let Some(Target::File(i)) = paths.get("/404.html") {
        return files[*i as usize].clone();
    }
    let body =
        Bytes::from_static(b"<!doctype html><title>404 Not Found</title><h1>404 Not Found</h1>\n");
    let fields = vec![("Content-Type", "text/html; charset=utf-8".to_string())];
    File {
        variants: vec![Variant {
            coding: Coding::Identity,
            body,
            file: None,
            etag: "\"404\"".into(),
            fields: render(&fields),
            fields_304: Box::new([]),
            pairs: pairs(&fields),
            pairs_304: Box::new([]),
        }],
        modified: SystemTime::UNIX_EPOCH,
    }
}

fn spa_fallback(opts: &SiteOptions, paths: &HashMap<Box<str>, Target>) -> Result<Option<u32>> {
    let Some(file) = &opts.spa_fallback else {
        return Ok(None);
    };
    let url = format!("/{}", file.trim_start_matches('/'));
    match paths.get(url.as_str()) {
        Some(Target::File(i)) => Ok(Some(*i)),
        _ => bail!(
            "--spa-fallback {file}: no such file under --root {}",
            opts.root.display()
        ),
    }
}

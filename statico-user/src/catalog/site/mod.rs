//! Static-site mode (`--root DIR`): a directory tree served from responses built at start-up.
//!
//! [`build`] walks the tree once and prepares, for every file, each stored variant (identity, and
//! brotli, zstd, gzip where smaller) with its header block — `Content-Type`, `ETag`, `Last-Modified`,
//! `Cache-Control`, `Vary`, the user's `-H` fields — so answering is a lookup and a few copies:
//! [`Site::choose`] turns a request into a [`SiteChoice`] (a few integers: which file, which variant,
//! which status), [`Site::write`] appends its bytes with the live `Date` and the connection's framing.
//! Identical bodies are stored once, shared by every worker.
//!
//! The choice is made when the request head arrives and written when the request is complete, so a
//! session holds only the `SiteChoice`. The site can be rebuilt (SIGHUP) and swapped while workers run:
//! each `Site` has a generation, a `SiteChoice` names the generation it was made in, and a worker keeps the
//! `Site` it took until its requests are written (see [`SiteHandle`], and the catalog's per-worker
//! copy, [`crate::catalog::Local`]).

mod build;
pub mod request;
mod store;
pub mod walk;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::SystemTime;

pub use build::{build, BuildStats, SiteOptions};
use request::{none_match, not_modified_since, range, Accepted, BadPath, Coding, RangeAsk};

use crate::catalog::request::Request;
use crate::catalog::response::{Framing, DATE_LEN};
use crate::catalog::sink::{FileAt, Sink};

/// One stored representation of a file.
#[derive(Clone, Debug)]
pub struct Variant {
    pub coding: Coding,
    /// Shared by every worker and every file with the same bytes.
    pub body: bytes::Bytes,
    /// Where `body` lies in the site's sealed store file, for `sendfile` (see [`store`]).
    pub file: Option<FileAt>,
    pub etag: Box<str>,
    /// Header fields after the status line, without `Content-Length`, `Date` and `Connection`: for
    /// 200 and 206.
    fields: Box<[u8]>,
    /// The same for 304: validators and caching fields, no `Content-Type`/`Content-Encoding`.
    fields_304: Box<[u8]>,
    /// (name, value) of `fields` and of `fields_304`, for HTTP/2.
    pub pairs: Box<[(Box<str>, Box<str>)]>,
    pub pairs_304: Box<[(Box<str>, Box<str>)]>,
}

/// A file: its variants (identity first) and modification time.
#[derive(Clone, Debug)]
pub struct File {
    pub variants: Vec<Variant>,
    pub modified: SystemTime,
}

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    File(u32),
    /// A directory asked for without its slash: 308 to the path with it.
    Directory,
}

/// A whole site, built once, shared by every worker.
#[derive(Debug)]
pub struct Site {
    generation: u64,
    paths: HashMap<Box<str>, Target>,
    files: Vec<File>,
    /// `404.html` from the root, or a short built-in page (status 404).
    not_found: File,
    /// `--spa-fallback`: unknown paths get this file with 200.
    spa: Option<u32>,
    /// Header fields every answer carries (`-H`, `Server`), rendered, and as pairs for HTTP/2.
    common: Box<[u8]>,
    common_pairs: Box<[(Box<str>, Box<str>)]>,
    pub stats: BuildStats,
}

/// The answer to one request, decided when its head arrived (the head is gone when it is written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteChoice {
    generation: u64,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// 200 (or 404 for the not-found page), a variant of a file.
    Whole {
        file: FileRef,
        variant: u8,
    },
    NotModified {
        file: FileRef,
        variant: u8,
    },
    /// 206: bytes `start..end` of the identity body.
    Part {
        file: FileRef,
        start: u64,
        end: u64,
    },
    /// 416: the range lies past the end of a body of this length.
    Unsatisfiable {
        len: u64,
    },
    /// 308 to this `Location` (the path with a slash, and the query). Boxed: rare.
    AddSlash(Box<str>),
    MethodNotAllowed,
    BadRequest,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileRef {
    File(u32),
    NotFound,
}

/// A short plain-text answer that is no stored file (see [`Site::plain`]).
struct Plain {
    status: u16,
    reason: &'static str,
    body: &'static [u8],
    /// One more header field: `Location`, `Allow`, `Content-Range`.
    extra: Option<(&'static str, String)>,
}

/// Status lines and fixed answers.
const OK: &[u8] = b"HTTP/1.1 200 OK\r\n";
const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\n";
const NOT_MODIFIED: &[u8] = b"HTTP/1.1 304 Not Modified\r\n";
const PARTIAL: &[u8] = b"HTTP/1.1 206 Partial Content\r\n";

impl Site {
    /// The answer to `req` (GET and HEAD; anything else is 405).
    pub fn choose(&self, req: &Request<'_>) -> SiteChoice {
        let kind = if req.method != b"GET" && req.method != b"HEAD" {
            Kind::MethodNotAllowed
        } else {
            self.choose_get(req)
        };
        SiteChoice {
            generation: self.generation,
            kind,
        }
    }

    fn choose_get(&self, req: &Request<'_>) -> Kind {
        let (path, query) = request::split_target(req.target);
        let mut buf = [0u8; request::MAX_PATH];
        let (normal, found) = match request::normalize(path, &mut buf) {
            Ok(n) => {
                let normal = std::str::from_utf8(&buf[..n]).unwrap_or("/");
                (normal, self.paths.get(normal).copied())
            }
            Err(BadPath::Malformed) => return Kind::BadRequest,
            Err(BadPath::NotFound) => ("/", None),
        };
        let file = match (found, self.spa) {
            (Some(Target::File(i)), _) => FileRef::File(i),
            (Some(Target::Directory), _) => return add_slash(normal, query),
            (None, Some(i)) => FileRef::File(i),
            (None, None) => FileRef::NotFound,
        };
        self.choose_variant(file, req)
    }

    /// Which variant, and whether a validator or a range changes the status.
    fn choose_variant(&self, file: FileRef, req: &Request<'_>) -> Kind {
        let f = self.file(file);
        let variant = negotiate(f, req.accept_encoding);
        if file == FileRef::NotFound {
            return Kind::Whole { file, variant };
        }
        let v = &f.variants[usize::from(variant)];
        let fresh = match (req.if_none_match, req.if_modified_since) {
            (Some(tags), _) => none_match(tags, &v.etag),
            (None, Some(date)) => not_modified_since(date, f.modified),
            (None, None) => false,
        };
        if fresh {
            return Kind::NotModified { file, variant };
        }
        let identity = &f.variants[0];
        let ranged = req.range.filter(|_| req.method == b"GET").filter(|_| {
            req.if_range
                .is_none_or(|t| request::if_range_holds(t, &identity.etag, f.modified))
        });
        match ranged.map(|r| range(r, identity.body.len() as u64)) {
            Some(RangeAsk::Part(start, end)) => Kind::Part { file, start, end },
            Some(RangeAsk::Unsatisfiable) => Kind::Unsatisfiable {
                len: identity.body.len() as u64,
            },
            _ => Kind::Whole { file, variant },
        }
    }

    fn file(&self, f: FileRef) -> &File {
        match f {
            FileRef::File(i) => &self.files[i as usize],
            FileRef::NotFound => &self.not_found,
        }
    }

    /// Appends the answer to `choice` to `out` and returns its status: `date` is the worker's live
    /// `Date`, `head_only` for HEAD. A choice made in another generation of the site (a request whose
    /// body spanned a rebuild) is answered 503.
    pub fn write(
        &self,
        choice: SiteChoice,
        framing: Framing,
        date: &[u8; DATE_LEN],
        head_only: bool,
        out: &mut impl Sink,
    ) -> u16 {
        if let Some(plain) = self.plain(&choice) {
            return self.simple(out, plain, (framing, date, head_only));
        }
        let at = (framing, date);
        match choice.kind {
            Kind::Whole { file, variant } => {
                let v = &self.file(file).variants[usize::from(variant)];
                let status = if file == FileRef::NotFound {
                    NOT_FOUND
                } else {
                    OK
                };
                self.head(out, status, &v.fields, Some(v.body.len() as u64), at);
                if !head_only {
                    out.share(&v.body, v.file);
                }
                if file == FileRef::NotFound {
                    404
                } else {
                    200
                }
            }
            Kind::NotModified { file, variant } => {
                let v = &self.file(file).variants[usize::from(variant)];
                self.head(out, NOT_MODIFIED, &v.fields_304, None, at);
                304
            }
            Kind::Part { file, start, end } => {
                let v = &self.file(file).variants[0];
                debug_assert!(start < end && end <= v.body.len() as u64);
                let mut fields = v.fields.to_vec();
                let total = v.body.len();
                fields.extend_from_slice(
                    format!("Content-Range: bytes {start}-{}/{total}\r\n", end - 1).as_bytes(),
                );
                self.head(out, PARTIAL, &fields, Some(end - start), at);
                if !head_only {
                    let file = v.file.map(|at| FileAt {
                        offset: at.offset + start,
                        ..at
                    });
                    out.share(&v.body.slice(start as usize..end as usize), file);
                }
                206
            }
            _ => unreachable!("the answers that are no file were written above"),
        }
    }

    /// The short plain-text answer `choice` names when it names no stored file (400, 405, 416, a
    /// 308 with an empty body, a 503 across a rebuild): one definition for HTTP/1.1 and HTTP/2.
    fn plain(&self, choice: &SiteChoice) -> Option<Plain> {
        let plain = |status, reason, body: &'static [u8], extra| {
            Some(Plain {
                status,
                reason,
                body,
                extra,
            })
        };
        if choice.generation != self.generation {
            let body = b"The site was rebuilt while this request arrived; send it again.\n";
            return plain(503, "Service Unavailable", body, None);
        }
        match &choice.kind {
            Kind::Unsatisfiable { len } => {
                let range = Some(("Content-Range", format!("bytes */{len}")));
                plain(
                    416,
                    "Range Not Satisfiable",
                    b"The range lies outside the file.\n",
                    range,
                )
            }
            Kind::AddSlash(location) => {
                let location = Some(("Location", location.to_string()));
                plain(308, "Permanent Redirect", b"", location)
            }
            Kind::MethodNotAllowed => {
                let allow = Some(("Allow", "GET, HEAD".to_string()));
                plain(
                    405,
                    "Method Not Allowed",
                    b"Only GET and HEAD are served here.\n",
                    allow,
                )
            }
            Kind::BadRequest => {
                let body = b"The path is malformed or leaves the site.\n";
                plain(400, "Bad Request", body, None)
            }
            Kind::Whole { .. } | Kind::NotModified { .. } | Kind::Part { .. } => None,
        }
    }

    /// Status line, fields, `Content-Length`, the common fields, `Date`, the framing, blank line.
    fn head(
        &self,
        out: &mut impl Sink,
        status: &[u8],
        fields: &[u8],
        length: Option<u64>,
        (framing, date): (Framing, &[u8; DATE_LEN]),
    ) {
        out.extend_from_slice(status);
        out.extend_from_slice(fields);
        if let Some(n) = length {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(decimal(n, &mut [0; 20]));
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(&self.common);
        out.extend_from_slice(b"Date: ");
        out.extend_from_slice(date);
        out.extend_from_slice(match framing {
            Framing::KeepAlive => b"\r\n\r\n",
            Framing::KeepAlive10 => b"\r\nConnection: keep-alive\r\n\r\n",
            Framing::Close | Framing::Close10 => b"\r\nConnection: close\r\n\r\n",
        });
    }

    /// A [`Plain`] answer in HTTP/1.1 bytes.
    fn simple(
        &self,
        out: &mut impl Sink,
        plain: Plain,
        (framing, date, head_only): (Framing, &[u8; DATE_LEN], bool),
    ) -> u16 {
        let status = format!("HTTP/1.1 {} {}\r\n", plain.status, plain.reason);
        let mut fields = String::from("Content-Type: text/plain; charset=utf-8\r\n");
        if let Some((name, value)) = &plain.extra {
            fields.push_str(&format!("{name}: {value}\r\n"));
        }
        let length = Some(plain.body.len() as u64);
        self.head(
            out,
            status.as_bytes(),
            fields.as_bytes(),
            length,
            (framing, date),
        );
        if !head_only {
            out.extend_from_slice(plain.body);
        }
        plain.status
    }
}

/// `n` in decimal, written into the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// A 308 to the directory's path with a slash, its query kept. The path is the normalised one,
/// percent-encoded again (never the raw target: `//evil.example/../docs` would make `Location` point
/// at another host).
fn add_slash(normal: &str, query: &[u8]) -> Kind {
    use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
    const PATH: &AsciiSet = &CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'`')
        .add(b'{')
        .add(b'}')
        .add(b'\\')
        .add(b'^')
        .add(b'|');
    let query: String = String::from_utf8_lossy(query)
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let location = format!("{}/{query}", utf8_percent_encode(normal, PATH));
    Kind::AddSlash(location.into())
}

/// An answer in parts, for a protocol that does not take HTTP/1.1 bytes (HTTP/2): the status, the
/// header fields (without `Date` and framing), and the body as a slice of a shared buffer.
#[derive(Debug)]
pub struct Parts<'a> {
    pub status: u16,
    pub fields: Vec<(&'a str, std::borrow::Cow<'a, str>)>,
    pub body: Option<bytes::Bytes>,
}

impl Site {
    /// The answer to `choice` in parts (HTTP/2), the same answer [`Site::write`] renders for HTTP/1.1.
    pub fn parts(&self, choice: SiteChoice) -> Parts<'_> {
        use std::borrow::Cow;
        let variant = |file, i: u8| &self.file(file).variants[usize::from(i)];
        fn of(pairs: &[(Box<str>, Box<str>)]) -> Vec<(&str, std::borrow::Cow<'_, str>)> {
            pairs
                .iter()
                .map(|(n, v)| (&**n, Cow::Borrowed(&**v)))
                .collect()
        }
        let mut parts = if let Some(plain) = self.plain(&choice) {
            let mut fields = vec![("Content-Type", Cow::Borrowed("text/plain; charset=utf-8"))];
            fields.extend(plain.extra.map(|(n, v)| (n, Cow::Owned(v))));
            let body = (!plain.body.is_empty()).then(|| bytes::Bytes::from_static(plain.body));
            Parts {
                status: plain.status,
                fields,
                body,
            }
        } else {
            match choice.kind {
                Kind::Whole { file, variant: i } => {
                    let v = variant(file, i);
                    let status = if file == FileRef::NotFound { 404 } else { 200 };
                    Parts {
                        status,
                        fields: of(&v.pairs),
                        body: Some(v.body.clone()),
                    }
                }
                Kind::NotModified { file, variant: i } => Parts {
                    status: 304,
                    fields: of(&variant(file, i).pairs_304),
                    body: None,
                },
                Kind::Part { file, start, end } => {
                    let v = variant(file, 0);
                    let mut fields = of(&v.pairs);
                    let range = format!("bytes {start}-{}/{}", end - 1, v.body.len());
                    fields.push(("Content-Range", Cow::Owned(range)));
                    Parts {
                        status: 206,
                        fields,
                        body: Some(v.body.slice(start as usize..end as usize)),
                    }
                }
                _ => unreachable!("the answers that are no file were made above"),
            }
        };
        parts.fields.extend(
            self.common_pairs
                .iter()
                .map(|(n, v)| (&**n, Cow::Borrowed(&**v))),
        );
        parts
    }
}

/// The variant to send: the compressed one the client likes best (ties: the smaller), else identity.
/// Identity competes on its q-value only when the client names it (or `*`); otherwise any acceptable
/// coding is preferred to it (`gzip;q=0.5` means "gzip is fine", not "rather uncompressed"). Identity
/// is sent even when refused if nothing else is acceptable (RFC 9110 allows it; a 406 would help no
/// one). No allocation.
fn negotiate(file: &File, accept: Option<&[u8]>) -> u8 {
    if file.variants.len() == 1 {
        return 0;
    }
    let accepted = Accepted::parse(accept);
    let identity_q = if accepted.names_identity() {
        accepted.q(Coding::Identity)
    } else {
        0
    };
    let mut best = (identity_q, usize::MAX, 0u8);
    for (i, v) in file.variants.iter().enumerate().skip(1) {
        let q = accepted.q(v.coding);
        if q > 0 && (q > best.0 || (q == best.0 && v.body.len() < best.1)) {
            best = (q, v.body.len(), i as u8);
        }
    }
    best.2
}

/// The site in force, swapped whole by a rebuild; workers take it through [`SiteHandle::refresh`].
#[derive(Debug)]
pub struct SiteHandle {
    current: arc_swap::ArcSwap<Site>,
    generation: AtomicU64,
}

impl SiteHandle {
    pub fn new(site: Site) -> Self {
        SiteHandle {
            generation: AtomicU64::new(site.generation),
            current: arc_swap::ArcSwap::from_pointee(site),
        }
    }

    /// Puts a rebuilt site in force; new requests see it, requests already chosen finish from theirs.
    pub fn swap(&self, mut site: Site) {
        site.generation = self.generation.load(Relaxed) + 1;
        let generation = site.generation;
        self.current.store(Arc::new(site));
        self.generation.store(generation, Relaxed);
    }

    /// Replaces a worker's copy if a rebuild has happened since it took it (one relaxed load).
    pub fn refresh(&self, mine: &mut Arc<Site>) {
        if mine.generation != self.generation.load(Relaxed) {
            *mine = self.current.load_full();
        }
    }

    pub fn load(&self) -> Arc<Site> {
        self.current.load_full()
    }
}

#[cfg(test)]
mod tests;

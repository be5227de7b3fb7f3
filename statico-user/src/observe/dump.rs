//! `-v` … `-vvvv`: printing requests and responses as they pass, the way Statico does.
//!
//! | level | what is printed |
//! |-------|-----------------|
//! | `-v` | request line and status line |
//! | `-vv` | plus header fields |
//! | `-vvv` | plus bodies, printable bytes as they are and others as hex (reverse video on a terminal) |
//! | `-vvvv` | plus bodies as a hexdump (offset, 16 hex bytes, ASCII) |
//!
//! Dumps go to standard output, one locked write per item so that workers do not interleave within an
//! item. They cost a lot more than serving: use them for debugging, never when measuring.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

/// `-v` for a request on a stream (HTTP/2, HTTP/3): its request line (`-vv`: and its header fields),
/// in one write.
pub fn stream_request<B>(
    head: &http::Request<B>,
    protocol: &str,
    stream: impl std::fmt::Debug,
    verbose: u8,
) {
    let mut s = format!(
        "↩ request ({protocol} stream {stream:?}):\n{} {} {protocol}\n",
        head.method(),
        head.uri()
    );
    if verbose > 1 {
        for (n, v) in head.headers() {
            let _ = writeln!(s, "{n}: {}", String::from_utf8_lossy(v.as_bytes()));
        }
    }
    print!("{s}");
}

/// Prints what passes through one connection at the configured verbosity.
#[derive(Debug)]
pub struct Dumper {
    level: u8,
    color: bool,
    /// Offset of the next request body byte, for hexdump offsets across chunks.
    body_offset: usize,
}

impl Dumper {
    pub fn new(level: u8) -> Self {
        Dumper {
            level,
            color: level > 0 && std::io::stdout().is_terminal(),
            body_offset: 0,
        }
    }

    /// A dumper that prints nothing.
    pub fn off() -> Self {
        Dumper::new(0)
    }

    /// `-v`: what a TLS handshake agreed on (version, cipher suite, ALPN, resumed or not).
    pub fn tls(&self, summary: &str) {
        if self.level > 0 {
            emit(&format!("↔ TLS: {summary}\n"));
        }
    }

    pub fn request_head(&mut self, raw: &[u8]) {
        if self.level == 0 {
            return;
        }
        self.body_offset = 0;
        let mut s = String::from("↩ request:\n");
        self.head(&mut s, raw);
        emit(&s);
    }

    pub fn request_body(&mut self, bytes: &[u8]) {
        if self.level < 3 || bytes.is_empty() {
            return;
        }
        let mut s = String::new();
        if self.body_offset == 0 {
            s.push('\n');
        }
        self.body(&mut s, bytes, self.body_offset);
        self.body_offset += bytes.len();
        emit(&s);
    }

    /// Whether anything is dumped (`-v` and more).
    pub fn on(&self) -> bool {
        self.level > 0
    }

    /// An answer as it was written: its head, and its body from `-vvv`.
    pub fn raw_response(&mut self, bytes: &[u8]) {
        if self.level == 0 {
            return;
        }
        let head_len = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(bytes.len(), |i| i + 4);
        let mut s = String::from("↪ response:\n");
        self.head(&mut s, &bytes[..head_len]);
        if self.level >= 3 && head_len < bytes.len() {
            s.push('\n');
            self.body(&mut s, &bytes[head_len..], 0);
        }
        emit(&s);
    }

    pub fn error(&mut self, code: u16, reason: &str) {
        if self.level > 0 {
            emit(&format!(
                "↪ response:\nHTTP/1.1 {code} {reason} (connection closes)\n"
            ));
        }
    }

    /// The first line at `-v`, every line of the head from `-vv`.
    fn head(&self, s: &mut String, raw: &[u8]) {
        let text = String::from_utf8_lossy(raw);
        let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
        if let Some(first) = lines.next() {
            if self.color {
                let _ = writeln!(s, "\x1b[1m{first}\x1b[0m");
            } else {
                let _ = writeln!(s, "{first}");
            }
        }
        if self.level >= 2 {
            for line in lines {
                let _ = writeln!(s, "{line}");
            }
        }
    }

    fn body(&self, s: &mut String, bytes: &[u8], offset: usize) {
        if self.level == 3 {
            inline(s, bytes, self.color);
        } else {
            hexdump(s, bytes, offset);
        }
    }
}

fn emit(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

/// Printable bytes as they are, others as two hex digits: reverse video on a terminal, `\xNN` elsewhere.
pub fn inline(s: &mut String, bytes: &[u8], color: bool) {
    for &b in bytes {
        if b.is_ascii_graphic() || b.is_ascii_whitespace() {
            s.push(b as char);
        } else if color {
            let _ = write!(s, "\x1b[7m{b:02x}\x1b[0m");
        } else {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    if !s.ends_with('\n') {
        s.push('\n');
    }
}

/// `hexdump -C` style: offset, 16 bytes in two groups of 8, ASCII with `.` for the rest.
pub fn hexdump(s: &mut String, bytes: &[u8], offset: usize) {
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(s, "{:08x}  ", offset + i * 16);
        for j in 0..16 {
            match chunk.get(j) {
                Some(b) => {
                    let _ = write!(s, "{b:02x} ");
                }
                None => s.push_str("   "),
            }
            if j == 7 {
                s.push(' ');
            }
        }
        s.push_str(" |");
        s.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        s.push_str("|\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_marks_non_printable_bytes() {
        let mut s = String::new();
        inline(&mut s, b"Hello\x00World\x01!", false);
        assert_eq!(s, "Hello\\x00World\\x01!\n");
    }

    #[test]
    fn hexdump_matches_hexdump_c() {
        let mut s = String::new();
        hexdump(&mut s, b"Hello\x00World\x01!", 0);
        assert_eq!(
            s,
            "00000000  48 65 6c 6c 6f 00 57 6f  72 6c 64 01 21           |Hello.World.!|\n"
        );
    }
}

//! The `http1` oracle: bytes as an HTTP/1.1 connection reads them, through the request framing
//! parser (`statico::proto::http1::parser`): heads, `Content-Length` and chunked bodies (with
//! extensions and trailers), and the requests pipelined after them. Never a panic; the invariants
//! of `parser::check_invariants` (nothing kept beyond the head limit or a chunk line, heads are
//! what was consumed, bodies as long as they said, errors sticky); and the same events whether the
//! bytes arrive whole, a byte at a time, or in pieces of 2 to 14 bytes, under the default limits
//! and under tiny ones (which reach the 413 and 431 paths).
//!
//! A first byte below 0x80 (which every request starts with) is part of the input, as it always
//! was for this target (it was called `parser`), and picks the piece size. A first byte from 0x80
//! puts a request before the rest, so that the rest is what follows it: a chunked body, the second
//! request of a pipeline, a body after `Expect: 100-continue`, an HTTP/1.0 keep-alive body.
//!
//! Shared by the fuzz target (`fuzz_targets/http1.rs`) and the corpus replay
//! (`tests/fuzz_corpus.rs`), which include this file with `#[path]`.

use statico::proto::http1::parser::{check_invariants, Limits};

/// What a first byte from 0x80 puts before the rest (bits 4 and 5 choose).
const BEFORE: [&[u8]; 4] = [
    b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"PUT /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
    b"POST /k HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
];

pub fn check(data: &[u8]) {
    let Some(&first) = data.first() else {
        return;
    };
    let piece = usize::from(first % 13) + 2;
    let input = match first {
        0x80.. => [BEFORE[usize::from(first >> 4) & 3], &data[1..]].concat(),
        _ => data.to_vec(),
    };
    for limits in [
        Limits::default(),
        Limits {
            max_head: 64,
            max_body: 16,
        },
    ] {
        let whole = check_invariants(&input, input.len(), limits);
        let bytes = check_invariants(&input, 1, limits);
        assert_eq!(whole, bytes, "byte by byte differs");
        let pieces = check_invariants(&input, piece, limits);
        assert_eq!(whole, pieces, "pieces of {piece} differ");
    }
}

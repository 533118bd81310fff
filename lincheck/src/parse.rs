//! JSON-lines reader.

use crate::op::{required_option, Op, OpKind};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use std::path::Path;

const EXPECTED: &str = "expected one JSON object per line like \
{\"client\":3,\"call_ns\":1200,\"return_ns\":5400,\"key\":\"k1\",\"op\":\"write\",\"arg\":7,\"out\":null} \
(return_ns may be null; optional \"unknown\":true and \"log\":N, the op's place in the resource's log)";

/// One input line: an [`Op`] and its optional place in the resource's log.
/// The fields are [`Op`]'s (same rules: `return_ns` required) plus `log`.
#[derive(Deserialize)]
struct Line {
    client: u64,
    call_ns: u64,
    #[serde(deserialize_with = "required_option")]
    return_ns: Option<u64>,
    key: String,
    op: OpKind,
    #[serde(default)]
    arg: Value,
    #[serde(default)]
    out: Value,
    #[serde(default)]
    unknown: bool,
    #[serde(default, deserialize_with = "log_position")]
    log: Option<u64>,
}

/// serde's own message does not name the field.
fn log_position<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "field `log`: expected a non-negative integer or null, got {v}"
            ))
        }),
    }
}

/// A parsed history: the ops, each op's 1-based line, and, when any line
/// has a `log` field, each op's place in the resource's log (for
/// [`crate::CheckOptions::log`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub ops: Vec<Op>,
    pub lines: Vec<u32>,
    pub log: Option<Vec<Option<u64>>>,
}

/// A malformed input line (`line` is 1-based; 0 when the file itself could
/// not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads a JSON-lines history. Blank lines are skipped.
pub fn parse_jsonl(path: &Path) -> Result<Vec<Op>, ParseError> {
    parse_jsonl_with_lines(path).map(|(ops, _)| ops)
}

/// Like [`parse_jsonl`], also returning the 1-based line number of each op.
pub fn parse_jsonl_with_lines(path: &Path) -> Result<(Vec<Op>, Vec<u32>), ParseError> {
    parse_history(path).map(|h| (h.ops, h.lines))
}

/// Parses JSON lines from memory (see [`parse_history_bytes`]).
pub fn parse_jsonl_bytes(data: &[u8]) -> Result<(Vec<Op>, Vec<u32>), ParseError> {
    parse_history_bytes(data).map(|h| (h.ops, h.lines))
}

/// Reads a JSON-lines history with its line numbers and log positions.
pub fn parse_history(path: &Path) -> Result<History, ParseError> {
    let data = std::fs::read(path).map_err(|e| ParseError {
        line: 0,
        message: format!("cannot read {}: {e}", path.display()),
    })?;
    parse_history_bytes(&data)
}

/// Parses JSON lines from memory, splitting the work over the available cores.
pub fn parse_history_bytes(data: &[u8]) -> Result<History, ParseError> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    // Chunks end on a newline so no line is split.
    let mut bounds = vec![0usize];
    for t in 1..threads {
        let mut at = data.len() * t / threads;
        let last = *bounds.last().unwrap_or(&0);
        if at < last {
            at = last;
        }
        while at < data.len() && data[at] != b'\n' {
            at += 1;
        }
        if at < data.len() {
            at += 1;
        }
        bounds.push(at);
    }
    bounds.push(data.len());
    let chunks: Vec<&[u8]> = bounds.windows(2).map(|w| &data[w[0]..w[1]]).collect();
    type ChunkOut = (Parsed, usize);
    let outs: Vec<ChunkOut> = if chunks.len() == 1 {
        chunks.iter().map(|c| parse_chunk(c)).collect()
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = chunks
                .iter()
                .map(|c| s.spawn(move || parse_chunk(c)))
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        (
                            Err(ParseError {
                                line: 0,
                                message: "internal error: parser thread panicked".into(),
                            }),
                            0,
                        )
                    })
                })
                .collect()
        })
    };
    let mut ops: Vec<Op> = Vec::new();
    let mut lines: Vec<u32> = Vec::new();
    let mut log: Option<Vec<Option<u64>>> = None;
    let mut line_base = 0usize;
    for (r, nlines) in outs {
        match r {
            Ok((o, l, g)) => {
                // Positions only once some line has one; the ops before it
                // are not in the log.
                match (&mut log, g) {
                    (Some(all), Some(g)) => all.extend(g),
                    (Some(all), None) => all.resize(ops.len() + o.len(), None),
                    (None, Some(g)) => {
                        let mut all = vec![None; ops.len()];
                        all.extend(g);
                        log = Some(all);
                    }
                    (None, None) => {}
                }
                if ops.is_empty() {
                    // Reuse the first chunk's buffers: moving 100+ MB of ops
                    // is a visible share of the parse time.
                    ops = o;
                    lines = l.into_iter().map(|x| x + line_base as u32).collect();
                } else {
                    ops.extend(o);
                    lines.extend(l.into_iter().map(|x| x + line_base as u32));
                }
            }
            Err(mut e) => {
                if e.line != 0 {
                    e.line += line_base;
                }
                return Err(e);
            }
        }
        line_base += nlines;
    }
    Ok(History { ops, lines, log })
}

/// Returns the ops with chunk-relative line numbers, their log positions
/// (`None` when no line of the chunk has one) and the chunk's line count.
type Parsed = Result<(Vec<Op>, Vec<u32>, Option<Vec<Option<u64>>>), ParseError>;

fn parse_chunk(chunk: &[u8]) -> (Parsed, usize) {
    let mut ops = Vec::with_capacity(chunk.len() / 96 + 1);
    let mut lines = Vec::with_capacity(chunk.len() / 96 + 1);
    let mut log: Option<Vec<Option<u64>>> = None;
    let mut nlines = 0usize;
    if chunk.is_empty() {
        return (Ok((ops, lines, log)), 0);
    }
    for raw in chunk.split(|&b| b == b'\n') {
        nlines += 1;
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        match serde_json::from_slice::<Line>(line) {
            Ok(l) => {
                let op = Op {
                    client: l.client,
                    call_ns: l.call_ns,
                    return_ns: l.return_ns,
                    key: l.key,
                    op: l.op,
                    arg: l.arg,
                    out: l.out,
                    unknown: l.unknown,
                };
                if let Some(r) = op.return_ns {
                    if r < op.call_ns {
                        return (
                            Err(ParseError {
                                line: nlines,
                                message: format!("return_ns {r} is before call_ns {}", op.call_ns),
                            }),
                            nlines,
                        );
                    }
                }
                if l.log.is_some() && log.is_none() {
                    log = Some(vec![None; ops.len()]);
                }
                if let Some(g) = &mut log {
                    g.push(l.log);
                }
                ops.push(op);
                lines.push(nlines as u32);
            }
            Err(e) => {
                let msg = e.to_string();
                // serde_json reports "at line 1 column N" for a one-line input;
                // the column is the useful part.
                let msg = match msg.rfind(" at line ") {
                    Some(k) => msg[..k].to_string(),
                    None => msg,
                };
                return (
                    Err(ParseError {
                        line: nlines,
                        message: format!("{msg} (column {}); {EXPECTED}", e.column()),
                    }),
                    nlines,
                );
            }
        }
    }
    // A trailing newline does not start another line.
    if chunk.last() == Some(&b'\n') {
        nlines -= 1;
    }
    (Ok((ops, lines, log)), nlines)
}

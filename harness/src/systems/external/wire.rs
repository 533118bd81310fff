//! The lines of `docs/client-protocol.md`, version 1: what the worker writes, and
//! every line it reads checked against the rules. A line that breaks one is a
//! [`ClientError`] carrying the line itself (truncated), never a panic.

use serde_json::{json, Map, Value};

use super::ClientError;

/// The protocol version this worker speaks.
pub const VERSION: u64 = 1;

/// How much of an offending line a client error keeps.
pub const LINE_MAX: usize = 200;

/// `line`, cut to [`LINE_MAX`] characters (on a character boundary).
pub fn truncate(line: &str) -> String {
    let line = line.trim_end_matches(['\r', '\n']);
    match line.char_indices().nth(LINE_MAX) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

fn not_protocol(line: &str, why: &str) -> ClientError {
    ClientError {
        message: format!("not a protocol line ({why})"),
        line: Some(truncate(line)),
    }
}

fn object(line: &str) -> Result<Map<String, Value>, ClientError> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(not_protocol(line, "not a JSON object")),
        Err(e) => Err(not_protocol(line, &format!("not JSON: {e}"))),
    }
}

/// The first line: `{"fencecheck_client": 1, "library": "..."}`; returns `library`.
pub fn hello(line: &str) -> Result<String, ClientError> {
    let m = object(line)?;
    let Some(v) = m.get("fencecheck_client") else {
        return Err(not_protocol(
            line,
            "expected the hello, with `fencecheck_client`",
        ));
    };
    match v.as_u64() {
        Some(VERSION) => {}
        Some(n) => {
            return Err(ClientError {
                message: format!("speaks protocol version {n}, this worker speaks {VERSION}"),
                line: Some(truncate(line)),
            })
        }
        None => return Err(not_protocol(line, "`fencecheck_client` is not an integer")),
    }
    Ok(m.get("library")
        .and_then(Value::as_str)
        .unwrap_or("unnamed library")
        .to_string())
}

/// A line from the client after the hello.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Answer(Answer),
    SessionLost {
        session: Option<i64>,
        reason: String,
    },
}

/// An answer: its `id`, and `Ok(fields)` or `Err(error text)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub id: u64,
    pub result: Result<Map<String, Value>, String>,
    /// The line as received (truncated), for errors about its fields.
    pub line: String,
}

pub fn incoming(line: &str) -> Result<Incoming, ClientError> {
    let m = object(line)?;
    if let Some(ev) = m.get("event") {
        return match ev.as_str() {
            Some("session-lost") => Ok(Incoming::SessionLost {
                session: m.get("session").and_then(Value::as_i64),
                reason: m
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("session lost")
                    .to_string(),
            }),
            _ => Err(not_protocol(line, "unknown event")),
        };
    }
    let Some(id) = m.get("id").and_then(Value::as_u64) else {
        return Err(not_protocol(line, "an answer needs an integer `id`"));
    };
    let result = match m.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(m),
        Some(false) => Err(m
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("failed (no error text)")
            .to_string()),
        None => return Err(not_protocol(line, "an answer needs `ok`: true or false")),
    };
    Ok(Incoming::Answer(Answer {
        id,
        result,
        line: truncate(line),
    }))
}

/// A request line (without the trailing newline).
pub fn request(id: u64, op: &str, fields: Value) -> String {
    let mut m = match fields {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    m.insert("id".into(), json!(id));
    m.insert("op".into(), json!(op));
    Value::Object(m).to_string()
}

/// What an `acquire` answer says about the grant.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantAnswer {
    /// The chosen token as the library gave it (`[client] token`).
    pub raw_token: Value,
    /// Every token the answer named: `token` and the `tokens` map.
    pub tokens: Value,
    pub entry: String,
    pub value: Option<String>,
    pub revision: Option<i64>,
}

/// Reads an `acquire` answer's fields; `choose` is `[client] token`.
pub fn grant(
    a: &Answer,
    fields: &Map<String, Value>,
    choose: &str,
) -> Result<GrantAnswer, ClientError> {
    let bad = |why: &str| ClientError {
        message: format!("not a protocol line ({why})"),
        line: Some(a.line.clone()),
    };
    let Some(entry) = fields.get("entry").and_then(Value::as_str) else {
        return Err(bad(
            "a granted `acquire` needs `entry`, the grant's identity in the service",
        ));
    };
    let Some(token) = fields.get("token") else {
        return Err(bad(
            "a granted `acquire` needs `token` (null when the library gives none)",
        ));
    };
    let mut tokens = match fields.get("tokens") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(bad("`tokens` must be an object")),
    };
    tokens.insert("token".into(), token.clone());
    let raw_token = match tokens.get(choose) {
        Some(v) => v.clone(),
        None => {
            return Err(bad(&format!(
                "no token named {choose:?} (client.token) in the answer"
            )))
        }
    };
    if to_storage(&raw_token).is_err() {
        return Err(bad(&format!(
            "token {choose:?} must be an integer, a string or null"
        )));
    }
    let value = match fields.get("value") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    Ok(GrantAnswer {
        raw_token,
        tokens: Value::Object(tokens),
        entry: entry.to_string(),
        value,
        revision: fields.get("revision").and_then(Value::as_i64),
    })
}

/// The token the worker sends to the storage: an integer as it is, a string of
/// decimal digits parsed, any other string hashed (FNV-1a, 63 bits: a number with
/// no order), `null` none. Other JSON types are a protocol error.
pub fn to_storage(token: &Value) -> Result<Option<i64>, NotAToken> {
    match token {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_i64().map(Some).ok_or(NotAToken),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Some(s.parse::<i64>().unwrap_or_else(|_| fnv1a63(s))))
        }
        Value::String(s) => Ok(Some(fnv1a63(s))),
        _ => Err(NotAToken),
    }
}

/// A token that is neither an integer, a string nor null (a float, a list…).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAToken;

/// FNV-1a (64-bit) of `s`, top bit cleared so it reads as a positive i64.
pub fn fnv1a63(s: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & (u64::MAX >> 1)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_checks_the_version() {
        assert_eq!(
            hello(r#"{"fencecheck_client":1,"library":"kazoo"}"#).unwrap(),
            "kazoo"
        );
        let e = hello(r#"{"fencecheck_client":2}"#).unwrap_err();
        assert!(e.message.contains("version 2"), "{e:?}");
        let e = hello("hello there").unwrap_err();
        assert!(e.message.starts_with("not a protocol line"), "{e:?}");
        assert_eq!(e.line.as_deref(), Some("hello there"));
    }

    #[test]
    fn lines_are_answers_events_or_errors() {
        let a = incoming(r#"{"id":3,"ok":false,"error":"boom"}"#).unwrap();
        assert!(
            matches!(a, Incoming::Answer(Answer { id: 3, result: Err(ref e), .. }) if e == "boom")
        );
        let ev = incoming(r#"{"event":"session-lost","session":7,"reason":"x"}"#).unwrap();
        assert_eq!(
            ev,
            Incoming::SessionLost {
                session: Some(7),
                reason: "x".into()
            }
        );
        assert!(incoming(r#"{"id":3}"#).is_err());
        assert!(incoming("[1,2]").is_err());
        let long = "x".repeat(500);
        let e = incoming(&long).unwrap_err();
        assert!(e.line.unwrap().chars().count() <= LINE_MAX + 1);
    }

    #[test]
    fn tokens_become_storage_integers() {
        assert_eq!(to_storage(&json!(812)), Ok(Some(812)));
        assert_eq!(to_storage(&json!("812")), Ok(Some(812)));
        assert_eq!(to_storage(&json!(null)), Ok(None));
        let h = to_storage(&json!("3f2a-uuid")).unwrap().unwrap();
        assert!(h >= 0);
        assert_eq!(to_storage(&json!("3f2a-uuid")), Ok(Some(h)), "stable");
        assert!(to_storage(&json!(1.5)).is_err());
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; top bit cleared.
        assert_eq!(fnv1a63("a"), 0x2f63_dc4c_8601_ec8c);
    }

    #[test]
    fn grant_answers_choose_their_token() {
        let line = r#"{"id":2,"ok":true,"token":"abc","tokens":{"create_revision":9},"entry":"/locks/x","value":"u"}"#;
        let Incoming::Answer(a) = incoming(line).unwrap() else {
            panic!()
        };
        let f = a.result.clone().unwrap();
        let g = grant(&a, &f, "create_revision").unwrap();
        assert_eq!(g.raw_token, json!(9));
        assert_eq!(g.entry, "/locks/x");
        assert_eq!(g.value.as_deref(), Some("u"));
        assert!(grant(&a, &f, "lease").is_err());
        let no_entry = r#"{"id":2,"ok":true,"token":1}"#;
        let Incoming::Answer(a) = incoming(no_entry).unwrap() else {
            panic!()
        };
        let f = a.result.clone().unwrap();
        assert!(grant(&a, &f, "token").is_err());
    }
}

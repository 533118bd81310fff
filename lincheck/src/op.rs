//! The history record: one operation per JSON line, or built in memory.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;

/// The name of an operation. The built-in models understand `read`, `write`
/// and `cas`; anything else is kept as `Other` so a user model can accept it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Read,
    Write,
    Cas,
    Other(String),
}

impl OpKind {
    pub fn as_str(&self) -> &str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Cas => "cas",
            OpKind::Other(s) => s,
        }
    }

    pub fn from_name(s: &str) -> OpKind {
        match s {
            "read" => OpKind::Read,
            "write" => OpKind::Write,
            "cas" => OpKind::Cas,
            other => OpKind::Other(other.to_string()),
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for OpKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OpKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = OpKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an operation name string such as \"read\", \"write\" or \"cas\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<OpKind, E> {
                Ok(OpKind::from_name(v))
            }
        }
        // visit_str (not String) so the common names cost no allocation.
        d.deserialize_str(V)
    }
}

/// One operation of the history, as plain data.
///
/// `return_ns: None` means the client never saw a reply: the operation may
/// have taken effect at any time after `call_ns`, or never. `unknown: true`
/// means `out` is not to be checked (the operation still has its effect if
/// it is linearized).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub client: u64,
    pub call_ns: u64,
    /// Required in JSON (write `null` for no return), so a misspelt field
    /// cannot silently turn every op into a pending one.
    #[serde(deserialize_with = "required_option")]
    pub return_ns: Option<u64>,
    pub key: String,
    pub op: OpKind,
    #[serde(default)]
    pub arg: Value,
    #[serde(default)]
    pub out: Value,
    #[serde(default, skip_serializing_if = "is_false")]
    pub unknown: bool,
}

pub(crate) fn required_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<u64>::deserialize(d)
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Op {
    /// Convenience constructor for in-memory histories.
    pub fn new(
        client: u64,
        call_ns: u64,
        return_ns: Option<u64>,
        key: impl Into<String>,
        op: OpKind,
        arg: Value,
        out: Value,
    ) -> Op {
        Op {
            client,
            call_ns,
            return_ns,
            key: key.into(),
            op,
            arg,
            out,
            unknown: false,
        }
    }

    /// True when the operation's output is to be compared with the model.
    pub fn is_checked(&self) -> bool {
        self.return_ns.is_some() && !self.unknown
    }
}

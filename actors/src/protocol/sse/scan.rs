//! Typed scans of a chat chunk's JSON: only the members the gateway decides on are read, without
//! building a `serde_json::Value` tree (every other member, e.g. the logprobs forced upstream on
//! every content chunk, is skipped without an allocation). A scan that meets an unusual shape
//! (a member of another type, a duplicate key, not an object) gives `None`, and the caller falls
//! back to reading the `Value`, so both readings always agree.

use std::borrow::Cow;

use serde::{
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
    Deserialize, Deserializer,
};

fn is_object(json: &[u8]) -> bool {
    json.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

/// The envelope members that make an event a receipt, a meta event or an error.
#[derive(Deserialize)]
pub(super) struct Envelope<'a> {
    #[serde(default, deserialize_with = "present")]
    pub devshard_receipt: bool,
    #[serde(default, deserialize_with = "present")]
    pub devshard_meta: bool,
    error: Option<IgnoredAny>,
    #[serde(borrow)]
    object: Option<Cow<'a, str>>,
}

impl Envelope<'_> {
    /// An OpenAI-style error object (see `content::is_error_object`).
    pub fn is_error(&self) -> bool {
        self.error.is_some() || self.object.as_deref() == Some("error")
    }
}

/// The envelope members of `json`, if it scans.
pub(super) fn envelope(json: &[u8]) -> Option<Envelope<'_>> {
    is_object(json)
        .then(|| serde_json::from_slice(json).ok())
        .flatten()
}

/// A non-empty string or array (anything else is empty).
struct Filled(bool);

impl<'de> Deserialize<'de> for Filled {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Filled, D::Error> {
        d.deserialize_any(FilledVisitor)
    }
}

struct FilledVisitor;

impl<'de> Visitor<'de> for FilledVisitor {
    type Value = Filled;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, s: &str) -> Result<Filled, E> {
        Ok(Filled(!s.is_empty()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Filled, A::Error> {
        let mut filled = false;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            filled = true;
        }
        Ok(Filled(filled))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Filled, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Filled(false))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Filled, E> {
        Ok(Filled(false))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Filled, E> {
        Ok(Filled(false))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Filled, E> {
        Ok(Filled(false))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Filled, E> {
        Ok(Filled(false))
    }
    fn visit_unit<E>(self) -> Result<Filled, E> {
        Ok(Filled(false))
    }
}

#[derive(Deserialize)]
struct Part {
    content: Option<Filled>,
    reasoning: Option<Filled>,
    reasoning_content: Option<Filled>,
    tool_calls: Option<Filled>,
}

impl Part {
    fn has_content(&self) -> bool {
        [
            &self.content,
            &self.reasoning,
            &self.reasoning_content,
            &self.tool_calls,
        ]
        .iter()
        .any(|f| f.as_ref().is_some_and(|f| f.0))
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    delta: Option<Part>,
    message: Option<Part>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Usage {
    completion_tokens: Option<f64>,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    choices: Option<Vec<Choice<'a>>>,
    usage: Option<Usage>,
}

/// Whether the chunk has content (the rule of `content::chunk_has_content`), if it scans.
pub(super) fn has_content(json: &[u8]) -> Option<bool> {
    if !is_object(json) {
        return None;
    }
    let chunk: Chunk<'_> = serde_json::from_slice(json).ok()?;
    let Some(choices) = chunk.choices else {
        return Some(false);
    };
    let completion_tokens = chunk.usage.and_then(|u| u.completion_tokens).unwrap_or(0.0);
    Some(choices.iter().any(|c| {
        let part = |p: &Option<Part>| p.as_ref().is_some_and(Part::has_content);
        let stopped = c.finish_reason.as_deref() == Some("stop");
        part(&c.delta) || part(&c.message) || (stopped && completion_tokens > 0.0)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_chunk_with_logprobs_scans() {
        let j = br#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,
            "delta":{"content":"hi"},"logprobs":{"content":[{"token":"hi","logprob":-0.1,
            "bytes":[104,105],"top_logprobs":[{"token":"a","logprob":-2.0,"bytes":[97]}]}]},
            "token_ids":[5]}]}"#;
        assert_eq!(has_content(j), Some(true));
        let e = envelope(j).unwrap();
        assert!(!e.devshard_receipt && !e.devshard_meta && !e.is_error());
    }

    #[test]
    fn unusual_shapes_do_not_scan() {
        for j in [
            r#"{"choices":{"delta":{}}}"#,
            r#"{"choices":[1]}"#,
            r#"{"usage":{"completion_tokens":"3"},"choices":[]}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"[1,2]"#,
            "not json",
        ] {
            assert_eq!(has_content(j.as_bytes()), None, "{j}");
        }
        assert!(envelope(br#"{"object":3}"#).is_none());
        assert!(envelope(br#"{"error":1,"error":2}"#).is_none());
    }

    #[test]
    fn the_envelope_members_are_seen_even_when_null() {
        let e = envelope(br#"{"devshard_receipt":null}"#).unwrap();
        assert!(e.devshard_receipt);
        let e = envelope(br#"{"devshard_meta":{"x":1}}"#).unwrap();
        assert!(e.devshard_meta);
        assert!(envelope(br#"{"error":{"message":"boom"}}"#)
            .unwrap()
            .is_error());
        assert!(envelope(br#"{"object":"error"}"#).unwrap().is_error());
        assert!(!envelope(br#"{"error":null}"#).unwrap().is_error());
    }
}

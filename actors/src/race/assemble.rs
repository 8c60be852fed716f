//! Builds the non-streaming `chat.completion` body from what the host sent: either one complete
//! `chat.completion` object (the normal non-stream answer) or a sequence of
//! `chat.completion.chunk`s (a host that streamed anyway), whose deltas are concatenated.

use bytes::Bytes;
use serde_json::{json, Map, Value};

/// Collects the winner's data payloads.
#[derive(Debug, Default)]
pub struct Assembler {
    whole: Option<Bytes>,
    id: Option<Value>,
    model: Option<Value>,
    created: Option<Value>,
    role: Option<String>,
    content: String,
    reasoning: String,
    tool_calls: Vec<Value>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
}

impl Assembler {
    /// One `data:` payload.
    pub fn push(&mut self, json: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(json) else {
            return;
        };
        if v.get("object").and_then(Value::as_str) == Some("chat.completion") {
            self.whole = Some(Bytes::copy_from_slice(json));
            return;
        }
        self.id = self.id.take().or_else(|| v.get("id").cloned());
        self.model = self.model.take().or_else(|| v.get("model").cloned());
        self.created = self.created.take().or_else(|| v.get("created").cloned());
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            if let Some(r) = delta.get("role").and_then(Value::as_str) {
                self.role = Some(r.to_string());
            }
            if let Some(c) = delta.get("content").and_then(Value::as_str) {
                self.content.push_str(c);
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(r) = delta.get(key).and_then(Value::as_str) {
                    self.reasoning.push_str(r);
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                self.tool_calls.extend(calls.iter().cloned());
            }
        }
        if let Some(f) = choice.get("finish_reason").filter(|f| !f.is_null()) {
            self.finish_reason = Some(f.clone());
        }
    }

    /// The `chat.completion` body.
    pub fn finish(self) -> Bytes {
        if let Some(whole) = self.whole {
            return whole;
        }
        let mut message = Map::new();
        message.insert(
            "role".into(),
            json!(self.role.unwrap_or_else(|| "assistant".into())),
        );
        message.insert("content".into(), json!(self.content));
        if !self.reasoning.is_empty() {
            message.insert("reasoning_content".into(), json!(self.reasoning));
        }
        if !self.tool_calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(self.tool_calls));
        }
        let body = json!({
            "id": self.id.unwrap_or(json!("chatcmpl-gateway")),
            "object": "chat.completion",
            "created": self.created.unwrap_or(json!(0)),
            "model": self.model.unwrap_or(json!("")),
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason.unwrap_or(json!("stop"))}],
            "usage": self.usage.unwrap_or(Value::Null),
        });
        Bytes::from(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_concatenated() {
        let mut a = Assembler::default();
        a.push(br#"{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
        a.push(br#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"he"}}]}"#);
        a.push(br#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":"stop"}],"usage":{"completion_tokens":2}}"#);
        let v: Value = serde_json::from_slice(&a.finish()).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "hello");
        assert_eq!(v["usage"]["completion_tokens"], 2);
        assert_eq!(v["object"], "chat.completion");
    }

    #[test]
    fn a_whole_completion_passes_through() {
        let mut a = Assembler::default();
        let body = br#"{"id":"y","object":"chat.completion","choices":[]}"#;
        a.push(body);
        assert_eq!(&a.finish()[..], &body[..]);
    }
}

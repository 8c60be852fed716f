//! What a forwarded chunk means for the race: does it carry content (docs/protocol.md §6.3 point 4)
//! and is it an OpenAI-style error event.

use serde_json::{Map, Value};

/// True when the chunk makes its attempt a race winner: any choice with a non-empty
/// `content`, `reasoning` or `reasoning_content`, or a non-empty `tool_calls`, in `delta` or
/// `message`; or a choice with `finish_reason == "stop"` while `usage.completion_tokens > 0`.
///
/// "Non-empty" means a non-empty string or a non-empty array (multi-part content). Anything that
/// is not a JSON object with a `choices` array has no content.
pub fn chunk_has_content(json: &[u8]) -> bool {
    if let Some(scanned) = super::scan::has_content(json) {
        return scanned;
    }
    match serde_json::from_slice::<Value>(json) {
        Ok(Value::Object(map)) => object_has_content(&map),
        _ => false,
    }
}

/// True for an OpenAI-style error event: a JSON object with a non-null `error` member, or with
/// `"object": "error"`.
pub fn is_error_event(json: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(json) {
        Ok(Value::Object(map)) => is_error_object(&map),
        _ => false,
    }
}

pub(super) fn is_error_object(map: &Map<String, Value>) -> bool {
    map.get("error").is_some_and(|e| !e.is_null())
        || map.get("object").and_then(Value::as_str) == Some("error")
}

fn object_has_content(map: &Map<String, Value>) -> bool {
    let Some(choices) = map.get("choices").and_then(Value::as_array) else {
        return false;
    };
    let completion_tokens = map
        .get("usage")
        .and_then(|u| u.get("completion_tokens"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    choices.iter().any(|choice| {
        let part_has_content = |key: &str| {
            choice.get(key).and_then(Value::as_object).is_some_and(|m| {
                ["content", "reasoning", "reasoning_content", "tool_calls"]
                    .iter()
                    .any(|k| m.get(*k).is_some_and(non_empty))
            })
        };
        let stopped = choice.get("finish_reason").and_then(Value::as_str) == Some("stop");
        part_has_content("delta")
            || part_has_content("message")
            || (stopped && completion_tokens > 0.0)
    })
}

fn non_empty(v: &Value) -> bool {
    match v {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_rules() {
        let yes = [
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            r#"{"choices":[{"message":{"content":"full"}}]}"#,
            r#"{"choices":[{"message":{"tool_calls":[{"id":"x"}]}}]}"#,
            r#"{"choices":[{"message":{"reasoning_content":"r"}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"a"}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"completion_tokens":3}}"#,
            r#"{"choices":[{"delta":{"role":"assistant"}},{"delta":{"content":"x"}}]}"#,
        ];
        let no = [
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":null}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"completion_tokens":0}}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"completion_tokens":9}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":9}}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"[1,2]"#,
            "not json",
        ];
        for j in yes {
            assert!(chunk_has_content(j.as_bytes()), "{j}");
        }
        for j in no {
            assert!(!chunk_has_content(j.as_bytes()), "{j}");
        }
        // The typed scan, where it applies, agrees with the `Value` reading.
        for j in yes.iter().chain(no.iter()) {
            let by_value = match serde_json::from_slice::<Value>(j.as_bytes()) {
                Ok(Value::Object(map)) => object_has_content(&map),
                _ => false,
            };
            let scanned = super::super::scan::has_content(j.as_bytes());
            assert!(scanned.is_none_or(|s| s == by_value), "{j}");
        }
    }

    #[test]
    fn error_event_rules() {
        assert!(is_error_event(
            br#"{"error":{"message":"boom","code":500}}"#
        ));
        assert!(is_error_event(br#"{"error":"flat"}"#));
        assert!(is_error_event(
            br#"{"object":"error","message":"bad","code":400}"#
        ));
        assert!(!is_error_event(br#"{"error":null,"choices":[]}"#));
        assert!(!is_error_event(br#"{"object":"chat.completion.chunk"}"#));
        assert!(!is_error_event(b"[DONE]"));
    }
}

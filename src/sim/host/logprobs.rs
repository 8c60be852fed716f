//! Logprobs and token ids in the simulated hosts' answers, as vLLM's OpenAI server emits them
//! when a request asks: `logprobs: true` (with `top_logprobs: k`) puts
//! `choices[0].logprobs.content = [{token, logprob, bytes, top_logprobs[k]}]` on every content
//! chunk (all tokens on a whole answer); `return_token_ids: true` puts `choices[0].token_ids` on
//! every content chunk (all ids on a whole answer) and `prompt_token_ids` on the first chunk /
//! the whole answer. Values are deterministic: derived from the token's hash.

use serde_json::{json, Value};

use devshard_actors::protocol::crypto::sha256;

/// Largest `top_logprobs` honoured (OpenAI's bound).
const MAX_TOP: u64 = 20;

/// What a request asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// `Some(k)`: logprobs with `k` alternatives.
    pub top: Option<u64>,
    pub token_ids: bool,
}

impl Asked {
    /// Read leniently from the request body.
    pub(crate) fn parse(body: &[u8]) -> Asked {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return Asked::default();
        };
        let on = |k: &str| v.get(k).and_then(Value::as_bool) == Some(true);
        let top = v
            .get("top_logprobs")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_TOP);
        Asked {
            top: on("logprobs").then_some(top),
            token_ids: on("return_token_ids"),
        }
    }
}

/// The deterministic id of a token.
pub(crate) fn token_id(token: &str) -> u64 {
    let h = sha256(token.as_bytes());
    u64::from(u16::from_be_bytes([h[0], h[1]]))
}

fn logprob_entry(token: &str, top: u64) -> Value {
    let h = sha256(token.as_bytes());
    let lp = -f64::from(h[2]) / 64.0;
    let alternatives: Vec<Value> = (0..top)
        .map(|i| {
            let alt = format!("{token}#{i}");
            json!({"token": alt, "logprob": lp - 1.0 - i as f64, "bytes": alt.as_bytes()})
        })
        .collect();
    json!({"token": token, "logprob": lp, "bytes": token.as_bytes(), "top_logprobs": alternatives})
}

/// Adds what was asked to `choice` (a chunk's or the answer's first choice) for `tokens`.
pub(crate) fn decorate_choice(choice: &mut Value, tokens: &[&str], asked: Asked) {
    if let Some(top) = asked.top {
        let content: Vec<Value> = tokens.iter().map(|t| logprob_entry(t, top)).collect();
        choice["logprobs"] = json!({ "content": content });
    }
    if asked.token_ids {
        let ids: Vec<u64> = tokens.iter().map(|t| token_id(t)).collect();
        choice["token_ids"] = json!(ids);
    }
}

/// Adds `prompt_token_ids` (one per 4 prompt bytes, as `usage.prompt_tokens` counts them).
pub(crate) fn decorate_prompt(event: &mut Value, prompt_tokens: u64, asked: Asked) {
    if asked.token_ids {
        let ids: Vec<u64> = (0..prompt_tokens).map(|i| i % 50_000).collect();
        event["prompt_token_ids"] = json!(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_is_read_leniently() {
        let a = Asked::parse(br#"{"logprobs":true,"top_logprobs":5,"return_token_ids":true}"#);
        assert_eq!(
            a,
            Asked {
                top: Some(5),
                token_ids: true
            }
        );
        assert_eq!(Asked::parse(b"nope"), Asked::default());
        let mut choice = json!({"index": 0, "logprobs": null});
        decorate_choice(&mut choice, &["hi"], a);
        assert_eq!(
            choice["logprobs"]["content"][0]["top_logprobs"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        assert_eq!(choice["token_ids"][0], token_id("hi"));
    }
}

//! The fake model: deterministic chat completions derived from the prompt bytes.
//!
//! Token `i` of the answer is a word picked by `sha256(prompt ‖ i as u32 big-endian)`, so the
//! same prompt always yields the same text on every host. The answer has
//! `min(max_tokens, output_tokens)` tokens (one per content chunk); `usage.prompt_tokens` is
//! `ceil(input_length / 4)`. Streams follow vLLM's OpenAI server: a role chunk, content chunks,
//! a final chunk with `finish_reason` and `usage`, then `[DONE]`.

use serde_json::{json, Value};

use devshard_actors::protocol::crypto::sha256;

use super::host::logprobs::{self, Asked};

const WORDS: [&str; 48] = [
    "the",
    "network",
    "host",
    "escrow",
    "nonce",
    "diff",
    "state",
    "root",
    "signs",
    "every",
    "receipt",
    "gateway",
    "streams",
    "tokens",
    "quickly",
    "while",
    "validators",
    "agree",
    "on",
    "a",
    "single",
    "sequence",
    "of",
    "signed",
    "steps",
    "and",
    "each",
    "inference",
    "finishes",
    "with",
    "proof",
    "that",
    "work",
    "was",
    "done",
    "honestly",
    "under",
    "load",
    "across",
    "many",
    "machines",
    "in",
    "distant",
    "places",
    "so",
    "users",
    "see",
    "answers",
];

/// What the generator needs from an OpenAI request body (lenient: bad JSON gives defaults).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PromptInfo {
    pub stream: bool,
    pub max_tokens: Option<u64>,
    pub model: Option<String>,
}

impl PromptInfo {
    pub(crate) fn parse(body: &[u8]) -> PromptInfo {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return PromptInfo::default();
        };
        PromptInfo {
            stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
            max_tokens: v
                .get("max_tokens")
                .or_else(|| v.get("max_completion_tokens"))
                .and_then(Value::as_u64),
            model: v.get("model").and_then(Value::as_str).map(str::to_owned),
        }
    }
}

/// One generated answer.
#[derive(Clone, Debug)]
pub(crate) struct Generation {
    id: String,
    created: i64,
    model: String,
    tokens: Vec<String>,
    finish_reason: &'static str,
    prompt_tokens: u64,
    /// Logprobs / token ids the prompt asked for.
    asked: Asked,
}

impl Generation {
    /// The answer to `prompt` with at most `max_tokens` (and at most `cap`) tokens.
    pub(crate) fn new(prompt: &[u8], model: &str, max_tokens: u64, cap: u32, created: i64) -> Self {
        let n = max_tokens.min(u64::from(cap));
        let tokens = (0..n)
            .map(|i| {
                let mut seed = prompt.to_vec();
                seed.extend_from_slice(&(i as u32).to_be_bytes());
                let h = sha256(&seed);
                let word = WORDS[usize::from(u16::from_be_bytes([h[0], h[1]])) % WORDS.len()];
                if i == 0 {
                    word.to_owned()
                } else {
                    format!(" {word}")
                }
            })
            .collect();
        let digest = sha256(prompt);
        Generation {
            id: format!("chatcmpl-{}", hex::encode(&digest[..12])),
            created,
            model: model.to_owned(),
            tokens,
            finish_reason: if max_tokens < u64::from(cap) {
                "length"
            } else {
                "stop"
            },
            prompt_tokens: (prompt.len() as u64).div_ceil(4),
            asked: Asked::parse(prompt),
        }
    }

    /// Drops every content token (the `empty_stream` fault).
    pub(crate) fn emptied(mut self) -> Self {
        self.tokens.clear();
        self
    }

    pub(crate) fn token_count(&self) -> usize {
        self.tokens.len()
    }

    pub(crate) fn usage(&self) -> Value {
        let completion = self.tokens.len() as u64;
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    pub(crate) fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
    }

    /// The first chunk: `delta.role` only.
    pub(crate) fn role_chunk(&self) -> String {
        let mut v = self.chunk(json!({"role": "assistant", "content": ""}), None);
        logprobs::decorate_prompt(&mut v, self.prompt_tokens, self.asked);
        v.to_string()
    }

    /// Content chunk `i` (one token).
    pub(crate) fn content_chunk(&self, i: usize) -> String {
        let token = self.tokens.get(i).map(String::as_str).unwrap_or_default();
        let mut v = self.chunk(json!({"content": token}), None);
        logprobs::decorate_choice(&mut v["choices"][0], &[token], self.asked);
        v.to_string()
    }

    /// The last chunk: `finish_reason` and `usage`.
    pub(crate) fn finish_chunk(&self) -> String {
        let mut v = self.chunk(json!({}), Some(self.finish_reason));
        v["usage"] = self.usage();
        v.to_string()
    }

    /// The whole answer as one `chat.completion` object (non-streaming prompts).
    pub(crate) fn completion(&self) -> String {
        let mut v = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": self.tokens.concat()},
                "logprobs": null,
                "finish_reason": self.finish_reason,
            }],
            "usage": self.usage(),
        });
        let tokens: Vec<&str> = self.tokens.iter().map(String::as_str).collect();
        logprobs::decorate_choice(&mut v["choices"][0], &tokens, self.asked);
        logprobs::decorate_prompt(&mut v, self.prompt_tokens, self.asked);
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_capped() {
        let a = Generation::new(b"{\"x\":1}", "m", 5, 16, 1);
        let b = Generation::new(b"{\"x\":1}", "m", 5, 16, 1);
        assert_eq!(a.completion(), b.completion());
        assert_eq!(a.token_count(), 5);
        assert!(a.finish_chunk().contains("\"length\""));
        let c = Generation::new(b"{\"x\":2}", "m", 100, 16, 1);
        assert_eq!(c.token_count(), 16);
        assert!(c.finish_chunk().contains("\"stop\""));
        assert_eq!(c.usage()["prompt_tokens"], 2);
    }

    #[test]
    fn prompt_info_is_lenient() {
        let p = PromptInfo::parse(br#"{"stream":true,"max_completion_tokens":7,"model":"m"}"#);
        assert!(p.stream);
        assert_eq!(p.max_tokens, Some(7));
        assert_eq!(PromptInfo::parse(b"nope"), PromptInfo::default());
    }
}

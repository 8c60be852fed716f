//! The request filter pipeline of `POST /v1/chat/completions` (the Go gateway's
//! `request_filters*.go`), as a pure function over the body:
//!
//! 1. `extra_body` (an object) is flattened into the top level; a top-level key wins.
//! 2. Keys the network does not take but clients commonly send are dropped silently
//!    ([`DROPPED`]: `service_tier`, `store`, `provider`, …).
//! 3. Every other key must be an accepted one ([`rule_of`]) and within its bounds
//!    (`n` ≤ 5, `temperature` ≤ 2, penalties in [−2, 2], `stop` ≤ 16 × 256, `user` ≤ 512, …);
//!    `stream_options` keeps only `include_usage`. `null` is accepted for every optional key.
//! 4. Unknown keys are rejected with one 400 that lists them (`param` = the first).
//!
//! `messages`, `model`, `stream` and the token limits have their own checks
//! ([`super::messages`], [`super::normalize`]); here they are only known keys.

use serde_json::{Map, Value};

use super::error::ApiError;

/// Flattened into the top level.
pub const EXTRA_BODY: &str = "extra_body";
/// Dropped without an error.
pub const DROPPED: &[&str] = &[
    "service_tier",
    "store",
    "provider",
    "plugins",
    "prompt_cache_key",
    "cache_key",
    "extra_headers",
    "thinking_config",
    "think",
];
/// Key prefixes passed through untouched (`reasoning_effort`, `thinking`, …).
const PASS_PREFIXES: &[&str] = &["reasoning", "thinking"];
/// Most stop sequences, and the longest one.
const MAX_STOPS: usize = 16;
const MAX_STOP_CHARS: usize = 256;
/// Longest `user` / `safety_identifier`.
const MAX_USER_CHARS: usize = 512;

/// How a key's value is checked.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Checked elsewhere (messages, model, stream, token limits).
    Elsewhere,
    /// Passed through untouched (tools, response_format, …).
    Any,
    Bool,
    Int {
        min: i64,
        max: i64,
    },
    Num {
        min: f64,
        max: f64,
    },
    Str {
        max_chars: usize,
    },
    Object,
    Stop,
    StreamOptions,
    IntArray,
    StrArray,
    LogitBias,
    ToolChoice,
}

/// The rule of an accepted key, `None` for an unknown one.
fn rule_of(key: &str) -> Option<Rule> {
    let rule = match key {
        "messages" | "model" | "stream" | "max_tokens" | "max_completion_tokens" => Rule::Elsewhere,
        "n" => Rule::Int { min: 1, max: 5 },
        "seed" => Rule::Int {
            min: i64::MIN,
            max: i64::MAX,
        },
        "temperature" => Rule::Num { min: 0.0, max: 2.0 },
        "top_p" | "min_p" => Rule::Num { min: 0.0, max: 1.0 },
        "top_k" => Rule::Int {
            min: -1,
            max: i64::MAX,
        },
        "frequency_penalty" | "presence_penalty" => Rule::Num {
            min: -2.0,
            max: 2.0,
        },
        "repetition_penalty" => Rule::Num {
            min: f64::MIN_POSITIVE,
            max: 2.0,
        },
        "min_tokens" | "prompt_logprobs" => Rule::Int {
            min: 0,
            max: i64::MAX,
        },
        "top_logprobs" => Rule::Int { min: 0, max: 20 },
        "logprobs"
        | "return_token_ids"
        | "skip_special_tokens"
        | "detokenize"
        | "parallel_tool_calls" => Rule::Bool,
        "user" | "safety_identifier" => Rule::Str {
            max_chars: MAX_USER_CHARS,
        },
        "metadata" | "response_format" | "structured_outputs" | "chat_template_kwargs" => {
            Rule::Object
        }
        "stop" => Rule::Stop,
        "stop_token_ids" => Rule::IntArray,
        "bad_words" => Rule::StrArray,
        "logit_bias" => Rule::LogitBias,
        "tool_choice" => Rule::ToolChoice,
        "stream_options" => Rule::StreamOptions,
        "tools" => Rule::Any,
        k if PASS_PREFIXES.iter().any(|p| k.starts_with(p)) => Rule::Any,
        _ => return None,
    };
    Some(rule)
}

fn bad(param: &str, message: String) -> ApiError {
    ApiError::InvalidParam {
        message,
        param: param.to_string(),
        code: "invalid_value",
    }
}

/// Checks one accepted value (may rewrite it: `stream_options`).
fn check(key: &str, rule: Rule, value: &mut Value) -> Result<(), ApiError> {
    if value.is_null() {
        return Ok(());
    }
    match rule {
        Rule::Elsewhere | Rule::Any => Ok(()),
        Rule::Bool if value.is_boolean() => Ok(()),
        Rule::Bool => Err(bad(key, format!("`{key}` must be a boolean"))),
        Rule::Int { min, max } => match value.as_i64() {
            Some(n) if (min..=max).contains(&n) => Ok(()),
            _ if min == i64::MIN => Err(bad(key, format!("`{key}` must be an integer"))),
            _ if max == i64::MAX => Err(bad(key, format!("`{key}` must be an integer ≥ {min}"))),
            _ => Err(bad(
                key,
                format!("`{key}` must be an integer from {min} to {max}"),
            )),
        },
        Rule::Num { min, max } => match value.as_f64() {
            Some(x) if x >= min && x <= max => Ok(()),
            _ if min > 0.0 => Err(bad(
                key,
                format!("`{key}` must be a number above 0, at most {max}"),
            )),
            _ => Err(bad(
                key,
                format!("`{key}` must be a number from {min} to {max}"),
            )),
        },
        Rule::Str { max_chars } => match value.as_str() {
            Some(s) if s.chars().count() <= max_chars => Ok(()),
            _ => Err(bad(
                key,
                format!("`{key}` must be a string of at most {max_chars} characters"),
            )),
        },
        Rule::Object if value.is_object() => Ok(()),
        Rule::Object => Err(bad(key, format!("`{key}` must be an object"))),
        Rule::Stop => check_stop(value),
        Rule::IntArray => match value.as_array() {
            Some(a) if a.iter().all(|v| v.as_u64().is_some()) => Ok(()),
            _ => Err(bad(
                key,
                format!("`{key}` must be an array of non-negative integers"),
            )),
        },
        Rule::StrArray => match value.as_array() {
            Some(a) if a.iter().all(Value::is_string) => Ok(()),
            _ => Err(bad(key, format!("`{key}` must be an array of strings"))),
        },
        Rule::LogitBias => match value.as_object() {
            Some(m)
                if m.values()
                    .all(|v| v.as_f64().is_some_and(|x| (-100.0..=100.0).contains(&x))) =>
            {
                Ok(())
            }
            _ => Err(bad(
                key,
                format!("`{key}` must map token ids to numbers from -100 to 100"),
            )),
        },
        Rule::ToolChoice if value.is_string() || value.is_object() => Ok(()),
        Rule::ToolChoice => Err(bad(key, format!("`{key}` must be a string or an object"))),
        Rule::StreamOptions => {
            let Some(m) = value.as_object_mut() else {
                return Err(bad(key, format!("`{key}` must be an object")));
            };
            m.retain(|k, _| k == "include_usage");
            match m.get("include_usage") {
                None | Some(Value::Null | Value::Bool(_)) => Ok(()),
                Some(_) => Err(bad(
                    "stream_options.include_usage",
                    "`stream_options.include_usage` must be a boolean".into(),
                )),
            }
        }
    }
}

fn check_stop(value: &Value) -> Result<(), ApiError> {
    let short = |s: &str| s.chars().count() <= MAX_STOP_CHARS;
    let ok = match value {
        Value::String(s) => short(s),
        Value::Array(a) => a.len() <= MAX_STOPS && a.iter().all(|v| v.as_str().is_some_and(short)),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(bad(
            "stop",
            format!(
                "`stop` must be a string or an array of at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters"
            ),
        ))
    }
}

/// Runs the pipeline over `body` (see the module docs). Returns the keys dropped silently.
pub fn apply(body: &mut Map<String, Value>) -> Result<Vec<String>, ApiError> {
    match body.remove(EXTRA_BODY) {
        None | Some(Value::Null) => {}
        Some(Value::Object(extra)) => {
            for (k, v) in extra {
                body.entry(k).or_insert(v);
            }
        }
        Some(_) => return Err(bad(EXTRA_BODY, "`extra_body` must be an object".into())),
    }
    let mut dropped = Vec::new();
    body.retain(|k, _| {
        let drop = DROPPED.contains(&k.as_str());
        if drop {
            dropped.push(k.clone());
        }
        !drop
    });
    let unknown: Vec<String> = body
        .keys()
        .filter(|k| rule_of(k).is_none())
        .cloned()
        .collect();
    if let Some(first) = unknown.first() {
        return Err(ApiError::InvalidParam {
            message: format!(
                "unrecognized request argument(s): {}. Accepted: messages, model, stream, \
                 max_tokens, max_completion_tokens, n, seed, temperature, top_p, top_k, min_p, \
                 frequency_penalty, presence_penalty, repetition_penalty, logit_bias, logprobs, \
                 top_logprobs, stop, stop_token_ids, tools, tool_choice, response_format, \
                 structured_outputs, reasoning*, thinking*, chat_template_kwargs, min_tokens, \
                 bad_words, user, metadata, stream_options, skip_special_tokens, detokenize, \
                 parallel_tool_calls, safety_identifier, return_token_ids, prompt_logprobs",
                unknown.join(", ")
            ),
            param: first.clone(),
            code: "unknown_parameter",
        });
    }
    for (k, v) in body.iter_mut() {
        if let Some(rule) = rule_of(k) {
            check(k, rule, v)?;
        }
    }
    Ok(dropped)
}

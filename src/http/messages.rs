//! OpenAI's checks of `messages` (pure): a non-empty array (at most [`MAX_MESSAGES`]) of objects,
//! each with a `role` among [`ROLES`] and a `content` that is a string, an array of content parts
//! (objects with a string `type`), or `null` — `null` (or no `content`) only for an `assistant`
//! message that has `tool_calls`. A `tool` message needs a string `tool_call_id`. Errors name the
//! parameter path the way OpenAI does (`messages[0].role`, `messages[2].content[1].type`).

use serde_json::Value;

use super::error::ApiError;

/// Accepted roles.
pub const ROLES: &[&str] = &["system", "user", "assistant", "tool", "developer"];
/// Most messages in one request (the Go gateway's bound).
pub const MAX_MESSAGES: usize = 2_048;

fn invalid(param: String, code: &'static str, message: String) -> ApiError {
    ApiError::InvalidParam {
        message,
        param,
        code,
    }
}

/// Checks `messages` (see the module docs); `None` = the key is absent.
pub fn check(messages: Option<&Value>) -> Result<(), ApiError> {
    let list = match messages {
        None | Some(Value::Null) => {
            return Err(invalid(
                "messages".into(),
                "missing_required_parameter",
                "`messages` is required".into(),
            ))
        }
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(invalid(
                "messages".into(),
                "invalid_value",
                "`messages` must contain at least one message".into(),
            ))
        }
        Some(Value::Array(a)) if a.len() > MAX_MESSAGES => {
            return Err(invalid(
                "messages".into(),
                "invalid_value",
                format!(
                    "`messages` has {} messages, above the maximum of {MAX_MESSAGES}",
                    a.len()
                ),
            ))
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(invalid(
                "messages".into(),
                "invalid_value",
                "`messages` must be an array of messages".into(),
            ))
        }
    };
    list.iter()
        .enumerate()
        .try_for_each(|(i, m)| check_message(i, m))
}

fn check_message(i: usize, m: &Value) -> Result<(), ApiError> {
    let at = format!("messages[{i}]");
    let Some(m) = m.as_object() else {
        return Err(invalid(
            at.clone(),
            "invalid_type",
            format!("`{at}` must be an object"),
        ));
    };
    let role = match m.get("role") {
        None | Some(Value::Null) => {
            return Err(invalid(
                format!("{at}.role"),
                "missing_required_parameter",
                format!("`{at}.role` is required"),
            ))
        }
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
        Some(other) => {
            return Err(invalid(
                format!("{at}.role"),
                "invalid_value",
                format!(
                    "`{at}.role` is {other}; it must be one of {}",
                    ROLES.join(", ")
                ),
            ))
        }
    };
    let has_tool_calls = m
        .get("tool_calls")
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()));
    match m.get("content") {
        Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => check_parts(&at, parts)?,
        None | Some(Value::Null) if role == "assistant" && has_tool_calls => {}
        None | Some(Value::Null) => {
            return Err(invalid(
                format!("{at}.content"),
                "missing_required_parameter",
                format!(
                "`{at}.content` is required (null only for an assistant message with tool_calls)"
            ),
            ))
        }
        Some(_) => {
            return Err(invalid(
                format!("{at}.content"),
                "invalid_type",
                format!("`{at}.content` must be a string, an array of content parts, or null"),
            ))
        }
    }
    if role == "tool" && !m.get("tool_call_id").is_some_and(Value::is_string) {
        return Err(invalid(
            format!("{at}.tool_call_id"),
            "missing_required_parameter",
            format!("`{at}.tool_call_id` is required for a tool message"),
        ));
    }
    Ok(())
}

fn check_parts(at: &str, parts: &[Value]) -> Result<(), ApiError> {
    for (j, p) in parts.iter().enumerate() {
        let here = format!("{at}.content[{j}]");
        if !p.get("type").is_some_and(Value::is_string) {
            return Err(invalid(
                format!("{here}.type"),
                "missing_required_parameter",
                format!(
                    "`{here}.type` is required: a content part is an object with a string `type`"
                ),
            ));
        }
    }
    Ok(())
}

//! How an attempt reads what its host answered: a host error event (upstream's shapes) and what a
//! streaming client is told when its winner broke mid-stream.

use crate::outcome::AttemptEnd;

/// What a streaming client is told when the winner broke mid-stream.
pub(super) fn mid_stream_message(end: &AttemptEnd) -> String {
    match end {
        AttemptEnd::Host(e) => format!("the serving host failed mid-stream: {e}"),
        AttemptEnd::Stalled => "the serving host stalled mid-stream".to_string(),
        AttemptEnd::ErrorEvent { message, .. } => message.clone(),
        other => format!("the answer was interrupted: {other:?}"),
    }
}

/// Status and message of a host error event, as upstream reads it (UPSTREAM-SURFACE §7.4):
/// `{"error": {…}}` or `{"object": "error", …}`; the status is its `code` when in 400–599,
/// else 400 when its `type` names a bad request (a client-caused failure such as a context-length
/// overflow), else unknown (a host fault).
pub(super) fn error_details(json: &[u8]) -> (Option<u16>, String) {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    let err = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
    let message = err
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("the host reported an error")
        .to_string();
    let code = err
        .get("code")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c));
    let bad_request = err.get("type").and_then(|t| t.as_str()).is_some_and(|t| {
        t.to_ascii_lowercase()
            .replace('_', "")
            .contains("badrequest")
    });
    (code.or(bad_request.then_some(400)), message)
}

#[cfg(test)]
mod tests {
    use super::error_details;

    #[test]
    fn host_error_events_read_as_upstream() {
        let ctx = br#"{"error":{"message":"context length exceeded","type":"BadRequestError"}}"#;
        assert_eq!(
            error_details(ctx),
            (Some(400), "context length exceeded".into())
        );
        let vllm = br#"{"object":"error","message":"too long","type":"bad_request_error"}"#;
        assert_eq!(error_details(vllm), (Some(400), "too long".into()));
        let coded = br#"{"error":{"message":"busy","code":"503"}}"#;
        assert_eq!(error_details(coded), (Some(503), "busy".into()));
        let host = br#"{"error":{"message":"CUDA out of memory","type":"InternalError"}}"#;
        assert_eq!(error_details(host).0, None);
        assert_eq!(error_details(br#"{"error":{"code":200}}"#).0, None);
    }
}

//! Steady mixed load: `streams` client loops, each sending chat requests back to back, streaming
//! and not in turn, and judging every answer from the outside (invariant 2): a 200 with a whole
//! completion or an SSE stream ending in `[DONE]`, or an OpenAI-shaped error (a JSON error body,
//! or an SSE error event that is the last thing sent), within the client deadline. A request
//! that a `kill -9` cut is only held to "no bytes after an error" and the secret scan.

use std::{cell::RefCell, rc::Rc, time::Duration};

use futures::StreamExt;
use serde_json::{json, Value};

use super::{checks::Secrets, http::Http, report::Report};

/// A request without an answer by then hangs (the gateway's own timeouts are far shorter).
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(90);

/// Counters of the load (printed at the end).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LoadStats {
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    /// Requests cut by a `kill -9` or refused while the gateway was down.
    pub cut: u64,
    /// Answers by status (`200`, `429`, `502`, …, `transport`).
    pub by_status: std::collections::BTreeMap<String, u64>,
}

/// What the load loops share with the runner.
pub struct LoadShared {
    pub http: Http,
    pub url: String,
    /// Bumped by the runner before every kill and after every restart: odd while it is down.
    pub epoch: Rc<std::cell::Cell<u64>>,
    pub stop: Rc<std::cell::Cell<bool>>,
    /// While set, no new request starts (the checks quiesce the escrow).
    pub pause: Rc<std::cell::Cell<bool>>,
    pub stats: Rc<RefCell<LoadStats>>,
    pub report: Rc<RefCell<Report>>,
    pub secrets: Rc<Secrets>,
}

/// How one request ended, as the client saw it.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// An OpenAI-shaped error (status, message).
    Error(u16),
    /// Not a valid ending: the reason.
    Violation(String),
}

fn is_openai_error(v: &Value) -> bool {
    v["error"]["message"].is_string() && v["error"].is_object()
}

/// Judges a whole (non-streaming or error) answer.
pub fn judge_body(status: u16, body: &[u8]) -> Verdict {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    match (status, parsed) {
        (200, Some(v)) if v["object"] == "chat.completion" && v["choices"].is_array() => {
            Verdict::Ok
        }
        (200, _) => Verdict::Violation(format!(
            "200 whose body is not a chat.completion: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )),
        (s, Some(v)) if is_openai_error(&v) => Verdict::Error(s),
        (s, _) => Verdict::Violation(format!(
            "{s} whose body is not an OpenAI-shaped error: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )),
    }
}

/// Judges a complete SSE body: `[DONE]` last, or an error event last; no devshard event leaks.
pub fn judge_stream(body: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(body);
    let events: Vec<&str> = text
        .split("\n\n")
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let event_key = |k: &str| text.find(&format!("\"{k}\":"));
    if let Some(at) = event_key("devshard_receipt").or_else(|| event_key("devshard_meta")) {
        let from = text[..at].rfind("data: ").unwrap_or(0);
        return Verdict::Violation(format!(
            "a devshard event reached the client: {}",
            text[from..].chars().take(300).collect::<String>()
        ));
    }
    for (i, e) in events.iter().enumerate() {
        let data = e.strip_prefix("data: ").unwrap_or(e);
        let last = i + 1 == events.len();
        if data == "[DONE]" {
            return if last {
                Verdict::Ok
            } else {
                Verdict::Violation("bytes after [DONE]".into())
            };
        }
        let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        if v.get("error").is_some() {
            return match (is_openai_error(&v), last) {
                (true, true) => Verdict::Error(200),
                (false, _) => {
                    Verdict::Violation(format!("an error event not OpenAI-shaped: {data}"))
                }
                (true, false) => Verdict::Violation(format!(
                    "bytes after an error event: {}",
                    events[i + 1..]
                        .join(" | ")
                        .chars()
                        .take(200)
                        .collect::<String>()
                )),
            };
        }
    }
    Verdict::Violation(format!(
        "stream ended without [DONE] or an error event ({} events)",
        events.len()
    ))
}

/// Reads one response whole, within what is left of the deadline.
async fn read_all(resp: &mut awc::ClientResponse) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.next().await {
        body.extend_from_slice(&chunk.map_err(|e| format!("reading the body: {e}"))?);
    }
    Ok(body)
}

/// One request's ending as the client saw it: its status (or `transport`, `hang`), the verdict,
/// the bytes, and the `Retry-After` it was told (seconds).
type Ended = (String, Verdict, Vec<u8>, Option<u64>);

async fn one_request(shared: &LoadShared, n: u64, stream: bool) -> Ended {
    let body = json!({
        "messages": [{"role": "user", "content": format!("chaos request {n}")}],
        "stream": stream,
        "max_tokens": 12 + (n % 13),
    });
    let attempt = async {
        let mut resp = shared
            .http
            .client()
            .post(format!("{}/v1/chat/completions", shared.url))
            .timeout(CLIENT_DEADLINE)
            .send_json(&body)
            .await
            .map_err(|e| format!("transport: {e}"))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let bytes = read_all(&mut resp).await?;
        Ok::<_, String>((status, is_sse, bytes, retry_after))
    };
    match tokio::time::timeout(CLIENT_DEADLINE, attempt).await {
        Err(_) => (
            "hang".into(),
            Verdict::Violation(format!("no complete answer within {CLIENT_DEADLINE:?}")),
            Vec::new(),
            None,
        ),
        Ok(Err(e)) => ("transport".into(), Verdict::Violation(e), Vec::new(), None),
        Ok(Ok((status, is_sse, bytes, retry_after))) => {
            let verdict = if status == 200 && stream && is_sse {
                judge_stream(&bytes)
            } else {
                judge_body(status, &bytes)
            };
            (status.to_string(), verdict, bytes, retry_after)
        }
    }
}

/// How long a client loop waits after an OpenAI-shaped error: the `Retry-After` a 429 or 503
/// named, at most [`MAX_RETRY_AFTER`] (as the OpenAI SDKs do), else [`ERROR_PAUSE`].
pub fn pause_after_error(status: u16, retry_after_s: Option<u64>) -> Duration {
    match (status, retry_after_s) {
        (429 | 503, Some(s)) => Duration::from_secs(s).clamp(ERROR_PAUSE, MAX_RETRY_AFTER),
        _ => ERROR_PAUSE,
    }
}

/// How long a client loop waits after an OpenAI-shaped error that named no `Retry-After`.
const ERROR_PAUSE: Duration = Duration::from_millis(50);
/// The longest `Retry-After` a client loop honours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(2);

/// One client loop until `stop`.
pub async fn client_loop(shared: Rc<LoadShared>, worker: u64) {
    let mut n = worker * 1_000_000;
    while !shared.stop.get() {
        if shared.pause.get() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        n += 1;
        let stream = (n + worker).is_multiple_of(2);
        let epoch = shared.epoch.get();
        let (status, verdict, bytes, retry_after) = one_request(&shared, n, stream).await;
        shared
            .secrets
            .scan(&bytes, "a chat response", &shared.report);
        let cut = shared.epoch.get() != epoch || epoch % 2 == 1;
        {
            let mut stats = shared.stats.borrow_mut();
            stats.requests += 1;
            *stats.by_status.entry(status.clone()).or_default() += 1;
            match &verdict {
                Verdict::Ok => stats.ok += 1,
                Verdict::Error(_) => stats.errors += 1,
                Verdict::Violation(_) if cut => stats.cut += 1,
                Verdict::Violation(_) => {}
            }
        }
        if let Verdict::Error(code) = verdict {
            // A client that got an error (a 503 with `Retry-After` while the escrow drains or
            // every host refuses connections, a 502 while hosts fail) does not retry in a tight
            // loop: the hour-long run's loops once spun at ~4 000 refused requests a second and
            // starved the runner; later, 100 loops retrying sheds every 50 ms kept the machine
            // saturated past each clear. It honours `Retry-After`, as the OpenAI SDKs do.
            tokio::time::sleep(pause_after_error(code, retry_after)).await;
        }
        if let Verdict::Violation(reason) = verdict {
            if !cut || reason.starts_with("bytes after") {
                let kind = if stream { "stream" } else { "whole" };
                shared
                    .report
                    .borrow_mut()
                    .violation(2, format!("{kind} request {n}: {status}: {reason}"));
            }
            // Do not spin while the gateway is down.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_honours_retry_after_of_429_and_503_up_to_two_seconds() {
        assert_eq!(pause_after_error(503, Some(1)), Duration::from_secs(1));
        assert_eq!(pause_after_error(429, Some(30)), MAX_RETRY_AFTER);
        assert_eq!(pause_after_error(503, Some(0)), ERROR_PAUSE);
        assert_eq!(pause_after_error(503, None), ERROR_PAUSE);
        assert_eq!(pause_after_error(502, Some(5)), ERROR_PAUSE);
    }

    #[test]
    fn streams_and_bodies_are_judged_from_the_outside() {
        let ok = b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
        assert_eq!(judge_stream(ok), Verdict::Ok);
        let err =
            b"data: {\"choices\":[]}\n\ndata: {\"error\":{\"message\":\"x\",\"type\":\"t\"}}\n\n";
        assert_eq!(judge_stream(err), Verdict::Error(200));
        let after = b"data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n";
        assert!(
            matches!(judge_stream(after), Verdict::Violation(r) if r.starts_with("bytes after"))
        );
        let cut = b"data: {\"choices\":[]}\n\n";
        assert!(matches!(judge_stream(cut), Verdict::Violation(_)));
        let leak = b"data: {\"devshard_meta\":{}}\n\ndata: [DONE]\n\n";
        assert!(matches!(judge_stream(leak), Verdict::Violation(_)));
        assert_eq!(
            judge_body(
                502,
                br#"{"error":{"message":"m","type":"t","param":null,"code":"c"}}"#
            ),
            Verdict::Error(502)
        );
        assert!(matches!(
            judge_body(502, b"Bad Gateway"),
            Verdict::Violation(_)
        ));
        assert!(matches!(
            judge_body(200, br#"{"object":"chat.completion","choices":[]}"#),
            Verdict::Ok
        ));
    }
}

//! OpenAI-compatible validation: what OpenAI answers with 400 (naming the parameter path) is
//! answered with 400 here too, and a rejected request spends no nonce on any host.

use crate::live::{self, chat, escrow_nonce};
use serde_json::Value;

const OK_MSG: &str = r#"[{"role":"user","content":"x"}]"#;

#[actix_rt::test]
async fn openai_rejections_name_the_parameter_and_spend_no_nonce() {
    let l = live::start("validation", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    let (status, _, _) = chat(&url, &format!(r#"{{"messages":{OK_MSG}}}"#)).await;
    assert_eq!(status, 200);
    let before = escrow_nonce(&url).await;
    let cases: Vec<(String, &str, &str)> = vec![
        (
            r#"{"messages":[{"content":"no role"}]}"#.into(),
            "messages[0].role",
            "missing_required_parameter",
        ),
        (
            r#"{"messages":[{"role":"user","content":"a"},{"role":"robot","content":"b"}]}"#.into(),
            "messages[1].role",
            "invalid_value",
        ),
        (
            r#"{"messages":[{"role":"user","content":42}]}"#.into(),
            "messages[0].content",
            "invalid_type",
        ),
        (
            r#"{"messages":[{"role":"user","content":null}]}"#.into(),
            "messages[0].content",
            "missing_required_parameter",
        ),
        (
            r#"{"messages":[{"role":"assistant","content":null}]}"#.into(),
            "messages[0].content",
            "missing_required_parameter",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"text":"no type"}]}]}"#.into(),
            "messages[0].content[0].type",
            "missing_required_parameter",
        ),
        (
            r#"{"messages":[{"role":"tool","content":"r"}]}"#.into(),
            "messages[0].tool_call_id",
            "missing_required_parameter",
        ),
        (
            r#"{"messages":["hi"]}"#.into(),
            "messages[0]",
            "invalid_type",
        ),
        (
            format!(r#"{{"model":null,"messages":{OK_MSG}}}"#),
            "model",
            "invalid_value",
        ),
        (
            format!(r#"{{"model":7,"messages":{OK_MSG}}}"#),
            "model",
            "invalid_value",
        ),
        (
            format!(r#"{{"temperature":2.5,"messages":{OK_MSG}}}"#),
            "temperature",
            "invalid_value",
        ),
        (
            format!(r#"{{"n":6,"messages":{OK_MSG}}}"#),
            "n",
            "invalid_value",
        ),
        (
            format!(r#"{{"frequency_penalty":-3,"messages":{OK_MSG}}}"#),
            "frequency_penalty",
            "invalid_value",
        ),
        (
            format!(
                r#"{{"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"],"messages":{OK_MSG}}}"#
            ),
            "stop",
            "invalid_value",
        ),
        (
            format!(r#"{{"user":"{}","messages":{OK_MSG}}}"#, "u".repeat(513)),
            "user",
            "invalid_value",
        ),
        (
            format!(r#"{{"frobnicate":1,"messages":{OK_MSG}}}"#),
            "frobnicate",
            "unknown_parameter",
        ),
        (
            format!(r#"{{"extra_body":{{"frobnicate":1}},"messages":{OK_MSG}}}"#),
            "frobnicate",
            "unknown_parameter",
        ),
        (
            format!(r#"{{"extra_body":[1],"messages":{OK_MSG}}}"#),
            "extra_body",
            "invalid_value",
        ),
        (
            format!(r#"{{"stream_options":{{"include_usage":"yes"}},"messages":{OK_MSG}}}"#),
            "stream_options.include_usage",
            "invalid_value",
        ),
    ];
    for (body, param, code) in &cases {
        let (status, _, resp) = chat(&url, body).await;
        let v: Value = serde_json::from_slice(&resp).unwrap();
        assert_eq!(status, 400, "{body} → {v}");
        assert_eq!(v["error"]["param"], *param, "{body} → {v}");
        assert_eq!(v["error"]["code"], *code, "{body} → {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(param),
            "{v}"
        );
    }
    assert_eq!(
        escrow_nonce(&url).await,
        before,
        "no rejected request spent a nonce"
    );
    let max = (0..3)
        .map(|i| l.sim.host_view(i, "42").map_or(0, |v| v.latest_nonce))
        .max();
    assert_eq!(max, Some(before), "no host saw anything new either");
    l.stop().await;
}

#[actix_rt::test]
async fn accepted_fields_pass_and_dropped_ones_are_dropped() {
    let l = live::start("validation-ok", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    let accepted = [
        // content parts, assistant tool calls with null content, a tool answer, developer role
        r#"{"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]}"#,
        r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto","response_format":{"type":"json_object"},"seed":7,"temperature":0.2,"top_p":0.9,"top_k":40,"stop":["\n"],"user":"u1","metadata":{"a":"b"},"reasoning_effort":"low","parallel_tool_calls":false}"#,
        // silently dropped keys, and vendor keys through extra_body
        r#"{"messages":[{"role":"user","content":"x"}],"service_tier":"auto","store":true,"prompt_cache_key":"k","extra_body":{"top_k":5,"chat_template_kwargs":{"enable_thinking":false}}}"#,
        // both limits: both become the smaller
        r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":9,"max_completion_tokens":3,"stream_options":{"include_usage":true,"other":1}}"#,
    ];
    for body in accepted {
        let (status, _, resp) = chat(&url, body).await;
        assert_eq!(status, 200, "{body} → {}", String::from_utf8_lossy(&resp));
    }
    let (_, _, resp) = chat(&url, accepted[3]).await;
    let v: Value = serde_json::from_slice(&resp).unwrap();
    assert_eq!(
        v["usage"]["completion_tokens"], 3,
        "min(max_tokens, max_completion_tokens)"
    );
    l.stop().await;
}

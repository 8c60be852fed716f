//! The splice against the `Value` reading: the same members go, everything else stays as it was.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{splice, Strip, Unscanned};

const ALL: Strip = Strip {
    logprobs: true,
    token_ids: true,
    prompt_logprobs: true,
};

fn spliced(strip: Strip, json: &str) -> Result<Option<String>, Unscanned> {
    let mut out = Vec::new();
    let changed = splice(strip, json.as_bytes(), &mut out)?;
    Ok(changed.then(|| String::from_utf8(out).unwrap()))
}

/// What the `Value` reading leaves: the stripped value, or `None` when nothing changed.
fn by_value(strip: Strip, v: &Value) -> Option<Value> {
    let mut v = v.clone();
    strip.value(&mut v).then_some(v)
}

#[test]
fn a_forced_content_chunk_keeps_its_members_in_order() {
    let chunk = r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":{"content":[{"token":"hi","logprob":-0.1,"bytes":[104,105],"top_logprobs":[{"token":"a","logprob":-2.0,"bytes":[97]}]}]},"finish_reason":null,"token_ids":[5]}],"prompt_token_ids":[1,2]}"#;
    assert_eq!(
        spliced(ALL, chunk).unwrap().unwrap(),
        r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]}"#
    );
    let only_ids = Strip {
        logprobs: false,
        ..ALL
    };
    let kept = spliced(only_ids, chunk).unwrap().unwrap();
    assert!(kept.contains(r#""top_logprobs":[{"token":"a""#) && !kept.contains("token_ids"));
}

#[test]
fn nothing_to_strip_is_reported_unchanged() {
    for json in [
        r#"{"choices":[{"logprobs":null, "x":1}]}"#,
        r#"{"a":"logprobs","b":["token_ids"]}"#,
        "[]",
        " 3 ",
        r#""s""#,
    ] {
        assert_eq!(spliced(ALL, json), Ok(None), "{json}");
    }
}

#[test]
fn what_it_does_not_read_like_serde_json_is_left_to_the_value_reading() {
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    for json in [
        r#"{"token\u005fids":[1]}"#,
        r#"{"a":01}"#,
        r#"{"a":1,}"#,
        r#"{"a":"x"#,
        r#"{"a":"\q"}"#,
        "{\"a\":\"\u{1}\"}",
        r#"{"a":tru}"#,
        r#"{"a":1} x"#,
        r#"{"a":-}"#,
        r#"{"a":1.}"#,
        r#"{"a":1e}"#,
        "",
        deep.as_str(),
    ] {
        assert_eq!(spliced(ALL, json), Err(Unscanned), "{json}");
        assert!(serde_json::from_str::<Value>(json).is_err() || json.contains('\\'));
    }
    let mut out = Vec::new();
    assert_eq!(splice(ALL, b"{\"a\":\"\xff\"}", &mut out), Err(Unscanned));
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("logprob"),
        Just("logprobs"),
        Just("top_logprobs"),
        Just("token_ids"),
        Just("prompt_token_ids"),
        Just("prompt_logprobs"),
        Just("content"),
        Just("delta"),
        Just("x y"),
        Just("é"),
    ]
    .prop_map(String::from)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z\"\\\\\n\u{e9}]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn any_strip() -> impl Strategy<Value = Strip> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(l, t, p)| Strip {
        logprobs: l,
        token_ids: t,
        prompt_logprobs: p,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Compact or pretty, the splice takes out exactly what the `Value` reading takes out.
    #[test]
    fn the_splice_and_the_value_reading_agree(v in json_value(), strip in any_strip(), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }.unwrap();
        let got = spliced(strip, &text).unwrap();
        let want = by_value(strip, &v);
        prop_assert_eq!(got.is_some(), want.is_some());
        if let (Some(got), Some(want)) = (got, want) {
            prop_assert_eq!(serde_json::from_str::<Value>(&got).unwrap(), want);
        }
    }
}

#[test]
fn the_value_reading_still_strips_what_the_splice_does_not_read() {
    let strip = ALL;
    let body = bytes::Bytes::from_static(br#"{"choices":[{"token\u005fids":[1],"x":1}]}"#);
    assert_eq!(&strip.json(body)[..], br#"{"choices":[{"x":1}]}"#);
    let untouched = json!({"a": 1}).to_string();
    let body = bytes::Bytes::from(untouched.clone());
    assert_eq!(strip.json(body), untouched.as_bytes());
}

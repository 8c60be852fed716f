//! Canonical JSON of a prompt and the prompt hash (docs/protocol.md §5.2).
//!
//! `prompt_hash = sha256(canonical_json(body))` must match what a Go host computes, byte for byte:
//! the body is decoded like Go's `json.Unmarshal` into `interface{}` (every number a float64) and
//! re-encoded like `encoding/json` with `SetEscapeHTML(false)`: object keys sorted by bytes, no
//! whitespace, no trailing newline.
//!
//! Number formatting is Go's `floatEncoder`: shortest round-trip digits, `'f'` notation unless
//! `|x| < 1e-6` or `|x| >= 1e21`, then `'e'` notation with a signed exponent of at least two digits
//! for positive exponents and Go's "e-07 → e-7" clean-up for negative ones (`1e-7`, `1e+21`,
//! `1.5e-10`). Integers print without a fraction (`45`, `1.0` → `1`, `-0.0` → `-0`).
//!
//! String escaping is Go's: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other controls as `\u00xx`
//! (lowercase hex), U+2028/U+2029 as `\u2028`/`\u2029`; `<`, `>`, `&`, `/` and DEL stay raw.

mod number;
mod parse;

use self::parse::Value;
use super::crypto::sha256;

/// Why a body has no canonical form (Go's `json.Unmarshal` would fail too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    #[error("invalid json at byte {offset}: {reason}")]
    Syntax { offset: usize, reason: &'static str },
    #[error("json number at byte {offset} is out of float64 range")]
    NumberOutOfRange { offset: usize },
    #[error("json nesting deeper than {0} levels")]
    TooDeep(usize),
}

/// Canonical JSON text of `raw`.
pub fn canonical_json(raw: &[u8]) -> Result<String, CanonicalError> {
    let v = parse::parse(raw)?;
    let mut out = String::with_capacity(raw.len());
    write_value(&mut out, &v);
    Ok(out)
}

/// `sha256(canonical_json(raw))`: the `prompt_hash` of `MsgStartInference`.
pub fn prompt_hash(raw: &[u8]) -> Result<[u8; 32], CanonicalError> {
    canonical_json(raw).map(|c| sha256(c.as_bytes()))
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(f) => out.push_str(&number::format(*f)),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Go `encoding/json` string escaping with HTML escaping off.
fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0}'..='\u{1f}' => {
                let b = c as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            _ => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        canonical_json(s.as_bytes()).unwrap()
    }

    #[test]
    fn numbers_follow_go_float64_encoding() {
        let cases = [
            ("45", "45"),
            ("1.0", "1"),
            ("-0", "-0"),
            ("-0.0", "-0"),
            ("0.7", "0.7"),
            ("1e2", "100"),
            ("1.5E+3", "1500"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1.5e-7", "1.5e-7"),
            ("1e-10", "1e-10"),
            ("2.5e-300", "2.5e-300"),
            ("1e20", "100000000000000000000"),
            ("123456789012345678901", "123456789012345680000"),
            ("1e21", "1e+21"),
            ("-1.25e22", "-1.25e+22"),
            ("1e300", "1e+300"),
            ("12345678901234567890", "12345678901234567000"),
            ("9007199254740993", "9007199254740992"),
            ("0.1", "0.1"),
            ("3.141592653589793238", "3.141592653589793"),
            ("1e-400", "0"),
            ("5e-324", "5e-324"),
        ];
        for (input, want) in cases {
            assert_eq!(canon(input), want, "input {input}");
        }
        assert!(matches!(
            canonical_json(b"1e400"),
            Err(CanonicalError::NumberOutOfRange { .. })
        ));
        for bad in ["01", "1.", ".5", "+1", "1e", "-", "0x10", "NaN", "Infinity"] {
            assert!(
                canonical_json(bad.as_bytes()).is_err(),
                "{bad} must be rejected"
            );
        }
    }

    #[test]
    fn strings_follow_go_escaping() {
        assert_eq!(
            canon(r#""<a href='x'>&amp;</a>""#),
            r#""<a href='x'>&amp;</a>""#
        );
        assert_eq!(canon(r#""\/\u0041\u00e9""#), "\"/Aé\"");
        assert_eq!(canon(r#""q\"b\\s\b\f\n\r\t""#), r#""q\"b\\s\b\f\n\r\t""#);
        assert_eq!(
            canon(r#""\u0000\u001f\u001B\u007f""#),
            "\"\\u0000\\u001f\\u001b\u{7f}\""
        );
        assert_eq!(canon(r#""\u2028 \u2029""#), r#""\u2028 \u2029""#);
        assert_eq!(canon("\"\u{2028}\""), r#""\u2028""#);
        assert_eq!(canon(r#""\ud83d\ude00 é 日本""#), "\"😀 é 日本\"");
        // Unpaired surrogates and invalid UTF-8 become U+FFFD, as Go's decoder does.
        assert_eq!(canon(r#""\ud83d!""#), "\"\u{fffd}!\"");
        assert_eq!(canon(r#""\ude00""#), "\"\u{fffd}\"");
        assert_eq!(canon(r#""\ud83d\u0041""#), "\"\u{fffd}A\"");
        assert_eq!(canonical_json(b"\"a\xffb\"").unwrap(), "\"a\u{fffd}b\"");
        assert_eq!(
            canonical_json(b"\"\xe2\x82\"").unwrap(),
            "\"\u{fffd}\u{fffd}\""
        );
        assert!(canonical_json(b"\"raw\nnewline\"").is_err());
        assert!(canonical_json(br#""\x""#).is_err());
        assert!(canonical_json(b"\xff").is_err());
    }

    #[test]
    fn objects_sort_keys_by_bytes_recursively() {
        assert_eq!(
            canon(r#" { "b" : [ {"z":null,"a":true} ], "a":false, "B":{}, "é":1, "aa":[] } "#),
            r#"{"B":{},"a":false,"aa":[],"b":[{"a":true,"z":null}],"é":1}"#
        );
        assert_eq!(canon(r#"{"k":1,"k":2}"#), r#"{"k":2}"#);
        assert_eq!(canon("[]"), "[]");
        assert_eq!(canon("\"s\""), "\"s\"");
        for bad in [
            "",
            " ",
            "{",
            "{\"a\"}",
            "[1,]",
            "{\"a\":1,}",
            "[1] x",
            "tru",
            "{1:2}",
        ] {
            assert!(
                canonical_json(bad.as_bytes()).is_err(),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = "[".repeat(parse::MAX_DEPTH) + &"]".repeat(parse::MAX_DEPTH);
        assert!(canonical_json(ok.as_bytes()).is_ok());
        let deep = "[".repeat(parse::MAX_DEPTH + 1) + &"]".repeat(parse::MAX_DEPTH + 1);
        assert_eq!(
            canonical_json(deep.as_bytes()),
            Err(CanonicalError::TooDeep(parse::MAX_DEPTH))
        );
    }

    #[test]
    fn prompt_hash_is_sha256_of_canonical_form() {
        let body = br#"{"z":1,"a":{"y":"<b>","b":[3,2]},"model":"m"}"#;
        assert_eq!(
            hex::encode(prompt_hash(body).unwrap()),
            "f214d20cdf5692e86d58e19f07881187ac556ab8850fe8f21850ada8d394ead1"
        );
    }
}

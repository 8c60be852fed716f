//! A JSON decoder with the semantics of Go's `json.Unmarshal` into `interface{}`.
//!
//! Numbers become `f64` (correctly rounded, like `strconv.ParseFloat`; out of range is an error),
//! objects keep the last value of a duplicated key, invalid UTF-8 inside strings becomes U+FFFD
//! per byte and an unpaired `\u` surrogate escape becomes U+FFFD, exactly as Go decodes them.

use std::collections::BTreeMap;

use super::CanonicalError;

/// Deepest nesting accepted (Go allows 10 000; we stop earlier to bound recursion).
pub(super) const MAX_DEPTH: usize = 512;

/// A decoded JSON value. Object keys are ordered by bytes, like Go's sorted map keys.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

/// Parses one JSON document (surrounding whitespace allowed, nothing else).
pub(super) fn parse(raw: &[u8]) -> Result<Value, CanonicalError> {
    let mut p = Parser { s: raw, i: 0 };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.i != raw.len() {
        return Err(p.err("trailing data after the top-level value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, reason: &'static str) -> CanonicalError {
        CanonicalError::Syntax {
            offset: self.i,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8, reason: &'static str) -> Result<(), CanonicalError> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(reason))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, CanonicalError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(_) => Err(self.err("invalid character looking for beginning of value")),
            None => Err(self.err("unexpected end of JSON input")),
        }
    }

    fn literal(&mut self, word: &'static [u8], v: Value) -> Result<Value, CanonicalError> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(CanonicalError::TooDeep(MAX_DEPTH));
        }
        self.i += 1; // '{'
        let mut map = BTreeMap::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a string object key"));
            }
            let key = self.string()?;
            self.skip_ws();
            self.eat(b':', "expected ':' after object key")?;
            self.skip_ws();
            let v = self.value(depth)?;
            map.insert(key, v); // a repeated key keeps the last value, as in Go
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.err("expected ',' or '}' in object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(CanonicalError::TooDeep(MAX_DEPTH));
        }
        self.i += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']' in array")),
            }
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, decoded as float64.
    fn number(&mut self) -> Result<Value, CanonicalError> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("expected digit after decimal point"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("expected digit in exponent"));
            }
            self.digits();
        }
        let text =
            std::str::from_utf8(&self.s[start..self.i]).map_err(|_| CanonicalError::Syntax {
                offset: start,
                reason: "invalid number",
            })?;
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Number(f)),
            _ => Err(CanonicalError::NumberOutOfRange { offset: start }),
        }
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    /// Four hex digits after `\u` at `at`, if present.
    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.s.get(at..at + 4)?;
        let s = std::str::from_utf8(h).ok()?;
        if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(s, 16).ok()
    }

    fn string(&mut self) -> Result<String, CanonicalError> {
        self.i += 1; // opening quote
        let mut out = String::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.err("unexpected end of JSON input in string"));
            };
            match b {
                b'"' => {
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => self.escape(&mut out)?,
                0x00..=0x1f => return Err(self.err("invalid control character in string")),
                0x20..=0x7f => {
                    out.push(char::from(b));
                    self.i += 1;
                }
                _ => match decode_utf8(&self.s[self.i..]) {
                    Some((c, n)) => {
                        out.push(c);
                        self.i += n;
                    }
                    None => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        self.i += 1;
                    }
                },
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), CanonicalError> {
        let Some(&e) = self.s.get(self.i + 1) else {
            return Err(self.err("unexpected end of JSON input in string escape"));
        };
        let simple = match e {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            b'u' => None,
            _ => return Err(self.err("invalid escape in string")),
        };
        if let Some(c) = simple {
            out.push(c);
            self.i += 2;
            return Ok(());
        }
        let Some(r) = self.hex4(self.i + 2) else {
            return Err(self.err("invalid \\u escape in string"));
        };
        self.i += 6;
        if (0xD800..0xE000).contains(&r) {
            // A surrogate must pair with an immediately following low-surrogate escape; otherwise
            // Go yields U+FFFD and leaves the next escape to be decoded on its own.
            let next = (self.s.get(self.i..self.i + 2) == Some(b"\\u"))
                .then(|| self.hex4(self.i + 2))
                .flatten();
            if let Some(r2) = next {
                if (0xD800..0xDC00).contains(&r) && (0xDC00..0xE000).contains(&r2) {
                    let c = 0x10000 + ((r - 0xD800) << 10) + (r2 - 0xDC00);
                    out.push(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER));
                    self.i += 6;
                    return Ok(());
                }
            }
            out.push(char::REPLACEMENT_CHARACTER);
            return Ok(());
        }
        out.push(char::from_u32(r).unwrap_or(char::REPLACEMENT_CHARACTER));
        Ok(())
    }
}

/// The first UTF-8 scalar of `s` and its length, or `None` when `s` does not start with a valid
/// sequence (Go's `utf8.DecodeRune` then reports `RuneError` of width 1).
fn decode_utf8(s: &[u8]) -> Option<(char, usize)> {
    let width = match s.first()? {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let seq = std::str::from_utf8(s.get(..width)?).ok()?;
    seq.chars().next().map(|c| (c, width))
}

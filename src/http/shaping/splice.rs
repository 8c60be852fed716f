//! Byte-level stripping (issue 16, the hot path): the members [`Strip`] takes out are cut from the
//! JSON bytes in one pass, without building a `serde_json::Value` tree of the chunk and writing it
//! again. Every content chunk carries the logprobs forced upstream (5 alternatives per token, with
//! their bytes), so this ran on every chunk of nearly every answer.
//!
//! The scan reads the JSON grammar strictly (strings and their escapes, numbers, literals, nesting
//! up to serde_json's depth of 128) and keeps every member it does not strip as it was, in its
//! order. Anything it does not read the same way as serde_json would (a key written with an escape,
//! deeper nesting, bytes that are not UTF-8 or not JSON) is [`Unscanned`]; the caller then strips
//! through the `Value` reading, so both always agree on what is taken out.

use super::Strip;

/// serde_json's recursion limit.
const MAX_DEPTH: usize = 128;

/// The bytes are not JSON this scan reads; strip through the `Value` reading instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unscanned;

/// What happens to one object member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Keep,
    Drop,
    /// `logprobs`: kept as `null` where OpenAI has the key.
    Null,
}

impl Strip {
    fn member(self, key: &[u8]) -> Member {
        match key {
            b"logprob" | b"top_logprobs" if self.logprobs => Member::Drop,
            b"logprobs" if self.logprobs => Member::Null,
            b"token_ids" | b"prompt_token_ids" if self.token_ids => Member::Drop,
            b"prompt_logprobs" if self.prompt_logprobs => Member::Drop,
            _ => Member::Keep,
        }
    }
}

/// Appends `json` with the stripped members cut to `out`; true when something was cut (when
/// false, `out` holds a compact copy the caller need not use).
pub(super) fn splice(strip: Strip, json: &[u8], out: &mut Vec<u8>) -> Result<bool, Unscanned> {
    std::str::from_utf8(json).map_err(|_| Unscanned)?;
    let mut s = Splicer {
        strip,
        src: json,
        pos: 0,
        depth: 0,
        changed: false,
        out,
    };
    s.value(true)?;
    s.skip_ws();
    if s.pos != json.len() {
        return Err(Unscanned);
    }
    Ok(s.changed)
}

struct Splicer<'a, 'o> {
    strip: Strip,
    src: &'a [u8],
    pos: usize,
    depth: usize,
    changed: bool,
    out: &'o mut Vec<u8>,
}

impl Splicer<'_, '_> {
    fn peek(&self) -> Result<u8, Unscanned> {
        self.src.get(self.pos).copied().ok_or(Unscanned)
    }

    fn skip_ws(&mut self) {
        while matches!(self.src.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), Unscanned> {
        self.skip_ws();
        if self.peek()? != byte {
            return Err(Unscanned);
        }
        self.pos += 1;
        Ok(())
    }

    /// One value at `pos`, written to `out` when `emit`.
    fn value(&mut self, emit: bool) -> Result<(), Unscanned> {
        self.skip_ws();
        let start = self.pos;
        match self.peek()? {
            b'{' => return self.nested(emit, b'}', Self::object_member),
            b'[' => return self.nested(emit, b']', Self::array_element),
            b'"' => self.string()?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return Err(Unscanned),
        }
        if emit {
            self.out.extend_from_slice(&self.src[start..self.pos]);
        }
        Ok(())
    }

    /// An object or array: `item(self, emit, first)` reads one member or element and says whether
    /// it wrote it.
    fn nested(
        &mut self,
        emit: bool,
        close: u8,
        item: fn(&mut Self, bool, bool) -> Result<bool, Unscanned>,
    ) -> Result<(), Unscanned> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Unscanned);
        }
        if emit {
            self.out.push(self.src[self.pos]);
        }
        self.pos += 1;
        self.skip_ws();
        if self.peek()? == close {
            self.pos += 1;
        } else {
            let mut first = true;
            loop {
                first &= !item(self, emit, first)?;
                self.skip_ws();
                match self.peek()? {
                    b',' => self.pos += 1,
                    b if b == close => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(Unscanned),
                }
            }
        }
        if emit {
            self.out.push(close);
        }
        self.depth -= 1;
        Ok(())
    }

    fn array_element(&mut self, emit: bool, first: bool) -> Result<bool, Unscanned> {
        if emit && !first {
            self.out.push(b',');
        }
        self.value(emit)?;
        Ok(emit)
    }

    fn object_member(&mut self, emit: bool, first: bool) -> Result<bool, Unscanned> {
        self.skip_ws();
        if self.peek()? != b'"' {
            return Err(Unscanned);
        }
        let key_start = self.pos;
        self.string()?;
        let key = &self.src[key_start..self.pos];
        let name = &key[1..key.len() - 1];
        if name.contains(&b'\\') {
            return Err(Unscanned);
        }
        self.expect(b':')?;
        self.skip_ws();
        let mut member = self.strip.member(name);
        if member == Member::Null && self.src[self.pos..].starts_with(b"null") {
            member = Member::Keep;
        }
        if member != Member::Keep {
            self.changed = true;
        }
        let written = emit && member != Member::Drop;
        if written {
            if !first {
                self.out.push(b',');
            }
            self.out.extend_from_slice(key);
            self.out.push(b':');
        }
        match member {
            Member::Keep => self.value(emit)?,
            Member::Drop => self.value(false)?,
            Member::Null => {
                self.value(false)?;
                if emit {
                    self.out.extend_from_slice(b"null");
                }
            }
        }
        Ok(written)
    }

    /// A string at `pos` (its quotes included), its escapes checked.
    fn string(&mut self) -> Result<(), Unscanned> {
        self.pos += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.pos += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 1,
                        b'u' => {
                            let hex = self.src.get(self.pos + 1..self.pos + 5).ok_or(Unscanned)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(Unscanned);
                            }
                            self.pos += 5;
                        }
                        _ => return Err(Unscanned),
                    }
                }
                0x00..=0x1f => return Err(Unscanned),
                _ => self.pos += 1,
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Unscanned> {
        if !self.src[self.pos..].starts_with(word) {
            return Err(Unscanned);
        }
        self.pos += word.len();
        Ok(())
    }

    fn digits(&mut self) -> Result<(), Unscanned> {
        let start = self.pos;
        while self.src.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(Unscanned);
        }
        Ok(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<(), Unscanned> {
        if self.peek()? == b'-' {
            self.pos += 1;
        }
        if self.peek()? == b'0' {
            self.pos += 1;
        } else {
            self.digits()?;
        }
        if self.src.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            self.digits()?;
        }
        if matches!(self.src.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.src.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.digits()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

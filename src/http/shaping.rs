//! Request and response shaping as the network expects (as the Go gateway does it: forced
//! fields upstream, internal fields stripped from the events), pure functions:
//!
//! - **Forcing** ([`force`]): validators check an executor's answer against its logprobs, so the
//!   body sent upstream gets `logprobs = true`, `top_logprobs = 5` (unless the client set its
//!   own) and `return_token_ids = true`. Per model (`[shaping]` in the config); the prompt hash
//!   is computed afterwards, over the body actually sent.
//! - **Stripping** ([`Strip`]): what the client did not ask for is taken out of every event and
//!   of the whole answer — `logprob`, `logprobs` (kept as `null` where OpenAI has the key),
//!   `top_logprobs` unless it asked `logprobs`; `token_ids`, `prompt_token_ids` unless it asked
//!   `return_token_ids`; `prompt_logprobs` unless it asked `prompt_logprobs`. An event with
//!   nothing to strip passes byte for byte; the others are cut at the byte level (`splice`),
//!   every other member kept as it was, in its order.

mod splice;

use bytes::Bytes;
use serde_json::{Map, Value};

/// `top_logprobs` forced upstream.
pub const FORCED_TOP_LOGPROBS: u64 = 5;
const SSE_DATA: &[u8] = b"data: ";

/// What the client itself asked for (decides the stripping).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    pub logprobs: bool,
    pub token_ids: bool,
    pub prompt_logprobs: bool,
}

impl Asked {
    /// Read from the client's body (before forcing).
    pub fn of(body: &Map<String, Value>) -> Asked {
        let on = |k: &str| body.get(k).and_then(Value::as_bool) == Some(true);
        Asked {
            logprobs: on("logprobs"),
            token_ids: on("return_token_ids"),
            prompt_logprobs: body.get("prompt_logprobs").is_some_and(|v| !v.is_null()),
        }
    }

    /// What to take out of the answer.
    pub fn strip(self) -> Strip {
        Strip {
            logprobs: !self.logprobs,
            token_ids: !self.token_ids,
            prompt_logprobs: !self.prompt_logprobs,
        }
    }
}

/// Adds the forced fields to the body sent upstream; returns what the client asked.
pub fn force(body: &mut Map<String, Value>, enabled: bool) -> Asked {
    let asked = Asked::of(body);
    if enabled {
        body.insert("logprobs".into(), Value::Bool(true));
        if body.get("top_logprobs").is_none_or(Value::is_null) {
            body.insert("top_logprobs".into(), Value::from(FORCED_TOP_LOGPROBS));
        }
        body.insert("return_token_ids".into(), Value::Bool(true));
    }
    asked
}

/// The field families to strip from the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Strip {
    pub logprobs: bool,
    pub token_ids: bool,
    pub prompt_logprobs: bool,
}

impl Strip {
    /// Nothing to strip.
    pub fn is_noop(self) -> bool {
        !(self.logprobs || self.token_ids || self.prompt_logprobs)
    }

    /// Strips one JSON value in place (recursively); true when it changed.
    fn value(self, v: &mut Value) -> bool {
        match v {
            Value::Object(m) => {
                let mut changed = false;
                if self.logprobs {
                    for k in ["logprob", "top_logprobs"] {
                        changed |= m.remove(k).is_some();
                    }
                    if let Some(l) = m.get_mut("logprobs").filter(|l| !l.is_null()) {
                        *l = Value::Null;
                        changed = true;
                    }
                }
                if self.token_ids {
                    for k in ["token_ids", "prompt_token_ids"] {
                        changed |= m.remove(k).is_some();
                    }
                }
                if self.prompt_logprobs {
                    changed |= m.remove("prompt_logprobs").is_some();
                }
                for child in m.values_mut() {
                    changed |= self.value(child);
                }
                changed
            }
            Value::Array(a) => a
                .iter_mut()
                .fold(false, |changed, child| self.value(child) | changed),
            _ => false,
        }
    }

    /// A whole JSON answer, rewritten only when something was stripped.
    pub fn json(self, body: Bytes) -> Bytes {
        if self.is_noop() {
            return body;
        }
        self.rewrite(&body, b"", b"").unwrap_or(body)
    }

    /// `prefix`, `json` with the stripped members cut and `suffix`, or `None` when nothing was
    /// stripped (or the bytes are not JSON). The byte-level splice does it; JSON it does not read
    /// (see `splice`) goes through the `Value` reading, which re-encodes the whole value.
    fn rewrite(self, json: &[u8], prefix: &[u8], suffix: &[u8]) -> Option<Bytes> {
        let mut out = Vec::with_capacity(prefix.len() + json.len() + suffix.len());
        out.extend_from_slice(prefix);
        match splice::splice(self, json, &mut out) {
            Ok(false) => return None,
            Ok(true) => {}
            Err(splice::Unscanned) => {
                let mut v = serde_json::from_slice::<Value>(json).ok()?;
                if !self.value(&mut v) {
                    return None;
                }
                out.truncate(prefix.len());
                serde_json::to_writer(&mut out, &v).ok()?;
            }
        }
        out.extend_from_slice(suffix);
        Some(Bytes::from(out))
    }

    /// One framed SSE event (`data: <json>\n\n`), re-framed only when something was stripped.
    pub fn event(self, event: Bytes) -> Bytes {
        if self.is_noop() {
            return event;
        }
        let Some(payload) = event
            .strip_prefix(SSE_DATA)
            .map(|p| p.trim_ascii_end())
            .filter(|p| p.first() == Some(&b'{'))
        else {
            return event;
        };
        self.rewrite(payload, SSE_DATA, b"\n\n").unwrap_or(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn forcing_keeps_the_clients_own_top_logprobs_and_reports_what_it_asked() {
        let mut body = json!({"top_logprobs": 2, "return_token_ids": true});
        let m = body.as_object_mut().unwrap();
        let asked = force(m, true);
        assert_eq!(
            asked,
            Asked {
                logprobs: false,
                token_ids: true,
                prompt_logprobs: false
            }
        );
        assert_eq!(m["logprobs"], true);
        assert_eq!(m["top_logprobs"], 2);
        let mut plain = Map::new();
        force(&mut plain, true);
        assert_eq!(plain["top_logprobs"], 5);
        let mut off = Map::new();
        force(&mut off, false);
        assert!(off.is_empty());
    }

    #[test]
    fn stripping_is_recursive_and_leaves_untouched_events_byte_for_byte() {
        let ev = Bytes::from_static(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-0.1,\"top_logprobs\":[]}]},\"token_ids\":[7]}],\"prompt_token_ids\":[1]}\n\n",
        );
        let out = Asked::default().strip().event(ev.clone());
        assert_eq!(
            &out[..],
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"logprobs\":null}]}\n\n"
        );
        let asked = Asked {
            logprobs: true,
            token_ids: true,
            prompt_logprobs: true,
        };
        assert_eq!(asked.strip().event(ev.clone()), ev);
        let plain = Bytes::from_static(b"data: {\"choices\":[{\"logprobs\":null, \"x\":1}]}\n\n");
        assert_eq!(Asked::default().strip().event(plain.clone()), plain);
        let done = Bytes::from_static(b"data: [DONE]\n\n");
        assert_eq!(Asked::default().strip().event(done.clone()), done);
    }
}

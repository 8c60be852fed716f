//! Invariant 5: neither the private key nor the admin key appears in any response or log line.

use super::report::Report;

/// Needles that must never leave the gateway (invariant 5).
pub struct Secrets {
    needles: Vec<(String, &'static str)>,
}

impl Secrets {
    pub fn new(private_key_hex: &str, admin_key: &str) -> Secrets {
        Secrets {
            needles: vec![
                (private_key_hex.to_ascii_lowercase(), "the private key"),
                (private_key_hex.to_ascii_uppercase(), "the private key"),
                (admin_key.to_owned(), "the admin key"),
            ],
        }
    }

    /// Reports a violation if `bytes` contain a secret.
    pub fn scan(&self, bytes: &[u8], place: &str, report: &std::cell::RefCell<Report>) {
        let text = String::from_utf8_lossy(bytes);
        for (needle, what) in &self.needles {
            if text.contains(needle.as_str()) {
                report
                    .borrow_mut()
                    .violation(5, format!("{what} appears in {place}"));
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    const KEY: &str = "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12";

    fn found(bytes: &[u8]) -> Vec<String> {
        let report = RefCell::new(Report::scratch(0));
        Secrets::new(KEY, "admin-secret").scan(bytes, "a response", &report);
        let report = report.into_inner();
        assert!(report.violations.iter().all(|v| v.invariant == 5));
        report.violations.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn either_key_in_any_case_of_hex_is_a_violation_and_clean_bytes_are_not() {
        assert!(found(br#"{"error":{"message":"all hosts failed"}}"#).is_empty());
        let lower = format!("signing with {KEY}");
        assert_eq!(
            found(lower.as_bytes()),
            ["the private key appears in a response"]
        );
        let upper = format!("key={}", KEY.to_ascii_uppercase());
        assert_eq!(
            found(upper.as_bytes()),
            ["the private key appears in a response"]
        );
        assert_eq!(
            found(b"Authorization: Bearer admin-secret"),
            ["the admin key appears in a response"]
        );
    }
}

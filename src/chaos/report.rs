//! What a run prints: the seed, each step as it is applied, every violation with the step that
//! preceded it, and the final figures. Violations are also kept for the exit code.

use std::io::Write;

use serde_json::json;

use super::schedule::Step;

/// One broken invariant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Violation {
    /// The invariant's number in issue 12 (1 nonces and roots, 2 client answers, 3 recovery,
    /// 4 settlement of granted nonces, 5 secrets).
    pub invariant: u8,
    pub message: String,
    /// Milliseconds since the start of the run.
    pub at_ms: u64,
    /// The last schedule step applied before it was seen.
    pub after_step: Option<Step>,
}

/// The run's record.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    started: std::time::Instant,
    last_step: Option<Step>,
    pub violations: Vec<Violation>,
    /// A scratch record (convergence attempts): violations are kept, not printed.
    quiet: bool,
}

/// Prints one JSON line on stdout (the runner's output format).
pub fn line(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
}

impl Report {
    pub fn new(seed: u64) -> Report {
        Report {
            seed,
            started: std::time::Instant::now(),
            last_step: None,
            violations: Vec::new(),
            quiet: false,
        }
    }

    /// A record whose violations are not printed.
    pub fn scratch(seed: u64) -> Report {
        Report {
            quiet: true,
            ..Report::new(seed)
        }
    }

    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A step is about to be applied.
    pub fn step(&mut self, step: &Step) {
        line(&json!({"chaos": "step", "seed": self.seed, "t_ms": self.elapsed_ms(), "step": step}));
        self.last_step = Some(step.clone());
    }

    pub fn violation(&mut self, invariant: u8, message: String) {
        let v = Violation {
            invariant,
            message,
            at_ms: self.elapsed_ms(),
            after_step: self.last_step.clone(),
        };
        if !self.quiet {
            line(&json!({"chaos": "violation", "seed": self.seed, "violation": v}));
        }
        self.violations.push(v);
    }

    /// Informational line (checks passed, restarts, figures).
    pub fn note(&self, what: &str, detail: serde_json::Value) {
        line(
            &json!({"chaos": what, "seed": self.seed, "t_ms": self.elapsed_ms(), "detail": detail}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::schedule::generate;

    /// Issue 12's output: every violation names the schedule step applied before it.
    #[test]
    fn a_violation_carries_the_step_that_preceded_it() {
        let steps = generate(12, 120_000, Some(20_000), 5);
        let mut report = Report::scratch(12);
        report.violation(2, "before any step".into());
        report.step(&steps[0]);
        report.step(&steps[1]);
        report.violation(1, "after the second step".into());
        let after: Vec<Option<&Step>> = report
            .violations
            .iter()
            .map(|v| v.after_step.as_ref())
            .collect();
        assert_eq!(after, [None, Some(&steps[1])]);
        let printed = serde_json::to_value(&report.violations[1]).unwrap();
        assert_eq!(
            printed["after_step"],
            serde_json::to_value(&steps[1]).unwrap()
        );
        assert_eq!(printed["invariant"], 1);
    }
}

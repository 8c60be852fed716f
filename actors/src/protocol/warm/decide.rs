//! The acceptance decision of LIFECYCLE.md §5, as a pure function of the cold key, the bindings
//! and (only when needed) the chain's answer.

use std::fmt;

use super::GrantAnswer;
use crate::protocol::crypto::Address;

/// Why a signer was accepted, or what is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acceptance {
    /// Step 1: the validator's cold key.
    Cold,
    /// Step 2: the warm key bound to this slot.
    Bound,
    /// Step 3: a warm key bound to another slot of the same validator (binds nothing).
    Sibling,
    /// Step 4: the chain grants it; on the apply path it is bound to the slot now.
    Granted,
    /// Not acceptable.
    Rejected(Rejection),
    /// Step 4 has no answer yet (chain unreachable, slow or not asked): decide later. Never a
    /// fault of the host.
    Unresolved,
}

impl Acceptance {
    /// Accepted by one of the four steps.
    pub fn is_accepted(&self) -> bool {
        matches!(
            self,
            Acceptance::Cold | Acceptance::Bound | Acceptance::Sibling | Acceptance::Granted
        )
    }

    /// Bounded label for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Acceptance::Cold => "cold",
            Acceptance::Bound => "bound",
            Acceptance::Sibling => "sibling",
            Acceptance::Granted => "granted",
            Acceptance::Rejected(r) => r.as_str(),
            Acceptance::Unresolved => "unresolved",
        }
    }
}

/// Why a signer is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The slot already has another warm key bound (bindings are exclusive and sticky).
    SlotBoundToOther { bound: Address },
    /// The chain holds no grant of `validator` for this key.
    NotGranted,
}

impl Rejection {
    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::SlotBoundToOther { .. } => "slot_bound_to_other_key",
            Rejection::NotGranted => "not_granted",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::SlotBoundToOther { bound } => {
                write!(f, "the slot is bound to warm key {bound}")
            }
            Rejection::NotGranted => f.write_str("no warm-key grant on chain"),
        }
    }
}

/// May `recovered` sign for a slot whose validator is `cold`?
///
/// `bound` is the slot's warm binding, `sibling_bound` whether `recovered` is bound to another
/// slot of the same validator, and `chain` is asked only when steps 1–3 do not decide.
pub fn decide(
    cold: &Address,
    bound: Option<&Address>,
    sibling_bound: bool,
    recovered: &Address,
    chain: impl FnOnce() -> GrantAnswer,
) -> Acceptance {
    if recovered == cold {
        return Acceptance::Cold;
    }
    if let Some(bound) = bound {
        return if bound == recovered {
            Acceptance::Bound
        } else {
            Acceptance::Rejected(Rejection::SlotBoundToOther {
                bound: bound.clone(),
            })
        };
    }
    if sibling_bound {
        return Acceptance::Sibling;
    }
    match chain() {
        GrantAnswer::Granted => Acceptance::Granted,
        GrantAnswer::NotGranted => Acceptance::Rejected(Rejection::NotGranted),
        GrantAnswer::Unknown => Acceptance::Unresolved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::crypto::SigningKey;

    fn addr(i: u32) -> Address {
        SigningKey::derive("decide", i).address().clone()
    }

    #[test]
    fn the_order_of_lifecycle_section_5() {
        let (cold, warm, other) = (addr(0), addr(1), addr(2));
        let never = || -> GrantAnswer { unreachable!("the chain must not be asked") };
        assert_eq!(
            decide(&cold, Some(&warm), true, &cold, never),
            Acceptance::Cold
        );
        assert_eq!(
            decide(&cold, Some(&warm), false, &warm, never),
            Acceptance::Bound
        );
        assert_eq!(
            decide(&cold, Some(&warm), true, &other, never),
            Acceptance::Rejected(Rejection::SlotBoundToOther {
                bound: warm.clone()
            })
        );
        assert_eq!(decide(&cold, None, true, &warm, never), Acceptance::Sibling);
        for (answer, want) in [
            (GrantAnswer::Granted, Acceptance::Granted),
            (
                GrantAnswer::NotGranted,
                Acceptance::Rejected(Rejection::NotGranted),
            ),
            (GrantAnswer::Unknown, Acceptance::Unresolved),
        ] {
            assert_eq!(decide(&cold, None, false, &warm, || answer), want);
        }
        assert!(Acceptance::Sibling.is_accepted() && !Acceptance::Unresolved.is_accepted());
    }
}

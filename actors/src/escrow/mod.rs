//! The escrow: its protocol session (plain data) and the actor that drives it.
//!
//! The actor (`actor.rs`, with its mailbox in `actor/mailbox.rs` and its settling effects in
//! `actor/settling.rs`) owns the session and six parts. Each part keeps its state private in
//! its own file and is changed only through its methods:
//!
//! | part | file | owns |
//! |---|---|---|
//! | nonce picker | `picker.rs` | waiting races, the `picker_hold` timer |
//! | nonce book | `book.rs`, `vote_queue.rs` | unsettled nonces, `nonce <n>` timers, the timeout-vote queue (parallel, bounded, retried) |
//! | durability path | `durable.rs`, `ghost.rs`, `links.rs` | append → store ack → grant; the durable nonce; encoded bodies (signed as each leaves); each body's turn on its host's link; ghost inferences; sync-nonce persistence |
//! | fault guard | `guard.rs` | outcome building, held faults, the correlation detector, `fault_release`, last successes |
//! | host routing | `routing.rs` | health view, withheld hosts, panic mode, hedge budget, repair actors |
//! | reachability gate | `reach/mod.rs` | hosts refusing connections since the last answer, the probe interval |
//!
//! Decisions over several parts, without state of their own: `hedging.rs` (hedge and pair),
//! `settle.rs` (what an attempt's end means), `timeouts.rs` (timeout votes), `sync.rs`
//! (`SyncHosts` sends), `repair.rs` (repair plans and steps), `diff_log.rs` (the diffs a host
//! needs: the session's window, or the store below it).
//!
//! | message | handled by |
//! |---|---|
//! | `RequestNonce` | reachability gate (`Primary`); picker (`Primary`, `Retry`); `hedging.rs` over routing (`Hedge`, `Pair`); grant in `durable.rs` |
//! | `ResendGrant` | book (the nonce's payload), durable (bodies from what the host holds) |
//! | `RaceGone` | picker |
//! | `GrantUnused` | book (settled by a timeout vote) |
//! | `AttemptReceipt` | session; book (receipt time); durable (sync nonces dirty); reachability gate (an answer) |
//! | `AttemptEnded` | `settle.rs` judges; book, guard (outcome), routing (repair of a diverged host), reachability gate |
//! | `HealthChanged` | routing, then the picker runs |
//! | `ApplyHealthSettings` | guard (correlation window), live settings |
//! | `SyncHosts` | durable (pending txs made durable), `sync.rs` |
//! | `PlanRepair`, `RepairStep` | `repair.rs` over durable, session, routing (handlers in `actor/repairs.rs`) |
//! | `RepairGaveUp`, `TriggerRepair`, `GetRepairStates`, `ForgetDivergence` | routing (handlers in `actor/repairs.rs`) |
//! | `GetSnapshot`, `Retire`, `InjectPanic`, `InjectStall` | the actor (`actor/mailbox.rs`) |
//! | `BeginDrain`, `FinalizeRound`, `GetFinalState`, `CatchUpAll` | settlement steps (`actor/finalize.rs`) over durable, `sync.rs` |
//!
//! Every other handler is in `actor/mailbox.rs`; timers fire into `actor.rs`,
//! `actor/settling.rs` and `actor/voting.rs` (timeout votes).

mod actor;
pub mod adopt;
pub mod attempt;
mod book;
pub mod budget;
pub mod config;
mod diff_log;
mod durable;
pub mod error;
mod ghost;
mod guard;
mod hedging;
pub mod info;
pub mod key;
pub mod links;
pub mod messages;
pub mod nonce_room;
pub mod nonces;
pub mod pending;
mod picker;
pub mod prelude;
pub mod reach;
mod repair;
mod routing;
pub mod session;
mod settle;
mod sync;
mod timeouts;
mod vote_queue;
mod wire_cache;

pub(crate) use actor::payloads;
pub use actor::{EscrowActor, EscrowDeps};
pub use budget::{BudgetCell, BudgetView, Reservation};
pub use config::EscrowConfig;
pub use error::EscrowError;
pub use info::{EscrowInfo, HostEndpoint};
pub use routing::HostHealth;
pub use session::Session;

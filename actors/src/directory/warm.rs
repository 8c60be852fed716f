//! The directory's warm-key checker, handed to work done outside the escrow actors (the
//! adoption of an escrow verifies the hosts' diffs with it before the escrow exists).

use actix::prelude::*;

use super::Directory;
use crate::protocol::warm::WarmKeyChecker;

/// The warm-key checker every escrow of this directory uses (its grant cache is shared).
#[derive(Debug, Message)]
#[rtype(result = "WarmKeyChecker")]
pub struct GetWarmChecker;

impl Handler<GetWarmChecker> for Directory {
    type Result = MessageResult<GetWarmChecker>;

    fn handle(&mut self, _: GetWarmChecker, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.deps.warm.clone())
    }
}

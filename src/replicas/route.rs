//! Where a request goes when several replicas share one PostgreSQL database: the pure decisions
//! of forwarding (README "Any replica serves any request").

use std::collections::BTreeSet;

use devshard_actors::directory::Board;

use crate::store::postgres::replicas::RemoteEscrow;

/// Where a chat request is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatRoute {
    /// Here (an escrow of the model can take it, or no replica has one: the local path answers
    /// with its usual error).
    Local,
    /// At the owner of this escrow.
    Forward(RemoteEscrow),
    /// Forwarded here already and not servable here: one hop only.
    RefuseSecondHop,
}

/// Whether this replica runs an escrow of `model` that new requests may use: its actor alive,
/// not failed, not settling, not deactivated, and admitting requests (below its nonce limit, a
/// routable host, something spendable: `BoardEscrow::takes_requests`).
pub fn local_usable(board: &Board, model: &str, deactivated: &BTreeSet<String>) -> bool {
    board
        .escrows
        .iter()
        .any(|e| e.info.model == model && e.takes_requests(deactivated))
}

/// The route of a chat request for `model`: local when usable here, else (unless it was
/// forwarded here) to one of the other replicas' escrows of the model, chosen by `spread`.
pub fn chat_route(
    usable_here: bool,
    forwarded_in: bool,
    model: &str,
    remote: &[RemoteEscrow],
    spread: usize,
) -> ChatRoute {
    if usable_here {
        return ChatRoute::Local;
    }
    if forwarded_in {
        return ChatRoute::RefuseSecondHop;
    }
    let candidates: Vec<&RemoteEscrow> = remote.iter().filter(|r| r.model == model).collect();
    match candidates.len() {
        0 => ChatRoute::Local,
        n => candidates
            .get(spread % n)
            .map_or(ChatRoute::Local, |r| ChatRoute::Forward((*r).clone())),
    }
}

/// The escrow id of an admin or debug path that concerns one escrow
/// (`/v1/admin/escrows/{id}[/…]`, `/v1/debug/escrows/{id}`), if any.
pub fn escrow_of_path(path: &str) -> Option<&str> {
    let rest = path
        .strip_prefix("/v1/admin/escrows/")
        .or_else(|| path.strip_prefix("/v1/debug/escrows/"))?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// The models of this replica's board and of every other replica's live escrows, sorted, once.
pub fn all_models(local: &[String], remote: &[RemoteEscrow]) -> Vec<String> {
    let mut models: Vec<String> = local
        .iter()
        .cloned()
        .chain(remote.iter().map(|r| r.model.clone()))
        .filter(|m| !m.is_empty())
        .collect();
    models.sort();
    models.dedup();
    models
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(id: &str, model: &str, owner: &str) -> RemoteEscrow {
        RemoteEscrow {
            escrow_id: id.into(),
            model: model.into(),
            owner: owner.into(),
            address: format!("http://{owner}"),
        }
    }

    #[test]
    fn local_first_then_an_owner_of_the_model_never_a_second_hop() {
        let others = [
            remote("1", "m", "a"),
            remote("2", "x", "b"),
            remote("3", "m", "c"),
        ];
        assert_eq!(chat_route(true, false, "m", &others, 0), ChatRoute::Local);
        assert_eq!(chat_route(true, true, "m", &others, 0), ChatRoute::Local);
        assert_eq!(
            chat_route(false, false, "m", &others, 0),
            ChatRoute::Forward(others[0].clone())
        );
        assert_eq!(
            chat_route(false, false, "m", &others, 1),
            ChatRoute::Forward(others[2].clone())
        );
        assert_eq!(
            chat_route(false, true, "m", &others, 0),
            ChatRoute::RefuseSecondHop
        );
        // Nobody serves it: the local path answers (404 or its 503).
        assert_eq!(chat_route(false, false, "y", &others, 0), ChatRoute::Local);
    }

    #[test]
    fn escrow_paths_and_models() {
        assert_eq!(escrow_of_path("/v1/admin/escrows/42"), Some("42"));
        assert_eq!(escrow_of_path("/v1/admin/escrows/42/sync"), Some("42"));
        assert_eq!(escrow_of_path("/v1/debug/escrows/7"), Some("7"));
        assert_eq!(escrow_of_path("/v1/admin/escrows"), None);
        assert_eq!(escrow_of_path("/v1/admin/escrows/"), None);
        assert_eq!(escrow_of_path("/v1/admin/participants"), None);
        let models = all_models(
            &["b".into(), "a".into()],
            &[remote("1", "a", "x"), remote("2", "c", "y")],
        );
        assert_eq!(models, ["a", "b", "c"]);
    }
}

//! [`WarmKeyChecker`]: step 4 of LIFECYCLE.md §5 for real — the grant cache in front of the
//! chain query, with the `warm_key_check_failed` log stage and the check metrics.
//!
//! Both marker type URLs are asked (newer chains first); the key is granted if either lists it,
//! not granted if both answered without it, and the check *failed* otherwise. A failed check is
//! never cached and is never the host's fault: the caller holds the signature and retries.

use std::sync::Arc;

use slog::{warn, Logger};

use super::{
    cache::GrantCache, grants::GrantsError, GrantAnswer, GrantsSource, WarmKeyMetrics,
    GRANT_TYPE_URLS,
};
use crate::protocol::crypto::Address;

/// The answer of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    Granted,
    NotGranted,
    Failed(GrantsError),
}

/// Cache + chain query. Cheap to clone; its futures run on the caller's arbiter.
#[derive(Debug, Clone)]
pub struct WarmKeyChecker {
    cache: Arc<GrantCache>,
    source: Arc<dyn GrantsSource + Send + Sync>,
    metrics: WarmKeyMetrics,
    log: Logger,
}

impl WarmKeyChecker {
    pub fn new(
        cache: Arc<GrantCache>,
        source: Arc<dyn GrantsSource + Send + Sync>,
        metrics: WarmKeyMetrics,
        log: Logger,
    ) -> WarmKeyChecker {
        WarmKeyChecker {
            cache,
            source,
            metrics,
            log,
        }
    }

    /// A checker over the chain REST API at `rest_url`, with a fresh cache.
    pub fn rest(
        rest_url: &str,
        clock: crate::clock::SharedClock,
        metrics: WarmKeyMetrics,
        log: Logger,
    ) -> WarmKeyChecker {
        WarmKeyChecker::new(
            Arc::new(GrantCache::new(clock)),
            Arc::new(super::RestGrants::new(rest_url, super::GRANTS_TIMEOUT)),
            metrics,
            log,
        )
    }

    /// The cache, which is also the synchronous resolver of the gateway's state machines.
    pub fn cache(&self) -> &Arc<GrantCache> {
        &self.cache
    }

    pub fn metrics(&self) -> &WarmKeyMetrics {
        &self.metrics
    }

    /// Is `warm` granted by `validator`? Cached answers first, then the chain.
    pub async fn check(&self, validator: &Address, warm: &Address) -> CheckOutcome {
        match self.cache.get(validator, warm) {
            GrantAnswer::Granted => {
                self.count("cached");
                return CheckOutcome::Granted;
            }
            GrantAnswer::NotGranted => {
                self.count("cached");
                return CheckOutcome::NotGranted;
            }
            GrantAnswer::Unknown => {}
        }
        let mut failure = None;
        for type_url in GRANT_TYPE_URLS {
            match self.source.grantees(validator, type_url).await {
                Ok(list) if list.contains(warm) => {
                    self.remember(validator, warm, true);
                    self.count("granted");
                    return CheckOutcome::Granted;
                }
                Ok(_) => {}
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) => {
                self.count("failed");
                warn!(self.log, "warm-key grant check failed; the signature is held";
                    "stage" => "warm_key_check_failed", "validator" => validator.short(),
                    "warm_key" => warm.as_str(), "error" => e.to_string());
                CheckOutcome::Failed(e)
            }
            None => {
                self.remember(validator, warm, false);
                self.count("not_granted");
                CheckOutcome::NotGranted
            }
        }
    }

    fn remember(&self, validator: &Address, warm: &Address, granted: bool) {
        self.cache.put(validator, warm, granted);
        self.metrics
            .cache_entries
            .set(i64::try_from(self.cache.len()).unwrap_or(i64::MAX));
    }

    fn count(&self, result: &str) {
        self.metrics.checks.with_label_values(&[result]).inc();
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        sync::{
            atomic::{AtomicUsize, Ordering},
            Mutex,
        },
    };

    use futures::future::LocalBoxFuture;

    use super::*;
    use crate::clock::SystemClock;

    /// Answers from a table; `None` = the query fails.
    #[derive(Debug, Default)]
    struct Table {
        lists: Mutex<HashMap<String, Option<Vec<Address>>>>,
        calls: AtomicUsize,
    }

    impl GrantsSource for Table {
        fn grantees(
            &self,
            _validator: &Address,
            type_url: &str,
        ) -> LocalBoxFuture<'static, Result<Vec<Address>, GrantsError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let answer = self.lists.lock().unwrap().get(type_url).cloned().flatten();
            let url = type_url.to_owned();
            Box::pin(async move { answer.ok_or(GrantsError::Status { url, status: 503 }) })
        }
    }

    fn checker(table: Arc<Table>) -> WarmKeyChecker {
        WarmKeyChecker::new(
            Arc::new(GrantCache::new(Arc::new(SystemClock))),
            table,
            WarmKeyMetrics::detached().unwrap(),
            Logger::root(slog::Discard, slog::o!()),
        )
    }

    #[tokio::test]
    async fn either_type_url_grants_and_positive_answers_are_cached() {
        let (v, w) = (Address::unchecked("gonka1v"), Address::unchecked("gonka1w"));
        let table = Arc::new(Table::default());
        table.lists.lock().unwrap().extend([
            (GRANT_TYPE_URLS[0].to_owned(), Some(vec![])),
            (GRANT_TYPE_URLS[1].to_owned(), Some(vec![w.clone()])),
        ]);
        let c = checker(table.clone());
        assert_eq!(c.check(&v, &w).await, CheckOutcome::Granted);
        assert_eq!(table.calls.load(Ordering::SeqCst), 2);
        assert_eq!(c.check(&v, &w).await, CheckOutcome::Granted);
        assert_eq!(
            table.calls.load(Ordering::SeqCst),
            2,
            "answered from the cache"
        );
        assert_eq!(c.metrics().checks.with_label_values(&["cached"]).get(), 1);
        assert_eq!(c.metrics().cache_entries.get(), 1);
    }

    #[tokio::test]
    async fn a_failed_query_is_not_cached_and_not_a_denial() {
        let (v, w) = (Address::unchecked("gonka1v"), Address::unchecked("gonka1w"));
        let table = Arc::new(Table::default());
        table
            .lists
            .lock()
            .unwrap()
            .insert(GRANT_TYPE_URLS[0].to_owned(), Some(vec![]));
        let c = checker(table.clone());
        assert!(matches!(c.check(&v, &w).await, CheckOutcome::Failed(_)));
        assert_eq!(c.cache().get(&v, &w), GrantAnswer::Unknown);
        table
            .lists
            .lock()
            .unwrap()
            .insert(GRANT_TYPE_URLS[1].to_owned(), Some(vec![]));
        assert_eq!(c.check(&v, &w).await, CheckOutcome::NotGranted);
        assert_eq!(c.cache().get(&v, &w), GrantAnswer::NotGranted);
        assert_eq!(c.metrics().checks.with_label_values(&["failed"]).get(), 1);
    }
}

//! The ledger's write batches stay short whatever is queued at once.

use tokio::sync::mpsc::unbounded_channel;

use super::super::ledger::Settlement;

use super::*;

fn settlement(nonce: u64) -> Settlement {
    Settlement {
        escrow_id: "7".into(),
        nonce,
        inference: String::new(),
        input_tokens: 1,
        output_tokens: 1,
        reserved_cost: 2,
        actual_cost: 2,
        fee: 1,
        settled_ms: 0,
    }
}

/// The rotating hour-long run: 442 517 settlements queued at once became one transaction that
/// held the shared SQLite file's write lock for seconds, and an escrow's durable write failed
/// with "database is locked" after the 5 s busy timeout.
#[test]
fn rotating_long_run_a_settle_of_thousands_is_written_in_transactions_of_at_most_max_batch_rows() {
    let ops = settle_ops((0..1_000).map(settlement).collect());
    let sizes: Vec<usize> = ops.iter().map(Op::weight).collect();
    assert_eq!(
        sizes,
        vec![MAX_BATCH, MAX_BATCH, MAX_BATCH, 1_000 - 3 * MAX_BATCH]
    );
    assert!(settle_ops(Vec::new()).is_empty());

    let (tx, mut rx) = unbounded_channel();
    let mut ops = ops.into_iter();
    let first = ops.next().unwrap();
    for op in ops {
        tx.send(op).unwrap();
    }
    tx.send(Op::Prune(0)).unwrap();
    let rows = |b: &Batch| b.ops.iter().map(Op::weight).sum::<usize>();
    let mut batches = vec![rows(&next_batch(first, &mut rx))];
    while let Ok(op) = rx.try_recv() {
        batches.push(rows(&next_batch(op, &mut rx)));
    }
    assert_eq!(
        batches,
        vec![MAX_BATCH, MAX_BATCH, MAX_BATCH, 1_000 - 3 * MAX_BATCH + 1],
        "each full chunk its own transaction; the last chunk and the prune together"
    );
}

/// Run I (the rotating hour-long run): after its last restart the gateway settled 487 429 nonces
/// at once and grew from 241 MB to 23 GB in a minute, until the kernel killed it: each chunk
/// kept the capacity of every settlement after it (`Vec::split_off`), about n² / 512 of them.
#[test]
fn rotating_long_run_a_settle_of_487_429_nonces_holds_each_chunk_at_its_own_size() {
    let n = 487_429;
    let ops = settle_ops((0..n).map(settlement).collect());
    let mut held = 0;
    for op in &ops {
        let Op::Settle(chunk) = op else {
            panic!("only settlements")
        };
        assert!(chunk.capacity() <= MAX_BATCH, "{}", chunk.capacity());
        held += chunk.capacity();
    }
    assert_eq!(ops.len(), (n as usize).div_ceil(MAX_BATCH));
    assert_eq!(
        held, n as usize,
        "the chunks hold the settlements and no more"
    );
}

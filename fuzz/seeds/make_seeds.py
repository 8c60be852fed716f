#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/seed-*.

Real wire data where it exists: the protobuf encodings, diffs, receipts and signatures of
/work/shared/vectors/devshard-vectors.json (copied to actors/tests/data/), the example config,
and hand-written shapes of the host and chain API answers. Re-run after changing a target:
`python3 fuzz/seeds/make_seeds.py`.
"""
import base64, json, os, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(ROOT, "actors", "tests", "data", "devshard-vectors.json")
v = json.load(open(VECTORS))
b64 = lambda h: base64.b64encode(bytes.fromhex(h)).decode()
tx_hexes = [v["start"]["devshard_tx_proto_hex"], v["extra_confirm_start"]["devshard_tx_proto_hex"],
            v["finish"]["devshard_tx_proto_hex"], v["extra_finalize_round"]["devshard_tx_proto_hex"]]
receipt = {"state_sig": v["state_sig"]["signature"]["signature_base64"],
           "state_hash": b64(v["state_sig"]["fields"]["state_root_hex"]), "nonce": 1,
           "receipt": v["receipt"]["signature"]["signature_base64"], "confirmed_at": 1700000001}
meta = {"mempool": [b64(h) for h in tx_hexes]}
chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
err = {"error": {"message": "simulated ML node failure", "type": "InternalServerError", "code": 500}}
sse = lambda *evs: "".join(f"data: {e}\n\n" for e in evs).encode()
J = lambda o: json.dumps(o, separators=(",", ":"))

seeds = {
    "sse_parser": [
        b"\x07" + sse(J({"devshard_receipt": receipt}), J(chunk), "[DONE]", J({"devshard_meta": meta})),
        b"\x01" + sse(J({"devshard_receipt": receipt}), J(err), "[DONE]"),
        b"\x1e" + b"data: " + J(chunk).encode() + b"\r\n\r\n: comment\r\nevent: x\r\ndata: [DONE]",
        b"\x00" + sse(J({"devshard_receipt": None}), J({"devshard_meta": {"mempool": ["!garbled!"]}})),
        b"\x05" + J({**receipt, "mempool": meta["mempool"]}).encode(),
    ],
    "host_responses": [
        b"\x01" + b'{"message":"timestamp drift too large"}',
        b"\x02" + b'{"message":"restricted to escrow owner"}',
        b"\x03" + b'{"message":"session not found"}',
        b"\x06" + b'{"message":"escrow not found"}',
        b"\x08" + b"<html>bad gateway</html>",
        b"\x00" + J({"devshard_receipt": receipt}).encode(),
        b"\x00" + J({"devshard_meta": meta}).encode(),
        b"\x00" + J({**receipt, "mempool": meta["mempool"]}).encode(),
        b"\x00" + J({"signatures": {"1": receipt["state_sig"], "2": receipt["receipt"]}}).encode(),
        b"\x00" + J({"accepted": True, "signature": receipt["state_sig"], "reason": ""}).encode(),
        b"\x00" + J({"txs": meta["mempool"]}).encode(),
    ],
    "chat_normalize": [
        b'{"messages":[{"role":"user","content":"hi"}]}',
        b'{"model":"model-b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":7}',
        b'{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}],"max_completion_tokens":9,"max_tokens":12,"temperature":0.7,"n":1e2}',
        v["prompt_hash"]["body_utf8"].encode(),
        b'{"messages":[],"model":3}',
    ],
    "settings_merge": [
        b'{"health":{"hedge_budget":0.02}}',
        b'{"health":{"strike_half_life_ms":null,"base_ejection_ms":1000},"chain_poll":{"chain_phase_poll_interval_ms":30000}}',
        b'{"chain_poll":{"participants_poll_interval_ms":1,"poc_request_mode":"relaxed"}}',
        b'{"health":{"no_such":1},"other":{}}',
    ],
    "config_toml": [open(os.path.join(ROOT, "deploy", "config.example.toml"), "rb").read(),
                    b'listen = "127.0.0.1:0"\nworkers = 0\n[chain_poll]\nchain_phase_poll_interval = "20s"\n',
                    b'default_access_mode = "admin_only"\n[model_access]\n"m" = "open"\n'],
    "proto_decode": [bytes.fromhex(h) for h in tx_hexes] + [
        bytes.fromhex(v["diff"]["diff_content_signed_proto_hex"]),
        bytes.fromhex(v["diff"]["diff_content_wire_txs_proto_hex"]),
        bytes.fromhex(v["receipt"]["executor_receipt_content_proto_hex"]),
        bytes.fromhex(v["timeout_vote"]["timeout_vote_content_proto_hex"]),
        v["diff"]["wire_json"].encode(),
    ],
    "bech32_address": [v["keys"][k]["address"].encode() for k in v["keys"]] + [
        v["keys"]["gateway"]["address"].upper().encode(), b"cosmos1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqnrql8a",
        v["keys"]["host_a"]["private_key_hex"].encode()],
    "chain_snapshots": [
        J({"block_height": "120", "phase": "Inference", "latest_epoch": {"index": 3, "poc_start_block_height": "100"},
           "epoch_stages": {"poc_start": 100, "poc_validation_end": "110", "set_new_validators": 111, "next_poc_start": 200},
           "active_confirmation_poc_event": {"phase": "CONFIRMATION_POC_GENERATION", "trigger_height": "118"}}).encode(),
        J({"active_participants": {"participants": [{"index": v["keys"]["host_a"]["address"], "inference_url": "http://h",
           "weight": "1200", "models": ["m"], "ml_nodes": [{"ml_nodes": [{"node_id": "n1", "poc_weight": 5, "timeslot_allocation": [True, False]}]}]}]}}).encode(),
        J({"mlnodes": [{"node_id": "n1", "poc_validation_inference": True}, {"node_id": 7}]}).encode(),
        b"Wed, 21 Oct 2015 07:28:00 GMT", b"120",
        J({"found": True, "escrow": {"id": "42", "creator": v["keys"]["gateway"]["address"], "amount": "1000000",
           "slots": [v["keys"]["host_a"]["address"], {"validator_address": v["keys"]["host_b"]["address"]}],
           "epoch_index": "3", "token_price": "1", "fee_per_nonce": "2", "model": "m"}}).encode(),
        J({"params": {"devshard_escrow_params": {"refusal_timeout": "60", "max_nonce": "1000"}}}).encode(),
    ],
}

for target, items in seeds.items():
    d = os.path.join(ROOT, "fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    for i, data in enumerate(items):
        open(os.path.join(d, f"seed-{i:02}"), "wb").write(data)
print("wrote", sum(map(len, seeds.values())), "seeds", file=sys.stderr)

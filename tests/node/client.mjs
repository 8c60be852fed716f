// The official `openai` npm package against a running gateway: a whole answer, a stream, a
// stream with logprobs asked, and errors (an invalid message, a wrong key). Exits non-zero with
// the reason on the first mismatch. Usage: node client.mjs BASE_URL API_KEY MODEL
import assert from "node:assert/strict";
import OpenAI from "openai";

const [base, key, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60_000 });
const messages = [{ role: "user", content: "hello from the node client" }];

// Non-streaming.
const { data: whole, response } = await client.chat.completions
  .create({ model, messages, max_tokens: 8 })
  .withResponse();
assert.equal(whole.object, "chat.completion");
assert.ok(whole.choices[0].message.content.length > 0, "content");
assert.equal(whole.usage.completion_tokens, 8, "max_tokens honoured");
assert.ok(response.headers.get("x-request-id"), "X-Request-Id");
assert.ok(response.headers.get("x-devshard-escrow"), "X-Devshard-Escrow");
assert.ok(whole.choices[0].logprobs == null, "logprobs stripped when not asked");

// Streaming.
let text = "", chunks = 0, finish = null;
for await (const chunk of await client.chat.completions.create({ model, messages, stream: true, max_tokens: 6 })) {
  chunks += 1;
  text += chunk.choices[0]?.delta?.content ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
  assert.equal(chunk.choices[0]?.token_ids, undefined, "token ids stripped when not asked");
}
assert.ok(chunks >= 6 && text.length > 0, `stream: ${chunks} chunks, ${JSON.stringify(text)}`);
assert.ok(finish === "length" || finish === "stop", `finish_reason ${finish}`);

// Streaming with logprobs asked: they reach the client.
let withLogprobs = 0;
for await (const chunk of await client.chat.completions.create({
  model, messages, stream: true, max_tokens: 3, logprobs: true, top_logprobs: 2,
})) {
  const lp = chunk.choices[0]?.logprobs?.content;
  if (lp && lp.length) {
    withLogprobs += 1;
    assert.equal(lp[0].top_logprobs.length, 2);
  }
}
assert.equal(withLogprobs, 3, "one logprob entry per token");

// An invalid message: a 400 naming the parameter.
await assert.rejects(
  client.chat.completions.create({ model, messages: [{ content: "no role" }] }),
  (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 400);
    assert.equal(e.param, "messages[0].role");
    return true;
  },
);
// An unknown parameter.
await assert.rejects(
  client.chat.completions.create({ model, messages, frobnicate: 1 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "frobnicate",
);
// A wrong key.
const stranger = new OpenAI({ baseURL: `${base}/v1`, apiKey: "not-a-key", maxRetries: 0 });
await assert.rejects(
  stranger.chat.completions.create({ model, messages }),
  (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
);
// The model list.
const models = [];
for await (const m of client.models.list()) models.push(m.id);
assert.ok(models.includes(model), `models: ${models}`);

console.log(`ok: the openai npm client — whole answer, ${chunks}-chunk stream, logprobs when asked, 400 messages[0].role, 400 frobnicate, 401, models`);

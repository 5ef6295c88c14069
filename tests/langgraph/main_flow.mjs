// The main flow of the LangGraph API from LangGraph's JavaScript client
// (`@langchain/langgraph-sdk`), against `tollgate serve`: assistants, a
// thread, a run waited for, a stream of updates, an interrupt answered with
// `Command({resume})`, the thread's state and history, and the token as
// `x-api-key`. Run by scripts/langgraph-sdk (TOLLGATE_LG_URL,
// TOLLGATE_LG_TOKEN_URL, TOLLGATE_LG_TOKEN).
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

const url = process.env.TOLLGATE_LG_URL;
const client = new Client({ apiUrl: url });

const assistants = await client.assistants.search({ limit: 100 });
const names = assistants.map((a) => a.graph_id);
for (const name of ["echo", "steps", "gate", "chat"]) assert.ok(names.includes(name), name);
const echo = await client.assistants.get("echo");
assert.equal(echo.graph_id, "echo");

// A tag of this run's own: the database may hold earlier runs' threads.
const tag = Math.random().toString(36).slice(2);
const thread = await client.threads.create({ metadata: { from: "js", tag } });
assert.equal(thread.status, "idle");
const out = await client.runs.wait(thread.thread_id, "echo", { input: { text: "js" } });
assert.deepEqual(out.log, ["echo:js"]);

const updates = [];
let first = null;
let last = null;
for await (const chunk of client.runs.stream(null, "steps", {
  input: { text: "s" },
  streamMode: "updates",
})) {
  first ??= chunk.event;
  last = chunk.event;
  if (chunk.event === "updates") updates.push(chunk.data);
}
assert.equal(first, "metadata");
assert.deepEqual(updates, [{ a: { log: ["a"] } }, { b: { log: ["b"] } }, { c: { log: ["c"] } }]);

const gated = await client.threads.create();
const paused = await client.runs.wait(gated.thread_id, "gate", { input: { text: "refund" } });
assert.deepEqual(paused.__interrupt__[0].value, { question: "approve refund?" });
const state = await client.threads.getState(gated.thread_id);
assert.deepEqual(state.next, ["gate"]);
const done = await client.runs.wait(gated.thread_id, "gate", { command: { resume: "yes" } });
assert.equal(done.answer, "yes");
const history = await client.threads.getHistory(gated.thread_id, { limit: 10 });
assert.deepEqual(
  history.map((h) => h.metadata.source),
  ["loop", "input"],
);
const found = await client.threads.search({ metadata: { from: "js", tag } });
assert.deepEqual(found.map((t) => t.thread_id), [thread.thread_id]);

// The token as x-api-key.
const guarded = new Client({
  apiUrl: process.env.TOLLGATE_LG_TOKEN_URL,
  apiKey: process.env.TOLLGATE_LG_TOKEN,
});
const keyed = await guarded.runs.wait(null, "echo", { input: { text: "k" } });
assert.deepEqual(keyed.log, ["echo:k"]);
const refused = new Client({ apiUrl: process.env.TOLLGATE_LG_TOKEN_URL, apiKey: "wrong" });
await assert.rejects(() => refused.assistants.search(), (error) => error.status === 401 || /401/.test(String(error)));
console.log("langgraph-sdk (JavaScript): main flow ok");

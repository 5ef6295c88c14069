// The React front-end (app.jsx, bundled by scripts/langgraph-sdk with
// esbuild) in headless Chromium, driven over WebDriver: `useStream`
// against tollgate's LangGraph API. A chat with a blueprint agent whose
// reply streams (tokens on the page before the run ends), and a graph
// that asks before it answers, approved from the page. Run by
// scripts/langgraph-sdk: TOLLGATE_LG_URL (a server allowing any origin),
// TOLLGATE_CHROMEDRIVER, TOLLGATE_REACT_DIR (index.html and bundle.js).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { Client } from "@langchain/langgraph-sdk";

const api = process.env.TOLLGATE_LG_URL;
const dir = process.env.TOLLGATE_REACT_DIR;
const chromium = process.env.TOLLGATE_CHROMIUM ?? "/usr/bin/chromium";

// The page, served from an origin of its own.
const files = { "/": ["index.html", "text/html"], "/bundle.js": ["bundle.js", "text/javascript"] };
const pages = http.createServer((request, response) => {
  const file = files[new URL(request.url, "http://page").pathname];
  if (!file) {
    response.writeHead(404).end();
    return;
  }
  response.writeHead(200, { "content-type": file[1] }).end(readFileSync(path.join(dir, file[0])));
});
await new Promise((resolve) => pages.listen(0, "127.0.0.1", resolve));
const page = `http://127.0.0.1:${pages.address().port}/?api=${encodeURIComponent(api)}`;

const port = await new Promise((resolve) => {
  const probe = net.createServer().listen(0, "127.0.0.1", () => {
    const { port } = probe.address();
    probe.close(() => resolve(port));
  });
});
const driver = spawn(process.env.TOLLGATE_CHROMEDRIVER, [`--port=${port}`], { stdio: "ignore" });
const webdriver = `http://127.0.0.1:${port}`;

/** Polls `check` every 50 ms until it returns a truthy value (within `ms`). */
async function until(what, check, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch {
      // Not up yet.
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function call(method, route, body) {
  const response = await fetch(webdriver + route, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${method} ${route}: ${JSON.stringify(answer.value)}`);
  return answer.value;
}

let session;
try {
  await until("chromedriver", async () => (await fetch(`${webdriver}/status`)).ok);
  const args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-dev-shm-usage", "--window-size=1000,800"];
  const capabilities = { browserName: "chrome", "goog:chromeOptions": { binary: chromium, args } };
  session = (await call("POST", "/session", { capabilities: { alwaysMatch: capabilities } })).sessionId;
  const run = (script) => call("POST", `/session/${session}/execute/sync`, { script, args: [] });
  const text = (id) => run(`return document.getElementById(${JSON.stringify(id)})?.textContent ?? null`);
  const click = (id) => run(`document.getElementById(${JSON.stringify(id)}).click()`);
  await call("POST", `/session/${session}/url`, { url: page });
  await until("the page", async () => (await text("send")) === "Send");

  // The chat: the user's message and the agent's streamed reply.
  await click("send");
  const shown = () =>
    run("return [...document.querySelectorAll('#messages li')].map((li) => [li.dataset.type, li.textContent])");
  await until("the agent's reply", async () =>
    (await text("chat-loading")) === "false" && (await shown()).length === 2);
  assert.equal(await text("chat-error"), "");
  assert.deepEqual(await shown(), [["human", "Hi there"], ["ai", "Hello, Ann!"]]);
  const seen = await run("return window.seen");
  assert.ok(seen.length > 1, `the reply arrived in pieces: ${JSON.stringify(seen)}`);
  assert.ok("Hello, Ann!".startsWith(seen[0]) && seen[0] !== "Hello, Ann!", JSON.stringify(seen));
  const thread = await text("chat-thread");
  const state = await new Client({ apiUrl: api }).threads.getState(thread);
  assert.deepEqual(state.values.messages.map((m) => m.content), ["Hi there", "Hello, Ann!"]);

  // The gate: asked, then approved from the page.
  await click("ask");
  await until("the question", async () => (await text("question")) === "approve refund?")
    .catch(async (error) => {
      throw new Error(`${error.message}; the page shows: ${await run("return document.body.innerText")}`);
    });
  await click("approve");
  await until("the answer", async () => (await text("answer")) === "yes");
  assert.equal(await text("log"), "gate");
  assert.equal(await text("question"), "");
  assert.equal(await text("gate-error"), "");
  console.log("langgraph-sdk (React useStream in Chromium): chat and approval ok");
} finally {
  if (session) await call("DELETE", `/session/${session}`).catch(() => {});
  driver.kill();
  pages.close();
}

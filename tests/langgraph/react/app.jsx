// A chat front-end built on `useStream`, the React hook of
// `@langchain/langgraph-sdk`, as LangGraph's own examples build one,
// pointed at tollgate's LangGraph API (`?api=URL`). Two panes: a blueprint
// agent that streams its reply (`chat`), and a graph that asks before it
// answers (`gate`), resumed with `Command({resume})`. What the page shows
// is read back by use_stream.mjs through WebDriver; every text the agent's
// message had while streaming is kept in `window.seen`.
import React, { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const apiUrl = new URLSearchParams(window.location.search).get("api");
window.seen = [];

const text = (content) => (typeof content === "string" ? content : JSON.stringify(content));

function Chat() {
  // The thread kept by the page, as LangGraph's examples keep it.
  const [threadId, setThreadId] = useState(null);
  const stream = useStream({
    apiUrl,
    assistantId: "chat",
    messagesKey: "messages",
    threadId,
    onThreadId: setThreadId,
  });
  const ai = stream.messages.filter((message) => message.type === "ai").map((m) => text(m.content));
  useEffect(() => {
    if (ai.length > 0 && window.seen[window.seen.length - 1] !== ai[ai.length - 1]) {
      window.seen.push(ai[ai.length - 1]);
    }
  });
  const send = () => stream.submit({ messages: [{ type: "human", content: "Hi there" }] });
  return (
    <section id="chat">
      <button id="send" onClick={send}>Send</button>
      <p id="chat-loading">{String(stream.isLoading)}</p>
      <p id="chat-thread">{threadId ?? ""}</p>
      <p id="chat-error">{stream.error ? String(stream.error) : ""}</p>
      <ol id="messages">
        {stream.messages.map((message) => (
          <li key={message.id} data-type={message.type}>{text(message.content)}</li>
        ))}
      </ol>
    </section>
  );
}

function Gate() {
  const stream = useStream({ apiUrl, assistantId: "gate" });
  const ask = () => stream.submit({ text: "refund" });
  const approve = () => stream.submit(undefined, { command: { resume: "yes" } });
  return (
    <section id="gate">
      <button id="ask" onClick={ask}>Ask</button>
      <button id="approve" onClick={approve}>Approve</button>
      <p id="gate-loading">{String(stream.isLoading)}</p>
      <p id="gate-error">{stream.error ? String(stream.error) : ""}</p>
      <p id="question">{stream.interrupt ? stream.interrupt.value.question : ""}</p>
      <p id="answer">{stream.values?.answer ?? ""}</p>
      <p id="log">{(stream.values?.log ?? []).join(",")}</p>
      <pre id="gate-values">{JSON.stringify(stream.values)}</pre>
    </section>
  );
}

createRoot(document.getElementById("root")).render(
  <>
    <Chat />
    <Gate />
  </>,
);

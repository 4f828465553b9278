// A chat page on LangGraph's React hook useStream, for tests/acceptance/test_usestream.py.
// The test sets window.LT = {apiUrl, apiKey, assistantId, history} before the page runs
// (history: the hook's fetchStateHistory, true in Agent Chat UI, unset by default); the thread
// is in the URL (?threadId=...), as in Agent Chat UI, so a reload reopens it.
import { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const config = window.LT;
// Every render's view of the stream, so the test can tell what arrived while the run went on.
window.__renders = [];
window.__errors = [];

function textOf(message) {
  const c = message.content;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p.text ?? "")).join("");
  return "";
}

function App() {
  const [threadId, setThreadId] = useState(
    new URLSearchParams(window.location.search).get("threadId"),
  );
  const [text, setText] = useState("");
  const stream = useStream({
    apiUrl: config.apiUrl,
    apiKey: config.apiKey,
    assistantId: config.assistantId,
    messagesKey: "messages",
    ...(config.history ? { fetchStateHistory: true } : {}),
    threadId,
    onThreadId: (id) => {
      setThreadId(id);
      const url = new URL(window.location.href);
      url.searchParams.set("threadId", id);
      window.history.replaceState(null, "", url);
    },
    onError: (error) => window.__errors.push(String(error?.message ?? error)),
  });
  const messages = stream.messages;
  const interrupt = stream.interrupt;

  useEffect(() => {
    window.__renders.push({
      loading: stream.isLoading,
      messages: messages.map((m) => ({ id: m.id, type: m.type, text: textOf(m) })),
      interrupt: interrupt ? interrupt.value : null,
    });
  });

  const send = (event) => {
    event.preventDefault();
    // An id of the client's own, as Agent Chat UI sends: the thread keeps the message as sent.
    const id = crypto.randomUUID();
    window.__sent = [...(window.__sent ?? []), id];
    stream.submit({ messages: [{ id, type: "human", content: text }] });
    setText("");
  };
  const approve = async () => {
    const options = { command: { resume: { approved: true, comment: "send it" } } };
    if (config.history) {
      // As useStream 1.8 (Agent Chat UI's) does with fetchStateHistory: the run goes on from
      // the checkpoint shown, here the thread's head.
      options.checkpoint = (await stream.client.threads.getState(threadId)).checkpoint;
    }
    stream.submit(undefined, options);
  };

  return (
    <main id="app" data-loading={String(stream.isLoading)} data-thread={threadId ?? ""}>
      <ol id="messages">
        {messages.map((m, i) => (
          <li key={m.id ?? i} className="message" data-type={m.type} data-id={m.id ?? ""}>
            <span className="text">{textOf(m)}</span>
            {(m.tool_calls ?? []).map((call) => (
              <span key={call.id} className="tool-call" data-name={call.name}>
                {call.name}({JSON.stringify(call.args)})
              </span>
            ))}
          </li>
        ))}
      </ol>
      {interrupt ? (
        <section id="interrupt" data-id={interrupt.id ?? ""}>
          <pre className="value">{JSON.stringify(interrupt.value)}</pre>
          <button id="approve" onClick={approve} disabled={stream.isLoading}>
            Approve
          </button>
        </section>
      ) : null}
      <form id="chat" onSubmit={send}>
        <input id="input" value={text} onChange={(e) => setText(e.target.value)} />
        <button id="send" type="submit" disabled={stream.isLoading || !text}>
          Send
        </button>
      </form>
      <pre id="values">{JSON.stringify(stream.values ?? null)}</pre>
      <div id="error">{stream.error ? String(stream.error.message ?? stream.error) : ""}</div>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);

// Stream a chat from Node (20 or later): built-in fetch, no npm packages.
//
//   CHATD_BASE_URL=http://127.0.0.1:8080 CHATD_API_KEY=$(cat .data/api_key) \
//       node examples/node_stream.mjs
//
// It creates a chat with a first message, reads the chat's Server-Sent Events until the
// turn settles, prints the answer as it streams, and checks it against the transcript.

const BASE_URL = process.env.CHATD_BASE_URL ?? "http://127.0.0.1:8080";
const API_KEY = process.env.CHATD_API_KEY;
if (!API_KEY) throw new Error("set CHATD_API_KEY (chatd dev prints one)");
const API = `${BASE_URL}/api/v1`;
const HEADERS = { Authorization: `Bearer ${API_KEY}`, "content-type": "application/json" };

// Parse an SSE body into {id, event, data} objects. Events end with a blank line; lines
// starting with ":" are keep-alive comments.
async function* sseEvents(body) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields = {};
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        fields[line.slice(0, colon)] = line.slice(colon + 1).replace(/^ /, "");
      }
      if (fields.data !== undefined) {
        yield { id: Number(fields.id), event: fields.event, data: JSON.parse(fields.data) };
      }
    }
  }
}

async function main() {
  // 1. Create a chat with its first message: 201 with the chat (its turn starts at once).
  const created = await fetch(`${API}/chats`, {
    method: "POST",
    headers: HEADERS,
    body: JSON.stringify({ message: { content: "Hello from Node!" } }),
  });
  if (created.status !== 201) throw new Error(`create: ${created.status} ${await created.text()}`);
  const chat = await created.json();
  console.log(`chat ${chat.id}`);

  // 2. Stream its events from the first one (?after=0). A client that reconnects sends
  //    `Last-Event-ID: <last id>` instead, and gets each later event exactly once.
  const controller = new AbortController();
  const stream = await fetch(`${API}/chats/${chat.id}/stream?after=0`, {
    headers: HEADERS,
    signal: controller.signal,
  });
  if (!stream.ok) throw new Error(`stream: ${stream.status}`);

  let text = "";
  let status = null;
  for await (const { event, data } of sseEvents(stream.body)) {
    if (event === "message_part" && data.part.type === "text") {
      process.stdout.write(data.part.text);
      text += data.part.text;
    } else if (event === "reset") {
      text = ""; // a retried attempt follows: drop the draft
    } else if (event === "status" && ["waiting", "error", "requires_action"].includes(data.status)) {
      status = data.status;
      break;
    }
  }
  controller.abort(); // close the stream: we have what we came for
  process.stdout.write("\n");

  // 3. Check: the turn ended well and the streamed text is what the transcript holds.
  const { messages } = await (await fetch(`${API}/chats/${chat.id}/messages`, { headers: HEADERS })).json();
  const last = messages.filter((m) => m.role === "assistant").at(-1);
  const stored = last.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
  if (status !== "waiting") throw new Error(`the turn ended ${status}`);
  if (text !== stored) throw new Error(`streamed ${JSON.stringify(text)} but stored ${JSON.stringify(stored)}`);
  if (!text.includes("Hello from Node!")) throw new Error("the demo model should echo the message");
  console.log("OK");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

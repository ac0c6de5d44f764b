// A memoryd client written only from the AsyncAPI document (schemas/asyncapi.json): subjects
// come from its channel addresses, the de-duplication header from the event message's
// headers, the payload fields from the component schemas. Usage:
//   node client.mjs <nats url> <asyncapi.json> <tenant> <user> <other tenant>
// Prints one JSON line: what was published, the notification received, what recall returned,
// and the errors a bad request and a cross-tenant request got.
import { connect, headers, StringCodec } from "nats";
import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";

const [url, documentPath, tenant, user, otherTenant] = process.argv.slice(2);
const doc = JSON.parse(readFileSync(documentPath, "utf8"));
const codec = StringCodec();
const fill = (address, values) =>
  address.replace(/\{(\w+)\}/g, (_, name) => {
    if (!(name in values)) throw new Error(`no value for {${name}} in ${address}`);
    return values[name];
  });
const schemaOf = (messageName) => {
  const ref = doc.components.messages[messageName].payload.$ref;
  return doc.components.schemas[ref.split("/").pop()];
};
const checked = (messageName, payload) => {
  for (const field of schemaOf(messageName).required ?? []) {
    if (!(field in payload)) throw new Error(`${messageName} needs ${field}`);
  }
  return codec.encode(JSON.stringify(payload));
};

const nc = await connect({ servers: url });
const scope = { tenant, user_id: user };

// Receive notifications for the user (every kind).
const notifications = nc.subscribe(
  fill(doc.channels.notifications.address, { tenant, user, kind: "*" }),
);

// Publish a turn with its id as the de-duplication header the document names.
const eventType = "turn.recorded.v1";
const turn = {
  event_id: randomUUID(),
  type: eventType,
  occurred_at: new Date().toISOString(),
  scope,
  query: "My sister Ana lives in Porto and keeps three cats.",
  response: "Three cats, lovely!",
};
const msgIdHeader = doc.components.messages[eventType].headers.required[0];
const eventHeaders = headers();
eventHeaders.set(msgIdHeader, turn.event_id);
const subject = fill(doc.channels.events.address, {
  tenant,
  user,
  eventType: eventType.replaceAll(".", "_"),
});
const js = nc.jetstream();
const ack = await js.publish(subject, checked(eventType, turn), { headers: eventHeaders });
const again = await js.publish(subject, checked(eventType, turn), { headers: eventHeaders });

// Wait for the notification that the turn's page was added.
let notified = null;
const deadline = setTimeout(() => notifications.unsubscribe(), 60_000);
for await (const message of notifications) {
  const notification = JSON.parse(codec.decode(message.data));
  if (notification.event_id === turn.event_id && notification.kind === "page.added") {
    notified = notification.kind;
    break;
  }
}
clearTimeout(deadline);

// Recall, then a malformed request, then a request naming another tenant.
const recallSubject = fill(doc.channels.recall.address, { tenant });
const ask = async (payload) =>
  JSON.parse(codec.decode((await nc.request(recallSubject, payload, { timeout: 30_000 })).data));
const answer = await ask(checked("RecallRequest", { scope, query: "Where does Ana live?" }));
const bad = await ask(codec.encode('{"scope": {"tenant": "no.dots"}}'));
const foreign = await ask(
  checked("RecallRequest", { scope: { tenant: otherTenant, user_id: user }, query: "cats" }),
);

console.log(
  JSON.stringify({
    stored: ack.seq,
    duplicate: again.duplicate,
    notified,
    pages: (answer.pages ?? []).map((page) => page.query),
    context: answer.context,
    bad: bad.code,
    foreign: foreign.code,
  }),
);
await nc.drain();

// A LineUp App user driven by the official WuKongIM JS SDK (wukongimjssdk 1.0.4), for the tests.
//
//   node --import ./wk-register.mjs app.mjs <ws-url> <uid> <token> [options]
//     --content-type N    LineUp envelope content type (default 9527)
//     --agent UID         the agent's uid (for --hello and --answer-choice)
//     --hello             send device.hello to the agent once connected
//     --answer-choice N   answer every `choice` tool.call by picking option N
//
// stdout carries one JSON event per line: {"event":"status"|"message"|"sent"|"sendack"|"answered",...}.
// stdin takes one JSON command per line:
//   {"cmd":"send","channel":"agent","channelType":1,"envelope":{...}}   LineUp custom content
//   {"cmd":"text","channel":"agent","channelType":1,"text":"hi"}        built-in text (type 1)
//   {"cmd":"exit"}
// The SDK's own chatter goes to stderr.
import { createInterface } from 'node:readline';
import { randomUUID } from 'node:crypto';
import WKSDK from 'wukongimjssdk';
import { Channel, MessageContent, MessageText } from 'wukongimjssdk/lib/model.js';

console.log = (...args) => console.error(...args);

const [addr, uid, token, ...rest] = process.argv.slice(2);
const option = (name, fallback) => {
  const at = rest.indexOf(name);
  return at >= 0 ? rest[at + 1] : fallback;
};
const contentType = Number(option('--content-type', '9527'));
const agent = option('--agent', 'agent');
const answerChoice = option('--answer-choice', null);
const sayHello = rest.includes('--hello');
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

// LineUp envelopes as custom content: payload {"type": contentType, "envelope": {...}}.
class LineUpContent extends MessageContent {
  constructor(envelope) {
    super();
    this.envelope = envelope;
  }
  get contentType() {
    return contentType;
  }
  encodeJSON() {
    return { envelope: this.envelope };
  }
  decodeJSON(content) {
    this.envelope = content.envelope;
  }
}

const sdk = WKSDK.shared();
sdk.config.addr = addr;
sdk.config.uid = uid;
sdk.config.token = token;
sdk.register(contentType, () => new LineUpContent());

function envelope(type, payload, reply) {
  return {
    v: 1,
    id: `js_${randomUUID().replace(/-/g, '')}`,
    type: `lineup.v1.${type}`,
    conversation_id: reply ? reply.conversation_id : 'default',
    sender: { kind: 'device', id: `js-${uid}` },
    target: reply ? reply.sender : { kind: 'agent', id: agent },
    timestamp: new Date().toISOString(),
    payload,
  };
}

async function send(content, channel, channelType = 1) {
  const message = await sdk.chatManager.send(content, new Channel(channel, channelType));
  emit({ event: 'sent', clientSeq: message.clientSeq, clientMsgNo: message.clientMsgNo });
}

async function answer(call) {
  const { call_id: callId, name, arguments: args } = call.payload;
  if (name !== 'choice' || answerChoice === null) return;
  const index = Number(answerChoice);
  const result = { call_id: callId, name, status: 'completed', result: { selected: args.options[index], index } };
  await send(new LineUpContent(envelope('tool.ack', { call_id: callId, stage: 'waiting_user' }, call)), agent);
  await send(new LineUpContent(envelope('tool.result', result, call)), agent);
  emit({ event: 'answered', call_id: callId, index });
}

sdk.connectManager.addConnectStatusListener(async (status, reasonCode) => {
  emit({ event: 'status', status, reasonCode });
  if (status === 1 && sayHello) {
    await send(new LineUpContent(envelope('device.hello', { device_id: `js-${uid}`, app_version: 'wukongimjssdk-1.0.4' })), agent);
  }
});

sdk.chatManager.addMessageStatusListener((ack) => {
  emit({ event: 'sendack', clientSeq: ack.clientSeq, reasonCode: ack.reasonCode, messageID: String(ack.messageID) });
});

sdk.chatManager.addMessageListener(async (message) => {
  if (!message.messageID) return; // the SDK's local echo of our own send
  const content = message.content;
  emit({
    event: 'message',
    fromUID: message.fromUID,
    channelID: message.channel.channelID,
    channelType: message.channel.channelType,
    messageID: String(message.messageID),
    messageSeq: message.messageSeq,
    clientMsgNo: message.clientMsgNo,
    contentType: content.contentType,
    content: content.contentObj,
    text: content instanceof MessageText ? content.text : undefined, // as the SDK decoded a text message
  });
  const env = content instanceof LineUpContent ? content.envelope : null;
  if (env && env.type === 'lineup.v1.tool.call') await answer(env);
});

createInterface({ input: process.stdin }).on('line', async (line) => {
  if (!line.trim()) return;
  const command = JSON.parse(line);
  if (command.cmd === 'send') {
    await send(new LineUpContent(command.envelope), command.channel, command.channelType);
  } else if (command.cmd === 'text') {
    await send(new MessageText(command.text), command.channel, command.channelType);
  } else if (command.cmd === 'exit') {
    sdk.connectManager.disconnect();
    process.exit(0);
  }
});

sdk.connectManager.connect();

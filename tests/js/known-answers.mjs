// Prints known-answer vectors computed by the official SDK's own code (wukongimjssdk 1.0.4 and
// the crypto packages it uses), so tests/transports/test_wkproto.py can hold the Python codec
// to them. Run: node --import ./wk-register.mjs known-answers.mjs
import { generateKeyPair, sharedKey } from 'curve25519-js';
import { Md5 } from 'md5-typescript';
import { Buffer } from 'buffer';
import Proto, { ConnectPacket, RecvackPacket, SendPacket, Setting } from 'wukongimjssdk/lib/proto.js';
import { SecurityManager } from 'wukongimjssdk/lib/security.js';

const hex = (bytes) => Buffer.from(bytes).toString('hex');
// RFC 7748 section 6.1 private keys.
const clientPriv = Buffer.from('77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a', 'hex');
const serverPriv = Buffer.from('5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb', 'hex');
const client = generateKeyPair(clientPriv);
const server = generateKeyPair(serverPriv);
const clientKey = Buffer.from(client.public).toString('base64');
const serverKey = Buffer.from(server.public).toString('base64');
const shared = sharedKey(client.private, server.public);
const aesKey = Md5.init(Buffer.from(shared).toString('base64')).substring(0, 16);
const salt = 'abcdefghij012345';

const security = SecurityManager.shared();
security.aesKey = aesKey;
security.aesIV = salt;
const proto = new Proto();

const connect = new ConnectPacket();
connect.version = 2;
connect.deviceFlag = 1;
connect.deviceID = 'device1W';
connect.uid = 'app-user';
connect.token = 'tok';
connect.clientTimestamp = 1700000000123;
connect.clientKey = clientKey;

const payload = '{"type":1,"content":"预发布"}';
const send = new SendPacket();
send.setting = new Setting();
send.reddot = true;
send.clientSeq = 7;
send.clientMsgNo = 'cmn-1';
send.channelID = 'agent';
send.channelType = 1;
send.payload = Uint8Array.from(Buffer.from(payload));

const recvack = new RecvackPacket();
recvack.noPersist = false;
recvack.reddot = true;
recvack.syncOnce = false;
recvack.messageID = '1234567890123456789';
recvack.messageSeq = 42;

process.stdout.write(JSON.stringify({
  client_public_b64: clientKey,
  server_public_b64: serverKey,
  shared_hex: hex(shared),
  aes_key: aesKey,
  salt,
  aes_plain: payload,
  aes_cipher_b64: security.encryption(payload),
  connect_hex: hex(proto.encode(connect)),
  send_payload: payload,
  send_hex: hex(proto.encode(send)),
  recvack_hex: hex(proto.encode(recvack)),
}, null, 2) + '\n');

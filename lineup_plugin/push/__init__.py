"""Web Push: a waiting card reaches a locked phone (RFC 8030 delivery, RFC 8291 encryption, RFC 8292 VAPID).

* :mod:`.vapid` — the agent's signing key, kept in the data dir;
* :mod:`.message` — one push, sans I/O: the padded notice, sealing, headers, the service's answer;
* :mod:`.plan` — who is pushed for which card, and when, sans I/O;
* :mod:`.subscriptions` — the subscriptions the Apps sent, kept in the data dir;
* :mod:`.sender` — sending in the background with httpx (429 and 404/410 handled);
* :mod:`.service` — all of it for the serving hub;
* :mod:`.services` — the push services taken by default.

See docs/push.md for what each deployment gets and what a push service can see.
"""

"""Relay mode over WuKongIM: the binary protocol (:mod:`.proto`), the client connection
(:mod:`.client`) and the relay that bridges it to the hub (:mod:`.relay`)."""

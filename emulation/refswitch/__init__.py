"""The built-in dataplane: a user-space DLCP switch process (docs/pipeline.md), one per switch.

Modules: runtime (load sN-runtime.json), tables + pipeline (the P4 semantics, no sockets), hashing
(bmv2's crc16), queues (strict-priority egress queues and the link), afpacket (batched port
sockets), switch (the event loop, control socket, counters), counters, pcap, cli.
"""

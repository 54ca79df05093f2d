"""The bounded-loss protocol without I/O (sans-I/O, like h11 or aioquic's connection): sender and
receiver state machines that take events (a datagram, a control frame, a timer, a message to send)
with the current time and return what to do (data and PROBEs to transmit, control frames to write,
finished messages, record rows). They know nothing of sockets, threads or clocks, so the UDP driver,
the virtual-time network of the tests and a simulator drive the same code. Nothing in this package
may import socket, threading, time, select or os (tests/unit/test_layout.py checks)."""

"""Moving messages: the bounded-loss transport, the plain-TCP baseline, batched UDP I/O."""

"""The training iteration of a worker and of the parameter server, without I/O (docs/runs.md,
"The iteration core").

`WorkerCore` (worker_core.py) and `ServerCore` (server_core.py) decide what happens in an iteration
and in what order; they are fed events that carry the time (a gradient is ready, the compute is
over, the communication of the iteration is done, the workload finished a call) and answer with
actions (actions.py: start the compute, hand a message to the comm layer, wait for the aggregates,
apply them, evaluate, write a record row, report progress, start the next iteration at t). They
touch no socket, thread, clock or file. Two drivers run them: the agents' threads on the real
clock and transport (agents/worker.py, agents/ps.py) and ns-3's simulated-time events
(simulation/ns3/agents.py).
"""
